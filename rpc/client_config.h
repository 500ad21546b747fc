#pragma once

// The client config: cartd's address, a bearer token and a TLS CA, resolved from flags, then
// environment variables (CART_SERVER, CART_TOKEN, CART_TLS_CA), then the client config file
// ($CART_CONFIG, else ~/.config/cart/client.yaml), in that order. No gRPC here (rpc/client.h
// makes channels from it).

#include <string>
#include <string_view>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace cart::rpc {

struct ClientConfig {
  std::string server = "127.0.0.1:7070";  // host:port of cartd
  std::string token;                      // bearer token; empty: none (insecure loopback)
  std::string tls_ca;           // PEM file of the CA that signed cartd's cert; empty: plaintext
  std::string tls_server_name;  // override for the certificate's host name (tests)
};

// Path of the client config file: $CART_CONFIG, else $HOME/.config/cart/client.yaml.
std::string DefaultConfigPath();

// Layers `flags` over the environment over the file at `path` (a missing file is fine; a
// malformed one is InvalidArgument naming it). A field of `flags` given (non-empty) wins, even
// when it equals the default; so `flags` must start empty (ClientFlags()), not from ClientConfig's
// defaults, or the default address would always win.
absl::StatusOr<ClientConfig> ResolveClientConfig(const ClientConfig& flags,
                                                 const std::string& path);
// A ClientConfig with every field empty: the start for command-line flags.
ClientConfig ClientFlags();
// Parses a client config file's text; InvalidArgument "<path>:<line>: ..." naming the problem.
absl::StatusOr<ClientConfig> ParseClientConfig(std::string_view text, const std::string& path);

// Writes a client config file (mode 0600: it holds a token).
absl::Status WriteClientConfig(const ClientConfig& config, const std::string& path);

}  // namespace cart::rpc
