// cartd: flags and an optional YAML config file (flags win) into a ServerConfig, then RunServer.
// SIGTERM / SIGINT stop it gracefully (ServerHandle::Shutdown) with exit status 0.

#include <signal.h>
#include <sys/resource.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <string>

#include "common/file.h"
#include "common/strings.h"
#include "common/version.h"
#include "server/server.h"

namespace {

// Written by the signal handler, read by main: the only way a signal reaches the daemon.
int g_stop_pipe[2] = {-1, -1};

void OnStopSignal(int signal_number) {
  const unsigned char byte = static_cast<unsigned char>(signal_number);
  [[maybe_unused]] ssize_t written = write(g_stop_pipe[1], &byte, 1);
}

int Fail(const std::string& message) {
  std::fprintf(stderr, "cartd: %s\n", message.c_str());
  return 1;
}

}  // namespace

int main(int argc, char** argv) {
  using cart::StrCat;
  CLI::App app{"cartd: the CART Lab scheduler daemon (sweeps, runs, leases, metrics, artifacts)"};
  std::string config_file;
  std::string listen;
  std::string data_dir;
  std::string tokens;
  std::string tls_cert;
  std::string tls_key;
  int64_t lease_ttl_s = 0;
  bool insecure = false;
  std::string http_listen;
  std::string web_dir;
  app.add_option("--config", config_file,
                 "YAML config file of the keys below (docs/architecture.md, cartd config); "
                 "flags override it");
  {
    cart::server::ServerConfig defaults;
    defaults.http_listen = "127.0.0.1:8080";  // as main() sets them below
#ifdef CART_WEB_DIR
    defaults.web_dir = CART_WEB_DIR;
#endif
    app.footer(cart::StrCat("Config file keys (durations in the unit named):\n",
                            cart::server::ConfigKeysHelp(defaults)));
  }
  app.add_option("--listen", listen, "host:port to serve on (default 127.0.0.1:7070)");
  app.add_option("--http", http_listen,
                 "host:port of the dashboard, JSON API and /metrics, or 'off' (default "
                 "127.0.0.1:8080; docs/dashboard.md)");
  app.add_option("--web-dir", web_dir,
                 "the dashboard's pages (default: dashboards/web of the "
                 "source tree cartd was built from)");
  app.add_option("--data-dir", data_dir, "database and artifacts (default ./var/cart)");
  app.add_option("--tokens", tokens, "tokens file: '<token> <role> <name>' lines");
  app.add_option("--tls-cert", tls_cert, "PEM certificate chain for TLS");
  app.add_option("--tls-key", tls_key, "PEM private key for TLS");
  app.add_option("--lease-ttl", lease_ttl_s, "lease TTL, seconds (default 60)")
      ->check(CLI::Range(int64_t{1}, int64_t{86400}));
  app.add_flag("--insecure", insecure,
               "allow a non-loopback address without TLS and tokens (trusted networks only)");
  app.set_version_flag("--version", std::string("cartd ") + cart::kVersion);
  CLI11_PARSE(app, argc, argv);

  cart::server::ServerConfig config;
  config.http_listen = "127.0.0.1:8080";
#ifdef CART_WEB_DIR
  config.web_dir = CART_WEB_DIR;
#endif
  if (!config_file.empty()) {
    absl::StatusOr<std::string> text = cart::ReadWholeFile(config_file);
    if (!text.ok()) return Fail(cart::Message(text.status()));
    absl::Status applied = cart::server::ApplyConfigYaml(*text, config_file, config);
    if (!applied.ok()) return Fail(cart::Message(applied));
  }
  if (app.count("--listen")) config.listen = listen;
  if (app.count("--data-dir")) config.data_dir = data_dir;
  if (app.count("--tokens")) config.tokens_file = tokens;
  if (app.count("--tls-cert")) config.tls_cert_file = tls_cert;
  if (app.count("--tls-key")) config.tls_key_file = tls_key;
  if (app.count("--lease-ttl")) config.lease_ttl = absl::Seconds(lease_ttl_s);
  if (insecure) config.insecure = true;
  if (app.count("--http")) config.http_listen = http_listen == "off" ? std::string() : http_listen;
  if (app.count("--web-dir")) config.web_dir = web_dir;

  // Each HTTP connection and gRPC stream is a descriptor: take what the hard limit allows
  // (Debian's soft limit of 1,024 would cap the dashboard's port at 768 connections).
  rlimit files{};
  if (getrlimit(RLIMIT_NOFILE, &files) == 0 && files.rlim_cur < files.rlim_max) {
    files.rlim_cur = std::min<rlim_t>(files.rlim_max, 1 << 20);
    setrlimit(RLIMIT_NOFILE, &files);
  }

  // The stop signals are caught by whichever thread they hit (gRPC's included) and written to a
  // pipe that main reads: async-signal-safe, and independent of thread signal masks.
  if (pipe(g_stop_pipe) != 0) return Fail("cannot create the signal pipe");
  struct sigaction action {};
  action.sa_handler = OnStopSignal;
  sigemptyset(&action.sa_mask);
  action.sa_flags = SA_RESTART;
  sigaction(SIGTERM, &action, nullptr);
  sigaction(SIGINT, &action, nullptr);

  absl::StatusOr<std::unique_ptr<cart::server::ServerHandle>> server =
      cart::server::RunServer(config);
  if (!server.ok()) return Fail(cart::Message(server.status()));
  if (config.tokens_file.empty()) {
    std::fprintf(stderr, "cartd: no --tokens: authentication is off (every caller is admin)\n");
  }
  std::fprintf(stderr, "cartd %s listening on %s (%s), data in %s\n", cart::kVersion,
               StrCat((*server)->dial_address()).c_str(),
               config.tls_cert_file.empty() ? "plaintext" : "TLS", config.data_dir.c_str());
  if (!(*server)->dashboard_url().empty()) {
    std::fprintf(stderr, "cartd: dashboard at %s (metrics at %smetrics)\n",
                 (*server)->dashboard_url().c_str(), (*server)->dashboard_url().c_str());
  }

  unsigned char signal_number = 0;
  while (read(g_stop_pipe[0], &signal_number, 1) < 0 && errno == EINTR) {
  }
  std::fprintf(stderr, "cartd: %s received, shutting down\n",
               signal_number == SIGTERM ? "SIGTERM" : "SIGINT");
  (*server)->Shutdown();
  std::fprintf(stderr, "cartd: stopped\n");
  return 0;
}
