#pragma once

// A run config's scalar keys, each with how it is set from text and written back as text: the
// one table that reading (config.cc), writing (config_yaml.cc) and a run's params share.

#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "config/config.h"

namespace cart::config::internal {

struct KeyDef {
  std::string name;
  std::function<absl::Status(RunConfig&, std::string_view)> set;
  std::function<std::string(const RunConfig&)> get;
};

// Every scalar key, in the order a config is written.
const std::vector<KeyDef>& Keys();
// nullptr for a name that is not a key.
const KeyDef* FindKey(std::string_view name);
// A value of `key` in its stored form (`1e-3` and `0.001` are one learning rate); the value as
// given when it is not one `key` accepts.
std::string Canonical(const std::string& key, const std::string& value);

}  // namespace cart::config::internal
