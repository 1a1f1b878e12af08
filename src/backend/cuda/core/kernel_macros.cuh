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
// DG_GRID_DEPENDENCY_WAIT(): the first statement of every kernel. Launched on a programmatic stream
// (core/launch.cuh), a kernel's blocks may be scheduled before the previous kernel in the stream has
// finished: this waits until it has (its memory operations visible to this grid), then allows the next
// kernel's launch, whose blocks wait likewise. So no kernel's work overlaps another's; the launch and
// block scheduling of the next kernel overlap this one's last blocks. A no-op before sm_90 (no
// programmatic launch there) and on the host.
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
#define DG_GRID_DEPENDENCY_WAIT() asm volatile("griddepcontrol.wait;\n\tgriddepcontrol.launch_dependents;\n" ::: "memory")
#else
#define DG_GRID_DEPENDENCY_WAIT() ((void)0)
#endif
// DG_OPAQUE(p): hides a pointer's value from the device compiler's arithmetic (an empty asm), so that
// an index added to it later is not folded back into the terms p was computed from (a per-block base
// reused by every element: one multiply-add an access instead of the whole sum again).
#ifdef __CUDA_ARCH__
#define DG_OPAQUE(p) asm("" : "+l"(p))
#else
#define DG_OPAQUE(p) ((void)0)
#endif
