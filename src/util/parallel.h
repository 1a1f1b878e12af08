#pragma once
// parallel_for over [0, n) on a fixed pool of worker threads (the CPU backend's threading).
#include <cstddef>
#include <functional>

namespace dgemma {

// Number of threads parallel_for uses (default: hardware concurrency; DGEMMA_THREADS overrides).
int parallel_threads();
void set_parallel_threads(int n);

// Calls fn(begin, end) on disjoint chunks covering [0, n). Blocks until all chunks are done.
// Deterministic: the chunking never affects results as long as fn writes only its own range.
void parallel_for(size_t n, const std::function<void(size_t, size_t)>& fn, size_t min_chunk = 1);

}  // namespace dgemma
