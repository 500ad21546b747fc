#pragma once

// Connecting to cartd: address, bearer token and TLS CA, resolved from flags, then environment
// variables (CART_SERVER, CART_TOKEN, CART_TLS_CA), then the client config file
// ($CART_CONFIG, else ~/.config/cart/client.yaml), in that order.

#include <grpcpp/grpcpp.h>

#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "rpc/client_config.h"

namespace cart::rpc {

// A channel to config.server with TLS when tls_ca is set. InvalidArgument when the CA file cannot
// be read.
absl::StatusOr<std::shared_ptr<grpc::Channel>> MakeChannel(const ClientConfig& config);

// Prepares a call: bearer token metadata and an optional deadline (0: none).
void PrepareContext(grpc::ClientContext& context, const ClientConfig& config, int64_t timeout_ms);

// grpc::Status -> absl::Status with the same code and message.
absl::Status FromGrpc(const grpc::Status& status);

}  // namespace cart::rpc
