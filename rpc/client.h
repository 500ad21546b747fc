#pragma once

// Connecting to cartd: address, bearer token and TLS CA, resolved from flags, then environment
// variables (CART_SERVER, CART_TOKEN, CART_TLS_CA), then the client config file
// ($CART_CONFIG, else ~/.config/cart/client.yaml), in that order.

#include <grpcpp/grpcpp.h>

#include <memory>
#include <string>

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

// Layers `flags` (fields set non-empty win) over the environment over the file at `path` (a
// missing file is fine; a malformed one is InvalidArgument naming it).
absl::StatusOr<ClientConfig> ResolveClientConfig(const ClientConfig& flags,
                                                 const std::string& path);

// Writes a client config file (mode 0600: it holds a token).
absl::Status WriteClientConfig(const ClientConfig& config, const std::string& path);

// A channel to config.server with TLS when tls_ca is set. InvalidArgument when the CA file cannot
// be read.
absl::StatusOr<std::shared_ptr<grpc::Channel>> MakeChannel(const ClientConfig& config);

// Prepares a call: bearer token metadata and an optional deadline (0: none).
void PrepareContext(grpc::ClientContext& context, const ClientConfig& config, int64_t timeout_ms);

// grpc::Status -> absl::Status with the same code and message.
absl::Status FromGrpc(const grpc::Status& status);

}  // namespace cart::rpc
