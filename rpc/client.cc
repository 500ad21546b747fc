// The client side of cartd's gRPC API (rpc/: channels with the bearer token and TLS, the
// client config file, checkpoints streamed both ways), shared by `cart`, workers and tests.

#include "rpc/client.h"

#include <sys/stat.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>

#include "common/file.h"
#include "common/status.h"
#include "common/strings.h"

namespace cart::rpc {

absl::StatusOr<std::shared_ptr<grpc::Channel>> MakeChannel(const ClientConfig& config) {
  grpc::ChannelArguments args;
  args.SetMaxReceiveMessageSize(64 << 20);
  args.SetInt(GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS, 200);
  args.SetInt(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS, 2000);
  std::shared_ptr<grpc::ChannelCredentials> creds;
  if (config.tls_ca.empty()) {
    creds = grpc::InsecureChannelCredentials();
  } else {
    absl::StatusOr<std::string> pem = ReadWholeFile(config.tls_ca);
    if (!pem.ok()) {
      return absl::InvalidArgumentError(StrCat("--tls-ca: ", Message(pem.status())));
    }
    grpc::SslCredentialsOptions ssl;
    ssl.pem_root_certs = *pem;
    creds = grpc::SslCredentials(ssl);
    if (!config.tls_server_name.empty()) {
      args.SetSslTargetNameOverride(config.tls_server_name);
    }
  }
  return grpc::CreateCustomChannel(config.server, creds, args);
}

void PrepareContext(grpc::ClientContext& context, const ClientConfig& config, int64_t timeout_ms) {
  if (!config.token.empty()) context.AddMetadata("authorization", "Bearer " + config.token);
  if (timeout_ms > 0) {
    context.set_deadline(std::chrono::system_clock::now() + std::chrono::milliseconds(timeout_ms));
  }
}

absl::Status FromGrpc(const grpc::Status& status) {
  if (status.ok()) return absl::OkStatus();
  return absl::Status(static_cast<absl::StatusCode>(status.error_code()), status.error_message());
}

}  // namespace cart::rpc
