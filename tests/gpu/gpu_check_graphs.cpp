// CUDA graphs of the denoising step (RunnerOptions::cuda_graphs) against the same engine op by
// op: the golden fixtures' run settings, a greedy and a top-k one, batched in one engine each way, on
// a fixture's shape with head dims the one-launch attention kernel takes (64 / 128; the fixtures' 16 /
// 32 run the per-item path, which a graph cannot record) and dummy weights. The recorded
// step runs the same kernels on the same inputs (the op-by-op runner plans its attention for the same
// context: RunnerOptions::plan_context), so every step's trace and every output must be identical bit
// for bit; the batch shrinks as sequences finish, so the replays pad with idle canvases, and the
// top-k canvas and the commit steps run op by op in the recording engine too.
#include <memory>
#include <string>
#include <vector>

#include "gpu_check_fixtures.h"
#include "gpu_check_util.h"
#include "model/config.h"
#include "model/diffusion_gemma.h"
#include "model/weights.h"
#include "support/model_core.h"
#include "util/error.h"
#include "util/json.h"
#include "util/mmap_file.h"

namespace dgemma::gpu_test {
namespace {


std::vector<SequenceParams> fixture_runs(const std::string& fixture) {
  const Json manifest = parse_json(read_text_file(fixture_dir(fixture) + "/golden/manifest.json"), "manifest", true);
  std::vector<SequenceParams> runs;
  for (const auto& m : manifest["runs"]) {
    if (m["initial_canvas"].get<bool>()) continue;  // its canvas is a fixture file; the others cover the step
    runs.push_back(fixture_run_params(m));
  }
  SequenceParams greedy = runs.front();
  greedy.greedy = true;
  greedy.seed += 7;
  runs.push_back(greedy);
  SequenceParams top_k = runs.front();  // a filtered canvas: its steps run op by op
  top_k.filter.top_k = 5;
  top_k.seed += 11;
  runs.push_back(top_k);
  SequenceParams longer = runs.front();  // more canvases: commit steps among the replays
  longer.max_tokens = 3 * longer.max_tokens;
  longer.ignore_eos = true;
  longer.seed += 13;
  runs.push_back(longer);
  return runs;
}

struct Engine {
  std::unique_ptr<ModelCore> core;
  std::vector<std::unique_ptr<Sequence>> seqs;
};

Engine run_engine(DiffusionGemma& model, const std::vector<int32_t>& prompt, const std::vector<SequenceParams>& runs,
                  bool graphs, int64_t max_context, std::vector<int>* recorded) {
  Engine e;
  ModelCoreOptions o;
  o.max_num_seqs = static_cast<int>(runs.size());
  o.max_num_batched_tokens = static_cast<int64_t>(runs.size()) * (static_cast<int64_t>(prompt.size()) + 2 * model.config().canvas_length);
  o.kv_tokens = static_cast<int64_t>(runs.size()) * (static_cast<int64_t>(prompt.size()) + 8 * model.config().canvas_length);
  o.prefix_caching = false;
  o.runner.batch_buckets = engine_batch_buckets(o.max_num_seqs);
  o.runner.cuda_graphs = graphs;
  o.runner.plan_context = max_context;
  e.core = std::make_unique<ModelCore>(cuda(), model, o);
  if (graphs) *recorded = e.core->graph_batches();
  std::vector<Sequence*> all;
  for (size_t i = 0; i < runs.size(); ++i) {
    e.seqs.push_back(e.core->make_sequence(static_cast<uint64_t>(i + 1), prompt, runs[i]));
    all.push_back(e.seqs.back().get());
  }
  e.core->run(all, 10000);
  return e;
}

void graphs_vs_eager(Reporter& rep, const std::string& fixture) {
  const ModelConfig mc = recordable_config(fixture);
  DiffusionGemma model(mc, dummy_weights(mc, cuda(), 7), cuda());
  const std::vector<int32_t> prompt = fixture_ids(fixture, "prompt_ids");
  const std::vector<SequenceParams> runs = fixture_runs(fixture);
  const int64_t max_context = mc.text.max_position_embeddings;
  std::vector<int> recorded;
  Engine g = run_engine(model, prompt, runs, true, max_context, &recorded);
  Engine e = run_engine(model, prompt, runs, false, max_context, nullptr);
  if (recorded.empty()) rep.fail(fixture + ": no graph was recorded");
  const ModelCore& gr = *g.core;
  if (gr.graph_steps() == 0) rep.fail(fixture + ": no step replayed a graph");
  if (gr.eager_steps() == 0) rep.fail(fixture + ": no step ran op by op (prefill, commits, the top-k canvas)");
  if (e.core->graph_steps() != 0) rep.fail(fixture + ": the op-by-op engine replayed a graph");
  rep.note(fixture + ": " + std::to_string(gr.graph_steps()) + " steps replayed, " +
           std::to_string(gr.eager_steps()) + " op by op; the op-by-op engine " +
           std::to_string(e.core->eager_steps()) + " steps");
  for (size_t i = 0; i < runs.size(); ++i) {
    const std::string name = fixture + " run " + std::to_string(i);
    const Sequence& a = *g.seqs[i];
    const Sequence& b = *e.seqs[i];
    if (a.state != Sequence::State::kFinished || b.state != Sequence::State::kFinished) {
      rep.fail(name + ": did not finish");
      continue;
    }
    if (a.output() != b.output()) rep.fail(name + ": outputs differ");
    const auto ta = g.core->traces().canvases(static_cast<uint64_t>(i + 1));
    const auto tb = e.core->traces().canvases(static_cast<uint64_t>(i + 1));
    if (ta.size() != tb.size()) {
      rep.fail(name + ": canvas counts differ");
      continue;
    }
    int steps = 0;
    for (size_t k = 0; k < ta.size(); ++k) {
      if (ta[k].trace.size() != tb[k].trace.size()) {
        rep.fail(name + " canvas " + std::to_string(k) + ": step counts differ");
        continue;
      }
      for (size_t s = 0; s < ta[k].trace.size(); ++s, ++steps) {
        const StepRecord& x = ta[k].trace[s];
        const StepRecord& y = tb[k].trace[s];
        const std::string at = name + " canvas " + std::to_string(k) + " step " + std::to_string(s);
        if (x.canvas_in != y.canvas_in || x.argmax != y.argmax || x.sample != y.sample || x.canvas_out != y.canvas_out ||
            x.accept != y.accept || x.stop != y.stop)
          rep.fail(at + ": tokens or decisions differ");
        if (x.entropy != y.entropy || x.argmax_gap != y.argmax_gap || x.sample_gap != y.sample_gap)
          rep.fail(at + ": entropies or margins differ");
      }
    }
    rep.note(name + ": " + std::to_string(steps) + " steps identical, " + std::to_string(a.output().size()) + " tokens");
  }
}

}  // namespace

std::vector<Case> graph_cases() {
  return {
      {"graphs_vs_eager_tiny_a", [](Reporter& r) { graphs_vs_eager(r, "tiny_a"); }},
      {"graphs_vs_eager_tiny_b", [](Reporter& r) { graphs_vs_eager(r, "tiny_b"); }},
  };
}

}  // namespace dgemma::gpu_test
