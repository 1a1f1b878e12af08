#include "gpu_checks.h"

namespace dgemma::gpu_test {

std::vector<Case> op_cases();     // gpu_check_ops.cpp
std::vector<Case> model_cases();  // gpu_check_model.cpp
std::vector<Case> trajectory_cases();  // gpu_check_trajectory.cpp
std::vector<Case> graph_cases();       // gpu_check_graphs.cpp
std::vector<Case> flash_attention_cases();  // gpu_check_flash_attention.cpp
std::vector<Case> grouped_moe_cases();      // gpu_check_grouped_moe.cpp
std::vector<Case> decide_cases();           // gpu_check_decide.cpp
std::vector<Case> guided_cases();           // gpu_check_guided.cpp
std::vector<Case> quant_cases();            // gpu_check_quant.cpp
std::vector<Case> quant_large_cases();      // gpu_check_quant_large.cpp
std::vector<Case> nccl_cases();             // gpu_check_nccl.cpp
std::vector<Case> tensor_parallel_cases();  // gpu_check_tensor_parallel.cpp
std::vector<Case> sample_filter_cases();    // gpu_check_sample_filter.cpp
std::vector<Case> batch_cases();            // gpu_check_batch.cpp
std::vector<Case> small_kernel_cases();     // gpu_check_small_kernels.cpp
std::vector<Case> memory_cases();           // gpu_check_memory.cpp
std::vector<Case> fused_gemm_cases();       // gpu_check_fused_gemm.cpp
std::vector<Case> w8a8_cases();             // gpu_check_w8a8.cpp
std::vector<Case> w8a8_moe_cases();         // gpu_check_quant.cpp
std::vector<Case> fp8_rows_cases();         // gpu_check_fp8_rows.cpp
std::vector<Case> vision_cases();           // gpu_check_vision.cpp

std::vector<Case> all_cases() {
  std::vector<Case> all = op_cases();
  for (auto& c : flash_attention_cases()) all.push_back(std::move(c));
  for (auto& c : grouped_moe_cases()) all.push_back(std::move(c));
  for (auto& c : decide_cases()) all.push_back(std::move(c));
  for (auto& c : guided_cases()) all.push_back(std::move(c));
  for (auto& c : sample_filter_cases()) all.push_back(std::move(c));
  for (auto& c : batch_cases()) all.push_back(std::move(c));
  for (auto& c : small_kernel_cases()) all.push_back(std::move(c));
  for (auto& c : memory_cases()) all.push_back(std::move(c));
  for (auto& c : fused_gemm_cases()) all.push_back(std::move(c));
  for (auto& c : quant_cases()) all.push_back(std::move(c));
  for (auto& c : quant_large_cases()) all.push_back(std::move(c));
  for (auto& c : model_cases()) all.push_back(std::move(c));
  for (auto& c : vision_cases()) all.push_back(std::move(c));
  for (auto& c : trajectory_cases()) all.push_back(std::move(c));
  for (auto& c : graph_cases()) all.push_back(std::move(c));
  for (auto& c : nccl_cases()) all.push_back(std::move(c));
  for (auto& c : tensor_parallel_cases()) all.push_back(std::move(c));
  // Last: the W8A8 paths, the newest kernels (a sticky CUDA error there would fail every later check).
  for (auto& c : w8a8_cases()) all.push_back(std::move(c));
  for (auto& c : w8a8_moe_cases()) all.push_back(std::move(c));
  for (auto& c : fp8_rows_cases()) all.push_back(std::move(c));
  return all;
}

}  // namespace dgemma::gpu_test
