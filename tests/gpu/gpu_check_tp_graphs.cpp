// CUDA graphs at tensor parallelism on one GPU: N CUDA backends of the same device as the N ranks,
// joined by the one-device collective (backend/device_collective.h), every rank recording its own steps.
//   tp_graphs_*: CUDA graphs at -tp N (a fixture's shape with the head dims the one-launch attention takes,
//     64 / 128, and dummy weights, as graphs_vs_eager): every rank records its denoising steps with the
//     collectives inside and replays them. Several batched runs (the batch shrinks, so replays pad with
//     idle canvases; a longer run puts commit steps among the replays): against -tp N op by op identical
//     bit for bit (every trace field, entropies and margins included: the same kernels on the same
//     inputs), against -tp 1 with graphs token-exact within the entropy bound of compare_traces.
//   tp_graph_collective: the one-device collective recorded by two ranks and replayed (new inputs at every
//     replay, an op-by-op sum between replays) gives the exact sums and gathers each time; a rank that
//     replays alone (the other never arrives) fails at its next synchronisation with the timeout error,
//     within a bound; abort() ends a wait that has no timeout; reset() makes the group usable again.
#include <chrono>
#include <cstring>
#include <memory>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "backend/device_collective.h"
#include "backend/thread_collective.h"
#include "gpu_check_fixtures.h"
#include "gpu_check_util.h"
#include "model/config.h"
#include "model/diffusion_gemma.h"
#include "model/tensor_parallel.h"
#include "model/weight_upload.h"
#include "model/weights.h"
#include "support/model_core.h"
#include "tp_check_util.h"
#include "util/error.h"
#include "util/json.h"
#include "util/mmap_file.h"

namespace dgemma::gpu_test {
namespace {

// The fixture's model with the head dims the one-launch attention kernel takes (a graph cannot record
// the per-item path the fixtures' 16 / 32 run).
ModelConfig graph_shape(const std::string& fixture) {
  ModelConfig mc = load_model_config(fixture_dir(fixture) + "/model");
  mc.text.head_dim = 64;
  mc.text.global_head_dim = 128;
  for (LayerSpec& L : mc.text.layers) L.head_dim = L.type == LayerType::kSliding ? 64 : 128;
  return mc;
}

struct GraphRun {
  std::unique_ptr<ModelCore> core;
  std::vector<std::unique_ptr<Sequence>> seqs;
};

void check_graphs(Reporter& r, const std::string& fixture, int n) {
  const ModelConfig mc = graph_shape(fixture);
  auto loader = make_cpu_backend();
  const ModelWeights host = dummy_weights(mc, *loader, 7);
  const std::vector<int32_t> prompt = fixture_ids(fixture, "prompt_ids");
  const Json manifest =
      parse_json(read_text_file(fixture_dir(fixture) + "/golden/manifest.json"), "manifest", true);
  std::vector<SequenceParams> runs(4, fixture_run_params(manifest["runs"][0]));
  runs[1].seed += 101;
  runs[2].greedy = true;
  runs[2].seed += 7;
  runs[3].max_tokens *= 3;  // more canvases: commit steps among the replays
  runs[3].ignore_eos = true;
  runs[3].seed += 13;
  const int64_t C = mc.canvas_length, P = static_cast<int64_t>(prompt.size()), R = 4;
  auto options = [&](bool graphs) {
    ModelCoreOptions o;
    o.max_num_seqs = static_cast<int>(R);
    o.max_num_batched_tokens = R * (P + 2 * C);
    o.kv_tokens = R * (P + 8 * C);
    o.prefix_caching = false;
    o.runner.batch_buckets = engine_batch_buckets(o.max_num_seqs);
    o.runner.cuda_graphs = graphs;
    o.runner.plan_context = mc.text.max_position_embeddings;  // the op-by-op steps plan as the recorded
    return o;
  };
  auto generate = [&](std::unique_ptr<ModelCore> core) {
    GraphRun g;
    g.core = std::move(core);
    std::vector<Sequence*> all;
    for (size_t i = 0; i < runs.size(); ++i) {
      g.seqs.push_back(g.core->make_sequence(i + 1, prompt, runs[i]));
      all.push_back(g.seqs.back().get());
    }
    try {
      g.core->run(all, 10000);
    } catch (const Error&) {
      // Reported by compare_traces from the sequences' states.
    }
    return g;
  };
  auto one_be = make_cuda_backend(0, current_options());
  DiffusionGemma one(mc, upload_model_weights(host, *one_be), *one_be);
  auto owned = one_gpu_backends(n, current_options());
  auto group = make_device_group(pointers(owned));
  auto tp = TensorParallelModel::upload(mc, host, std::move(owned), std::move(group));
  const GraphRun ref = generate(std::make_unique<ModelCore>(*one_be, one, options(true)));
  const GraphRun eager = generate(std::make_unique<ModelCore>(*tp, options(false)));
  const GraphRun graphs = generate(std::make_unique<ModelCore>(*tp, options(true)));
  const std::string name = fixture + " tp" + std::to_string(n) + " graphs";
  if (ref.core->graph_steps() == 0) r.fail(name + ": -tp 1 replayed no graph");
  if (eager.core->graph_steps() != 0) r.fail(name + ": the op-by-op engine replayed a graph");
  if (graphs.core->graph_steps() < 2) r.fail(name + ": fewer than 2 steps replayed");
  Compared vs_eager, vs_one;
  for (size_t i = 0; i < runs.size(); ++i) {
    const std::string run = name + " run " + std::to_string(i);
    compare_traces(r, run + " vs op by op", *eager.core, *eager.seqs[i], *graphs.core, *graphs.seqs[i],
                   vs_eager, true);
    compare_traces(r, run + " vs -tp 1", *ref.core, *ref.seqs[i], *graphs.core, *graphs.seqs[i], vs_one);
  }
  if (vs_eager.steps < 2) r.fail(name + ": fewer than 2 traced steps compared");
  r.note(name + ": " + std::to_string(graphs.core->graph_steps()) + " steps replayed, " +
         std::to_string(graphs.core->eager_steps()) + " op by op; " + std::to_string(vs_eager.steps) +
         " traced steps identical to -tp " + std::to_string(n) +
         " op by op, token-exact against -tp 1 (max |dH| " + fmt_double(vs_one.max_dh) + ")");
}

// Each rank records `body(rank)` (its collectives inside) on its own thread, all at once.
std::vector<std::unique_ptr<StepGraph>> record_ranks(std::vector<std::unique_ptr<Backend>>& b,
                                                     const std::function<void(int)>& body) {
  std::vector<std::unique_ptr<StepGraph>> graphs(b.size());
  each(static_cast<int>(b.size()), [&](int k) {
    graphs[static_cast<size_t>(k)] = b[static_cast<size_t>(k)]->capture([&] { body(k); });
    if (!graphs[static_cast<size_t>(k)])
      throw Error(ErrorKind::kInternal, "the CUDA backend recorded no graph");
  });
  return graphs;
}

// Seconds rank 0 takes to fail when it replays alone; "" and -1 when it did not fail.
std::pair<std::string, double> replay_alone(Backend& be, StepGraph& g,
                                            const std::function<void()>& meanwhile) {
  const auto t0 = std::chrono::steady_clock::now();
  g.replay();
  meanwhile();
  try {
    be.synchronize();
  } catch (const Error& e) {
    return {e.what(), std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count()};
  }
  return {"", -1};
}

void check_graph_collective(Reporter& r) {
  const int n = 2;
  const double timeout = 1.0;
  auto owned = one_gpu_backends(n, current_options());
  auto group = make_device_group(pointers(owned), timeout);
  Data data("tp_graph_collective");
  const int64_t rows = 29, cols = 40;
  // Per rank: a gather's input and output, an f32 sum in place, each at a fixed address for the graphs.
  std::vector<Tensor> in(n), out(n), sum(n);
  for (int k = 0; k < n; ++k) {
    in[k] = owned[k]->alloc(ScalarType::kBF16, {rows, cols});
    out[k] = owned[k]->alloc(ScalarType::kBF16, {rows, cols * n});
    sum[k] = owned[k]->alloc(ScalarType::kF32, {rows, cols});
  }
  auto body = [&](int k) {
    group->rank(k).all_gather_last(in[k], out[k]);
    group->rank(k).all_reduce_sum(sum[k]);
  };
  each(n, [&](int k) {  // op by op first: the kernels load before the recording
    body(k);
    owned[k]->synchronize();
  });
  auto graphs = record_ranks(owned, body);
  // Fresh inputs (rank k owns the elements i % n == k of the sum, the others -0), then replays or op by op.
  ThreadCollectiveGroup ref(n);
  for (int round = 0; round < 4; ++round) {
    const bool eager = round == 2;
    std::vector<Tensor> hin(n), hsum(n);
    for (int k = 0; k < n; ++k) {
      hin[k] = data.bf16({rows, cols}, 1.0f);
      hsum[k] = host_tensor(ScalarType::kF32, {rows, cols});
      for (int64_t i = 0; i < rows * cols; ++i)
        hsum[k].ptr<float>()[i] = i % n == k ? data.uniform(-3.0f, 3.0f) : -0.0f;
    }
    std::vector<std::vector<uint8_t>> want(n), got(n);
    each(n, [&](int k) {
      Tensor g = host_tensor(ScalarType::kBF16, {rows, cols * n});
      ref.rank(k).all_gather_last(hin[k], g);
      Tensor x = clone(hsum[k]);
      ref.rank(k).all_reduce_sum(x);
      for (const Tensor* t : {&g, &x}) {
        const auto v = bytes_of(*owned[k], *t);
        want[k].insert(want[k].end(), v.begin(), v.end());
      }
    });
    each(n, [&](int k) {
      Backend& be = *owned[k];
      be.from_host(in[k], hin[k].data);
      be.from_host(sum[k], hsum[k].data);
      if (eager)
        body(k);
      else
        graphs[static_cast<size_t>(k)]->replay();
      be.synchronize();
      for (const Tensor* t : {&out[k], &sum[k]}) {
        const auto v = bytes_of(be, *t);
        got[k].insert(got[k].end(), v.begin(), v.end());
      }
    });
    for (int k = 0; k < n; ++k)
      if (got[k] != want[k])
        r.fail("round " + std::to_string(round) + (eager ? " (op by op)" : " (replayed)") + " rank " +
               std::to_string(k) + ": differs from the thread collective");
  }
  r.note("one-device collective in graphs: 3 replays and 1 op-by-op round exact");

  // Rank 0 replays alone: its first device wait gives up after the timeout.
  const auto [timed_out, seconds] = replay_alone(*owned[0], *graphs[0], [] {});
  if (timed_out.find("timed out") == std::string::npos)
    r.fail("a replay without the other rank: expected the timeout error, got '" + timed_out + "'");
  else if (seconds < timeout * 0.9 || seconds > timeout + 10)
    r.fail("the collective timed out after " + fmt_double(seconds) + " s (timeout " + fmt_double(timeout) +
           " s)");
  else
    r.note("a replay without the other rank failed after " + fmt_double(seconds) + " s: " + timed_out);
  group->reset();

  // No timeout: abort() ends the wait.
  auto patient = make_device_group(pointers(owned), 0);
  auto patient_graphs = record_ranks(owned, [&](int k) { patient->rank(k).all_reduce_sum(sum[k]); });
  const auto [aborted, after] = replay_alone(*owned[0], *patient_graphs[0], [&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
    patient->abort();
  });
  if (aborted.find("aborted") == std::string::npos)
    r.fail("abort() during a device wait: expected the abort error, got '" + aborted + "'");
  else
    r.note("abort() ended a device wait after " + fmt_double(after) + " s");
  patient->reset();

  // After reset() the first group works again, op by op and replayed.
  for (int round = 0; round < 2; ++round)
    each(n, [&](int k) {
      std::vector<float> v(static_cast<size_t>(rows * cols), k == 0 ? 1.5f : -0.0f);
      owned[k]->from_host(sum[k], v.data());
      if (round == 0)
        group->rank(k).all_reduce_sum(sum[k]);
      else
        graphs[static_cast<size_t>(k)]->replay();
      const std::vector<uint8_t> bytes = bytes_of(*owned[k], sum[k]);
      std::vector<float> got(v.size());
      std::memcpy(got.data(), bytes.data(), bytes.size());
      for (float x : got)
        if (x != 1.5f) {
          r.fail("after reset(): rank " + std::to_string(k) + " summed " + fmt_double(x) + ", not 1.5");
          break;
        }
    });
}

}  // namespace

std::vector<Case> tensor_parallel_graph_cases() {
  return {
      {"tp_graph_collective", check_graph_collective},
      {"tp_graphs_tiny_a_tp2", [](Reporter& r) { check_graphs(r, "tiny_a", 2); }},
      {"tp_graphs_tiny_a_tp4", [](Reporter& r) { check_graphs(r, "tiny_a", 4); }},
      {"tp_graphs_tiny_b_tp2", [](Reporter& r) { check_graphs(r, "tiny_b", 2); }},
  };
}

}  // namespace dgemma::gpu_test
