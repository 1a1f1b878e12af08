// Safetensors reader/writer: round trips, a byte-exact file written by hand from the format spec,
// sharded checkpoints, and every class of malformed file.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>

#include "model/safetensors.h"
#include "util/error.h"
#include "util/json.h"

namespace dgemma {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;

// A fresh directory under the system temp dir, removed with everything in it at scope exit.
class TempDir {
 public:
  TempDir() {
    static std::atomic<int> counter{0};
    path_ = fs::temp_directory_path() /
            fmt::format("dgemma_st_{}_{}_{}", ::getpid(), counter++, std::random_device{}());
    fs::create_directories(path_);
  }
  ~TempDir() {
    std::error_code ec;
    fs::remove_all(path_, ec);
  }
  std::string file(std::string_view name) const { return (path_ / name).string(); }
  const fs::path& path() const { return path_; }

 private:
  fs::path path_;
};

void write_bytes(const std::string& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  ASSERT_TRUE(out.good()) << path;
}

std::string le64(uint64_t v) {
  std::string s(8, '\0');
  for (int i = 0; i < 8; ++i) s[i] = static_cast<char>((v >> (8 * i)) & 0xff);
  return s;
}

// A safetensors file with the given header text and `data_bytes` bytes of data (value = index & 0xff).
// `len` overrides the header length field.
std::string raw_file(const TempDir& dir, std::string_view name, std::string_view header,
                     size_t data_bytes = 0, std::optional<uint64_t> len = std::nullopt) {
  std::string bytes = le64(len.value_or(header.size()));
  bytes += header;
  for (size_t i = 0; i < data_bytes; ++i) bytes.push_back(static_cast<char>(i & 0xff));
  const std::string path = dir.file(name);
  write_bytes(path, bytes);
  return path;
}

std::vector<uint8_t> pattern(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<uint8_t> v(n);
  for (auto& b : v) b = static_cast<uint8_t>(rng());
  return v;
}

TensorToWrite make_tensor(std::string name, DType t, std::vector<int64_t> shape, uint32_t seed = 1) {
  size_t n = dtype_size(t);
  for (int64_t d : shape) n *= static_cast<size_t>(d);
  return TensorToWrite{std::move(name), t, std::move(shape), pattern(n, seed)};
}

// Runs f, which must throw dgemma::Error of `kind` whose message contains every needle.
template <typename F>
void expect_error(F&& f, ErrorKind kind, const std::vector<std::string>& needles,
                  const char* file = __builtin_FILE(), int line = __builtin_LINE()) {
  ::testing::ScopedTrace trace(file, line, "expect_error");
  try {
    f();
    ADD_FAILURE() << "no exception; expected one mentioning '" << (needles.empty() ? "" : needles[0]) << "'";
  } catch (const Error& e) {
    EXPECT_EQ(static_cast<int>(e.kind()), static_cast<int>(kind)) << e.what();
    for (const auto& n : needles) EXPECT_THAT(e.what(), HasSubstr(n));
  }
}

// Opening `path` must fail with kInvalidFile, naming the file and containing every needle.
void expect_bad_file(const std::string& path, std::vector<std::string> needles,
                     const char* file = __builtin_FILE(), int line = __builtin_LINE()) {
  needles.insert(needles.begin(), path);
  expect_error([&] { SafetensorsFile f(path); }, ErrorKind::kInvalidFile, needles, file, line);
}

// Header of one F32 tensor "w" of shape [2] at [0, 8); `entry` replaces its JSON entry when given.
std::string one_tensor(std::string_view entry = R"({"dtype":"F32","shape":[2],"data_offsets":[0,8]})") {
  return fmt::format(R"({{"w":{}}})", entry);
}

// ---- dtypes ------------------------------------------------------------------------------------

TEST(SafetensorsDType, NamesSizesAndParsing) {
  const std::vector<std::tuple<DType, const char*, size_t>> all = {
      {DType::kBF16, "BF16", 2},      {DType::kF16, "F16", 2}, {DType::kF32, "F32", 4},
      {DType::kF8E4M3, "F8_E4M3", 1}, {DType::kU8, "U8", 1},   {DType::kI8, "I8", 1},
      {DType::kI32, "I32", 4},        {DType::kI64, "I64", 8}};
  for (const auto& [t, name, size] : all) {
    EXPECT_STREQ(dtype_name(t), name);
    EXPECT_EQ(dtype_size(t), size) << name;
    ASSERT_TRUE(parse_dtype(name).has_value()) << name;
    EXPECT_EQ(*parse_dtype(name), t) << name;
  }
  for (const char* bad : {"", "bf16", "F32 ", "F64", "BOOL", "F8_E5M2", "U16", "float32"})
    EXPECT_FALSE(parse_dtype(bad).has_value()) << bad;
}

// ---- round trips -------------------------------------------------------------------------------

TEST(SafetensorsRoundTrip, EveryDType) {
  TempDir dir;
  const std::vector<DType> all = {DType::kBF16, DType::kF16, DType::kF32, DType::kF8E4M3,
                                  DType::kU8,   DType::kI8,  DType::kI32, DType::kI64};
  for (DType t : all) {
    SCOPED_TRACE(dtype_name(t));
    const std::string path = dir.file(fmt::format("{}.safetensors", dtype_name(t)));
    std::vector<TensorToWrite> in = {make_tensor("a.weight", t, {3, 5}, 7),
                                     make_tensor("b", t, {2, 1, 3}, 8)};
    write_safetensors(path, in);

    // The header length is a u64 LE and data starts 8-byte aligned.
    std::ifstream raw(path, std::ios::binary);
    std::string len_bytes(8, '\0');
    raw.read(len_bytes.data(), 8);
    uint64_t len = 0;
    for (int i = 7; i >= 0; --i) len = (len << 8) | static_cast<uint8_t>(len_bytes[i]);
    EXPECT_EQ((8 + len) % 8, 0u);

    SafetensorsFile f(path);
    EXPECT_EQ(f.path(), path);
    ASSERT_EQ(f.tensors().size(), 2u);
    EXPECT_EQ(f.tensors()[0].name, "a.weight");  // file order
    EXPECT_TRUE(f.metadata().empty());
    for (const auto& w : in) {
      const TensorInfo* r = f.find(w.name);
      ASSERT_NE(r, nullptr) << w.name;
      EXPECT_EQ(r->name, w.name);
      EXPECT_EQ(r->dtype, t);
      EXPECT_EQ(r->shape, w.shape);
      EXPECT_EQ(r->nbytes, w.bytes.size());
      EXPECT_EQ(static_cast<size_t>(r->numel()) * dtype_size(t), w.bytes.size());
      EXPECT_EQ(r->file, path);
      EXPECT_TRUE(std::equal(w.bytes.begin(), w.bytes.end(), r->data)) << w.name;
    }
    EXPECT_EQ(f.find("missing"), nullptr);
    EXPECT_EQ(f.find(""), nullptr);
  }
}

TEST(SafetensorsRoundTrip, MetadataScalarAndEmptyTensors) {
  TempDir dir;
  const std::string path = dir.file("m.safetensors");
  write_safetensors(path,
                    {make_tensor("scalar", DType::kF32, {}), make_tensor("empty", DType::kBF16, {0, 4096}),
                     make_tensor("empty2", DType::kI64, {7, 0}), make_tensor("x", DType::kU8, {3})},
                    {{"format", "pt"}, {"note", "héllo \"quoted\""}});
  SafetensorsFile f(path);
  EXPECT_EQ(f.metadata().size(), 2u);
  EXPECT_EQ(f.metadata().at("format"), "pt");
  EXPECT_EQ(f.metadata().at("note"), "héllo \"quoted\"");
  ASSERT_EQ(f.tensors().size(), 4u);
  EXPECT_EQ(f.find("scalar")->numel(), 1);
  EXPECT_EQ(f.find("scalar")->nbytes, 4u);
  EXPECT_TRUE(f.find("scalar")->shape.empty());
  EXPECT_EQ(f.find("empty")->numel(), 0);
  EXPECT_EQ(f.find("empty")->nbytes, 0u);
  EXPECT_EQ(f.find("empty2")->numel(), 0);
  EXPECT_EQ(f.find("x")->nbytes, 3u);
}

// Bytes laid out by hand from the format description (as the Python `safetensors` package writes
// them: __metadata__ first, header padded with spaces to 8 bytes), independent of our writer.
TEST(SafetensorsReader, HandWrittenSpecFile) {
  TempDir dir;
  const std::string header =
      R"({"__metadata__":{"format":"pt"},"bias":{"dtype":"BF16","shape":[2],"data_offsets":[16,20]},)"
      R"("weight":{"dtype":"F32","shape":[2,2],"data_offsets":[0,16]}})";
  std::string padded = header;
  while ((8 + padded.size()) % 8 != 0) padded.push_back(' ');
  std::string bytes = le64(padded.size()) + padded;
  const float w[4] = {1.0f, -2.5f, 3.25f, 0.0f};
  bytes.append(reinterpret_cast<const char*>(w), sizeof(w));
  bytes += std::string("\x80\x3f\x00\xc0", 4);  // bf16 1.0, -2.0 (little endian)
  const std::string path = dir.file("spec.safetensors");
  write_bytes(path, bytes);

  SafetensorsFile f(path);
  ASSERT_EQ(f.tensors().size(), 2u);
  EXPECT_EQ(f.tensors()[0].name, "weight");  // sorted by data offset, not by name
  EXPECT_EQ(f.tensors()[1].name, "bias");
  const TensorInfo* wt = f.find("weight");
  ASSERT_NE(wt, nullptr);
  EXPECT_EQ(wt->shape, (std::vector<int64_t>{2, 2}));
  float got[4];
  std::memcpy(got, wt->data, sizeof(got));
  EXPECT_EQ(got[1], -2.5f);
  EXPECT_EQ(got[2], 3.25f);
  const TensorInfo* b = f.find("bias");
  ASSERT_NE(b, nullptr);
  EXPECT_EQ(b->dtype, DType::kBF16);
  EXPECT_EQ(b->data[0], 0x80);
  EXPECT_EQ(b->data[1], 0x3f);
  EXPECT_EQ(b->data - wt->data, 16);
  EXPECT_EQ(f.metadata().at("format"), "pt");
}

TEST(SafetensorsReader, LegalOddities) {
  TempDir dir;
  // Empty tensors anywhere (even "inside" another tensor's range, or at the very end); gaps; trailing
  // bytes; unknown extra keys in an entry (the reference implementation ignores them too);
  // adjacent tensors; a name of exactly 1024 bytes.
  const std::string long_name(1024, 'n');
  const std::string header =
      fmt::format(R"({{"a":{{"dtype":"U8","shape":[4],"data_offsets":[0,4],"extra":[1,2]}},)"
                  R"("e1":{{"dtype":"F32","shape":[0,3],"data_offsets":[2,2]}},)"
                  R"("e2":{{"dtype":"F32","shape":[0],"data_offsets":[20,20]}},)"
                  R"("b":{{"dtype":"U8","shape":[4],"data_offsets":[4,8]}},)"
                  R"("{}":{{"dtype":"I8","shape":[2],"data_offsets":[10,12]}}}})",
                  long_name);
  const std::string path = raw_file(dir, "odd.safetensors", header + "   \n\t", 20);
  SafetensorsFile f(path);
  EXPECT_EQ(f.tensors().size(), 5u);
  EXPECT_EQ(f.find("e1")->nbytes, 0u);
  EXPECT_EQ(f.find("b")->data[0], 4);
  EXPECT_EQ(f.find(long_name)->data[1], 11);
}

// ---- broken files ------------------------------------------------------------------------------

TEST(SafetensorsBroken, MissingFileIsNotFound) {
  TempDir dir;
  const std::string path = dir.file("nope.safetensors");
  expect_error([&] { SafetensorsFile f(path); }, ErrorKind::kNotFound, {path});
}

TEST(SafetensorsBroken, TooShortForLength) {
  TempDir dir;
  for (size_t n : {0, 1, 7}) {
    const std::string path = dir.file(fmt::format("short{}.safetensors", n));
    write_bytes(path, std::string(n, '\x01'));
    expect_bad_file(path, {"too short"});
  }
}

TEST(SafetensorsBroken, HeaderLength) {
  TempDir dir;
  expect_bad_file(raw_file(dir, "zero.safetensors", "", 0, 0), {"header length is 0"});
  expect_bad_file(raw_file(dir, "zero2.safetensors", "{}", 16, 0), {"header length is 0"});
  // Longer than the file (a truncated download).
  expect_bad_file(raw_file(dir, "long.safetensors", one_tensor(), 8, 1000),
                  {"header length 1000", "truncated"});
  expect_bad_file(raw_file(dir, "huge.safetensors", "{}", 0, UINT64_MAX), {"exceeds", "limit"});
  expect_bad_file(raw_file(dir, "cap.safetensors", "{}", 0, (100ull << 20) + 1), {"exceeds", "limit"});
}

TEST(SafetensorsBroken, HeaderNotJsonObject) {
  TempDir dir;
  // The length field is right but the JSON stops early (truncated header).
  expect_bad_file(raw_file(dir, "cut.safetensors", R"({"w":{"dtype":"F32","sha)", 8), {"invalid JSON"});
  // The length field cuts a valid header short.
  const std::string h = one_tensor();
  expect_bad_file(raw_file(dir, "cut2.safetensors", h + std::string(8, '\0'), 0, h.size() - 3),
                  {"invalid JSON"});
  expect_bad_file(raw_file(dir, "garbage.safetensors", std::string("\xff\xfe\x00garbage", 10)),
                  {"invalid JSON"});
  expect_bad_file(raw_file(dir, "utf8.safetensors", "{\"w\xc3\x28\":1}"), {"invalid JSON"});
  expect_bad_file(raw_file(dir, "trail.safetensors", "{} {}"), {"invalid JSON"});
  for (const char* h2 : {"[1,2]", "\"str\"", "42", "null", "true"}) {
    expect_bad_file(raw_file(dir, "notobj.safetensors", h2), {"not a JSON object"});
  }
  std::string deep = R"({"w":)" + std::string(200, '[') + std::string(200, ']') + "}";
  expect_bad_file(raw_file(dir, "deep.safetensors", deep), {"nested deeper"});
}

TEST(SafetensorsBroken, EntryFieldsMissingOrMistyped) {
  TempDir dir;
  struct Case {
    std::string entry;
    std::string needle;
  };
  const std::vector<Case> cases = {
      {"5", "not a JSON object"},
      {"[\"F32\",[2],[0,8]]", "not a JSON object"},
      {R"({"shape":[2],"data_offsets":[0,8]})", "missing \"dtype\""},
      {R"({"dtype":"F32","data_offsets":[0,8]})", "missing \"shape\""},
      {R"({"dtype":"F32","shape":[2]})", "missing \"data_offsets\""},
      {R"({"dtype":3,"shape":[2],"data_offsets":[0,8]})", "\"dtype\" is not a string"},
      {R"({"dtype":null,"shape":[2],"data_offsets":[0,8]})", "\"dtype\" is not a string"},
      {R"({"dtype":"F99","shape":[2],"data_offsets":[0,8]})", "unsupported dtype 'F99'"},
      {R"({"dtype":"f32","shape":[2],"data_offsets":[0,8]})", "unsupported dtype 'f32'"},
      {R"({"dtype":"F64","shape":[1],"data_offsets":[0,8]})", "unsupported dtype 'F64'"},
      {R"({"dtype":"F32","shape":2,"data_offsets":[0,8]})", "\"shape\" is not an array"},
      {R"({"dtype":"F32","shape":[-2],"data_offsets":[0,8]})", "shape entry '-2'"},
      {R"({"dtype":"F32","shape":[2.0],"data_offsets":[0,8]})", "shape entry '2.0'"},
      {R"({"dtype":"F32","shape":[1.5],"data_offsets":[0,8]})", "shape entry '1.5'"},
      {R"({"dtype":"F32","shape":["2"],"data_offsets":[0,8]})", "shape entry '\"2\"'"},
      {R"({"dtype":"F32","shape":[true],"data_offsets":[0,8]})", "shape entry 'true'"},
      {R"({"dtype":"F32","shape":[[2]],"data_offsets":[0,8]})", "shape entry '[2]'"},
      {R"({"dtype":"U8","shape":[4611686018427387905],"data_offsets":[0,8]})", "not an integer in [0, 2^62]"},
      {R"({"dtype":"U8","shape":[99999999999999999999999],"data_offsets":[0,8]})", "not an integer"},
      {R"({"dtype":"U8","shape":[1,1,1,1,1,1,1,1,8],"data_offsets":[0,8]})", "9 dimensions"},
      {R"({"dtype":"F32","shape":[2],"data_offsets":8})", "not an array of two integers"},
      {R"({"dtype":"F32","shape":[2],"data_offsets":[0]})", "not an array of two integers"},
      {R"({"dtype":"F32","shape":[2],"data_offsets":[0,8,8]})", "not an array of two integers"},
      {R"({"dtype":"F32","shape":[2],"data_offsets":[-8,0]})", "non-negative integers"},
      {R"({"dtype":"F32","shape":[2],"data_offsets":[0,8.0]})", "non-negative integers"},
      {R"({"dtype":"F32","shape":[2],"data_offsets":[0,"8"]})", "non-negative integers"},
      {R"({"dtype":"F32","shape":[0],"data_offsets":[8,0]})", "begin > end"},
      // Byte length not matching shape x dtype.
      {R"({"dtype":"F32","shape":[2],"data_offsets":[0,6]})", "needs 8 bytes but data_offsets [0, 6] span 6"},
      {R"({"dtype":"BF16","shape":[2],"data_offsets":[0,8]})", "needs 4 bytes"},
      {R"({"dtype":"F32","shape":[0],"data_offsets":[0,8]})", "needs 0 bytes"},
      // Shape products that overflow 64 bits (elements, then bytes), with small offsets.
      {R"({"dtype":"F32","shape":[1099511627776,1099511627776],"data_offsets":[0,8]})", "overflows 64 bits"},
      {R"({"dtype":"F32","shape":[4611686018427387904],"data_offsets":[0,8]})", "overflows 64 bits"},
      {R"({"dtype":"U8","shape":[65536,65536,65536,65536,2],"data_offsets":[0,8]})", "overflows 64 bits"},
  };
  int i = 0;
  for (const auto& c : cases) {
    SCOPED_TRACE(c.entry);
    const std::string path = raw_file(dir, fmt::format("e{}.safetensors", i++), one_tensor(c.entry), 8);
    expect_bad_file(path, {"tensor 'w'", c.needle});
  }
}

TEST(SafetensorsBroken, OffsetsPastTheEnd) {
  TempDir dir;
  expect_bad_file(raw_file(dir, "past.safetensors", one_tensor(), 7),
                  {"tensor 'w'", "past the end", "7 bytes"});
  expect_bad_file(
      raw_file(
          dir, "past2.safetensors",
          one_tensor(
              R"({"dtype":"F32","shape":[2],"data_offsets":[18446744073709551608,18446744073709551615]})"),
          8),
      {"tensor 'w'", "past the end"});
  // Even an empty tensor must sit inside the data section.
  expect_bad_file(raw_file(dir, "past3.safetensors",
                           one_tensor(R"({"dtype":"F32","shape":[0],"data_offsets":[9,9]})"), 8),
                  {"tensor 'w'", "past the end"});
}

TEST(SafetensorsBroken, Overlapping) {
  TempDir dir;
  expect_bad_file(raw_file(dir, "ov.safetensors",
                           R"({"a":{"dtype":"U8","shape":[4],"data_offsets":[0,4]},)"
                           R"("b":{"dtype":"U8","shape":[4],"data_offsets":[3,7]}})",
                           8),
                  {"'a'", "'b'", "overlap"});
  // Same range twice; and one range inside another (listed in the other order).
  expect_bad_file(raw_file(dir, "ov2.safetensors",
                           R"({"x":{"dtype":"F32","shape":[1],"data_offsets":[4,8]},)"
                           R"("y":{"dtype":"I32","shape":[1],"data_offsets":[4,8]}})",
                           8),
                  {"'x'", "'y'", "overlap"});
  expect_bad_file(raw_file(dir, "ov3.safetensors",
                           R"({"inner":{"dtype":"U8","shape":[2],"data_offsets":[3,5]},)"
                           R"("outer":{"dtype":"U8","shape":[8],"data_offsets":[0,8]}})",
                           8),
                  {"'inner'", "'outer'", "overlap"});
}

TEST(SafetensorsBroken, DuplicateNamesAndKeys) {
  TempDir dir;
  expect_bad_file(raw_file(dir, "dup.safetensors",
                           R"({"w":{"dtype":"U8","shape":[4],"data_offsets":[0,4]},)"
                           R"("w":{"dtype":"U8","shape":[4],"data_offsets":[4,8]}})",
                           8),
                  {"tensor 'w'", "more than once"});
  expect_bad_file(raw_file(dir, "dupkey.safetensors",
                           R"({"w":{"dtype":"U8","dtype":"F32","shape":[4],"data_offsets":[0,4]}})", 8),
                  {"tensor 'w'", "duplicate key 'dtype'"});
  expect_bad_file(
      raw_file(dir, "dupmeta.safetensors", R"({"__metadata__":{"a":"1"},"__metadata__":{"a":"2"}})"),
      {"\"__metadata__\"", "more than once"});
}

TEST(SafetensorsBroken, Metadata) {
  TempDir dir;
  expect_bad_file(raw_file(dir, "m1.safetensors", R"({"__metadata__":{"format":1}})"),
                  {"__metadata__", "'format'", "not a string"});
  expect_bad_file(raw_file(dir, "m2.safetensors", R"({"__metadata__":{"a":"x","b":{"c":"d"}}})"),
                  {"__metadata__", "'b'", "not a string"});
  expect_bad_file(raw_file(dir, "m3.safetensors", R"({"__metadata__":["format","pt"]})"),
                  {"__metadata__", "not a JSON object"});
  expect_bad_file(raw_file(dir, "m4.safetensors", R"({"__metadata__":null})"),
                  {"__metadata__", "not a JSON object"});
}

TEST(SafetensorsBroken, Names) {
  TempDir dir;
  expect_bad_file(
      raw_file(dir, "n1.safetensors", R"({"":{"dtype":"U8","shape":[1],"data_offsets":[0,1]}})", 1),
      {"empty tensor name"});
  const std::string long_name(1025, 'x');
  expect_bad_file(
      raw_file(dir, "n2.safetensors",
               fmt::format(R"({{"{}":{{"dtype":"U8","shape":[1],"data_offsets":[0,1]}}}})", long_name), 1),
      {"longer than 1024 bytes", "(1025 bytes)"});
  // Control bytes in names are escaped in messages (a NUL would otherwise cut the message short).
  expect_bad_file(raw_file(dir, "n3.safetensors", R"({"w\u0000\u001b[31m":5})"),
                  {"tensor 'w\\x00\\x1b[31m'", "not a JSON object"});
}

// ---- writer ------------------------------------------------------------------------------------

TEST(SafetensorsWriter, RejectsInconsistentInput) {
  TempDir dir;
  const std::string path = dir.file("w.safetensors");
  auto bad = make_tensor("w", DType::kF32, {2, 2});
  bad.bytes.pop_back();
  expect_error([&] { write_safetensors(path, {bad}); }, ErrorKind::kInvalidArgument,
               {"'w'", "15 data bytes"});
  expect_error(
      [&] {
        write_safetensors(path, {make_tensor("a", DType::kU8, {1}), make_tensor("a", DType::kU8, {1})});
      },
      ErrorKind::kInvalidArgument, {"'a'", "twice"});
  expect_error([&] { write_safetensors(path, {make_tensor("__metadata__", DType::kU8, {1})}); },
               ErrorKind::kInvalidArgument, {"invalid tensor name"});
  expect_error(
      [&] {
        write_safetensors(path, {TensorToWrite{"neg", DType::kU8, {-1}, {}}});
      },
      ErrorKind::kInvalidArgument, {"'neg'"});
  expect_error([&] { write_safetensors(dir.file("no/such/dir/x.safetensors"), {}); }, ErrorKind::kInvalidFile,
               {"cannot open"});
}

// ---- checkpoints -------------------------------------------------------------------------------

// Writes the index JSON for a weight map.
void write_index(const TempDir& dir, const std::map<std::string, std::string>& weight_map) {
  nlohmann::json j;
  j["metadata"] = {{"total_size", 0}};
  j["weight_map"] = weight_map;
  write_bytes(dir.file("model.safetensors.index.json"), j.dump(2));
}

struct ShardedFixture {
  TempDir dir;
  std::string shard1 = "model-00001-of-00002.safetensors";
  std::string shard2 = "model-00002-of-00002.safetensors";
  std::vector<TensorToWrite> t1 = {make_tensor("model.embed.weight", DType::kBF16, {16, 8}, 1),
                                   make_tensor("model.layers.0.w", DType::kF32, {4, 4}, 2)};
  std::vector<TensorToWrite> t2 = {make_tensor("model.layers.1.w", DType::kF32, {4, 4}, 3),
                                   make_tensor("lm.scale", DType::kI64, {3}, 4),
                                   make_tensor("model.empty", DType::kF16, {0}, 5)};
  std::map<std::string, std::string> map() const {
    std::map<std::string, std::string> m;
    for (const auto& t : t1) m[t.name] = shard1;
    for (const auto& t : t2) m[t.name] = shard2;
    return m;
  }
  void write_all() {
    write_safetensors(dir.file(shard1), t1);
    write_safetensors(dir.file(shard2), t2);
    write_index(dir, map());
  }
  std::string index() const { return dir.file("model.safetensors.index.json"); }
};

TEST(SafetensorsCheckpoint, ShardedRoundTrip) {
  ShardedFixture fx;
  fx.write_all();
  // Unrelated files in the directory are ignored.
  write_safetensors(fx.dir.file("other.safetensors"), {make_tensor("stray", DType::kU8, {1})});
  SafetensorsCheckpoint ck(fx.dir.path().string());
  const auto all = ck.tensors();
  ASSERT_EQ(all.size(), 5u);
  std::vector<std::string> names;
  for (const auto* t : all) names.push_back(t->name);
  EXPECT_EQ(names, (std::vector<std::string>{"lm.scale", "model.embed.weight", "model.empty",
                                             "model.layers.0.w", "model.layers.1.w"}));
  size_t expect_total = 0;
  for (const auto* group : {&fx.t1, &fx.t2}) {
    for (const auto& w : *group) {
      expect_total += w.bytes.size();
      const TensorInfo* r = ck.find(w.name);
      ASSERT_NE(r, nullptr) << w.name;
      EXPECT_EQ(r->shape, w.shape);
      EXPECT_EQ(r->dtype, w.dtype);
      EXPECT_EQ(r->file, fx.dir.file(group == &fx.t1 ? fx.shard1 : fx.shard2));
      EXPECT_TRUE(std::equal(w.bytes.begin(), w.bytes.end(), r->data)) << w.name;
    }
  }
  EXPECT_EQ(ck.total_bytes(), expect_total);
  EXPECT_EQ(ck.find("stray"), nullptr);
  EXPECT_EQ(ck.find("nope"), nullptr);

  // Naming the index file itself works too.
  SafetensorsCheckpoint by_index(fx.index());
  EXPECT_EQ(by_index.tensors().size(), 5u);
  EXPECT_EQ(by_index.total_bytes(), expect_total);

  // Moving the checkpoint keeps the tensor pointers valid.
  SafetensorsCheckpoint moved = std::move(ck);
  EXPECT_EQ(moved.find("lm.scale"), all[0]);
}

TEST(SafetensorsCheckpoint, SingleFileDirectoryAndFallback) {
  TempDir dir;
  const auto a = make_tensor("a", DType::kF32, {3}, 9);
  write_safetensors(dir.file("model.safetensors"), {a});
  write_safetensors(dir.file("z-extra.safetensors"), {make_tensor("z", DType::kU8, {1})});
  {
    SafetensorsCheckpoint ck(dir.path().string());  // model.safetensors wins over the rest
    EXPECT_EQ(ck.tensors().size(), 1u);
    EXPECT_TRUE(std::equal(a.bytes.begin(), a.bytes.end(), ck.find("a")->data));
    EXPECT_EQ(ck.total_bytes(), 12u);
  }
  {
    SafetensorsCheckpoint ck(dir.file("z-extra.safetensors"));  // a file path
    EXPECT_EQ(ck.tensors().size(), 1u);
    EXPECT_NE(ck.find("z"), nullptr);
  }
  TempDir dir2;
  write_safetensors(dir2.file("part-b.safetensors"), {make_tensor("b", DType::kU8, {2})});
  write_safetensors(dir2.file("part-a.safetensors"), {make_tensor("a", DType::kU8, {5})});
  write_bytes(dir2.file("notes.txt"), "not weights");
  SafetensorsCheckpoint ck(dir2.path().string());
  EXPECT_EQ(ck.tensors().size(), 2u);
  EXPECT_EQ(ck.total_bytes(), 7u);
  EXPECT_EQ(ck.find("a")->file, dir2.file("part-a.safetensors"));

  // The fallback also rejects a tensor present in two files.
  write_safetensors(dir2.file("part-c.safetensors"), {make_tensor("a", DType::kU8, {5})});
  expect_error([&] { SafetensorsCheckpoint c(dir2.path().string()); }, ErrorKind::kInvalidFile,
               {"tensor 'a'", "part-a.safetensors", "part-c.safetensors"});
}

TEST(SafetensorsCheckpoint, MissingPaths) {
  TempDir dir;
  expect_error([&] { SafetensorsCheckpoint c(dir.file("absent")); }, ErrorKind::kNotFound,
               {dir.file("absent")});
  expect_error([&] { SafetensorsCheckpoint c(dir.path().string()); }, ErrorKind::kNotFound,
               {dir.path().string(), "model.safetensors"});
  // A broken single file surfaces the file's own error.
  raw_file(dir, "model.safetensors", "[]");
  expect_error([&] { SafetensorsCheckpoint c(dir.path().string()); }, ErrorKind::kInvalidFile,
               {dir.file("model.safetensors"), "not a JSON object"});
}

TEST(SafetensorsCheckpoint, BrokenIndexJson) {
  struct Case {
    std::string text;
    std::string needle;
  };
  const std::vector<Case> cases = {
      {"{\"weight_map\": {", "invalid JSON"},
      {"[]", "not a JSON object"},
      {R"({"metadata":{}})", "missing \"weight_map\""},
      {R"({"weight_map":["a"]})", "\"weight_map\" is not a JSON object"},
      {R"({"weight_map":{}})", "\"weight_map\" is empty"},
      {R"({"weight_map":{"a":1}})", "tensor 'a' is not a string"},
      {R"({"weight_map":{"a":"x.safetensors","a":"y.safetensors"}})", "duplicate key 'a' in \"weight_map\""},
      {R"({"weight_map":{"":"x.safetensors"}})", "empty tensor name"},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(c.text);
    TempDir dir;
    write_safetensors(dir.file("x.safetensors"), {make_tensor("a", DType::kU8, {1})});
    write_bytes(dir.file("model.safetensors.index.json"), c.text);
    expect_error([&] { SafetensorsCheckpoint ck(dir.path().string()); }, ErrorKind::kInvalidFile,
                 {dir.file("model.safetensors.index.json"), c.needle});
  }
}

TEST(SafetensorsCheckpoint, PathTraversalInIndex) {
  const std::vector<std::string> shards = {"../model-00001-of-00002.safetensors",
                                           "sub/model.safetensors",
                                           "/etc/passwd",
                                           "..",
                                           ".",
                                           "",
                                           "a\\b.safetensors",
                                           std::string("a\0b", 3)};
  for (const std::string& shard : shards) {
    SCOPED_TRACE(shard);
    ShardedFixture fx;
    fx.write_all();
    auto m = fx.map();
    m["model.layers.0.w"] = shard;
    write_index(fx.dir, m);
    expect_error([&] { SafetensorsCheckpoint ck(fx.dir.path().string()); }, ErrorKind::kInvalidFile,
                 {fx.index(), "tensor 'model.layers.0.w'", "not a plain file name"});
  }
}

TEST(SafetensorsCheckpoint, MissingShard) {
  ShardedFixture fx;
  fx.write_all();
  fs::remove(fx.dir.file(fx.shard2));
  expect_error([&] { SafetensorsCheckpoint ck(fx.dir.path().string()); }, ErrorKind::kNotFound,
               {fx.index(), fx.shard2, "not found"});
}

TEST(SafetensorsCheckpoint, TensorMissingFromShard) {
  ShardedFixture fx;
  fx.write_all();
  auto m = fx.map();
  m["model.layers.2.w"] = fx.shard2;  // the index promises a tensor the shard lacks
  write_index(fx.dir, m);
  expect_error([&] { SafetensorsCheckpoint ck(fx.dir.path().string()); }, ErrorKind::kInvalidFile,
               {fx.index(), "tensor 'model.layers.2.w'", fx.dir.file(fx.shard2), "does not contain it"});
}

TEST(SafetensorsCheckpoint, TensorNotInIndex) {
  ShardedFixture fx;
  fx.write_all();
  auto m = fx.map();
  m.erase("lm.scale");
  write_index(fx.dir, m);
  expect_error([&] { SafetensorsCheckpoint ck(fx.dir.path().string()); }, ErrorKind::kInvalidFile,
               {fx.dir.file(fx.shard2), "tensor 'lm.scale'", "not listed"});
}

TEST(SafetensorsCheckpoint, TensorMappedElsewhere) {
  ShardedFixture fx;
  fx.write_all();
  auto m = fx.map();
  m["lm.scale"] = fx.shard1;  // lives in shard 2
  write_index(fx.dir, m);
  expect_error([&] { SafetensorsCheckpoint ck(fx.dir.path().string()); }, ErrorKind::kInvalidFile,
               {"tensor 'lm.scale'", fx.shard1});
}

TEST(SafetensorsCheckpoint, SameTensorInTwoShards) {
  ShardedFixture fx;
  fx.t2.push_back(make_tensor("model.layers.0.w", DType::kF32, {4, 4}, 6));  // also in shard 1
  fx.write_all();
  expect_error([&] { SafetensorsCheckpoint ck(fx.dir.path().string()); }, ErrorKind::kInvalidFile,
               {"tensor 'model.layers.0.w'", fx.shard1, fx.shard2});
}

TEST(SafetensorsCheckpoint, BrokenShardNamesTheShard) {
  ShardedFixture fx;
  fx.write_all();
  const std::string shard = fx.dir.file(fx.shard1);
  fs::resize_file(shard, fs::file_size(shard) - 1);  // truncated download
  expect_error([&] { SafetensorsCheckpoint ck(fx.dir.path().string()); }, ErrorKind::kInvalidFile,
               {shard, "past the end"});
}

}  // namespace
}  // namespace dgemma
