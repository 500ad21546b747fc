#include "rpc/client_config.h"

#include <yaml-cpp/yaml.h>

#include <cstdlib>
#include <filesystem>

#include "common/file.h"
#include "common/status.h"
#include "common/strings.h"
#include "common/yaml.h"

namespace cart::rpc {

std::string DefaultConfigPath() {
  if (const char* p = std::getenv("CART_CONFIG"); p != nullptr && *p) return p;
  const char* home = std::getenv("HOME");
  return StrCat(home != nullptr ? home : ".", "/.config/cart/client.yaml");
}

absl::StatusOr<ClientConfig> ParseClientConfig(std::string_view text, const std::string& path) {
  ClientConfig c;
  CART_ASSIGN_OR_RETURN(YAML::Node root, LoadYaml(text, path));
  if (!root.IsMap() && !root.IsNull()) {
    return absl::InvalidArgumentError(
        StrCat(path, ": a client config is a map of server, token, tls_ca, tls_server_name"));
  }
  try {
    for (const auto& kv : root) {
      const std::string key = kv.first.as<std::string>();
      if (!kv.second.IsScalar()) {
        return absl::InvalidArgumentError(
            StrCat(path, ":", kv.first.Mark().line + 1, ": ", key, ": expected a single value"));
      }
      const std::string value = kv.second.as<std::string>();
      if (key == "server") {
        c.server = value;
      } else if (key == "token") {
        c.token = value;
      } else if (key == "tls_ca") {
        c.tls_ca = value;
      } else if (key == "tls_server_name") {
        c.tls_server_name = value;
      } else {
        return absl::InvalidArgumentError(
            StrCat(path, ":", kv.first.Mark().line + 1, ": unknown key '", key,
                   "' (known: server, token, tls_ca, tls_server_name)"));
      }
    }
  } catch (const YAML::Exception& e) {
    return absl::InvalidArgumentError(StrCat(path, ":", e.mark.line + 1, ": ", e.msg));
  }
  return c;
}

ClientConfig ClientFlags() {
  ClientConfig flags;
  flags.server.clear();
  return flags;
}

absl::StatusOr<ClientConfig> ResolveClientConfig(const ClientConfig& flags,
                                                 const std::string& path) {
  ClientConfig c;
  if (std::filesystem::exists(path)) {
    CART_ASSIGN_OR_RETURN(std::string text, ReadWholeFile(path));
    CART_ASSIGN_OR_RETURN(c, ParseClientConfig(text, path));
  }
  if (const char* v = std::getenv("CART_SERVER"); v && *v) c.server = v;
  if (const char* v = std::getenv("CART_TOKEN"); v && *v) c.token = v;
  if (const char* v = std::getenv("CART_TLS_CA"); v && *v) c.tls_ca = v;
  if (!flags.server.empty()) c.server = flags.server;
  if (!flags.token.empty()) c.token = flags.token;
  if (!flags.tls_ca.empty()) c.tls_ca = flags.tls_ca;
  if (!flags.tls_server_name.empty()) c.tls_server_name = flags.tls_server_name;
  return c;
}

absl::Status WriteClientConfig(const ClientConfig& config, const std::string& path) {
  std::error_code ec;
  std::filesystem::create_directories(std::filesystem::path(path).parent_path(), ec);
  YAML::Emitter out;
  out << YAML::BeginMap << YAML::Key << "server" << YAML::Value << config.server;
  if (!config.token.empty()) out << YAML::Key << "token" << YAML::Value << config.token;
  if (!config.tls_ca.empty()) out << YAML::Key << "tls_ca" << YAML::Value << config.tls_ca;
  out << YAML::EndMap;
  CART_RETURN_IF_ERROR(WriteFileAtomically(path, std::string(out.c_str()) + "\n", 0600));
  return absl::OkStatus();
}

}  // namespace cart::rpc
