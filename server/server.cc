// cartd, the scheduler daemon (server/: docs/architecture.md "Module map"): RunServer opens the
// store, builds the Scheduler, the gRPC services and the dashboard port, and runs them until
// shutdown. The folder's concepts each have a file of their own beside this one.

#include "server/server.h"

#include <arpa/inet.h>
#include <grpcpp/ext/proto_server_reflection_plugin.h>
#include <grpcpp/grpcpp.h>
#include <grpcpp/resource_quota.h>
#include <netinet/in.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <set>
#include <system_error>

#include "common/file.h"
#include "common/status.h"
#include "common/strings.h"
#include "server/artifacts.h"
#include "server/auth.h"
#include "server/http/dashboard.h"
#include "server/http/http_server.h"
#include "server/internal/services.h"
#include "server/notify/notifier.h"
#include "server/scheduler.h"
#include "store/run_store.h"

namespace cart::server {
namespace {

// The host part of "host:port" / "[v6]:port"; nullopt when there is no ":port".
std::optional<std::string> HostOf(std::string_view listen) {
  std::optional<HostPort> split = SplitHostPort(listen);
  if (!split) return std::nullopt;
  return split->host;
}

std::optional<int64_t> PortOf(std::string_view listen) {
  std::optional<HostPort> split = SplitHostPort(listen);
  return split ? split->port : std::nullopt;
}

// The host a client on this machine dials for a listen address: a wildcard becomes 127.0.0.1, an
// IPv6 address gets its brackets.
std::string DialHost(std::string_view listen) {
  std::string dial = HostOf(listen).value_or("127.0.0.1");
  if (dial.empty() || dial == "0.0.0.0" || dial == "::") dial = "127.0.0.1";
  if (dial.find(':') != std::string::npos) dial = StrCat("[", dial, "]");
  return dial;
}

// Applies checkpoint retention to every run (the policy may have changed since the last start),
// then deletes blobs no checkpoint names that are older than an hour: a crash between recording
// and deleting, or between uploading and recording. Younger ones may be uploads whose checkpoint
// notice a worker is about to resend.
absl::Status CollectArtifacts(const ServerConfig& config, store::RunStore& store,
                              ArtifactStore& artifacts) {
  int64_t released = 0;
  if (config.keep_checkpoints_per_run > 0) {
    CART_ASSIGN_OR_RETURN(std::vector<std::string> shas,
                          store.PruneCheckpoints(std::nullopt, config.keep_checkpoints_per_run));
    for (const std::string& sha : shas) {
      CART_RETURN_IF_ERROR(artifacts.Remove(sha));
      ++released;
    }
  }
  CART_ASSIGN_OR_RETURN(std::vector<std::string> names, store.ArtifactNames());
  const std::set<std::string> known(names.begin(), names.end());
  const int64_t unknown = artifacts.RemoveUnknown(
      [&](const std::string& sha) { return known.count(sha) > 0; }, /*min_age_s=*/3600);
  if (released + unknown > 0) {
    std::fprintf(stderr,
                 "cartd: removed %lld checkpoint artifact(s) past keep_checkpoints_per_run and "
                 "%lld that no checkpoint names; the store holds %lld bytes\n",
                 static_cast<long long>(released), static_cast<long long>(unknown),
                 static_cast<long long>(artifacts.stored_bytes()));
  }
  return absl::OkStatus();
}

}  // namespace

bool IsLoopbackListen(std::string_view listen) {
  std::optional<std::string> host = HostOf(listen);
  if (!host) return false;
  if (*host == "localhost") return true;
  // An address, parsed: a host name such as "127.example.org" is not trusted for its prefix.
  in_addr v4{};
  if (inet_pton(AF_INET, host->c_str(), &v4) == 1) return (ntohl(v4.s_addr) >> 24) == 127;
  in6_addr v6{};
  return inet_pton(AF_INET6, host->c_str(), &v6) == 1 && IN6_IS_ADDR_LOOPBACK(&v6);
}

absl::Status ValidateServerConfig(const ServerConfig& config) {
  std::optional<int64_t> port = PortOf(config.listen);
  if (!HostOf(config.listen) || !port || *port < 0 || *port > 65535) {
    return absl::InvalidArgumentError(
        StrCat("listen address '", config.listen, "' is not host:port"));
  }
  if (config.tls_cert_file.empty() != config.tls_key_file.empty()) {
    return absl::InvalidArgumentError("TLS needs both --tls-cert and --tls-key");
  }
  if (config.lease_ttl < absl::Seconds(1)) {
    return absl::InvalidArgumentError(
        StrCat("lease TTL must be at least 1 s, got ", absl::FormatDuration(config.lease_ttl)));
  }
  if (config.max_threads < 16) {
    return absl::InvalidArgumentError(
        StrCat("max_threads must be at least 16, got ", config.max_threads));
  }
  if (config.data_dir.empty()) return absl::InvalidArgumentError("data dir is empty");
  if (!config.http_listen.empty()) {
    std::optional<int64_t> http_port = PortOf(config.http_listen);
    if (!HostOf(config.http_listen) || !http_port || *http_port < 0 || *http_port > 65535) {
      return absl::InvalidArgumentError(
          StrCat("HTTP address '", config.http_listen, "' is not host:port (or 'off')"));
    }
  }
  const bool tls = !config.tls_cert_file.empty();
  const bool tokens = !config.tokens_file.empty();
  for (const std::string& address : {config.listen, config.http_listen}) {
    if (address.empty() || IsLoopbackListen(address) || config.insecure || (tls && tokens)) {
      continue;
    }
    std::vector<std::string> missing;
    if (!tls) missing.push_back("TLS (--tls-cert, --tls-key)");
    if (!tokens) missing.push_back("tokens (--tokens)");
    return absl::FailedPreconditionError(
        StrCat("refusing to listen on ", address, " without ", StrJoin(missing, " and "),
               ": anyone who can reach it could run jobs and read results. Give them, listen on "
               "127.0.0.1, or pass --insecure"));
  }
  return absl::OkStatus();
}

struct ServerHandle::Services {
  std::unique_ptr<internal::SchedulerServiceImpl> scheduler;
  std::unique_ptr<internal::WorkerServiceImpl> worker;
  std::unique_ptr<internal::NotifyServiceImpl> notify;
};

ServerHandle::ServerHandle() = default;

ServerHandle::~ServerHandle() {
  Shutdown();
  Wait();
}

std::string ServerHandle::dial_address() const {
  return StrCat(DialHost(config_.listen), ":", port_);
}

int ServerHandle::http_port() const { return http_ ? http_->port() : 0; }

std::string ServerHandle::dashboard_url() const {
  if (!http_) return "";
  return StrCat(http_->tls() ? "https://" : "http://", DialHost(config_.http_listen), ":",
                http_->port(), "/");
}

void ServerHandle::Shutdown() {
  {
    absl::MutexLock lock(&mu_);
    if (shutting_down_) return;
    shutting_down_ = true;
  }
  // The dashboard's connections close first (its event streams read the scheduler); then long
  // polls return and RunJob streams end, so the gRPC server's wait below is for short calls.
  stopping_.store(true);
  if (http_) http_->Shutdown();
  if (scheduler_) scheduler_->Shutdown();
  if (server_) {
    server_->Shutdown(std::chrono::system_clock::now() +
                      absl::ToChronoSeconds(config_.shutdown_grace));
    server_->Wait();
  }
  // The scheduler's expiry thread stops before the store closes; the store's destructor commits
  // every queued write.
  http_.reset();
  dashboard_.reset();
  notifier_.reset();  // its threads read the scheduler and the store
  scheduler_.reset();
  services_.reset();
  followers_.reset();
  big_reads_.reset();
  downloads_.reset();
  polls_.reset();
  send_watch_.reset();
  store_.reset();
  absl::MutexLock lock(&mu_);
  done_ = true;
}

void ServerHandle::Wait() {
  absl::MutexLock lock(&mu_);
  mu_.Await(absl::Condition(&done_));
}

namespace {

// The tokens file (an empty table without one: authentication off). InvalidArgument naming the
// file when it cannot be read or holds no token; a warning when others may read it.
absl::StatusOr<TokenTable> LoadTokens(const ServerConfig& config) {
  if (config.tokens_file.empty()) return TokenTable();
  absl::StatusOr<TokenTable> tokens = TokenTable::LoadFile(config.tokens_file);
  if (!tokens.ok()) {
    return absl::InvalidArgumentError(
        StrCat("tokens file ", config.tokens_file, ": ", Message(tokens.status())));
  }
  if (!tokens->enabled()) {
    return absl::InvalidArgumentError(StrCat("tokens file ", config.tokens_file, " has no token"));
  }
  struct stat info {};
  // Readable by others, or by a group that is not cartd's own: a secret volume mounted for
  // cartd's group (Kubernetes' fsGroup, mode 0440) or a file root:cart 0640 is not warned about.
  if (stat(config.tokens_file.c_str(), &info) == 0 &&
      ((info.st_mode & 007) != 0 || ((info.st_mode & 070) != 0 && info.st_gid != getegid()))) {
    std::fprintf(stderr,
                 "cartd: warning: tokens file %s can be read by other users (mode %03o); "
                 "chmod 600 %s\n",
                 config.tokens_file.c_str(), info.st_mode & 0777, config.tokens_file.c_str());
  }
  return tokens;
}

// TLS from the certificate and key files, or plaintext without them.
absl::StatusOr<std::shared_ptr<grpc::ServerCredentials>> GrpcCredentials(
    const ServerConfig& config) {
  if (config.tls_cert_file.empty()) return grpc::InsecureServerCredentials();
  absl::StatusOr<std::string> cert = ReadWholeFile(config.tls_cert_file);
  absl::StatusOr<std::string> key = ReadWholeFile(config.tls_key_file);
  if (!cert.ok() || !key.ok()) {
    return absl::InvalidArgumentError(
        StrCat("cannot read TLS files: ", Message(cert.ok() ? key.status() : cert.status())));
  }
  grpc::SslServerCredentialsOptions ssl;
  ssl.pem_key_cert_pairs.push_back({*key, *cert});
  return grpc::SslServerCredentials(ssl);
}

store::StoreOptions StoreOptionsFor(const ServerConfig& config) {
  store::StoreOptions options;
  options.path = StrCat(config.data_dir, "/cart.db");
  options.lease_ttl_us = absl::ToInt64Microseconds(config.lease_ttl);
  options.max_runs_per_sweep = std::max<int64_t>(config.max_runs_per_sweep, 1);
  options.max_log_lines_per_attempt = std::max<int64_t>(config.max_log_lines_per_attempt, 1);
  options.synchronous_full = config.store_sync != "normal";
  return options;
}

ArtifactStoreOptions ArtifactOptionsFor(const ServerConfig& config) {
  ArtifactStoreOptions options;
  options.shared = !config.shared_artifact_path.empty();
  options.root =
      options.shared ? config.shared_artifact_path : StrCat(config.data_dir, "/artifacts");
  options.max_bytes = config.max_artifact_bytes;
  options.min_free_bytes = config.min_free_artifact_bytes;
  options.quota_bytes = config.max_artifact_store_bytes;
  return options;
}

// `artifacts` (not owned) removes the blobs retention and sweep deletion release.
absl::StatusOr<notify::NotifierOptions> NotifierOptionsFor(const ServerConfig& config) {
  notify::NotifierOptions options;
  options.scan_interval = config.notify_scan_interval;
  options.retry_base = config.notify_retry_base;
  options.retry_max = config.notify_retry_max;
  options.give_up_after = config.notify_give_up_after;
  options.stuck_floor = config.notify_stuck_floor;
  options.dashboard_url = config.public_url;
  while (!options.dashboard_url.empty() && options.dashboard_url.back() == '/') {
    options.dashboard_url.pop_back();
  }
  options.delivery.ca_file = config.notify_ca_file;
  notify::SmtpServer& smtp = options.delivery.smtp;
  smtp.host = config.smtp_host;
  smtp.port = config.smtp_port;
  smtp.tls = config.smtp_tls == "starttls"   ? notify::SmtpServer::Tls::kStartTls
             : config.smtp_tls == "implicit" ? notify::SmtpServer::Tls::kImplicit
                                             : notify::SmtpServer::Tls::kNone;
  smtp.username = config.smtp_username;
  smtp.from = config.smtp_from;
  if (!config.smtp_password_file.empty()) {
    absl::StatusOr<std::string> password = ReadWholeFile(config.smtp_password_file);
    if (!password.ok()) {
      return absl::InvalidArgumentError(StrCat("smtp_password_file: ", Message(password.status())));
    }
    std::string first = password->substr(0, password->find('\n'));
    if (!first.empty() && first.back() == '\r') first.pop_back();
    smtp.password = std::move(first);
  }
  return options;
}

SchedulerOptions SchedulerOptionsFor(const ServerConfig& config, ArtifactStore* artifacts) {
  SchedulerOptions options;
  options.lease_ttl = config.lease_ttl;
  options.max_acquire_wait = config.max_acquire_wait;
  options.max_runs_per_sweep = config.max_runs_per_sweep;
  options.max_sweep_bytes = config.max_sweep_bytes;
  options.keep_checkpoints = config.keep_checkpoints_per_run;
  options.max_user_priority = config.max_user_priority;
  options.fair_share_half_life = config.fair_share_half_life;
  options.preemption = config.preemption;
  options.preempt_interval = config.preempt_interval;
  options.raise_micro_batch = config.raise_micro_batch;
  options.user_budget_device_hours = config.user_budget_device_hours;
  options.user_budgets = config.user_budgets;
  options.store_dir = config.data_dir;
  options.min_free_store_bytes = config.min_free_store_bytes;
  options.placement = config.placement == "first_fit"
                          ? SchedulerOptions::Placement::kFirstFit
                          : SchedulerOptions::Placement::kEarliestFinish;
  options.release_artifact = [artifacts](const std::string& sha256) {
    if (absl::Status removed = artifacts->Remove(sha256); !removed.ok()) {
      std::fprintf(stderr, "cartd: %s\n", Message(removed).c_str());
    }
  };
  return options;
}

// The dashboard port's server, on http_listen; when that port is taken and the config allows
// it, on any free port of the same host instead.
absl::StatusOr<std::unique_ptr<http::HttpServer>> StartHttp(const ServerConfig& config,
                                                            http::Dashboard* pages) {
  http::HttpServerOptions options;
  options.listen = config.http_listen;
  options.tls_cert_file = config.tls_cert_file;
  options.tls_key_file = config.tls_key_file;
  options.idle_timeout = config.http_idle_timeout;
  options.max_connections = config.http_max_connections;
  options.max_connections_per_client = config.http_max_connections_per_client;
  auto handler = [pages](const http::Request& request) { return pages->Handle(request); };
  absl::StatusOr<std::unique_ptr<http::HttpServer>> started =
      http::HttpServer::Start(options, handler);
  if (!started.ok() && absl::IsUnavailable(started.status()) && config.http_any_port_if_busy) {
    std::optional<std::string> host = HostOf(config.http_listen);
    options.listen = StrCat(host.value_or("127.0.0.1"), ":0");
    std::fprintf(stderr, "cartd: %s; the dashboard takes a free port\n",
                 Message(started.status()).c_str());
    started = http::HttpServer::Start(options, handler);
  }
  return started;
}

}  // namespace

absl::StatusOr<std::unique_ptr<ServerHandle>> RunServer(const ServerConfig& config) {
  CART_RETURN_IF_ERROR(ValidateServerConfig(config));
  std::unique_ptr<ServerHandle> handle(new ServerHandle());
  handle->config_ = config;
  CART_ASSIGN_OR_RETURN(TokenTable tokens, LoadTokens(config));
  handle->tokens_ = std::make_unique<TokenTable>(std::move(tokens));
  CART_ASSIGN_OR_RETURN(std::shared_ptr<grpc::ServerCredentials> credentials,
                        GrpcCredentials(config));

  // The database holds every run's config and results: a data dir cartd creates is its owner's
  // only.
  if (absl::Status made = CreatePrivateDir(config.data_dir); !made.ok()) {
    return absl::InternalError(StrCat("data dir: ", Message(made)));
  }
  CART_ASSIGN_OR_RETURN(handle->store_, store::RunStore::Open(StoreOptionsFor(config)));
  CART_ASSIGN_OR_RETURN(handle->artifacts_, ArtifactStore::Open(ArtifactOptionsFor(config)));
  if (handle->artifacts_->swept_temp_files() > 0) {
    std::fprintf(stderr, "cartd: removed %lld temporary file(s) of interrupted uploads\n",
                 static_cast<long long>(handle->artifacts_->swept_temp_files()));
  }
  CART_RETURN_IF_ERROR(CollectArtifacts(config, *handle->store_, *handle->artifacts_));
  handle->scheduler_ = std::make_unique<Scheduler>(
      handle->store_.get(), config.clock, SchedulerOptionsFor(config, handle->artifacts_.get()));

  CART_ASSIGN_OR_RETURN(notify::NotifierOptions notifier_options, NotifierOptionsFor(config));
  handle->notifier_ = std::make_unique<notify::Notifier>(
      handle->store_.get(), handle->scheduler_.get(), config.clock, std::move(notifier_options));

  // The gRPC services and their bounds.
  internal::ServiceContext context;
  context.notifier = handle->notifier_.get();
  context.prices.per_kwh = config.energy_price_per_kwh;
  context.prices.currency = config.energy_currency;
  context.prices.co2_grams_per_kwh = config.co2_grams_per_kwh;
  context.scheduler = handle->scheduler_.get();
  context.artifacts = handle->artifacts_.get();
  context.tokens = handle->tokens_.get();
  handle->followers_ = std::make_unique<CallerSlots>(
      std::max(1, config.max_follows_per_caller), std::max(1, config.max_threads / 2),
      "follow streams", "close some, or follow without --follow");
  context.followers = handle->followers_.get();
  handle->big_reads_ = std::make_unique<CallerSlots>(
      std::max(1, config.max_big_reads_per_caller), std::max(1, config.max_big_reads),
      "large reads (run lists, sweeps, tables)", "retry in a moment");
  context.big_reads = handle->big_reads_.get();
  handle->downloads_ = std::make_unique<CallerSlots>(
      std::max(1, config.max_downloads_per_caller), std::max(1, config.max_threads / 4),
      "checkpoint downloads", "let one finish first");
  context.downloads = handle->downloads_.get();
  handle->polls_ = std::make_unique<CallerSlots>(
      std::max(1, config.max_polls_per_token), std::max(1, config.max_threads / 4),
      "AcquireJob long polls", "run fewer workers on this token, or raise max_polls_per_token");
  context.polls = handle->polls_.get();
  handle->send_watch_ = std::make_unique<SendWatch>(config.stream_send_timeout);
  context.send_watch = handle->send_watch_.get();
  context.max_workers_per_token = std::max(1, config.max_workers_per_token);
  context.min_worker_protocol = config.min_worker_protocol;
  context.max_answer_bytes = static_cast<size_t>(std::max<int64_t>(config.max_answer_bytes, 1));
  handle->services_ = std::make_unique<ServerHandle::Services>();
  handle->services_->scheduler = std::make_unique<internal::SchedulerServiceImpl>(context);
  handle->services_->worker = std::make_unique<internal::WorkerServiceImpl>(context);
  handle->services_->notify = std::make_unique<internal::NotifyServiceImpl>(context);

  grpc::reflection::InitProtoReflectionServerBuilderPlugin();
  grpc::ServerBuilder builder;
  builder.AddListeningPort(config.listen, credentials, &handle->port_);
  builder.RegisterService(handle->services_->scheduler.get());
  builder.RegisterService(handle->services_->worker.get());
  builder.RegisterService(handle->services_->notify.get());
  grpc::ResourceQuota quota("cartd");
  quota.SetMaxThreads(config.max_threads);
  builder.SetResourceQuota(quota);
  // Artifact chunks are 1 MiB and metric batches up to 10,000 points; leave room for framing.
  builder.SetMaxReceiveMessageSize(8 << 20);
  handle->server_ = builder.BuildAndStart();
  if (!handle->server_ || handle->port_ == 0) {
    return absl::UnavailableError(StrCat("cannot listen on ", config.listen,
                                         " (address in use, or not an address of this machine)"));
  }
  if (config.http_listen.empty()) return handle;

  // The dashboard, the JSON API and /metrics.
  http::DashboardOptions dashboard;
  dashboard.web_dir = config.web_dir;
  dashboard.allowed_hosts = config.http_hosts;
  if (std::optional<std::string> host = HostOf(config.http_listen); host && !host->empty()) {
    dashboard.allowed_hosts.push_back(ToLower(*host));  // the name it listens by, if a name
  }
  dashboard.tokens = handle->tokens_.get();
  dashboard.big_reads = handle->big_reads_.get();
  dashboard.followers = handle->followers_.get();
  dashboard.max_answer_bytes = static_cast<size_t>(std::max<int64_t>(config.max_answer_bytes, 1));
  dashboard.notifier = handle->notifier_.get();
  dashboard.prices = context.prices;
  ServerHandle* raw = handle.get();
  dashboard.stopping = [raw] { return raw->stopping_.load(); };
  dashboard.storage = [artifacts = handle->artifacts_.get()] {
    http::StorageFigures room;
    room.stored_bytes = artifacts->stored_bytes();
    room.quota_bytes = artifacts->options().quota_bytes;
    room.floor_bytes = artifacts->options().min_free_bytes;
    room.free_disk_bytes = artifacts->FreeDiskBytes();
    return room;
  };
  handle->dashboard_ =
      std::make_unique<http::Dashboard>(handle->scheduler_.get(), std::move(dashboard));
  absl::StatusOr<std::unique_ptr<http::HttpServer>> http =
      StartHttp(config, handle->dashboard_.get());
  if (!http.ok()) {
    handle->Shutdown();
    return http.status();
  }
  handle->http_ = *std::move(http);
  return handle;
}

}  // namespace cart::server
