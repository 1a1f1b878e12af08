// The CPU backend: the reference implementation of every op (tests compare the CUDA backend with it).
#include <algorithm>
#include <cmath>
#include <cstring>

#include <unistd.h>

#include "backend/backend.h"
#include "backend/collective.h"
#include "backend/cpu/cpu_ops.h"
#include "backend/rope_math.h"
#include "util/bf16.h"
#include "util/counter_rng.h"
#include "util/error.h"
#include "util/parallel.h"

namespace dgemma {
namespace {

class CpuBackend final : public Backend {
 public:
  Device device() const override { return Device::kCpu; }
  std::string name() const override { return "cpu"; }
  MemoryInfo memory_info() override {
    const uint64_t page = static_cast<uint64_t>(sysconf(_SC_PAGESIZE));
    return {static_cast<uint64_t>(sysconf(_SC_AVPHYS_PAGES)) * page, static_cast<uint64_t>(sysconf(_SC_PHYS_PAGES)) * page};
  }

  Tensor alloc(ScalarType type, std::initializer_list<int64_t> dims) override { return host_tensor(type, dims); }
  Tensor upload(const Tensor& host) override { return host; }
  bool supports_guided_gaps() const override { return true; }
  void to_host(const Tensor& src, void* dst) override { std::memcpy(dst, src.data, src.nbytes()); }
  void from_host(const Tensor& dst, const void* src) override { std::memcpy(dst.data, src, dst.nbytes()); }
  void copy(const Tensor& dst, const Tensor& src) override {
    DG_CHECK(dst.nbytes() == src.nbytes());
    std::memmove(dst.data, src.data, src.nbytes());
  }
  void copy_columns(const Tensor& dst, const Tensor& src, int64_t first) override {
    const int64_t T = dst.dim(0), n = T > 0 ? dst.numel() / T : 0, m = T > 0 ? src.numel() / T : 0;
    DG_CHECK(dst.type == src.type && src.dim(0) == T && first >= 0 && first + n <= m);
    const size_t es = scalar_size(src.type);
    for (int64_t t = 0; t < T; ++t)
      std::memcpy(dst.ptr<uint8_t>() + static_cast<size_t>(t * n) * es,
                  src.ptr<const uint8_t>() + static_cast<size_t>(t * m + first) * es, static_cast<size_t>(n) * es);
  }

  void embed(const Tensor& ids, const Tensor& table, float scale, const Tensor& out) override {
    const int64_t T = ids.numel(), V = table.dim(0), H = table.dim(1);
    const int32_t* id = ids.ptr<int32_t>();
    const uint16_t* tab = table.ptr<uint16_t>();
    uint16_t* o = out.ptr<uint16_t>();
    for (int64_t t = 0; t < T; ++t) {
      DG_CHECK(id[t] >= 0 && id[t] < V);
      const uint16_t* row = tab + static_cast<int64_t>(id[t]) * H;
      for (int64_t i = 0; i < H; ++i) o[t * H + i] = f32_to_bf16(bf16_to_f32(row[i]) * scale);
    }
  }

  void rmsnorm(const Tensor& x, const Tensor* weight, float eps, const Tensor& out) override {
    const int64_t N = x.dim(-1), R = x.numel() / N;
    const uint16_t* in = x.ptr<uint16_t>();
    const uint16_t* w = weight ? weight->ptr<uint16_t>() : nullptr;
    DG_CHECK(!weight || weight->numel() == N);
    uint16_t* o = out.ptr<uint16_t>();
    parallel_for(static_cast<size_t>(R), [&](size_t b, size_t e) {
      for (size_t r = b; r < e; ++r) {
        const uint16_t* row = in + r * N;
        double ss = 0;
        for (int64_t i = 0; i < N; ++i) {
          const float v = bf16_to_f32(row[i]);
          ss += static_cast<double>(v) * v;
        }
        const float ms = static_cast<float>(ss / static_cast<double>(N)) + eps;
        const float inv = std::pow(ms, -0.5f);
        for (int64_t i = 0; i < N; ++i) {
          float v = bf16_to_f32(row[i]) * inv;
          if (w) v *= bf16_to_f32(w[i]);
          o[r * N + i] = f32_to_bf16(v);
        }
      }
    }, 16);
  }

  void matmul(const Tensor& x, const Weight& w, const Tensor& out) override { cpu::matmul(x, w, out); }
  void matmul_fp8(const Fp8Rows& x, const Weight& w, const Tensor& out) override {
    cpu::matmul_fp8(x, w, out);
  }
  void matmul_kn(const Tensor& x, const Tensor& w, const Tensor& out) override { cpu::matmul_kn(x, w, out); }
  void matmul_kn_blocks(const Tensor& x, const Tensor& w, int blocks, const Tensor& out) override {
    cpu::matmul_kn_blocks(x, w, blocks, out);
  }
  void sum_blocks(const Tensor& partials, const Tensor& out) override { cpu::sum_blocks(partials, out); }

  void embed_shard(const Tensor& ids, const Tensor& table, int64_t first, int64_t vocab_total, float scale,
                   const Tensor& out) override {
    const int64_t T = ids.numel(), V = table.dim(0), H = table.dim(1);
    const int32_t* id = ids.ptr<int32_t>();
    const uint16_t* tab = table.ptr<uint16_t>();
    uint16_t* o = out.ptr<uint16_t>();
    for (int64_t t = 0; t < T; ++t) {
      DG_CHECK(id[t] >= 0 && id[t] < vocab_total);
      const int64_t local = static_cast<int64_t>(id[t]) - first;
      if (local < 0 || local >= V) {
        std::fill(o + t * H, o + (t + 1) * H, kBf16NegZero);  // the neutral element of the exchange's sum
        continue;
      }
      const uint16_t* row = tab + local * H;
      for (int64_t i = 0; i < H; ++i) o[t * H + i] = f32_to_bf16(bf16_to_f32(row[i]) * scale);
    }
  }

  void rope(const Tensor& x, const Tensor& positions, const Tensor& inv_freq) override {
    const int64_t T = x.dim(0), NH = x.dim(1), D = x.dim(2), half = D / 2;
    DG_CHECK(inv_freq.numel() == half && positions.numel() == T);
    const int32_t* pos = positions.ptr<int32_t>();
    const float* inv = inv_freq.ptr<float>();
    uint16_t* data = x.ptr<uint16_t>();
    parallel_for(static_cast<size_t>(T), [&](size_t b, size_t e) {
      std::vector<float> c(half), s(half);
      for (size_t t = b; t < e; ++t) {
        const float p = static_cast<float>(pos[t]);
        for (int64_t j = 0; j < half; ++j) {
          const float f = inv[j] * p;  // fp32, as inv_freq @ position_ids
          c[j] = round_bf16(std::cos(f));
          s[j] = round_bf16(std::sin(f));
        }
        for (int64_t h = 0; h < NH; ++h) rope_rotate_block(data + (t * NH + h) * D, half, c.data(), s.data());
      }
    });
  }

  void add(const Tensor& a, const Tensor& b, const Tensor& out) override {
    DG_CHECK(a.numel() == b.numel() && a.numel() == out.numel());
    const uint16_t* x = a.ptr<uint16_t>();
    const uint16_t* y = b.ptr<uint16_t>();
    uint16_t* o = out.ptr<uint16_t>();
    const int64_t n = a.numel();
    for (int64_t i = 0; i < n; ++i) o[i] = f32_to_bf16(bf16_to_f32(x[i]) + bf16_to_f32(y[i]));
  }

  void scale(const Tensor& x, float s, const Tensor& out) override {
    const uint16_t* in = x.ptr<uint16_t>();
    uint16_t* o = out.ptr<uint16_t>();
    const int64_t n = x.numel();
    for (int64_t i = 0; i < n; ++i) o[i] = f32_to_bf16(bf16_to_f32(in[i]) * s);
  }

  void mul(const Tensor& a, const Tensor& b, const Tensor& out) override {
    const int64_t n = a.numel(), m = b.numel();
    DG_CHECK(m == n || (n % m == 0));
    const uint16_t* x = a.ptr<uint16_t>();
    const uint16_t* y = b.ptr<uint16_t>();
    uint16_t* o = out.ptr<uint16_t>();
    for (int64_t i = 0; i < n; ++i) o[i] = f32_to_bf16(bf16_to_f32(x[i]) * bf16_to_f32(y[i % m]));
  }

  void gelu_mul(const Tensor& gate, const Tensor& up, const Tensor& out) override {
    DG_CHECK(gate.numel() == up.numel() && gate.numel() == out.numel());
    const uint16_t* g = gate.ptr<uint16_t>();
    const uint16_t* u = up.ptr<uint16_t>();
    uint16_t* o = out.ptr<uint16_t>();
    const int64_t n = gate.numel();
    for (int64_t i = 0; i < n; ++i)
      o[i] = f32_to_bf16(round_bf16(cpu::gelu_tanh(bf16_to_f32(g[i]))) * bf16_to_f32(u[i]));
  }

  void gelu_mul_halves(const Tensor& gate_up, const Tensor& out, const Fp8Rows& out_fp8) override {
    const int64_t T = gate_up.dim(0), I = out.dim(-1);
    DG_CHECK(gate_up.numel() == 2 * out.numel() && out.dim(0) == T && out.numel() == T * I);
    const uint16_t* in = gate_up.ptr<uint16_t>();
    uint16_t* o = out.ptr<uint16_t>();
    for (int64_t t = 0; t < T; ++t) {
      const uint16_t* g = in + t * 2 * I;
      const uint16_t* u = g + I;
      for (int64_t i = 0; i < I; ++i)
        o[t * I + i] = f32_to_bf16(round_bf16(cpu::gelu_tanh(bf16_to_f32(g[i]))) * bf16_to_f32(u[i]));
    }
    if (!out_fp8.empty()) quantize_fp8_rows(out, out_fp8);
  }

  void attention(const AttentionArgs& a) override { cpu::attention(a); }
  void moe(const MoeArgs& a) override { cpu::moe(a); }
  void sampler(const SamplerArgs& a) override { cpu::sampler(a); }
  bool vocab_sharded_sampler() const override { return true; }
  void decide(const DecideArgs& a) override { cpu::decide(a); }

  void kv_write(const Tensor& pages, const Tensor& page_table, int64_t first_pos, const Tensor& src) override {
    DG_CHECK(pages.ndim == 4 && src.ndim == 3 && page_table.type == ScalarType::kI32);
    const int64_t num_pages = pages.dim(0), Hkv = pages.dim(1), P = pages.dim(2), D = pages.dim(3), n = src.dim(0);
    DG_CHECK(src.dim(1) == Hkv && src.dim(2) == D && first_pos >= 0);
    DG_CHECK(n == 0 || (first_pos + n - 1) / P < page_table.numel());
    const uint16_t* s = src.ptr<uint16_t>();
    uint16_t* c = pages.ptr<uint16_t>();
    const int32_t* table = page_table.ptr<int32_t>();
    for (int64_t j = 0; j < n; ++j) {
      const int64_t pos = first_pos + j, page = table[pos / P];
      DG_CHECK(page >= 0 && page < num_pages);
      for (int64_t h = 0; h < Hkv; ++h)
        std::memcpy(c + ((page * Hkv + h) * P + pos % P) * D, s + (j * Hkv + h) * D, static_cast<size_t>(D) * 2);
    }
  }

  void fill_normal(const Tensor& t, uint64_t seed, float mean, float std) override {
    DG_CHECK(t.type == ScalarType::kBF16);
    uint16_t* o = t.ptr<uint16_t>();
    const int64_t n = t.numel();
    const uint64_t key = rng::splitmix64(seed);
    parallel_for(static_cast<size_t>(n), [&](size_t b, size_t e) {
      for (size_t i = b; i < e; ++i) o[i] = f32_to_bf16(mean + std * rng::normal(key, i));
    }, 1 << 16);
  }

  void softcap_logits(const Tensor& logits, float softcap, const Tensor& out) override {
    const uint16_t* in = logits.ptr<uint16_t>();
    float* o = out.ptr<float>();
    const int64_t n = logits.numel();
    for (int64_t i = 0; i < n; ++i) {
      float s = bf16_to_f32(in[i]) / softcap;
      s = std::tanh(s);
      o[i] = s * softcap;
    }
  }
};

}  // namespace

std::unique_ptr<Backend> make_cpu_backend() { return std::make_unique<CpuBackend>(); }

}  // namespace dgemma
