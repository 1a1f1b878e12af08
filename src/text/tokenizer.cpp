// Work in progress: the BPE implementation lands in the next commit.
#include "text/tokenizer.h"

#include "util/error.h"

namespace dgemma {
namespace tokenizer_detail {
struct Impl {};
}  // namespace tokenizer_detail

Tokenizer::Tokenizer(std::unique_ptr<tokenizer_detail::Impl> impl) : impl_(std::move(impl)) {}
Tokenizer::~Tokenizer() = default;

std::unique_ptr<Tokenizer> Tokenizer::from_file(const std::string& path) {
  fail(ErrorKind::kUnsupported, "{}: tokenizer not implemented yet", path);
}
std::unique_ptr<Tokenizer> Tokenizer::from_json_text(std::string_view, std::string_view what) {
  fail(ErrorKind::kUnsupported, "{}: tokenizer not implemented yet", what);
}
std::vector<int32_t> Tokenizer::encode(std::string_view, bool) const { return {}; }
std::string Tokenizer::decode(std::span<const int32_t>, bool) const { return {}; }
std::optional<int32_t> Tokenizer::token_to_id(std::string_view) const { return std::nullopt; }
std::string Tokenizer::id_to_token(int32_t) const { return {}; }
int Tokenizer::vocab_size() const { return 0; }
bool Tokenizer::is_special(int32_t) const { return false; }
std::optional<uint8_t> Tokenizer::byte_of(int32_t) const { return std::nullopt; }
const std::string& Tokenizer::piece_text(int32_t) const {
  static const std::string empty;
  return empty;
}
}  // namespace dgemma
