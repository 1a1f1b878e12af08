#include "model/linear_loader.h"

#include <cmath>
#include <cstring>

#include "model/safetensors.h"
#include "util/bf16.h"
#include "util/error.h"

namespace dgemma {

std::string shape_string(const std::vector<int64_t>& s) {
  std::string out = "[";
  for (size_t i = 0; i < s.size(); ++i) out += (i ? ", " : "") + std::to_string(s[i]);
  return out + "]";
}

Tensor checkpoint_bf16_tensor(const TensorInfo& t, const std::vector<int64_t>& shape) {
  Tensor out;
  out.type = ScalarType::kBF16;
  out.ndim = static_cast<int>(shape.size());
  for (size_t i = 0; i < shape.size(); ++i) out.shape[i] = shape[i];
  const int64_t n = t.numel();
  if (t.dtype == DType::kBF16 && reinterpret_cast<uintptr_t>(t.data) % 2 == 0) {
    out.data = const_cast<uint8_t*>(t.data);  // zero-copy from the mmap
    return out;
  }
  Tensor h = host_tensor(ScalarType::kBF16, {n});
  uint16_t* dst = h.ptr<uint16_t>();
  for (int64_t i = 0; i < n; ++i) {
    float v = 0;
    uint16_t b;
    if (t.dtype == DType::kBF16) {
      std::memcpy(&b, t.data + 2 * i, 2);
      v = bf16_to_f32(b);
    } else if (t.dtype == DType::kF16) {
      std::memcpy(&b, t.data + 2 * i, 2);
      v = f16_to_f32(b);
    } else {
      std::memcpy(&v, t.data + 4 * i, 4);
    }
    dst[i] = f32_to_bf16(v);
  }
  out.data = h.data;
  out.owner = h.owner;
  return out;
}

namespace {

bool is_float_dtype(DType d) { return d == DType::kBF16 || d == DType::kF16 || d == DType::kF32; }

float float_at(const TensorInfo& t, int64_t i) {
  uint16_t b;
  float v;
  switch (t.dtype) {
    case DType::kBF16: std::memcpy(&b, t.data + 2 * i, 2); return bf16_to_f32(b);
    case DType::kF16: std::memcpy(&b, t.data + 2 * i, 2); return f16_to_f32(b);
    default: std::memcpy(&v, t.data + 4 * i, 4); return v;
  }
}

// A borrowed view of checkpoint bytes (1-byte types need no alignment).
Tensor borrow_bytes(const TensorInfo& t, ScalarType type, std::initializer_list<int64_t> dims) {
  return borrow_tensor(const_cast<uint8_t*>(t.data), type, dims);
}

}  // namespace

bool LinearLoader::has_module(const std::string& m) const {
  for (const char* s : {".weight", ".weight_packed", ".qweight"})
    if (ckpt_.find(m + s)) return true;
  return false;
}

std::optional<Weight> LinearLoader::read(const std::string& m, int64_t N, int64_t K) {
  const TensorInfo* w = ckpt_.find(m + ".weight");
  const TensorInfo* wp = ckpt_.find(m + ".weight_packed");
  const TensorInfo* ws = ckpt_.find(m + ".weight_scale");
  const TensorInfo* ws2 = ckpt_.find(m + ".weight_scale_2");
  const TensorInfo* wg = ckpt_.find(m + ".weight_global_scale");
  for (const char* s : {".qweight", ".qzeros", ".scales", ".g_idx", ".weight_zero_point", ".weight_shape"})
    if (const TensorInfo* t = ckpt_.find(m + s)) {
      used_.insert(t->name);
      problem(fmt::format("tensor {} in {}: integer-quantised (AWQ/GPTQ/pack-quantized) weights are not supported", t->name, t->file));
      return std::nullopt;
    }
  for (const TensorInfo* t : {w, wp, ws, ws2, wg, ckpt_.find(m + ".input_scale"), ckpt_.find(m + ".input_global_scale")})
    if (t) used_.insert(t->name);
  const TensorInfo* main = wp ? wp : w;
  if (!main) {
    problem(fmt::format("missing tensor {}.weight (expected shape {})", m, shape_string({N, K})));
    return std::nullopt;
  }
  const bool quantised = wp || main->dtype == DType::kU8 || main->dtype == DType::kF8E4M3;
  if (!quantised) {
    if (!is_float_dtype(main->dtype)) {
      problem(fmt::format("tensor {} in {} has dtype {}; expected BF16 (F16/F32 are converted) or a quantised format",
                          main->name, main->file, dtype_name(main->dtype)));
      return std::nullopt;
    }
    if (main->shape != std::vector<int64_t>{N, K}) {
      problem(fmt::format("tensor {} in {} has shape {}; expected {}", main->name, main->file, shape_string(main->shape), shape_string({N, K})));
      return std::nullopt;
    }
    if (ws || ws2 || wg) {
      const TensorInfo* s = ws ? ws : ws2 ? ws2 : wg;
      problem(fmt::format("tensor {} in {}: a scale for the unquantised weight {} ({})", s->name, s->file, main->name, dtype_name(main->dtype)));
      return std::nullopt;
    }
    if (headers_only_) return Weight();
    return Weight(checkpoint_bf16_tensor(*main, {N, K}));
  }

  // Quantised: the checkpoint's config must allow it here.
  if (!quant_.quantized()) {
    problem(fmt::format("tensor {} in {} is quantised ({}) but the checkpoint declares no quantization_config", main->name,
                        main->file, dtype_name(main->dtype)));
    return std::nullopt;
  }
  if (quant_.ignored(m)) {
    problem(fmt::format("tensor {} in {} is quantised but module {} is in the ignore list of {}", main->name, main->file, m, quant_.source));
    return std::nullopt;
  }
  if (!ws) {
    problem(fmt::format("missing tensor {}.weight_scale for the quantised {} in {}", m, main->name, main->file));
    return std::nullopt;
  }
  Weight out;
  if (main->dtype == DType::kF8E4M3 && !wp) {
    // FP8 E4M3 with per-channel (or per-tensor) scales.
    if (!quant_.fp8) {
      problem(fmt::format("tensor {} in {} is FP8 but {} declares {}", main->name, main->file, quant_.source, quant_.summary));
      return std::nullopt;
    }
    if (main->shape != std::vector<int64_t>{N, K}) {
      problem(fmt::format("tensor {} in {} has shape {}; expected {}", main->name, main->file, shape_string(main->shape), shape_string({N, K})));
      return std::nullopt;
    }
    const bool channel = ws->shape == std::vector<int64_t>{N, 1} || ws->shape == std::vector<int64_t>{N};
    const bool tensor = ws->numel() == 1 && ws->shape.size() <= 1;
    if (!is_float_dtype(ws->dtype) || !(channel || tensor)) {
      problem(fmt::format("tensor {} in {} is {} {}; expected BF16/F32 [{}, 1] (per output channel) or a scalar",
                          ws->name, ws->file, dtype_name(ws->dtype), shape_string(ws->shape), N));
      return std::nullopt;
    }
    out.format = WeightFormat::kFp8Channel;
    out.act = quant_.fp8_act_token ? ActQuant::kFp8Token : ActQuant::kNone;
    if (headers_only_) return out;
    Tensor rs = host_tensor(ScalarType::kF32, {N});
    for (int64_t n = 0; n < N; ++n) {
      const float v = float_at(*ws, channel ? n : 0);
      if (!std::isfinite(v) || v < 0) {
        problem(fmt::format("tensor {} in {}: scale {} at row {} is not a finite non-negative number", ws->name, ws->file, v, n));
        return std::nullopt;
      }
      rs.ptr<float>()[n] = v;
    }
    out.data = borrow_bytes(*main, ScalarType::kF8E4M3, {N, K});
    out.row_scale = rs;
    return out;
  }

  // NVFP4: packed E2M1 pairs, E4M3 block scales per 16 inputs, one fp32 global scale.
  const bool modelopt = !wp;
  if (modelopt && main->dtype != DType::kU8) {
    problem(fmt::format("tensor {} in {} has dtype {}; expected U8 (packed NVFP4)", main->name, main->file, dtype_name(main->dtype)));
    return std::nullopt;
  }
  if (!quant_.nvfp4 || (modelopt != (quant_.method == QuantMethod::kModelopt))) {
    problem(fmt::format("tensor {} in {} is {} NVFP4 but {} declares {}", main->name, main->file,
                        modelopt ? "ModelOpt-style" : "compressed-tensors-style", quant_.source, quant_.summary));
    return std::nullopt;
  }
  if (K % kNvfp4Group != 0) {
    problem(fmt::format("module {}: input width {} is not a multiple of the NVFP4 group ({})", m, K, kNvfp4Group));
    return std::nullopt;
  }
  if (main->dtype != DType::kU8 || main->shape != std::vector<int64_t>{N, K / 2}) {
    problem(fmt::format("tensor {} in {} is {} {}; expected U8 {} (two E2M1 values per byte)", main->name, main->file,
                        dtype_name(main->dtype), shape_string(main->shape), shape_string({N, K / 2})));
    return std::nullopt;
  }
  if (ws->dtype != DType::kF8E4M3 || ws->shape != std::vector<int64_t>{N, K / kNvfp4Group}) {
    problem(fmt::format("tensor {} in {} is {} {}; expected F8_E4M3 {} (one scale per 16 inputs)", ws->name, ws->file,
                        dtype_name(ws->dtype), shape_string(ws->shape), shape_string({N, K / kNvfp4Group})));
    return std::nullopt;
  }
  out.format = WeightFormat::kNvfp4;
  for (int64_t i = 0; i < (headers_only_ ? 0 : ws->numel()); ++i) {
    const uint8_t b = ws->data[i];
    if ((b & 0x7f) == 0x7f || (b & 0x80 && (b & 0x7f) != 0)) {
      problem(fmt::format("tensor {} in {}: block scale at row {}, block {} is {} (block scales must be finite and non-negative)",
                          ws->name, ws->file, i / (K / kNvfp4Group), i % (K / kNvfp4Group), f8e4m3_to_f32(b)));
      return std::nullopt;
    }
  }
  const TensorInfo* g = modelopt ? ws2 : wg;
  const char* gname = modelopt ? "weight_scale_2" : "weight_global_scale";
  if (!g) {
    problem(fmt::format("missing tensor {}.{} (the NVFP4 global scale of {} in {})", m, gname, main->name, main->file));
    return std::nullopt;
  }
  if (g->dtype != DType::kF32 || g->numel() != 1 || g->shape.size() > 1) {
    problem(fmt::format("tensor {} in {} is {} {}; expected an F32 scalar", g->name, g->file, dtype_name(g->dtype), shape_string(g->shape)));
    return std::nullopt;
  }
  if (headers_only_) return out;
  const float gv = float_at(*g, 0);
  if (!std::isfinite(gv) || gv <= 0) {
    problem(fmt::format("tensor {} in {}: global scale {} is not a finite positive number", g->name, g->file, gv));
    return std::nullopt;
  }
  // compressed-tensors stores the reciprocal of ModelOpt's weight_scale_2 (W = q * s / global).
  const float row = modelopt ? gv : 1.0f / gv;
  Tensor rs = host_tensor(ScalarType::kF32, {N});
  for (int64_t n = 0; n < N; ++n) rs.ptr<float>()[n] = row;
  out.data = borrow_bytes(*main, ScalarType::kU8, {N, K / 2});
  out.block = borrow_bytes(*ws, ScalarType::kF8E4M3, {N, K / kNvfp4Group});
  out.row_scale = rs;
  return out;
}

std::optional<Weight> LinearLoader::read_experts(const std::string& prefix, int64_t E, int64_t I, int64_t H, bool gate_up) {
  const int64_t N = gate_up ? 2 * I : H, K = gate_up ? H : I;
  std::vector<Weight> parts;  // gate_up: gate_0, up_0, gate_1, ...; down: down_0, ...
  bool ok = true;
  for (int64_t e = 0; e < E; ++e) {
    const std::string base = prefix + "." + std::to_string(e) + ".";
    for (const char* p : gate_up ? std::vector<const char*>{"gate_proj", "up_proj"} : std::vector<const char*>{"down_proj"}) {
      auto w = read(base + p, gate_up ? I : H, K);
      if (!w) {
        ok = false;
        continue;
      }
      parts.push_back(std::move(*w));
    }
  }
  if (!ok) return std::nullopt;
  for (const Weight& w : parts)
    if (w.format != parts[0].format || w.act != parts[0].act) {
      problem(fmt::format("{}.*: experts stored in mixed formats ({} and {}); one format per layer is supported", prefix,
                          weight_format_name(parts[0].format), weight_format_name(w.format)));
      return std::nullopt;
    }
  if (headers_only_) return parts[0];
  // Stack, gate rows before up rows. Every part keeps its own row scales (gate and up global scales differ).
  Weight out;
  out.format = parts[0].format;
  out.act = parts[0].act;
  const ScalarType dt = parts[0].data.type;
  const int64_t Kp = parts[0].data.dim(-1);
  out.data = host_tensor(dt, {E, N, Kp});
  const size_t row_bytes = static_cast<size_t>(Kp) * scalar_size(dt);
  if (out.format == WeightFormat::kNvfp4) out.block = host_tensor(ScalarType::kF8E4M3, {E, N, K / kNvfp4Group});
  if (out.format != WeightFormat::kBF16) out.row_scale = host_tensor(ScalarType::kF32, {E, N});
  int64_t row = 0;  // global stacked row
  for (const Weight& w : parts) {
    const int64_t n = w.rows();
    std::memcpy(out.data.ptr<uint8_t>() + row * row_bytes, w.data.data, static_cast<size_t>(n) * row_bytes);
    if (!out.block.empty())
      std::memcpy(out.block.ptr<uint8_t>() + row * (K / kNvfp4Group), w.block.data, static_cast<size_t>(n * (K / kNvfp4Group)));
    if (!out.row_scale.empty()) std::memcpy(out.row_scale.ptr<float>() + row, w.row_scale.data, static_cast<size_t>(n) * 4);
    row += n;
  }
  return out;
}

}  // namespace dgemma
