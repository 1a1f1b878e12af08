#include "guided/code_set.h"

#include <algorithm>

namespace dgemma::guided {
namespace {

constexpr char32_t kSurrogateLo = 0xD800, kSurrogateHi = 0xDFFF;

void normalise(std::vector<CodeSet::Range>& r) {
  std::sort(r.begin(), r.end(), [](const auto& a, const auto& b) { return a.lo < b.lo; });
  std::vector<CodeSet::Range> out;
  for (const auto& x : r) {
    if (!out.empty() && x.lo <= out.back().hi + 1)
      out.back().hi = std::max(out.back().hi, x.hi);
    else
      out.push_back(x);
  }
  r = std::move(out);
}

int encoded_length(char32_t c) {
  return c < 0x80 ? 1 : c < 0x800 ? 2 : c < 0x10000 ? 3 : 4;
}

std::array<uint8_t, 4> encode(char32_t c, int n) {
  std::array<uint8_t, 4> b{};
  if (n == 1) {
    b[0] = static_cast<uint8_t>(c);
  } else if (n == 2) {
    b[0] = static_cast<uint8_t>(0xC0 | (c >> 6));
    b[1] = static_cast<uint8_t>(0x80 | (c & 0x3F));
  } else if (n == 3) {
    b[0] = static_cast<uint8_t>(0xE0 | (c >> 12));
    b[1] = static_cast<uint8_t>(0x80 | ((c >> 6) & 0x3F));
    b[2] = static_cast<uint8_t>(0x80 | (c & 0x3F));
  } else {
    b[0] = static_cast<uint8_t>(0xF0 | (c >> 18));
    b[1] = static_cast<uint8_t>(0x80 | ((c >> 12) & 0x3F));
    b[2] = static_cast<uint8_t>(0x80 | ((c >> 6) & 0x3F));
    b[3] = static_cast<uint8_t>(0x80 | (c & 0x3F));
  }
  return b;
}

// [lo, hi] encode to the same length n. Splits the range until every piece's encodings are exactly the
// products of per-position byte ranges: a piece qualifies when, for each number i of trailing
// continuation bytes, lo and hi agree above those bytes or span whole blocks of them.
void split_same_length(char32_t lo, char32_t hi, int n, std::vector<ByteSequence>& out) {
  for (int i = 1; i < n; ++i) {
    const char32_t m = (char32_t{1} << (6 * i)) - 1;
    if ((lo & ~m) == (hi & ~m)) continue;
    if ((lo & m) != 0) {
      split_same_length(lo, lo | m, n, out);
      split_same_length((lo | m) + 1, hi, n, out);
      return;
    }
    if ((hi & m) != m) {
      split_same_length(lo, (hi & ~m) - 1, n, out);
      split_same_length(hi & ~m, hi, n, out);
      return;
    }
  }
  ByteSequence s;
  s.length = n;
  s.lo = encode(lo, n);
  s.hi = encode(hi, n);
  out.push_back(s);
}

}  // namespace

CodeSet CodeSet::range(char32_t lo, char32_t hi) {
  CodeSet s;
  s.add(lo, hi);
  return s;
}

CodeSet CodeSet::all() {
  return range(0, kMaxCodePoint);
}

void CodeSet::add(char32_t lo, char32_t hi) {
  hi = std::min(hi, kMaxCodePoint);
  if (lo > hi) return;
  if (lo < kSurrogateLo && hi > kSurrogateHi) {
    ranges_.push_back({lo, kSurrogateLo - 1});
    ranges_.push_back({kSurrogateHi + 1, hi});
  } else if (lo >= kSurrogateLo && hi <= kSurrogateHi) {
    return;
  } else if (lo >= kSurrogateLo && lo <= kSurrogateHi) {
    ranges_.push_back({kSurrogateHi + 1, hi});
  } else if (hi >= kSurrogateLo && hi <= kSurrogateHi) {
    ranges_.push_back({lo, kSurrogateLo - 1});
  } else {
    ranges_.push_back({lo, hi});
  }
  normalise(ranges_);
}

void CodeSet::add(const CodeSet& other) {
  ranges_.insert(ranges_.end(), other.ranges_.begin(), other.ranges_.end());
  normalise(ranges_);
}

CodeSet CodeSet::complement() const {
  CodeSet out;
  char32_t next = 0;
  for (const auto& r : ranges_) {
    if (r.lo > next) out.add(next, r.lo - 1);
    next = r.hi + 1;
  }
  if (next <= kMaxCodePoint) out.add(next, kMaxCodePoint);
  return out;
}

CodeSet CodeSet::intersect(const CodeSet& other) const {
  CodeSet out;
  size_t i = 0, j = 0;
  while (i < ranges_.size() && j < other.ranges_.size()) {
    const char32_t lo = std::max(ranges_[i].lo, other.ranges_[j].lo);
    const char32_t hi = std::min(ranges_[i].hi, other.ranges_[j].hi);
    if (lo <= hi) out.ranges_.push_back({lo, hi});
    if (ranges_[i].hi < other.ranges_[j].hi)
      ++i;
    else
      ++j;
  }
  return out;
}

bool CodeSet::contains(char32_t c) const {
  auto it = std::upper_bound(ranges_.begin(), ranges_.end(), c,
                             [](char32_t v, const Range& r) { return v < r.lo; });
  return it != ranges_.begin() && std::prev(it)->hi >= c;
}

uint64_t CodeSet::size() const {
  uint64_t n = 0;
  for (const auto& r : ranges_) n += uint64_t{r.hi} - r.lo + 1;
  return n;
}

std::vector<ByteSequence> utf8_sequences(const CodeSet& set) {
  std::vector<ByteSequence> out;
  static constexpr char32_t kLengthEnds[] = {0x7F, 0x7FF, 0xFFFF, kMaxCodePoint};
  for (const auto& r : set.ranges()) {
    char32_t lo = r.lo;
    while (lo <= r.hi) {
      const int n = encoded_length(lo);
      const char32_t hi = std::min(r.hi, kLengthEnds[n - 1]);
      split_same_length(lo, hi, n, out);
      lo = hi + 1;
    }
  }
  return out;
}

}  // namespace dgemma::guided
