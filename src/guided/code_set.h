#pragma once
// Sets of Unicode scalar values (U+0000..U+10FFFF without the surrogates U+D800..U+DFFF), as sorted,
// disjoint, non-adjacent ranges; and their UTF-8 form: a set of code points is the union of byte
// sequences whose bytes each lie in a range (utf8_sequences), which is how a regex class or "." is
// compiled to byte transitions.
#include <array>
#include <cstdint>
#include <vector>

namespace dgemma::guided {

inline constexpr char32_t kMaxCodePoint = 0x10FFFF;

class CodeSet {
 public:
  struct Range {
    char32_t lo, hi;  // inclusive
    bool operator==(const Range&) const = default;
  };

  CodeSet() = default;
  static CodeSet of(char32_t c) { return range(c, c); }
  static CodeSet range(char32_t lo, char32_t hi);
  static CodeSet all();  // every scalar value

  void add(char32_t lo, char32_t hi);  // surrogates and values past U+10FFFF are left out
  void add(char32_t c) { add(c, c); }
  void add(const CodeSet& other);

  CodeSet complement() const;  // within the scalar values
  CodeSet intersect(const CodeSet& other) const;
  CodeSet minus(const CodeSet& other) const { return intersect(other.complement()); }

  bool contains(char32_t c) const;
  bool empty() const { return ranges_.empty(); }
  uint64_t size() const;  // number of code points
  const std::vector<Range>& ranges() const { return ranges_; }
  bool operator==(const CodeSet&) const = default;

 private:
  std::vector<Range> ranges_;
};

// One UTF-8 byte sequence pattern: byte i lies in [lo[i], hi[i]], i < length.
struct ByteSequence {
  int length = 0;
  std::array<uint8_t, 4> lo{}, hi{};
};

// The byte sequences whose union is exactly the UTF-8 encodings of the set's code points (well-formed
// UTF-8 only: no overlongs, no surrogates).
std::vector<ByteSequence> utf8_sequences(const CodeSet& set);

}  // namespace dgemma::guided
