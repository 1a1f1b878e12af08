#include "gpu_check_fixtures.h"

#include <algorithm>
#include <random>

#include "engine/guided_answer.h"
#include "util/npy.h"

namespace dgemma::gpu_test {

std::string fixture_dir(const std::string& name) { return std::string(DGEMMA_SOURCE_DIR) + "/tests/fixtures/" + name; }

ModelConfig recordable_config(const std::string& fixture) {
  ModelConfig mc = load_model_config(fixture_dir(fixture) + "/model");
  mc.text.head_dim = 64;
  mc.text.global_head_dim = 128;
  for (LayerSpec& L : mc.text.layers) L.head_dim = L.type == LayerType::kSliding ? 64 : 128;
  return mc;
}

std::vector<int32_t> fixture_ids(const std::string& fixture, const std::string& key) {
  std::vector<int32_t> out;
  for (int64_t v : read_npy(fixture_dir(fixture) + "/golden/" + key + ".npy").as_int()) out.push_back(static_cast<int32_t>(v));
  return out;
}

SequenceParams fixture_run_params(const Json& m) {
  SequenceParams p;
  p.diffusion.max_denoising_steps = m["max_denoising_steps"].get<int>();
  p.diffusion.entropy_bound = m["entropy_bound"].get<double>();
  p.diffusion.t_min = m["t_min"].get<double>();
  p.diffusion.t_max = m["t_max"].get<double>();
  p.diffusion.stability_threshold = m["stability_threshold"].get<int>();
  p.diffusion.confidence_threshold = m["confidence_threshold"].get<double>();
  p.seed = m["seed"].get<uint64_t>();
  p.max_tokens = m["max_new_tokens"].get<int64_t>();
  p.eos_ids = {1, 106, 50};
  p.trace = true;
  return p;
}

std::shared_ptr<const GuidedAnswer> fixture_guided_answer(int vocab_size, const SequenceParams& p,
                                                          const guided::ConstraintSpec& spec) {
  const std::string chars = "ab{}[]\":, -0123456789xy";
  std::mt19937_64 rng(7);
  std::vector<std::string> pieces;
  std::vector<guided::TokenKind> kinds;
  for (int id = 0; id < vocab_size; ++id) {
    const bool filler =
        id == p.pad_id || std::find(p.eos_ids.begin(), p.eos_ids.end(), id) != p.eos_ids.end();
    std::string piece;
    if (!filler && id != 2) {
      const size_t k = static_cast<size_t>(id) % (2 * chars.size());
      if (k < chars.size()) {
        piece = std::string(1, chars[k]);
      } else {
        for (uint64_t i = 0, n = 1 + rng() % 3; i < n; ++i) piece += chars[rng() % chars.size()];
      }
    }
    pieces.push_back(piece);
    kinds.push_back(filler    ? guided::TokenKind::kFiller
                    : id == 2 ? guided::TokenKind::kNever
                              : guided::TokenKind::kText);
  }
  auto g = std::make_shared<GuidedAnswer>();
  g->constraint = guided::compile_for_vocabulary(spec, guided::TokenVocabulary::from_pieces(pieces, kinds));
  g->begin = 0;
  g->end = p.max_tokens;
  validate_guided_answer(*g, p.pins, p.max_tokens, vocab_size);
  return g;
}

}  // namespace dgemma::gpu_test
