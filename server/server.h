#pragma once

// Starting and stopping cartd: RunServer(config) opens the store and the artifact store, builds the
// scheduler, and serves SchedulerService, WorkerService and server reflection over gRPC. cartd's
// main() only parses flags into a ServerConfig; tests call RunServer with port 0.
//
// Data directory layout: <data_dir>/cart.db (SQLite, WAL; runs, metrics, events and the workers'
// log lines), <data_dir>/artifacts/ (content-addressed checkpoints), unless the artifacts are on
// a shared filesystem (ServerConfig::shared_artifact_path).

#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/clock.h"
#include "server/defaults.h"
#include "store/types.h"

namespace grpc {
class Server;
}

namespace cart::store {
class RunStore;
}

namespace cart::server::http {
class Dashboard;
class HttpServer;
}  // namespace cart::server::http

namespace cart::server::notify {
class Notifier;
}

namespace cart::server {

class ArtifactStore;
class CallerSlots;
class SendWatch;
class Scheduler;
class TokenTable;

struct ServerConfig {
  // host:port to listen on. Port 0 picks a free port (ServerHandle::port()). A host other than
  // 127.0.0.1 / localhost / ::1 needs TLS and a tokens file unless `insecure`.
  std::string listen = "127.0.0.1:7070";
  // Database, artifacts and logs; created when missing.
  std::string data_dir = "./var/cart";
  // Tokens file (server/auth.h). Empty: authentication off (loopback only unless `insecure`).
  std::string tokens_file;
  // PEM certificate chain and private key; both or neither. Empty: plaintext.
  std::string tls_cert_file;
  std::string tls_key_file;
  // A lease lapses this long after the claim or the last heartbeat (store::kDefaultLeaseTtlUs
  // unless set); >= 1 s.
  absl::Duration lease_ttl = absl::Microseconds(store::kDefaultLeaseTtlUs);
  // Allows a non-loopback address without TLS and tokens.
  bool insecure = false;
  // Largest artifact accepted, bytes. Default 64 GiB.
  int64_t max_artifact_bytes = int64_t{64} << 30;
  // Uploads that would leave less free disk than this are refused. Default 256 MiB; 0: no floor.
  int64_t min_free_artifact_bytes = int64_t{256} << 20;
  // Free space on data_dir's filesystem below which cartd takes no new change and hands out no
  // job until there is room (server/store_room.h; docs/design.md "cartd's disk fills").
  int64_t min_free_store_bytes = defaults::kMinFreeStoreBytes;
  // The artifact store may hold at most this many bytes; uploads past it are refused. 0: no quota.
  int64_t max_artifact_store_bytes = 0;
  // Where checkpoints live: empty, under <data_dir>/artifacts, every byte through cartd; else a
  // shared filesystem the workers mount too (`artifact_store: {kind: shared_fs, path: ...}`),
  // which they write to and read from themselves (docs/design.md "Storage").
  std::string shared_artifact_path;
  // Checkpoints each run keeps in the artifact store (the newest; also any a derived run starts
  // from); older ones are deleted as new ones arrive and when cartd starts. 0: keep every one.
  // Default 3.
  int64_t keep_checkpoints_per_run = 3;
  // Most threads the gRPC sync server may use: every in-flight RPC holds one (long polls and
  // RunJob streams included), so this bounds how many workers and followers can be connected.
  // Default 1024; >= 16.
  int max_threads = 1024;
  // Most follow streams (`cart runs logs -f` and the like) one caller may hold open; all callers
  // together hold at most half of max_threads, so workers always find a thread. Default 64; >= 1.
  int max_follows_per_caller = 64;
  // Checkpoint downloads (GetCheckpoint, GetArtifact) one caller (token) may have streaming at
  // once, all callers together at most a quarter of max_threads; and AcquireJob long polls one
  // worker token may hold, all together at most a quarter of max_threads. A download whose next
  // chunk the client has not taken within stream_send_timeout is cancelled. Defaults 8, 64, 60 s.
  int max_downloads_per_caller = 8;
  int max_polls_per_token = 64;
  // Worker ids one worker token may register (lost ones count; an id registered before may come
  // back). Default 256.
  int max_workers_per_token = 256;
  // Workers speaking an older worker protocol (common/version.h) are refused at registration,
  // naming both versions. Default 1: every release so far works with this cartd.
  int min_worker_protocol = 1;
  absl::Duration stream_send_timeout = absl::Seconds(60);
  // Large reads (ListRuns, GetSweep, QueryTable; the dashboard's run pages, pivots and groups)
  // in progress at once: per caller, and for everyone together, gRPC and HTTP sharing
  // one bound. More get RESOURCE_EXHAUSTED (HTTP 429). Each holds up to one answer (8 MiB of
  // runs) in memory. Defaults 4 and 16.
  int max_big_reads_per_caller = 4;
  int max_big_reads = 16;
  // The most bytes of run views one answer carries (ListRuns, GetSweep, SubmitSweep and the
  // dashboard's run pages, besides their 1,000- and 5,000-run limits); a longer page is cut
  // short and the caller continues at offset + runs received. Default 8 MiB.
  int64_t max_answer_bytes = 8 << 20;
  // How free workers are given runs: "earliest_finish" (speeds and lengths weighed; default) or
  // "first_fit" (the oldest run that fits). docs/design.md "Placement".
  std::string placement = "earliest_finish";
  // When a commit is on disk: "full" (default) fsyncs SQLite's log at every commit, so that what
  // cartd acknowledged survives a power cut; "normal" only at checkpoints (a cut loses the last
  // commits, a submitted sweep included: PowerCutTest). docs/design.md "Storage".
  std::string store_sync = "full";
  // The highest sweep priority a user may set (admins: any). Default 10.
  int64_t max_user_priority = defaults::kMaxUserPriority;
  // Fair share's half-life (placement orders owners within a priority level by their decayed
  // GPU-hours); zero: off. Default 24 h; the config key is in hours.
  absl::Duration fair_share_half_life = defaults::kFairShareHalfLife;
  // Preemption at a checkpoint for waiting work of a higher priority or an owner under their
  // share (docs/design.md "Preemption"); each run at most once per preempt_interval (the config
  // key is in minutes). Off by default; deploy/systemd/cartd.yaml.example turns it on.
  bool preemption = defaults::kPreemption;
  absl::Duration preempt_interval = defaults::kPreemptInterval;
  // SchedulerOptions::raise_micro_batch.
  bool raise_micro_batch = defaults::kRaiseMicroBatch;
  // Device-hour budgets per user (docs/operations.md "Budgets"): every user's unless named in
  // user_budgets (user -> device-hours); 0: none. An admin's `cart budget set --user` overrides
  // both.
  double user_budget_device_hours = 0;
  std::map<std::string, double> user_budgets;
  // The HTTP port: a request must arrive within http_idle_timeout of the connection opening or
  // going idle; the port holds http_max_connections connections (a newcomer past it replaces the
  // one that has waited longest for a request), one client address at most
  // http_max_connections_per_client of them (server/http/http_server.h). Defaults 60 s, 4096, 256.
  absl::Duration http_idle_timeout = absl::Seconds(60);
  int http_max_connections = 4096;
  int http_max_connections_per_client = 256;
  // Longest AcquireJob long poll. Default 30 s.
  absl::Duration max_acquire_wait = defaults::kMaxAcquireWait;
  // How long Shutdown() lets unary RPCs in flight finish before cancelling them. Default 5 s.
  absl::Duration shutdown_grace = absl::Seconds(5);
  // Most runs a sweep may expand to. Default 100,000.
  int64_t max_runs_per_sweep = defaults::kMaxRunsPerSweep;
  // Most bytes one sweep's runs may hold in configs and keys; a submit past it is refused naming
  // the run that passed it. Default 256 MiB.
  int64_t max_sweep_bytes = defaults::kMaxSweepBytes;
  // Log lines stored per attempt of a run; later ones are dropped (one line says so). Default
  // 20,000 (at most 4 KiB each).
  int64_t max_log_lines_per_attempt = 20'000;
  // host:port of the dashboard, JSON API and /metrics (docs/dashboard.md); empty: no HTTP. The
  // same address rules as `listen` apply, and TLS uses the same certificate. cartd's default is
  // 127.0.0.1:8080; this struct's is off, so that tests and embedders opt in.
  std::string http_listen;
  // When http_listen's port is taken, serve HTTP on a free port of the same host instead of
  // failing (`cart up`, whose default port may belong to another cartd).
  bool http_any_port_if_busy = false;
  // The dashboard's static files (dashboards/web); empty: the API and /metrics only.
  std::string web_dir;
  // Host names the HTTP port answers to besides IP addresses, localhost and this machine's host
  // name (a request whose Host is another name is refused: DNS rebinding; docs/dashboard.md).
  // The config file takes them comma-separated (`http_hosts: cart.lab.example, labbox3.lan`).
  std::vector<std::string> http_hosts;
  // Notifications (docs/operations.md "Notifications"). The SMTP server mail goes through:
  // smtp_host empty means no e-mail (subscriptions to an address are refused); smtp_tls "none",
  // "starttls" or "implicit" (port 465 style); a login when smtp_username is set, its password
  // read from smtp_password_file (never from the config itself); smtp_from the sender address.
  std::string smtp_host;
  int smtp_port = 25;
  std::string smtp_tls = "none";
  std::string smtp_username;
  std::string smtp_password_file;
  std::string smtp_from = "cartd@localhost";
  // A failed delivery is retried after notify_retry_base, doubling up to notify_retry_max, and
  // given up notify_give_up_after after the notification was made. Defaults 10 s, 1 h, 24 h.
  absl::Duration notify_retry_base = absl::Seconds(10);
  absl::Duration notify_retry_max = absl::Hours(1);
  absl::Duration notify_give_up_after = absl::Hours(24);
  // How often new events are looked at and the timed checks run. Default 1 s.
  absl::Duration notify_scan_interval = absl::Seconds(1);
  // "stuck" needs at least this long without progress. Default 2 min.
  absl::Duration notify_stuck_floor = absl::Minutes(2);
  // CA bundle for https webhooks and SMTP over TLS; empty: the system's.
  std::string notify_ca_file;
  // The dashboard as subscribers reach it ("https://cart.lab.example"), linked from each
  // notification; empty: no link.
  std::string public_url;
  // What spending is priced at (docs/operations.md "Energy"): a price per kWh in
  // energy_currency and grams of CO2 per kWh; 0: not set (no cost or CO2 shown).
  double energy_price_per_kwh = 0;
  std::string energy_currency = "EUR";
  double co2_grams_per_kwh = 0;
  // Time source for timestamps and leases; not owned. Default: the real clock.
  Clock* clock = Clock::Real();
};

// Applies a YAML config file's keys onto `config` (keys absent keep their value): the keys are
// ConfigKeys(), each the ServerConfig field of that name (durations in seconds), except
// `artifact_store`, a mapping that sets shared_artifact_path.
// InvalidArgument "<source>:<line>: <key>: <reason>" for unknown keys and bad values.
absl::Status ApplyConfigYaml(std::string_view text, std::string_view source, ServerConfig& config);

// The keys a cartd config file may set, in the order `cartd --help` lists them (one table, in
// server/config_file.cc, which the parser, its error message and the help read).
const std::vector<std::string_view>& ConfigKeys();
// Each key on a line of its own, "  key: what it sets (default: value)", the defaults as
// `defaults` holds them: what `cartd --help` prints.
std::string ConfigKeysHelp(const ServerConfig& defaults);

// Whether the host part of "host:port" is a loopback address (127.0.0.0/8, localhost, ::1).
bool IsLoopbackListen(std::string_view listen);

// Checks a config before anything is opened: a parsable listen address, TLS files given in pairs,
// a lease TTL >= 1 s, and docs/design.md "Security": a non-loopback address needs TLS and tokens
// unless insecure. InvalidArgument naming the problem; FailedPrecondition for the security refusal.
absl::Status ValidateServerConfig(const ServerConfig& config);

// A running cartd.
class ServerHandle {
 public:
  ~ServerHandle();  // Shutdown() and Wait()
  ServerHandle(const ServerHandle&) = delete;
  ServerHandle& operator=(const ServerHandle&) = delete;

  // The port bound (the chosen one when the config said 0).
  int port() const { return port_; }
  // "127.0.0.1:<port>" style address clients on this machine can dial.
  std::string dial_address() const;
  // The HTTP port bound; 0 when HTTP is off.
  int http_port() const;
  // The bound on large reads that the gRPC side and the dashboard share (tests hold its slots).
  CallerSlots* big_reads() const { return big_reads_.get(); }
  // "http://127.0.0.1:<port>/" (https with TLS) for a browser on this machine; empty when off.
  std::string dashboard_url() const;

  // Graceful stop: stops accepting calls, ends long polls (no job) and closes RunJob streams
  // (workers reconnect later under the same lease), lets other calls finish for shutdown_grace,
  // then flushes and closes the store. Leases stay valid in the database. Idempotent; thread-safe.
  void Shutdown();
  // Blocks until Shutdown() has finished.
  void Wait();

  Scheduler& scheduler() { return *scheduler_; }
  notify::Notifier& notifier() { return *notifier_; }
  store::RunStore& store() { return *store_; }
  ArtifactStore& artifacts() { return *artifacts_; }

 private:
  friend absl::StatusOr<std::unique_ptr<ServerHandle>> RunServer(const ServerConfig& config);
  struct Services;
  ServerHandle();

  ServerConfig config_;
  int port_ = 0;
  std::unique_ptr<TokenTable> tokens_;
  std::unique_ptr<store::RunStore> store_;
  std::unique_ptr<ArtifactStore> artifacts_;
  std::unique_ptr<Scheduler> scheduler_;
  std::unique_ptr<notify::Notifier> notifier_;
  std::unique_ptr<CallerSlots> followers_;
  std::unique_ptr<CallerSlots> big_reads_;  // the gRPC side's and the dashboard's
  std::unique_ptr<CallerSlots> downloads_;
  std::unique_ptr<CallerSlots> polls_;
  std::unique_ptr<SendWatch> send_watch_;
  std::unique_ptr<Services> services_;
  std::unique_ptr<grpc::Server> server_;
  std::unique_ptr<http::Dashboard> dashboard_;
  std::unique_ptr<http::HttpServer> http_;
  std::atomic<bool> stopping_{false};  // read by the dashboard's event streams
  absl::Mutex mu_;
  bool shutting_down_ ABSL_GUARDED_BY(mu_) = false;
  bool done_ ABSL_GUARDED_BY(mu_) = false;
};

// Validates the config, opens everything and starts serving. Errors: ValidateServerConfig's; the
// store's (e.g. FailedPrecondition for a database newer than this build); InvalidArgument for a
// bad tokens file or unreadable TLS files; Unavailable when the address cannot be bound.
absl::StatusOr<std::unique_ptr<ServerHandle>> RunServer(const ServerConfig& config);

}  // namespace cart::server
