// Fuzz target: the HTTP port's request path, from the bytes a client sends to the answer: the
// connection's reading path and limits (server/http/http_server.h ParseRequest: chunked bodies,
// trailers and limits included), in one read and in small ones, then the
// dashboard's router and handlers (server/http/dashboard.h) over a real store with one sweep
// of a few runs. Authentication is off, as on a loopback cartd without a tokens file, so every
// route, changes included, is reachable. Streamed answers (live events) are not run: they wait
// for news.

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <string>
#include <string_view>

#include "common/clock.h"
#include "common/file.h"
#include "server/http/dashboard.h"
#include "server/http/http_server.h"
#include "server/scheduler.h"
#include "store/run_store.h"

namespace {

struct World {
  std::string dir;
  std::unique_ptr<cart::store::RunStore> store;
  std::unique_ptr<cart::server::Scheduler> scheduler;
  std::unique_ptr<cart::server::http::Dashboard> dashboard;
  cart::server::http::HttpServerOptions limits;
};

void Die(const char* what) {
  std::fprintf(stderr, "http_request_fuzz: %s\n", what);
  std::abort();
}

World& TheWorld() {
  static World* world = [] {
    auto* w = new World();
    char pattern[] = "/tmp/cart-http-fuzz-XXXXXX";
    if (mkdtemp(pattern) == nullptr) Die("mkdtemp failed");
    w->dir = pattern;
    std::filesystem::create_directories(w->dir + "/web/static");
    if (!cart::WriteFileAtomically(w->dir + "/web/index.html", "<!doctype html><title>t</title>")
             .ok() ||
        !cart::WriteFileAtomically(w->dir + "/web/static/main.js", "void 0;").ok()) {
      Die("cannot write the web folder");
    }
    cart::store::StoreOptions store_options;
    store_options.path = w->dir + "/cart.db";
    store_options.writer_cache_kib = 4096;
    store_options.reader_cache_kib = 1024;
    auto store = cart::store::RunStore::Open(store_options);
    if (!store.ok()) Die("cannot open the store");
    w->store = *std::move(store);
    w->scheduler = std::make_unique<cart::server::Scheduler>(w->store.get(), cart::Clock::Real(),
                                                             cart::server::SchedulerOptions{});
    cart::server::SubmitRequest submit;
    submit.spec_yaml =
        "name: fz\nbase: {d: 64, vocab: 100, P: 1, R: 2, steps: 10}\ngrid: {R: [1, 2]}\n"
        "seeds: [1, 2]\n";
    submit.file_name = "fz.yaml";
    submit.who = "admin:anonymous";
    if (!w->scheduler->SubmitSweep(submit).ok()) Die("cannot submit the seed sweep");
    cart::server::http::DashboardOptions options;
    options.web_dir = w->dir + "/web";
    options.stopping = [] { return true; };
    w->dashboard = std::make_unique<cart::server::http::Dashboard>(w->scheduler.get(), options);
    return w;
  }();
  return *world;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  World& world = TheWorld();
  const std::string_view bytes(reinterpret_cast<const char*>(data), size);
  cart::server::http::Parsed parsed = cart::server::http::ParseRequest(bytes, world.limits);
  // The same bytes in small reads (a size the input picks, 1..61 bytes) end the same way: how
  // a client's bytes arrive never changes what the port answers. Chunked bodies and trailers
  // are read across many calls this way.
  const cart::server::http::Parsed pieces =
      cart::server::http::ParseRequest(bytes, world.limits, 1 + size % 61);
  if (parsed.request.has_value() != pieces.request.has_value()) std::abort();
  if (!parsed.request) {
    if (parsed.refusal.status < 400 || parsed.refusal.status > 499) std::abort();
    if (pieces.refusal.status != parsed.refusal.status) std::abort();
    return 0;
  }
  if (parsed.request->body != pieces.request->body) std::abort();
  parsed.request->peer = "127.0.0.1";
  const cart::server::http::Response response = world.dashboard->Handle(*parsed.request);
  // Whatever was asked, the answer is a status the port can send.
  if (response.status < 100 || response.status > 599) std::abort();
  return 0;
}
