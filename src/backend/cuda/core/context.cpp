#include "backend/cuda/core/context.h"

#include <cuda_runtime.h>

#include <chrono>
#include <climits>
#include <cstring>

#include "backend/cuda/core/check.h"
#include "backend/cuda/core/error_bits.h"
#include "util/error.h"
#include "util/log.h"

namespace dgemma::cuda {

// ---- DeviceAllocator ------------------------------------------------------------------------------

void* DeviceAllocator::Source::allocate(size_t bytes) {
  void* p = nullptr;
  const cudaError_t err = cudaMalloc(&p, bytes);
  if (err == cudaSuccess) return p;
  cudaGetLastError();  // clear it
  if (err == cudaErrorMemoryAllocation) return nullptr;
  throw Error(ErrorKind::kInternal,
              fmt::format("CUDA device {}: cudaMalloc of {} bytes failed: {}", device_, bytes, cudaGetErrorString(err)));
}

void DeviceAllocator::Source::free(void* p) {
  cudaFree(p);  // errors ignored: at process exit the CUDA runtime may already be shutting down
}

void DeviceAllocator::Source::synchronize() { CUDA_CHECK(cudaDeviceSynchronize()); }

DeviceAllocator::DeviceAllocator(int device)
    : source_(device), cache_(source_, fmt::format("CUDA device {}", device)) {}

void* DeviceAllocator::allocate(size_t bytes, size_t* rounded) {
  try {
    return cache_.allocate(bytes, rounded);
  } catch (const Error& e) {
    if (e.kind() != ErrorKind::kResourceExhausted) throw;
    size_t free_b = 0, total_b = 0;
    cudaMemGetInfo(&free_b, &total_b);
    cudaGetLastError();
    throw Error(ErrorKind::kResourceExhausted,
                fmt::format("{} [device: {} MiB free of {} MiB]", e.what(), free_b >> 20, total_b >> 20));
  }
}

void DeviceAllocator::release(void* p, size_t rounded) { cache_.release(p, rounded); }

void DeviceAllocator::trim() { cache_.trim(); }

// ---- StagingRing ----------------------------------------------------------------------------------

StagingRing::StagingRing(size_t bytes) : size_(bytes) {
  CUDA_CHECK(cudaHostAlloc(reinterpret_cast<void**>(&base_), size_, cudaHostAllocDefault));
  CUDA_CHECK(cudaEventCreateWithFlags(&last_, cudaEventDisableTiming));
}

StagingRing::~StagingRing() {
  if (last_ != nullptr) {
    cudaEventSynchronize(last_);
    cudaEventDestroy(last_);
  }
  if (base_ != nullptr) cudaFreeHost(base_);
}

bool StagingRing::copy_to_device(void* dst, const void* src, size_t n, cudaStream_t stream) {
  constexpr size_t kAlign = 256;
  const size_t need = (n + kAlign - 1) / kAlign * kAlign;
  if (need > size_ / 4) return false;
  std::lock_guard<std::mutex> lock(mu_);
  if (head_ + need > size_) {
    if (pending_) CUDA_CHECK(cudaEventSynchronize(last_));  // every earlier copy has read its bytes
    head_ = 0;
  }
  unsigned char* slot = base_ + head_;
  std::memcpy(slot, src, n);
  CUDA_CHECK(cudaMemcpyAsync(dst, slot, n, cudaMemcpyHostToDevice, stream));
  CUDA_CHECK(cudaEventRecord(last_, stream));
  pending_ = true;
  head_ += need;
  return true;
}

// ---- Context --------------------------------------------------------------------------------------

namespace {
int active_device(int device) {
  CUDA_CHECK(cudaSetDevice(device));
  return device;
}
}  // namespace

Context::Context(int device_index, const CudaOptions& resolved)
    : device(active_device(device_index)), options(resolved), occupancy(device_index) {
  stream.counters = &counters;
  stream.occupancy = &occupancy;
  stream.tma_maps = &tma_maps;
  // A blocking stream: it also orders against any legacy-default-stream work in the process.
  CUDA_CHECK(cudaStreamCreate(&stream.handle));
  CUBLAS_CHECK(cublasCreate(&cublas));
  CUBLAS_CHECK(cublasSetStream(cublas, stream));
  // No reduced-precision (bf16) split-K reductions: every output is rounded once from fp32, the
  // rounding point the CPU reference and transformers' GEMMs have.
  CUBLAS_CHECK(cublasSetMathMode(cublas, static_cast<cublasMath_t>(CUBLAS_DEFAULT_MATH |
                                                                    CUBLAS_MATH_DISALLOW_REDUCED_PRECISION_REDUCTION)));
  // A fixed workspace (what cuBLAS recommends on Hopper, and what CUDA-graph capture needs).
  cublas_workspace_bytes = size_t{32} << 20;
  CUDA_CHECK(cudaMalloc(&cublas_workspace, cublas_workspace_bytes));
  CUBLAS_CHECK(cublasSetWorkspace(cublas, cublas_workspace, cublas_workspace_bytes));
  allocator = std::make_shared<DeviceAllocator>(device);
  CUDA_CHECK(cudaHostAlloc(reinterpret_cast<void**>(&error_host), sizeof(unsigned), cudaHostAllocMapped));
  *error_host = 0;
  CUDA_CHECK(cudaHostGetDevicePointer(reinterpret_cast<void**>(&error_dev), error_host, 0));
  CUDA_CHECK(cudaMalloc(reinterpret_cast<void**>(&ticket), sizeof(unsigned)));
  CUDA_CHECK(cudaMemset(ticket, 0, sizeof(unsigned)));
  staging = std::make_unique<StagingRing>(size_t{16} << 20);
}

Context::~Context() {
  cudaStreamSynchronize(stream);
  staging.reset();
  if (cublas != nullptr) cublasDestroy(cublas);
  if (cublas_workspace != nullptr) cudaFree(cublas_workspace);
  if (error_host != nullptr) cudaFreeHost(error_host);
  if (ticket != nullptr) cudaFree(ticket);
  if (stream.handle != nullptr) cudaStreamDestroy(stream.handle);
}

Tensor Context::alloc_shape(ScalarType type, const int64_t* dims, int ndim) const {
  if (ndim > Tensor::kMaxDims) fail(ErrorKind::kInternal, "CUDA alloc: {} dimensions (at most {})", ndim, Tensor::kMaxDims);
  Tensor t;
  t.type = type;
  t.device = Device::kCuda;
  t.ndim = ndim;
  for (int i = 0; i < ndim; ++i) {
    if (dims[i] < 0) fail(ErrorKind::kInternal, "CUDA alloc: negative dimension {}", dims[i]);
    t.shape[i] = dims[i];
  }
  size_t rounded = 0;
  void* p = allocator->allocate(t.nbytes(), &rounded);
  std::shared_ptr<DeviceAllocator> a = allocator;
  t.owner = std::shared_ptr<void>(p, [a, rounded](void* q) { a->release(q, rounded); });
  t.data = p;
  if (options.poison_allocations && t.nbytes() > 0) CUDA_CHECK(cudaMemsetAsync(p, 0xFF, t.nbytes(), stream));
  return t;
}

Tensor Context::alloc(ScalarType type, std::initializer_list<int64_t> dims) const {
  return alloc_shape(type, dims.begin(), static_cast<int>(dims.size()));
}

void Context::check_error_word() const {
  const unsigned bits = *static_cast<volatile unsigned*>(error_host);
  if (bits == 0) return;
  *error_host = 0;
  if (bits & kErrEmbedTokenId)
    throw Error(ErrorKind::kInvalidArgument, "CUDA embed: a token id is outside [0, vocab_size)");
  throw Error(ErrorKind::kInternal, fmt::format("CUDA kernel reported error bits {:#x}", bits));
}

void Context::sync() const {
  const auto t0 = std::chrono::steady_clock::now();
  CUDA_CHECK(cudaStreamSynchronize(stream));
  counters.count_sync(static_cast<uint64_t>(
      std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - t0).count()));
  check_error_word();
}

void Context::upload_small(void* dst, const void* src, size_t n) const {
  if (n == 0) return;
  if (capturing())
    fail(ErrorKind::kInternal, "a host-to-device copy of {} bytes inside a CUDA graph capture (the step's inputs go up "
         "before the graph runs)", n);
  if (staging->copy_to_device(dst, src, n, stream)) return;
  CUDA_CHECK(cudaMemcpyAsync(dst, src, n, cudaMemcpyHostToDevice, stream));
  sync();
}

bool Context::capturing() const {
  cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
  CUDA_CHECK(cudaStreamIsCapturing(stream, &status));
  return status != cudaStreamCaptureStatusNone;
}

// ---- GEMM -----------------------------------------------------------------------------------------

void gemm(const Context& ctx, const Gemm& g) {
  if (g.M <= 0 || g.N <= 0 || g.batch <= 0) return;
  const size_t c_elem = g.c_f32 ? 4 : 2;
  if (g.K <= 0) {  // empty sum: C = beta * C; only the plain contiguous case is ever asked for
    DG_CHECK(g.batch == 1 && g.ldc == g.N && g.beta == 0.0f);
    CUDA_CHECK(cudaMemsetAsync(g.c, 0, static_cast<size_t>(g.M * g.N) * c_elem, ctx.stream));
    return;
  }
  for (int64_t v : {g.M, g.N, g.K, g.lda, g.ldb, g.ldc, g.batch}) DG_CHECK(v <= INT_MAX);
  DG_CHECK(g.lda >= g.K && g.ldc >= g.N && g.ldb >= (g.b_nk ? g.K : g.N));
  const float alpha = 1.0f;
  const float beta = g.beta;
  const cublasOperation_t op_b = g.b_nk ? CUBLAS_OP_T : CUBLAS_OP_N;
  const cudaDataType_t c_type = g.c_f32 ? CUDA_R_32F : CUDA_R_16BF;
  // Row-major C = A . op(B) is column-major C^T = op(B)^T . A^T: cuBLAS sees m = N, n = M.
  if (g.batch == 1) {
    ctx.stream.count_launch();
    CUBLAS_CHECK(cublasGemmEx(ctx.cublas, op_b, CUBLAS_OP_N, static_cast<int>(g.N), static_cast<int>(g.M),
                              static_cast<int>(g.K), &alpha, g.b, CUDA_R_16BF, static_cast<int>(g.ldb), g.a, CUDA_R_16BF,
                              static_cast<int>(g.lda), &beta, g.c, c_type, static_cast<int>(g.ldc), CUBLAS_COMPUTE_32F,
                              CUBLAS_GEMM_DEFAULT));
  } else {
    ctx.stream.count_launch();
    CUBLAS_CHECK(cublasGemmStridedBatchedEx(
        ctx.cublas, op_b, CUBLAS_OP_N, static_cast<int>(g.N), static_cast<int>(g.M), static_cast<int>(g.K), &alpha, g.b,
        CUDA_R_16BF, static_cast<int>(g.ldb), g.stride_b, g.a, CUDA_R_16BF, static_cast<int>(g.lda), g.stride_a, &beta,
        g.c, c_type, static_cast<int>(g.ldc), g.stride_c, static_cast<int>(g.batch), CUBLAS_COMPUTE_32F,
        CUBLAS_GEMM_DEFAULT));
  }
}

// ---- checks ---------------------------------------------------------------------------------------

void need_cuda(const Tensor& t, const char* op, const char* what) {
  if (t.empty()) fail(ErrorKind::kInternal, "CUDA {}: {} is empty", op, what);
  if (t.device != Device::kCuda) fail(ErrorKind::kInternal, "CUDA {}: {} is not on the GPU", op, what);
}

void need_type(const Tensor& t, ScalarType type, const char* op, const char* what) {
  need_cuda(t, op, what);
  if (t.type != type)
    fail(ErrorKind::kInternal, "CUDA {}: {} is {}, expected {}", op, what, scalar_name(t.type), scalar_name(type));
}

const Tensor& bf16_weight(const Weight& w, const char* op, const char* what) {
  if (w.format != WeightFormat::kBF16)
    fail(ErrorKind::kInternal, "CUDA {}: {} is a {} weight; only bf16 weights have kernels", op, what, weight_format_name(w.format));
  need_type(w.data, ScalarType::kBF16, op, what);
  return w.data;
}

}  // namespace dgemma::cuda
