#pragma once
// CUDA graphs of a backend's stream (Backend::capture): the work a callable enqueues is recorded
// instead of run, instantiated once, and replayed as one launch. Host C++ only.
#include <functional>
#include <memory>

#include "backend/backend.h"
#include "backend/cuda/core/context.h"

namespace dgemma::cuda {

// Records what `body` enqueues on ctx.stream (relaxed capture mode: the caching allocator may take new
// blocks from the driver meanwhile; they come from its graph pool). Throws, leaving the stream out of
// capture, if the body throws or the recording fails (a host copy or a synchronisation inside it).
std::unique_ptr<StepGraph> capture_graph(const Context& ctx, const std::function<void()>& body);

// The two ends of a recording begun on ctx.stream (cudaStreamBeginCapture; other streams may have
// joined it): end_capture instantiates it as a graph replayed on ctx.stream, and throws, the streams
// out of capture, if the recording failed; abandon_capture drops it whatever its state.
std::unique_ptr<StepGraph> end_capture(const Context& ctx);
void abandon_capture(const Context& ctx);

}  // namespace dgemma::cuda
