// JSON Schema as properties over random schemas of the subset (objects with optional keys, unions,
// $refs, arrays with bounds, strings with patterns, formats and lengths, enums), held to the
// independent validator of schema_oracle.h:
//  - sound: every text the automaton accepts (random walks, mutated instances) is valid UTF-8 JSON
//    that validates;
//  - complete for the text form: every valid instance the generator makes, written as json.dumps
//    writes it, is accepted.
#include <gtest/gtest.h>

#include <random>
#include <string>
#include <vector>

#include "guided/nfa.h"
#include "guided/regex_parser.h"
#include "guided_test_util.h"
#include "schema_oracle.h"
#include "util/error.h"

namespace dgemma::guided {
namespace {

using test::OJ;

class Random {
 public:
  explicit Random(uint64_t seed) : rng(seed) {}
  int pick(int n) { return std::uniform_int_distribution<int>(0, n - 1)(rng); }
  bool chance(double p) { return std::uniform_real_distribution<double>(0, 1)(rng) < p; }
  template <typename T>
  const T& of(const std::vector<T>& v) {
    return v[static_cast<size_t>(pick(static_cast<int>(v.size())))];
  }
  std::mt19937_64 rng;
};

// Anchored ASCII patterns (the text form matches the whole string, JSON Schema searches: anchored
// patterns mean the same under both).
const std::vector<std::string> kPatterns = {"^[a-z]{1,4}$", "^[A-Z][a-z]*$",    "^\\d{3}-\\d{2}$",
                                            "^(foo|bar)+$", "^[a\"\\\\]{1,3}$", "^x?y*$",
                                            "^[^a-z]{2}$",  "^(ab|c){0,2}d$"};

class SchemaGen {
 public:
  explicit SchemaGen(Random& r) : r_(r) {}

  OJ root() {
    defs_ = OJ::object();
    OJ s = value(3);
    if (!defs_.empty()) s["$defs"] = defs_;
    return s;
  }

 private:
  OJ value(int depth) {
    const int kind = r_.pick(depth > 0 ? 16 : 10);
    switch (kind) {
      case 0:
        return string();
      case 1:
        return {{"type", "integer"}};
      case 2:
        return {{"type", "number"}};
      case 3:
        return {{"type", "boolean"}};
      case 4:
        return {{"type", "null"}};
      case 5:
        return {{"enum", OJ::array({"red", 7, nullptr, "a\"b", "é\n"})}};
      case 6:
        return {{"const", r_.chance(0.5) ? OJ("fixed") : OJ(42)}};
      case 7:
        return {{"type", OJ::array({"string", "null"})}};
      case 8:
        return {{"type", "string"}, {"format", r_.of<std::string>({"date", "date-time", "uuid", "email"})}};
      case 9:
        return {{"type", "string"}, {"enum", OJ::array({"x", "y", "z"})}};
      case 10:
      case 11:
        return object(depth - 1);
      case 12:
        return array(depth - 1);
      case 13:
        return {{"anyOf", OJ::array({value(depth - 1), {{"type", "null"}}})}, {"default", nullptr}};
      case 14: {
        // oneOf of branches of distinct types, so that generated values match exactly one.
        return {{"oneOf", OJ::array({{{"type", "integer"}}, string(), object(depth - 1)})}};
      }
      default: {
        const std::string name = "D" + std::to_string(defs_.size());
        defs_[name] = nullptr;  // the name is taken before the definition is made
        defs_[name] = value(depth - 1);
        return {{"$ref", "#/$defs/" + name}};
      }
    }
  }

  OJ string() {
    OJ s = {{"type", "string"}};
    switch (r_.pick(4)) {
      case 0:
        s["pattern"] = r_.of(kPatterns);
        break;
      case 1:
        s["minLength"] = r_.pick(3);
        s["maxLength"] = 2 + r_.pick(5);
        break;
      case 2:
        s["maxLength"] = r_.pick(4);
        break;
      default:
        break;
    }
    return s;
  }

  OJ object(int depth) {
    OJ props = OJ::object();
    OJ required = OJ::array();
    const int n = r_.pick(5);
    for (int i = 0; i < n; ++i) {
      const std::string key =
          r_.of<std::string>({"id", "name", "tags", "x", "y\"q", "é", "nested", "value"}) + std::to_string(i);
      props[key] = value(depth);
      if (r_.chance(0.6)) required.push_back(key);
    }
    OJ s = {{"type", "object"}};
    if (n > 0 || r_.chance(0.5)) s["properties"] = props;
    if (!required.empty()) s["required"] = required;
    if (r_.chance(0.3))
      s["additionalProperties"] = false;
    else if (n == 0 && r_.chance(0.5))
      s["additionalProperties"] = value(0);
    return s;
  }

  OJ array(int depth) {
    OJ s = {{"type", "array"}};
    if (r_.chance(0.25)) {
      s["prefixItems"] = OJ::array({value(depth), value(0)});
      if (r_.chance(0.5)) s["items"] = false;
    } else if (r_.chance(0.9)) {
      s["items"] = value(depth);
    }
    if (r_.chance(0.5)) s["minItems"] = r_.pick(3);
    if (r_.chance(0.5)) s["maxItems"] = 2 + r_.pick(3);
    return s;
  }

  Random& r_;
  OJ defs_;
};

// Random code points from a pool that exercises escapes and multi-byte UTF-8.
std::string random_chars(Random& r, int n) {
  static const std::vector<std::string> pool = {"a",    "Z", "0", " ",  "\"", "\\",   "\n", "\t", "\x01",
                                                "\x1f", "/", "é", "漢", "😀",  "\x7f", "-",  "@"};
  std::string s;
  for (int i = 0; i < n; ++i) s += r.of(pool);
  return s;
}

// A random string matching the tree (code points from each class).
std::string match_of(const Ast& ast, NodeId id, Random& r) {
  const Node& n = ast[id];
  switch (n.kind) {
    case NodeKind::kEmpty:
      return {};
    case NodeKind::kChars: {
      const auto& rs = n.chars.ranges();
      const auto& range = rs[static_cast<size_t>(r.pick(static_cast<int>(rs.size())))];
      const uint32_t span = std::min<uint32_t>(range.hi - range.lo, 200);
      std::string out;
      utf8::append(out, range.lo + static_cast<char32_t>(r.pick(static_cast<int>(span) + 1)));
      return out;
    }
    case NodeKind::kConcat: {
      std::string out;
      for (NodeId item : n.items) out += match_of(ast, item, r);
      return out;
    }
    case NodeKind::kAlt:
      return match_of(ast, n.items[static_cast<size_t>(r.pick(static_cast<int>(n.items.size())))], r);
    case NodeKind::kRepeat: {
      const int count = n.min + r.pick((n.max == kUnbounded ? n.min + 3 : n.max) - n.min + 1);
      std::string out;
      for (int i = 0; i < count; ++i) out += match_of(ast, n.items[0], r);
      return out;
    }
    default:
      ADD_FAILURE() << "unexpected node";
      return {};
  }
}

class InstanceGen {
 public:
  InstanceGen(const OJ& root, Random& r, int any_depth) : root_(root), r_(r), any_depth_(any_depth) {}

  OJ value(const OJ& s) {
    if (s.is_boolean()) return any(any_depth_);
    if (s.contains("$ref")) return value(root_["$defs"][s["$ref"].get<std::string>().substr(8)]);
    if (s.contains("anyOf"))
      return value(s["anyOf"][static_cast<size_t>(r_.pick(static_cast<int>(s["anyOf"].size())))]);
    if (s.contains("oneOf"))
      return value(s["oneOf"][static_cast<size_t>(r_.pick(static_cast<int>(s["oneOf"].size())))]);
    if (s.contains("const")) return s["const"];
    if (s.contains("enum")) {
      std::vector<OJ> ok;
      for (const auto& v : s["enum"])
        if (!s.contains("type") || (s["type"] == "string") == v.is_string()) ok.push_back(v);
      return ok[static_cast<size_t>(r_.pick(static_cast<int>(ok.size())))];
    }
    if (!s.contains("type")) return any(any_depth_);
    std::string type;
    if (s["type"].is_array())
      type = s["type"][static_cast<size_t>(r_.pick(static_cast<int>(s["type"].size())))];
    else
      type = s["type"];
    if (type == "null") return nullptr;
    if (type == "boolean") return r_.chance(0.5);
    if (type == "integer") return static_cast<int64_t>(r_.pick(2000001)) - 1000000;
    if (type == "number") return r_.chance(0.5) ? OJ(r_.pick(100)) : OJ(r_.pick(100000) / 64.0 - 700.0);
    if (type == "string") return string(s);
    if (type == "array") return array(s);
    return object(s);
  }

 private:
  OJ any(int depth) {
    switch (r_.pick(depth > 0 ? 6 : 4)) {
      case 0:
        return random_chars(r_, r_.pick(4));
      case 1:
        return r_.pick(100);
      case 2:
        return r_.chance(0.5);
      case 3:
        return nullptr;
      case 4: {
        OJ o = OJ::object();
        for (int i = r_.pick(3); i > 0; --i) o[random_chars(r_, 1 + r_.pick(3))] = any(depth - 1);
        return o;
      }
      default: {
        OJ a = OJ::array();
        for (int i = r_.pick(3); i > 0; --i) a.push_back(any(depth - 1));
        return a;
      }
    }
  }

  OJ string(const OJ& s) {
    if (s.contains("pattern")) {
      Ast ast{CompileLimits{}};
      const NodeId root = parse_regex(ast, s["pattern"].get<std::string>());
      return match_of(ast, root, r_);
    }
    if (s.contains("format")) {
      const std::string f = s["format"];
      char buf[64];
      const int y = 1 + r_.pick(9999), m = 1 + r_.pick(12), d = 1 + r_.pick(28);
      if (f == "date") return (std::snprintf(buf, sizeof buf, "%04d-%02d-%02d", y, m, d), std::string(buf));
      if (f == "date-time") {
        std::snprintf(buf, sizeof buf, "%04d-%02d-%02dT%02d:%02d:%02d%s", y, m, d, r_.pick(24), r_.pick(60),
                      r_.pick(60), r_.of<std::string>({"Z", ".5Z", "+01:00", "-11:30", ".123456Z"}).c_str());
        return std::string(buf);
      }
      if (f == "uuid")
        return std::string("123e4567-e89b-12d3-A456-42661417400") + "0123456789abcdef"[r_.pick(16)];
      return r_.of<std::string>({"a@b.co", "first.last+tag@example.org", "x_y@sub.domain-1.net"});
    }
    const int min = s.value("minLength", 0);
    const int max = s.value("maxLength", min + 4);
    return random_chars(r_, min + r_.pick(max - min + 1));
  }

  OJ array(const OJ& s) {
    OJ a = OJ::array();
    const int prefix = s.contains("prefixItems") ? static_cast<int>(s["prefixItems"].size()) : 0;
    const bool more = !(s.contains("items") && s["items"].is_boolean() && !s["items"].get<bool>());
    const int min = s.value("minItems", 0);
    int max = s.value("maxItems", min + 3);
    if (!more) max = std::min(max, prefix);
    if (max < min) return nullptr;  // the schema admits no array
    const int len = min + r_.pick(max - min + 1);
    for (int i = 0; i < len; ++i) {
      if (i < prefix)
        a.push_back(value(s["prefixItems"][static_cast<size_t>(i)]));
      else if (s.contains("items"))
        a.push_back(value(s["items"]));
      else
        a.push_back(any(any_depth_ - 1));
    }
    return a;
  }

  OJ object(const OJ& s) {
    OJ o = OJ::object();
    const OJ props = s.value("properties", OJ::object());
    const OJ required = s.value("required", OJ::array());
    for (auto it = props.begin(); it != props.end(); ++it) {
      const bool req = std::find(required.begin(), required.end(), it.key()) != required.end();
      if (req || r_.chance(0.5)) o[it.key()] = value(it.value());
    }
    if (props.empty() && !(s.contains("additionalProperties") && s["additionalProperties"] == false)) {
      for (int i = r_.pick(3); i > 0; --i) {
        const std::string key = random_chars(r_, 1 + r_.pick(3));
        if (o.contains(key)) continue;
        o[key] = s.contains("additionalProperties") ? value(s["additionalProperties"]) : any(any_depth_ - 1);
      }
    }
    return o;
  }

  const OJ& root_;
  Random& r_;
  int any_depth_;
};

void mutate(OJ& v, Random& r) {
  if ((v.is_object() || v.is_array()) && !v.empty() && r.chance(0.7)) {
    const size_t i = static_cast<size_t>(r.pick(static_cast<int>(v.size())));
    if (v.is_object()) {
      auto it = v.begin();
      std::advance(it, static_cast<long>(i));
      if (r.chance(0.3))
        v.erase(it.key());
      else
        mutate(it.value(), r);
    } else if (r.chance(0.3)) {
      v.erase(i);
    } else {
      mutate(v[i], r);
    }
    return;
  }
  switch (r.pick(9)) {
    case 0:
      v = "x";
      break;
    case 1:
      v = 1.5;
      break;
    case 2:
      v = -3;
      break;
    case 3:
      v = nullptr;
      break;
    case 4:
      v = OJ::object();
      break;
    case 5:
      v = OJ::array({1});
      break;
    case 6:
      if (v.is_object())
        v["extra"] = 1;
      else
        v = true;
      break;
    case 7:
      if (v.is_string())
        v = v.get<std::string>() + "\n";
      else
        v = "";
      break;
    default:
      if (v.is_array())
        v.push_back(v.empty() ? OJ(0) : v[0]);
      else
        v = "2024-02-30";
      break;
  }
}

TEST(GuidedJsonSchemaProperty, RandomSchemasAreSoundAndCompleteForTheTextForm) {
  Random r(20240601);
  const CompileLimits limits;
  int schemas = 0, accepted_samples = 0, valid_instances = 0, rejected_mutants = 0;
  for (int iter = 0; iter < 300; ++iter) {
    const OJ schema = SchemaGen(r).root();
    const std::string text = schema.dump();
    Dfa dfa;
    try {
      dfa = test::schema_dfa(text, limits);
    } catch (const Error& e) {
      // Only an empty language (e.g. minItems past a closed prefix) may fail.
      ASSERT_NE(std::string(e.what()).find("admits no value"), std::string::npos) << text << ": " << e.what();
      continue;
    }
    ++schemas;
    const test::SchemaOracle oracle(schema);
    auto check_sound = [&](const std::string& t) {
      ASSERT_TRUE(utf8::is_valid(t)) << text << "\n" << t;
      OJ parsed;
      ASSERT_NO_THROW(parsed = OJ::parse(t)) << text << "\n" << t;
      ASSERT_TRUE(oracle.valid(parsed)) << "accepted but invalid\nschema: " << text << "\ntext: " << t;
    };
    for (int i = 0; i < 20; ++i) {
      const std::string t = test::sample(dfa, r.rng, 0.1, 200);
      check_sound(t);
      ++accepted_samples;
    }
    InstanceGen gen(schema, r, limits.any_value_depth);
    for (int i = 0; i < 20; ++i) {
      OJ instance = gen.value(schema);
      if (!oracle.valid(instance)) continue;  // a generator shortcut (e.g. an array the bounds forbid)
      ++valid_instances;
      const std::string t = test::dumps(instance);
      ASSERT_TRUE(accepts(dfa, t)) << "valid but rejected\nschema: " << text << "\ntext: " << t;
      for (int m = 0; m < 3; ++m) {
        OJ mutant = instance;
        mutate(mutant, r);
        const std::string mt = test::dumps(mutant);
        if (accepts(dfa, mt))
          check_sound(mt);
        else
          ++rejected_mutants;
      }
    }
  }
  EXPECT_GT(schemas, 250);
  EXPECT_GT(valid_instances, 4000);
  EXPECT_GT(rejected_mutants, 5000);
  std::printf("schemas %d, sampled texts %d, valid instances %d, rejected mutants %d\n", schemas,
              accepted_samples, valid_instances, rejected_mutants);
}

}  // namespace
}  // namespace dgemma::guided
