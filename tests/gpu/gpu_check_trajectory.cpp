// Whole seeded trajectories on CPU and CUDA side by side: every golden fixture run (prompt, sampler
// settings, seed) through the engine (scheduler, model runner, paged KV) on both backends, compared step by
// step. The backends' GEMMs sum in different orders, so logits differ by bf16 rounding noise; a decision may
// differ only where it was a near-tie at that noise level (the same criterion as the CPU-vs-
// transformers trajectory test, tests/golden/test_generate.cpp). Comparison stops at such a point. Guided
// runs keep the forward's expert routing too: a row whose chosen experts differ between the backends at a
// router near-tie (router_tie) is such a point as well, for the failures of that row.
// Guided answers (docs/API.md "Guided decoding on the canvas") likewise: the gap mask in the sampler, the
// walk in decide and the commit rule on both backends, alone and batched with unguided sequences.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <iterator>
#include <map>
#include <memory>

#include "engine/guided_answer.h"
#include "engine/pins.h"
#include "gpu_check_fixtures.h"
#include "gpu_check_util.h"
#include "guided/guided.h"
#include "model/config.h"
#include "model/diffusion_gemma.h"
#include "model/forward_dump.h"
#include "model/weights.h"
#include "support/model_core.h"
#include "util/bf16.h"
#include "util/error.h"
#include "util/json.h"
#include "util/mmap_file.h"
#include "util/npy.h"

namespace dgemma::gpu_test {
namespace {

std::vector<int32_t> ids(const std::string& fixture, const std::string& key) { return fixture_ids(fixture, key); }

// Whether a guided gap mask (TokenConstraint::gap_mask: bit id of word id / 32) allows token `id`.
bool mask_allows(const std::vector<uint32_t>& mask, int64_t id) {
  const size_t word = static_cast<size_t>(id >> 5);
  return id >= 0 && word < mask.size() && ((mask[word] >> (id & 31)) & 1u) != 0;
}

// The bf16 logits of each denoising step (its canvas rows), in step order (canvas by canvas).
using StepLogits = std::vector<std::vector<uint16_t>>;

// The forward's expert routing of one step, per layer, over all its rows (a step that also encodes
// the prompt has those rows first): each row's chosen experts (i32 [T, K]) and the router's
// probabilities (f32 [T, E]).
struct StepRouting {
  size_t rows = 0;  // T
  std::vector<std::vector<int32_t>> index;
  std::vector<std::vector<float>> probs;
};
using StepRoutes = std::vector<StepRouting>;

struct Run {
  std::unique_ptr<DiffusionGemma> model;
  std::unique_ptr<ModelCore> core;
  std::unique_ptr<Sequence> seq;
  std::vector<CanvasRecord> canvases;
  std::shared_ptr<StepLogits> logits;  // with keep_dumps only
  std::shared_ptr<StepRoutes> routes;  // with keep_dumps only: the same steps' routing
};

// The layer of a dump name "layer<li>.<what>", or -1 for another name.
int dumped_layer(const std::string& name, const std::string& what) {
  const std::string tail = "." + what;
  if (name.rfind("layer", 0) != 0 || name.size() <= tail.size() ||
      name.compare(name.size() - tail.size(), tail.size(), tail) != 0)
    return -1;
  return std::stoi(name.substr(5, name.size() - 5 - tail.size()));
}

// keep_dumps: every step's logits and expert routing are kept (the forward's "logits" and router
// dumps: a dumped step runs op by op, as a guided step does anyway), to diagnose a divergence.
Run run_on(Backend& be, const std::string& fixture, const ModelConfig& mc, const SequenceParams& p,
           const std::vector<int32_t>& prompt, bool keep_dumps = false) {
  Run r;
  const std::string dir = fixture_dir(fixture) + "/model";
  r.model = std::make_unique<DiffusionGemma>(mc, load_weights(mc, dir, be), be);
  ModelCoreOptions o;
  if (keep_dumps) {
    r.logits = std::make_shared<StepLogits>();
    r.routes = std::make_shared<StepRoutes>();
    o.runner.step_dump = [logits = r.logits, routes = r.routes](int64_t) -> DumpHook {
      auto step = std::make_shared<StepRouting>();
      return [logits, routes, step](const std::string& name, const Tensor& t) {
        if (name == "logits") {
          logits->push_back(u16(t));
          routes->push_back(*step);
          return;
        }
        const int li = dumped_layer(name, "router_index");
        const int lp = dumped_layer(name, "router_probs");
        if (li >= 0) {
          step->index.resize(std::max(step->index.size(), static_cast<size_t>(li) + 1));
          step->index[static_cast<size_t>(li)] = i32(t);
          step->rows = static_cast<size_t>(t.dim(0));
        } else if (lp >= 0) {
          step->probs.resize(std::max(step->probs.size(), static_cast<size_t>(lp) + 1));
          step->probs[static_cast<size_t>(lp)] = f32(t);
        }
      };
    };
  }
  r.core = std::make_unique<ModelCore>(be, *r.model, o);
  r.seq = r.core->make_sequence(1, prompt, p);
  try {
    r.core->run({r.seq.get()}, 10000);
  } catch (const Error&) {
    // Did not finish: reported by the caller from the sequence's state.
  }
  r.canvases = r.core->traces().canvases(1);
  return r;
}

// The trajectory of one sequence: its state at the end and its canvases' step traces.
struct Trajectory {
  const Sequence* seq;
  const std::vector<CanvasRecord>* canvases;
  const StepLogits* logits = nullptr;  // optional (run_on's keep_dumps)
  const StepRoutes* routes = nullptr;  // optional (run_on's keep_dumps)
};

void compare(Reporter& rep, const std::string& name, const SequenceParams& p, const Trajectory& c, const Trajectory& g);

// One seeded trajectory on both backends, compared step by step (pinned runs: the free-positions rule).
void compare_run(Reporter& rep, const std::string& fixture, const ModelConfig& mc, const std::vector<int32_t>& prompt,
                 const std::string& name, const SequenceParams& p) {
  Run c = run_on(cpu(), fixture, mc, p, prompt);
  Run g = run_on(cuda(), fixture, mc, p, prompt);
  compare(rep, name, p, {c.seq.get(), &c.canvases}, {g.seq.get(), &g.canvases});
}

// Several sequences in one engine on CUDA (the step's canvases batched through one LM-head GEMM, one
// sampler, one self-conditioning GEMM and one decide) against each alone on the CPU (whose results
// do not depend on the batch: tests/unit/engine/test_batching.cpp).
// Runs already made alone on each backend, by name (their CPU run and CUDA routing serve again).
struct AloneRuns {
  Run cpu, cuda;
};
using AloneByName = std::map<std::string, AloneRuns>;

void compare_batched(Reporter& rep, const std::string& fixture, const ModelConfig& mc, const std::vector<int32_t>& prompt,
                     const std::vector<std::pair<std::string, SequenceParams>>& runs,
                     const AloneByName& alone = {}) {
  const std::string dir = fixture_dir(fixture) + "/model";
  DiffusionGemma model(mc, load_weights(mc, dir, cuda()), cuda());
  ModelCoreOptions o;
  o.max_num_seqs = static_cast<int>(runs.size());
  o.max_num_batched_tokens = static_cast<int64_t>(runs.size()) * (static_cast<int64_t>(prompt.size()) + 2 * mc.canvas_length);
  o.prefix_caching = false;  // every sequence encodes its prompt, as alone
  ModelCore core(cuda(), model, o);
  std::vector<std::unique_ptr<Sequence>> seqs;
  std::vector<Sequence*> all;
  for (size_t i = 0; i < runs.size(); ++i) {
    seqs.push_back(core.make_sequence(static_cast<uint64_t>(i + 1), prompt, runs[i].second));
    all.push_back(seqs.back().get());
  }
  try {
    core.run(all, 10000);
  } catch (const Error&) {
    // Did not finish: reported by compare from the sequences' states.
  }
  for (size_t i = 0; i < runs.size(); ++i) {
    // A run made alone before (the guided ones, with their routing) serves again: its CPU run, and its
    // routing on CUDA alone standing for the batched step's, which is not dumped (it only names where a
    // flip happened: the CPU's margin decides). Another run goes on the CPU here.
    const auto it = alone.find(runs[i].first);
    Run fresh;
    if (it == alone.end()) fresh = run_on(cpu(), fixture, mc, runs[i].second, prompt);
    const Run& c = it != alone.end() ? it->second.cpu : fresh;
    const StepRoutes* cuda_routes = it != alone.end() ? it->second.cuda.routes.get() : nullptr;
    const std::vector<CanvasRecord> g = core.traces().canvases(static_cast<uint64_t>(i + 1));
    compare(rep, runs[i].first + " (batched on CUDA)", runs[i].second,
            {c.seq.get(), &c.canvases, c.logits.get(), c.routes.get()},
            {seqs[i].get(), &g, nullptr, cuda_routes});
  }
}

// For a guided run: whether position `pos` of canvas `k` lies in the gap, and which of `tokens` its
// mask allows (a diagnosis of a divergence).
std::string guided_context(const SequenceParams& p, int k, int C, int pos, std::initializer_list<int32_t> tokens) {
  if (!p.guided) return "";
  const GuidedSegment seg = guided_segment(*p.guided, k, C);
  std::string s = "; gap [" + std::to_string(seg.first) + ", " + std::to_string(seg.last) + ")";
  if (seg.empty() || pos < seg.first || pos >= seg.last) return s + ", outside";
  const std::vector<uint32_t>& mask = p.guided->constraint->gap_mask();
  s += ", allowed:";
  for (int32_t t : tokens) s += " " + std::to_string(t) + (mask_allows(mask, t) ? "=y" : "=n");
  return s;
}

// With both runs' logits: how far the two backends' logits of step `step` (counted over all canvases)
// are apart at row `pos` (all tokens, and the tokens the guided gap allows), the whole step's and the
// step before's largest difference, and the row's three largest allowed logits on each backend.
std::string logits_context(const SequenceParams& p, const Trajectory& c, const Trajectory& g, size_t step, int C,
                           int pos) {
  if (c.logits == nullptr || g.logits == nullptr || step >= c.logits->size() || step >= g.logits->size()) return "";
  const std::vector<uint32_t>* mask = p.guided ? &p.guided->constraint->gap_mask() : nullptr;
  auto allowed = [&](size_t v) { return mask == nullptr || mask_allows(*mask, static_cast<int64_t>(v)); };
  auto max_diff = [&](size_t s, int row, bool only_allowed) {
    const std::vector<uint16_t>&a = (*c.logits)[s], &b = (*g.logits)[s];
    const size_t V = a.size() / static_cast<size_t>(C);
    double m = 0;
    for (int r = row < 0 ? 0 : row; r < (row < 0 ? C : row + 1); ++r)
      for (size_t v = 0; v < V; ++v)
        if (!only_allowed || allowed(v))
          m = std::max(m, std::fabs(static_cast<double>(bf16_to_f32(a[r * V + v])) - bf16_to_f32(b[r * V + v])));
    return m;
  };
  std::string s = "; logits |CPU - CUDA| max: row " + fmt_double(max_diff(step, pos, false)) + ", allowed " +
                  fmt_double(max_diff(step, pos, true)) + ", step " + fmt_double(max_diff(step, -1, false));
  if (step > 0) s += ", step before " + fmt_double(max_diff(step - 1, -1, false));
  const std::vector<uint16_t>&a = (*c.logits)[step], &b = (*g.logits)[step];
  const size_t V = a.size() / static_cast<size_t>(C);
  std::vector<size_t> ids;
  for (size_t v = 0; v < V; ++v)
    if (allowed(v)) ids.push_back(v);
  const auto at = [&](const std::vector<uint16_t>& x, size_t v) { return bf16_to_f32(x[pos * V + v]); };
  std::partial_sort(ids.begin(), ids.begin() + static_cast<long>(std::min<size_t>(3, ids.size())), ids.end(),
                    [&](size_t x, size_t y) { return at(a, x) > at(a, y); });
  s += "; top allowed (id CPU/CUDA):";
  for (size_t j = 0; j < std::min<size_t>(3, ids.size()); ++j)
    s += " " + std::to_string(ids[j]) + " " + fmt_double(at(a, ids[j])) + "/" + fmt_double(at(b, ids[j]));
  return s;
}

// Row r's chosen experts of one layer's routing (i32 [T, K]), ascending.
std::vector<int32_t> chosen_experts(const std::vector<int32_t>& index, size_t r, size_t K) {
  std::vector<int32_t> e(index.begin() + static_cast<long>(r * K),
                         index.begin() + static_cast<long>((r + 1) * K));
  std::sort(e.begin(), e.end());
  return e;
}

// Where the two runs' routing of step `step` (counted over all canvases) differs: a (layer, canvas row)
// whose chosen experts differ, those experts on each side and the CPU router's probabilities of that row
// (null when not dumped).
struct ExpertFlip {
  size_t layer = 0;
  int row = 0;
  std::vector<int32_t> cpu, cuda;  // ascending
  const float* cpu_probs = nullptr;
};
// Every flip of the step's canvas rows (its last C rows), in layer then row order; empty when either
// run kept no routing or the two are not comparable (`comparable` says which).
std::vector<ExpertFlip> expert_flips(const Trajectory& c, const Trajectory& g, size_t step, int C,
                                     bool* comparable = nullptr) {
  std::vector<ExpertFlip> flips;
  if (comparable != nullptr) *comparable = false;
  if (c.routes == nullptr || g.routes == nullptr || step >= c.routes->size() || step >= g.routes->size())
    return flips;
  const StepRouting &a = (*c.routes)[step], &b = (*g.routes)[step];
  const size_t T = a.rows;
  if (a.index.size() != b.index.size() || T != b.rows || T < static_cast<size_t>(C)) return flips;
  if (comparable != nullptr) *comparable = true;
  const size_t first = T - static_cast<size_t>(C);
  for (size_t l = 0; l < a.index.size(); ++l) {
    if (a.index[l].size() != b.index[l].size() || a.index[l].empty() || a.index[l].size() % T != 0) continue;
    const size_t K = a.index[l].size() / T;
    const bool have_probs = l < a.probs.size() && !a.probs[l].empty() && a.probs[l].size() % T == 0;
    for (size_t r = first; r < T; ++r) {
      ExpertFlip f{l, static_cast<int>(r - first), chosen_experts(a.index[l], r, K),
                   chosen_experts(b.index[l], r, K)};
      if (f.cpu == f.cuda) continue;
      if (have_probs) f.cpu_probs = a.probs[l].data() + r * (a.probs[l].size() / T);
      flips.push_back(std::move(f));
    }
  }
  return flips;
}

// The experts of `mine` that `other` lacks.
std::vector<int32_t> only_in(const std::vector<int32_t>& mine, const std::vector<int32_t>& other) {
  std::vector<int32_t> out;
  std::set_difference(mine.begin(), mine.end(), other.begin(), other.end(), std::back_inserter(out));
  return out;
}

// The flips of step `step`, the first few named with the CPU router's probabilities of the experts chosen
// by one backend only. A near-tie of the router moves a row's logits by far more than the GEMMs'
// rounding does.
std::string routing_context(const Trajectory& c, const Trajectory& g, size_t step, int C) {
  if (c.routes == nullptr || g.routes == nullptr) return "";
  bool comparable = false;
  const std::vector<ExpertFlip> flips = expert_flips(c, g, step, C, &comparable);
  if (!comparable) return "; routing not comparable";
  if (flips.empty()) return "; the same experts chosen in every layer and row";
  auto list = [](const std::vector<int32_t>& e) {
    std::string x;
    for (int32_t v : e) x += (x.empty() ? "" : " ") + std::to_string(v);
    return "{" + x + "}";
  };
  std::string s = "; chosen experts differ at " + std::to_string(flips.size()) + " (layer, row) pairs";
  for (size_t i = 0; i < std::min<size_t>(4, flips.size()); ++i) {
    const ExpertFlip& f = flips[i];
    s += "; layer " + std::to_string(f.layer) + " row " + std::to_string(f.row) + ": experts CPU " +
         list(f.cpu) + " / CUDA " + list(f.cuda);
    if (f.cpu_probs == nullptr) continue;
    s += ", CPU router probabilities";
    for (const std::vector<int32_t>& side : {only_in(f.cpu, f.cuda), only_in(f.cuda, f.cpu)})
      for (int32_t e : side) s += " " + std::to_string(e) + " " + fmt_double(f.cpu_probs[e]);
  }
  return s;
}

// A router near-tie at canvas row `row` of step `step` (counted over all canvases): in some layer the two
// backends chose different experts for that row, and the CPU router's logits of the experts that swapped
// (the lowest-ranked expert only the CPU chose, the highest-ranked only CUDA chose) lie within kTieZ of
// each other, the sampler's near-tie margin. Such a flip moves the row's logits by far more than
// rounding (about 1.0 on tiny_a), which a guided gap that masks the row's own choice shows in the tail it
// samples from; a divergence there is a near-tie of the forward, not of the sampler. Empty: none (or no
// routing kept).
std::string router_tie(const Trajectory& c, const Trajectory& g, size_t step, int C, int row) {
  for (const ExpertFlip& f : expert_flips(c, g, step, C)) {
    if (f.row != row || f.cpu_probs == nullptr) continue;
    float only_cpu = INFINITY, only_cuda = 0;
    for (int32_t e : only_in(f.cpu, f.cuda)) only_cpu = std::min(only_cpu, f.cpu_probs[e]);
    for (int32_t e : only_in(f.cuda, f.cpu)) only_cuda = std::max(only_cuda, f.cpu_probs[e]);
    const double gap = std::log(static_cast<double>(only_cpu)) - std::log(static_cast<double>(only_cuda));
    if (only_cpu > 0 && only_cuda > 0 && gap < kTieZ)
      return "router near-tie at layer " + std::to_string(f.layer) + " row " + std::to_string(row) +
             " (CPU logit gap " + fmt_double(gap) + ")";
  }
  return "";
}

void compare(Reporter& rep, const std::string& name, const SequenceParams& p, const Trajectory& c, const Trajectory& g) {
  if (c.seq->state != Sequence::State::kFinished || g.seq->state != Sequence::State::kFinished) {
    rep.fail(name + ": a trajectory did not finish");
    return;
  }
  int matched = 0, total = 0;
  std::string divergence;
  for (const auto& cr : (*c.canvases)) total += static_cast<int>(cr.trace.size());
  size_t steps_before = 0;  // the CPU's steps of the canvases before k
  for (size_t k = 0; k < (*c.canvases).size() && divergence.empty(); steps_before += (*c.canvases)[k].trace.size(), ++k) {
    if (k >= (*g.canvases).size()) {
      rep.fail(name + ": CUDA committed fewer canvases without a recorded divergence");
      break;
    }
    const auto& ct = (*c.canvases)[k].trace;
    const auto& gt = (*g.canvases)[k].trace;
    for (size_t s = 0; s < ct.size() && divergence.empty(); ++s) {
      const std::string at = name + " canvas " + std::to_string(k) + " step " + std::to_string(s);
      if (s >= gt.size()) {
        rep.fail(at + ": CUDA stopped earlier without a recorded divergence");
        divergence = at;
        break;
      }
      const StepRecord& a = ct[s];
      const StepRecord& b = gt[s];
      if (a.canvas_in != b.canvas_in) {
        rep.fail(at + ": input canvases differ without a recorded divergence");
        divergence = at;
        break;
      }
      if (a.temperature != b.temperature) rep.fail(at + ": temperatures differ");
      // This step's row failures; a router near-tie at a failing row turns them into the step's divergence.
      std::vector<std::string> failures;
      std::string tie;
      const int C = static_cast<int>(a.entropy.size());
      auto row_fail = [&](size_t i, const std::string& what) {
        failures.push_back(what);
        if (tie.empty()) tie = router_tie(c, g, steps_before + s, C, static_cast<int>(i));
      };
      for (size_t i = 0; i < a.entropy.size(); ++i)
        if (std::fabs(static_cast<double>(a.entropy[i]) - b.entropy[i]) > 0.1 + 0.05 * std::fabs(a.entropy[i])) {
          row_fail(i, at + ": entropy differs at " + std::to_string(i) + " (CPU " + fmt_double(a.entropy[i]) +
                   ", CUDA " + fmt_double(b.entropy[i]) + "; argmax " + std::to_string(a.argmax[i]) + " / " +
                   std::to_string(b.argmax[i]) + ", sample " + std::to_string(a.sample[i]) + " / " +
                   std::to_string(b.sample[i]) + ", input token " + std::to_string(a.canvas_in[i]) +
                   guided_context(p, static_cast<int>(k), C, static_cast<int>(i),
                                  {a.argmax[i], b.argmax[i], a.sample[i], b.sample[i]}) +
                   logits_context(p, c, g, steps_before + s, C, static_cast<int>(i)) +
                   routing_context(c, g, steps_before + s, C) + ")");
          break;
        }
      // With a guided answer a position's acceptance also depends on the chosen tokens before it (the
      // walk): after a (near-tie) difference there, its acceptance may differ too.
      const std::vector<DecisionDiff> diffs = decision_diffs(a, b);
      bool differs = !diffs.empty();
      size_t first_choice = a.argmax.size();  // the first position whose argmax or sample differs
      for (const DecisionDiff& d : diffs) {
        const size_t i = d.position;
        const bool choice = d.what != Decision::kAccept;
        if (!d.near_tie && (choice || !(p.guided && first_choice < i))) {
          std::string what = at + ": " + describe(d) + " differs without a near-tie";
          if (d.what == Decision::kSample)
            what += " (CPU " + std::to_string(a.sample[i]) + ", CUDA " + std::to_string(b.sample[i]) +
                    ", CUDA's margin " + fmt_double(b.sample_gap[i]) + ")";
          row_fail(i, what);
        }
        if (choice) first_choice = std::min(first_choice, i);
      }
      if (!tie.empty()) {
        divergence = at + " (" + tie + ")";
        break;
      }
      for (const std::string& f : failures) rep.fail(f);
      if (a.stop != b.stop) {
        differs = true;
        if (!stop_difference_explained(a, b, p.diffusion.confidence_threshold))
          rep.fail(at + ": stop decision differs without a near-tie");
      }
      if (differs) {
        divergence = at;
        break;
      }
      if (a.canvas_out != b.canvas_out) rep.fail(at + ": renoised canvases differ");
      ++matched;
    }
  }
  if (divergence.empty()) {
    if (c.seq->output() != g.seq->output()) rep.fail(name + ": outputs differ although every step matched");
    if ((*c.canvases).size() != (*g.canvases).size()) rep.fail(name + ": canvas counts differ");
  }
  rep.note(name + ": " + std::to_string(matched) + " of " + std::to_string(total) + " CPU steps identical on CUDA" +
           (divergence.empty() ? ", same output (" + std::to_string(c.seq->output().size()) + " tokens)"
                               : "; near-tie divergence at " + divergence));
}

void trajectories(Reporter& rep, const std::string& fixture) {
  const std::string dir = fixture_dir(fixture) + "/model";
  const ModelConfig mc = load_model_config(dir);
  const Json manifest = parse_json(read_text_file(fixture_dir(fixture) + "/golden/manifest.json"), "manifest", true);
  const auto prompt = ids(fixture, "prompt_ids");
  std::vector<std::pair<std::string, SequenceParams>> batch;
  for (const auto& m : manifest["runs"]) {
    const std::string name = fixture + "/" + m["name"].get<std::string>();
    SequenceParams p = fixture_run_params(m);
    if (m["initial_canvas"].get<bool>()) p.initial_canvas = ids(fixture, "run." + m["name"].get<std::string>() + ".initial_canvas");
    compare_run(rep, fixture, mc, prompt, name, p);
    batch.push_back({name, p});
  }
  // Pinned spans (docs/MODEL.md §6.6) with the default run's settings: a span in the first canvas and
  // one across into the second.
  for (const auto& m : manifest["runs"]) {
    if (m["name"] != "default") continue;
    const int C = mc.canvas_length;
    SequenceParams p = fixture_run_params(m);
    p.seed += 1;
    p.max_tokens = 2 * C;
    p.pins = {{3, {11, 12, 13, 14}}, {C - 2, {21, 22, 23, 24}}};
    compare_run(rep, fixture, mc, prompt, fixture + "/pinned", p);
    batch.push_back({fixture + "/pinned", p});
    // A greedy run (temperature 0: no noise drawn, the sample is the argmax).
    SequenceParams greedy = p;
    greedy.pins.clear();
    greedy.greedy = true;
    greedy.seed += 1;
    batch.push_back({fixture + "/greedy", greedy});
  }
  compare_batched(rep, fixture, mc, prompt, batch);
}

// The committed answer is one value of the constraint (filler skipped) on either backend.
void expect_valid(Reporter& rep, const std::string& name, const GuidedAnswer& g, const Sequence& seq) {
  const guided::TokenConstraint& c = *g.constraint;
  const guided::WalkResult w = c.walk(c.start(), seq.output());
  if (w.accepted != static_cast<int32_t>(seq.output().size()) || !c.accepting(w.state))
    rep.fail(name + ": the answer is not a value of the constraint");
}

void guided_trajectories(Reporter& rep, const std::string& fixture) {
  const std::string dir = fixture_dir(fixture) + "/model";
  const ModelConfig mc = load_model_config(dir);
  const Json manifest =
      parse_json(read_text_file(fixture_dir(fixture) + "/golden/manifest.json"), "manifest", true);
  const auto prompt = ids(fixture, "prompt_ids");
  const int vocab = static_cast<int>(mc.text.vocab_size);
  for (const auto& m : manifest["runs"]) {
    if (m["name"] != "default") continue;
    // A regex whose gap mask leaves a small part of the vocabulary and whose walk cuts often; every
    // position passes the entropy bound, so the walk alone decides what is kept (on a random model the
    // fixture's bound keeps about one position a step, which the walk then mostly cuts). The value
    // spans canvases.
    SequenceParams p = fixture_run_params(m);
    p.max_tokens = 3 * mc.canvas_length;
    p.diffusion.entropy_bound = 1e6;
    p.guided = fixture_guided_answer(vocab, p, guided::ConstraintSpec::regex("[ab ]+(x[0-9]+)?"));
    SequenceParams greedy = p;
    greedy.greedy = true;
    greedy.seed += 1;
    // A JSON Schema with the fixture's settings.
    SequenceParams json = fixture_run_params(m);
    json.max_tokens = 3 * mc.canvas_length;
    json.seed += 2;
    json.guided = fixture_guided_answer(vocab, json, guided::ConstraintSpec::json_schema(R"({"type": "object",
        "properties": {"a": {"type": "integer"}, "b": {"type": "array", "items": {"type": "integer"}}},
        "required": ["a"]})"));
    const std::vector<std::pair<std::string, SequenceParams>> runs = {
        {fixture + "/guided", p}, {fixture + "/guided greedy", greedy}, {fixture + "/guided json", json}};
    AloneByName alone;
    for (const auto& [name, params] : runs) {
      AloneRuns& r = alone[name];
      r.cpu = run_on(cpu(), fixture, mc, params, prompt, true);
      r.cuda = run_on(cuda(), fixture, mc, params, prompt, true);
      const Run &c = r.cpu, &g = r.cuda;
      compare(rep, name, params, {c.seq.get(), &c.canvases, c.logits.get(), c.routes.get()},
              {g.seq.get(), &g.canvases, g.logits.get(), g.routes.get()});
      expect_valid(rep, name + " on CPU", *params.guided, *c.seq);
      expect_valid(rep, name + " on CUDA", *params.guided, *g.seq);
    }
    // Guided and unguided sequences in one step on CUDA.
    std::vector<std::pair<std::string, SequenceParams>> batch = runs;
    batch.insert(batch.begin() + 1, {fixture + "/default", fixture_run_params(m)});
    compare_batched(rep, fixture, mc, prompt, batch, alone);
  }
}

}  // namespace

std::vector<Case> trajectory_cases() {
  return {
      {"trajectory_cpu_vs_cuda_tiny_a", [](Reporter& r) { trajectories(r, "tiny_a"); }},
      {"trajectory_cpu_vs_cuda_tiny_b", [](Reporter& r) { trajectories(r, "tiny_b"); }},
      {"guided_trajectory_tiny_a", [](Reporter& r) { guided_trajectories(r, "tiny_a"); }},
      {"guided_trajectory_tiny_b", [](Reporter& r) { guided_trajectories(r, "tiny_b"); }},
  };
}

}  // namespace dgemma::gpu_test
