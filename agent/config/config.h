// The agent's configuration: defaults, then a TOML file, then GCAGENT_<SECTION>_<KEY>
// environment variables, then --section.key=value flags, each later source overriding the
// earlier ones. Every value is type- and range-checked, and an error names where the bad
// value came from (file:line:column, the variable, or the flag).
#pragma once

#include <array>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "agent/config/config_keys.h"
#include "common/status.h"
#include "compress/codec.h"

namespace gcagent::agent {

namespace config_types {
using Text = std::string;
using Integer = int64_t;
using Real = double;
using Flag = bool;
using TextList = std::vector<std::string>;
}  // namespace config_types

// One member per key, named section_key: config.scheduler_slice_elements.
struct Config {
#define GCAGENT_CONFIG_MEMBER(section, key, type, ...) config_types::type section##_##key{};
  GCAGENT_CONFIG_KEYS(GCAGENT_CONFIG_MEMBER)
#undef GCAGENT_CONFIG_MEMBER
};

enum class ValueType { kText, kInteger, kReal, kFlag, kTextList };

struct KeySpec {
  std::string_view section;
  std::string_view key;
  ValueType type;
  std::string_view default_text;
  double lo;
  double hi;
  std::string_view choices;  // "a|b"; empty: any
  std::string_view help;

  std::string name() const;     // "scheduler.slice_elements"
  std::string envName() const;  // "GCAGENT_SCHEDULER_SLICE_ELEMENTS"
};

const std::vector<KeySpec>& configKeys();

enum class Source { kDefault, kFile, kEnv, kCli };

struct Origin {
  Source source = Source::kDefault;
  std::string where;  // "gcagent.toml:3:14", "GCAGENT_X", "--x"; empty for defaults
};

struct LoadedConfig {
  Config config;
  std::vector<Origin> origins;  // parallel to configKeys()
};

struct ConfigInputs {
  std::string file_path;                              // empty: no file
  std::optional<std::string> file_text;               // tests: parse this instead of reading the file
  std::function<const char*(const char*)> getenv;     // null: no environment overrides
  std::vector<std::string> environment_names;         // every variable's name: GCAGENT_* ones are checked
  std::vector<std::string> overrides;                 // "section.key=value", from the CLI
};

// A Unix socket path holds 108 bytes with its NUL (sockaddr_un::sun_path on Linux).
inline constexpr size_t kMaxSocketPathBytes = 107;
// The configuration file: a regular file of at most this size, no line nested or dotted
// deeper than kMaxConfigNesting (toml++ recurses once per level).
inline constexpr size_t kMaxConfigFileBytes = 1 << 20;
inline constexpr size_t kMaxConfigNesting = 64;

// Reads, parses and checks: every value in its range, and the addresses (host:port with a
// port in [0, 65535]) and the socket path usable, each error naming the key and its origin.
Result<LoadedConfig> loadConfig(const ConfigInputs& inputs);

// compress.params' items ("key=value") as a codec's parameters.
Result<compress::Params> parseCodecParams(const std::vector<std::string>& items);

// Every key: its value, where it came from, its default and its help.
std::string printConfig(const LoadedConfig& loaded);

// The configuration reference (markdown table) generated from the key list.
std::string configReferenceMarkdown();

}  // namespace gcagent::agent
