// cart workers ls | drain.

#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <nlohmann/json.hpp>
#include <thread>

#include "cart/v1/scheduler.grpc.pb.h"
#include "cli/client.h"
#include "cli/commands.h"
#include "cli/format.h"
#include "cli/table.h"
#include "common/file.h"
#include "common/status.h"
#include "common/strings.h"
#include "rpc/client.h"

namespace cart::cli {
namespace {

using cart::v1::RunState;

struct DrainArgs {
  Conn conn;
  std::string id;
};

// cart workers ls
void ListCommand(const Conn& lc) {
  Client client = Client::Connect(lc);
  auto resp = client.Call<cart::v1::ListWorkersRequest, cart::v1::ListWorkersResponse>(
      &cart::v1::SchedulerService::Stub::ListWorkers, {});
  if (lc.json) {
    std::cout << ToJson(resp) << "\n";
    return;
  }
  Table t;
  t.Header({"worker", "host", "device", "memory", "speed", "state", "run", "util", "mem used",
            "temp", "mfu", "mfu 6N", "idle h", "last seen"});
  for (const auto& w : resp.workers()) {
    // Speed is a multiple of an RTX 3090, with where placement got it (docs/design.md). util,
    // mem used and temp are the device's latest reading (cart-worker --sample-interval); idle h
    // the device-hours it held no run while runs were queued.
    const bool read = w.has_latest() && w.state() != "lost";
    const cart::v1::DeviceSample& d = w.latest();
    t.Row({w.worker_id(), w.hostname(), w.device().kind() + " " + w.device().name(),
           Mib(w.device().memory_mib()), fmt::format("{:.2f}x ({})", w.speed(), w.speed_source()),
           w.state(), w.run_id() ? std::to_string(w.run_id()) : "-",
           read ? fmt::format("{:.0f}%", 100 * d.utilization()) : "-",
           read ? Mib(d.memory_used_mib()) : "-",
           read && d.has_temperature_c() ? fmt::format("{:.0f} C", d.temperature_c()) : "-",
           w.run_mfu() > 0 ? fmt::format("{:.1f}%", 100 * w.run_mfu()) : "-",
           w.run_mfu_6n() > 0 ? fmt::format("{:.1f}%", 100 * w.run_mfu_6n()) : "-",
           fmt::format("{:.2f}", w.idle_while_queued_hours()), When(w.last_seen_us())});
  }
  t.Print(std::cout);
  if (std::any_of(resp.workers().begin(), resp.workers().end(),
                  [](const auto& w) { return w.run_mfu() > 0; })) {
    std::cout << kMfuLegend << "\n";
  }
  // Why a worker takes nothing, under the table: its disk below its own floor.
  for (const auto& w : resp.workers()) {
    if (w.state() != "disk_full") continue;
    std::cout << w.worker_id() << ": disk full, " << Mib(w.free_disk_mib())
              << " free in its cache directory, below its floor of " << Mib(w.disk_floor_mib())
              << " (cart-worker --min-free-disk-mib): it takes no job until there is room\n";
  }
}

// cart workers drain ID
void DrainCommand(const DrainArgs& da) {
  Client client = Client::Connect(da.conn);
  cart::v1::DrainWorkerRequest req;
  req.set_worker_id(da.id);
  client.Call<cart::v1::DrainWorkerRequest, cart::v1::DrainWorkerResponse>(
      &cart::v1::SchedulerService::Stub::DrainWorker, req);
  std::cout << "draining " << da.id << ": it finishes its current job, then exits\n";
}

void RegisterWorkers(CLI::App& app) {
  CLI::App* workers = app.add_subcommand("workers", "List and drain workers");
  workers->require_subcommand(1);
  auto lc = std::make_shared<Conn>();
  CLI::App* ls = workers->add_subcommand("ls", "Registered workers");
  AddConnFlags(ls, *lc);
  OnRun(ls, [lc] { ListCommand(*lc); });
  auto da = std::make_shared<DrainArgs>();
  CLI::App* drain = workers->add_subcommand("drain", "Let a worker finish its job, then exit");
  drain->add_option("worker", da->id, "Worker id")->required();
  AddConnFlags(drain, da->conn);
  OnRun(drain, [da] { DrainCommand(*da); });
}

}  // namespace

void RegisterWorkersCommands(CLI::App& app) { RegisterWorkers(app); }

}  // namespace cart::cli
