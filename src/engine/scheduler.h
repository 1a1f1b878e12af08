#pragma once
// Pure scheduling policy over sequences and the KV pool's page bookkeeping (no model, no device):
//  - FIFO admission: the head of the waiting queue is admitted when a running place is free and the
//    pool has the pages for its prompt (after the prefix cache's share); nobody overtakes it;
//  - denoise first: every running canvas gets its denoising step (with its committed canvas encoded in
//    the same pass), then prefill chunks share what is left of --max-num-batched-tokens (one chunk
//    a step even when the canvases took all of it, so prefill always progresses); a prompt's last chunk is fused with its first
//    denoising step when the budget allows;
//  - preemption: when a running sequence needs pages the pool does not have, the most recently
//    admitted other sequence is sent back to the front of the waiting queue with its pages freed
//    (recomputed later from its history).
#include <cstdint>
#include <deque>
#include <vector>

#include "engine/block_manager.h"
#include "engine/limits.h"
#include "engine/sequence.h"
#include "engine/step_plan.h"

namespace dgemma {

struct SchedulerConfig {
  int max_num_seqs = 4;
  int64_t max_num_batched_tokens = 4096;
  int64_t prefill_chunk = limits::kMaxPrefillChunk;
  int canvas_length = 256;
  // Whether a prompt's last chunk shares its pass with the sequence's first denoising step (the
  // default: one pass less per request). Off, every step is either prefill or denoising work for a
  // sequence: benchmarks time the two apart.
  bool fuse_prefill_tail = true;
};

struct SchedulerStats {
  int64_t preemptions = 0;
  int64_t prefix_queries = 0;  // prompt tokens looked up at admission
  int64_t prefix_hits = 0;     // of which served from the prefix cache
};

class Scheduler {
 public:
  Scheduler(SchedulerConfig config, BlockManager& blocks);

  // Pages of the full-attention group a request needs at most (prompt plus every committed canvas
  // but the last); more than the pool has means it can never run.
  int64_t max_pages_needed(int64_t prompt_len, int64_t max_tokens) const;
  bool can_ever_fit(int64_t prompt_len, int64_t max_tokens) const;

  void add(Sequence* seq);  // to the back of the waiting queue
  // Admits, allocates pages and composes the next step (may be empty).
  StepPlan schedule(double now);
  // After the runner executed `plan`: the cache holds the encoded tokens; pages enter the prefix cache;
  // sequences whose prompt is fully encoded begin denoising.
  void on_step_done(const StepPlan& plan, double now);
  // Removes a sequence (finished or aborted) from the queues and frees its pages.
  void remove(Sequence* seq);

  const std::deque<Sequence*>& waiting() const { return waiting_; }
  const std::vector<Sequence*>& running() const { return running_; }
  const SchedulerStats& stats() const { return stats_; }
  void reset_stats() { stats_ = SchedulerStats{}; }
  const SchedulerConfig& config() const { return config_; }
  double kv_usage() const;

 private:
  void admit(StepPlan& plan, double now);
  // Pages for [seq.encoded, end); preempts newer sequences if needed. False: not possible now.
  bool reserve(Sequence* seq, int64_t end, StepPlan& plan);
  void preempt(Sequence* victim, StepPlan& plan);

  SchedulerConfig config_;
  BlockManager& blocks_;
  std::deque<Sequence*> waiting_;
  std::vector<Sequence*> running_;  // in admission order
  SchedulerStats stats_;
};

}  // namespace dgemma
