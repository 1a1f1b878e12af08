#pragma once
// CPU reference kernels (declared here, one group per file). fp32 maths, bf16 rounding exactly where
// the reference rounds; threaded with parallel_for; results do not depend on the thread count.
#include <cmath>

#include "backend/backend.h"

namespace dgemma::cpu {

void matmul(const Tensor& x, const Weight& w, const Tensor& out);     // matmul.cpp
void matmul_fp8(const Fp8Rows& x, const Weight& w, const Tensor& out);  // matmul.cpp
void matmul_kn(const Tensor& x, const Tensor& w, const Tensor& out);  // matmul.cpp
void matmul_kn_blocks(const Tensor& x, const Tensor& w, int blocks, const Tensor& out);  // matmul.cpp
void sum_blocks(const Tensor& partials, const Tensor& out);           // matmul.cpp
void attention(const AttentionArgs& a);                               // attention.cpp
void moe(const MoeArgs& a);                                           // moe.cpp
void sampler(const SamplerArgs& a);                                   // sampler.cpp
void decide(const DecideArgs& a);                                     // decide.cpp
// Host tensors only (the Backend defaults call them through the host).
void rope_2d(const Tensor& x, const Tensor& positions, const Tensor& inv_freq);  // vision_ops.cpp
void vision_pool(const VisionPoolArgs& a);                                       // vision_ops.cpp

// gelu_pytorch_tanh in fp32, exactly PyTorch's formula.
inline float gelu_tanh(float x) {
  constexpr float kBeta = 0.7978845608028654f;  // sqrt(2) * (2/sqrt(pi)) * 0.5
  constexpr float kKappa = 0.044715f;
  const float cube = x * x * x;
  const float inner = kBeta * (x + kKappa * cube);
  return 0.5f * x * (1.0f + std::tanh(inner));
}

}  // namespace dgemma::cpu
