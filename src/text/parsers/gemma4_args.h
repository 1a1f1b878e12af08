#pragma once
// Gemma 4 tool-call argument syntax -> JSON. The model writes arguments as
//   {key:<|"|>text<|"|>,n:42,flag:true,obj:{...},arr:[...]}
// (bare keys, strings delimited by the <|"|> token on both sides, bare numbers/true/false/null).
// Lenient on the malformed forms DiffusionGemma emits in practice: JSON double quotes or single
// quotes instead of <|"|> (with backslash escapes), quoted keys, '=' instead of ':', parenthesised
// keyword bodies "(a='x', n=3)", python literals True/False/None, extra or missing commas, a closing
// bracket that also closes unclosed inner containers, bare words as strings.
// Value rules: <|"|> strings are raw text (no escapes); a bare value runs to the next ',' or closing
// bracket and is trimmed: true/True, false/False, null/None/none/nil/NULL -> literals; a number in JSON
// syntax (also with a leading '+', ".5", "5.") -> number, unless beyond a double's range ("1e400": a
// string, since JSON parsers refuse such a number or read infinity); anything else, including "007",
// "0x1f", "nan" -> string; an empty value ("{a:}") -> "".
#include <string>
#include <string_view>
#include <vector>

#include "util/json.h"

namespace dgemma {

// Parses a whole argument body ("{...}", "(...)", or a bare member list "a:1,b:<|"|>x<|"|>") into a
// JSON object. Throws Error(kInvalidArgument) unless the text is one complete, well-formed body.
Json gemma4_args_to_json(std::string_view args);

// Serialises like Python's json.dumps(ensure_ascii=False): ", " and ": " separators, non-ASCII kept,
// keys in the Json's own order.
std::string gemma4_dump_json(const Json& value);

// Incremental converter from an argument body to JSON object text, used by the streaming tool-call
// parser: it only consumes input whose meaning can no longer change, so the JSON pieces it appends are
// never retracted, and the concatenation of all pieces is the same for every way the input is split.
// The input is passed as the whole buffer plus a position (it may look back to a member's start).
class Gemma4ArgsStream {
 public:
  enum class Opener { kBrace, kParen, kNone };  // the opener ('{' / '(') has already been consumed
  enum class Status { kNeedMore, kDone, kError };
  static constexpr size_t kMaxDepth = 32;       // nested containers; deeper is an error

  explicit Gemma4ArgsStream(Opener opener);

  // Consumes text[pos..], appending JSON to out (the first call appends "{"). final: no more text will
  // ever come. Returns
  //   kNeedMore: pos is where to resume once more text is appended (only when !final);
  //   kDone: out now holds a complete JSON object; pos is after the body's closing bracket, or at a
  //          tool-call control marker (<tool_call|>, <|tool_call>, <|tool_response>) that cut the body
  //          short, or at the end of text;
  //   kError: the text at pos (the start of the offending member) is not argument syntax; out was
  //          completed by closing what was open.
  // After kDone/kError further calls return the same status and do nothing.
  Status run(std::string_view text, size_t& pos, bool final, std::string& out);

  // True if the body ended by its own closing bracket (or, for kNone, at the end of text) with nothing
  // closed implicitly (an unterminated string or container).
  bool clean() const { return clean_; }
  // True if the body ended without its own closing bracket: at a control marker or the end of text.
  bool cut_short() const { return cut_short_; }

  // Earliest buffer position the stream may still look at (a member in progress), or `pos` if none:
  // text before it may be dropped by the caller after shifting with shift().
  size_t keep_from(size_t pos) const;
  void shift(size_t removed);

 private:
  enum class Frame : unsigned char { kObject, kParen, kImplicit, kArray };
  enum class Slot : unsigned char { kKey, kSep, kValue, kNext };
  enum class Str : unsigned char { kNone, kDelim, kDouble, kSingle };
  enum class StrResult { kMore, kOk, kError };
  struct Level {
    Frame frame;
    Slot slot;
    bool any;  // a member was written (the next one needs ", ")
  };

  StrResult scan_string(std::string_view text, size_t& pos, bool final, std::string& out);
  void string_chunk(std::string_view raw, std::string& out);
  void end_string(bool implicit, std::string& out);
  void write_prefix(std::string& out);
  static bool closes(Frame f, char c);
  bool any_closes(char c) const;
  Status close_bracket(char c, size_t& pos, std::string& out);
  Status finish_all(std::string& out);
  Status fail(size_t at, size_t& pos, std::string& out);

  std::vector<Level> stack_;
  Str str_ = Str::kNone;
  bool str_is_key_ = false;
  bool member_open_ = false;   // a key was started but its value not yet begun
  size_t member_start_ = 0;
  std::string key_;
  size_t bare_scanned_ = 0;    // bytes after pos of a bare key/value already scanned (resume there)
  bool started_ = false;
  bool clean_ = true;
  bool cut_short_ = false;
  bool ended_ = false;
  Status end_status_ = Status::kDone;
};

}  // namespace dgemma
