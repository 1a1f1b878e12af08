#pragma once
// The macros of the kernel headers that the emulated unit tests also compile on the host
// (tests/unit/backend/cuda_emulator.h defines DG_KERNEL_DYNAMIC_SMEM its own way first).
#ifdef __CUDACC__
#define DG_UNROLL _Pragma("unroll")
#else
#define DG_UNROLL  // the host compiler of the emulated tests
#endif
#ifndef DG_KERNEL_DYNAMIC_SMEM
#define DG_KERNEL_DYNAMIC_SMEM(name) extern __shared__ __align__(128) unsigned char name[]
#endif
// Programmatic dependent launch (sm_90+; no-ops before and on the host). A kernel launched with
// core/launch.cuh's `programmatic` flag may start while the previous kernel in the stream still runs:
// DG_GRID_DEPENDENCY_WAIT() waits until that kernel has finished and its writes are visible, so only
// what comes before it (reads of memory older kernels wrote, copies of weights) overlaps that kernel.
// DG_LAUNCH_DEPENDENTS() lets the next such kernel start once every block of this one has run it (or
// exited); it orders no memory.
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
#define DG_GRID_DEPENDENCY_WAIT() asm volatile("griddepcontrol.wait;\n" ::: "memory")
#define DG_LAUNCH_DEPENDENTS() asm volatile("griddepcontrol.launch_dependents;\n" ::: "memory")
#else
#define DG_GRID_DEPENDENCY_WAIT() ((void)0)
#define DG_LAUNCH_DEPENDENTS() ((void)0)
#endif
// DG_OPAQUE(p): hides a pointer's value from the device compiler's arithmetic (an empty asm), so that
// an index added to it later is not folded back into the terms p was computed from (a per-block base
// reused by every element: one multiply-add an access instead of the whole sum again).
#ifdef __CUDA_ARCH__
#define DG_OPAQUE(p) asm("" : "+l"(p))
#else
#define DG_OPAQUE(p) ((void)0)
#endif
