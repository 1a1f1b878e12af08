#pragma once
// Per-step traces of the denoising loop, for tests and `dgemma generate --dump`. The model runner
// records a StepRecord for every denoising step of a sequence whose params ask for traces and hands it
// to the engine's TraceSink; the hot objects (Sequence, the runner's state) hold none of it.
#include <cstdint>
#include <map>
#include <mutex>
#include <vector>

namespace dgemma {

// What one denoising step decided.
struct StepRecord {
  std::vector<int32_t> canvas_in, argmax, sample, canvas_out;
  std::vector<float> entropy;
  std::vector<uint8_t> accept;
  std::vector<float> argmax_gap, sample_gap;  // decision margins
  std::vector<float> accept_margin;           // |prefix entropy sum - bound| per position
  float temperature = 0;
  bool stop = false;
};

// One committed canvas (and its steps when traced).
struct CanvasRecord {
  int index = 0;
  int steps = 0;
  double denoise_ms = 0;
  std::vector<int32_t> committed;  // the full argmax canvas
  std::vector<StepRecord> trace;
};

class TraceSink {
 public:
  virtual ~TraceSink() = default;
  // A traced step of canvas `canvas_index` of sequence `seq_id` (in step order).
  virtual void on_step(uint64_t seq_id, int canvas_index, StepRecord record) = 0;
  // A committed canvas of any sequence (traced or not).
  virtual void on_commit(uint64_t seq_id, int canvas_index, int steps, double denoise_ms,
                         const std::vector<int32_t>& committed) = 0;
};

// Keeps everything it is given, per sequence (thread-safe: the engine thread writes, tests read).
class TraceRecorder final : public TraceSink {
 public:
  void on_step(uint64_t seq_id, int canvas_index, StepRecord record) override {
    std::lock_guard<std::mutex> lock(mu_);
    canvas(seq_id, canvas_index).trace.push_back(std::move(record));
  }
  void on_commit(uint64_t seq_id, int canvas_index, int steps, double denoise_ms,
                 const std::vector<int32_t>& committed) override {
    std::lock_guard<std::mutex> lock(mu_);
    CanvasRecord& c = canvas(seq_id, canvas_index);
    c.steps = steps;
    c.denoise_ms = denoise_ms;
    c.committed = committed;
  }
  std::vector<CanvasRecord> canvases(uint64_t seq_id) const {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = records_.find(seq_id);
    return it == records_.end() ? std::vector<CanvasRecord>{} : it->second;
  }

 private:
  CanvasRecord& canvas(uint64_t seq_id, int canvas_index) {
    auto& v = records_[seq_id];
    // A preempted sequence restarts its canvas: its earlier steps of that canvas are dropped.
    while (!v.empty() && v.back().index > canvas_index) v.pop_back();
    if (v.empty() || v.back().index != canvas_index) v.push_back(CanvasRecord{canvas_index, 0, 0, {}, {}});
    return v.back();
  }
  mutable std::mutex mu_;
  std::map<uint64_t, std::vector<CanvasRecord>> records_;
};

}  // namespace dgemma
