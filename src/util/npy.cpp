#include "util/npy.h"

#include <cstring>
#include <fstream>

#include "util/error.h"
#include "util/mmap_file.h"

namespace dgemma {

int64_t NpyArray::numel() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

std::vector<float> NpyArray::as_float() const {
  std::vector<float> out(static_cast<size_t>(numel()));
  for (size_t i = 0; i < out.size(); ++i) {
    if (dtype == "f4") std::memcpy(&out[i], bytes.data() + 4 * i, 4);
    else if (dtype == "f8") { double d; std::memcpy(&d, bytes.data() + 8 * i, 8); out[i] = static_cast<float>(d); }
    else if (dtype == "i4") { int32_t v; std::memcpy(&v, bytes.data() + 4 * i, 4); out[i] = static_cast<float>(v); }
    else if (dtype == "i8") { int64_t v; std::memcpy(&v, bytes.data() + 8 * i, 8); out[i] = static_cast<float>(v); }
    else if (dtype == "u1") out[i] = bytes[i];
    else fail_file("npy: cannot convert dtype {} to float", dtype);
  }
  return out;
}

std::vector<int64_t> NpyArray::as_int() const {
  std::vector<int64_t> out(static_cast<size_t>(numel()));
  for (size_t i = 0; i < out.size(); ++i) {
    if (dtype == "i4") { int32_t v; std::memcpy(&v, bytes.data() + 4 * i, 4); out[i] = v; }
    else if (dtype == "i8") std::memcpy(&out[i], bytes.data() + 8 * i, 8);
    else if (dtype == "u1") out[i] = bytes[i];
    else fail_file("npy: cannot convert dtype {} to int", dtype);
  }
  return out;
}

NpyArray read_npy(const std::string& path) {
  const std::string data = read_text_file(path, 1u << 30);
  if (data.size() < 10 || std::memcmp(data.data(), "\x93NUMPY", 6) != 0) fail_file("{}: not a .npy file", path);
  const int major = static_cast<uint8_t>(data[6]);
  size_t header_len, start;
  if (major == 1) {
    header_len = static_cast<uint8_t>(data[8]) | (static_cast<size_t>(static_cast<uint8_t>(data[9])) << 8);
    start = 10;
  } else {
    if (data.size() < 12) fail_file("{}: truncated .npy header", path);
    header_len = 0;
    for (int i = 0; i < 4; ++i) header_len |= static_cast<size_t>(static_cast<uint8_t>(data[8 + i])) << (8 * i);
    start = 12;
  }
  if (start + header_len > data.size()) fail_file("{}: truncated .npy header", path);
  const std::string header = data.substr(start, header_len);
  NpyArray a;
  auto field = [&](const char* key) {
    const size_t k = header.find(key);
    if (k == std::string::npos) fail_file("{}: .npy header lacks {}", path, key);
    return k + std::strlen(key);
  };
  size_t p = field("'descr':");
  p = header.find('\'', p);
  const size_t q = header.find('\'', p + 1);
  std::string descr = header.substr(p + 1, q - p - 1);
  if (!descr.empty() && (descr[0] == '<' || descr[0] == '|' || descr[0] == '=')) descr = descr.substr(1);
  a.dtype = descr;
  p = field("'fortran_order':");
  if (header.compare(header.find_first_not_of(' ', p), 4, "True") == 0) fail_file("{}: Fortran order unsupported", path);
  p = field("'shape':");
  p = header.find('(', p);
  const size_t e = header.find(')', p);
  std::string dims = header.substr(p + 1, e - p - 1);
  size_t i = 0;
  while (i < dims.size()) {
    while (i < dims.size() && (dims[i] == ' ' || dims[i] == ',')) ++i;
    if (i >= dims.size()) break;
    size_t j = i;
    while (j < dims.size() && std::isdigit(static_cast<unsigned char>(dims[j]))) ++j;
    if (j == i) fail_file("{}: bad shape in .npy header", path);
    a.shape.push_back(std::stoll(dims.substr(i, j - i)));
    i = j;
  }
  size_t elem = 0;
  if (a.dtype == "f4" || a.dtype == "i4") elem = 4;
  else if (a.dtype == "f8" || a.dtype == "i8") elem = 8;
  else if (a.dtype == "u2") elem = 2;
  else if (a.dtype == "u1" || a.dtype == "b1") elem = 1;
  else fail_file("{}: unsupported .npy dtype {}", path, a.dtype);
  const size_t nbytes = static_cast<size_t>(a.numel()) * elem;
  if (start + header_len + nbytes != data.size()) fail_file("{}: .npy data size mismatch", path);
  a.bytes.assign(data.begin() + static_cast<long>(start + header_len), data.end());
  if (a.dtype == "b1") a.dtype = "u1";
  return a;
}

void write_npy(const std::string& path, const std::string& dtype, const std::vector<int64_t>& shape, const void* data,
               size_t nbytes) {
  std::string shp = "(";
  for (size_t i = 0; i < shape.size(); ++i) shp += std::to_string(shape[i]) + (shape.size() == 1 ? "," : (i + 1 < shape.size() ? ", " : ""));
  shp += ")";
  const char order = dtype == "u1" ? '|' : '<';
  std::string header = "{'descr': '" + std::string(1, order) + dtype + "', 'fortran_order': False, 'shape': " + shp + ", }";
  const size_t unpadded = 10 + header.size() + 1;
  header.append((64 - unpadded % 64) % 64, ' ');
  header.push_back('\n');
  std::ofstream out(path, std::ios::binary);
  if (!out) fail(ErrorKind::kInvalidArgument, "{}: cannot write", path);
  out.write("\x93NUMPY\x01\x00", 8);
  const uint16_t hl = static_cast<uint16_t>(header.size());
  out.put(static_cast<char>(hl & 0xff));
  out.put(static_cast<char>(hl >> 8));
  out.write(header.data(), static_cast<std::streamsize>(header.size()));
  out.write(static_cast<const char*>(data), static_cast<std::streamsize>(nbytes));
}

}  // namespace dgemma
