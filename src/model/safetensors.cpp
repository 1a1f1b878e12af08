#include "model/safetensors.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <array>
#include <filesystem>
#include <fstream>
#include <set>
#include <unordered_set>

#include "util/error.h"
#include "util/json.h"

namespace dgemma {

namespace {

constexpr std::string_view kMetadataKey = "__metadata__";
constexpr std::string_view kIndexName = "model.safetensors.index.json";
constexpr std::string_view kSingleName = "model.safetensors";

struct DTypeEntry {
  DType type;
  const char* name;
  size_t size;
};
constexpr std::array<DTypeEntry, 8> kDTypes{{
    {DType::kBF16, "BF16", 2},
    {DType::kF16, "F16", 2},
    {DType::kF32, "F32", 4},
    {DType::kF8E4M3, "F8_E4M3", 1},
    {DType::kU8, "U8", 1},
    {DType::kI8, "I8", 1},
    {DType::kI32, "I32", 4},
    {DType::kI64, "I64", 8},
}};

const DTypeEntry& dtype_entry(DType t) {
  for (const auto& e : kDTypes)
    if (e.type == t) return e;
  throw Error(ErrorKind::kInternal, fmt::format("unknown DType value {}", static_cast<int>(t)));
}

// Names come from untrusted files and end up in messages and logs: keep them short and escape control
// bytes (a NUL would cut the message short, an ESC would reach the terminal).
std::string shown(std::string_view s) {
  constexpr size_t kMaxShown = 120;
  std::string out = "'";
  for (char c : s.substr(0, kMaxShown)) {
    const auto u = static_cast<unsigned char>(c);
    if (u < 0x20 || u == 0x7f)
      out += fmt::format("\\x{:02x}", u);
    else
      out.push_back(c);
  }
  out += s.size() > kMaxShown ? fmt::format("...' ({} bytes)", s.size()) : "'";
  return out;
}

std::string brief_json(const Json& v) {
  return shown(v.dump(-1, ' ', false, Json::error_handler_t::replace));
}

// Element count of a shape, nullopt when it does not fit in 64 bits. Any zero dimension makes the
// tensor empty, whatever the other dimensions are, so zeros are looked for first.
std::optional<uint64_t> checked_numel(const std::vector<int64_t>& shape) {
  for (int64_t d : shape)
    if (d == 0) return 0;
  uint64_t n = 1;
  for (int64_t d : shape)
    if (d < 0 || __builtin_mul_overflow(n, static_cast<uint64_t>(d), &n)) return std::nullopt;
  return n;
}

std::optional<uint64_t> checked_nbytes(const std::vector<int64_t>& shape, DType t) {
  auto n = checked_numel(shape);
  uint64_t bytes = 0;
  if (!n || __builtin_mul_overflow(*n, static_cast<uint64_t>(dtype_size(t)), &bytes)) return std::nullopt;
  return bytes;
}

// nlohmann::json keeps the last of duplicate object keys silently, so a header listing a tensor twice
// would parse "fine" with one of the two entries dropped. This SAX pass (iterative, no recursion) finds
// the first duplicate key anywhere in the document, and the chain of keys leading to it.
class DuplicateKeyFinder {
 public:
  struct Found {
    std::vector<std::string> path;  // keys of the enclosing objects, outermost first
    std::string key;
  };

  bool null() { return true; }
  bool boolean(bool) { return true; }
  bool number_integer(Json::number_integer_t) { return true; }
  bool number_unsigned(Json::number_unsigned_t) { return true; }
  bool number_float(Json::number_float_t, const Json::string_t&) { return true; }
  bool string(Json::string_t&) { return true; }
  bool binary(Json::binary_t&) { return true; }
  bool start_object(std::size_t) { return push(true); }
  bool start_array(std::size_t) { return push(false); }
  bool end_object() { return pop(); }
  bool end_array() { return pop(); }
  bool key(Json::string_t& k) {
    Frame& f = frames_.back();
    if (!f.keys.insert(k).second) {
      Found r;
      for (size_t i = 0; i + 1 < frames_.size(); ++i)
        if (frames_[i].is_object) r.path.push_back(frames_[i].last_key);
      r.key = k;
      found_ = std::move(r);
      return false;  // stop parsing
    }
    f.last_key = k;
    return true;
  }
  bool parse_error(std::size_t, const std::string&, const nlohmann::detail::exception&) { return false; }

  const std::optional<Found>& found() const { return found_; }

 private:
  struct Frame {
    bool is_object;
    std::unordered_set<std::string> keys;
    std::string last_key;
  };
  bool push(bool is_object) {
    frames_.push_back(Frame{is_object, {}, {}});
    return true;
  }
  bool pop() {
    if (!frames_.empty()) frames_.pop_back();
    return true;
  }
  std::vector<Frame> frames_;
  std::optional<Found> found_;
};

// Call only on text parse_json accepted (so the depth is already bounded).
std::optional<DuplicateKeyFinder::Found> find_duplicate_key(std::string_view text) {
  DuplicateKeyFinder finder;
  Json::sax_parse(text.begin(), text.end(), &finder);
  return finder.found();
}

// A JSON value that is a non-negative integer no larger than `max`, else nullopt.
std::optional<uint64_t> as_unsigned(const Json& v, uint64_t max) {
  if (v.is_number_unsigned()) {
    const uint64_t u = v.get<uint64_t>();
    if (u <= max) return u;
    return std::nullopt;
  }
  if (v.is_number_integer()) {  // signed storage: only negative values land here
    const int64_t i = v.get<int64_t>();
    if (i >= 0 && static_cast<uint64_t>(i) <= max) return static_cast<uint64_t>(i);
  }
  return std::nullopt;
}

struct ParsedTensor {
  TensorInfo info;
  uint64_t begin = 0;
  uint64_t end = 0;
};

void check_tensor_name(const std::string& file, std::string_view name) {
  if (name.empty()) fail_file("{}: empty tensor name in header", file);
  if (name.size() > kMaxTensorNameBytes)
    fail_file("{}: tensor name {} is longer than {} bytes", file, shown(name), kMaxTensorNameBytes);
}

ParsedTensor parse_tensor_entry(const std::string& file, const std::string& name, const Json& entry,
                                uint64_t data_size) {
  check_tensor_name(file, name);
  const std::string where = fmt::format("{}: tensor {}", file, shown(name));
  if (!entry.is_object()) fail_file("{}: header entry is not a JSON object", where);

  ParsedTensor t;
  t.info.name = name;
  t.info.file = file;

  const auto dtype_it = entry.find("dtype");
  if (dtype_it == entry.end()) fail_file("{}: missing \"dtype\"", where);
  if (!dtype_it->is_string()) fail_file("{}: \"dtype\" is not a string", where);
  const auto& dtype_str = dtype_it->get_ref<const std::string&>();
  const auto dtype = parse_dtype(dtype_str);
  if (!dtype) fail_file("{}: unsupported dtype {}", where, shown(dtype_str));
  t.info.dtype = *dtype;

  const auto shape_it = entry.find("shape");
  if (shape_it == entry.end()) fail_file("{}: missing \"shape\"", where);
  if (!shape_it->is_array()) fail_file("{}: \"shape\" is not an array", where);
  if (shape_it->size() > kMaxTensorDims)
    fail_file("{}: shape has {} dimensions, more than {}", where, shape_it->size(), kMaxTensorDims);
  for (const auto& d : *shape_it) {
    const auto v = as_unsigned(d, static_cast<uint64_t>(kMaxTensorDim));
    if (!v) fail_file("{}: shape entry {} is not an integer in [0, 2^62]", where, brief_json(d));
    t.info.shape.push_back(static_cast<int64_t>(*v));
  }

  const auto off_it = entry.find("data_offsets");
  if (off_it == entry.end()) fail_file("{}: missing \"data_offsets\"", where);
  if (!off_it->is_array() || off_it->size() != 2)
    fail_file("{}: \"data_offsets\" is not an array of two integers", where);
  const auto begin = as_unsigned((*off_it)[0], UINT64_MAX);
  const auto end = as_unsigned((*off_it)[1], UINT64_MAX);
  if (!begin || !end) fail_file("{}: \"data_offsets\" entries must be non-negative integers", where);
  if (*begin > *end) fail_file("{}: data_offsets [{}, {}] has begin > end", where, *begin, *end);
  if (*end > data_size)
    fail_file("{}: data_offsets [{}, {}] run past the end of the data section ({} bytes)", where, *begin,
              *end, data_size);

  const auto nbytes = checked_nbytes(t.info.shape, t.info.dtype);
  if (!nbytes)
    fail_file("{}: shape [{}] x {} overflows 64 bits", where, fmt::join(t.info.shape, ", "),
              dtype_name(t.info.dtype));
  if (*nbytes != *end - *begin)
    fail_file("{}: shape [{}] of {} needs {} bytes but data_offsets [{}, {}] span {}", where,
              fmt::join(t.info.shape, ", "), dtype_name(t.info.dtype), *nbytes, *begin, *end, *end - *begin);

  t.begin = *begin;
  t.end = *end;
  t.info.nbytes = static_cast<size_t>(*nbytes);
  return t;
}

// Shard names in an index are joined to the checkpoint directory: plain file names only.
bool is_plain_file_name(std::string_view s) {
  return !s.empty() && s.find('/') == std::string_view::npos && s.find('\\') == std::string_view::npos &&
         s.find('\0') == std::string_view::npos && s.find("..") == std::string_view::npos && s != ".";
}

}  // namespace

size_t dtype_size(DType t) {
  return dtype_entry(t).size;
}

const char* dtype_name(DType t) {
  return dtype_entry(t).name;
}

std::optional<DType> parse_dtype(std::string_view s) {
  for (const auto& e : kDTypes)
    if (s == e.name) return e.type;
  return std::nullopt;
}

int64_t TensorInfo::numel() const {
  const auto n = checked_numel(shape);
  DG_CHECK(n.has_value() && *n <= static_cast<uint64_t>(INT64_MAX));
  return static_cast<int64_t>(*n);
}

// ---- SafetensorsFile ----------------------------------------------------------------------------

SafetensorsFile::SafetensorsFile(const std::string& path) : map_(path) {
  const uint8_t* bytes = map_.data();
  const uint64_t size = map_.size();
  if (size < 8)
    fail_file("{}: file is {} bytes, too short for a safetensors file (8-byte header length)", path, size);
  uint64_t header_len = 0;
  for (int i = 7; i >= 0; --i) header_len = (header_len << 8) | bytes[i];
  if (header_len == 0) fail_file("{}: header length is 0", path);
  if (header_len > kMaxSafetensorsHeaderBytes)
    fail_file("{}: header length {} exceeds the {} byte limit", path, header_len, kMaxSafetensorsHeaderBytes);
  if (header_len > size - 8)
    fail_file("{}: header length {} is larger than the rest of the file ({} bytes); truncated file?", path,
              header_len, size - 8);

  const std::string_view text(reinterpret_cast<const char*>(bytes + 8), header_len);
  const Json header = parse_json(text, fmt::format("{}: header", path), /*is_file=*/true);
  if (!header.is_object()) fail_file("{}: header is not a JSON object", path);
  if (const auto dup = find_duplicate_key(text)) {
    if (dup->path.empty() && dup->key == kMetadataKey)
      fail_file("{}: \"__metadata__\" appears more than once in the header", path);
    if (dup->path.empty())
      fail_file("{}: tensor {} appears more than once in the header", path, shown(dup->key));
    fail_file("{}: tensor {}: duplicate key {} in the header", path, shown(dup->path.front()),
              shown(dup->key));
  }

  const uint8_t* data_start = bytes + 8 + header_len;
  const uint64_t data_size = size - 8 - header_len;
  std::vector<ParsedTensor> parsed;
  parsed.reserve(header.size());
  for (const auto& [key, value] : header.items()) {
    if (key == kMetadataKey) {
      if (!value.is_object()) fail_file("{}: \"__metadata__\" is not a JSON object", path);
      for (const auto& [mk, mv] : value.items()) {
        if (!mv.is_string()) fail_file("{}: \"__metadata__\" value for {} is not a string", path, shown(mk));
        metadata_.emplace(mk, mv.get<std::string>());
      }
      continue;
    }
    parsed.push_back(parse_tensor_entry(path, key, value, data_size));
  }

  // File order; empty tensors occupy no bytes, so they cannot overlap anything.
  std::sort(parsed.begin(), parsed.end(), [](const ParsedTensor& a, const ParsedTensor& b) {
    if (a.begin != b.begin) return a.begin < b.begin;
    if (a.end != b.end) return a.end < b.end;
    return a.info.name < b.info.name;
  });
  const ParsedTensor* prev = nullptr;
  for (const auto& t : parsed) {
    if (t.begin == t.end) continue;
    if (prev != nullptr && t.begin < prev->end)
      fail_file("{}: tensors {} (bytes [{}, {})) and {} (bytes [{}, {})) overlap", path,
                shown(prev->info.name), prev->begin, prev->end, shown(t.info.name), t.begin, t.end);
    prev = &t;
  }

  tensors_.reserve(parsed.size());
  for (auto& t : parsed) {
    t.info.data = data_start + t.begin;
    by_name_.emplace(t.info.name, tensors_.size());
    tensors_.push_back(std::move(t.info));
  }
}

const TensorInfo* SafetensorsFile::find(std::string_view name) const {
  const auto it = by_name_.find(name);
  return it == by_name_.end() ? nullptr : &tensors_[it->second];
}

// ---- SafetensorsCheckpoint ----------------------------------------------------------------------

SafetensorsCheckpoint::SafetensorsCheckpoint(const std::string& path) {
  namespace fs = std::filesystem;
  std::error_code ec;
  const auto st = fs::status(path, ec);
  if (ec || !fs::exists(st))
    throw Error(ErrorKind::kNotFound, fmt::format("{}: no such file or directory", path));
  if (fs::is_regular_file(st)) {
    const std::string name = fs::path(path).filename().string();
    if (name.size() > 11 && name.ends_with(".index.json")) {  // the index itself was named
      load_index(fs::path(path).parent_path().string(), path);
      return;
    }
    add_file(std::make_unique<SafetensorsFile>(path));
    return;
  }
  if (!fs::is_directory(st)) fail_file("{}: neither a file nor a directory", path);

  const fs::path dir(path);
  const fs::path index = dir / kIndexName;
  if (fs::exists(index, ec)) {
    load_index(path, index.string());
    return;
  }
  const fs::path single = dir / kSingleName;
  if (fs::exists(single, ec)) {
    add_file(std::make_unique<SafetensorsFile>(single.string()));
    return;
  }
  std::vector<fs::path> found;
  try {
    for (const auto& e : fs::directory_iterator(dir))
      if (e.path().extension() == ".safetensors" && e.is_regular_file()) found.push_back(e.path());
  } catch (const fs::filesystem_error& e) {
    fail_file("{}: cannot list directory: {}", path, e.code().message());
  }
  if (found.empty())
    throw Error(ErrorKind::kNotFound, fmt::format("{}: no {}, {} or *.safetensors file in this directory",
                                                  path, kIndexName, kSingleName));
  std::sort(found.begin(), found.end());
  for (const auto& f : found) add_file(std::make_unique<SafetensorsFile>(f.string()));
}

void SafetensorsCheckpoint::load_index(const std::string& dir, const std::string& index_path) {
  namespace fs = std::filesystem;
  const std::string text = read_text_file(index_path);
  const Json index = parse_json(text, index_path, /*is_file=*/true);
  if (!index.is_object()) fail_file("{}: not a JSON object", index_path);
  if (const auto dup = find_duplicate_key(text)) {
    std::string where = fmt::format("{}", fmt::join(dup->path, "."));
    fail_file("{}: duplicate key {}{}", index_path, shown(dup->key),
              where.empty() ? std::string() : fmt::format(" in \"{}\"", where));
  }
  const auto wm = index.find("weight_map");
  if (wm == index.end()) fail_file("{}: missing \"weight_map\"", index_path);
  if (!wm->is_object()) fail_file("{}: \"weight_map\" is not a JSON object", index_path);
  if (wm->empty()) fail_file("{}: \"weight_map\" is empty", index_path);

  std::map<std::string, std::string, std::less<>> tensor_to_shard;
  std::map<std::string, std::vector<std::string>> shard_to_tensors;
  for (const auto& [name, shard] : wm->items()) {
    if (name.empty()) fail_file("{}: empty tensor name in \"weight_map\"", index_path);
    if (!shard.is_string())
      fail_file("{}: \"weight_map\" entry for tensor {} is not a string", index_path, shown(name));
    const auto& s = shard.get_ref<const std::string&>();
    if (!is_plain_file_name(s))
      fail_file("{}: tensor {}: shard name {} is not a plain file name in the checkpoint directory",
                index_path, shown(name), shown(s));
    tensor_to_shard.emplace(name, s);
    shard_to_tensors[s].push_back(name);
  }

  for (const auto& [shard, names] : shard_to_tensors) {
    const std::string shard_path = (fs::path(dir) / shard).string();
    std::error_code ec;
    if (!fs::exists(shard_path, ec))
      throw Error(ErrorKind::kNotFound,
                  fmt::format("{}: shard {} (holding tensor {}) not found: {}", index_path, shown(shard),
                              shown(names.front()), shard_path));
    auto file = std::make_unique<SafetensorsFile>(shard_path);
    for (const auto& t : file->tensors()) {
      const auto it = tensor_to_shard.find(t.name);
      if (it == tensor_to_shard.end())
        fail_file("{}: tensor {} is not listed in {}", shard_path, shown(t.name), index_path);
      if (it->second != shard)
        fail_file("{}: tensor {} is in this shard but {} maps it to {}", shard_path, shown(t.name),
                  index_path, shown(it->second));
    }
    for (const auto& name : names)
      if (file->find(name) == nullptr)
        fail_file("{}: tensor {} is mapped to shard {} but {} does not contain it", index_path, shown(name),
                  shown(shard), shard_path);
    add_file(std::move(file));
  }
}

void SafetensorsCheckpoint::add_file(std::unique_ptr<SafetensorsFile> f) {
  for (const auto& t : f->tensors()) {
    const auto [it, inserted] = by_name_.emplace(t.name, &t);
    if (!inserted) fail_file("{}: tensor {} is also in {}", f->path(), shown(t.name), it->second->file);
  }
  files_.push_back(std::move(f));
}

const TensorInfo* SafetensorsCheckpoint::find(std::string_view name) const {
  const auto it = by_name_.find(name);
  return it == by_name_.end() ? nullptr : it->second;
}

std::vector<const TensorInfo*> SafetensorsCheckpoint::tensors() const {
  std::vector<const TensorInfo*> out;
  out.reserve(by_name_.size());
  for (const auto& [name, t] : by_name_) out.push_back(t);
  return out;
}

size_t SafetensorsCheckpoint::total_bytes() const {
  size_t total = 0;
  for (const auto& [name, t] : by_name_) total += t->nbytes;
  return total;
}

// ---- writer -------------------------------------------------------------------------------------

void write_safetensors(const std::string& path, const std::vector<TensorToWrite>& tensors,
                       const std::map<std::string, std::string>& metadata) {
  nlohmann::ordered_json header = nlohmann::ordered_json::object();
  if (!metadata.empty()) {
    auto& m = header[std::string(kMetadataKey)];
    m = nlohmann::ordered_json::object();
    for (const auto& [k, v] : metadata) m[k] = v;
  }
  std::set<std::string, std::less<>> names;
  uint64_t offset = 0;
  for (const auto& t : tensors) {
    if (t.name.empty() || t.name == kMetadataKey || t.name.size() > kMaxTensorNameBytes)
      fail_arg("{}: invalid tensor name {}", path, shown(t.name));
    if (!names.insert(t.name).second) fail_arg("{}: tensor {} given twice", path, shown(t.name));
    if (t.shape.size() > kMaxTensorDims) fail_arg("{}: tensor {}: too many dimensions", path, shown(t.name));
    for (int64_t d : t.shape)
      if (d < 0 || d > kMaxTensorDim) fail_arg("{}: tensor {}: bad dimension {}", path, shown(t.name), d);
    const auto nbytes = checked_nbytes(t.shape, t.dtype);
    if (!nbytes || *nbytes != t.bytes.size())
      fail_arg("{}: tensor {}: {} data bytes do not match shape [{}] of {}", path, shown(t.name),
               t.bytes.size(), fmt::join(t.shape, ", "), dtype_name(t.dtype));
    auto& e = header[t.name];
    e["dtype"] = dtype_name(t.dtype);
    e["shape"] = t.shape;
    e["data_offsets"] = {offset, offset + *nbytes};
    offset += *nbytes;
  }
  std::string text;
  try {
    text = header.dump();
  } catch (const nlohmann::json::exception& e) {  // invalid UTF-8 in a name or metadata string
    fail_arg("{}: cannot encode header: {}", path, e.what());
  }
  text.append((8 - text.size() % 8) % 8, ' ');  // 8 + header length stays a multiple of 8

  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  if (!out) fail_file("{}: cannot open for writing", path);
  std::array<char, 8> len{};
  for (int i = 0; i < 8; ++i)
    len[i] = static_cast<char>((static_cast<uint64_t>(text.size()) >> (8 * i)) & 0xff);
  out.write(len.data(), len.size());
  out.write(text.data(), static_cast<std::streamsize>(text.size()));
  for (const auto& t : tensors)
    if (!t.bytes.empty())
      out.write(reinterpret_cast<const char*>(t.bytes.data()), static_cast<std::streamsize>(t.bytes.size()));
  out.close();
  if (!out) fail_file("{}: write failed", path);
}

}  // namespace dgemma
