#include "backend/cuda/quant/weight_placement.h"

#include <algorithm>
#include <cstring>
#include <vector>

#include "backend/cuda/quant/layout.h"
#include "backend/cuda/quant/w8a8_experts.cuh"
#include "backend/quant_reference.h"
#include "util/bf16.h"
#include "util/error.h"
#include "util/parallel.h"

namespace dgemma::cuda {

bool wants_dense_w8a8(const Weight& host, const CudaOptions& options) {
  return host.data.ndim == 2 && options.dense_quant == DenseQuant::kW8A8 &&
         host.format == WeightFormat::kFp8Channel && host.act == ActQuant::kFp8Token;
}

WeightPlacement weight_placement(const Weight& host, const CudaOptions& options, bool dense_w8a8_supported) {
  const bool fp8 = host.format == WeightFormat::kFp8Channel;
  const bool kernel_shape = host.rows() % 8 == 0 && host.cols() % 64 == 0;
  if (host.data.ndim == 3) {  // expert stacks: W8A8 on FP8 wgmma, else the W8A16 / W4A16 kernels
    if (fp8 && host.act == ActQuant::kFp8Token && options.fp8_experts == Fp8Experts::kW8A8 &&
        grouped_w8a8_supported(host.rows(), host.cols(), nullptr))
      return WeightPlacement::kW8A8;
    return kernel_shape ? WeightPlacement::kKernel : WeightPlacement::kBf16;
  }
  if (dense_w8a8_supported && wants_dense_w8a8(host, options)) return WeightPlacement::kW8A8;
  return options.dense_quant != DenseQuant::kBf16 && kernel_shape ? WeightPlacement::kKernel
                                                                  : WeightPlacement::kBf16;
}

Weight repacked_for_kernels(const Weight& host) {
  Weight w = host;
  w.act = ActQuant::kNone;  // W4A16 / W8A16: bf16 activations
  if (host.format == WeightFormat::kNvfp4)
    DG_CHECK(host.block.device == Device::kCpu &&
             host.block.numel() == host.experts() * host.rows() * (host.cols() / 16));
  Tensor bytes = host.data.ndim == 3
                     ? host_tensor(host.data.type, {host.data.dim(0), host.data.dim(1), host.data.dim(2)})
                     : host_tensor(host.data.type, {host.data.dim(0), host.data.dim(1)});
  const int64_t n = static_cast<int64_t>(bytes.nbytes()), chunk = int64_t{1} << 20;  // whole rows per chunk
  const int64_t row = host.data.dim(-1), rows_per_chunk = std::max<int64_t>(1, chunk / row);
  const int64_t n_rows = n / row;
  parallel_for(static_cast<size_t>((n_rows + rows_per_chunk - 1) / rows_per_chunk), [&](size_t b, size_t e) {
    for (size_t c = b; c < e; ++c) {
      const int64_t r0 = static_cast<int64_t>(c) * rows_per_chunk, r1 = std::min(n_rows, r0 + rows_per_chunk);
      std::memcpy(bytes.ptr<uint8_t>() + r0 * row, host.data.ptr<uint8_t>() + r0 * row,
                  static_cast<size_t>((r1 - r0) * row));
      if (host.format == WeightFormat::kNvfp4)  // the device scale codes have no zero (quant/layout.h)
        zero_unscaled_blocks(bytes.ptr<uint8_t>() + r0 * row,
                             host.block.ptr<uint8_t>() + r0 * (host.cols() / 16), r1 - r0, host.cols());
      repack_quant_weights(host.format == WeightFormat::kFp8Channel, bytes.ptr<uint8_t>() + r0 * row,
                           (r1 - r0) * row);
    }
  });
  w.data = bytes;
  if (host.format == WeightFormat::kNvfp4) {  // block scales stage major (quant/layout.h), same dims
    Tensor scales = host_tensor(host.block.type, {host.block.numel()});
    const int64_t per_expert = host.rows() * (host.cols() / 16);
    parallel_for(static_cast<size_t>(host.experts()), [&](size_t b, size_t e) {
      for (size_t x = b; x < e; ++x)
        repack_block_scales(host.block.ptr<uint8_t>() + x * per_expert,
                            scales.ptr<uint8_t>() + x * per_expert, 1, host.rows(), host.cols());
    });
    w.block = host.block.ndim == 3 ? scales.reshape({host.experts(), host.rows(), host.cols() / 16})
                                   : scales.reshape({host.rows(), host.cols() / 16});
  }
  return w;
}

Tensor dequantized_bf16(const Weight& host) {
  DG_CHECK(host.data.device == Device::kCpu);
  const int64_t E = host.experts(), N = host.rows(), K = host.cols();
  Tensor bf = host.data.ndim == 3 ? host_tensor(ScalarType::kBF16, {E, N, K})
                                  : host_tensor(ScalarType::kBF16, {N, K});
  parallel_for(static_cast<size_t>(E * N), [&](size_t b, size_t e) {
    std::vector<float> row(static_cast<size_t>(K));
    for (size_t r = b; r < e; ++r) {
      const int64_t ex = static_cast<int64_t>(r) / N, n = static_cast<int64_t>(r) % N;
      quant_ref::dequant_rows(host, ex, n, 1, row.data());
      const float rs = quant_ref::row_scales(host, ex)[n];
      uint16_t* dst = bf.ptr<uint16_t>() + static_cast<int64_t>(r) * K;
      for (int64_t k = 0; k < K; ++k) dst[k] = f32_to_bf16(row[static_cast<size_t>(k)] * rs);
    }
  });
  return bf;
}

}  // namespace dgemma::cuda
