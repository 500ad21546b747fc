#pragma once

// The client side of `cart`'s commands that talk to cartd: the connection flags every such
// command takes, and a Client whose calls exit with a clear message (and a hint for the usual
// causes) instead of returning errors.

#include <CLI/CLI.hpp>
#include <cstdint>
#include <memory>
#include <string>

#include "cart/v1/notify.grpc.pb.h"
#include "cart/v1/scheduler.grpc.pb.h"
#include "cli/commands.h"
#include "common/strings.h"
#include "rpc/client.h"

namespace cart::cli {

// Flags shared by every command that talks to cartd.
struct Conn {
  rpc::ClientConfig flags = rpc::ClientFlags();
  std::string config_file = rpc::DefaultConfigPath();
  bool json = false;
};

inline void AddConnFlags(CLI::App* cmd, Conn& c) {
  cmd->add_option("--server", c.flags.server, "cartd address host:port (env CART_SERVER)");
  cmd->add_option("--token", c.flags.token, "Bearer token with the user role (env CART_TOKEN)");
  cmd->add_option("--tls-ca", c.flags.tls_ca,
                  "CA certificate (PEM) to verify cartd (env CART_TLS_CA)");
  cmd->add_option("--client-config", c.config_file, "Client config file (written by `cart up`)");
  cmd->add_flag("--json", c.json, "Print JSON");
}

class Client {
 public:
  static Client Connect(const Conn& conn) {
    absl::StatusOr<rpc::ClientConfig> config =
        rpc::ResolveClientConfig(conn.flags, conn.config_file);
    if (!config.ok()) ExitWith(config.status());
    return FromConfig(*config);
  }
  // A client of an already resolved config.
  static Client FromConfig(const rpc::ClientConfig& config) {
    absl::StatusOr<std::shared_ptr<grpc::Channel>> channel = rpc::MakeChannel(config);
    if (!channel.ok()) ExitWith(channel.status());
    return Client(config, cart::v1::SchedulerService::NewStub(*channel),
                  cart::v1::NotifyService::NewStub(*channel));
  }

  // Calls `method` with a fresh context (30 s deadline); exits with a clear message on error.
  template <typename Req, typename Resp, typename Method>
  Resp Call(Method method, const Req& request, int64_t timeout_ms = 30'000) {
    return CallOn<Req, Resp>(*stub_, method, request, timeout_ms);
  }
  // The same on NotifyService (notify.proto).
  template <typename Req, typename Resp, typename Method>
  Resp CallNotify(Method method, const Req& request, int64_t timeout_ms = 30'000) {
    return CallOn<Req, Resp>(*notify_, method, request, timeout_ms);
  }

  cart::v1::SchedulerService::Stub& stub() { return *stub_; }
  const rpc::ClientConfig& config() const { return config_; }

  // The same for a status converted from gRPC's (rpc::FromGrpc keeps the code).
  [[noreturn]] void Fail(const absl::Status& s) {
    Fail(grpc::Status(static_cast<grpc::StatusCode>(s.code()), std::string(s.message())));
  }
  [[noreturn]] void Fail(const grpc::Status& s) {
    std::string hint;
    if (s.error_code() == grpc::StatusCode::UNAVAILABLE) {
      hint = StrCat(" (is cartd running at ", config_.server,
                    "? start one with `cart up`, or pass --server)");
    } else if (s.error_code() == grpc::StatusCode::UNAUTHENTICATED) {
      hint = " (pass --token or set CART_TOKEN; `cart up` writes one to the client config)";
    } else if (s.error_code() == grpc::StatusCode::PERMISSION_DENIED) {
      hint = " (this token's role may not do that)";
    }
    ExitWith(absl::Status(static_cast<absl::StatusCode>(s.error_code()), s.error_message() + hint));
  }

 private:
  Client(rpc::ClientConfig c, std::unique_ptr<cart::v1::SchedulerService::Stub> s,
         std::unique_ptr<cart::v1::NotifyService::Stub> n)
      : config_(std::move(c)), stub_(std::move(s)), notify_(std::move(n)) {}
  template <typename Req, typename Resp, typename Stub, typename Method>
  Resp CallOn(Stub& stub, Method method, const Req& request, int64_t timeout_ms) {
    grpc::ClientContext ctx;
    rpc::PrepareContext(ctx, config_, timeout_ms);
    Resp response;
    grpc::Status s = (stub.*method)(&ctx, request, &response);
    if (!s.ok()) Fail(s);
    return response;
  }
  rpc::ClientConfig config_;
  std::unique_ptr<cart::v1::SchedulerService::Stub> stub_;
  std::unique_ptr<cart::v1::NotifyService::Stub> notify_;
};

// Every run matching `request` (its limit is ignored), read with ListRuns in pages of at most
// `page_size`: cartd answers at most one page's worth (1,000 runs, fewer when their views pass
// 8 MiB), so the next page starts where this one ended, until the offset reaches the total.
// `total` of the answer is the count cartd reported last.
inline cart::v1::ListRunsResponse ListAllRuns(Client& client, cart::v1::ListRunsRequest request,
                                              int32_t page_size = 1000) {
  cart::v1::ListRunsResponse all;
  request.set_limit(page_size);
  for (int64_t offset = 0;;) {
    request.set_offset(offset);
    cart::v1::ListRunsResponse page =
        client.Call<cart::v1::ListRunsRequest, cart::v1::ListRunsResponse>(
            &cart::v1::SchedulerService::Stub::ListRuns, request, 120'000);
    all.set_total(page.total());
    offset += page.runs_size();
    for (auto& run : *page.mutable_runs()) *all.add_runs() = std::move(run);
    if (page.runs_size() == 0 || offset >= page.total()) return all;
  }
}

}  // namespace cart::cli
