// Attention on the GPU with the CPU reference's rounding points (cpu/attention.cpp):
//   S = bf16(q . k^T)            cuBLAS, fp32 accumulation, bf16 output (one rounding)
//   P = bf16(softmax_fp32(bf16(S * scaling)) over visible keys)     attention/per_item.cu
//   O = bf16(P . V)              cuBLAS, fp32 accumulation over cached and new keys, one rounding
// Layout: query rows are regrouped by head ([Hq, n, D]) so that the query rows of one KV head form one
// matrix, and each GEMM is one strided-batched cuBLAS call over the KV heads (GQA without copying K/V).
// Cached keys (gathered from the paged pool into [Hkv, L, D]) and new keys [n, Hkv, D] are two operands of
// the same product: the score row holds the cached keys in columns [0, L) and the new ones from column
// Lpad (L rounded up to 8, so that every operand stays 16-byte aligned); P.V accumulates both parts in
// fp32 (beta = 1) before the single rounding. Long contexts: the queries are processed in chunks that keep
// the score buffer under a budget (CudaOptions::attention_score_budget); there is no limit on the number of
// keys beyond memory. attention_batch (all items of a layer) runs attention/flash.cu in one launch for head
// dims 64/128/256/512 (CudaOptions::attention kAuto), else the backend's default (this attention()
// per item).
#include "backend/cuda/attention/attention.h"

#include <algorithm>

#include "backend/cuda/attention/flash.cuh"
#include "backend/cuda/attention/per_item.cuh"
#include "backend/cuda/core/check.h"
#include "backend/cuda/core/kv_cache.cuh"
#include "util/error.h"

namespace dgemma::cuda {

namespace {
bool aligned16(const void* p) { return (reinterpret_cast<uintptr_t>(p) & 15u) == 0; }
int64_t round_up(int64_t x, int64_t m) { return (x + m - 1) / m * m; }

// The flash kernels' head dims; another one (the vision tower's 72) runs at the next of them.
constexpr int64_t kFlashHeadDims[] = {64, 128, 256, 512};
int64_t padded_head_dim(int64_t D) {
  for (const int64_t d : kFlashHeadDims)
    if (D <= d) return D == d ? 0 : d;
  return 0;
}

// rows x D of `src` into the first D columns of rows x Dp `dst` (the rest zeros), or back (`unpad`).
void pad_columns(const Context& ctx, const Tensor& small, const Tensor& wide, int64_t rows, int64_t D,
                 int64_t Dp, bool unpad) {
  const size_t w = static_cast<size_t>(D) * 2, wp = static_cast<size_t>(Dp) * 2;
  if (!unpad) CUDA_CHECK(cudaMemsetAsync(wide.data, 0, wide.nbytes(), ctx.stream));
  if (unpad)
    CUDA_CHECK(cudaMemcpy2DAsync(small.data, w, wide.data, wp, w, static_cast<size_t>(rows),
                                 cudaMemcpyDeviceToDevice, ctx.stream));
  else
    CUDA_CHECK(cudaMemcpy2DAsync(wide.data, wp, small.data, w, w, static_cast<size_t>(rows),
                                 cudaMemcpyDeviceToDevice, ctx.stream));
}

}  // namespace

// Items without caches at a head dim the flash kernels have no tiles for (D a multiple of 8 below 512):
// q, k and v padded with zero columns to the next supported head dim (the scores are the same sums; the
// padded value columns give zeros, dropped), the flash kernel at that head dim, the output's first D
// columns. False where that does not apply (the per-item path then runs).
static bool padded_head_dims(const Context& ctx, const AttentionBatchArgs& a, bool any_cache) {
  const int64_t T = a.q.dim(0), Hq = a.q.dim(1), D = a.q.dim(2), Hkv = a.k_new.dim(1);
  const int64_t Dp = padded_head_dim(D);
  if (any_cache || Dp == 0 || D % 8 != 0) return false;
  for (const AttentionItem& it : a.host_items)
    if (it.cache_len > 0) return false;
  AttentionBatchArgs p = a;
  p.q = ctx.alloc(ScalarType::kBF16, {T, Hq, Dp});
  p.k_new = ctx.alloc(ScalarType::kBF16, {T, Hkv, Dp});
  p.v_new = ctx.alloc(ScalarType::kBF16, {T, Hkv, Dp});
  p.out = ctx.alloc(ScalarType::kBF16, {T, Hq, Dp});
  pad_columns(ctx, a.q, p.q, T * Hq, D, Dp, false);
  pad_columns(ctx, a.k_new, p.k_new, T * Hkv, D, Dp, false);
  pad_columns(ctx, a.v_new, p.v_new, T * Hkv, D, Dp, false);
  if (!attention_batch(ctx, p)) return false;
  pad_columns(ctx, a.out, p.out, T * Hq, D, Dp, true);
  return true;
}

void attention(const Context& ctx, const AttentionArgs& a) {
  const char* op = "attention";
  need_type(a.q, ScalarType::kBF16, op, "q");
  need_type(a.k_new, ScalarType::kBF16, op, "k_new");
  need_type(a.v_new, ScalarType::kBF16, op, "v_new");
  need_type(a.out, ScalarType::kBF16, op, "out");
  DG_CHECK(a.q.ndim == 3 && a.k_new.ndim == 3 && a.v_new.ndim == 3);
  const int64_t n = a.q.dim(0), Hq = a.q.dim(1), D = a.q.dim(2);
  const int64_t Hkv = a.k_new.dim(1);
  DG_CHECK(Hkv > 0 && Hq % Hkv == 0 && D > 0);
  DG_CHECK(a.k_new.dim(0) == n && a.k_new.dim(2) == D);
  DG_CHECK(a.v_new.dim(0) == n && a.v_new.dim(1) == Hkv && a.v_new.dim(2) == D);
  DG_CHECK(a.out.numel() == n * Hq * D);
  const int64_t L = a.cache_len;
  DG_CHECK(L >= 0 && a.cache_first >= 0);
  if (L > 0) {
    need_type(a.k_pages, ScalarType::kBF16, op, "k_pages");
    need_type(a.v_pages, ScalarType::kBF16, op, "v_pages");
    need_type(a.page_table, ScalarType::kI32, op, "page_table");
    DG_CHECK(a.k_pages.ndim == 4 && a.v_pages.ndim == 4 && D % 8 == 0);
    DG_CHECK(a.k_pages.dim(1) == Hkv && a.k_pages.dim(3) == D && a.v_pages.numel() == a.k_pages.numel());
    DG_CHECK((a.cache_first + L - 1) / a.k_pages.dim(2) < a.page_table.numel());
  }
  // The cached keys of the sequence are gathered from the paged pool into contiguous [Hkv, L, D]
  // operands (one copy of the visible cache per call), then both paths below run as on a contiguous
  // cache with cap = L.
  Tensor k_gathered, v_gathered;
  const int64_t cap = L;
  if (L > 0) {
    const int64_t P = a.k_pages.dim(2);
    k_gathered = ctx.alloc(ScalarType::kBF16, {Hkv * L * D});
    v_gathered = ctx.alloc(ScalarType::kBF16, {Hkv * L * D});
    launch_kv_gather(a.k_pages.ptr<uint16_t>(), Hkv, P, D, a.page_table.ptr<int32_t>(), a.cache_first, L,
                     k_gathered.ptr<uint16_t>(), ctx.stream);
    launch_kv_gather(a.v_pages.ptr<uint16_t>(), Hkv, P, D, a.page_table.ptr<int32_t>(), a.cache_first, L,
                     v_gathered.ptr<uint16_t>(), ctx.stream);
  }
  if (n == 0) return;
  // The item's image blocks where the softmax reads them: on the device.
  check_image_blocks(a.blocks, n);
  Tensor blocks = a.blocks_device;
  if (!a.blocks.empty() && blocks.empty()) {
    blocks = ctx.alloc(ScalarType::kI32, {static_cast<int64_t>(2 * a.blocks.size())});
    ctx.upload_small(blocks.data, a.blocks.data(), blocks.nbytes());
  }
  DG_CHECK(a.blocks.empty() ||
           (blocks.type == ScalarType::kI32 && blocks.numel() == static_cast<int64_t>(2 * a.blocks.size())));
  const ItemKeys rule{static_cast<int>(L),
                      static_cast<int>(n),
                      a.causal ? 1 : 0,
                      static_cast<int>(a.window),
                      a.blocks.empty() ? nullptr : blocks.ptr<int32_t>(),
                      static_cast<int>(a.blocks.size()),
                      a.blocks_windowed ? 1 : 0};

  const int64_t groups = Hq / Hkv;
  const int64_t Lpad = round_up(L, 8);
  const int64_t ld = round_up(Lpad + n, 8);
  const int64_t nc = std::clamp<int64_t>(std::max<int64_t>(ctx.options.attention_score_budget, 1) / (Hq * ld * 2), 1, n);
  Tensor qh = ctx.alloc(ScalarType::kBF16, {Hq * nc * D});
  Tensor scores = ctx.alloc(ScalarType::kBF16, {Hq * nc * ld});
  Tensor oh = ctx.alloc(ScalarType::kF32, {Hq * nc * D});
  const uint16_t* q = a.q.ptr<uint16_t>();
  const uint16_t* kc = L > 0 ? k_gathered.ptr<uint16_t>() : nullptr;
  const uint16_t* vc = L > 0 ? v_gathered.ptr<uint16_t>() : nullptr;
  const uint16_t* kn = a.k_new.ptr<uint16_t>();
  const uint16_t* vn = a.v_new.ptr<uint16_t>();
  uint16_t* S = scores.ptr<uint16_t>();

  for (int64_t i0 = 0; i0 < n; i0 += nc) {
    const int64_t c = std::min(nc, n - i0);
    const int64_t rows = groups * c;  // query rows of one KV head
    launch_attn_gather_q(q, Hq, D, i0, c, qh.ptr<uint16_t>(), ctx.stream);

    Gemm s;  // scores against the cached keys: [rows, D] . [L, D]^T per KV head
    s.a = qh.ptr<uint16_t>();
    s.lda = D;
    s.stride_a = rows * D;
    s.b_nk = true;
    s.ldc = ld;
    s.stride_c = rows * ld;
    s.M = rows;
    s.K = D;
    s.batch = Hkv;
    if (L > 0) {
      s.b = kc;
      s.ldb = D;
      s.stride_b = cap * D;
      s.c = S;
      s.N = L;
      gemm(ctx, s);
    }
    s.b = kn;  // against the new keys: row j of KV head h at kn + (j * Hkv + h) * D
    s.ldb = Hkv * D;
    s.stride_b = D;
    s.c = S + Lpad;
    s.N = n;
    gemm(ctx, s);

    launch_attn_softmax(S, Hq * c, ld, c, Lpad, i0, rule, a.scaling, ctx.stream);

    Gemm pv;  // O = P . V per KV head, fp32, cached part then new part accumulated
    pv.lda = ld;
    pv.stride_a = rows * ld;
    pv.b_nk = false;
    pv.c = oh.ptr<float>();
    pv.c_f32 = true;
    pv.ldc = D;
    pv.stride_c = rows * D;
    pv.M = rows;
    pv.N = D;
    pv.batch = Hkv;
    if (L > 0) {
      pv.a = S;
      pv.b = vc;
      pv.ldb = D;
      pv.stride_b = cap * D;
      pv.K = L;
      pv.beta = 0.0f;
      gemm(ctx, pv);
    }
    pv.a = S + Lpad;
    pv.b = vn;
    pv.ldb = Hkv * D;
    pv.stride_b = D;
    pv.K = n;
    pv.beta = L > 0 ? 1.0f : 0.0f;
    gemm(ctx, pv);

    launch_attn_scatter_out(oh.ptr<float>(), Hq, D, i0, c, a.out.ptr<uint16_t>(), ctx.stream);
  }
}

bool attention_batch(const Context& ctx, const AttentionBatchArgs& a) {
  if (ctx.options.attention == AttentionKernel::kPerItem) return false;
  const char* op = "attention_batch";
  need_type(a.q, ScalarType::kBF16, op, "q");
  need_type(a.k_new, ScalarType::kBF16, op, "k_new");
  need_type(a.v_new, ScalarType::kBF16, op, "v_new");
  need_type(a.out, ScalarType::kBF16, op, "out");
  need_type(a.items, ScalarType::kI32, op, "items");
  DG_CHECK(a.q.ndim == 3 && a.k_new.ndim == 3 && a.v_new.ndim == 3);
  const int64_t T = a.q.dim(0), Hq = a.q.dim(1), D = a.q.dim(2), Hkv = a.k_new.dim(1);
  DG_CHECK(Hkv > 0 && Hq % Hkv == 0 && a.k_new.dim(0) == T && a.k_new.dim(2) == D);
  DG_CHECK(a.v_new.dim(0) == T && a.v_new.dim(1) == Hkv && a.v_new.dim(2) == D && a.out.numel() == T * Hq * D);
  const int64_t N = static_cast<int64_t>(a.host_items.size());
  DG_CHECK(a.items.numel() == N * kAttentionItemFields);
  if (N == 0 || T == 0) return true;
  // Every item's ranges are checked here, on the host copy (the kernel trusts the device rows).
  // The pool goes to the kernel whenever there is one, whatever these items' caches: a recorded launch
  // replays over other items.
  const bool any_cache = !a.k_pages.empty() && !a.page_tables.empty();
  const int64_t P = a.k_pages.ndim == 4 ? a.k_pages.dim(2) : 0;
  for (const AttentionItem& it : a.host_items) {
    DG_CHECK(it.q_first >= 0 && it.q_len >= 0 && it.q_first + int64_t{it.q_len} <= T);
    DG_CHECK(it.cache_first >= 0 && it.cache_len >= 0 && it.window >= 0 && (it.causal == 0 || it.causal == 1));
    (void)item_image_blocks(it, a.host_blocks);
    if (it.cache_len == 0) continue;
    DG_CHECK(P > 0 && it.table_first >= 0 && it.table_len > 0 &&
             it.table_first + int64_t{it.table_len} <= a.page_tables.numel() &&
             (it.cache_first + int64_t{it.cache_len} - 1) / P < it.table_len);
  }
  const std::span<const AttentionItem> planned = a.plan_items.empty() ? a.host_items : a.plan_items;
  DG_CHECK(planned.size() == a.host_items.size());
  for (size_t i = 0; i < planned.size(); ++i)
    DG_CHECK(planned[i].q_first == a.host_items[i].q_first && planned[i].q_len == a.host_items[i].q_len &&
             planned[i].cache_len >= a.host_items[i].cache_len &&
             planned[i].causal == a.host_items[i].causal && planned[i].window == a.host_items[i].window &&
             planned[i].blocks_len == a.host_items[i].blocks_len &&
             planned[i].blocks_windowed == a.host_items[i].blocks_windowed);
  const bool any_blocks = !a.host_blocks.empty();
  if (any_blocks) {
    need_type(a.blocks, ScalarType::kI32, op, "blocks");
    DG_CHECK(a.blocks.numel() == 2 * static_cast<int64_t>(a.host_blocks.size()));
  }
  if (any_cache) {
    need_type(a.k_pages, ScalarType::kBF16, op, "k_pages");
    need_type(a.v_pages, ScalarType::kBF16, op, "v_pages");
    need_type(a.page_tables, ScalarType::kI32, op, "page_tables");
    DG_CHECK(a.k_pages.dim(1) == Hkv && a.k_pages.dim(3) == D && a.v_pages.numel() == a.k_pages.numel());
    if (!aligned16(a.k_pages.data) || !aligned16(a.v_pages.data)) return false;
  }
  if (!aligned16(a.q.data) || !aligned16(a.k_new.data) || !aligned16(a.v_new.data) || !aligned16(a.out.data))
    return false;
  const auto* host_items = reinterpret_cast<const int32_t*>(planned.data());
  const FlashAttentionPlan plan =
      plan_flash_attention(T, Hq, Hkv, D, host_items, static_cast<int>(N), ctx.hopper(), ctx.options.flash_splits, ctx.stream);
  if (plan.splits <= 0) return padded_head_dims(ctx, a, any_cache);  // another head dim
  Tensor ws;
  if (plan.workspace_bytes > 0) ws = ctx.alloc(ScalarType::kU8, {plan.workspace_bytes});
  launch_flash_attention(plan, plan.workspace_bytes > 0 ? ws.data : nullptr, a.q.ptr<uint16_t>(),
                         a.k_new.ptr<uint16_t>(), a.v_new.ptr<uint16_t>(),
                         any_cache ? a.k_pages.ptr<uint16_t>() : nullptr,
                         any_cache ? a.v_pages.ptr<uint16_t>() : nullptr, any_cache ? P : 1,
                         any_cache ? a.page_tables.ptr<int32_t>() : nullptr, a.items.ptr<int32_t>(),
                         any_blocks ? a.blocks.ptr<int32_t>() : nullptr, static_cast<int>(N),
                         a.out.ptr<uint16_t>(), T, Hq, Hkv, D, a.scaling, ctx.stream);
  return true;
}

}  // namespace dgemma::cuda
