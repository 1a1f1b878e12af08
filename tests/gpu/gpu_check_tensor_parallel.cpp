// Tensor parallelism on one GPU: N CUDA backends of the same device as the N ranks, joined by the
// one-device collective (backend/device_collective.h; NCCL refuses two ranks on one GPU).
//   tp_device_collective: its gathers and sums equal the thread collective's bit for bit (N = 2, 4).
//   tp_sharded_ops: the sharded embedding lookup and the block sums equal the CPU's bit for bit; the
//     ranks' block partials gathered and summed equal the one-GPU self-conditioning GEMM bit for bit
//     (the same per-block cuBLAS call on either side), also at the released model's vocabulary at
//     T = 256 and 4,096; the partials match the CPU's within GEMM noise.
//   tp_expert_parallel_moe: the MoE with each rank holding E / N experts equals the one-GPU MoE bit for
//     bit, under the automatic kernel choice, the small-rows kernel and the mma.sync tile kernel (same
//     routing, same per-expert GEMMs, the other ranks' slots -0, an exact sum).
//   tp_trajectory_*: whole seeded trajectories of the golden fixtures' models (two batched sequences,
//     one with pinned positions), -tp N against -tp 1, both on CUDA: every step's canvases, argmax,
//     samples, accept and stop decisions identical (token-exact), the entropies within the bound below.
//   tp_26b_shape: the same for a few steps of a model of the released 26B-A4B's widths (two layers,
//     one sliding and one full, dummy weights), N = 2 and 4.
//   tp_device_collective_graphs: every rank's gather and sums recorded (Collective::capture: the ranks
//     joined in one graph), replayed three times on new inputs written into the recorded buffers: every
//     replay equals the thread collective bit for bit.
//   tp_graphs_*: the engine at -tp N with CUDA graphs (every rank records its steps, collectives
//     inside) against -tp N op by op: every step's trace and every output identical bit for bit, as
//     graphs_vs_eager checks one GPU (the same head dims, 64 / 128, that the recordable attention
//     takes; dummy weights). That -tp N equals -tp 1 is the trajectory checks' claim (the fixtures'
//     own weights); with these dummy weights tiny_b's first step after a commit differs from -tp 1 by
//     |dH| 0.099 at a near-tied argmax (docs/BENCHMARKS.md "Correctness on the GPU").
// Where the ranks' linears are column slices, cuBLAS may pick another kernel for the narrower GEMM, so
// logits can differ from one GPU by bf16 rounding; the entropy of a row then moves by at most a few
// rounding steps of its logits: bound |dH| <= 0.02 + 1% (the CPU-vs-CUDA trajectory check allows 0.1 +
// 5% for whole different GEMMs). Decisions must be identical except at a near-tie of -tp 1's margins
// (gpu_check_util.h decision_diffs: with dummy weights at the 26B shape the logits of 262,144 tokens
// are nearly flat, and a flip within a few bf16 steps happens), where that sequence's comparison ends;
// the largest |dH| and every such divergence are printed.
#include <cmath>
#include <cstdio>
#include <cstring>
#include <memory>
#include <utility>
#include <vector>

#include "backend/device_collective.h"
#include "backend/thread_collective.h"
#include "collective_replay.h"
#include "gpu_check_fixtures.h"
#include "gpu_check_util.h"
#include "model/config.h"
#include "model/diffusion_gemma.h"
#include "model/tensor_parallel.h"
#include "model/weight_upload.h"
#include "model/weights.h"
#include "support/model_core.h"
#include "util/bf16.h"
#include "util/error.h"
#include "util/json.h"
#include "util/mmap_file.h"

namespace dgemma::gpu_test {
namespace {

std::vector<std::unique_ptr<Backend>> one_gpu_backends(int n, const CudaOptions& o) {
  std::vector<std::unique_ptr<Backend>> b;
  for (int k = 0; k < n; ++k) b.push_back(make_cuda_backend(0, o));
  return b;
}

std::vector<Backend*> pointers(const std::vector<std::unique_ptr<Backend>>& b) {
  std::vector<Backend*> p;
  for (const auto& x : b) p.push_back(x.get());
  return p;
}

std::vector<uint8_t> bytes_of(Backend& be, const Tensor& t) {
  std::vector<uint8_t> v(t.nbytes());
  if (t.device == Device::kCpu)
    std::memcpy(v.data(), t.data, v.size());
  else
    be.to_host(t, v.data());
  return v;
}

void check_device_collective(Reporter& r) {
  for (int n : {2, 4}) {
    auto owned = one_gpu_backends(n, current_options());
    auto group = make_device_group(pointers(owned));
    ThreadCollectiveGroup ref(n);
    Data data("tp_device_collective" + std::to_string(n));
    const int64_t rows = 37, cols = 24;
    std::vector<Tensor> in(n), bf(n), f(n), ints(n);
    for (int k = 0; k < n; ++k) {
      in[k] = data.bf16({rows, cols}, 1.0f);
      bf[k] = data.bf16({rows, cols}, 1.0f);
      f[k] = host_tensor(ScalarType::kF32, {rows, cols});
      ints[k] = host_tensor(ScalarType::kI32, {rows, cols});
      for (int64_t i = 0; i < rows * cols; ++i) {
        const bool mine = i % n == k;
        if (!mine) bf[k].ptr<uint16_t>()[i] = kBf16NegZero;
        f[k].ptr<float>()[i] = mine ? data.uniform(-3.0f, 3.0f) : -0.0f;
        ints[k].ptr<int32_t>()[i] = static_cast<int32_t>(data.integer(-1000, 1000));
      }
    }
    std::vector<std::vector<uint8_t>> want(n), got(n);
    each_rank(n, [&](int k) {
      Tensor g = host_tensor(ScalarType::kBF16, {rows, cols * n});
      ref.rank(k).all_gather_last(in[k], g);
      Tensor b = clone(bf[k]), x = clone(f[k]), i = clone(ints[k]);
      ref.rank(k).all_reduce_sum(b);
      ref.rank(k).all_reduce_sum(x);
      ref.rank(k).all_reduce_sum(i);
      for (const Tensor* t : {&g, &b, &x, &i}) {
        const auto v = bytes_of(*owned[k], *t);
        want[k].insert(want[k].end(), v.begin(), v.end());
      }
    });
    each_rank(n, [&](int k) {
      Backend& be = *owned[k];
      Tensor g = be.alloc(ScalarType::kBF16, {rows, cols * n});
      group->rank(k).all_gather_last(be.upload(in[k]), g);
      Tensor b = be.upload(bf[k]), x = be.upload(f[k]), i = be.upload(ints[k]);
      group->rank(k).all_reduce_sum(b);
      group->rank(k).all_reduce_sum(x);
      group->rank(k).all_reduce_sum(i);
      group->rank(k).barrier();
      for (const Tensor* t : {&g, &b, &x, &i}) {
        const auto v = bytes_of(be, *t);
        got[k].insert(got[k].end(), v.begin(), v.end());
      }
    });
    for (int k = 0; k < n; ++k)
      if (got[k] != want[k])
        r.fail("one-device collective N=" + std::to_string(n) + " rank " + std::to_string(k) +
               ": differs from the thread collective");
    r.note("one-device collective N=" + std::to_string(n) + ": gathers and bf16 / f32 / i32 sums checked");
  }
}

void check_device_collective_graphs(Reporter& r) {
  for (int n : {2, 4}) {
    auto owned = one_gpu_backends(n, current_options());
    auto group = make_device_group(pointers(owned));
    const int compared = check_recorded_collectives(r, "one-device collective N=" + std::to_string(n), *group,
                                                    pointers(owned));
    r.note("one-device collective N=" + std::to_string(n) + ": " + std::to_string(compared) +
           " rank replays of a recorded gather and bf16 / f32 sums compared bitwise");
  }
}

// Columns [first, first + count) of the row-major bf16 [T, V] x: a rank's share of the vocabulary.
Tensor column_slice(const uint16_t* x, int64_t T, int64_t V, int64_t first, int64_t count) {
  Tensor out = host_tensor(ScalarType::kBF16, {T, count});
  for (int64_t t = 0; t < T; ++t)
    std::memcpy(out.ptr<uint16_t>() + t * count, x + t * V + first, static_cast<size_t>(count) * 2);
  return out;
}

void check_sharded_ops(Reporter& r) {
  Backend& be = cuda();
  Data data("tp_sharded_ops");
  const int64_t T = 40, V = 1024, H = 96;
  const Tensor x = data.bf16({T, V}, 0.05f), w = data.bf16({V, H}, 0.5f);
  std::vector<int32_t> idv;
  for (int64_t t = 0; t < T; ++t) idv.push_back(static_cast<int32_t>(data.integer(0, V - 1)));
  const Tensor ids = host_i32(idv);
  // The one-GPU GEMM (blocked, backend.h kVocabBlocks).
  Tensor one = be.alloc(ScalarType::kBF16, {T, H});
  be.matmul_kn(up(x), up(w), one);
  const std::vector<uint16_t> want = u16(one);
  for (int n : {2, 4, 8}) {
    const int64_t Vr = V / n;
    const int blocks = kVocabBlocks / n;
    Tensor all = host_tensor(ScalarType::kF32, {kVocabBlocks, T, H});
    for (int k = 0; k < n; ++k) {
      // The rank's columns of x (contiguous) and rows of w.
      const Tensor xr = column_slice(x.ptr<uint16_t>(), T, V, k * Vr, Vr);
      const Tensor wr = w.rows(k * Vr, (k + 1) * Vr);
      Tensor part = be.alloc(ScalarType::kF32, {blocks, T, H});
      be.matmul_kn_blocks(up(xr), up(clone(wr)), blocks, part);
      const std::vector<float> p = f32(part);
      Tensor cpu_part = host_tensor(ScalarType::kF32, {blocks, T, H});
      cpu().matmul_kn_blocks(xr, clone(wr), blocks, cpu_part);
      expect_f32(r, "matmul_kn_blocks vs CPU (N=" + std::to_string(n) + ")", p,
                 std::vector<float>(cpu_part.ptr<float>(), cpu_part.ptr<float>() + cpu_part.numel()), 1e-5,
                 1e-4);
      // Rank k's blocks are blocks [k blocks, (k + 1) blocks) of the whole vocabulary's, block-major.
      std::memcpy(all.ptr<float>() + k * blocks * T * H, p.data(), p.size() * sizeof(float));
      // The sharded lookup: the rank's rows, -0 elsewhere.
      Tensor e_gpu = be.alloc(ScalarType::kBF16, {T, H}), e_cpu = host_tensor(ScalarType::kBF16, {T, H});
      be.embed_shard(up(ids), up(clone(wr)), k * Vr, V, 3.5f, e_gpu);
      cpu().embed_shard(ids, clone(wr), k * Vr, V, 3.5f, e_cpu);
      if (u16(e_gpu) != u16(e_cpu))
        r.fail("embed_shard N=" + std::to_string(n) + " rank " + std::to_string(k) + " differs from the CPU");
    }
    Tensor sum = be.alloc(ScalarType::kBF16, {T, H}), cpu_sum = host_tensor(ScalarType::kBF16, {T, H});
    be.sum_blocks(up(all), sum);
    cpu().sum_blocks(all, cpu_sum);
    if (u16(sum) != u16(cpu_sum)) r.fail("sum_blocks differs from the CPU's (N=" + std::to_string(n) + ")");
    if (u16(sum) != want)
      r.fail("the ranks' block partials summed differ from the one-GPU matmul_kn (N=" + std::to_string(n) +
             ")");
  }
  // The released model's vocabulary and width, at batch 1 and 16 (the shapes whose cuBLAS kernels the
  // step takes; a rank's x rows are narrower than one GPU's): every rank's partials equal the one GPU's
  // blocks bit for bit.
  const int64_t V26 = 262144, H26 = 2816;
  Tensor w26 = be.alloc(ScalarType::kBF16, {V26, H26});
  be.fill_normal(w26, 11, 0.0f, 0.5f);
  for (const int64_t T26 : {int64_t{256}, int64_t{4096}}) {
    Tensor x26 = be.alloc(ScalarType::kBF16, {T26, V26});
    be.fill_normal(x26, 12 + static_cast<uint64_t>(T26), 4e-6f, 1e-6f);
    Tensor whole = be.alloc(ScalarType::kF32, {kVocabBlocks, T26, H26});
    be.matmul_kn_blocks(x26, w26, kVocabBlocks, whole);
    const std::vector<float> one_gpu = f32(whole);
    const std::vector<uint16_t> xh = u16(x26);
    for (int n : {2, 4, 8}) {
      const int64_t Vr = V26 / n, per = static_cast<int64_t>(kVocabBlocks / n) * T26 * H26;
      int differing = 0;
      for (int k = 0; k < n; ++k) {
        Tensor part = be.alloc(ScalarType::kF32, {kVocabBlocks / n, T26, H26});
        be.matmul_kn_blocks(up(column_slice(xh.data(), T26, V26, k * Vr, Vr)), w26.rows(k * Vr, (k + 1) * Vr),
                            kVocabBlocks / n, part);
        const std::vector<float> p = f32(part);
        if (std::memcmp(p.data(), one_gpu.data() + k * per, static_cast<size_t>(per) * sizeof(float)) != 0)
          ++differing;
      }
      if (differing > 0)
        r.fail("26B vocabulary T=" + std::to_string(T26) + " N=" + std::to_string(n) + ": " +
               std::to_string(differing) + " ranks' block partials differ from the one GPU's");
      else
        r.note("26B vocabulary T=" + std::to_string(T26) + " N=" + std::to_string(n) +
               ": every rank's block partials equal the one GPU's bit for bit");
    }
  }
}

void check_expert_parallel_moe(Reporter& r) {
  Data data("tp_expert_parallel_moe");
  const int64_t T = 256, H = 256, I = 128, E = 16, K = 4;  // 64 rows an expert: tile kernels under auto
  const Tensor router_in = data.bf16({T, H}, 1.0f), expert_in = data.bf16({T, H}, 1.0f);
  const Tensor router_scale = data.bf16({H}, 0.2f, 1.0f), router_proj = data.bf16({E, H}, 0.5f);
  const Tensor pes = data.bf16({E}, 0.1f, 1.0f);
  const Tensor gate_up = data.bf16({E, 2 * I, H}, 0.06f), down = data.bf16({E, H, I}, 0.09f);
  for (MoeKernel kernel : {MoeKernel::kAuto, MoeKernel::kSmallRows, MoeKernel::kMmaSync128x128}) {
    const CudaOptions o = options_with([&](CudaOptions& c) { c.moe = kernel; });
    const std::string which = kernel == MoeKernel::kAuto        ? "auto kernel"
                              : kernel == MoeKernel::kSmallRows ? "small-rows kernel"
                                                                : "mma.sync tile kernel";
    auto args = [&](Backend& be, int64_t e0, int64_t e1) {
      MoeArgs a;
      a.router_in = be.upload(router_in);
      a.expert_in = be.upload(expert_in);
      a.router_scale = be.upload(router_scale);
      a.router_proj = be.upload(router_proj);
      a.per_expert_scale = be.upload(pes);
      a.gate_up = be.upload_weight(Weight(clone(gate_up.rows(e0, e1))));
      a.down = be.upload_weight(Weight(clone(down.rows(e0, e1))));
      a.top_k = static_cast<int>(K);
      a.out = be.alloc(ScalarType::kBF16, {T, H});
      a.expert_first = e0;
      return a;
    };
    auto ref_be = make_cuda_backend(0, o);
    MoeArgs ra = args(*ref_be, 0, E);
    ref_be->moe(ra);
    std::vector<uint16_t> want(static_cast<size_t>(T * H));
    ref_be->to_host(ra.out, want.data());
    for (int n : {2, 4}) {
      auto owned = one_gpu_backends(n, o);
      auto group = make_device_group(pointers(owned));
      std::vector<std::vector<uint16_t>> got(n, std::vector<uint16_t>(static_cast<size_t>(T * H)));
      each_rank(n, [&](int k) {
        Backend& be = *owned[k];
        MoeArgs a = args(be, k * E / n, (k + 1) * E / n);
        a.collective = &group->rank(k);
        be.moe(a);
        be.to_host(a.out, got[k].data());
      });
      for (int k = 0; k < n; ++k)
        if (got[k] != want)
          r.fail("expert-parallel MoE (" + which + ") N=" + std::to_string(n) + " rank " + std::to_string(k) +
                 " differs from the one-GPU MoE");
    }
  }
}

// ---- trajectories ------------------------------------------------------------------------------------

// The sequences (prompt, params) through `core`, ids 1, 2, ...; returned as they ended (a run that
// throws leaves them unfinished: the checks report from their states).
std::vector<std::unique_ptr<Sequence>> run_sequences(
    ModelCore& core, const std::vector<std::pair<std::vector<int32_t>, SequenceParams>>& runs) {
  std::vector<std::unique_ptr<Sequence>> seqs;
  std::vector<Sequence*> all;
  for (const auto& [prompt, params] : runs) {
    seqs.push_back(core.make_sequence(seqs.size() + 1, prompt, params));
    all.push_back(seqs.back().get());
  }
  try {
    core.run(all, 10000);
  } catch (const Error&) {
    // Reported from the sequences' states.
  }
  return seqs;
}

struct Compared {
  int steps = 0;
  double max_dh = 0;
  std::vector<std::string> divergences;  // where a sequence's comparison ended at a near-tie
};

// Sequence `sb` (-tp N) against `sa` (-tp 1), step by step. A decision that differs ends the sequence's
// comparison when every difference of the step is a near-tie of -tp 1's margins (decision_diffs), and
// fails otherwise; until then everything must be identical and the entropies within the bound above.
void compare_traces(Reporter& r, const std::string& name, const SequenceParams& p, ModelCore& a,
                    const Sequence& sa, ModelCore& b, const Sequence& sb, Compared& c) {
  if (sa.state != Sequence::State::kFinished || sb.state != Sequence::State::kFinished) {
    r.fail(name + ": a trajectory did not finish");
    return;
  }
  const auto wa = a.traces().canvases(sa.id()), wb = b.traces().canvases(sb.id());
  std::string divergence;
  for (size_t k = 0; k < wa.size() && divergence.empty(); ++k) {
    if (k >= wb.size()) {
      r.fail(name + ": -tp N committed fewer canvases without a near-tie");
      return;
    }
    for (size_t s = 0; s < wa[k].trace.size() && divergence.empty(); ++s, ++c.steps) {
      const std::string at = name + " canvas " + std::to_string(k) + " step " + std::to_string(s);
      if (s >= wb[k].trace.size()) {
        r.fail(at + ": -tp N stopped earlier without a near-tie");
        return;
      }
      const StepRecord &x = wa[k].trace[s], &y = wb[k].trace[s];
      if (x.canvas_in != y.canvas_in) {
        r.fail(at + ": input canvases differ without a near-tie");
        return;
      }
      for (size_t i = 0; i < x.entropy.size(); ++i) {
        const double d = std::fabs(static_cast<double>(x.entropy[i]) - y.entropy[i]);
        c.max_dh = std::max(c.max_dh, d);
        if (d > 0.02 + 0.01 * std::fabs(x.entropy[i])) {
          r.fail(at + ": entropy at " + std::to_string(i) + " moved by " + fmt_double(d));
          break;
        }
      }
      const std::vector<DecisionDiff> diffs = decision_diffs(x, y);
      if (diffs.empty() && x.stop == y.stop) {
        if (x.canvas_out != y.canvas_out) r.fail(at + ": renoised canvases differ");
        continue;
      }
      std::string what;
      for (const DecisionDiff& d : diffs) {
        if (!d.near_tie) r.fail(at + ": " + describe(d) + " differs from -tp 1 without a near-tie");
        what += (what.empty() ? "" : ", ") + describe(d);
      }
      if (x.stop != y.stop) {
        if (!stop_difference_explained(x, y, p.diffusion.confidence_threshold))
          r.fail(at + ": the stop decision differs from -tp 1 without a near-tie");
        what += std::string(what.empty() ? "" : ", ") + "stop";
      }
      divergence = at + " (" + what + ")";
    }
  }
  if (!divergence.empty()) {
    c.divergences.push_back(divergence);
    return;
  }
  if (sa.output() != sb.output()) r.fail(name + ": outputs differ although every step matched");
  if (wa.size() != wb.size()) r.fail(name + ": canvas counts differ");
  for (size_t k = 0; k < std::min(wa.size(), wb.size()); ++k)
    if (wa[k].committed != wb[k].committed)
      r.fail(name + ": canvas " + std::to_string(k) + " committed differs");
}

// Two batched seeded sequences (the second shorter, with pinned positions unless guided) through -tp 1
// and -tp n.
void compare_models(Reporter& r, const std::string& name, const ModelConfig& mc, const ModelWeights& host,
                    int n, const SequenceParams& p, const std::vector<int32_t>& prompt) {
  auto one_be = make_cuda_backend(0, current_options());
  DiffusionGemma one(mc, upload_model_weights(host, *one_be), *one_be);
  auto owned = one_gpu_backends(n, current_options());
  auto group = make_device_group(pointers(owned));
  auto tp = TensorParallelModel::upload(mc, host, std::move(owned), std::move(group));
  const std::vector<int32_t> shorter(prompt.begin(),
                                     prompt.begin() + static_cast<long>(prompt.size() / 2 + 1));
  SequenceParams b = p;
  b.seed = p.seed + 101;
  if (!p.guided) b.pins = {PinnedSpan{3, {5, 6, 7}}};
  auto run = [&](ModelCore& core) { return run_sequences(core, {{prompt, p}, {shorter, b}}); };
  ModelCore ref(*one_be, one), sharded(*tp);
  const auto want = run(ref);
  const auto got = run(sharded);
  Compared c;
  for (size_t i = 0; i < want.size(); ++i)
    compare_traces(r, name + " sequence " + std::to_string(i + 1), p, ref, *want[i], sharded, *got[i], c);
  if (c.steps < 2) r.fail(name + ": fewer than 2 traced steps compared");
  std::string ties;
  for (const std::string& d : c.divergences) ties += "; near-tie divergence at " + d;
  r.note(name + ": " + std::to_string(c.steps) + " traced steps token-exact against -tp 1, max |dH| " +
         fmt_double(c.max_dh) + ties);
}

// The fixture's first golden run (two canvases) at -tp n against -tp 1; `guided`: with a guided answer
// (docs/API.md "Guided decoding on the canvas"): every rank's sampler masks the gathered vocabulary by
// global token id and walks the gap as -tp 1 does; every position passes the entropy bound, so the walk
// alone decides what is kept.
void check_fixture(Reporter& r, const std::string& fixture, int n, bool guided = false) {
  const std::string dir = fixture_dir(fixture) + "/model";
  const ModelConfig mc = load_model_config(dir);
  auto loader = make_cpu_backend();
  const ModelWeights host = load_weights(mc, dir, *loader);
  const Json manifest =
      parse_json(read_text_file(fixture_dir(fixture) + "/golden/manifest.json"), "manifest", true);
  SequenceParams p = fixture_run_params(manifest["runs"][0]);
  p.max_tokens = 2 * mc.canvas_length;
  if (guided) {
    p.diffusion.entropy_bound = 1e6;
    p.guided = fixture_guided_answer(static_cast<int>(mc.text.vocab_size), p,
                                     guided::ConstraintSpec::regex("[ab ]+(x[0-9]+)?"));
  }
  compare_models(r, fixture + (guided ? " guided tp" : " tp") + std::to_string(n), mc, host, n, p,
                 fixture_ids(fixture, "prompt_ids"));
}

// The released 26B-A4B's widths (hidden 2816, 16 query heads, 8 / 2 KV heads of 256 / 512, 128 experts
// top-8 of 704, dense 2112, vocabulary 262144, canvas 256) with one sliding and one full layer.
ModelConfig config_26b_shape() {
  Json j = parse_json(read_text_file(fixture_dir("tiny_a") + "/model/config.json"), "config", true);
  j.erase("vision_config");
  j["canvas_length"] = 256;
  Json& t = j["text_config"];
  t["vocab_size"] = 262144;
  t["hidden_size"] = 2816;
  t["intermediate_size"] = 2112;
  t["num_hidden_layers"] = 2;
  t["num_attention_heads"] = 16;
  t["num_key_value_heads"] = 8;
  t["head_dim"] = 256;
  t["global_head_dim"] = 512;
  t["num_global_key_value_heads"] = 2;
  t["sliding_window"] = 1024;
  t["num_experts"] = 128;
  t["top_k_experts"] = 8;
  t["moe_intermediate_size"] = 704;
  t["layer_types"] = Json::array({"sliding_attention", "full_attention"});
  return parse_model_config(j, "the 26B-A4B shape");
}

// Two seeded sequences of the fixture's first run (the second longer, with commits among its steps).
std::vector<std::unique_ptr<Sequence>> run_two(ModelCore& core, const std::vector<int32_t>& prompt,
                                               const SequenceParams& p) {
  SequenceParams b = p;
  b.seed = p.seed + 101;
  b.max_tokens = 3 * p.max_tokens;
  b.ignore_eos = true;
  return run_sequences(core, {{prompt, p}, {prompt, b}});
}

void check_graphs(Reporter& r, const std::string& fixture, int n) {
  const ModelConfig mc = recordable_config(fixture);
  auto loader = make_cpu_backend();
  const ModelWeights host = dummy_weights(mc, *loader, 7);
  const std::vector<int32_t> prompt = fixture_ids(fixture, "prompt_ids");
  const Json manifest =
      parse_json(read_text_file(fixture_dir(fixture) + "/golden/manifest.json"), "manifest", true);
  const SequenceParams p = fixture_run_params(manifest["runs"][0]);
  const std::string name = fixture + " tp" + std::to_string(n);
  auto options = [&](bool graphs) {
    ModelCoreOptions o;
    o.max_num_seqs = 2;
    o.max_num_batched_tokens = 2 * (static_cast<int64_t>(prompt.size()) + 2 * mc.canvas_length);
    o.kv_tokens = 2 * (static_cast<int64_t>(prompt.size()) + 8 * mc.canvas_length);
    o.prefix_caching = false;
    o.runner.batch_buckets = engine_batch_buckets(o.max_num_seqs);
    o.runner.cuda_graphs = graphs;
    o.runner.plan_context = mc.text.max_position_embeddings;  // the recorded steps' attention plans
    return o;
  };
  auto make_tp = [&] {
    auto owned = one_gpu_backends(n, current_options());
    auto group = make_device_group(pointers(owned));
    return TensorParallelModel::upload(mc, host, std::move(owned), std::move(group));
  };
  auto tp_graphs = make_tp(), tp_eager = make_tp();
  ModelCore graphed(*tp_graphs, options(true)), eager(*tp_eager, options(false));
  const auto a = run_two(graphed, prompt, p);
  const auto b = run_two(eager, prompt, p);
  if (graphed.graph_steps() == 0) r.fail(name + ": no step replayed a graph");
  if (eager.graph_steps() != 0) r.fail(name + ": the op-by-op engine replayed a graph");
  int steps = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    const std::string at = name + " sequence " + std::to_string(i + 1);
    if (a[i]->state != Sequence::State::kFinished || b[i]->state != Sequence::State::kFinished) {
      r.fail(at + ": did not finish");
      continue;
    }
    if (a[i]->output() != b[i]->output()) r.fail(at + ": outputs differ between graphs and op by op");
    const auto ta = graphed.traces().canvases(a[i]->id()), tb = eager.traces().canvases(b[i]->id());
    if (ta.size() != tb.size()) {
      r.fail(at + ": canvas counts differ between graphs and op by op");
      continue;
    }
    for (size_t k = 0; k < ta.size(); ++k) {
      if (ta[k].trace.size() != tb[k].trace.size()) {
        r.fail(at + " canvas " + std::to_string(k) + ": step counts differ");
        continue;
      }
      for (size_t s = 0; s < ta[k].trace.size(); ++s, ++steps) {
        const StepRecord &x = ta[k].trace[s], &y = tb[k].trace[s];
        if (x.canvas_in != y.canvas_in || x.argmax != y.argmax || x.sample != y.sample ||
            x.canvas_out != y.canvas_out || x.accept != y.accept || x.stop != y.stop ||
            x.entropy != y.entropy || x.argmax_gap != y.argmax_gap || x.sample_gap != y.sample_gap)
          r.fail(at + " canvas " + std::to_string(k) + " step " + std::to_string(s) +
                 ": differs between graphs and op by op");
      }
    }
  }
  if (steps == 0) r.fail(name + ": no traced step compared");
  r.note(name + ": " + std::to_string(graphed.graph_steps()) + " steps replayed, " +
         std::to_string(graphed.eager_steps()) + " op by op; " + std::to_string(steps) +
         " traced steps identical to -tp " + std::to_string(n) + " op by op");
}

void check_26b_shape(Reporter& r) {
  const ModelConfig mc = config_26b_shape();
  auto loader = make_cpu_backend();
  const ModelWeights host =
      dummy_weights(mc, *loader, 11, WeightLoadOptions{false, true});  // once for N = 2, 4
  SequenceParams p;
  p.max_tokens = mc.canvas_length;
  p.diffusion.max_denoising_steps = 4;
  p.seed = 7;
  p.trace = true;
  std::vector<int32_t> prompt;
  for (int i = 0; i < 120; ++i) prompt.push_back(2 + (i * 7919) % 262000);
  for (int n : {2, 4}) compare_models(r, "26B shape tp" + std::to_string(n), mc, host, n, p, prompt);
}

}  // namespace

std::vector<Case> tensor_parallel_cases() {
  return {
      {"tp_device_collective", check_device_collective},
      {"tp_sharded_ops", check_sharded_ops},
      {"tp_expert_parallel_moe", check_expert_parallel_moe},
      {"tp_trajectory_tiny_a_tp2", [](Reporter& r) { check_fixture(r, "tiny_a", 2); }},
      {"tp_trajectory_tiny_a_tp4", [](Reporter& r) { check_fixture(r, "tiny_a", 4); }},
      {"tp_trajectory_tiny_b_tp2", [](Reporter& r) { check_fixture(r, "tiny_b", 2); }},
      {"tp_guided_trajectory_tiny_a_tp2", [](Reporter& r) { check_fixture(r, "tiny_a", 2, true); }},
      {"tp_26b_shape", check_26b_shape},
      {"tp_device_collective_graphs", check_device_collective_graphs},
      {"tp_graphs_tiny_a_tp2", [](Reporter& r) { check_graphs(r, "tiny_a", 2); }},
      {"tp_graphs_tiny_a_tp4", [](Reporter& r) { check_graphs(r, "tiny_a", 4); }},
      {"tp_graphs_tiny_b_tp2", [](Reporter& r) { check_graphs(r, "tiny_b", 2); }},
  };
}

}  // namespace dgemma::gpu_test
