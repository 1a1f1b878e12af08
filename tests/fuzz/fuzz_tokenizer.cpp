// libFuzzer target for the tokenizer: the input bytes are user text (any bytes, including invalid
// UTF-8 and NULs). Checked properties, each an abort when violated:
//   - encode (special tokens allowed or not) yields in-range ids and never throws;
//   - decode(encode(text)) gives back the text (after U+FFFD repair of bad UTF-8; a literal "▁"
//     comes back as a space) — the Gemma tokenizer is lossless thanks to byte fallback;
//   - the incremental detokenizer, fed one id at a time or in input-chosen chunks, emits only valid
//     UTF-8 and adds up to decode();
//   - the input bytes read as raw ids decode (and stream) to valid UTF-8 identically.
// Uses the Gemma 4 tokenizer (DGEMMA_GEMMA4_TOKENIZER, or gemma4-tokenizer/tokenizer.json next to
// the binary or in the working directory); without it, a small built-in one of the same shape.
#include <unistd.h>

#include <climits>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "text/tokenizer/detokenizer.h"
#include "text/tokenizer/tokenizer.h"
#include "text/tokenizer/utf8.h"
#include "util/error.h"

namespace {

// Gemma-shaped: byte fallback for every byte, Replace " "->"▁", Split " ", Replace+ByteFallback+Fuse.
std::string builtin_tokenizer_json() {
  std::string vocab = R"("<pad>":0,"<eos>":1,"<bos>":2,"<unk>":3,"<|turn>":4,"<turn|>":5,"\n":6,"\u2581":7,)"
                      R"("a":8,"b":9,"\u2581a":10,"ab":11,"\u2581\u2581":12,">":13,"<":14,"/":15,">\u2581</":16,)"
                      R"(">\u2581":17,"</":18,"<x>":19)";
  char buf[32];
  for (int b = 0; b < 256; ++b) {
    std::snprintf(buf, sizeof buf, ",\"<0x%02X>\":%d", b, 20 + b);
    vocab += buf;
  }
  return R"({"version":"1.0","truncation":null,"padding":null,"added_tokens":[)"
         R"({"id":0,"content":"<pad>","single_word":false,"lstrip":false,"rstrip":false,"normalized":false,"special":true},)"
         R"({"id":2,"content":"<bos>","single_word":false,"lstrip":false,"rstrip":false,"normalized":false,"special":true},)"
         R"({"id":4,"content":"<|turn>","single_word":false,"lstrip":false,"rstrip":false,"normalized":false,"special":true},)"
         R"({"id":5,"content":"<turn|>","single_word":false,"lstrip":false,"rstrip":false,"normalized":false,"special":true},)"
         R"({"id":6,"content":"\n","single_word":false,"lstrip":false,"rstrip":false,"normalized":false,"special":false},)"
         R"({"id":19,"content":"<x>","single_word":false,"lstrip":false,"rstrip":false,"normalized":false,"special":false}],)"
         R"("normalizer":{"type":"Replace","pattern":{"String":" "},"content":"\u2581"},)"
         R"("pre_tokenizer":{"type":"Split","pattern":{"String":" "},"behavior":"MergedWithPrevious","invert":false},)"
         R"("post_processor":null,"decoder":{"type":"Sequence","decoders":[)"
         R"({"type":"Replace","pattern":{"String":"\u2581"},"content":" "},{"type":"ByteFallback"},{"type":"Fuse"}]},)"
         R"("model":{"type":"BPE","dropout":null,"unk_token":"<unk>","continuing_subword_prefix":null,)"
         R"("end_of_word_suffix":null,"fuse_unk":true,"byte_fallback":true,"ignore_merges":false,"vocab":{)" +
         vocab +
         R"(},"merges":[["\u2581","a"],["a","b"],["\u2581","\u2581"],[">","\u2581"],["<","/"],[">\u2581","</"]]}})";
}

std::string exe_dir() {
  std::error_code ec;
  auto p = std::filesystem::read_symlink("/proc/self/exe", ec);
  return ec ? std::string(".") : p.parent_path().string();
}

const dgemma::Tokenizer& tokenizer() {
  static const std::unique_ptr<dgemma::Tokenizer> tok = [] {
    std::vector<std::string> candidates;
    if (const char* env = std::getenv("DGEMMA_GEMMA4_TOKENIZER"); env && *env) candidates.push_back(env);
    candidates.push_back(exe_dir() + "/gemma4-tokenizer/tokenizer.json");
    candidates.push_back("gemma4-tokenizer/tokenizer.json");
    for (const auto& path : candidates) {
      if (std::filesystem::exists(path)) {
        std::fprintf(stderr, "fuzz_tokenizer: using %s\n", path.c_str());
        return dgemma::Tokenizer::from_file(path);
      }
    }
    std::fprintf(stderr, "fuzz_tokenizer: Gemma 4 tokenizer not found; using the built-in one\n");
    return dgemma::Tokenizer::from_json_text(builtin_tokenizer_json(), "built-in fuzz tokenizer");
  }();
  return *tok;
}

[[noreturn]] void die(const char* what) {
  std::fprintf(stderr, "fuzz_tokenizer: property violated: %s\n", what);
  std::abort();
}

void check(bool ok, const char* what) {
  if (!ok) die(what);
}

// Streams ids through an IncrementalDetokenizer in chunks of 1..`max_chunk`, checking each output.
std::string stream(const dgemma::Tokenizer& tok, const std::vector<int32_t>& ids, bool skip, const uint8_t* data,
                   size_t size, size_t max_chunk) {
  dgemma::IncrementalDetokenizer detok(tok, skip);
  std::string out;
  size_t k = 0;
  for (size_t i = 0; i < ids.size();) {
    const size_t want = max_chunk == 1 || size == 0 ? 1 : 1 + data[k++ % size] % max_chunk;
    const size_t n = std::min(want, ids.size() - i);
    const std::string piece = detok.feed(std::span<const int32_t>(ids.data() + i, n));
    check(dgemma::utf8::is_valid(piece), "detokenizer emitted invalid UTF-8");
    out += piece;
    i += n;
  }
  const std::string tail = detok.flush();
  check(dgemma::utf8::is_valid(tail), "detokenizer flush emitted invalid UTF-8");
  return out + tail;
}

// The decoder turns every "▁" (U+2581) into a space.
std::string meta_to_space(std::string_view s) {
  std::string out;
  size_t pos = 0;
  for (size_t hit = s.find("\xE2\x96\x81"); hit != std::string_view::npos; hit = s.find("\xE2\x96\x81", pos)) {
    out.append(s.substr(pos, hit - pos));
    out.push_back(' ');
    pos = hit + 3;
  }
  out.append(s.substr(pos));
  return out;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const dgemma::Tokenizer& tok = tokenizer();
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  const std::string expected_back = meta_to_space(dgemma::utf8::sanitize(text));
  try {
    for (bool allow_special : {false, true}) {
      const std::vector<int32_t> ids = tok.encode(text, allow_special);
      for (int32_t id : ids) check(id >= 0 && id < tok.vocab_size(), "encode produced an out-of-range id");
      if (!allow_special)
        for (int32_t id : ids) check(!tok.is_special(id), "user text produced a special token");
      const std::string back = tok.decode(ids);
      check(dgemma::utf8::is_valid(back), "decode produced invalid UTF-8");
      check(back == expected_back, "decode(encode(text)) != text");
      check(stream(tok, ids, false, data, size, 1) == back, "one-by-one detokenizer != decode");
      check(stream(tok, ids, true, data, size, 300) == tok.decode(ids, true), "chunked detokenizer != decode");
    }
    // The input read as little-endian 24-bit ids (mod vocab size): arbitrary id sequences.
    std::vector<int32_t> raw;
    for (size_t i = 0; i + 2 < size; i += 3)
      raw.push_back(static_cast<int32_t>((data[i] | data[i + 1] << 8 | data[i + 2] << 16) % tok.vocab_size()));
    for (bool skip : {false, true}) {
      const std::string dec = tok.decode(raw, skip);
      check(dgemma::utf8::is_valid(dec), "decode of raw ids produced invalid UTF-8");
      check(stream(tok, raw, skip, data, size, 64) == dec, "detokenizer != decode on raw ids");
    }
  } catch (const dgemma::Error& e) {
    std::fprintf(stderr, "fuzz_tokenizer: unexpected error: %s\n", e.what());
    std::abort();
  }
  return 0;
}
