#pragma once
// The op interface the model is written against (once). Each op has a CPU implementation (the
// reference: fp32 maths with bf16 rounding exactly where transformers rounds, docs/MODEL.md §8) and a CUDA
// implementation; tests compare the two. Activations are bf16 unless noted.
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>

#include "backend/attention_keys.h"
#include "backend/caching_allocator.h"
#include "backend/cuda_options.h"
#include "backend/sample_filter.h"
#include "backend/tensor.h"
#include "backend/weight.h"

namespace dgemma {

class Collective;

// Vocabulary-long sums (the sampler's softmax denominators and entropy, the self-conditioning GEMM
// probs . E) run over this many equal blocks of the vocabulary, each block summed on its own and the
// block sums added in block order: a vocabulary-sharded rank holds whole blocks, so tensor parallelism
// of any size dividing it reproduces the one-rank result exactly (docs/MODEL.md "Tensor parallelism").
// A vocabulary that is not a multiple of it is summed as one block (and cannot be sharded).
constexpr int kVocabBlocks = 8;

// Attention of n new query tokens of one sequence over [cached keys ; new keys]. The cached keys are
// the sequence's tokens at absolute positions [cache_first, cache_first + cache_len) (new token j sits
// at cache_first + cache_len + j), stored in a paged pool: position p lives in page page_table[p / P],
// row p % P, where P = k_pages.dim(2). Pages before the ones covering cache_first may be absent
// (sliding layers release them); their table entries are never read.
struct AttentionArgs {
  Tensor q;                 // [n, Hq, D] (after q_norm + RoPE)
  Tensor k_pages, v_pages;  // [num_pages, Hkv, P, D] bf16: one layer's pool
  Tensor page_table;        // i32, on the backend's device: logical page -> pool page
  int64_t cache_first = 0;
  int64_t cache_len = 0;
  Tensor k_new, v_new;      // [n, Hkv, D]
  bool causal = false;      // encoder: key visible iff pos_k <= pos_q (and pos_q - pos_k < window)
  int64_t window = 0;       // sliding window for causal passes (0: none)
  // Causal passes: the image blocks of the new tokens, each seen whole by its own tokens (attention_keys.h);
  // `windowed`: the block keys obey the window too. `blocks_device`: the same pairs on the backend's
  // device (i32 [2 * blocks.size()]), for backends whose kernels read them there (empty: uploaded).
  std::span<const ImageBlock> blocks;
  Tensor blocks_device;
  bool blocks_windowed = false;
  float scaling = 1.0f;
  Tensor out;               // [n, Hq, D]
};

// Attention of every item (sequence) of a forward pass for one layer, in one op: item i's queries are
// rows [q_first, q_first + q_len) of q / k_new / v_new / out and it attends exactly as AttentionArgs
// with its own cache range and mask, its page table being entries [table_first, table_first +
// table_len) of page_tables. The item rows live on the backend's device (`items`, i32 [N, 8] in the
// field order of AttentionItem) so that kernels read the lengths from device memory; `host_items` is
// the same table on the host (the default implementation, and launch planning). The default runs
// attention() once per item; the CUDA backend can run all items in one launch. A causal item's image
// blocks are entries [blocks_first, blocks_first + blocks_len) of the batch's `blocks` (attention_keys.h).
struct AttentionItem {
  int32_t q_first = 0, q_len = 0;
  int32_t cache_first = 0, cache_len = 0;
  int32_t table_first = 0, table_len = 0;
  int32_t causal = 0;  // 0 / 1
  int32_t window = 0;  // causal items only (0: none)
  int32_t blocks_first = 0, blocks_len = 0;
  int32_t blocks_windowed = 0;  // 0 / 1: the blocks' keys obey the window too
};
constexpr int kAttentionItemFields = 11;
static_assert(sizeof(AttentionItem) == kAttentionItemFields * sizeof(int32_t));
struct AttentionBatchArgs {
  Tensor q;                 // [T, Hq, D]
  Tensor k_pages, v_pages;  // [num_pages, Hkv, P, D] (may be empty when no item has a cache)
  Tensor page_tables;       // i32, the backend's device: every item's table, concatenated
  Tensor k_new, v_new;      // [T, Hkv, D]
  Tensor items;             // i32 [N, kAttentionItemFields], the backend's device
  std::span<const AttentionItem> host_items;  // the same N rows on the host
  // Every item's image blocks: i32 [M, 2] on the backend's device and the same M on the host (empty:
  // no item has any).
  Tensor blocks;
  std::span<const ImageBlock> host_blocks;
  // The rows the launch plan assumes (empty: host_items): the same items with caches at least as long
  // (a recorded step plans for the longest cache its replays may see; the kernels read the real rows).
  std::span<const AttentionItem> plan_items;
  float scaling = 1.0f;
  Tensor out;               // [T, Hq, D]
};

// Throws unless `blocks` are image blocks of n new tokens: non-empty, in range, ascending, disjoint.
void check_image_blocks(std::span<const ImageBlock> blocks, int64_t n);
// The image blocks of batch item `it` among the batch's `blocks` (checked as above; empty when it has none).
std::span<const ImageBlock> item_image_blocks(const AttentionItem& it, std::span<const ImageBlock> blocks);

// Per-token FP8 rows: bf16 x [T, K] quantised as FP8-dynamic prescribes for a W8A8 linear's input
// (ActQuant::kFp8Token, quant_reference.h quantize_fp8_per_token): per row t
//   scales[t] = s_t = max(amax_t / 448, 1 / (448 * 512)),  codes[t, k] = e4m3(clamp(x[t, k] / s_t, +-448))
// (NaN -> 0x7f). The op producing a W8A8 linear's input rows can write them beside its bf16 output, so
// that the linear (Backend::matmul_fp8, MoeArgs::expert_in_fp8) takes them instead of quantising.
struct Fp8Rows {
  Tensor codes;   // u8 [T, K]
  Tensor scales;  // f32 [T]
  bool empty() const { return codes.empty(); }
  Fp8Rows rows(int64_t begin, int64_t end) const {  // rows [begin, end) (empty stays empty)
    return empty() ? Fp8Rows{} : Fp8Rows{codes.rows(begin, end), scales.rows(begin, end)};
  }
};
// The one rule for FP8 rows: a linear takes them exactly when its weight (as the backend holds it,
// after upload_weight) runs W8A8 (an FP8 weight with ActQuant::kFp8Token) and its input width K is a
// multiple of kFp8RowsAlign. The model asks an op for FP8 rows only for such a consumer; a linear given
// rows for any other weight throws (check_fp8_input) instead of computing something else.
constexpr int64_t kFp8RowsAlign = 16;
bool takes_fp8_rows(const Weight& w);
// Throws unless `rows` are FP8 rows of a [T, K] input (u8 codes [T, K], f32 scales [T], on `device`).
void check_fp8_rows(const Fp8Rows& rows, int64_t T, int64_t K, Device device, const char* op);
// A linear given FP8 rows: throws unless takes_fp8_rows(w) and check_fp8_rows(rows, T, w.cols(), ...).
void check_fp8_input(const Fp8Rows& rows, const Weight& w, int64_t T, Device device, const char* op);

// The MoE block of one layer for T tokens (router on the raw residual, experts on the normed one).
struct MoeArgs {
  Tensor router_in;        // [T, H] raw residual h1
  Tensor expert_in;        // [T, H] pre_feedforward_layernorm_2(h1)
  // Optional: expert_in's FP8 rows (Fp8Rows), given only when takes_fp8_rows(gate_up); the W8A8 expert
  // gate_up reads them instead of quantising expert_in.
  Fp8Rows expert_in_fp8;
  Tensor router_scale;     // [H] bf16
  // Optional: the router's input z = bf16(bf16(bf16(rmsnorm(h1)) * router_scale) * H^-0.5) already
  // computed (AttnResidualArgs::router_out); then router_in is not read.
  Tensor router_z;         // [T, H] bf16
  Tensor router_proj;      // [E, H] bf16
  Tensor per_expert_scale; // [E] bf16
  Weight gate_up;          // [E, 2I, H] (rows 0..I-1 gate, I..2I-1 up), any WeightFormat
  Weight down;             // [E, H, I]
  int top_k = 1;
  float eps = 1e-6f;
  Tensor out;              // [T, H]
  // Instead of out, where Backend::sums_moe_slots() (out is then empty and not written): the expert rows
  // before their sum, out_slots [T * top_k, H] bf16 (row t * top_k + k: token t's k-th choice's output
  // times its routing weight), and out_order [T, top_k] i32 (token t's slots by ascending expert). The
  // FFN junction sums them (FfnResidualArgs::m2_slots), which saves the sum's launch on the GPU.
  Tensor out_slots, out_order;
  // Optional debug outputs (empty tensors: not produced): host f32 [T,E], f32 [T,k], i32 [T,k].
  Tensor dbg_probs, dbg_weights, dbg_index;
  // Expert parallelism: gate_up / down hold experts [expert_first, expert_first + gate_up.experts())
  // of router_proj's E; each token's selected expert outputs are computed by the rank holding the
  // expert and exchanged through `collective` (an exact sum: the others contribute -0) before the
  // accumulation in expert order, so every rank gets the one-rank output. nullptr: all experts local.
  int64_t expert_first = 0;
  Collective* collective = nullptr;
};

// Guided decoding (docs/API.md "Guided decoding on the canvas"): one compiled constraint's flat tables
// (guided/token_walk.h, guided/token_constraint.h) on the backend's device, made once per constraint.
struct GuidedTables {
  int32_t num_states = 0, num_classes = 0, vocab_size = 0;
  Tensor byte_class;     // u8 [256]
  Tensor next;           // i32 [num_states * num_classes], -1 = dead
  Tensor accepting;      // u8 [num_states]
  Tensor distance;       // i32 [num_states]: bytes of the shortest completion
  Tensor token_offsets;  // i32 [vocab_size + 1]
  Tensor token_bytes;    // u8
  Tensor token_kind;     // u8 [vocab_size] (guided::TokenKind)
  Tensor gap_mask;  // i32 [(vocab_size + 31) / 32] (bit words): bit (id & 31) of word id / 32, 1 = allowed
};

// The gap of one canvas: positions [first, last) hold one value of the automaton, from `state` on.
// Sampler: the gap's rows see only the tokens of the gap mask (the others' z is -inf, so entropy,
// argmax, sample, log-probabilities and the self-conditioning probabilities are those of the allowed
// set). Decide: the tokens the step chose for the gap (pinned positions: their pinned token) are walked
// left to right from `state`; a token is kept while it extends a valid prefix whose shortest completion
// (distance, in bytes) still fits in the room left (`room` positions from `first` on, one token per
// byte); the positions after the longest such prefix are renoised. tables == nullptr: no gap.
struct GuidedGap {
  const GuidedTables* tables = nullptr;
  int32_t first = 0, last = 0;
  int32_t state = 0;
  int64_t room = 0;
  bool active() const { return tables != nullptr && last > first; }
};

// The per-position sampler maths of one denoising step for one canvas (docs/MODEL.md §6): soft-cap,
// temperature, entropy, argmax, the Gumbel-max sample with the project's counter-based noise, the
// log-probability of the argmax, and the bf16 self-conditioning probabilities (written over the
// logits, in place) — never materialising an fp32 [C, V] tensor.
struct SamplerArgs {
  Tensor logits;            // [C, V] bf16 LM-head output before the soft-cap; overwritten with bf16 probs
  float softcap = 30.0f;
  float temperature = 1.0f;
  uint64_t sample_key = 0;  // rng stream key of this step's Gumbel noise
  bool want_probs = true;   // write the self-conditioning probabilities over `logits`
  // false (a greedy canvas: decide takes the argmax): no Gumbel noise is drawn; `sample` receives the
  // argmax and sample_gap (if given) the argmax gap.
  bool want_sample = true;
  // outputs, [C] each, on the backend's device
  Tensor entropy;           // f32
  Tensor argmax;            // i32
  Tensor sample;            // i32
  Tensor argmax_logprob;    // f32: log softmax(z)[argmax]
  // Optional (empty: skipped): decision margins, f32 [C] — the gap between the best and second-best
  // z (argmax) and z + Gumbel (sample). Golden tests use them to tell near-ties from real differences.
  Tensor argmax_gap, sample_gap;
  // The support of the sample (sample_filter.h; off by default: no extra pass). Entropy, argmax,
  // log-probabilities and the self-conditioning probabilities ignore it. sample_floor (optional, f32
  // [C]) receives each row's least allowed z (-inf when the filter is off).
  SampleFilter filter;
  Tensor sample_floor;
  // The top_n largest z per row (ordered by z descending, then token id ascending) and their
  // log softmax(z): i32 / f32 [C, top_n]; top_n = 0 skips them.
  int top_n = 0;
  Tensor top_ids, top_logprobs;
  // Vocabulary sharding (tensor parallelism): logits are columns [vocab_first, vocab_first + V) of a
  // vocabulary of vocab_total; the per-rank statistics go through `collective` so that every output
  // (and the probabilities of the rank's columns) equals the one-rank result. nullptr: whole vocabulary.
  int64_t vocab_first = 0;
  int64_t vocab_total = 0;
  Collective* collective = nullptr;
  // Guided decoding: the canvas's gap (GuidedGap above; inactive for unconstrained canvases).
  GuidedGap guided;
};

// The accept / renoise / stop decision of one denoising step of one canvas (docs/MODEL.md §6.2, §6.4) on the
// backend's device, so that the canvas stays there between steps and the host reads back two flags:
//   accept: sort the entropies ascending (stable); position k of that order is accepted iff the fp32
//           prefix sum of the entropies strictly before it is <= entropy_bound (decide_rules.h);
//   canvas[p] = accepted ? (greedy ? argmax[p] : sample[p]) : uniform_token(renoise_key, p, vocab);
//   flags[0] = have_prev and argmax == prev_argmax at every position; then prev_argmax = argmax;
//   flags[1] = mean entropy (fp32 sum in position order / C) < confidence_threshold.
// The host turns flags[0] into the stability rule (a run of equal argmax canvases, engine/denoise_policy.h).
// With a pin mask (pinned spans, docs/MODEL.md §6.6) pinned positions are accepted and hold
// pin_tokens[p]; the sort, the prefix sum, the mean and the argmax comparison run over the free
// positions only (decide_rules.h). Without one the op is exactly the rule above.
struct DecideArgs {
  Tensor entropy;              // f32 [C]
  Tensor argmax;               // i32 [C]
  Tensor sample;               // i32 [C] (not read when greedy)
  bool greedy = false;         // temperature 0: the accepted token is the argmax
  float entropy_bound = 0.1f;
  float confidence_threshold = 0.005f;
  uint64_t renoise_key = 0;    // rng stream key of this step's renoise tokens
  int32_t vocab = 0;
  Tensor prev_argmax;          // i32 [C], read when have_prev, always overwritten with argmax
  bool have_prev = false;
  Tensor canvas;               // i32 [C] out: the next step's canvas
  Tensor flags;                // i32 [2] out: {same argmax as the previous step, confident}
  Tensor accept;               // optional u8 [C] out: the acceptance mask (traces)
  Tensor pin_mask;             // optional u8 [C]: 1 = pinned position (empty: no pins)
  Tensor pin_tokens;           // i32 [C] with pin_mask: the pinned token of each pinned position
  // Guided decoding: the canvas's gap (GuidedGap above): the accepted positions after its longest
  // valid prefix are renoised (and not accepted). Inactive: exactly the rules above.
  GuidedGap guided;
};

// The two residual junctions of a decoder layer, each one launch on the GPU (the default
// implementation composes rmsnorm / add / scale, so every intermediate is rounded to bf16 exactly
// where the unfused sequence rounds it). Row-wise over [T, H]; the optional outputs (empty: not
// written) expose the intermediates for the model's debug dumps. The optional *_fp8 outputs (empty: not
// written) are the FP8 rows (Fp8Rows) of the bf16 output of the same name, which is written as well.
//   after attention: o_normed = rmsnorm(o) * post_norm; h1 = bf16(x + o_normed);
//                    out_a = rmsnorm(h1) * norm_a; out_b = rmsnorm(h1) * norm_b;
//                    router_out = bf16(bf16(rmsnorm(h1) * router_scale) * router_root) (MoeArgs::router_z)
//   after the FFN:   m1n = rmsnorm(m1) * norm1; m2n = rmsnorm(m2) * norm2; f = rmsnorm(bf16(m1n + m2n)) * norm_f;
//                    out = bf16(bf16(h1 + f) * scale); next_out = rmsnorm(out) * next_norm (the next layer's
//                    attention input norm)
struct AttnResidualArgs {
  Tensor x, o, post_norm;
  Tensor h1;
  Tensor norm_a, out_a, norm_b, out_b;
  float eps = 1e-6f;
  Tensor o_normed;  // optional
  Tensor router_scale, router_out;  // optional (both or neither)
  float router_root = 1.0f;
  Fp8Rows out_a_fp8, out_b_fp8;  // optional
};
struct FfnResidualArgs {
  Tensor h1, m1, m2, norm1, norm2, norm_f;
  float eps = 1e-6f;
  float scale = 1.0f;
  Tensor out;       // may alias nothing but itself
  Tensor m1n, m2n, f;  // optional
  Tensor next_norm, next_out;  // optional (both or neither)
  Fp8Rows next_out_fp8;        // optional, with next_out
  // Instead of m2, where Backend::sums_moe_slots(): the MoE's slot rows and order (MoeArgs::out_slots /
  // out_order) for these rows; m2 is then their sum, exactly as MoeArgs::out would hold it.
  Tensor m2_slots, m2_order;
};

// The attention prologue of a decoder layer: the per-head norms and RoPE of the q / k / v projections,
// in place, one launch on the GPU (the default composes rmsnorm / rope / copy, so every intermediate
// is rounded to bf16 exactly where the unfused sequence rounds it):
//   k_eq_v: v = k (the raw K projection, before k_norm and RoPE); then
//   q = rope(rmsnorm(q) * q_norm); k = rope(rmsnorm(k) * k_norm); v = rmsnorm(v)   (per head of D)
// with rope as Backend::rope (NeoX, bf16 cos/sin of positions[t] * inv_freq).
// With `qkv` set (the output of the fused q|k|v projection, LayerWeights::qkv_proj) the projections are
// read from its column blocks — q columns [0, Hq D), k [Hq D, (Hq + Hkv) D), v after them (absent when
// k_eq_v) — and q / k / v are outputs only; every element is what the separate-tensor form gives.
struct QkvPrologueArgs {
  Tensor q;              // [T, Hq, D] in / out
  Tensor k;              // [T, Hkv, D] in / out
  Tensor v;              // [T, Hkv, D] in / out (k_eq_v: out only)
  Tensor qkv;            // optional [T, (Hq + Hkv (+ Hkv)) D] fused input (then q / k / v: out only)
  bool k_eq_v = false;
  Tensor q_norm, k_norm; // [D] bf16
  Tensor positions;      // i32 [T]
  Tensor inv_freq;       // f32 [D / 2]
  float eps = 1e-6f;
};

// The vision tower's pooler, standardisation and scale over the encoder output of several images at once.
// Image i is rows [row_first, row_first + grid_h * grid_w) of x (patch n at column n % grid_w, row
// n / grid_w) and writes rows [out_first, out_first + (grid_h / k) * (grid_w / k)) of out: output s averages
// the k x k block of patches at pooled column s % (grid_w / k), row s / (grid_w / k):
//   p = bf16(sum over the block, in patch order, of f32(x) * f32(1 / k^2))
//   out = bf16((p * scale - std_bias) * std_scale)       (fp32; without std tensors: bf16(p * scale))
// k = 1 copies each patch (then scaled).
struct VisionPoolItem {
  int32_t row_first = 0, grid_h = 0, grid_w = 0, out_first = 0;
};
struct VisionPoolArgs {
  Tensor x;                               // [N, H] bf16
  std::span<const VisionPoolItem> items;  // host
  int kernel = 3;
  float scale = 1.0f;          // sqrt(H)
  Tensor std_bias, std_scale;  // optional [H] bf16 (both or neither)
  Tensor out;                  // [S, H] bf16
};

// A recorded sequence of device work (a CUDA graph) that runs again as one launch (Backend::capture).
class StepGraph {
 public:
  virtual ~StepGraph() = default;
  virtual void replay() = 0;
};

// Device memory as the backend sees it (bytes).
struct MemoryInfo {
  uint64_t free = 0;
  uint64_t total = 0;
};

// A backend's device work so far (Backend::work_stats): kernel launches (its own kernels, library
// calls, graph replays), host waits for the device (synchronisations, synchronising copies) and the
// time spent in them. Benchmarks report launches and waits per step from two readings: a step whose
// host time is mostly waiting is device-bound, one with little waiting host-bound.
struct DeviceWorkStats {
  uint64_t launches = 0;
  uint64_t syncs = 0;
  uint64_t sync_wait_ns = 0;
};

class Backend {
 public:
  virtual ~Backend() = default;
  virtual Device device() const = 0;
  virtual std::string name() const = 0;
  virtual MemoryInfo memory_info() = 0;
  // The device allocator (backend/caching_allocator.h): its counts, its ceiling (0: none; the engine
  // sets it from the memory plan) and giving its cached blocks back. The CPU backend has none.
  virtual AllocatorStats allocator_stats() const { return {}; }
  virtual void set_allocator_ceiling(uint64_t /*bytes*/) {}
  virtual void release_cached_memory() {}
  // The device work so far (zeros on the CPU backend).
  virtual DeviceWorkStats work_stats() const { return {}; }
  // A profiler's capture window (CUDA: cudaProfilerStart / Stop; Nsight Compute run with
  // --profile-from-start off sees only the work between the two). No-op on the CPU backend.
  virtual void profiler_window(bool /*open*/) {}

  // Memory. Weights are uploaded once; host tensors stay where they are on the CPU backend.
  virtual Tensor alloc(ScalarType type, std::initializer_list<int64_t> dims) = 0;
  virtual Tensor upload(const Tensor& host) = 0;
  virtual void to_host(const Tensor& src, void* dst) = 0;            // copies src.nbytes()
  virtual void from_host(const Tensor& dst, const void* src) = 0;    // copies dst.nbytes()
  virtual void copy(const Tensor& dst, const Tensor& src) = 0;       // same device, same bytes
  virtual void synchronize() {}
  // A (possibly quantised) weight onto the device, in whatever layout the backend's kernels read.
  // The default uploads each tensor as is.
  virtual Weight upload_weight(const Weight& host);

  // out[t] = bf16(table[ids[t]] * scale)   (scale is the bf16 embed scale)
  virtual void embed(const Tensor& ids, const Tensor& table, float scale, const Tensor& out) = 0;
  // Row-wise RMSNorm over the last dim: fp32 x * (mean(x^2) + eps)^-0.5 [* w], rounded to bf16.
  virtual void rmsnorm(const Tensor& x, const Tensor* weight, float eps, const Tensor& out) = 0;
  // out[T,N] = bf16(x[T,K] . w[N,K]^T), fp32 accumulation; w in any WeightFormat (weight.h), with the
  // activation quantisation the weight prescribes.
  virtual void matmul(const Tensor& x, const Weight& w, const Tensor& out) = 0;
  // matmul of a W8A8 weight from its input's FP8 rows (Fp8Rows): exactly matmul(x, w, out) for the x
  // whose rows they are. Throws unless takes_fp8_rows(w).
  virtual void matmul_fp8(const Fp8Rows& x, const Weight& w, const Tensor& out) = 0;
  // FP8 rows of bf16 x [T, K] (Fp8Rows): the activation quantisation of a W8A8 linear as an op of its
  // own. The default runs the CPU reference through the host.
  virtual void quantize_fp8_rows(const Tensor& x, const Fp8Rows& out);
  // out[T,N] = bf16(x[T,K] . w[K,N]), fp32 accumulation (the self-conditioning GEMM probs . E).
  virtual void matmul_kn(const Tensor& x, const Tensor& w, const Tensor& out) = 0;

  // Tensor-parallel pieces (the defaults throw kUnsupported; the CPU backend implements them):
  // out[t] = bf16(table[ids[t] - first] * scale) where the id is one of the table's rows, else -0
  // (the vocabulary-sharded embedding; ids outside [0, vocab_total) are an error).
  virtual void embed_shard(const Tensor& ids, const Tensor& table, int64_t first, int64_t vocab_total, float scale,
                           const Tensor& out);
  // f32 out[B, T, N]: the B block partials of matmul_kn's dot products (K split into B equal blocks),
  // block-major, so the ranks' partials gathered end to end are the whole vocabulary's in block order.
  virtual void matmul_kn_blocks(const Tensor& x, const Tensor& w, int blocks, const Tensor& out);
  // bf16 out[M] = bf16(sum of partials[0..B, m] added in block order; partials [B, M]): with
  // matmul_kn_blocks, exactly the CPU matmul_kn when B = kVocabBlocks.
  virtual void sum_blocks(const Tensor& partials, const Tensor& out);
  // In-place NeoX RoPE over x[T, heads, D] with bf16 cos/sin and bf16 arithmetic.
  virtual void rope(const Tensor& x, const Tensor& positions, const Tensor& inv_freq) = 0;
  // 2-D RoPE of image patches, in place over x[T, heads, D]: channels [0, D/2) rotate by positions[t, 0]
  // (the patch's column), [D/2, D) by positions[t, 1] (its row), each half as one NeoX block (channel j with
  // j + D/4) with bf16 cos/sin of position * inv_freq[j] (f32 [D/4]) and bf16 arithmetic, as rope().
  // positions: i32 [T, 2]. The default runs the CPU reference through the host.
  virtual void rope_2d(const Tensor& x, const Tensor& positions, const Tensor& inv_freq);
  // VisionPoolArgs above. The default runs the CPU reference through the host.
  virtual void vision_pool(const VisionPoolArgs& args);
  virtual void add(const Tensor& a, const Tensor& b, const Tensor& out) = 0;        // bf16(a + b)
  virtual void scale(const Tensor& x, float s, const Tensor& out) = 0;             // bf16(x * s)
  virtual void mul(const Tensor& a, const Tensor& b, const Tensor& out) = 0;       // bf16(a * b), b broadcast over rows if 1-D
  virtual void gelu_mul(const Tensor& gate, const Tensor& up, const Tensor& out) = 0;  // bf16(bf16(gelu_tanh(g)) * u)
  // gelu_mul of the two halves of each row of gate_up [T, 2I] (the fused gate|up projection,
  // LayerWeights::mlp_gate_up): out[t, i] = bf16(bf16(gelu_tanh(gate_up[t, i])) * gate_up[t, I + i]),
  // out [T, I] (not overlapping gate_up). The default splits the halves (copy_columns) and runs gelu_mul.
  // out_fp8 (optional, empty: not written): the FP8 rows of out (Fp8Rows).
  virtual void gelu_mul_halves(const Tensor& gate_up, const Tensor& out, const Fp8Rows& out_fp8);
  // A column block of a row-major matrix: dst[t, j] = src[t, first + j] for dst [T, n] (any trailing
  // shape, read as rows of n = dst.numel() / T elements) and src [T, m] of the same type and device,
  // first + n <= m. The default goes through the host.
  virtual void copy_columns(const Tensor& dst, const Tensor& src, int64_t first);
  virtual void attn_residual(const AttnResidualArgs& args);
  virtual void ffn_residual(const FfnResidualArgs& args);
  virtual void qkv_prologue(const QkvPrologueArgs& args);
  virtual void attention(const AttentionArgs& args) = 0;
  virtual void attention_batch(const AttentionBatchArgs& args);
  virtual void moe(const MoeArgs& args) = 0;
  // Whether moe writes MoeArgs::out_slots / out_order and ffn_residual sums FfnResidualArgs::m2_slots;
  // a backend without them is always given out / m2.
  virtual bool sums_moe_slots() const { return false; }
  // Whether sampler and decide apply SamplerArgs::guided / DecideArgs::guided (GuidedGap); a backend
  // without them is given no gap (the engine's commit-time rule alone keeps guided answers valid).
  virtual bool supports_guided_gaps() const { return false; }
  virtual void sampler(const SamplerArgs& args) = 0;
  virtual void decide(const DecideArgs& args) = 0;
  // The same ops over several canvases of one denoising step, each element exactly as the single op
  // on it (the defaults loop; the CUDA backend runs each pass of all canvases in one launch). The
  // canvases' tensors must not overlap.
  virtual void sampler_batch(std::span<const SamplerArgs> canvases);
  // Whether sampler / sampler_batch take a vocabulary shard (SamplerArgs::collective). Without, a
  // tensor-parallel model gathers the vocabulary first (DiffusionGemma::gathers_vocabulary).
  virtual bool vocab_sharded_sampler() const { return false; }
  virtual void decide_batch(std::span<const DecideArgs> canvases);
  // ---- A step's arguments in device memory, and CUDA graphs ----
  // The batched sampler's and decide's per-canvas arguments encoded as the backend's kernels read them:
  // a step writes them into its input block on the host (encode_*), sends the block up in one copy
  // with its other inputs, and the *_encoded ops read them there — so that a recorded step (capture)
  // replays with the next step's arguments. The host arguments still say what is launched (the canvas
  // count, sizes, filters, top-N). A backend whose ops read the host arguments (the CPU) encodes
  // nothing: 0 bytes, and the *_encoded ops are the plain ones.
  virtual size_t encoded_sampler_bytes(int /*canvases*/) const { return 0; }
  virtual size_t encoded_decide_bytes(int /*canvases*/) const { return 0; }
  virtual void encode_sampler_args(std::span<const SamplerArgs> /*canvases*/, void* /*host*/) const {}
  virtual void encode_decide_args(std::span<const DecideArgs> /*canvases*/, void* /*host*/) const {}
  // `encoded`: the encoded bytes on the backend's device (ignored where nothing is encoded).
  virtual void sampler_batch_encoded(std::span<const SamplerArgs> canvases, const Tensor& encoded);
  virtual void decide_batch_encoded(std::span<const DecideArgs> canvases, const Tensor& encoded);
  // Blocks of block_bytes between a step buffer and buffers named by their device addresses (`table`:
  // n u64 addresses on the backend's device, in a step's input block), one launch each on the GPU:
  //   gather:  dst block i = the block at table[i]; where table[i] is 0: zeros (zero_missing) or left as it is;
  //   scatter: the block at table[i] = src block i; where table[i] is 0: nothing.
  // The blocks named must not overlap dst / src or (scatter) each other.
  virtual void gather_blocks(const Tensor& table, int64_t n, int64_t block_bytes, const Tensor& dst, bool zero_missing);
  virtual void scatter_blocks(const Tensor& src, const Tensor& table, int64_t n, int64_t block_bytes);
  // Records the device work `body` enqueues into a graph instead of running it (nothing runs until
  // replay; the memory body allocates stays reserved for the backend's graphs, which share it and never
  // run at once). body must not wait for the device nor copy from the host. nullptr: this backend
  // records nothing (the caller runs its work eagerly). Throws if the work cannot be recorded.
  virtual std::unique_ptr<StepGraph> capture(const std::function<void()>& /*body*/) { return nullptr; }
  virtual bool supports_graphs() const { return false; }

  // Paged KV write: src[j] ([n, Hkv, D]) goes to absolute position first_pos + j of a layer's pool
  // pages ([num_pages, Hkv, P, D]) through page_table (i32, the backend's device; see AttentionArgs).
  virtual void kv_write(const Tensor& pages, const Tensor& page_table, int64_t first_pos, const Tensor& src) = 0;
  // Deterministic pseudo-random bf16 fill: mean + std * N(0,1) from the counter-based RNG keyed by
  // (seed, element index) — dummy weights for any config, on the device itself.
  virtual void fill_normal(const Tensor& t, uint64_t seed, float mean, float std) = 0;
  // f32 out = softcap * tanh(float(bf16 logits) / softcap)   (debug dumps and golden tests)
  virtual void softcap_logits(const Tensor& logits, float softcap, const Tensor& out) = 0;
};

std::unique_ptr<Backend> make_cpu_backend();
// The CUDA backend of a device with the given kernel choices (cuda_options.h). Throws
// Error(kUnsupported) when built without CUDA, without a usable GPU, or when the options ask for what
// the GPU cannot run (the hopper family off sm_90). Logs the kernel family and kernels it chose.
std::unique_ptr<Backend> make_cuda_backend(int device_index = 0, const CudaOptions& options = {});
bool cuda_available();
// The CUDA GPUs this process sees (0 without CUDA).
int cuda_device_count();

}  // namespace dgemma
