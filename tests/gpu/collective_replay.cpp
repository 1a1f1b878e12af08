#include "collective_replay.h"

#include <cstdint>
#include <exception>
#include <functional>
#include <memory>
#include <thread>

#include "backend/thread_collective.h"
#include "gpu_check_util.h"
#include "util/bf16.h"
#include "util/error.h"

namespace dgemma::gpu_test {
namespace {

void append(std::vector<uint8_t>& to, const uint8_t* p, size_t n) {
  to.insert(to.end(), p, p + n);
}

}  // namespace

void each_rank(int n, const std::function<void(int)>& fn) {
  std::vector<std::thread> t;
  std::vector<std::string> errors(static_cast<size_t>(n));
  for (int k = 0; k < n; ++k)
    t.emplace_back([&, k] {
      try {
        fn(k);
      } catch (const std::exception& e) {
        errors[static_cast<size_t>(k)] = e.what();
      }
    });
  for (auto& x : t) x.join();
  for (const std::string& e : errors)
    if (!e.empty()) throw Error(ErrorKind::kInternal, e);
}

int check_recorded_collectives(Reporter& r, const std::string& what, CollectiveGroup& group,
                               const std::vector<Backend*>& backends) {
  const int n = group.size();
  DG_CHECK(static_cast<int>(backends.size()) == n);
  ThreadCollectiveGroup ref(n);
  Data data("recorded_collectives_" + what);
  const int64_t rows = 29, cols = 40;
  // Per rank: the recorded buffers and the recording.
  std::vector<Tensor> in(n), g(n), b(n), f(n);
  std::vector<std::unique_ptr<StepGraph>> graphs(n);
  each_rank(n, [&](int k) {
    Backend& be = *backends[k];
    in[k] = be.alloc(ScalarType::kBF16, {rows, cols});
    g[k] = be.alloc(ScalarType::kBF16, {rows, cols * n});
    b[k] = be.alloc(ScalarType::kBF16, {rows, cols});
    f[k] = be.alloc(ScalarType::kF32, {rows, cols});
    Collective& c = group.rank(k);
    auto body = [&] {
      c.all_gather_last(in[k], g[k]);
      c.all_reduce_sum(b[k]);
      c.all_reduce_sum(f[k]);
    };
    body();
    be.synchronize();
    graphs[k] = c.capture(be, body);
    if (!graphs[k]) throw Error(ErrorKind::kInternal, "rank " + std::to_string(k) + " recorded no graph");
  });
  int compared = 0;
  for (int replay = 0; replay < 3; ++replay) {
    // New inputs: one contributor per element of the sums, -0 elsewhere.
    std::vector<Tensor> hin(n), hb(n), hf(n);
    for (int k = 0; k < n; ++k) {
      hin[k] = data.bf16({rows, cols}, 1.0f);
      hb[k] = data.bf16({rows, cols}, 1.0f);
      hf[k] = host_tensor(ScalarType::kF32, {rows, cols});
      for (int64_t i = 0; i < rows * cols; ++i) {
        const bool mine = (i + replay) % n == k;
        if (!mine) hb[k].ptr<uint16_t>()[i] = kBf16NegZero;
        hf[k].ptr<float>()[i] = mine ? data.uniform(-3.0f, 3.0f) : -0.0f;
      }
    }
    std::vector<std::vector<uint8_t>> want(n), got(n);
    each_rank(n, [&](int k) {
      Tensor gw = host_tensor(ScalarType::kBF16, {rows, cols * n});
      ref.rank(k).all_gather_last(hin[k], gw);
      Tensor bw = clone(hb[k]), fw = clone(hf[k]);
      ref.rank(k).all_reduce_sum(bw);
      ref.rank(k).all_reduce_sum(fw);
      for (const Tensor* t : {&gw, &bw, &fw}) append(want[k], t->ptr<uint8_t>(), t->nbytes());
    });
    each_rank(n, [&](int k) {
      Backend& be = *backends[k];
      be.from_host(in[k], hin[k].data);
      be.from_host(b[k], hb[k].data);
      be.from_host(f[k], hf[k].data);
      graphs[k]->replay();
      for (const Tensor* t : {&g[k], &b[k], &f[k]}) {
        std::vector<uint8_t> v(t->nbytes());
        be.to_host(*t, v.data());
        append(got[k], v.data(), v.size());
      }
    });
    for (int k = 0; k < n; ++k, ++compared)
      if (got[k] != want[k])
        r.fail(what + " replay " + std::to_string(replay) + " rank " + std::to_string(k) +
               ": differs from the thread collective");
  }
  return compared;
}

}  // namespace dgemma::gpu_test
