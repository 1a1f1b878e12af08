#pragma once
// The two macros of the kernel headers that the emulated unit tests also compile on the host
// (tests/unit/backend/cuda_emulator.h defines DG_KERNEL_DYNAMIC_SMEM its own way first).
#ifdef __CUDACC__
#define DG_UNROLL _Pragma("unroll")
#else
#define DG_UNROLL  // the host compiler of the emulated tests
#endif
#ifndef DG_KERNEL_DYNAMIC_SMEM
#define DG_KERNEL_DYNAMIC_SMEM(name) extern __shared__ __align__(128) unsigned char name[]
#endif
// DG_OPAQUE(p): hides a pointer's value from the device compiler's arithmetic (an empty asm), so that
// an index added to it later is not folded back into the terms p was computed from (a per-block base
// reused by every element: one multiply-add an access instead of the whole sum again).
#ifdef __CUDA_ARCH__
#define DG_OPAQUE(p) asm("" : "+l"(p))
#else
#define DG_OPAQUE(p) ((void)0)
#endif
