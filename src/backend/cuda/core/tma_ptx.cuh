#pragma once
// Inline PTX of Hopper's transaction barriers (mbarrier) and tensor-memory-accelerator copies (TMA,
// cp.async.bulk.tensor) for the warp-specialised grouped GEMM (moe/grouped_tma_kernel.cuh); sm_90a
// only, like core/wgmma_ptx.cuh (elsewhere the bodies trap and moe/grouped.cu never launches the kernel).
// The emulated unit tests define the same functions on the host (tests/unit/backend/cuda_emulator.h).
//
// An mbarrier is 8 bytes of shared memory counting arrivals of its current phase and the bytes its
// copies still owe (the transaction count); the phase completes when both reach zero, and waiting on
// a phase's parity returns once it has (a fresh barrier's phase "before the first" counts as done,
// so a producer's first wait on an empty barrier passes at once).
#include <cstdint>

#include <cuda.h>

#include "backend/cuda/core/wgmma_ptx.cuh"

namespace dgemma::cuda {

// The TMA descriptor of a 2-D bf16 tensor (moe/grouped.cu encodes it on the host): a kernel parameter
// (__grid_constant__), read by the copies through its generic address.
using TmaMap = CUtensorMap;

__device__ __forceinline__ void mbar_init(uint32_t bar, uint32_t arrivals) {
#ifdef DG_HAVE_WGMMA
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(bar), "r"(arrivals) : "memory");
#endif
}
// The initialised barriers visible to the other threads and to the async proxy (then a __syncthreads).
__device__ __forceinline__ void mbar_fence_init() {
#ifdef DG_HAVE_WGMMA
  asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
#endif
}
__device__ __forceinline__ void mbar_arrive(uint32_t bar) {
#ifdef DG_HAVE_WGMMA
  asm volatile("{\n.reg .b64 state;\nmbarrier.arrive.shared::cta.b64 state, [%0];\n}\n" ::"r"(bar) : "memory");
#endif
}
// One arrival that also makes the phase wait for `bytes` more of copies (the TMA loads that follow).
__device__ __forceinline__ void mbar_arrive_expect_tx(uint32_t bar, uint32_t bytes) {
#ifdef DG_HAVE_WGMMA
  asm volatile("{\n.reg .b64 state;\nmbarrier.arrive.expect_tx.shared::cta.b64 state, [%0], %1;\n}\n" ::"r"(bar),
               "r"(bytes)
               : "memory");
#endif
}
// Spins until the phase of parity `parity` has completed.
__device__ __forceinline__ void mbar_wait(uint32_t bar, uint32_t parity) {
#ifdef DG_HAVE_WGMMA
  asm volatile(
      "{\n"
      ".reg .pred done;\n"
      "WAIT:\n"
      "mbarrier.try_wait.parity.shared::cta.b64 done, [%0], %1;\n"
      "@!done bra WAIT;\n"
      "}\n" ::"r"(bar),
      "r"(parity)
      : "memory");
#endif
}
// One arrival on `bar` once every cp.async this thread issued so far has landed (the barrier's
// arrival count includes it: noinc).
__device__ __forceinline__ void cp_async_mbar_arrive_noinc(uint32_t bar) {
#ifdef DG_HAVE_WGMMA
  asm volatile("cp.async.mbarrier.arrive.noinc.shared::cta.b64 [%0];\n" ::"r"(bar) : "memory");
#endif
}
// The box of the map at element (x, y) (x the contiguous dimension) into shared memory at dst,
// laid out as the map's swizzle says; its bytes count against bar's transaction count. Elements
// outside the tensor arrive as zeros (and still count).
__device__ __forceinline__ void tma_load_2d(uint32_t dst, const TmaMap* map, int x, int y, uint32_t bar) {
#ifdef DG_HAVE_WGMMA
  asm volatile(
      "cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%3, %4}], [%2];\n" ::"r"(
          dst),
      "l"(reinterpret_cast<uint64_t>(map)), "r"(bar), "r"(x), "r"(y)
      : "memory");
#else
  (void)dst;
  (void)map;
  (void)x;
  (void)y;
  (void)bar;
  __trap();
#endif
}

}  // namespace dgemma::cuda
