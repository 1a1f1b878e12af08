#pragma once
// Helpers of the CUDA-vs-CPU checks: random host inputs, poisoned GPU outputs, and comparisons that
// print their statistics and report every violated bound.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <initializer_list>
#include <random>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "engine/trace.h"
#include "gpu_checks.h"

namespace dgemma::gpu_test {

// Within its scope, cuda() (and every helper below) is a CUDA backend of its own built with `options`
// (kernel choices: cuda_options.h), over the same device; the backend before it is synchronised first
// (and its cached memory given back), this one at the end, so tensors pass between them safely. E.g.
//   const WithOptions scope(options_with([](CudaOptions& o) { o.moe = MoeKernel::kSmallRows; }));
// runs the MoE calls inside on the small-rows kernel.
class WithOptions {
 public:
  explicit WithOptions(const CudaOptions& options);
  ~WithOptions();
  WithOptions(const WithOptions&) = delete;
  WithOptions& operator=(const WithOptions&) = delete;
};
// Whether the GPU runs the hopper family's kernels (sm_90), whatever the run's family: the checks of
// those kernels force the family where it does.
bool sm90_gpu();
// The options of cuda() now: the innermost scope's, else run_options().
const CudaOptions& current_options();
// current_options() with `change` applied (for the scopes above).
CudaOptions options_with(const std::function<void(CudaOptions&)>& change);

// Random host tensors from one seeded stream (one per check: run_seed() mixed with the check's name).
class Data {
 public:
  explicit Data(const std::string& name);
  Tensor bf16(std::initializer_list<int64_t> dims, float std, float mean = 0.0f);
  Tensor bf16_uniform(std::initializer_list<int64_t> dims, float lo, float hi);
  float uniform(float lo, float hi);
  int64_t integer(int64_t lo, int64_t hi);  // [lo, hi]
  std::mt19937_64& engine() { return rng_; }

 private:
  std::mt19937_64 rng_;
};

// Random bytes fast enough for the 26B shapes (hundreds of MB: eight a draw of d's engine), mapped by `f`.
template <typename F>
void fill_bytes(Data& d, const Tensor& t, F f) {
  uint8_t* p = t.ptr<uint8_t>();
  const int64_t n = static_cast<int64_t>(t.nbytes());
  for (int64_t i = 0; i < n; i += 8) {
    uint64_t v = d.engine()();
    for (int64_t j = i; j < std::min(n, i + 8); ++j, v >>= 8) p[j] = f(static_cast<uint8_t>(v));
  }
}

// Host tensor helpers.
Tensor clone(const Tensor& host);
Tensor host_i32(const std::vector<int32_t>& v);
Tensor host_f32(const std::vector<float>& v);

// GPU helpers (on cuda()).
Tensor up(const Tensor& host);
// An output tensor filled with 0xFF bytes (bf16/f32 NaN, i32 -1), so unwritten elements show.
Tensor poisoned(ScalarType type, std::initializer_list<int64_t> dims);
void poison(const Tensor& t);
std::vector<uint16_t> u16(const Tensor& t);  // host or GPU tensor -> host copy
std::vector<float> f32(const Tensor& t);
std::vector<int32_t> i32(const Tensor& t);

// Distance in bf16 steps between two bf16 values (+0 and -0 coincide).
int bf16_ulps(uint16_t a, uint16_t b);

struct Tol {
  int max_ulp = 0;              // per element, in bf16 steps ...
  double floor_rel_rms = 0.0;   // ... or |got - want| <= floor_rel_rms * rms(want) (values near 0)
  double max_bad_fraction = 0;  // fraction of elements allowed outside the per-element bound
  double min_exact = 1.0;       // fraction of bit-identical elements required
  double max_nmse = 0.0;        // sum (got - want)^2 / sum want^2
};

// Exact for ops with the CPU's rounding points; "gemm" for summation-order differences: an fp32
// sum in another order moves a bf16 result by one step in roughly 1e-4..1e-2 of the elements, two
// steps after a subsequent rounding; the floor covers results near zero after cancellation, where
// the same absolute error is many steps; NMSE 1e-5 is ~40x a single bf16 rounding's (2^-18).
inline Tol exact_tol() { return Tol{}; }
inline Tol gemm_tol() { return Tol{2, 1e-3, 0.0, 0.9, 1e-5}; }

void expect_bf16(Reporter& r, const std::string& what, const std::vector<uint16_t>& got,
                 const std::vector<uint16_t>& want, const Tol& tol);
// |got - want| <= abs_tol + rel_tol * |want| for every element; NaN only where both are NaN.
void expect_f32(Reporter& r, const std::string& what, const std::vector<float>& got, const std::vector<float>& want,
                double abs_tol, double rel_tol);

std::string fmt_double(double v);

// Near-ties of the sampler's decisions, for comparing two runs of one step whose logits differ by the
// rounding of differently ordered GEMM sums (CPU against CUDA, -tp N against -tp 1). Such noise moves a
// logit by a few bf16 steps (0.03-0.06 at magnitudes 4-16), so an argmax or Gumbel sample whose two best
// scores lie within kTieZ of each other, or an acceptance whose prefix entropy sum lies within kTieH of
// the bound, may go either way; any other difference is an error.
constexpr double kTieZ = 0.25, kTieH = 0.1;

// One position at which two traces of a step decided differently, with the reference's margin.
enum class Decision { kArgmax, kSample, kAccept };
struct DecisionDiff {
  Decision what;
  size_t position;
  double margin;
  bool near_tie;
};
// Every position where `other` decided differently from `ref`, in position order (at one position:
// argmax, sample, accept).
std::vector<DecisionDiff> decision_diffs(const StepRecord& ref, const StepRecord& other);
// "argmax at 12 (margin 0.031, a near-tie)".
std::string describe(const DecisionDiff& d);
// Whether a stop decision that differs between the two traces is explained: their argmax canvases
// differ (the stop rule reads them), or `ref`'s mean entropy lies within kTieH of the threshold.
bool stop_difference_explained(const StepRecord& ref, const StepRecord& other, double confidence_threshold);

// A random attention problem: q, k and v of the new tokens and a cache whose rows past cache_len hold
// data too (as a real cache after eviction would: reading them, or letting them into the softmax,
// changes the result). score_std is the typical |q.k| (q and k elements ~ N(0, sqrt(score_std /
// sqrt(D)))).
struct AttnCase {
  std::string name;
  int64_t n, Hq, Hkv, D, L, cap;  // cap: positions the pool covers (the L cached keys end there)
  bool causal;
  int64_t window;
  float scaling = 1.0f;
  float score_std = 1.5f;
};
struct AttnInputs {
  AttentionArgs host;  // host tensors, output allocated
  AttentionArgs gpu;   // the same inputs on the GPU, output poisoned
};
AttnInputs make_attention_inputs(Data& d, const AttnCase& c);

// Compares the routing debug outputs (dbg_probs, dbg_weights, dbg_index, host tensors) of a GPU MoE
// call with the CPU's. The bf16 router logits come from a GEMM after an RMSNorm whose mean of squares
// the CPU sums in double and the GPU in fp32, so a logit can round the other way (see gemm_tol) and
// move that token's probabilities; near-ties at the k-th place can then pick another expert. Fails on
// a token with bit-identical probabilities but another routing (same fp32 softmax order, same top-k
// rule), on fewer than half of the tokens keeping bit-identical probabilities (checked from
// `min_tokens` tokens on; a token keeps them only if none of its E logits flips: measured on an H200
// over random seeds 47 to 53 of 64 tokens at H=2816, all 37 at H=64, while a structural error changes
// every token) and on any probability moved by more than one bf16 step of a logit (2%). Returns, per
// token, whether the routing (experts and weights) is identical.
// The grouping of the MoE pairs top_idx [R] (values in [0, E)) by expert, as the routing kernel writes
// it (moe/route.cuh, moe/grouped.cuh): offsets [E + 1], pairs [R] (the stable sort by expert) and the tile
// list of tile_rows-row tiles ({expert, first row, rows, 0}, then {-1, 0, 0, 0} up to max_tiles
// entries; none when tile_rows is 0).
struct Grouping {
  std::vector<int32_t> offsets, pairs, tiles;
};
Grouping group_by_expert(const std::vector<int32_t>& top_idx, int64_t E, int tile_rows, int64_t max_tiles);

std::vector<char> compare_routing(Reporter& r, const std::string& name, const MoeArgs& cpu_args, const MoeArgs& gpu_args,
                                  int64_t min_tokens = 1);

}  // namespace dgemma::gpu_test
