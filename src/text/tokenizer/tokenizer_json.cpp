// Streaming (SAX) read of tokenizer.json. A Gemma tokenizer.json is ~14 MB, nearly all of it the
// model's vocab (262k entries) and merges (515k pairs); building those as a nlohmann DOM (a std::map
// per object) and then copying them out took seconds. Here they go straight into flat vectors and
// only the small rest of the file becomes a DOM.
#include <string>
#include <vector>

#include "text/tokenizer/tokenizer_impl.h"
#include "util/error.h"
#include "util/json.h"

namespace dgemma::tokenizer_detail {
namespace {

class Reader : public nlohmann::json_sax<Json> {
 public:
  explicit Reader(RawTokenizerJson& out) : out_(out) {}

  bool null() override { return scalar_in_capture() || value(Json(nullptr)); }
  bool boolean(bool v) override { return scalar_in_capture() || value(Json(v)); }
  bool number_integer(number_integer_t v) override { return capture_int(v) || value(Json(v)); }
  bool number_unsigned(number_unsigned_t v) override {
    return capture_int(v > static_cast<number_unsigned_t>(INT64_MAX) ? -1 : static_cast<int64_t>(v)) || value(Json(v));
  }
  bool number_float(number_float_t v, const string_t&) override { return scalar_in_capture() || value(Json(v)); }
  bool string(string_t& s) override {
    if (mode_ == Mode::kVocab) return bad_vocab();
    if (mode_ == Mode::kMerges) {
      out_.merges.push_back({std::move(s), {}, false});
      return true;
    }
    if (mode_ == Mode::kMergePair) {
      if (pair_items_ == 0) out_.merges.back().a = std::move(s);
      else if (pair_items_ == 1) out_.merges.back().b = std::move(s);
      ++pair_items_;
      return true;
    }
    return value(Json(std::move(s)));
  }
  bool binary(binary_t&) override { return false; }

  bool start_object(std::size_t) override {
    if (++depth_ > kMaxJsonDepth) return too_deep();
    if (mode_ == Mode::kIgnore) return ++ignore_depth_, true;
    if (mode_ == Mode::kVocab) return bad_vocab_container();
    if (mode_ == Mode::kMerges || mode_ == Mode::kMergePair) return bad_merges_container();
    if (at_model_member("vocab")) {
      if (out_.has_vocab) out_.vocab_error = "model.vocab appears twice";
      out_.has_vocab = true;
      mode_ = Mode::kVocab;
      return true;
    }
    return open(Json::object());
  }
  bool key(string_t& k) override {
    if (mode_ == Mode::kIgnore) return true;
    if (mode_ == Mode::kVocab) {
      vocab_key_ = std::move(k);
      return true;
    }
    key_ = std::move(k);
    return true;
  }
  bool end_object() override {
    --depth_;
    if (mode_ == Mode::kIgnore) return close_ignored();
    if (mode_ == Mode::kVocab) {
      mode_ = Mode::kNone;
      return true;
    }
    return close();
  }
  bool start_array(std::size_t) override {
    if (++depth_ > kMaxJsonDepth) return too_deep();
    if (mode_ == Mode::kIgnore) return ++ignore_depth_, true;
    if (mode_ == Mode::kVocab) return bad_vocab_container();
    if (mode_ == Mode::kMerges) {
      out_.merges.push_back({{}, {}, true});
      pair_items_ = 0;
      mode_ = Mode::kMergePair;
      return true;
    }
    if (mode_ == Mode::kMergePair) return bad_merges_container();
    if (at_model_member("merges")) {
      if (out_.has_merges) out_.merges_error = "model.merges appears twice";
      out_.has_merges = true;
      mode_ = Mode::kMerges;
      return true;
    }
    return open(Json::array());
  }
  bool end_array() override {
    --depth_;
    if (mode_ == Mode::kIgnore) return close_ignored();
    if (mode_ == Mode::kMergePair) {
      if (pair_items_ != 2) out_.merges_error = "a merge must be [\"a\", \"b\"] or \"a b\"";
      mode_ = Mode::kMerges;
      return true;
    }
    if (mode_ == Mode::kMerges) {
      mode_ = Mode::kNone;
      return true;
    }
    return close();
  }
  bool parse_error(std::size_t, const std::string&, const nlohmann::detail::exception& e) override {
    parse_error_ = e.what();
    return false;
  }

  const std::string& error() const { return parse_error_; }

 private:
  enum class Mode { kNone, kVocab, kMerges, kMergePair, kIgnore };

  // True when the container about to open is tokenizer.json's model.<name>.
  bool at_model_member(const char* name) const {
    return stack_.size() == 2 && stack_[1]->is_object() && key_ == name && path_model_;
  }

  bool capture_int(int64_t v) {
    if (mode_ == Mode::kIgnore) return true;
    if (mode_ == Mode::kVocab) {
      out_.vocab.emplace_back(std::move(vocab_key_), v);
      return true;
    }
    if (mode_ == Mode::kMerges || mode_ == Mode::kMergePair) {
      out_.merges_error = "a merge must be [\"a\", \"b\"] or \"a b\"";
      return true;
    }
    return false;
  }

  // Scalars other than ids and piece strings inside a captured section: record the error, skip.
  bool scalar_in_capture() {
    switch (mode_) {
      case Mode::kIgnore:
        return true;
      case Mode::kVocab:
        return bad_vocab();
      case Mode::kMerges:
      case Mode::kMergePair:
        out_.merges_error = "a merge must be [\"a\", \"b\"] or \"a b\"";
        return true;
      case Mode::kNone:
        break;
    }
    return false;
  }

  bool bad_vocab() {
    out_.vocab_error = "model.vocab values must be integer ids";
    return true;
  }
  bool bad_vocab_container() {
    bad_vocab();
    return enter_ignore();
  }
  bool bad_merges_container() {
    out_.merges_error = "a merge must be [\"a\", \"b\"] or \"a b\"";
    return enter_ignore();
  }
  // Skips a nested container in a captured section (the error is already recorded).
  bool enter_ignore() {
    resume_mode_ = mode_;
    mode_ = Mode::kIgnore;
    ignore_depth_ = 1;
    return true;
  }
  bool close_ignored() {
    if (--ignore_depth_ == 0) mode_ = resume_mode_;
    return true;
  }
  bool too_deep() {
    parse_error_ = "JSON nested deeper than " + std::to_string(kMaxJsonDepth) + " levels";
    return false;
  }

  bool value(Json v) {
    if (mode_ == Mode::kIgnore) return true;
    if (stack_.empty()) {
      out_.rest = std::move(v);
      return true;
    }
    Json& top = *stack_.back();
    if (top.is_array()) top.push_back(std::move(v));
    else top[key_] = std::move(v);
    return true;
  }

  bool open(Json container) {
    if (stack_.empty()) {
      out_.rest = std::move(container);
      stack_.push_back(&out_.rest);
      return true;
    }
    Json& top = *stack_.back();
    Json* child;
    if (top.is_array()) {
      top.push_back(std::move(container));
      child = &top.back();
    } else {
      child = &(top[key_] = std::move(container));
    }
    // model.vocab / model.merges are only captured directly under the top-level "model".
    if (stack_.size() == 1) path_model_ = top.is_object() && key_ == "model";
    stack_.push_back(child);
    return true;
  }

  bool close() {
    stack_.pop_back();
    if (stack_.size() == 1) path_model_ = false;
    return true;
  }

  RawTokenizerJson& out_;
  std::vector<Json*> stack_;
  std::string key_, vocab_key_, parse_error_;
  Mode mode_ = Mode::kNone, resume_mode_ = Mode::kNone;
  int depth_ = 0, ignore_depth_ = 0, pair_items_ = 0;
  bool path_model_ = false;
};

}  // namespace

RawTokenizerJson read_tokenizer_json(std::string_view text, std::string_view what) {
  RawTokenizerJson out;
  Reader reader(out);
  bool ok = false;
  try {
    ok = Json::sax_parse(text.begin(), text.end(), &reader, Json::input_format_t::json, /*strict=*/true);
  } catch (const Json::exception& e) {
    fail_file("{}: invalid JSON: {}", what, e.what());
  }
  if (!ok) fail_file("{}: invalid JSON: {}", what, reader.error().empty() ? "unsupported content" : reader.error());
  return out;
}

}  // namespace dgemma::tokenizer_detail
