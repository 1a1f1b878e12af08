// The NCCL collective (backend/nccl.h) against the in-process one (backend/thread_collective.h) on the
// same inputs: every visible GPU (the largest power of two of them, up to 8) is a rank with its own CUDA
// backend; the gathers and the exact sums must equal the thread collective's bit for bit. With one GPU
// it checks the library loading and the one-rank paths; the real exchange needs a multi-GPU machine.
// nccl_graphs: the same operations recorded into a CUDA graph per rank (Collective::capture, after one
// op-by-op run that sizes the gather buffer, as the engine does) and replayed on new inputs written into
// the recorded buffers: every replay equals the thread collective bit for bit.
#include <cstring>
#include <string>
#include <vector>

#include <cuda_runtime.h>

#include "backend/nccl.h"
#include "backend/thread_collective.h"
#include "collective_replay.h"
#include "gpu_check_util.h"
#include "util/bf16.h"

namespace dgemma::gpu_test {
namespace {

// Every visible GPU (the largest power of two of them, up to 8) as a rank with its own CUDA backend,
// joined by NCCL; `error` says why not.
struct NcclRanks {
  std::vector<std::unique_ptr<Backend>> owned;
  std::vector<Backend*> backends;
  std::unique_ptr<CollectiveGroup> group;
  std::string error;
  int size() const { return static_cast<int>(backends.size()); }
};

NcclRanks nccl_ranks() {
  NcclRanks k;
  std::string why;
  if (!nccl_available(&why)) {
    k.error = "NCCL cannot be loaded: " + why;
    return k;
  }
  int visible = 0;
  if (cudaGetDeviceCount(&visible) != cudaSuccess || visible < 1) {
    k.error = "no CUDA device";
    return k;
  }
  int n = 1;
  while (n * 2 <= visible && n * 2 <= 8) n *= 2;
  for (int i = 0; i < n; ++i) {
    k.owned.push_back(make_cuda_backend(i));
    k.backends.push_back(k.owned.back().get());
  }
  k.group = make_nccl_group(k.backends);
  return k;
}

void check_nccl(Reporter& r) {
  NcclRanks ranks = nccl_ranks();
  if (!ranks.error.empty()) {
    r.fail(ranks.error);
    return;
  }
  const int n = ranks.size();
  std::vector<Backend*>& backends = ranks.backends;
  CollectiveGroup* group = ranks.group.get();
  ThreadCollectiveGroup ref(n);
  Data data("nccl");
  const int64_t rows = 37, cols = 24;
  // Inputs per rank: bf16 rows to gather; bf16 and f32 values with one contributor per element (-0 elsewhere).
  std::vector<Tensor> in(static_cast<size_t>(n)), sum_bf(static_cast<size_t>(n)), sum_f(static_cast<size_t>(n));
  for (int k = 0; k < n; ++k) {
    in[k] = data.bf16({rows, cols}, 1.0f);
    sum_bf[k] = data.bf16({rows, cols}, 1.0f);
    sum_f[k] = host_tensor(ScalarType::kF32, {rows, cols});
    for (int64_t i = 0; i < rows * cols; ++i) {
      const bool mine = i % n == k;
      if (!mine) sum_bf[k].ptr<uint16_t>()[i] = kBf16NegZero;
      sum_f[k].ptr<float>()[i] = mine ? data.uniform(-3.0f, 3.0f) : -0.0f;
    }
  }
  std::vector<Tensor> want_gather(static_cast<size_t>(n)), want_bf(static_cast<size_t>(n)), want_f(static_cast<size_t>(n));
  std::vector<Tensor> got_gather(static_cast<size_t>(n)), got_bf(static_cast<size_t>(n)), got_f(static_cast<size_t>(n));
  each_rank(n, [&](int k) {
    want_gather[k] = host_tensor(ScalarType::kBF16, {rows, cols * n});
    ref.rank(k).all_gather_last(in[k], want_gather[k]);
    want_bf[k] = clone(sum_bf[k]);
    ref.rank(k).all_reduce_sum(want_bf[k]);
    want_f[k] = clone(sum_f[k]);
    ref.rank(k).all_reduce_sum(want_f[k]);
  });
  each_rank(n, [&](int k) {
    Backend& be = *backends[k];
    Tensor x = be.upload(in[k]), out = be.alloc(ScalarType::kBF16, {rows, cols * n});
    group->rank(k).all_gather_last(x, out);
    Tensor b = be.upload(sum_bf[k]), f = be.upload(sum_f[k]);
    group->rank(k).all_reduce_sum(b);
    group->rank(k).all_reduce_sum(f);
    group->rank(k).barrier();
    got_gather[k] = host_tensor(ScalarType::kBF16, {rows, cols * n});
    got_bf[k] = host_tensor(ScalarType::kBF16, {rows, cols});
    got_f[k] = host_tensor(ScalarType::kF32, {rows, cols});
    be.to_host(out, got_gather[k].data);
    be.to_host(b, got_bf[k].data);
    be.to_host(f, got_f[k].data);
  });
  for (int k = 0; k < n; ++k) {
    auto same = [&](const Tensor& g, const Tensor& w, const char* what) {
      if (std::memcmp(g.data, w.data, w.nbytes()) != 0) r.fail("rank " + std::to_string(k) + ": " + what + " differs from the thread collective");
    };
    same(got_gather[k], want_gather[k], "all_gather_last");
    same(got_bf[k], want_bf[k], "bf16 all_reduce_sum");
    same(got_f[k], want_f[k], "f32 all_reduce_sum");
  }
  r.note("nccl: " + std::to_string(n) + " rank(s), gather [" + std::to_string(rows) + ", " + std::to_string(cols) +
         "] per rank and the exact sums compared bitwise");
}

void check_nccl_graphs(Reporter& r) {
  NcclRanks ranks = nccl_ranks();
  if (!ranks.error.empty()) {
    r.fail(ranks.error);
    return;
  }
  const int compared = check_recorded_collectives(r, "nccl", *ranks.group, ranks.backends);
  r.note("nccl graphs: " + std::to_string(ranks.size()) + " rank(s), " + std::to_string(compared) +
         " rank replays of a recorded gather and bf16 / f32 sums compared bitwise");
}

}  // namespace

std::vector<Case> nccl_cases() {
  return {{"nccl_collectives", check_nccl}, {"nccl_graphs", check_nccl_graphs}};
}

}  // namespace dgemma::gpu_test
