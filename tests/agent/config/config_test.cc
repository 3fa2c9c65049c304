#include "agent/config/config.h"
#include "agent/config/environment.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <string>

namespace gcagent::agent {
namespace {

ConfigInputs fromText(std::string text) {
  ConfigInputs in;
  in.file_path = "gcagent.toml";
  in.file_text = std::move(text);
  return in;
}

std::string errorOf(const ConfigInputs& in) {
  auto loaded = loadConfig(in);
  EXPECT_FALSE(loaded.ok());
  return loaded.ok() ? "" : loaded.status().message();
}

TEST(ConfigTest, DefaultsComeFromTheKeyTable) {
  auto loaded = loadConfig({});
  ASSERT_TRUE(loaded.ok()) << loaded.status().toString();
  const Config& c = loaded->config;
  EXPECT_EQ(c.scheduler_slice_elements, 40000);
  EXPECT_EQ(c.scheduler_inflight_per_peer, 10);
  EXPECT_EQ(c.transport_backend, "ucx");
  EXPECT_DOUBLE_EQ(c.transport_peer_timeout, 10.0);
  EXPECT_TRUE(c.transport_peers.empty());
  for (const auto& o : loaded->origins) EXPECT_EQ(o.source, Source::kDefault);
}

TEST(ConfigTest, FileValuesOverrideDefaults) {
  auto loaded = loadConfig(fromText(R"(
[scheduler]
slice_elements = 1024
[transport]
peers = ["10.0.0.1:18515", "10.0.0.2:18515"]
peer_timeout = 2       # an integer is accepted where a number is expected
)"));
  ASSERT_TRUE(loaded.ok()) << loaded.status().toString();
  EXPECT_EQ(loaded->config.scheduler_slice_elements, 1024);
  EXPECT_EQ(loaded->config.transport_peers, (std::vector<std::string>{"10.0.0.1:18515", "10.0.0.2:18515"}));
  EXPECT_DOUBLE_EQ(loaded->config.transport_peer_timeout, 2.0);
  size_t i = 0;
  while (configKeys()[i].name() != "scheduler.slice_elements") ++i;
  EXPECT_EQ(loaded->origins[i].source, Source::kFile);
  EXPECT_EQ(loaded->origins[i].where, "gcagent.toml:3:18");
}

TEST(ConfigTest, EnvironmentOverridesFileAndFlagsOverrideEnvironment) {
  std::map<std::string, std::string> env = {{"GCAGENT_SCHEDULER_SLICE_ELEMENTS", "2048"},
                                            {"GCAGENT_COMPRESS_CODEC", "2bit"},
                                            {"GCAGENT_TRANSPORT_PEERS", "a:1, b:2"}};
  ConfigInputs in = fromText("[scheduler]\nslice_elements = 1024\n");
  in.getenv = [&](const char* name) -> const char* {
    auto it = env.find(name);
    return it == env.end() ? nullptr : it->second.c_str();
  };
  in.overrides = {"compress.codec=dgc"};
  auto loaded = loadConfig(in);
  ASSERT_TRUE(loaded.ok()) << loaded.status().toString();
  EXPECT_EQ(loaded->config.scheduler_slice_elements, 2048);
  EXPECT_EQ(loaded->config.compress_codec, "dgc");
  EXPECT_EQ(loaded->config.transport_peers, (std::vector<std::string>{"a:1", "b:2"}));
  std::string printed = printConfig(*loaded);
  EXPECT_NE(printed.find("scheduler.slice_elements = 2048\n    source: env GCAGENT_SCHEDULER_SLICE_ELEMENTS; "
                         "default: 40000"),
            std::string::npos)
      << printed;
  EXPECT_NE(printed.find("compress.codec = \"dgc\"\n    source: cli --compress.codec"), std::string::npos) << printed;
}

TEST(ConfigTest, ErrorsNameFileLineAndColumn) {
  EXPECT_EQ(errorOf(fromText("[scheduler]\nslice_elements = \"big\"\n")),
            "gcagent.toml:2:18: scheduler.slice_elements: expected an integer, got a string");
  EXPECT_EQ(errorOf(fromText("[scheduler]\nslice_elements = 12\n")),
            "gcagent.toml:2:18: scheduler.slice_elements: 12 is outside [1024, 6.71089e+07]");
  EXPECT_EQ(errorOf(fromText("[scheduler]\n\nslce_elements = 4096\n")),
            "gcagent.toml:3:1: unknown key 'scheduler.slce_elements' (known in [scheduler]: slice_elements, "
            "inflight_per_peer, inflight_bytes, priority, topology, link_gbps, refit_interval)");
  EXPECT_EQ(errorOf(fromText("[sched]\nx = 1\n")),
            "gcagent.toml:1:1: unknown section [sched] (known: agent, transport, scheduler, compress, metrics, "
            "security, testing)");
  EXPECT_EQ(errorOf(fromText("[transport]\nbackend = \"tcp\"\n")),
            "gcagent.toml:2:11: transport.backend: \"tcp\" is not one of ucx|loopback");
  EXPECT_EQ(errorOf(fromText("[transport]\npeers = [\"a:1\", 2]\n")),
            "gcagent.toml:2:17: transport.peers: every item must be a string");
  EXPECT_EQ(errorOf(fromText("slice_elements = 4\n")),
            "gcagent.toml:1:18: 'slice_elements' must be inside a section such as [agent]");
  std::string syntax = errorOf(fromText("[scheduler\n"));
  EXPECT_EQ(syntax.rfind("gcagent.toml:1:", 0), 0u) << syntax;
}

// Found by tests/fuzz/config_loader: toml++ 3.3.0 has undefined behaviour on these.
TEST(ConfigTest, CharactersTheTomlParserMishandlesAreRefused) {
  const std::string tail = " is not supported in the configuration (the TOML parser mishandles it)";
  EXPECT_EQ(errorOf(fromText("[agent]\n# caf\xc3\xa9\n")), "gcagent.toml:2:6: the character U+00E9" + tail);
  EXPECT_EQ(errorOf(fromText("[ag\xd1\x8d]\n")), "gcagent.toml:1:4: the character U+044D" + tail);
  EXPECT_EQ(errorOf(fromText("[agent]\n\xe3\x80\x81\n")), "gcagent.toml:2:1: the character U+3001" + tail);
  EXPECT_EQ(errorOf(fromText("[agent] # \xef\xbb\xbb\n")), "gcagent.toml:1:11: the character U+FEFB" + tail);
  // Just outside the bands, and the byte-order mark, still parse.
  auto ok = loadConfig(fromText("\xef\xbb\xbf[agent] # \xef\xac\xb5 \xd4\x9a \xe3\x80\x80\nshm_prefix = \"p\"\n"));
  EXPECT_TRUE(ok.ok()) << ok.status().toString();
}

TEST(ConfigTest, BadOverridesNameTheirSource) {
  ConfigInputs in;
  in.getenv = [](const char* name) -> const char* {
    return std::string(name) == "GCAGENT_TRANSPORT_PEER_TIMEOUT" ? "soon" : nullptr;
  };
  EXPECT_EQ(errorOf(in), "GCAGENT_TRANSPORT_PEER_TIMEOUT: transport.peer_timeout: 'soon' is not a number");
  ConfigInputs flags;
  flags.overrides = {"scheduler.inflight_per_peer=0"};
  EXPECT_EQ(errorOf(flags), "--scheduler.inflight_per_peer: scheduler.inflight_per_peer: 0 is outside [1, 4096]");
  flags.overrides = {"scheduler.link_gbps=0"};
  EXPECT_EQ(errorOf(flags), "--scheduler.link_gbps: scheduler.link_gbps: 0 is outside [0.001, 100000]");
  flags.overrides = {"scheduler.nope=1"};
  EXPECT_EQ(errorOf(flags), "--scheduler.nope: unknown key");
  flags.overrides = {"slice_elements"};
  EXPECT_EQ(errorOf(flags), "--slice_elements: expected --section.key=value");
}

TEST(ConfigTest, MissingFileIsReported) {
  ConfigInputs in;
  in.file_path = "/nonexistent/gcagent.toml";
  auto loaded = loadConfig(in);
  ASSERT_FALSE(loaded.ok());
  EXPECT_EQ(loaded.status().message(),
            "/nonexistent/gcagent.toml: cannot open the configuration file: No such file or directory");
}

ConfigInputs fromFile(const std::string& path) {
  ConfigInputs in;
  in.file_path = path;
  return in;
}

TEST(ConfigTest, OnlyARegularFileOfBoundedSizeIsRead) {
  EXPECT_EQ(errorOf(fromFile("/dev/zero")), "/dev/zero: the configuration is not a regular file");
  const std::string dir = ::testing::TempDir();
  EXPECT_EQ(errorOf(fromFile(dir)), dir + ": the configuration is not a regular file");
  const std::string big = dir + "/gcagent-big.toml";
  {
    std::ofstream out(big);
    out << "[agent]\n" << std::string(kMaxConfigFileBytes, '#') << "\n";
  }
  EXPECT_EQ(errorOf(fromFile(big)), big + ": the configuration file has 1048585 bytes, more than the 1048576 allowed");
  std::filesystem::remove(big);
}

TEST(ConfigTest, DeepNestingIsRefusedBeforeTheParserRecurses) {
  std::string dotted = "[agent]\n" + std::string("a");
  for (int i = 0; i < 200000; ++i) dotted += ".a";
  EXPECT_EQ(errorOf(fromText(dotted + " = 1\n")),
            "gcagent.toml:2: more than 64 dotted-key parts or nested tables and arrays");
  EXPECT_EQ(errorOf(fromText("[agent]\nx = " + std::string(100000, '[') + "\n")),
            "gcagent.toml:2: more than 64 dotted-key parts or nested tables and arrays");
  EXPECT_EQ(errorOf(fromText("[agent]\nx = " + std::string(100000, '{') + "\n")),
            "gcagent.toml:2: more than 64 dotted-key parts or nested tables and arrays");
  // Dots in strings and comments are not nesting.
  auto loaded = loadConfig(fromText("[agent]  # " + std::string(200, '.') + "\nsocket = \"/run/" +
                                    std::string(80, '.') + "\"\n"));
  ASSERT_TRUE(loaded.ok()) << loaded.status().message();
}

TEST(ConfigTest, AddressesAndTheSocketPathMustBeUsable) {
  EXPECT_EQ(errorOf(fromText("[metrics]\nlisten = \"127.0.0.1:99999\"\n")),
            "metrics.listen (gcagent.toml:2:10): address '127.0.0.1:99999': port '99999' is not in [0, 65535]");
  EXPECT_EQ(errorOf(fromText("[transport]\nlisten = \"18515\"\n")),
            "transport.listen (gcagent.toml:2:10): address '18515': expected host:port");
  EXPECT_EQ(errorOf(fromText("[transport]\npeers = [\"a:1\", \":2\"]\n")),
            "transport.peers (gcagent.toml:2:9): address ':2': expected host:port");
  const std::string long_path = "/run/" + std::string(110, 's');
  ConfigInputs flags;
  flags.overrides = {"agent.socket=" + long_path};
  EXPECT_EQ(errorOf(flags), "agent.socket (--agent.socket): '" + long_path +
                                "' has 115 bytes, more than the 107 a Unix socket path can hold");
  flags.overrides = {"agent.socket=/run/" + std::string(102, 's')};  // 107 bytes: fits
  EXPECT_TRUE(loadConfig(flags).ok());
  flags.overrides = {"metrics.listen="};  // no metrics endpoint
  EXPECT_TRUE(loadConfig(flags).ok());
}

TEST(ConfigTest, TheTopologyIsAParameterServerUnlessSetToRing) {
  EXPECT_EQ(loadConfig({}).value().config.scheduler_topology, "ps");
  ConfigInputs flags;
  flags.overrides = {"scheduler.topology=ring"};
  EXPECT_EQ(loadConfig(flags).value().config.scheduler_topology, "ring");
  EXPECT_EQ(errorOf(fromText("[scheduler]\ntopology = \"tree\"\n")),
            "gcagent.toml:2:12: scheduler.topology: \"tree\" is not one of ps|ring|allgather|auto");
}

TEST(ConfigTest, ReferenceListsEveryKey) {
  std::string md = configReferenceMarkdown();
  for (const auto& k : configKeys()) EXPECT_NE(md.find("`" + k.name() + "`"), std::string::npos) << k.name();
}

}  // namespace
}  // namespace gcagent::agent

namespace gcagent::agent {
namespace {

TEST(ConfigEnvironmentTest, AMisspeltVariableIsAnErrorNamingTheNearestKnownOne) {
  ConfigInputs in;
  in.environment_names = {"PATH", "GCAGENT_AGENT_NODE_RANK", "GCAGENT_SOCKET", "GCAGENT_COMPRES_CODEC"};
  auto loaded = loadConfig(in);
  ASSERT_FALSE(loaded.ok());
  EXPECT_EQ(loaded.status().message(),
            "GCAGENT_COMPRES_CODEC: unknown variable (did you mean GCAGENT_COMPRESS_CODEC?); every GCAGENT_ variable "
            "is checked, see gcagent --print-config");
}

TEST(ConfigEnvironmentTest, KeysAndTheVariablesOfClientsAndScriptsPass) {
  ConfigInputs in;
  in.environment_names = {"GCAGENT_COMPRESS_CODEC", "GCAGENT_LOG_LEVEL", "GCAGENT_BUILD_DIR", "HOME"};
  for (std::string_view other : otherGcagentVariables()) in.environment_names.emplace_back(other);
  EXPECT_TRUE(loadConfig(in).ok());
}

}  // namespace
}  // namespace gcagent::agent
