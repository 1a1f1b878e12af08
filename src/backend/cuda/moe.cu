// MoE routing and the element-wise stages around the expert GEMMs, with the CPU reference's rounding
// points (docs/MODEL.md §3.5-3.6).
#include <climits>
#include <cmath>

#include "backend/cuda/common.cuh"
#include "backend/cuda/moe.cuh"

namespace dgemma::cuda {
namespace {

constexpr int kThreads = 256;
constexpr int kTopkWarps = 4;  // tokens per block in the routing kernel (one warp each)

// One warp per token. Shared memory per warp: probs [E], candidates [E] (taken ones set to -1), the
// selected experts [K].
__global__ void topk_kernel(const uint16_t* __restrict__ logits, int64_t T, int E, int K,
                            const uint16_t* __restrict__ pes, float* __restrict__ probs_out,
                            int32_t* __restrict__ top_idx, float* __restrict__ top_w, int32_t* __restrict__ order) {
  extern __shared__ unsigned char smem[];
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int64_t t = static_cast<int64_t>(blockIdx.x) * kTopkWarps + warp;
  if (t >= T) return;  // no block-wide barriers below: only warp-level ones
  const size_t per_warp = static_cast<size_t>(2 * E + K) * 4;
  float* p = reinterpret_cast<float*>(smem + per_warp * warp);
  float* cand = p + E;
  int* sel = reinterpret_cast<int*>(cand + E);
  const uint16_t* l = logits + t * E;

  float mx = -INFINITY;
  for (int e = lane; e < E; e += 32) mx = fmaxf(mx, bf16_to_f32(l[e]));
  mx = warp_reduce(mx, MaxOp{});
  for (int e = lane; e < E; e += 32) p[e] = exp_f32(__fsub_rn(bf16_to_f32(l[e]), mx));
  __syncwarp();
  float sum = 0.f;
  if (lane == 0)
    for (int e = 0; e < E; ++e) sum = __fadd_rn(sum, p[e]);  // the CPU's order
  sum = __shfl_sync(0xffffffffu, sum, 0);
  __syncwarp();
  for (int e = lane; e < E; e += 32) {
    const float q = __fdiv_rn(p[e], sum);
    p[e] = q;
    cand[e] = q;
    if (probs_out != nullptr) probs_out[t * E + e] = q;
  }
  __syncwarp();

  for (int k = 0; k < K; ++k) {
    float bv = -INFINITY;
    int bi = INT_MAX;
    for (int e = lane; e < E; e += 32) {
      const float v = cand[e];
      if (v >= 0.f && (v > bv || (v == bv && e < bi))) {
        bv = v;
        bi = e;
      }
    }
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) {
      const float ov = __shfl_xor_sync(0xffffffffu, bv, o);
      const int oi = __shfl_xor_sync(0xffffffffu, bi, o);
      if (ov > bv || (ov == bv && oi < bi)) {
        bv = ov;
        bi = oi;
      }
    }
    if (lane == 0) {
      if (bi == INT_MAX) {  // only NaN probabilities left: take the lowest untaken index
        bi = 0;
        while (bi < E && cand[bi] == -1.f) ++bi;
        if (bi == E) bi = 0;
      }
      sel[k] = bi;
      cand[bi] = -1.f;
    }
    __syncwarp();
  }

  if (lane == 0) {
    float wsum = 0.f;
    for (int k = 0; k < K; ++k) wsum = __fadd_rn(wsum, p[sel[k]]);
    for (int k = 0; k < K; ++k) {
      top_idx[t * K + k] = sel[k];
      top_w[t * K + k] = __fmul_rn(__fdiv_rn(p[sel[k]], wsum), bf16_to_f32(pes[sel[k]]));
    }
    // Slots by ascending expert index (insertion sort; experts within a token are distinct).
    int32_t* o = order + t * K;
    for (int k = 0; k < K; ++k) {
      int j = k;
      while (j > 0 && sel[o[j - 1]] > sel[k]) {
        o[j] = o[j - 1];
        --j;
      }
      o[j] = k;
    }
  }
}

__global__ void gather_kernel(const uint16_t* __restrict__ x, int64_t H, const int32_t* __restrict__ perm, int64_t R,
                              int64_t K, uint16_t* __restrict__ xs) {
  const int64_t total = R * H;
  for (int64_t e = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; e < total;
       e += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t r = e / H, i = e % H;
    xs[e] = perm[r] < 0 ? uint16_t{0} : x[(perm[r] / K) * H + i];  // -1: a padding row
  }
}

__global__ void act_kernel(const uint16_t* __restrict__ gu, int64_t R, int64_t I, uint16_t* __restrict__ act) {
  const int64_t total = R * I;
  for (int64_t e = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; e < total;
       e += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t r = e / I, i = e % I;
    const float g = round_bf16(gelu_tanh(bf16_to_f32(gu[r * 2 * I + i])));
    act[e] = f32_to_bf16(__fmul_rn(g, bf16_to_f32(gu[r * 2 * I + I + i])));
  }
}

__global__ void weight_kernel(const uint16_t* __restrict__ ys, const int32_t* __restrict__ perm,
                              const float* __restrict__ w, int64_t R, int64_t H, uint16_t* __restrict__ y) {
  const int64_t total = R * H;
  for (int64_t e = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; e < total;
       e += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t r = e / H, i = e % H;
    const int64_t pair = perm[r];
    if (pair < 0) continue;  // a padding row
    y[pair * H + i] = f32_to_bf16(__fmul_rn(bf16_to_f32(ys[e]), w[pair]));
  }
}

// One block per token.
__global__ void combine_kernel(const uint16_t* __restrict__ y, const int32_t* __restrict__ order, int64_t K, int64_t H,
                               uint16_t* __restrict__ out) {
  const int64_t t = blockIdx.x;
  const int32_t* o = order + t * K;
  for (int64_t i = threadIdx.x; i < H; i += blockDim.x) {
    float acc = 0.f;
    for (int64_t j = 0; j < K; ++j) acc = round_bf16(__fadd_rn(acc, bf16_to_f32(y[(t * K + o[j]) * H + i])));
    out[t * H + i] = f32_to_bf16(acc);
  }
}

// combine_kernel with 8 columns per thread (16-byte loads and stores: a step of batched denoising reads
// T * K * H bf16 here) and the token's expert order in registers per chunk; the same bf16 sum in the
// same order per element.
__global__ void combine_vec_kernel(const uint4* __restrict__ y, const int32_t* __restrict__ order, int64_t K,
                                   int64_t H8, uint4* __restrict__ out) {
  const int64_t t = blockIdx.x;
  const int32_t* o = order + t * K;
  for (int64_t i = threadIdx.x; i < H8; i += blockDim.x) {
    float acc[8] = {0.f, 0.f, 0.f, 0.f, 0.f, 0.f, 0.f, 0.f};
    for (int64_t j = 0; j < K; ++j) {
      float v[8];
      unpack_bf16x8(y[(t * K + o[j]) * H8 + i], v);
#pragma unroll
      for (int c = 0; c < 8; ++c) acc[c] = round_bf16(__fadd_rn(acc[c], v[c]));
    }
    out[t * H8 + i] = pack_bf16x8(acc);
  }
}

}  // namespace

void launch_moe_topk(const uint16_t* logits, int64_t T, int64_t E, int64_t K, const uint16_t* per_expert_scale,
                     float* probs, int32_t* top_idx, float* top_w, int32_t* order, cudaStream_t stream) {
  if (T <= 0) return;
  if (fused_moe_routing() && launch_moe_topk_reg(logits, T, E, K, per_expert_scale, probs, top_idx, top_w, order, stream))
    return;
  const size_t shared = static_cast<size_t>(kTopkWarps) * static_cast<size_t>(2 * E + K) * 4;
  if (shared > 48 * 1024) {
    CUDA_CHECK(cudaFuncSetAttribute(topk_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(shared)));
  }
  topk_kernel<<<static_cast<unsigned>(ceil_div(T, kTopkWarps)), kTopkWarps * 32, shared, stream>>>(
      logits, T, static_cast<int>(E), static_cast<int>(K), per_expert_scale, probs, top_idx, top_w, order);
  CUDA_CHECK_LAUNCH();
}

void launch_moe_gather(const uint16_t* x, int64_t H, const int32_t* perm, int64_t R, int64_t K, uint16_t* xs,
                       cudaStream_t stream) {
  if (R * H <= 0) return;
  gather_kernel<<<grid_for(R * H, kThreads), kThreads, 0, stream>>>(x, H, perm, R, K, xs);
  CUDA_CHECK_LAUNCH();
}

void launch_moe_act(const uint16_t* gu, int64_t R, int64_t I, uint16_t* act, cudaStream_t stream) {
  if (R * I <= 0) return;
  act_kernel<<<grid_for(R * I, kThreads), kThreads, 0, stream>>>(gu, R, I, act);
  CUDA_CHECK_LAUNCH();
}

void launch_moe_weight(const uint16_t* ys, const int32_t* perm, const float* w, int64_t R, int64_t H, uint16_t* y,
                       cudaStream_t stream) {
  if (R * H <= 0) return;
  weight_kernel<<<grid_for(R * H, kThreads), kThreads, 0, stream>>>(ys, perm, w, R, H, y);
  CUDA_CHECK_LAUNCH();
}

void launch_moe_combine(const uint16_t* y, const int32_t* order, int64_t T, int64_t K, int64_t H, uint16_t* out,
                        cudaStream_t stream) {
  if (T <= 0 || H <= 0) return;
  if (fused_moe_routing() && launch_moe_combine_vec(y, order, T, K, H, out, stream)) return;
  if (vec8_ok(H, y, out)) {
    combine_vec_kernel<<<static_cast<unsigned>(T), threads_for_row(H / 8), 0, stream>>>(
        reinterpret_cast<const uint4*>(y), order, K, H / 8, reinterpret_cast<uint4*>(out));
  } else {
    combine_kernel<<<static_cast<unsigned>(T), threads_for_row(H), 0, stream>>>(y, order, K, H, out);
  }
  CUDA_CHECK_LAUNCH();
}

}  // namespace dgemma::cuda
