#pragma once
// Programmatic dependent launch in the kernels (core/launch.cuh launches with it): a kernel launched
// with the programmatic-stream-serialisation attribute may start while the kernel before it on the
// stream is still running. DG_GRIDDEP_WAIT() returns once the grids this one depends on have completed
// and their memory is visible; it returns at once when the launch had no such dependency, and it is a
// no-op on the host (the emulated unit tests run one block at a time, after every earlier kernel) and
// before sm_90. A kernel launched with the attribute runs it in every thread before its first read of
// anything an earlier kernel wrote and before its first write; only reads of what no kernel writes
// (weights) may come before it. DG_GRIDDEP_LAUNCH_DEPENDENTS() lets the next kernel of the stream, if
// launched with the attribute, start its blocks (up to their own wait) once every block of this grid
// has run it or exited; it never changes what that kernel reads.
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
#define DG_GRIDDEP_WAIT() asm volatile("griddepcontrol.wait;\n" ::: "memory")
#define DG_GRIDDEP_LAUNCH_DEPENDENTS() asm volatile("griddepcontrol.launch_dependents;\n" ::: "memory")
#else
#define DG_GRIDDEP_WAIT() ((void)0)
#define DG_GRIDDEP_LAUNCH_DEPENDENTS() ((void)0)
#endif
