#include "backend/cuda/core/graph.h"

#include <cuda_runtime.h>

#include "backend/cuda/core/check.h"
#include "util/error.h"

namespace dgemma::cuda {
namespace {

class CudaStepGraph final : public StepGraph {
 public:
  CudaStepGraph(cudaGraphExec_t exec, Stream stream, int device) : exec_(exec), stream_(stream), device_(device) {}
  ~CudaStepGraph() override {
    if (exec_ != nullptr) cudaGraphExecDestroy(exec_);
  }
  CudaStepGraph(const CudaStepGraph&) = delete;
  CudaStepGraph& operator=(const CudaStepGraph&) = delete;

  void replay() override {
    int cur = -1;
    CUDA_CHECK(cudaGetDevice(&cur));
    if (cur != device_) CUDA_CHECK(cudaSetDevice(device_));
    stream_.count_launch();
    CUDA_CHECK(cudaGraphLaunch(exec_, stream_));
  }

 private:
  cudaGraphExec_t exec_ = nullptr;
  Stream stream_;
  int device_ = 0;
};

}  // namespace

std::unique_ptr<StepGraph> capture_graph(const Context& ctx, const std::function<void()>& body) {
  ctx.sync();  // nothing of earlier work may end up in the recording
  ctx.allocator->begin_graph_pool();
  CUDA_CHECK(cudaStreamBeginCapture(ctx.stream, cudaStreamCaptureModeRelaxed));
  try {
    body();
  } catch (...) {
    abandon_capture(ctx);
    ctx.allocator->end_graph_pool();
    throw;
  }
  ctx.allocator->end_graph_pool();
  return end_capture(ctx);
}

std::unique_ptr<StepGraph> end_capture(const Context& ctx) {
  cudaGraph_t graph = nullptr;
  const cudaError_t ended = cudaStreamEndCapture(ctx.stream, &graph);
  if (ended != cudaSuccess || graph == nullptr) {
    cudaGetLastError();
    if (graph != nullptr) cudaGraphDestroy(graph);
    fail(ErrorKind::kInternal, "CUDA graph capture failed: {} (the recorded work synchronised or copied from the host)",
         cudaGetErrorString(ended));
  }
  cudaGraphExec_t exec = nullptr;
  const cudaError_t made = cudaGraphInstantiate(&exec, graph, 0);
  cudaGraphDestroy(graph);
  if (made != cudaSuccess) {
    cudaGetLastError();
    fail(ErrorKind::kInternal, "CUDA graph instantiation failed: {}", cudaGetErrorString(made));
  }
  return std::make_unique<CudaStepGraph>(exec, ctx.stream, ctx.device);
}

void abandon_capture(const Context& ctx) {
  cudaGraph_t graph = nullptr;
  cudaStreamEndCapture(ctx.stream, &graph);  // leaves capture mode whatever the state
  if (graph != nullptr) cudaGraphDestroy(graph);
  cudaGetLastError();
}

}  // namespace dgemma::cuda
