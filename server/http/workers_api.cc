// GET /api/v1/workers: the registered workers with their devices' recent readings.

#include <nlohmann/json.hpp>

#include "server/http/dashboard.h"
#include "server/http/internal/api_util.h"
#include "server/scheduler.h"

namespace cart::server::http {

using nlohmann::json;

Response Dashboard::ListWorkers() {
  json out = json::array();
  for (const WorkerStatus& w : scheduler_->ListWorkers(/*device_history=*/true)) {
    json worker{{"id", w.info.id},
                {"hostname", w.info.hostname},
                {"version", w.info.version},
                {"device_kind", w.info.device_kind},
                {"device_name", w.info.device_name},
                {"device_index", w.info.device_index},
                {"uuid", w.info.uuid},
                {"memory_bytes", w.info.memory_bytes},
                {"free_disk_bytes", w.info.free_disk_bytes},
                {"disk_floor_bytes", w.info.disk_floor_bytes},
                {"state", w.state},
                {"run_id", w.run_id},
                {"run_name", w.run_name},
                {"run_mfu", w.run_mfu ? Num(*w.run_mfu) : json(nullptr)},
                {"run_mfu_6n", w.run_mfu_6n ? Num(*w.run_mfu_6n) : json(nullptr)},
                {"speed", Num(w.speed)},
                {"speed_source", w.speed_source},
                {"idle_while_queued", w.idle_while_queued},
                {"idle_while_queued_hours", Num(w.idle_while_queued_s / 3600)},
                {"last_seen_us", w.last_seen_us}};
    // The recent readings as columns (what the sparklines draw), oldest first; a value a device
    // does not report (a CPU's temperature) is null.
    json t = json::array(), util = json::array(), mem = json::array(), temp = json::array(),
         power = json::array();
    for (const DeviceSample& d : w.device) {
      t.push_back(d.at_us / 1'000'000.0);
      util.push_back(Num(d.utilization));
      mem.push_back(d.memory_used_bytes);
      temp.push_back(d.temperature_c ? Num(*d.temperature_c) : json(nullptr));
      power.push_back(d.power_w ? Num(*d.power_w) : json(nullptr));
    }
    worker["device"] = {{"t", t},
                        {"utilization", util},
                        {"memory_used_bytes", mem},
                        {"temperature_c", temp},
                        {"power_w", power}};
    if (!w.device.empty()) {
      const DeviceSample& d = w.device.back();
      worker["latest"] = {
          {"at_us", d.at_us},
          {"utilization", Num(d.utilization)},
          {"memory_used_bytes", d.memory_used_bytes},
          {"memory_total_bytes", d.memory_total_bytes},
          {"temperature_c", d.temperature_c ? Num(*d.temperature_c) : json(nullptr)},
          {"power_w", d.power_w ? Num(*d.power_w) : json(nullptr)},
          {"sm_clock_hz", d.sm_clock_hz ? Num(*d.sm_clock_hz) : json(nullptr)},
          {"throttle_reasons", d.throttle_reasons ? json(*d.throttle_reasons) : json(nullptr)}};
    } else {
      worker["latest"] = nullptr;
    }
    out.push_back(std::move(worker));
  }
  return Json(json{{"workers", out}});
}

}  // namespace cart::server::http
