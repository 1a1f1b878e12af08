#pragma once
// The flash attention kernel on Hopper warpgroup MMAs (sm_90a, the hopper family's; head dims 256 and
// 512), on attention/flash_mma_kernel.cuh's Params, item fields, find_item, round_score and
// pack_bf16x2, compiled on the host by the emulated unit tests too (tests/unit/backend/cuda_emulator.h
// emulates the wgmma forms, the transaction barriers, named barriers and the cp.async arrivals).
// Device wrappers: core/wgmma_ptx.cuh, core/tma_ptx.cuh (the barriers).
//
// The same launch (grid: row tiles of all items, KV heads, key splits), items, masks, rounding points
// and split partials as the mma.sync kernel (attention/flash_mma_kernel.cuh), so flash_combine_kernel merges
// its partials. A CTA is three warpgroups over query rows (the pairs (token, query head of the KV head's
// group), token-major) of one KV head, warp-specialised:
//   * warpgroup 0 produces: the query tile once, then the visible key range in tiles of BN keys, K and
//     V each into a ring of kStages shared-memory stages, by cp.async straight from the paged pool (the page
//     tables: a TMA box cannot follow them) and from k_new / v_new. Each producer thread's copies arrive on
//     the stage's "full" barrier once they have landed (cp.async.mbarrier.arrive.noinc); it waits on the
//     stage's "empty" barrier before refilling it. Lane i of a producer warp works out the pool row of the
//     i-th key row the warp copies (a page-table load), the lanes share them by shuffles, and each copy
//     instruction of the warp moves 512 contiguous bytes of a row.
//   * warpgroups 1 and 2 consume. Head dim 256: 128 rows a CTA, consumer c owns rows 64 c .. 64 c + 63
//     and all 256 output columns. Head dim 512 (whose 64 x 512 fp32 output would not fit a
//     warpgroup's registers): 64 rows a CTA, both consumers over the same rows, consumer c owning
//     output columns 256 c .. 256 c + 255 and summing the scores over head dims 256 c .. 256 c + 255;
//     the two partial score tiles meet in shared memory (double-buffered, one named barrier a tile;
//     both add them, and fp32 addition commutes, so both hold the same scores and softmax state) — no
//     MMA work is repeated. Per key tile, on the consumer's 256 score dims and 256 output columns:
//       S = Q . K^T   16 wgmma m64nBNk16, both operands K-major in shared memory (k16 steps of the
//                     head dim), fp32 accumulators, BN / 2 a thread;
//       softmax       on S's accumulator fragments (a thread holds rows g and g + 8 of its warp's 16,
//                     g = lane / 4, keys 8 i + 2 (lane % 4) + {0, 1}: the mma.sync C layout per n8
//                     block), the reference's roundings (below), row maxima over the quad;
//       O += P . V    BN / 16 wgmma m64n256k16, P from registers as the A operand (S's fragments of
//                     keys 16 kk .. 16 kk + 15, rounded to bf16, are exactly the A fragment of k16
//                     step kk), V as the transposed (MN-major) B operand from the same tile layout;
//                     O is the fp32 accumulator of 64 x 256, 128 registers a thread.
//     Intra-warpgroup overlap: tile t's S = Q . K_t is issued, then O += P_{t-1} . V_{t-1}, and the
//     warpgroup waits only for the first (wgmma.wait_group 1) before the softmax of tile t, which
//     thus runs while the tensor cores multiply P_{t-1} . V_{t-1}; O is rescaled by tile t's factor
//     and P_t packed once that product is done (wait_group 0: the in-flight P registers are not
//     written before). Each consumer warp's lane 0 arrives on a stage's "empty" barrier once the
//     warpgroup's MMA that read the stage has completed (K after its scores, V after its P.V).
//   The consumers take 224 registers a thread and the producers give theirs back (setmaxnreg: 48; BN
//   80: 232 and 40).
//
// Shared memory (1024-byte aligned, 128-byte swizzle: the wgmma operand layout): the query tile as
// D / 64 column chunks of [rows][128 bytes] (chunk c holds dims 64 c .. 64 c + 63 of each row, 16-byte
// unit u of row r at u ^ (r % 8)): a K-major A operand (8-row groups 1024 bytes apart, k16 step kk at
// chunk kk / 4, + 32 (kk % 4) bytes); K and V stages likewise as D / 64 chunks of [BN rows][128
// bytes]. K is the K-major B of the scores. V's chunk is, read the other way, an MN-major operand of
// 8-key x 64-dim atoms (1024 bytes, 8 keys apart along K) whose 64-dim atoms lie BN 128 bytes apart
// along N (sw128_mn_desc): the k16 step kk of the P.V product starts 2048 kk bytes into the stage
// (head dim 512: into its chunk 4 c). Then (head dim 512) the score exchange, then the barriers.
//   D 256, BN 80, 2 stages: Q 64 KB + K 2 x 40 KB + V 2 x 40 KB = 225 KB a CTA.
//   D 512, BN 32, 2 stages: Q 64 KB + K 2 x 32 KB + V 2 x 32 KB + exchange 2 x 2 x 8 KB = 225 KB.
// (The model's full layers derive V from the K projection, but V is normed without RoPE, so K and V
// are different tensors: the kernel reads both.)
//
// Rounding points, as the mma.sync kernel: s = bf16(bf16(q . k) * scaling) in log2 units, an
// online fp32 softmax, each probability (relative to the running maximum) rounded to bf16 once as the
// P.V operand, its fp32 value summed into the row sum, the fp32 output divided by the fp32 row sum
// at the end (or written as split partials with the maximum and the sum). The tensor cores sum the
// dot products in their own order: results match the mma.sync kernel to fp32 rounding of the dot
// products (a bf16 score now and then on its other neighbour), not bit for bit.
#include <cstdint>

#include "backend/cuda/attention/flash_mma_kernel.cuh"
#include "backend/cuda/core/wgmma_desc.cuh"
#ifdef __CUDACC__
#include "backend/cuda/core/tma_ptx.cuh"
#include "backend/cuda/core/wgmma_ptx.cuh"
#endif

namespace dgemma::cuda {
namespace flash {

template <int D, int BN, int Stages>
struct WgmmaShape {
  static constexpr bool kHalves = D == 512;               // consumers split the head dim
  static constexpr int kConsumers = 2;                    // warpgroups of 64 query rows
  static constexpr int kThreads = 128 * (1 + kConsumers);  // warpgroup 0 produces
  static constexpr int kRows = kHalves ? 64 : 64 * kConsumers;  // query rows of a CTA
  static constexpr int kDChunks = 1;                      // CTAs per row tile along the output columns
  static constexpr int kStages = Stages;
  static constexpr int kQBytes = kRows * D * 2;
  static constexpr int kTileBytes = BN * D * 2;  // one K or V stage
  static constexpr int kKOff = kQBytes;
  static constexpr int kVOff = kKOff + Stages * kTileBytes;
  static constexpr int kXOff = kVOff + Stages * kTileBytes;  // the score exchange (head dim 512)
  static constexpr int kXBytes = kHalves ? 2 * kConsumers * 64 * BN * 4 : 0;
  static constexpr int kBarOff = kXOff + kXBytes;
  static constexpr int kBarriers = 4 * Stages;
  static constexpr int kSmemBytes = kBarOff + 8 * kBarriers + 1024;  // + the 1024-byte alignment of the base
  static constexpr int kRowChunks = D / 8;             // 16-byte chunks of a row
  static constexpr int kCopyRows = 128 / kRowChunks;   // tile rows a producer pass copies
  static constexpr int kRowsPerThread = BN / kCopyRows;
  static constexpr int kProducerRegs = BN == 80 ? 40 : 48, kConsumerRegs = BN == 80 ? 232 : 224;
  static_assert(D == 256 || D == 512, "each consumer: 256 score dims (16 k16 steps), 256 output columns");
  static_assert(BN == 80 || BN == 32, "the scores are one m64nBN wgmma per k16 step");
  static_assert(Stages >= 2 && kRowsPerThread <= 32 && BN % kCopyRows == 0);
  static_assert(kProducerRegs * 128 + kConsumerRegs * 128 * kConsumers <= 65536 - 1024, "register file");
};

// Byte offset of 16-byte chunk `ch` (of D / 8) of row `row` in a tile of `rows` rows laid out as
// 128-byte column chunks [ch / 8][rows][128 bytes], swizzled.
template <int rows>
__device__ __forceinline__ uint32_t wg_tile_off(int row, int ch) {
  return static_cast<uint32_t>((ch >> 3) * rows * 128 + row * 128 + (((ch & 7) ^ (row & 7)) << 4));
}

// grid: (row tiles of all items, Hkv, splits); block: WgmmaShape::kThreads.
template <int D, int BN, int Stages>
__global__ void __launch_bounds__(WgmmaShape<D, BN, Stages>::kThreads, 1) flash_wgmma_kernel(const Params p) {
  using S = WgmmaShape<D, BN, Stages>;
  constexpr int kRows = S::kRows, kTileBytes = S::kTileBytes;
  constexpr bool kHalves = S::kHalves;
  DG_KERNEL_DYNAMIC_SMEM(smem);
  const int tid = threadIdx.x, wg = tid >> 7, lane = tid & 31;
  const int kvh = blockIdx.y, split = blockIdx.z;
  int tile = 0;
  const int item = find_item<kRows>(p, blockIdx.x, tile);
  if (item < 0) return;  // the whole CTA leaves together, before any barrier
  const int* meta = p.items + item * kFields;
  const int q_first = meta[kQFirst], n = meta[kQLen], cache_first = meta[kCacheFirst], L = meta[kCacheLen];
  const int table_first = meta[kTableFirst];
  const int groups = p.groups, rows = n * groups, r0 = tile * kRows;

  // The keys any row of the tile sees and this split's key tiles (attention/flash_mask.cuh).
  const ItemKeys rule = item_keys(meta, p.blocks);
  const TileKeys keys = tile_keys(rule, r0, kRows, groups, BN, p.splits, split);
  const int j_lo = keys.j_lo, j_hi = keys.j_hi, kt0 = keys.kt0, kt1 = keys.kt1;
  const int n_tiles = max(kt1 - kt0, 0);

  const uint32_t q_s = (smem_addr(smem) + 1023u) & ~1023u;
  const uint32_t k_s = q_s + S::kKOff, v_s = q_s + S::kVOff, bars = q_s + S::kBarOff;
  // Barriers of stage s: K full, K empty, V full, V empty.
  auto k_full = [&](int s) { return bars + 8 * s; };
  auto k_empty = [&](int s) { return bars + 8 * (Stages + s); };
  auto v_full = [&](int s) { return bars + 8 * (2 * Stages + s); };
  auto v_empty = [&](int s) { return bars + 8 * (3 * Stages + s); };
  if (tid == 0) {
    for (int s = 0; s < Stages; ++s) {
      mbar_init(k_full(s), 128);
      mbar_init(k_empty(s), 4 * S::kConsumers);
      mbar_init(v_full(s), 128);
      mbar_init(v_empty(s), 4 * S::kConsumers);
    }
    mbar_fence_init();
  }
  __syncthreads();

  if (wg == 0) {  // ---- producers
    setmaxnreg_dec<S::kProducerRegs>();
    if (n_tiles > 0) {  // the query tile (zeros past the item's rows): it lands with K tile 0
      for (int c = tid; c < kRows * S::kRowChunks; c += 128) {
        const int row = c / S::kRowChunks, qc = c % S::kRowChunks, rr = r0 + row;
        const bool valid = rr < rows;
        const int tok = valid ? rr / groups : 0, head = kvh * groups + (valid ? rr % groups : 0);
        const uint16_t* src = p.q + (static_cast<int64_t>(q_first + tok) * p.Hq + head) * D + qc * 8;
        cp_async16(q_s + wg_tile_off<kRows>(row, qc), src, valid);
      }
    }
    // This thread copies 16-byte chunk ch of rows row0 + kCopyRows i of each tile; lane i works out
    // the source of the i-th of them, as a row code: >= 0 a pool row ((page * Hkv + kvh) * P + pos %
    // P), -2 - r new-key row r of k_new / v_new, -1 no key (zero-filled, masked). 32 bits: the pool
    // has fewer than 2^31 rows (2^31 rows of 256 bf16 would be 1 TiB), k_new fewer than T * Hq.
    const int ch = tid % S::kRowChunks, row0 = tid / S::kRowChunks;
    const int my_row = row0 + S::kCopyRows * lane;
    const int32_t* table = p.tables + table_first;
    auto copy_tile = [&](uint32_t dst, const uint16_t* pool, const uint16_t* fresh, int code) {
#ifdef __CUDACC__
#pragma unroll 4
#endif
      for (int i = 0; i < S::kRowsPerThread; ++i) {
        const int v = __shfl_sync(0xffffffffu, code, i);
        const uint16_t* src = v >= 0 ? pool + static_cast<int64_t>(v) * D + ch * 8
                                     : fresh + (v == -1 ? 0 : static_cast<int64_t>(-2 - v) * D + ch * 8);
        cp_async16(dst + wg_tile_off<BN>(row0 + S::kCopyRows * i, ch), src, v != -1);
      }
    };
    for (int t = 0; t < n_tiles; ++t) {
      const int s = t % Stages;
      const uint32_t parity = ((t / Stages) & 1) ^ 1;
      const int j = j_lo + (kt0 + t) * BN + my_row;
      int code = -1;
      if (lane < S::kRowsPerThread && j < j_hi) {
        if (j < L) {
          const int pos = cache_first + j;
          code = (table[pos / p.page_size] * p.Hkv + kvh) * p.page_size + pos % p.page_size;
        } else {
          code = -2 - ((q_first + j - L) * p.Hkv + kvh);
        }
      }
      mbar_wait(k_empty(s), parity);  // the stage's previous K tile fully read
      copy_tile(k_s + s * kTileBytes, p.k_pages, p.k_new, code);
      cp_async_mbar_arrive_noinc(k_full(s));
      mbar_wait(v_empty(s), parity);
      copy_tile(v_s + s * kTileBytes, p.v_pages, p.v_new, code);
      cp_async_mbar_arrive_noinc(v_full(s));
    }
    return;
  }

  // ---- consumers: warpgroup c = wg - 1 owns the CTA's rows 64 c .. 64 c + 63 (head dim 512: all 64
  // rows, score dims and output columns 256 c .. 256 c + 255)
  setmaxnreg_inc<S::kConsumerRegs>();
  const int c = wg - 1, wq = (tid >> 5) & 3, g = lane >> 2, t4 = lane & 3;
  const int ra = (kHalves ? 0 : 64 * c) + 16 * wq + g;  // this thread's rows ra and ra + 8 of the CTA's
  const int tok_a = (r0 + ra) / groups, tok_b = (r0 + ra + 8) / groups;
  const KeyRange keys_a = query_keys(rule, tok_a), keys_b = query_keys(rule, tok_b);
  const int chunk0 = kHalves ? 4 * c : 0;  // the first 64-dim chunk of the consumer's score dims and columns
  const uint32_t q_c = q_s + (kHalves ? 0 : c * 64 * 128);

  float o[128];        // O: element 4 i + q at row ra + 8 (q / 2), column 64 chunk0 + 8 i + 2 t4 + q % 2
  float s_acc[BN / 2];  // S of the current tile, the same layout over BN key columns
  uint32_t pa[BN / 16][4];  // P of the tile whose P.V is in flight: the A fragment of k16 step kk
  DG_UNROLL
  for (int i = 0; i < 128; ++i) o[i] = 0.f;
  DG_UNROLL
  for (int i = 0; i < BN / 2; ++i) s_acc[i] = 0.f;
  float m_run[2] = {-INFINITY, -INFINITY}, l_run[2] = {0.f, 0.f};
  auto fence_o = [&] {
    DG_UNROLL
    for (int i = 0; i < 128; ++i) wgmma_fence_operand(o[i]);
  };
  auto fence_s = [&] {
    DG_UNROLL
    for (int i = 0; i < BN / 2; ++i) wgmma_fence_operand(s_acc[i]);
  };
  auto fence_p = [&] {
    DG_UNROLL
    for (int kk = 0; kk < BN / 16; ++kk)
      DG_UNROLL
      for (int r = 0; r < 4; ++r) wgmma_fence_operand(pa[kk][r]);
  };
  // S = Q . K^T of the K tile in stage `stage` over the consumer's 256 score dims, one commit group.
  auto issue_qk = [&](int stage) {
    const uint32_t kb = k_s + stage * kTileBytes;
    DG_UNROLL
    for (int kk = 0; kk < 16; ++kk) {
      const int ch = chunk0 + (kk >> 2);
      const uint64_t da = sw128_desc(q_c + ch * kRows * 128 + 32 * (kk & 3));
      const uint64_t db = sw128_desc(kb + ch * BN * 128 + 32 * (kk & 3));
      if constexpr (BN == 80) wgmma_m64n80k16(s_acc, da, db, kk > 0);
      else wgmma_m64n32k16(s_acc, da, db, kk > 0);
    }
    wgmma_commit();
  };
  // O += P . V of the V tile in stage `stage` (its chunks of the consumer's columns), one commit group.
  auto issue_pv = [&](int stage) {
    const uint32_t vb = v_s + stage * kTileBytes + chunk0 * BN * 128;
    DG_UNROLL
    for (int kk = 0; kk < BN / 16; ++kk) wgmma_m64n256k16_rs_mn(o, pa[kk], sw128_mn_desc(vb + kk * 2048, BN * 128));
    wgmma_commit();
  };
  // Head dim 512: the two consumers' partial scores of tile t added (fp32 addition commutes: both
  // warpgroups get the same sums). Buffer t % 2 of each consumer's [BN / 2][128 threads] floats: a
  // consumer rewrites its buffer of tile t only at tile t + 2, past the barrier of tile t + 1, which
  // the other reaches after reading it.
  auto exchange = [&](int t) {
    if constexpr (kHalves) {
      float* x = reinterpret_cast<float*>(smem + (q_s - smem_addr(smem)) + S::kXOff);
      const int tw = tid & 127;
      float* mine = x + ((t & 1) * 2 + c) * (BN / 2) * 128;
      const float* other = x + ((t & 1) * 2 + (c ^ 1)) * (BN / 2) * 128;
      DG_UNROLL
      for (int e = 0; e < BN / 2; ++e) mine[e * 128 + tw] = s_acc[e];
      named_barrier_sync(1, 128 * S::kConsumers);
      DG_UNROLL
      for (int e = 0; e < BN / 2; ++e) s_acc[e] += other[e * 128 + tw];
    }
  };
  // The softmax of key tile kt on s_acc: the reference's roundings, the masks, base-2 scores, the
  // running maximum and sum; the fp32 probabilities back into s_acc, the rescaling factor of O into
  // alpha.
  auto softmax = [&](int kt, float (&alpha)[2]) {
    // Whether any (row, key) of the tile is masked is uniform over the CTA (its token range).
    const int jt = j_lo + kt * BN;
    const bool masked = tile_has_hidden_keys(keys, jt, BN);
    float mx[2] = {-INFINITY, -INFINITY};
    auto score = [&](int nb, int e) -> float& { return s_acc[4 * nb + e]; };
    scale_mask_scores<BN>(score, masked, jt, keys_a, keys_b, t4, p.scaling, mx);
    float base[2];
    DG_UNROLL
    for (int h = 0; h < 2; ++h) {
      mx[h] = fmaxf(mx[h], __shfl_xor_sync(0xffffffffu, mx[h], 1));
      mx[h] = fmaxf(mx[h], __shfl_xor_sync(0xffffffffu, mx[h], 2));
      const float m_new = fmaxf(m_run[h], mx[h]);
      base[h] = m_new == -INFINITY ? 0.f : m_new;  // no visible key yet: everything is exp2(-inf) = 0
      alpha[h] = exp2f(m_run[h] - base[h]);
      m_run[h] = m_new;
      l_run[h] *= alpha[h];
    }
    DG_UNROLL
    for (int nb = 0; nb < BN / 8; ++nb)
      DG_UNROLL
      for (int e = 0; e < 4; ++e) {
        s_acc[4 * nb + e] = exp2f(s_acc[4 * nb + e] - base[e >> 1]);
        l_run[e >> 1] += s_acc[4 * nb + e];
      }
  };
  // P (bf16) as the A fragments of the P.V product: keys 16 kk .. 16 kk + 15 are S's n8 blocks 2 kk
  // and 2 kk + 1, rows g (registers 0 and 2) and g + 8 (1 and 3).
  auto pack_p = [&] {
    DG_UNROLL
    for (int nb = 0; nb < BN / 8; ++nb) {
      pa[nb >> 1][(nb & 1) * 2] = pack_bf16x2(s_acc[4 * nb], s_acc[4 * nb + 1]);
      pa[nb >> 1][(nb & 1) * 2 + 1] = pack_bf16x2(s_acc[4 * nb + 2], s_acc[4 * nb + 3]);
    }
  };
  // Lane 0 of each consumer warp hands a stage back once the warpgroup's MMA reading it is done.
  auto release = [&](uint32_t bar) {
    if (lane == 0) mbar_arrive(bar);
  };

  if (n_tiles > 0) {
    float alpha[2];
    mbar_wait(k_full(0), 0);
    fence_proxy_async();  // the cp.async writes (the generic proxy) visible to the tensor cores
    fence_s();
    wgmma_fence();
    issue_qk(0);
    wgmma_wait<0>();
    fence_s();
    release(k_empty(0));
    exchange(0);
    softmax(kt0, alpha);  // O is still zero: nothing to rescale
    pack_p();
    for (int t = 1; t < n_tiles; ++t) {
      const int s = t % Stages, sp = (t - 1) % Stages;
      mbar_wait(k_full(s), (t / Stages) & 1);
      mbar_wait(v_full(sp), ((t - 1) / Stages) & 1);  // (V tile t - 1 was copied before K tile t)
      fence_proxy_async();  // the cp.async writes (the generic proxy) visible to the tensor cores
      fence_o();
      fence_s();
      fence_p();
      wgmma_fence();
      issue_qk(s);
      issue_pv(sp);
      wgmma_wait<1>();  // S of tile t done; P_{t-1} . V_{t-1} may still run
      fence_s();
      release(k_empty(s));
      exchange(t);
      softmax(kt0 + t, alpha);
      wgmma_wait<0>();
      fence_o();
      fence_p();  // P_{t-1} stays in its registers until here: P_t cannot take them while in flight
      release(v_empty(sp));
      DG_UNROLL
      for (int i = 0; i < 128; ++i) o[i] *= alpha[(i >> 1) & 1];
      pack_p();
    }
    const int sl = (n_tiles - 1) % Stages;
    mbar_wait(v_full(sl), ((n_tiles - 1) / Stages) & 1);
    fence_proxy_async();
    fence_o();
    fence_p();
    wgmma_fence();
    issue_pv(sl);
    wgmma_wait<0>();
    fence_o();
  }

  // Row sums over the quad; then the bf16 output (one split) or the fp32 partials. A quad holds the 8
  // columns of each n8 block (lane t4: 2 t4, 2 t4 + 1); lanes t4 and t4 ^ 1 swap one block of each pair
  // (2 j, 2 j + 1), so that each holds 4 consecutive columns, 16 j + col4 .. + 3 (even lanes of block
  // 2 j, odd ones of block 2 j + 1), and writes them with one 8-byte (bf16) or 16-byte (fp32) store:
  // a quarter of the store instructions of one per column pair, which otherwise queue up behind each
  // other. Every lane shuffles; rows past the item's skip only the stores.
  DG_UNROLL
  for (int h = 0; h < 2; ++h) {
    l_run[h] += __shfl_xor_sync(0xffffffffu, l_run[h], 1);
    l_run[h] += __shfl_xor_sync(0xffffffffu, l_run[h], 2);
  }
  const bool odd = (t4 & 1) != 0;
  const int col4 = 8 * (t4 & 1) + 4 * (t4 >> 1);
  DG_UNROLL
  for (int h = 0; h < 2; ++h) {
    const int rr = r0 + ra + 8 * h;
    const bool valid = rr < rows;
    const int tok = rr / groups, head = kvh * groups + rr % groups;
    const int64_t orow = static_cast<int64_t>(q_first + tok) * p.Hq + head;
    // Columns 2 t4, 2 t4 + 1 of block nb in this thread's registers.
    auto lo = [&](int nb) { return o[4 * nb + 2 * h]; };
    auto hi = [&](int nb) { return o[4 * nb + 2 * h + 1]; };
    if (p.splits == 1) {
      const float inv = l_run[h] > 0.f ? 1.f / l_run[h] : 0.f;
      uint16_t* dst = p.out + orow * D + chunk0 * 64 + col4;
      DG_UNROLL
      for (int j = 0; j < 16; ++j) {
        const uint32_t w0 = pack_bf16x2(lo(2 * j) * inv, hi(2 * j) * inv);
        const uint32_t w1 = pack_bf16x2(lo(2 * j + 1) * inv, hi(2 * j + 1) * inv);
        const uint32_t got = static_cast<uint32_t>(__shfl_xor_sync(0xffffffffu, static_cast<int>(odd ? w0 : w1), 1));
        if (valid) *reinterpret_cast<uint2*>(dst + 16 * j) = odd ? make_uint2(got, w1) : make_uint2(w0, got);
      }
    } else {
      const int64_t wrow = static_cast<int64_t>(split) * p.T * p.Hq + orow;
      float* dst = p.ws_o + wrow * D + chunk0 * 64 + col4;
      DG_UNROLL
      for (int j = 0; j < 16; ++j) {
        const float g0 = __shfl_xor_sync(0xffffffffu, odd ? lo(2 * j) : lo(2 * j + 1), 1);
        const float g1 = __shfl_xor_sync(0xffffffffu, odd ? hi(2 * j) : hi(2 * j + 1), 1);
        if (valid)
          *reinterpret_cast<float4*>(dst + 16 * j) =
              odd ? float4{g0, g1, lo(2 * j + 1), hi(2 * j + 1)} : float4{lo(2 * j), hi(2 * j), g0, g1};
      }
      if (valid && t4 == 0 && (!kHalves || c == 0)) {
        p.ws_ml[wrow * 2] = m_run[h];
        p.ws_ml[wrow * 2 + 1] = l_run[h];
      }
    }
  }
}

}  // namespace flash
}  // namespace dgemma::cuda
