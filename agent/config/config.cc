#include "agent/config/config.h"

#include <sys/stat.h>

#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <set>
#include <sstream>
#include <variant>

// Errors as values: toml++ reports parse failures through parse_result, not exceptions.
#define TOML_EXCEPTIONS 0
#include <toml++/toml.h>

#include "agent/config/environment.h"
#include "compress/registry.h"
#include "common/str_cat.h"
#include "transport/transport.h"

namespace gcagent::agent {
namespace {

using Value = std::variant<std::string, int64_t, double, bool, std::vector<std::string>>;

constexpr ValueType typeOf(std::string_view t) {
  return t == "Text"      ? ValueType::kText
         : t == "Integer" ? ValueType::kInteger
         : t == "Real"    ? ValueType::kReal
         : t == "Flag"    ? ValueType::kFlag
                          : ValueType::kTextList;
}

using Setter = void (*)(Config&, const Value&);
using Getter = Value (*)(const Config&);

const std::vector<Setter>& setters() {
#define GCAGENT_SETTER(section, key, type, ...) \
  [](Config& c, const Value& v) { c.section##_##key = std::get<config_types::type>(v); },
  static const std::vector<Setter> s = {GCAGENT_CONFIG_KEYS(GCAGENT_SETTER)};
#undef GCAGENT_SETTER
  return s;
}

const std::vector<Getter>& getters() {
#define GCAGENT_GETTER(section, key, type, ...) [](const Config& c) { return Value(c.section##_##key); },
  static const std::vector<Getter> g = {GCAGENT_CONFIG_KEYS(GCAGENT_GETTER)};
#undef GCAGENT_GETTER
  return g;
}

std::string_view typeName(ValueType t) {
  switch (t) {
    case ValueType::kText: return "string";
    case ValueType::kInteger: return "integer";
    case ValueType::kReal: return "number";
    case ValueType::kFlag: return "boolean";
    case ValueType::kTextList: return "list of strings";
  }
  return "?";
}

std::string withArticle(std::string noun) {
  return (std::string_view("aeiou").find(noun.empty() ? 'x' : noun[0]) != std::string_view::npos ? "an " : "a ") + noun;
}

std::string formatValue(const Value& v) {
  struct Visitor {
    std::string operator()(const std::string& s) const { return strCat('"', s, '"'); }
    std::string operator()(int64_t i) const { return std::to_string(i); }
    std::string operator()(double d) const { return strCat(d); }
    std::string operator()(bool b) const { return b ? "true" : "false"; }
    std::string operator()(const std::vector<std::string>& list) const {
      std::string out = "[";
      for (size_t i = 0; i < list.size(); ++i) out += strCat(i ? ", " : "", '"', list[i], '"');
      return out + "]";
    }
  };
  return std::visit(Visitor{}, v);
}

// Range and choice checks shared by every source; `where` prefixes the message.
Status checkValue(const KeySpec& spec, const Value& v, std::string_view where) {
  auto fail = [&](std::string why) {
    return Status::outOfRange(strCat(where, ": ", spec.name(), ": ", why));
  };
  if (spec.type == ValueType::kInteger || spec.type == ValueType::kReal) {
    double x = spec.type == ValueType::kInteger ? static_cast<double>(std::get<int64_t>(v)) : std::get<double>(v);
    if (!(x >= spec.lo && x <= spec.hi))
      return fail(strCat(formatValue(v), " is outside [", spec.lo, ", ", spec.hi, "]"));
  }
  if (spec.type == ValueType::kText && !spec.choices.empty()) {
    const std::string& s = std::get<std::string>(v);
    std::string_view rest = spec.choices;
    while (true) {
      size_t bar = rest.find('|');
      if (rest.substr(0, bar) == s) return {};
      if (bar == std::string_view::npos) break;
      rest.remove_prefix(bar + 1);
    }
    return fail(strCat('"', s, "\" is not one of ", spec.choices));
  }
  return {};
}

// Text from an environment variable, a flag, or a default.
Result<Value> parseText(const KeySpec& spec, const std::string& text, std::string_view where) {
  auto bad = [&]() -> Status {
    return Status::invalidArgument(
        strCat(where, ": ", spec.name(), ": '", text, "' is not ", withArticle(std::string(typeName(spec.type)))));
  };
  Value v;
  switch (spec.type) {
    case ValueType::kText: v = text; break;
    case ValueType::kInteger: {
      errno = 0;
      char* end = nullptr;
      long long i = std::strtoll(text.c_str(), &end, 10);
      if (text.empty() || *end != '\0' || errno == ERANGE) return bad();
      v = static_cast<int64_t>(i);
      break;
    }
    case ValueType::kReal: {
      errno = 0;
      char* end = nullptr;
      double d = std::strtod(text.c_str(), &end);
      if (text.empty() || *end != '\0' || errno == ERANGE || !std::isfinite(d)) return bad();
      v = d;
      break;
    }
    case ValueType::kFlag:
      if (text == "true" || text == "1") v = true;
      else if (text == "false" || text == "0") v = false;
      else return bad();
      break;
    case ValueType::kTextList: {
      std::vector<std::string> list;
      std::stringstream in(text);
      std::string item;
      while (std::getline(in, item, ',')) {
        size_t b = item.find_first_not_of(" \t"), e = item.find_last_not_of(" \t");
        if (b != std::string::npos) list.push_back(item.substr(b, e - b + 1));
      }
      v = std::move(list);
      break;
    }
  }
  GC_RETURN_IF_ERROR(checkValue(spec, v, where));
  return v;
}

std::string locate(const std::string& path, const toml::source_region& src) {
  return strCat(path.empty() ? "<config>" : path, ":", src.begin.line, ":", src.begin.column);
}

Result<Value> fromToml(const KeySpec& spec, const toml::node& node, const std::string& path) {
  const std::string where = locate(path, node.source());
  auto wrong = [&]() -> Status {
    return Status::invalidArgument(strCat(where, ": ", spec.name(), ": expected ", withArticle(std::string(typeName(spec.type))),
                                          ", got ", withArticle(strCat(node.type()))));
  };
  Value v;
  switch (spec.type) {
    case ValueType::kText:
      if (!node.is_string()) return wrong();
      v = std::string(*node.value<std::string_view>());
      break;
    case ValueType::kInteger:
      if (!node.is_integer()) return wrong();
      v = *node.value<int64_t>();
      break;
    case ValueType::kReal:
      if (!node.is_number()) return wrong();
      v = *node.value<double>();
      break;
    case ValueType::kFlag:
      if (!node.is_boolean()) return wrong();
      v = *node.value<bool>();
      break;
    case ValueType::kTextList: {
      const toml::array* array = node.as_array();
      if (array == nullptr) return wrong();
      std::vector<std::string> list;
      for (const auto& item : *array) {
        if (!item.is_string())
          return Status::invalidArgument(strCat(locate(path, item.source()), ": ",
                                                spec.name(), ": every item must be a string"));
        list.emplace_back(*item.value<std::string_view>());
      }
      v = std::move(list);
      break;
    }
  }
  GC_RETURN_IF_ERROR(checkValue(spec, v, where));
  return v;
}

const KeySpec* findKey(std::string_view section, std::string_view key) {
  for (const auto& spec : configKeys())
    if (spec.section == section && spec.key == key) return &spec;
  return nullptr;
}

size_t indexOf(const KeySpec* spec) { return static_cast<size_t>(spec - configKeys().data()); }

std::string keysOf(std::string_view section) {
  std::string out;
  for (const auto& spec : configKeys())
    if (section.empty() ? out.find(spec.section) == std::string::npos : spec.section == section)
      out += strCat(out.empty() ? "" : ", ", section.empty() ? spec.section : spec.key);
  return out;
}

// toml++ 3.3.0 reaches __builtin_unreachable (undefined behaviour) when it tests some
// code points for whitespace: its generated table has no case for U+00A1..U+0499,
// U+2C4E..U+3047 (but U+3000) and U+FB36..U+FEFE. The config fuzzer found it. Such text is
// refused before parsing.
bool tomlMishandles(uint32_t cp) {
  return (cp >= 0xA1 && cp <= 0x499) || (cp >= 0x2C4E && cp <= 0x3047 && cp != 0x3000) ||
         (cp >= 0xFB36 && cp <= 0xFEFE);
}

Status refuseUnparsableCharacters(std::string_view text, const std::string& path) {
  uint64_t line = 1, column = 1;
  for (size_t i = 0; i < text.size(); ++i) {
    const auto b = static_cast<unsigned char>(text[i]);
    if (b == '\n') {
      ++line;
      column = 1;
      continue;
    }
    if ((b & 0xC0) == 0x80) continue;  // a continuation byte: same character
    const size_t length = (b & 0xE0) == 0xC0 ? 2 : (b & 0xF0) == 0xE0 ? 3 : 1;
    if (length > 1 && i + length <= text.size()) {
      uint32_t cp = b & (length == 2 ? 0x1Fu : 0x0Fu);
      bool valid = true;
      for (size_t k = 1; k < length; ++k) {
        const auto c = static_cast<unsigned char>(text[i + k]);
        valid &= (c & 0xC0) == 0x80;
        cp = (cp << 6) | (c & 0x3Fu);
      }
      if (valid && tomlMishandles(cp)) {
        char name[8];
        std::snprintf(name, sizeof name, "U+%04X", static_cast<unsigned>(cp));
        return Status::invalidArgument(strCat(path, ":", line, ":", column, ": the character ", name,
                                              " is not supported in the configuration (the TOML parser mishandles it)"));
      }
    }
    ++column;
  }
  return {};
}

// A regular file of bounded size: a directory, a device (/dev/zero) or a huge file is an
// error before anything is read.
Result<std::string> readConfigFile(const std::string& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0)
    return Status::notFound(strCat(path, ": cannot open the configuration file: ", std::strerror(errno)));
  if (!S_ISREG(st.st_mode)) return Status::invalidArgument(strCat(path, ": the configuration is not a regular file"));
  if (static_cast<uint64_t>(st.st_size) > kMaxConfigFileBytes)
    return Status::invalidArgument(strCat(path, ": the configuration file has ", st.st_size, " bytes, more than the ",
                                          kMaxConfigFileBytes, " allowed"));
  std::ifstream file(path, std::ios::binary);
  if (!file) return Status::notFound(strCat(path, ": cannot open the configuration file"));
  std::string text(kMaxConfigFileBytes + 1, '\0');
  file.read(text.data(), static_cast<std::streamsize>(text.size()));
  text.resize(static_cast<size_t>(file.gcount()));
  if (text.size() > kMaxConfigFileBytes)  // grew since stat
    return Status::invalidArgument(strCat(path, ": the configuration file has more than ", kMaxConfigFileBytes,
                                          " bytes"));
  return text;
}

// toml++ recurses once per dotted-key part and per nested table or array: a line deeper
// than kMaxConfigNesting is refused before it parses (no configuration needs more than 3).
// Counts '.', '[' and '{' outside quoted strings.
Status refuseDeepNesting(std::string_view text, const std::string& path) {
  size_t line = 1, depth = 0;
  char quote = 0;
  for (size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (c == '\n') {
      ++line;
      depth = 0;
      quote = 0;  // a string ends with its line (multi-line strings are not configuration)
      continue;
    }
    if (quote != 0) {
      if (c == '\\' && quote == '"') ++i;
      else if (c == quote) quote = 0;
      continue;
    }
    if (c == '#') {
      while (i + 1 < text.size() && text[i + 1] != '\n') ++i;
    } else if (c == '"' || c == '\'') {
      quote = c;
    } else if ((c == '.' || c == '[' || c == '{') && ++depth > kMaxConfigNesting) {
      return Status::invalidArgument(strCat(path, ":", line, ": more than ", kMaxConfigNesting,
                                            " dotted-key parts or nested tables and arrays"));
    }
  }
  return {};
}

Status applyFile(const ConfigInputs& in, LoadedConfig& out) {
  std::string text;
  if (in.file_text) {
    text = *in.file_text;
  } else {
    GC_ASSIGN_OR_RETURN(text, readConfigFile(in.file_path));
  }
  GC_RETURN_IF_ERROR(refuseUnparsableCharacters(text, in.file_path));
  GC_RETURN_IF_ERROR(refuseDeepNesting(text, in.file_path));
  toml::parse_result parsed = toml::parse(std::string_view(text), std::string_view(in.file_path));
  if (!parsed) {
    const auto& err = parsed.error();
    return Status::invalidArgument(strCat(locate(in.file_path, err.source()), ": ", err.description()));
  }
  for (const auto& [section_name, section_node] : parsed.table()) {
    const std::string where = locate(in.file_path, section_node.source());
    const toml::table* section = section_node.as_table();
    if (section == nullptr)
      return Status::invalidArgument(strCat(where, ": '", section_name.str(),
                                            "' must be inside a section such as [agent]"));
    if (keysOf(section_name.str()).empty())
      return Status::invalidArgument(strCat(where, ": unknown section [", section_name.str(),
                                            "] (known: ", keysOf(""), ")"));
    for (const auto& [key_name, node] : *section) {
      const std::string at = locate(in.file_path, node.source());
      const KeySpec* spec = findKey(section_name.str(), key_name.str());
      if (spec == nullptr)
        return Status::invalidArgument(strCat(locate(in.file_path, key_name.source()), ": unknown key '", section_name.str(), ".", key_name.str(),
                                              "' (known in [", section_name.str(), "]: ",
                                              keysOf(section_name.str()), ")"));
      GC_ASSIGN_OR_RETURN(Value v, fromToml(*spec, node, in.file_path));
      setters()[indexOf(spec)](out.config, v);
      out.origins[indexOf(spec)] = {Source::kFile, at};
    }
  }
  return {};
}

// What a range cannot say: addresses that parse, a socket path that fits. Each error names
// the key and where its value came from.
Status checkUsable(const LoadedConfig& loaded) {
  auto fail = [&](std::string_view section, std::string_view key, const std::string& why) {
    const Origin& origin = loaded.origins[indexOf(findKey(section, key))];
    return Status::invalidArgument(strCat(section, ".", key, " (", origin.where.empty() ? "default" : origin.where,
                                          "): ", why));
  };
  auto checkAddress = [&](std::string_view section, std::string_view key, const std::string& address) -> Status {
    auto split = transport::splitHostPort(address);
    if (!split.ok()) return fail(section, key, split.status().message());
    if (split->first.empty()) return fail(section, key, strCat("address '", address, "': no host"));
    return {};
  };
  const Config& c = loaded.config;
  GC_RETURN_IF_ERROR(checkAddress("transport", "listen", c.transport_listen));
  if (!c.metrics_listen.empty()) GC_RETURN_IF_ERROR(checkAddress("metrics", "listen", c.metrics_listen));
  for (const std::string& peer : c.transport_peers) GC_RETURN_IF_ERROR(checkAddress("transport", "peers", peer));
  if (!c.transport_data_ports.empty()) {
    unsigned first = 0, last = 0;
    char tail = 0;
    if (std::sscanf(c.transport_data_ports.c_str(), "%u-%u%c", &first, &last, &tail) != 2 || first == 0 ||
        first > last || last > 65535)
      return fail("transport", "data_ports", strCat("'", c.transport_data_ports, "' is not a port range first-last"));
  }
  if (c.agent_socket.empty()) return fail("agent", "socket", "empty");
  if (c.agent_socket.size() > kMaxSocketPathBytes)
    return fail("agent", "socket", strCat("'", c.agent_socket, "' has ", c.agent_socket.size(), " bytes, more than the ",
                                          kMaxSocketPathBytes, " a Unix socket path can hold"));
  // The default codec with its parameters and the result codec build now, so a typo fails at
  // load naming where it came from, not at the first gradient.
  auto params = parseCodecParams(c.compress_params);
  if (!params.ok()) return fail("compress", "params", params.status().message());
  if (auto made = compress::makeCodec(c.compress_codec, *params); !made.ok())
    return made.status().code() == StatusCode::kNotFound ? fail("compress", "codec", made.status().message())
                                                          : fail("compress", "params", made.status().message());
  if (c.compress_result_codec != "same")
    if (auto made = compress::makeCodec(c.compress_result_codec); !made.ok())
      return fail("compress", "result_codec", made.status().message());
  return {};
}

}  // namespace

Result<compress::Params> parseCodecParams(const std::vector<std::string>& items) {
  compress::Params params;
  for (const std::string& item : items) {
    const size_t eq = item.find('=');
    if (eq == std::string::npos || eq == 0) return Status::invalidArgument(strCat("'", item, "' is not key=value"));
    params[item.substr(0, eq)] = item.substr(eq + 1);
  }
  return params;
}

std::string KeySpec::name() const { return strCat(section, ".", key); }

std::string KeySpec::envName() const {
  std::string out = "GCAGENT_";
  for (char c : strCat(section, "_", key)) out += static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  return out;
}

const std::vector<KeySpec>& configKeys() {
#define GCAGENT_SPEC(section, key, type, def, lo, hi, choices, help) \
  KeySpec{#section, #key, typeOf(#type), def, static_cast<double>(lo), static_cast<double>(hi), choices, help},
  static const std::vector<KeySpec> keys = {GCAGENT_CONFIG_KEYS(GCAGENT_SPEC)};
#undef GCAGENT_SPEC
  return keys;
}

Result<LoadedConfig> loadConfig(const ConfigInputs& in) {
  const auto& keys = configKeys();
  LoadedConfig out;
  out.origins.resize(keys.size());
  for (size_t i = 0; i < keys.size(); ++i) {
    auto v = parseText(keys[i], std::string(keys[i].default_text), "default");
    if (!v.ok()) return Status::internal(v.status().message());
    setters()[i](out.config, *v);
  }
  if (!in.file_path.empty() || in.file_text) GC_RETURN_IF_ERROR(applyFile(in, out));
  {
    std::vector<std::string> config_names;
    for (const KeySpec& k : keys) config_names.push_back(k.envName());
    GC_RETURN_IF_ERROR(checkGcagentVariables(in.environment_names, config_names));
  }
  if (in.getenv) {
    for (size_t i = 0; i < keys.size(); ++i) {
      const std::string var = keys[i].envName();
      const char* text = in.getenv(var.c_str());
      if (text == nullptr) continue;
      GC_ASSIGN_OR_RETURN(Value v, parseText(keys[i], text, var));
      setters()[i](out.config, v);
      out.origins[i] = {Source::kEnv, var};
    }
  }
  for (const std::string& flag : in.overrides) {
    const size_t eq = flag.find('='), dot = flag.find('.');
    if (eq == std::string::npos || dot == std::string::npos || dot > eq)
      return Status::invalidArgument(strCat("--", flag, ": expected --section.key=value"));
    const std::string where = strCat("--", flag.substr(0, eq));
    const KeySpec* spec = findKey(std::string_view(flag).substr(0, dot),
                                  std::string_view(flag).substr(dot + 1, eq - dot - 1));
    if (spec == nullptr) return Status::invalidArgument(strCat(where, ": unknown key"));
    GC_ASSIGN_OR_RETURN(Value v, parseText(*spec, flag.substr(eq + 1), where));
    setters()[indexOf(spec)](out.config, v);
    out.origins[indexOf(spec)] = {Source::kCli, where};
  }
  GC_RETURN_IF_ERROR(checkUsable(out));
  return out;
}

std::string printConfig(const LoadedConfig& loaded) {
  static constexpr std::string_view kSourceNames[] = {"default", "file", "env", "cli"};
  std::string out;
  const auto& keys = configKeys();
  for (size_t i = 0; i < keys.size(); ++i) {
    const Origin& o = loaded.origins[i];
    out += strCat(keys[i].name(), " = ", formatValue(getters()[i](loaded.config)), "\n    source: ",
                  kSourceNames[static_cast<int>(o.source)], o.where.empty() ? "" : " ", o.where,
                  "; default: ", keys[i].default_text.empty() ? "(empty)" : keys[i].default_text,
                  "; env: ", keys[i].envName(), "\n    ", keys[i].help, "\n");
  }
  return out;
}

std::string configReferenceMarkdown() {
  std::string out = "| key | type | default | range | environment | meaning |\n|---|---|---|---|---|---|\n";
  for (const auto& k : configKeys()) {
    std::string range;
    if (k.type == ValueType::kInteger || k.type == ValueType::kReal) range = strCat("[", k.lo, ", ", k.hi, "]");
    // A bare | would end the table cell.
    for (const char c : k.choices) range += c == '|' ? std::string("\\|") : std::string(1, c);
    const std::string default_cell = k.default_text.empty() ? "(empty)" : strCat("`", k.default_text, "`");
    out += strCat("| `", k.name(), "` | ", typeName(k.type), " | ", default_cell, " | ", range, " | `",
                  k.envName(), "` | ", k.help, " |\n");
  }
  return out;
}

}  // namespace gcagent::agent
