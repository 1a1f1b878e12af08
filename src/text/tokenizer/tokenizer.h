#pragma once
// A Hugging Face tokenizer.json loader and BPE encoder/decoder for the SentencePiece-derived BPE
// family Gemma uses (byte_fallback, fuse_unk, Replace/Split normalisation, Replace+ByteFallback+Fuse
// decoding). Results match HF `tokenizers` exactly (tests/fixtures/tokenizer/expected.json).
//
// Anything outside that family (WordPiece, Unigram, regex normalisers, NFKC, ...) is rejected at load
// time with Error(kInvalidFile) rather than silently tokenising differently from the reference.
//
// Thread safety: a loaded Tokenizer is immutable; all const methods may run concurrently.
// Streaming decode: IncrementalDetokenizer in text/tokenizer/detokenizer.h.
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace dgemma {

namespace tokenizer_detail {
struct Impl;
struct TestAccess;  // lets unit tests switch internal shortcuts off to check they change nothing
}

class Tokenizer {
 public:
  // Throws Error(kNotFound) if the file is missing, Error(kInvalidFile) if it is malformed or of a
  // kind this implementation does not support.
  static std::unique_ptr<Tokenizer> from_file(const std::string& tokenizer_json_path);
  // `what` names the source in error messages (a path, "built-in test tokenizer", ...).
  static std::unique_ptr<Tokenizer> from_json_text(std::string_view json_text, std::string_view what);

  ~Tokenizer();
  Tokenizer(const Tokenizer&) = delete;
  Tokenizer& operator=(const Tokenizer&) = delete;

  // Encodes text without adding BOS/EOS (HF `encode(text, add_special_tokens=False)`). Special added
  // tokens written literally in `text` ("<|turn>", "<start_of_turn>") are recognised only when
  // allow_special is true; otherwise they are tokenised as ordinary text, so user input can never
  // forge control tokens (HF `encode_special_tokens=True` behaviour). Non-special added tokens are
  // always recognised, as in HF. Ill-formed UTF-8 in `text` is first replaced by U+FFFD (one per
  // maximal ill-formed subpart, as Python's bytes.decode(errors="replace")).
  std::vector<int32_t> encode(std::string_view text, bool allow_special = false) const;

  // Decodes ids exactly as HF `decode(ids, skip_special_tokens)`. Throws Error(kInvalidArgument) on
  // an id < 0 or >= vocab_size(); ids inside the range that have no piece (holes) decode to nothing.
  std::string decode(std::span<const int32_t> ids, bool skip_special = false) const;

  std::optional<int32_t> token_to_id(std::string_view token) const;
  // The raw piece ("▁Hello", "<0x0A>", "<|turn>"); empty for an unknown id.
  std::string id_to_token(int32_t id) const;
  // The byte a byte-fallback piece stands for ("<0x0A>" -> 0x0A) when the decoder has ByteFallback;
  // nullopt for any other id (the table decode() uses, built once at load).
  std::optional<uint8_t> byte_value(int32_t id) const;
  int vocab_size() const;  // max id + 1
  bool is_special(int32_t id) const;

  // --- Streaming primitives (used by IncrementalDetokenizer) ---
  // Appends the text of `ids` to `out`. Byte-fallback pieces ("<0xE4>") accumulate in
  // `pending_bytes`: HF resolves a whole run at once (valid UTF-8 as is, otherwise U+FFFD per byte),
  // so a run is only emitted when a non-byte piece follows or flush_byte_run() is called. All ids are
  // validated before anything changes (throws Error(kInvalidArgument)).
  void decode_append(std::span<const int32_t> ids, bool skip_special, std::string& pending_bytes,
                     std::string& out) const;
  static void flush_byte_run(std::string& pending_bytes, std::string& out);

 private:
  friend struct tokenizer_detail::TestAccess;
  explicit Tokenizer(std::unique_ptr<tokenizer_detail::Impl> impl);
  std::unique_ptr<tokenizer_detail::Impl> impl_;
};

}  // namespace dgemma
