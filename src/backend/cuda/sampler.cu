// The sampler (MODEL.md §6), one block per canvas position, never materialising fp32 [C, V]:
//   pass 0: max of the raw bf16 logits (z is a non-decreasing function of the logit, so this fixes
//           the shift of the exponentials below to the CPU's max z exactly);
//   pass 1: z = softcap * tanh(x / softcap) / T per element (fp32, as the CPU); argmax and the
//           second-best z; log-sum-exp and entropy sums in double (H = log S1 - S2 / S1 with
//           S1 = sum e^(z - m), S2 = sum e^(z - m) (z - m), the CPU's -sum p log p rewritten);
//           Gumbel-max with the counter-based noise in double; the fp32 softmax sum of bf16(z) for the
//           self-conditioning probabilities (summed in double: see cuda_backend.cpp's notes);
//   pass 2 (want_probs): the row is overwritten with bf16(exp(bf16(z) - max) / sum).
// Ties: the lowest index wins (the CPU's strict '>' over ascending indices).
#include <climits>
#include <cmath>

#include "backend/cuda/common.cuh"
#include "backend/cuda/sampler.cuh"
#include "util/counter_rng.h"

namespace dgemma::cuda {
namespace {

constexpr int kThreads = 512;
constexpr int kWarps = kThreads / 32;

__device__ __forceinline__ float processed(float x, float cap, float temperature) {
  return __fdiv_rn(__fmul_rn(tanh_f32(__fdiv_rn(x, cap)), cap), temperature);
}

// Best and second-best value (of the multiset) with the index of the best; lower index on ties.
template <typename T>
struct Top2 {
  T v1, v2;
  int i1;
  __device__ __forceinline__ void push(T v, int i) {  // ascending i within a thread, as the CPU's loop
    if (v > v1) {
      v2 = v1;
      v1 = v;
      i1 = i;
    } else if (v > v2) {
      v2 = v;
    }
  }
  __device__ __forceinline__ void merge(T ov1, int oi1, T ov2) {
    if (ov1 > v1 || (ov1 == v1 && oi1 < i1)) {
      v2 = v1 > ov2 ? v1 : ov2;
      v1 = ov1;
      i1 = oi1;
    } else {
      v2 = v2 > ov1 ? v2 : ov1;
    }
  }
};

struct Stats {
  Top2<float> z;
  Top2<double> g;
  double s1, s2, bsum;

  __device__ __forceinline__ void merge_lane(int offset) {
    const float zv1 = __shfl_xor_sync(0xffffffffu, z.v1, offset);
    const float zv2 = __shfl_xor_sync(0xffffffffu, z.v2, offset);
    const int zi1 = __shfl_xor_sync(0xffffffffu, z.i1, offset);
    const double gv1 = __shfl_xor_sync(0xffffffffu, g.v1, offset);
    const double gv2 = __shfl_xor_sync(0xffffffffu, g.v2, offset);
    const int gi1 = __shfl_xor_sync(0xffffffffu, g.i1, offset);
    s1 += __shfl_xor_sync(0xffffffffu, s1, offset);
    s2 += __shfl_xor_sync(0xffffffffu, s2, offset);
    bsum += __shfl_xor_sync(0xffffffffu, bsum, offset);
    z.merge(zv1, zi1, zv2);
    g.merge(gv1, gi1, gv2);
  }
  __device__ __forceinline__ void warp_reduce_all() {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) merge_lane(o);
  }
};

struct SharedStats {
  float zv1[kWarps], zv2[kWarps];
  int zi1[kWarps], gi1[kWarps];
  double gv1[kWarps], gv2[kWarps], s1[kWarps], s2[kWarps], bsum[kWarps];
};

__global__ void __launch_bounds__(kThreads) sampler_kernel(SamplerLaunch a) {
  __shared__ float shared_f[32];
  __shared__ SharedStats sh;
  __shared__ float bsum_shared;
  const int64_t pos = blockIdx.x;
  uint16_t* row = a.logits + pos * a.V;
  const float cap = a.softcap, temp = a.temperature;

  // Pass 0: the largest raw logit and the shift m = z(max logit).
  float xmax = -INFINITY;
  for (int64_t v = threadIdx.x; v < a.V; v += kThreads) xmax = fmaxf(xmax, bf16_to_f32(row[v]));
  xmax = block_reduce(xmax, MaxOp{}, -INFINITY, shared_f);
  const float m = processed(xmax, cap, temp);
  const double md = static_cast<double>(m);
  const float bmax = round_bf16(m);  // = max of bf16(z): rounding is monotonic

  // Pass 1.
  Stats st;
  st.z = {-INFINITY, -INFINITY, INT_MAX};
  st.g = {-INFINITY, -INFINITY, INT_MAX};
  st.s1 = st.s2 = st.bsum = 0.0;
  for (int64_t v = threadIdx.x; v < a.V; v += kThreads) {
    const float z = processed(bf16_to_f32(row[v]), cap, temp);
    st.z.push(z, static_cast<int>(v));
    const double dz = static_cast<double>(z) - md;
    const double e = exp(dz);
    st.s1 += e;
    st.s2 += e * dz;
    if (a.want_probs) st.bsum += static_cast<double>(exp_f32(__fsub_rn(round_bf16(z), bmax)));
    const double g = static_cast<double>(z) + rng::gumbel(a.sample_key, static_cast<uint32_t>(pos), static_cast<uint32_t>(v));
    st.g.push(g, static_cast<int>(v));
  }
  st.warp_reduce_all();
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  if (lane == 0) {
    sh.zv1[warp] = st.z.v1;
    sh.zv2[warp] = st.z.v2;
    sh.zi1[warp] = st.z.i1;
    sh.gv1[warp] = st.g.v1;
    sh.gv2[warp] = st.g.v2;
    sh.gi1[warp] = st.g.i1;
    sh.s1[warp] = st.s1;
    sh.s2[warp] = st.s2;
    sh.bsum[warp] = st.bsum;
  }
  __syncthreads();
  if (warp == 0) {
    if (lane < kWarps) {
      st.z = {sh.zv1[lane], sh.zv2[lane], sh.zi1[lane]};
      st.g = {sh.gv1[lane], sh.gv2[lane], sh.gi1[lane]};
      st.s1 = sh.s1[lane];
      st.s2 = sh.s2[lane];
      st.bsum = sh.bsum[lane];
    } else {
      st.z = {-INFINITY, -INFINITY, INT_MAX};
      st.g = {-INFINITY, -INFINITY, INT_MAX};
      st.s1 = st.s2 = st.bsum = 0.0;
    }
    st.warp_reduce_all();
    if (lane == 0) {
      const double lse = md + log(st.s1);
      a.entropy[pos] = static_cast<float>(log(st.s1) - st.s2 / st.s1);
      a.argmax[pos] = st.z.i1;
      a.sample[pos] = st.g.i1;
      if (a.argmax_logprob != nullptr) a.argmax_logprob[pos] = static_cast<float>(static_cast<double>(st.z.v1) - lse);
      if (a.argmax_gap != nullptr) a.argmax_gap[pos] = __fsub_rn(st.z.v1, st.z.v2);
      if (a.sample_gap != nullptr) a.sample_gap[pos] = static_cast<float>(st.g.v1 - st.g.v2);
      bsum_shared = static_cast<float>(st.bsum);
    }
  }
  if (!a.want_probs) return;
  __syncthreads();
  // Pass 2: every read above is done (barrier); each element is read and rewritten by one thread.
  const float bsum = bsum_shared;
  for (int64_t v = threadIdx.x; v < a.V; v += kThreads) {
    const float zb = round_bf16(processed(bf16_to_f32(row[v]), cap, temp));
    row[v] = f32_to_bf16(__fdiv_rn(exp_f32(__fsub_rn(zb, bmax)), bsum));
  }
}

}  // namespace

void launch_sampler(const SamplerLaunch& s, cudaStream_t stream) {
  if (s.C <= 0 || s.V <= 0) return;
  sampler_kernel<<<static_cast<unsigned>(s.C), kThreads, 0, stream>>>(s);
  CUDA_CHECK_LAUNCH();
}

}  // namespace dgemma::cuda
