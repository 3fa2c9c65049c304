// GCAGENT_* variables: a misspelt one must not be ignored. Every name in the environment with
// the prefix is a configuration key's (GCAGENT_<SECTION>_<KEY>) or one of the few that other
// parts of gcagent read (the client and the shims, logging, the scripts); anything else is an
// error naming the nearest known name.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"

namespace gcagent::agent {

// The GCAGENT_* names read outside the configuration (clients, shims, launcher, logging,
// build and test scripts).
const std::vector<std::string_view>& otherGcagentVariables();

// `names`: the environment's variable names; `config_names`: the configuration keys' ones.
Status checkGcagentVariables(const std::vector<std::string>& names, const std::vector<std::string>& config_names);

}  // namespace gcagent::agent
