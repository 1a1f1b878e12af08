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
