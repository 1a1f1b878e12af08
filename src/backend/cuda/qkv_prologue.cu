// The fused attention prologue (qkv_prologue.cuh). Unfused, a layer runs three rmsnorm launches (q, k,
// v), two rope launches and, for K=V layers, a copy; each re-reads its rows and each rope launch
// recomputes the token's cos/sin. Here one block per token computes the bf16 cos/sin once, and each
// warp takes one head row at a time: sum of squares (lane-strided words, then the warp butterfly:
// rmsnorm_warp_kernel's order), the normed row rounded to bf16 into shared memory, then RoPE from
// there (each lane one output word: x1 * c - x2 * s for the first half, x2 * c + x1 * s for the
// second, every product and the sum rounded to bf16 as rope_kernel does). A K=V layer's k row also
// gives the v row (the unit norm of the raw k: the same sum of squares).
#include <algorithm>

#include "backend/cuda/common.cuh"
#include "backend/cuda/qkv_prologue.cuh"

namespace dgemma::cuda {
namespace {

constexpr int kMaxWarps = 16;  // 512 threads: two or three blocks per SM, all of a 256-token canvas at once
constexpr int kMaxD = 512;
constexpr size_t kSmemLimit = 48 * 1024;

struct QkvLaunch {
  uint4* q;
  uint4* k;
  uint4* v;
  // The inputs: head row h of token t of q at q_in + t * in_words + h * words (likewise k_in, v_in):
  // the outputs themselves (in place), or the column blocks of the fused projection.
  const uint4* q_in;
  const uint4* k_in;
  const uint4* v_in;
  int64_t q_in_words, k_in_words, v_in_words;
  const uint4* q_norm;
  const uint4* k_norm;
  const int32_t* positions;
  const float* inv_freq;
  int Hq, Hkv, D;
  bool k_eq_v;
  float eps;
};

// Dynamic shared memory: cos [D/2] f32, sin [D/2] f32, then one row of D bf16 per warp.
__global__ void qkv_prologue_kernel(QkvLaunch a) {
  extern __shared__ uint4 qsm[];
  const int D = a.D, half = D / 2, words = D / 8, hw = half / 8;
  float* c = reinterpret_cast<float*>(qsm);
  float* s = c + half;
  const int64_t t = blockIdx.x;
  const float p = static_cast<float>(a.positions[t]);
  for (int j = threadIdx.x; j < half; j += blockDim.x) {
    const float f = __fmul_rn(a.inv_freq[j], p);  // fp32, as inv_freq @ position_ids
    c[j] = round_bf16(cos_f32(f));
    s[j] = round_bf16(sin_f32(f));
  }
  __syncthreads();
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, nwarps = blockDim.x >> 5;
  uint4* buf = qsm + D / 4 + warp * words;  // D / 4 words: the cos and sin tables
  const int rows = a.Hq + (a.k_eq_v ? 1 : 2) * a.Hkv;
  for (int r = warp; r < rows; r += nwarps) {  // warp-uniform
    uint4* x;          // the output row
    const uint4* src;  // the input row (x itself unless the input is the fused projection)
    const uint4* w = nullptr;
    uint4* v_out = nullptr;  // K=V: the unit-normed raw k
    bool rope = true;
    if (r < a.Hq) {
      x = a.q + (t * a.Hq + r) * words;
      src = a.q_in + t * a.q_in_words + r * words;
      w = a.q_norm;
    } else if (r < a.Hq + a.Hkv) {
      const int64_t row = t * a.Hkv + (r - a.Hq);
      x = a.k + row * words;
      src = a.k_in + t * a.k_in_words + (r - a.Hq) * words;
      w = a.k_norm;
      if (a.k_eq_v) v_out = a.v + row * words;
    } else {
      x = a.v + (t * a.Hkv + (r - a.Hq - a.Hkv)) * words;
      src = a.v_in + t * a.v_in_words + (r - a.Hq - a.Hkv) * words;
      rope = false;
    }
    double ss = 0;
    for (int i = lane; i < words; i += 32) {
      const uint4 u = src[i];
      buf[i] = u;
      ss += word_squares(u);
    }
    ss = warp_reduce(ss, SumOp{});
    const float inv = inv_rms_of(ss, D, a.eps);
    for (int i = lane; i < words; i += 32) {
      float xv[8], y[8];
      unpack_bf16x8(buf[i], xv);
      if (v_out != nullptr) {
#pragma unroll
        for (int k = 0; k < 8; ++k) y[k] = __fmul_rn(xv[k], inv);
        v_out[i] = pack_bf16x8(y);
      }
      if (w != nullptr) {
        float ww[8];
        unpack_bf16x8(w[i], ww);
#pragma unroll
        for (int k = 0; k < 8; ++k) y[k] = __fmul_rn(__fmul_rn(xv[k], inv), ww[k]);
      } else {
#pragma unroll
        for (int k = 0; k < 8; ++k) y[k] = __fmul_rn(xv[k], inv);
      }
      if (rope)
        buf[i] = pack_bf16x8(y);  // read back by the lane that owns the partner word
      else
        x[i] = pack_bf16x8(y);
    }
    if (!rope) continue;
    __syncwarp();
    for (int i = lane; i < words; i += 32) {
      const bool first = i < hw;
      const int i1 = first ? i : i - hw;  // the word of x1 (x2 sits half a row later)
      float x1[8], x2[8], o[8];
      unpack_bf16x8(buf[i1], x1);
      unpack_bf16x8(buf[i1 + hw], x2);
      const float* cj = c + i1 * 8;
      const float* sj = s + i1 * 8;
#pragma unroll
      for (int k = 0; k < 8; ++k)
        o[k] = first ? round_bf16(__fadd_rn(round_bf16(__fmul_rn(x1[k], cj[k])), round_bf16(__fmul_rn(-x2[k], sj[k]))))
                     : round_bf16(__fadd_rn(round_bf16(__fmul_rn(x2[k], cj[k])), round_bf16(__fmul_rn(x1[k], sj[k]))));
      x[i] = pack_bf16x8(o);
    }
    __syncwarp();  // the warp's next row reuses the buffer
  }
}

size_t smem_bytes(int64_t D, int warps) { return static_cast<size_t>(D) * 4 + static_cast<size_t>(warps) * D * 2; }

}  // namespace

bool qkv_prologue_fusable(int64_t D, std::initializer_list<const void*> ptrs) {
  if (D <= 0 || D % 16 != 0 || D > kMaxD) return false;
  for (const void* p : ptrs)
    if ((reinterpret_cast<uintptr_t>(p) & 15u) != 0) return false;
  return true;
}

void launch_qkv_prologue(uint16_t* q, uint16_t* k, uint16_t* v, bool k_eq_v, const uint16_t* q_norm,
                         const uint16_t* k_norm, const int32_t* positions, const float* inv_freq, int64_t T,
                         int64_t Hq, int64_t Hkv, int64_t D, float eps, cudaStream_t stream, const uint16_t* qkv) {
  if (T <= 0) return;
  const int64_t rows = Hq + (k_eq_v ? 1 : 2) * Hkv;
  int warps = static_cast<int>(std::clamp<int64_t>(rows, 1, kMaxWarps));
  while (warps > 1 && smem_bytes(D, warps) > kSmemLimit) --warps;
  const int64_t words = D / 8;
  // Fused input: one row of `rows` head rows per token, q's heads, then k's, then v's.
  const uint4* fused = reinterpret_cast<const uint4*>(qkv);
  QkvLaunch a{reinterpret_cast<uint4*>(q),
              reinterpret_cast<uint4*>(k),
              reinterpret_cast<uint4*>(v),
              fused ? fused : reinterpret_cast<const uint4*>(q),
              fused ? fused + Hq * words : reinterpret_cast<const uint4*>(k),
              fused ? fused + (Hq + Hkv) * words : reinterpret_cast<const uint4*>(v),
              fused ? rows * words : Hq * words,
              fused ? rows * words : Hkv * words,
              fused ? rows * words : Hkv * words,
              reinterpret_cast<const uint4*>(q_norm),
              reinterpret_cast<const uint4*>(k_norm),
              positions,
              inv_freq,
              static_cast<int>(Hq),
              static_cast<int>(Hkv),
              static_cast<int>(D),
              k_eq_v,
              eps};
  qkv_prologue_kernel<<<static_cast<unsigned>(T), warps * 32, smem_bytes(D, warps), stream>>>(a);
  CUDA_CHECK_LAUNCH();
}

}  // namespace dgemma::cuda
