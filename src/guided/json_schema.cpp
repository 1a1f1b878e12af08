#include "guided/json_schema.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <map>
#include <memory>
#include <set>

#include "guided/json_formats.h"
#include "guided/nfa.h"
#include "guided/regex_parser.h"
#include "util/error.h"

namespace dgemma::guided {
namespace {

const std::set<std::string, std::less<>> kAnnotations = {
    "title",           "description",      "default",  "examples",   "$schema",
    "$comment",        "deprecated",       "readOnly", "writeOnly",  "discriminator",
    "contentEncoding", "contentMediaType", "$defs",    "definitions"};
// Keywords and the type they constrain ("" for all types).
const std::map<std::string, std::string, std::less<>> kKeywords = {{"type", ""},
                                                                   {"enum", ""},
                                                                   {"const", ""},
                                                                   {"anyOf", ""},
                                                                   {"oneOf", ""},
                                                                   {"allOf", ""},
                                                                   {"$ref", ""},
                                                                   {"properties", "object"},
                                                                   {"required", "object"},
                                                                   {"additionalProperties", "object"},
                                                                   {"items", "array"},
                                                                   {"prefixItems", "array"},
                                                                   {"minItems", "array"},
                                                                   {"maxItems", "array"},
                                                                   {"uniqueItems", "array"},
                                                                   {"minLength", "string"},
                                                                   {"maxLength", "string"},
                                                                   {"pattern", "string"},
                                                                   {"format", "string"}};
const std::vector<std::string> kTypes = {"null", "boolean", "integer", "number", "string", "array", "object"};

[[noreturn]] void unsupported(const std::string& path, const std::string& what) {
  throw Error(ErrorKind::kUnsupported,
              fmt::format("'{}': {} is not supported for guided decoding", path, what));
}

// The text after '#' of a $ref, decoded into JSON-pointer tokens.
std::vector<std::string> pointer_tokens(const std::string& ref, const std::string& path) {
  std::string frag;
  for (size_t i = 1; i < ref.size(); ++i) {
    if (ref[i] == '%' && i + 2 < ref.size() && std::isxdigit(static_cast<unsigned char>(ref[i + 1])) &&
        std::isxdigit(static_cast<unsigned char>(ref[i + 2]))) {
      frag += static_cast<char>(std::stoi(ref.substr(i + 1, 2), nullptr, 16));
      i += 2;
    } else {
      frag += ref[i];
    }
  }
  std::vector<std::string> tokens;
  if (frag.empty()) return tokens;
  if (frag[0] != '/')
    unsupported(path, fmt::format("the $ref '{}' (only '#' and '#/json/pointer' forms)", ref));
  size_t pos = 1;
  while (true) {
    const size_t slash = frag.find('/', pos);
    std::string raw = frag.substr(pos, slash == std::string::npos ? std::string::npos : slash - pos);
    std::string token;
    for (size_t i = 0; i < raw.size(); ++i) {
      if (raw[i] == '~' && i + 1 < raw.size() && (raw[i + 1] == '0' || raw[i + 1] == '1')) {
        token += raw[i + 1] == '0' ? '~' : '/';
        ++i;
      } else {
        token += raw[i];
      }
    }
    tokens.push_back(std::move(token));
    if (slash == std::string::npos) break;
    pos = slash + 1;
  }
  return tokens;
}

class Compiler {
 public:
  Compiler(const OrderedJson& root, const CompileLimits& limits, bool dry)
      : root_(root), limits_(limits), dry_(dry), ast_(limits), text_(ast_) {}

  NodeId compile() { return value(root_, "schema", 0); }
  Ast& ast() { return ast_; }

 private:
  NodeId value(const OrderedJson& s, const std::string& path, int depth) {
    if (depth > limits_.max_nesting)
      fail_arg("'{}': the schema nests deeper than {} levels", path, limits_.max_nesting);
    if (s.is_boolean()) return s.get<bool>() ? text_.any_value(limits_.any_value_depth) : ast_.nothing();
    if (!s.is_object()) fail_arg("'{}' must be a JSON Schema (an object or a boolean)", path);
    std::set<std::string> implied;
    for (auto it = s.begin(); it != s.end(); ++it) {
      if (kAnnotations.count(it.key()) || (it.key() == "$id" && &s == &root_)) continue;
      const auto k = kKeywords.find(it.key());
      if (k == kKeywords.end()) unsupported(path, fmt::format("the JSON Schema keyword '{}'", it.key()));
      if (!k->second.empty()) implied.insert(k->second);
    }
    std::vector<NodeId> parts;
    if (auto r = s.find("$ref"); r != s.end()) parts.push_back(ref(*r, path + ".$ref", depth));
    if (auto a = s.find("allOf"); a != s.end())
      for (const auto& [i, sub] : schema_list(*a, path + ".allOf")) parts.push_back(value(sub, i, depth + 1));
    if (auto a = s.find("anyOf"); a != s.end()) {
      std::vector<NodeId> alts;
      for (const auto& [i, sub] : schema_list(*a, path + ".anyOf")) alts.push_back(value(sub, i, depth + 1));
      parts.push_back(ast_.alt(std::move(alts)));
    }
    if (auto a = s.find("oneOf"); a != s.end()) {
      std::vector<NodeId> alts;
      for (const auto& [i, sub] : schema_list(*a, path + ".oneOf")) alts.push_back(value(sub, i, depth + 1));
      parts.push_back(exactly_one(std::move(alts)));
    }
    if (auto c = s.find("const"); c != s.end()) parts.push_back(text_.literal(*c));
    if (auto e = s.find("enum"); e != s.end()) {
      if (!e->is_array() || e->empty()) fail_arg("'{}.enum' must be a non-empty array", path);
      std::vector<NodeId> alts;
      for (const auto& v : *e) alts.push_back(text_.literal(v));
      parts.push_back(ast_.alt(std::move(alts)));
    }
    std::set<std::string> types;
    if (auto t = s.find("type"); t != s.end()) {
      types = type_names(*t, path + ".type");
    } else {
      types = implied;
    }
    if (!types.empty()) parts.push_back(typed(s, types, path, depth));
    if (parts.empty()) return text_.any_value(limits_.any_value_depth);
    return all_of(std::move(parts));
  }

  std::set<std::string> type_names(const OrderedJson& t, const std::string& path) {
    std::set<std::string> out;
    auto add = [&](const OrderedJson& name) {
      if (!name.is_string() ||
          std::find(kTypes.begin(), kTypes.end(), name.get<std::string>()) == kTypes.end())
        fail_arg("'{}' must name types among null, boolean, integer, number, string, array, object", path);
      if (!out.insert(name.get<std::string>()).second)
        fail_arg("'{}' names the type {} twice", path, name.dump());
    };
    if (t.is_array()) {
      if (t.empty()) fail_arg("'{}' must not be an empty list", path);
      for (const auto& name : t) add(name);
    } else {
      add(t);
    }
    return out;
  }

  std::vector<std::pair<std::string, const OrderedJson&>> schema_list(const OrderedJson& a,
                                                                      const std::string& path) {
    if (!a.is_array() || a.empty()) fail_arg("'{}' must be a non-empty array of schemas", path);
    std::vector<std::pair<std::string, const OrderedJson&>> out;
    for (size_t i = 0; i < a.size(); ++i) out.emplace_back(fmt::format("{}[{}]", path, i), a[i]);
    return out;
  }

  NodeId typed(const OrderedJson& s, const std::set<std::string>& types, const std::string& path, int depth) {
    std::vector<NodeId> alts;
    for (const std::string& t : types) {
      if (t == "null")
        alts.push_back(text_.null());
      else if (t == "boolean")
        alts.push_back(text_.boolean());
      else if (t == "integer")
        alts.push_back(text_.integer());
      else if (t == "number")
        alts.push_back(text_.number());
      else if (t == "string")
        alts.push_back(string(s, path));
      else if (t == "array")
        alts.push_back(array(s, path, depth));
      else
        alts.push_back(object(s, path, depth));
    }
    return ast_.alt(std::move(alts));
  }

  // A non-negative integer keyword, at most max_repeat; `fallback` when absent.
  int count(const OrderedJson& s, const char* key, const std::string& path, int fallback) {
    const auto it = s.find(key);
    if (it == s.end()) return fallback;
    double v = -1;
    if (it->is_number()) v = it->get<double>();
    if (!(v >= 0) || v != std::floor(v)) fail_arg("'{}.{}' must be a non-negative integer", path, key);
    if (v > limits_.max_repeat)
      fail_arg("'{}.{}' is {}, above the limit of {} for guided decoding", path, key, it->dump(),
               limits_.max_repeat);
    return static_cast<int>(v);
  }

  NodeId string(const OrderedJson& s, const std::string& path) {
    std::vector<NodeId> contents;  // languages over characters, intersected
    const int min = count(s, "minLength", path, 0);
    const int max = count(s, "maxLength", path, kUnbounded);
    if (min > 0 || max != kUnbounded) {
      if (max != kUnbounded && max < min) return ast_.nothing();
      contents.push_back(ast_.repeat(ast_.chars(CodeSet::all()), min, max));
    }
    if (auto p = s.find("pattern"); p != s.end()) {
      if (!p->is_string()) fail_arg("'{}.pattern' must be a string", path);
      try {
        contents.push_back(parse_regex(ast_, p->get<std::string>()));
      } catch (const Error& e) {
        throw Error(e.kind(), fmt::format("'{}.pattern': {}", path, e.what()));
      }
    }
    if (auto f = s.find("format"); f != s.end()) {
      if (!f->is_string()) fail_arg("'{}.format' must be a string", path);
      const auto re = format_regex(f->get<std::string>());
      if (!re)
        unsupported(path + ".format",
                    fmt::format("the format {} (supported: date, date-time, uuid, email)", f->dump()));
      contents.push_back(parse_regex(ast_, *re));
    }
    if (contents.empty()) return text_.any_string();
    std::vector<NodeId> encoded;
    for (NodeId c : contents) encoded.push_back(text_.encode_content(c));
    return text_.quoted(all_of(std::move(encoded)));
  }

  NodeId array(const OrderedJson& s, const std::string& path, int depth) {
    if (auto u = s.find("uniqueItems"); u != s.end()) {
      if (!u->is_boolean()) fail_arg("'{}.uniqueItems' must be a boolean", path);
      if (u->get<bool>()) unsupported(path + ".uniqueItems", "uniqueItems: true");
    }
    std::vector<NodeId> prefix;
    if (auto p = s.find("prefixItems"); p != s.end())
      for (const auto& [i, sub] : schema_list(*p, path + ".prefixItems"))
        prefix.push_back(value(sub, i, depth + 1));
    NodeId item = -1;  // -1: no items past the prefix
    if (auto it = s.find("items"); it == s.end()) {
      item = text_.any_value(limits_.any_value_depth - 1 < 0 ? 0 : limits_.any_value_depth - 1);
    } else if (!(it->is_boolean() && !it->get<bool>())) {
      item = value(*it, path + ".items", depth + 1);
    }
    const int min = count(s, "minItems", path, 0);
    const int max = count(s, "maxItems", path, kUnbounded);
    if (max != kUnbounded && max < min) return ast_.nothing();
    const int n = static_cast<int>(prefix.size());
    const NodeId sep = ast_.bytes(", ");
    const NodeId open = ast_.bytes("["), close = ast_.bytes("]");
    auto first = [&](int count) {  // the first `count` prefix items, separated
      std::vector<NodeId> seq;
      for (int i = 0; i < count; ++i) {
        if (i) seq.push_back(sep);
        seq.push_back(prefix[static_cast<size_t>(i)]);
      }
      return seq;
    };
    const bool more = item >= 0 && (max == kUnbounded || max > n);
    std::vector<NodeId> alts;
    for (int len = min; len <= n && (max == kUnbounded || len <= max); ++len) {
      if (len == n && more) break;  // counted with the items past the prefix
      std::vector<NodeId> seq = {open};
      for (NodeId x : first(len)) seq.push_back(x);
      seq.push_back(close);
      alts.push_back(ast_.concat(std::move(seq)));
    }
    if (more) {
      const int extra_min = std::max(0, min - n);
      const int extra_max = max == kUnbounded ? kUnbounded : max - n;
      std::vector<NodeId> seq = {open};
      if (n == 0) {
        seq.push_back(ast_.repeat(item, extra_min, extra_max, sep));
      } else {
        for (NodeId x : first(n)) seq.push_back(x);
        seq.push_back(ast_.repeat(ast_.concat({sep, item}), extra_min, extra_max));
      }
      seq.push_back(close);
      alts.push_back(ast_.concat(std::move(seq)));
    }
    return ast_.alt(std::move(alts));
  }

  NodeId object(const OrderedJson& s, const std::string& path, int depth) {
    const OrderedJson empty_props = OrderedJson::object();
    const OrderedJson* props = &empty_props;
    if (auto p = s.find("properties"); p != s.end()) {
      if (!p->is_object()) fail_arg("'{}.properties' must be an object", path);
      props = &*p;
    }
    std::vector<std::string> required;
    if (auto r = s.find("required"); r != s.end()) {
      if (!r->is_array()) fail_arg("'{}.required' must be an array of strings", path);
      for (const auto& k : *r) {
        if (!k.is_string()) fail_arg("'{}.required' must be an array of strings", path);
        if (std::find(required.begin(), required.end(), k.get<std::string>()) != required.end())
          fail_arg("'{}.required' names '{}' twice", path, k.get<std::string>());
        required.push_back(k.get<std::string>());
      }
    }
    // The schema of keys beyond `properties`: nullptr when none are allowed.
    const OrderedJson any = true;
    const OrderedJson* extra = &any;
    if (auto a = s.find("additionalProperties"); a != s.end()) {
      if (!a->is_boolean() && !a->is_object())
        fail_arg("'{}.additionalProperties' must be a boolean or a schema", path);
      extra = (a->is_boolean() && !a->get<bool>()) ? nullptr : &*a;
    }
    auto extra_value = [&](const std::string& at) {
      if (extra->is_boolean()) return text_.any_value(std::max(0, limits_.any_value_depth - 1));
      return value(*extra, at, depth + 1);
    };
    const NodeId sep = ast_.bytes(", ");
    if (props->empty() && required.empty()) {
      if (!extra) return ast_.bytes("{}");
      return text_.map_of(extra_value(path + ".additionalProperties"));
    }
    // Keys beyond the declared ones are never written; their schema is still checked.
    if (extra && extra->is_object()) extra_value(path + ".additionalProperties");
    std::vector<NodeId> items;
    std::vector<uint8_t> optional;
    auto member = [&](const std::string& key, NodeId v) {
      return ast_.concat({ast_.bytes(canonical_json(key) + ": "), v});
    };
    for (auto it = props->begin(); it != props->end(); ++it) {
      const bool req = std::find(required.begin(), required.end(), it.key()) != required.end();
      items.push_back(member(it.key(), value(it.value(), path + ".properties." + it.key(), depth + 1)));
      optional.push_back(!req);
    }
    for (const std::string& key : required) {
      if (props->contains(key)) continue;
      if (!extra) return ast_.nothing();  // required but not allowed
      items.push_back(member(key, extra_value(path + ".additionalProperties")));
      optional.push_back(0);
    }
    return ast_.concat(
        {ast_.bytes("{"), ast_.list(std::move(items), std::move(optional), sep), ast_.bytes("}")});
  }

  NodeId ref(const OrderedJson& r, const std::string& path, int depth) {
    if (!r.is_string()) fail_arg("'{}' must be a string", path);
    const std::string target = r.get<std::string>();
    if (target.empty() || target[0] != '#')
      unsupported(path, fmt::format("the $ref '{}' to another document", target));
    if (std::find(ref_stack_.begin(), ref_stack_.end(), target) != ref_stack_.end())
      unsupported(path, fmt::format("the recursive $ref '{}' (a schema that contains itself)", target));
    if (auto m = ref_memo_.find(target); m != ref_memo_.end()) return m->second;
    const OrderedJson* node = &root_;
    for (const std::string& token : pointer_tokens(target, path)) {
      if (node->is_object() && node->contains(token)) {
        node = &(*node)[token];
      } else if (node->is_array() && !token.empty() && token.size() < 10 &&
                 std::all_of(token.begin(), token.end(), [](char c) { return c >= '0' && c <= '9'; }) &&
                 std::stoul(token) < node->size()) {
        node = &(*node)[std::stoul(token)];
      } else {
        fail_arg("'{}': the $ref '{}' points to nothing in the schema", path, target);
      }
    }
    ref_stack_.push_back(target);
    const NodeId id = value(*node, target, depth + 1);
    ref_stack_.pop_back();
    ref_memo_[target] = id;
    return id;
  }

  std::shared_ptr<const Dfa> dfa_of(NodeId id) {
    return std::make_shared<const Dfa>(determinize(build_nfa(ast_, id), limits_));
  }

  NodeId all_of(std::vector<NodeId> parts) {
    if (parts.size() == 1 || dry_) return parts[0];
    std::vector<std::shared_ptr<const Dfa>> dfas;
    std::vector<const Dfa*> raw;
    for (NodeId p : parts) {
      dfas.push_back(dfa_of(p));
      raw.push_back(dfas.back().get());
    }
    return ast_.automaton(std::make_shared<const Dfa>(product(raw, ProductRule::kAll, limits_)));
  }

  NodeId exactly_one(std::vector<NodeId> alts) {
    if (alts.size() == 1 || dry_) return ast_.alt(std::move(alts));
    std::vector<std::shared_ptr<const Dfa>> dfas;
    std::vector<const Dfa*> raw;
    for (NodeId p : alts) {
      dfas.push_back(dfa_of(p));
      raw.push_back(dfas.back().get());
    }
    return ast_.automaton(std::make_shared<const Dfa>(product(raw, ProductRule::kExactlyOne, limits_)));
  }

  const OrderedJson& root_;
  CompileLimits limits_;
  bool dry_;
  Ast ast_;
  JsonText text_;
  std::vector<std::string> ref_stack_;
  std::map<std::string, NodeId> ref_memo_;
};

}  // namespace

OrderedJson parse_schema_text(std::string_view text, const CompileLimits& limits) {
  if (text.size() > limits.max_source_bytes)
    fail_arg("the schema is {} bytes, more than the limit of {}", text.size(), limits.max_source_bytes);
  const int max_depth = 2 * limits.max_nesting + 8;
  bool too_deep = false;
  auto cb = [&](int depth, OrderedJson::parse_event_t, OrderedJson&) {
    if (depth > max_depth) too_deep = true;
    return !too_deep;
  };
  OrderedJson j;
  try {
    j = OrderedJson::parse(text.begin(), text.end(), cb, /*allow_exceptions=*/true,
                           /*ignore_comments=*/false);
  } catch (const OrderedJson::exception& e) {
    if (!too_deep) fail_arg("the schema is not valid JSON: {}", e.what());
  }
  if (too_deep) fail_arg("the schema nests deeper than {} levels", max_depth);
  return j;
}

void check_json_schema(const OrderedJson& schema, const CompileLimits& limits) {
  Compiler(schema, limits, /*dry=*/true).compile();
}

Dfa compile_json_schema(const OrderedJson& schema, const CompileLimits& limits) {
  Compiler c(schema, limits, /*dry=*/false);
  const NodeId root = c.compile();
  Dfa dfa = determinize(build_nfa(c.ast(), root), limits);
  if (dfa.empty_language()) fail_arg("the schema admits no value that guided decoding can write");
  return dfa;
}

Dfa compile_json_object(const CompileLimits& limits) {
  Ast ast(limits);
  JsonText text(ast);
  return determinize(build_nfa(ast, text.any_object(std::max(1, limits.json_object_depth))), limits);
}

}  // namespace dgemma::guided
