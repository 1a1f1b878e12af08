#include "tp_check_util.h"

#include <cmath>
#include <cstring>
#include <thread>

#include "gpu_check_util.h"
#include "util/error.h"

namespace dgemma::gpu_test {

void each(int n, const std::function<void(int)>& fn) {
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

void compare_traces(Reporter& r, const std::string& name, ModelCore& a, const Sequence& sa, ModelCore& b,
                    const Sequence& sb, Compared& c, bool bit_exact) {
  if (sa.state != Sequence::State::kFinished || sb.state != Sequence::State::kFinished) {
    r.fail(name + ": a trajectory did not finish");
    return;
  }
  if (sa.output() != sb.output()) r.fail(name + ": outputs differ");
  const auto wa = a.traces().canvases(sa.id()), wb = b.traces().canvases(sb.id());
  if (wa.size() != wb.size()) {
    r.fail(name + ": canvas counts differ");
    return;
  }
  for (size_t k = 0; k < wa.size(); ++k) {
    if (wa[k].committed != wb[k].committed)
      r.fail(name + ": canvas " + std::to_string(k) + " committed differs");
    if (wa[k].trace.size() != wb[k].trace.size()) {
      r.fail(name + ": canvas " + std::to_string(k) + " step counts differ");
      continue;
    }
    for (size_t s = 0; s < wa[k].trace.size(); ++s, ++c.steps) {
      const StepRecord &x = wa[k].trace[s], &y = wb[k].trace[s];
      const std::string at = name + " canvas " + std::to_string(k) + " step " + std::to_string(s);
      if (x.canvas_in != y.canvas_in || x.argmax != y.argmax || x.sample != y.sample ||
          x.canvas_out != y.canvas_out || x.accept != y.accept || x.stop != y.stop) {
        r.fail(at + ": decisions differ");
        return;
      }
      if (bit_exact &&
          (x.entropy != y.entropy || x.argmax_gap != y.argmax_gap || x.sample_gap != y.sample_gap)) {
        r.fail(at + ": entropies or margins differ");
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
    }
  }
}

}  // namespace dgemma::gpu_test
