// cartd's config file (`cartd --config FILE`, docs/architecture.md "cartd config"): one table of
// keys, which the parser, its unknown-key error and `cartd --help` all read.

#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <cmath>
#include <functional>

#include "common/status.h"
#include "common/strings.h"
#include "common/version.h"
#include "common/yaml.h"
#include "server/server.h"

namespace cart::server {
namespace {

// One value of the file, with what its errors name: "<source>:<line>: <key>: <reason>".
struct Value {
  std::string_view source;
  const YAML::Node& node;
  std::string key;

  absl::Status Error(const std::string& what) const { return Error(node, key, what); }
  absl::Status Error(const YAML::Node& at, const std::string& name, const std::string& what) const {
    return absl::InvalidArgumentError(
        StrCat(source, ":", at.Mark().line + 1, ": ", name, ": ", what));
  }
  absl::StatusOr<std::string> Scalar() const {
    if (!node.IsScalar()) return Error("must be a single value");
    return node.Scalar();
  }
  absl::StatusOr<int64_t> Integer(int64_t min, int64_t max) const {
    CART_ASSIGN_OR_RETURN(std::string text, Scalar());
    std::optional<int64_t> v = ParseInt64(text);
    if (!v || *v < min) return Error(StrCat("'", text, "' is not an integer >= ", min));
    return std::min(*v, max);  // beyond any sensible bound: clamped, not refused
  }
};

struct Key {
  std::string_view name;
  std::string_view help;  // what it sets (the default comes from ServerConfig, see Shown)
  std::function<absl::Status(const Value&, ServerConfig&)> apply;
  std::function<std::string(const ServerConfig&)> show;  // the value as the file would say it
};

constexpr int64_t kNoMax = INT64_MAX;

Key Text(std::string_view name, std::string ServerConfig::*field, std::string_view help) {
  return {name, help,
          [field](const Value& v, ServerConfig& c) -> absl::Status {
            CART_ASSIGN_OR_RETURN(c.*field, v.Scalar());
            return absl::OkStatus();
          },
          [field](const ServerConfig& c) { return c.*field; }};
}

template <typename Int>
Key Integer(std::string_view name, Int ServerConfig::*field, int64_t min, int64_t max,
            std::string_view help) {
  return {name, help,
          [field, min, max](const Value& v, ServerConfig& c) -> absl::Status {
            CART_ASSIGN_OR_RETURN(int64_t n, v.Integer(min, max));
            c.*field = static_cast<Int>(n);
            return absl::OkStatus();
          },
          [field](const ServerConfig& c) { return std::to_string(c.*field); }};
}

// A duration, written as a whole number of `unit`s (absl::Seconds(1), absl::Minutes(1), ...).
Key Duration(std::string_view name, absl::Duration ServerConfig::*field, absl::Duration unit,
             int64_t min, int64_t max, std::string_view help) {
  return {name, help,
          [field, unit, min, max](const Value& v, ServerConfig& c) -> absl::Status {
            CART_ASSIGN_OR_RETURN(int64_t n, v.Integer(min, max));
            c.*field = n * unit;  // saturates at infinity
            return absl::OkStatus();
          },
          [field, unit](const ServerConfig& c) { return std::to_string(c.*field / unit); }};
}

Key OneOf(std::string_view name, std::string ServerConfig::*field, std::vector<std::string> allowed,
          std::string_view help) {
  return {name, help,
          [field, allowed](const Value& v, ServerConfig& c) -> absl::Status {
            CART_ASSIGN_OR_RETURN(std::string text, v.Scalar());
            if (std::find(allowed.begin(), allowed.end(), text) == allowed.end()) {
              return v.Error(StrCat("'", text, "' is not ", StrJoin(allowed, " or ")));
            }
            c.*field = text;
            return absl::OkStatus();
          },
          [field](const ServerConfig& c) { return c.*field; }};
}

// A number >= min, written as a decimal ("0.31", "2e2").
Key Number(std::string_view name, double ServerConfig::*field, double min, std::string_view help) {
  return {name, help,
          [field, min](const Value& v, ServerConfig& c) -> absl::Status {
            CART_ASSIGN_OR_RETURN(std::string text, v.Scalar());
            std::optional<double> n = ParseDouble(text);
            if (!n || !std::isfinite(*n) || *n < min) {
              return v.Error(StrCat("'", text, "' is not a number >= ", min));
            }
            c.*field = *n;
            return absl::OkStatus();
          },
          [field](const ServerConfig& c) { return StrCat(c.*field); }};
}

Key Bool(std::string_view name, bool ServerConfig::*field, std::string_view help) {
  return {name, help,
          [field](const Value& v, ServerConfig& c) -> absl::Status {
            CART_ASSIGN_OR_RETURN(std::string text, v.Scalar());
            const std::optional<bool> on = ParseBool(text);
            if (!on) return v.Error(StrCat("'", text, "' is not one of ", kBoolSpellings));
            c.*field = *on;
            return absl::OkStatus();
          },
          [field](const ServerConfig& c) -> std::string { return c.*field ? "true" : "false"; }};
}

// `artifact_store: {kind: cartd}` (the default: <data_dir>/artifacts, every byte through cartd)
// or `{kind: shared_fs, path: /mnt/lab/cart}` (a filesystem the workers mount too).
absl::Status ApplyArtifactStore(const Value& v, ServerConfig& config) {
  if (!v.node.IsMap()) {
    return v.Error("must be a mapping: {kind: cartd} or {kind: shared_fs, path: DIR}");
  }
  std::string kind, path;
  for (const auto& kv : v.node) {
    const std::string key = kv.first.as<std::string>();
    if (key != "kind" && key != "path") {
      return v.Error(kv.first, StrCat("artifact_store.", key), "unknown key (known: kind, path)");
    }
    if (!kv.second.IsScalar()) {
      return v.Error(kv.second, StrCat("artifact_store.", key), "must be a single value");
    }
    (key == "kind" ? kind : path) = kv.second.Scalar();
  }
  if (kind == "cartd") {
    if (!path.empty()) {
      return v.Error(v.node, "artifact_store.path",
                     "kind cartd keeps its artifacts under data_dir; a path needs kind shared_fs");
    }
    config.shared_artifact_path.clear();
  } else if (kind == "shared_fs") {
    if (path.empty() || path[0] != '/') {
      return v.Error(v.node, "artifact_store.path",
                     StrCat("'", path, "' is not an absolute path (kind shared_fs needs one)"));
    }
    config.shared_artifact_path = path;
  } else {
    return v.Error(v.node, "artifact_store.kind", StrCat("'", kind, "' is not cartd or shared_fs"));
  }
  return absl::OkStatus();
}

absl::Status ApplyHttpHosts(const Value& v, ServerConfig& config) {
  CART_ASSIGN_OR_RETURN(std::string text, v.Scalar());
  std::vector<std::string> hosts;
  for (const std::string& part : Split(text, ',')) {
    const std::string name = ToLower(Trim(part));
    if (name.empty()) continue;
    if (name.find_first_of(" :/[]") != std::string::npos || name.size() > 253) {
      return v.Error(
          StrCat("'", name, "' is not a host name (give names without ports, comma-separated)"));
    }
    hosts.push_back(name);
  }
  config.http_hosts = std::move(hosts);
  return absl::OkStatus();
}

// user_budgets: {user: device-hours, ...}, each > 0.
absl::Status ApplyUserBudgets(const Value& v, ServerConfig& config) {
  if (!v.node.IsMap()) return v.Error("must be a mapping {user: device-hours, ...}");
  std::map<std::string, double> budgets;
  for (const auto& kv : v.node) {
    const std::string user = kv.first.as<std::string>();
    const std::optional<double> hours =
        kv.second.IsScalar() ? ParseDouble(kv.second.Scalar()) : std::nullopt;
    if (user.empty() || !hours || !std::isfinite(*hours) || !(*hours > 0)) {
      return v.Error(kv.second, StrCat(v.key, ".", user), "must be a number of device-hours > 0");
    }
    budgets[user] = *hours;
  }
  config.user_budgets = std::move(budgets);
  return absl::OkStatus();
}

const std::vector<Key>& Keys() {
  using C = ServerConfig;
  static const auto* keys = new std::vector<Key>{
      Text("listen", &C::listen, "the gRPC address, host:port"),
      Text("data_dir", &C::data_dir, "the SQLite file and the artifact store"),
      Text("tokens", &C::tokens_file, "the tokens file, 'TOKEN ROLE NAME' lines (none: no auth)"),
      Text("tls_cert", &C::tls_cert_file,
           "PEM certificate chain (with tls_key: TLS on both ports)"),
      Text("tls_key", &C::tls_key_file, "PEM private key"),
      Bool("insecure", &C::insecure, "allow plaintext on a non-loopback address"),
      Duration("lease_ttl", &C::lease_ttl, absl::Seconds(1), 1, kNoMax,
               "seconds a lease lasts without a heartbeat"),
      Duration("max_acquire_wait", &C::max_acquire_wait, absl::Seconds(1), 0, kNoMax,
               "seconds of AcquireJob's longest long poll"),
      Integer("max_threads", &C::max_threads, 16, 1 << 20,
              "gRPC server threads (each call in flight holds one)"),
      Integer("max_sweep_bytes", &C::max_sweep_bytes, 1024, kNoMax,
              "the most bytes one sweep's runs may hold in configs and keys"),
      Integer("max_runs_per_sweep", &C::max_runs_per_sweep, 1, kNoMax,
              "the most runs a sweep may expand to"),
      Integer("max_artifact_bytes", &C::max_artifact_bytes, 1, kNoMax,
              "bytes of the largest checkpoint upload"),
      Integer("min_free_artifact_bytes", &C::min_free_artifact_bytes, 0, kNoMax,
              "uploads that would leave fewer bytes of free disk are refused"),
      Integer("min_free_store_bytes", &C::min_free_store_bytes, 0, kNoMax,
              "below this much free disk under data_dir cartd takes no new change and hands out "
              "no job until there is room (0: only a failed write tells)"),
      Integer("max_artifact_store_bytes", &C::max_artifact_store_bytes, 0, kNoMax,
              "the artifact store's quota in bytes (0: none)"),
      {"artifact_store",
       "{kind: cartd} (under data_dir) or {kind: shared_fs, path: DIR} (docs/design.md Storage)",
       ApplyArtifactStore,
       [](const C& c) -> std::string {
         return c.shared_artifact_path.empty()
                    ? "{kind: cartd}"
                    : StrCat("{kind: shared_fs, path: ", c.shared_artifact_path, "}");
       }},
      Integer("keep_checkpoints_per_run", &C::keep_checkpoints_per_run, 0, kNoMax,
              "checkpoints each run keeps (plus those derived runs name; 0: all)"),
      Integer("max_log_lines_per_attempt", &C::max_log_lines_per_attempt, 1, kNoMax,
              "worker log lines stored per attempt"),
      Integer("max_follows_per_caller", &C::max_follows_per_caller, 1, 1 << 20,
              "open follow streams per caller"),
      Integer("max_downloads_per_caller", &C::max_downloads_per_caller, 1, 1 << 20,
              "checkpoint downloads streaming at once per caller"),
      Integer("max_polls_per_token", &C::max_polls_per_token, 1, 1 << 20,
              "AcquireJob long polls held at once per worker token"),
      Integer("min_worker_protocol", &C::min_worker_protocol, 1, kWorkerProtocol,
              "oldest worker protocol accepted at registration"),
      Integer("max_workers_per_token", &C::max_workers_per_token, 1, 1 << 20,
              "worker ids one worker token may register"),
      Duration("stream_send_timeout", &C::stream_send_timeout, absl::Seconds(1), 1, 86'400,
               "seconds a download's next chunk may wait for its client before it is cancelled"),
      Integer("max_big_reads_per_caller", &C::max_big_reads_per_caller, 1, 1 << 20,
              "large reads in progress per caller"),
      Integer("max_big_reads", &C::max_big_reads, 1, 1 << 20, "large reads in progress in all"),
      OneOf("placement", &C::placement, {"earliest_finish", "first_fit"},
            "how free workers get runs (docs/design.md Placement)"),
      OneOf("store_sync", &C::store_sync, {"full", "normal"},
            "full: every commit fsync'ed, acknowledged results survive a power cut; normal: "
            "only at checkpoints (faster ingest, a cut loses the last commits)"),
      Integer("max_user_priority", &C::max_user_priority, -1'000'000, 1'000'000,
              "the highest sweep priority a user may set"),
      Duration("fair_share_half_life", &C::fair_share_half_life, absl::Hours(1), 0, 100'000,
               "hours; within a priority level the owner with the fewest decayed GPU-hours goes "
               "first (0: off)"),
      Bool("preemption", &C::preemption,
           "stop a run at a checkpoint for waiting work that outranks it"),
      Duration("preempt_interval", &C::preempt_interval, absl::Minutes(1), 1, 1'000'000,
               "minutes; a run is preempted at most once per this"),
      Bool("raise_micro_batch", &C::raise_micro_batch,
           "on a GPU with room, train a run with accumulation at a larger micro-batch, the "
           "global batch kept"),
      Number("user_budget_device_hours", &C::user_budget_device_hours, 0,
             "device-hours each user's runs may use in all (0: no budget; docs/operations.md "
             "Budgets)"),
      {"user_budgets", "{user: device-hours, ...}: budgets of named users over the one above",
       ApplyUserBudgets,
       [](const C& c) {
         std::vector<std::string> items;
         for (const auto& [user, hours] : c.user_budgets)
           items.push_back(StrCat(user, ": ", hours));
         return items.empty() ? std::string() : StrCat("{", StrJoin(items, ", "), "}");
       }},
      {"http_listen", "the dashboard, JSON API and /metrics, host:port or 'off'",
       [](const Value& v, C& c) -> absl::Status {
         CART_ASSIGN_OR_RETURN(std::string text, v.Scalar());
         c.http_listen = text == "off" ? std::string() : text;
         return absl::OkStatus();
       },
       [](const C& c) { return c.http_listen.empty() ? std::string("off") : c.http_listen; }},
      {"http_hosts", "more host names the HTTP port answers to, comma-separated", ApplyHttpHosts,
       [](const C& c) { return StrJoin(c.http_hosts, ", "); }},
      Text("web_dir", &C::web_dir, "the dashboard's pages"),
      Duration("http_idle_timeout", &C::http_idle_timeout, absl::Seconds(1), 1, 86'400,
               "seconds a request has to arrive on a new or idle connection"),
      Integer("http_max_connections", &C::http_max_connections, 16, 1 << 20,
              "HTTP connections held at once"),
      Integer("http_max_connections_per_client", &C::http_max_connections_per_client, 1, 1 << 20,
              "HTTP connections one client address may hold"),
      Text("smtp_host", &C::smtp_host,
           "the SMTP server notification mail goes through (none: no e-mail)"),
      Integer("smtp_port", &C::smtp_port, 1, 65535, "its port"),
      OneOf("smtp_tls", &C::smtp_tls, {"none", "starttls", "implicit"},
            "TLS to it: none, starttls, or implicit (port 465 style)"),
      Text("smtp_username", &C::smtp_username, "its login (AUTH PLAIN; none: no login)"),
      Text("smtp_password_file", &C::smtp_password_file,
           "a file holding the login's password (its first line)"),
      Text("smtp_from", &C::smtp_from, "the address notification mail comes from"),
      Duration("notify_retry_base_ms", &C::notify_retry_base, absl::Milliseconds(1), 1, kNoMax,
               "milliseconds before a failed delivery's first retry (then doubling)"),
      Duration("notify_retry_max", &C::notify_retry_max, absl::Seconds(1), 1, kNoMax,
               "seconds between retries at most"),
      Duration("notify_give_up_after", &C::notify_give_up_after, absl::Seconds(1), 1, kNoMax,
               "seconds after which an undelivered notification is given up"),
      Duration("notify_scan_interval_ms", &C::notify_scan_interval, absl::Milliseconds(1), 10,
               kNoMax, "milliseconds between looks for new events and the timed checks"),
      Duration("notify_stuck_floor", &C::notify_stuck_floor, absl::Seconds(1), 1, kNoMax,
               "seconds without progress a run needs at least to count as stuck"),
      Text("notify_ca_file", &C::notify_ca_file,
           "CA bundle for https webhooks and SMTP over TLS (none: the system's)"),
      Number("energy_price_per_kwh", &C::energy_price_per_kwh, 0,
             "what a kWh costs, in energy_currency (0: no cost shown)"),
      Text("energy_currency", &C::energy_currency, "the currency of energy_price_per_kwh"),
      Number("co2_grams_per_kwh", &C::co2_grams_per_kwh, 0,
             "grams of CO2 emitted per kWh where the lab draws power (0: not shown)"),
      Text("public_url", &C::public_url,
           "the dashboard's address as subscribers reach it, linked from notifications"),
  };
  return *keys;
}

}  // namespace

const std::vector<std::string_view>& ConfigKeys() {
  static const auto* names = [] {
    auto* n = new std::vector<std::string_view>;
    for (const Key& k : Keys()) n->push_back(k.name);
    return n;
  }();
  return *names;
}

std::string ConfigKeysHelp(const ServerConfig& defaults) {
  std::string out;
  for (const Key& k : Keys()) {
    const std::string shown = k.show(defaults);
    out += StrCat("  ", k.name, ": ", k.help, " (default: ", shown.empty() ? "none" : shown, ")\n");
  }
  return out;
}

absl::Status ApplyConfigYaml(std::string_view text, std::string_view source, ServerConfig& config) {
  CART_ASSIGN_OR_RETURN(YAML::Node root, LoadYaml(text, source));
  if (root.IsNull()) return absl::OkStatus();
  if (!root.IsMap()) {
    return absl::InvalidArgumentError(StrCat(source, ": a cartd config must be a mapping"));
  }
  for (const auto& kv : root) {
    const Value value{source, kv.second, kv.first.as<std::string>()};
    const std::vector<Key>& keys = Keys();
    auto key =
        std::find_if(keys.begin(), keys.end(), [&](const Key& k) { return k.name == value.key; });
    if (key == keys.end()) {
      return value.Error(kv.first, value.key,
                         StrCat("unknown key (known: ", StrJoin(ConfigKeys(), ", "), ")"));
    }
    CART_RETURN_IF_ERROR(key->apply(value, config));
  }
  return absl::OkStatus();
}

}  // namespace cart::server
