// bench-http-crowd: what a crowd costs the dashboard's HTTP port, printed, not asserted. The
// port (server/http/http_server.h, the class cartd serves its dashboard with) runs in this
// process, answering {"ok":true} and serving a live stream that sends an event every 2 s, as a
// sweep's does. Clients on 10 loopback addresses (127.0.0.1 .. 127.0.0.10) then hold
//   - `--idle` connections that sent half a request line and nothing more, and
//   - `--streams` live streams,
// and the bench prints the process's threads and resident memory before and while they are held
// (per idle connection: the growth over the connections held, streams included), and a
// newcomer's request time, p50 / p99 over 50 requests, alone and with the crowd.
//
// Usage: bench-http-crowd [--idle N] [--streams N]

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "common/strings.h"
#include "server/http/http_server.h"

namespace {

namespace http = cart::server::http;
using cart::StrCat;

// A TCP connection to 127.0.0.1:port from 127.0.0.`from`; -1 on failure.
int Connect(int port, int from) {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) return -1;
  sockaddr_in local{};
  local.sin_family = AF_INET;
  local.sin_addr.s_addr = htonl((127u << 24) | static_cast<uint32_t>(from));
  sockaddr_in remote{};
  remote.sin_family = AF_INET;
  remote.sin_port = htons(static_cast<uint16_t>(port));
  remote.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (bind(fd, reinterpret_cast<sockaddr*>(&local), sizeof(local)) != 0 ||
      connect(fd, reinterpret_cast<sockaddr*>(&remote), sizeof(remote)) != 0) {
    close(fd);
    return -1;
  }
  return fd;
}

bool SendAll(int fd, const std::string& text) {
  return send(fd, text.data(), text.size(), MSG_NOSIGNAL) == static_cast<ssize_t>(text.size());
}

// Milliseconds one GET /healthz takes from 127.0.0.200, connection included; -1 when it fails.
double Newcomer(int port) {
  const auto start = std::chrono::steady_clock::now();
  const int fd = Connect(port, 200);
  if (fd < 0) return -1;
  if (!SendAll(fd, "GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n")) {
    close(fd);
    return -1;
  }
  std::string answer;
  char buffer[4096];
  ssize_t n;
  while ((n = read(fd, buffer, sizeof(buffer))) > 0) answer.append(buffer, static_cast<size_t>(n));
  close(fd);
  if (answer.rfind("HTTP/1.1 200", 0) != 0) return -1;
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start)
      .count();
}

std::string Percentiles(int port) {
  std::vector<double> ms;
  int failed = 0;
  for (int i = 0; i < 50; ++i) {
    const double t = Newcomer(port);
    if (t < 0) {
      ++failed;
    } else {
      ms.push_back(t);
    }
  }
  if (ms.empty()) return "no request answered";
  std::sort(ms.begin(), ms.end());
  char text[128];
  std::snprintf(text, sizeof(text), "p50 %.2f ms, p99 %.2f ms, %d of 50 not answered",
                ms[ms.size() / 2], ms[std::min(ms.size() - 1, ms.size() * 99 / 100)], failed);
  return text;
}

int Threads() {
  int n = 0;
  for ([[maybe_unused]] const auto& entry :
       std::filesystem::directory_iterator("/proc/self/task")) {
    ++n;
  }
  return n;
}

double RssMib() {
  std::ifstream status("/proc/self/status");
  std::string line;
  while (std::getline(status, line)) {
    if (line.rfind("VmRSS:", 0) == 0) return std::stod(line.substr(6)) / 1024.0;
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  int idle = 1000;
  int streams = 300;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string flag = argv[i];
    if (flag == "--idle") idle = std::stoi(argv[i + 1]);
    if (flag == "--streams") streams = std::stoi(argv[i + 1]);
  }
  rlimit files{};
  getrlimit(RLIMIT_NOFILE, &files);
  files.rlim_cur = files.rlim_max;
  setrlimit(RLIMIT_NOFILE, &files);

  http::HttpServerOptions options;
  options.listen = "127.0.0.1:0";
  options.thread_nice = 0;
  auto server = http::HttpServer::Start(options, [](const http::Request& request) {
    http::Response r;
    if (request.path == "/live") {
      r.content_type = "text/event-stream";
      r.stream = [sent = 0]() mutable {
        http::StreamPoll poll;
        poll.chunk = StrCat("event: update\ndata: {\"n\":", sent++, "}\n\n");
        poll.again = absl::Seconds(2);
        return poll;
      };
      return r;
    }
    r.body = R"({"ok":true})";
    return r;
  });
  if (!server.ok()) {
    std::fprintf(stderr, "bench-http-crowd: %s\n", server.status().ToString().c_str());
    return 1;
  }
  const int port = (*server)->port();
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  const int threads0 = Threads();
  const double rss0 = RssMib();
  std::printf("HTTP port alone: %d threads, RSS %.1f MiB; a newcomer's GET: %s\n", threads0, rss0,
              Percentiles(port).c_str());

  std::vector<int> held;
  int failed = 0;
  for (int i = 0; i < idle; ++i) {
    const int fd = Connect(port, 1 + i % 10);
    if (fd < 0 || !SendAll(fd, "GET /api/v1/swe")) {
      ++failed;
      continue;
    }
    held.push_back(fd);
  }
  for (int i = 0; i < streams; ++i) {
    const int fd = Connect(port, 1 + i % 10);
    if (fd < 0 || !SendAll(fd, "GET /live HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")) {
      ++failed;
      continue;
    }
    held.push_back(fd);
  }
  std::this_thread::sleep_for(std::chrono::seconds(3));  // the streams send an event or two
  const int threads1 = Threads();
  const double rss1 = RssMib();
  std::printf(
      "with %d half-sent connections and %d live streams held from 10 addresses (%d failed to "
      "open):\n  %d threads (%+d), RSS %.1f MiB (%+.1f MiB: %.0f bytes per connection held)\n"
      "  a newcomer's GET: %s\n",
      idle, streams, failed, threads1, threads1 - threads0, rss1, rss1 - rss0,
      (rss1 - rss0) * 1024 * 1024 / std::max<size_t>(1, held.size()), Percentiles(port).c_str());
  for (int fd : held) close(fd);
  (*server)->Shutdown();
  return 0;
}
