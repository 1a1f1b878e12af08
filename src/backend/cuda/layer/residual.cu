// The layer's residual junctions (layer/residual.cuh), the kernels of layer/residual_kernel.cuh: the row
// in registers, the blocks looping over the rows (as many as are resident at once).
#include "backend/cuda/core/common.cuh"
#include "backend/cuda/layer/residual.cuh"
#include "backend/cuda/layer/residual_kernel.cuh"
#include "util/error.h"

namespace dgemma::cuda {
namespace {

const uint4* words_of(const uint16_t* p) {
  return reinterpret_cast<const uint4*>(p);
}
uint4* words_of(uint16_t* p) {
  return reinterpret_cast<uint4*>(p);
}
residual::Fp8RowsOut fp8_out(uint8_t* q, float* s) {
  return residual::Fp8RowsOut{reinterpret_cast<uint2*>(q), s};
}

// One launch of kernel<kPer> of the plan (kPer 1, 2 or 4 words a thread) over `rows` rows.
template <class K1, class K2, class K4, class... Args>
void launch_junction(int64_t rows, const residual::Plan& plan, K1 k1, K2 k2, K4 k4, Stream stream,
                     const Args&... args) {
  auto run = [&](auto kernel) {
    constexpr size_t kSmem = residual::kScratchDoubles * sizeof(double);
    launch_kernel(stream, kernel, resident_grid(stream, kernel, plan.threads, kSmem, rows), plan.threads,
                  kSmem, args...);
  };
  switch (plan.per) {
    case 1:
      run(k1);
      break;
    case 2:
      run(k2);
      break;
    default:
      run(k4);
      break;
  }
}

}  // namespace

bool residual_fusable(int64_t n, std::initializer_list<const void*> ptrs) {
  if (n <= 0 || n % 8 != 0 || residual::plan_for(n / 8).per == 0) return false;
  for (const void* p : ptrs)
    if ((reinterpret_cast<uintptr_t>(p) & 15u) != 0) return false;
  return true;
}

void launch_attn_residual(const uint16_t* x, const uint16_t* o, const uint16_t* post_norm, uint16_t* h1,
                          const uint16_t* norm_a, uint16_t* out_a, const uint16_t* norm_b, uint16_t* out_b,
                          uint16_t* o_normed, const uint16_t* router_scale, float router_root,
                          uint16_t* router_out, uint8_t* qa, float* sa, uint8_t* qb, float* sb, int64_t rows,
                          int64_t n, float eps, Stream stream) {
  if (rows <= 0) return;
  const residual::Plan plan = residual::plan_for(n / 8);
  DG_CHECK(plan.per > 0);  // residual_fusable
  const residual::AttnArgs a{words_of(x),
                             words_of(o),
                             words_of(post_norm),
                             words_of(h1),
                             words_of(norm_a),
                             words_of(out_a),
                             words_of(norm_b),
                             words_of(out_b),
                             words_of(o_normed),
                             words_of(router_scale),
                             router_root,
                             words_of(router_out),
                             n / 8,
                             eps,
                             rows};
  if (qa != nullptr || qb != nullptr)
    launch_junction(rows, plan, residual::attn_residual_fp8_kernel<1>, residual::attn_residual_fp8_kernel<2>,
                    residual::attn_residual_fp8_kernel<4>, stream, a, fp8_out(qa, sa), fp8_out(qb, sb));
  else
    launch_junction(rows, plan, residual::attn_residual_kernel<1>, residual::attn_residual_kernel<2>,
                    residual::attn_residual_kernel<4>, stream, a);
}

void launch_ffn_residual(const uint16_t* h1, const uint16_t* m1, const uint16_t* m2, MoeSlotRows m2_slots,
                         const uint16_t* norm1, const uint16_t* norm2, const uint16_t* norm_f, float scale,
                         uint16_t* out, uint16_t* m1n, uint16_t* m2n, uint16_t* f, const uint16_t* next_norm,
                         uint16_t* next_out, uint8_t* qn, float* sn, int64_t rows, int64_t n, float eps,
                         Stream stream) {
  if (rows <= 0) return;
  const residual::Plan plan = residual::plan_for(n / 8);
  DG_CHECK(plan.per > 0);  // residual_fusable
  DG_CHECK((m2 == nullptr) == (m2_slots.rows != nullptr) &&
           (m2_slots.rows == nullptr || (m2_slots.order != nullptr && m2_slots.top_k >= 1)));
  const residual::FfnArgs a{words_of(h1),
                            words_of(m1),
                            words_of(m2),
                            words_of(norm1),
                            words_of(norm2),
                            words_of(norm_f),
                            scale,
                            words_of(out),
                            words_of(m1n),
                            words_of(m2n),
                            words_of(f),
                            words_of(next_norm),
                            words_of(next_out),
                            n / 8,
                            eps,
                            rows,
                            words_of(m2_slots.rows),
                            m2_slots.order,
                            m2_slots.top_k};
  if (qn != nullptr) {
    DG_CHECK(next_out != nullptr);
    launch_junction(rows, plan, residual::ffn_residual_fp8_kernel<1>, residual::ffn_residual_fp8_kernel<2>,
                    residual::ffn_residual_fp8_kernel<4>, stream, a, fp8_out(qn, sn));
  } else {
    launch_junction(rows, plan, residual::ffn_residual_kernel<1>, residual::ffn_residual_kernel<2>,
                    residual::ffn_residual_kernel<4>, stream, a);
  }
}

}  // namespace dgemma::cuda
