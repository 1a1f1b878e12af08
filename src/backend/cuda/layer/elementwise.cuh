#pragma once
// Element-wise bf16 ops (host launchers; kernels in layer/elementwise.cu). Every op rounds once to bf16,
// as the CPU backend does. In-place use (out aliasing an input) is allowed.
#include <cuda_runtime_api.h>

#include <cstdint>
#include <initializer_list>

#include "backend/cuda/core/stream.h"

namespace dgemma::cuda {

void launch_add(const uint16_t* a, const uint16_t* b, uint16_t* out, int64_t n, Stream stream);
void launch_scale(const uint16_t* x, float s, uint16_t* out, int64_t n, Stream stream);
// out[i] = bf16(a[i] * b[i % m])
void launch_mul(const uint16_t* a, const uint16_t* b, uint16_t* out, int64_t n, int64_t m, Stream stream);
// out[i] = bf16(bf16(gelu_tanh(g[i])) * u[i])
void launch_gelu_mul(const uint16_t* gate, const uint16_t* up, uint16_t* out, int64_t n, Stream stream);
// out[t, i] = bf16(bf16(gelu_tanh(g)) * u) with g = gate_up[t, i], u = gate_up[t, I + i]: gate_up [T, 2I],
// out [T, I] (not overlapping gate_up).
void launch_gelu_mul_halves(const uint16_t* gate_up, uint16_t* out, int64_t T, int64_t I, Stream stream);
// launch_gelu_mul_halves that also writes out's FP8 rows (backend.h Fp8Rows: codes q [T, I], scales [T]),
// where gelu_mul_halves_fp8_fusable: I a multiple of 8 up to 16,384 and every pointer 16-byte aligned.
bool gelu_mul_halves_fp8_fusable(int64_t I, std::initializer_list<const void*> ptrs);
void launch_gelu_mul_halves_fp8(const uint16_t* gate_up, uint16_t* out, uint8_t* q, float* scales, int64_t T,
                                int64_t I, Stream stream);
// out[i] (f32) = softcap * tanh(float(logits[i]) / softcap)
void launch_softcap(const uint16_t* logits, float softcap, float* out, int64_t n, Stream stream);
// out[i] = bf16(mean + std * rng::normal(key, i))
void launch_fill_normal(uint16_t* out, int64_t n, uint64_t key, float mean, float std, Stream stream);
// out[t] = bf16(table[ids[t]] * scale); ids outside [0, V) set `error_word` bit kErrEmbedTokenId and
// give a zero row.
void launch_embed(const int32_t* ids, int64_t T, const uint16_t* table, int64_t V, int64_t H, float scale,
                  uint16_t* out, unsigned* error_word, Stream stream);

}  // namespace dgemma::cuda
