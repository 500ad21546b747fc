// How `cart` shows runs and sweeps (format.h).

#include "cli/format.h"

#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <ctime>
#include <set>
#include <string_view>

#include "absl/time/clock.h"
#include "cli/table.h"
#include "common/strings.h"
#include "config/devices.h"
#include "google/protobuf/util/json_util.h"

namespace cart::cli {

using cart::v1::RunState;

std::string StateName(RunState s) {
  std::string n = cart::v1::RunState_Name(s);
  return n.size() > 10 ? n.substr(10) : n;  // without "RUN_STATE_"
}

std::string Colored(const std::string& state) {
  if (!isatty(fileno(stdout))) return state;
  const char* c = "";
  if (state == "SUCCEEDED") c = "\033[32m";
  if (state == "RUNNING" || state == "LEASED") c = "\033[36m";
  if (state == "FAILED") c = "\033[31m";
  if (state == "CANCELLED" || state == "BLOCKED") c = "\033[33m";
  return *c ? StrCat(c, state, "\033[0m") : state;
}

std::string ToJson(const google::protobuf::Message& m) {
  std::string out;
  google::protobuf::util::JsonPrintOptions o;
  o.add_whitespace = true;
  o.preserve_proto_field_names = true;
  google::protobuf::util::MessageToJsonString(m, &out, o);
  return out;
}

std::string Mib(int64_t mib) {
  return mib >= 1024 ? fmt::format("{:.1f} GiB", mib / 1024.0) : fmt::format("{} MiB", mib);
}

std::string When(int64_t us) {
  if (us <= 0) return "-";
  std::time_t t = us / 1'000'000;
  std::tm local{};
  // localtime_r: std::localtime returns one static buffer, which another thread may overwrite.
  if (localtime_r(&t, &local) == nullptr) return "-";
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%d %H:%M:%S", &local);
  return buf;
}

std::string ExpectedAt(int64_t us) {
  if (us <= 0) return "-";
  const double hours = static_cast<double>(us - absl::ToUnixMicros(absl::Now())) / 3.6e9;
  if (hours < 0) return StrCat(When(us), " (overdue)");
  return StrCat(When(us), hours < 1 ? fmt::format(" (in {:.0f} min)", hours * 60)
                                    : fmt::format(" (in {:.1f} h)", hours));
}

std::string Progress(const cart::v1::RunView& r) {
  if (r.total_steps() <= 0) return "";
  const double f = std::min(1.0, static_cast<double>(r.step()) / r.total_steps());
  const int width = 12;
  const int full = static_cast<int>(f * width);
  return StrCat("[", std::string(full, '#'), std::string(width - full, '.'), "] ",
                fmt::format("{:>3.0f}%", 100 * f));
}

// The config keys that differ between the runs (what a reader needs to tell them apart).
std::vector<std::string> VaryingKeys(
    const google::protobuf::RepeatedPtrField<cart::v1::RunView>& runs) {
  std::vector<std::string> keys;
  if (runs.empty()) return keys;
  for (const auto& [k, v] : runs[0].params()) {
    for (const auto& r : runs) {
      auto it = r.params().find(k);
      if (it == r.params().end() || it->second != v) {
        keys.push_back(k);
        break;
      }
    }
  }
  return keys;
}

std::string NoteBlock(const cart::v1::Note& note) {
  if (note.text().empty()) return "";
  return fmt::format("note ({}, {}):\n{}\n", note.who(), When(note.at_us()), note.text());
}

std::string DeviceClassLine(const cart::v1::RunView& run) {
  const auto& classes = run.device_classes();
  std::string line;
  if (classes.empty()) {
    line = "device class: none yet";
  } else if (classes.size() == 1) {
    line = "device class: " + classes[0];
  } else {
    line = fmt::format(
        "device classes: {} — SPANS CLASSES: its attempts trained on more than one card model, "
        "whose results CUDA does not promise equal",
        StrJoin(std::vector<std::string>(classes.begin(), classes.end()), ", then "));
  }
  if (run.any_device_class()) {
    line += "; later attempts may go to any class (unpinned: `cart runs pin` undoes it)";
  } else if (!run.checkpoint_class().empty()) {
    line += fmt::format("; later attempts stay on {} (its latest checkpoint's)",
                        run.checkpoint_class());
  }
  if (run.balanced()) line += "; its sweep balances each config's seeds over the classes";
  return line;
}

std::string AttemptsBlock(
    const google::protobuf::RepeatedPtrField<cart::v1::AttemptView>& attempts) {
  if (attempts.empty()) return "";
  std::string out = "attempts (docs/architecture.md \"Environment records\"):\n";
  const cart::v1::AttemptView* before = nullptr;  // the last attempt with a record
  for (const auto& a : attempts) {
    out += fmt::format("  {}  {}{}  {}  {}{}\n", a.attempt(), a.worker_id(),
                       a.device_class().empty() ? "" : " [" + a.device_class() + "]",
                       When(a.leased_us()), a.outcome().empty() ? "running" : a.outcome(),
                       a.reason().empty() ? "" : ": " + a.reason());
    out += a.energy_measured() ? fmt::format("     energy: {:.0f} J ({:.3g} Wh, {})\n",
                                             a.energy_j(), a.energy_j() / 3.6e3, a.energy_source())
                               : "     energy: not measured\n";
    if (a.environment().empty()) {
      out += "     environment: not recorded (a worker of a release before the record)\n";
      continue;
    }
    if (before == nullptr) {
      for (const auto& item : a.environment()) {
        out += fmt::format("     {}: {}\n", item.key(), item.value());
      }
    } else {
      std::map<std::string, std::string> was;
      for (const auto& item : before->environment()) was[item.key()] = item.value();
      std::string changes;
      for (const auto& item : a.environment()) {
        auto it = was.find(item.key());
        if (it == was.end()) {
          changes += fmt::format("     {}: {} (new)\n", item.key(), item.value());
        } else if (it->second != item.value()) {
          changes += fmt::format("     {}: {} (was {})\n", item.key(), item.value(), it->second);
        }
        if (it != was.end()) was.erase(it);
      }
      for (const auto& [key, value] : was) {
        changes += fmt::format("     {}: gone (was {})\n", key, value);
      }
      out += changes.empty()
                 ? fmt::format("     environment: as attempt {}\n", before->attempt())
                 : fmt::format("     environment, where it differs from attempt {}:\n{}",
                               before->attempt(), changes);
    }
    before = &a;
  }
  return out;
}

std::string AnnotationHistoryBlock(
    const google::protobuf::RepeatedPtrField<cart::v1::AnnotationHistoryEntry>& history) {
  if (history.empty()) return "";
  auto shown = [](const std::string& note) {
    if (note.empty()) return std::string("(none)");
    std::string line = note.substr(0, note.find('\n'));
    const bool cut = line.size() > 60 || line.size() < note.size();
    if (line.size() > 60) line = ValidUtf8(line.substr(0, 60));
    return fmt::format("\"{}{}\"", line, cut ? "…" : "");
  };
  std::string out = "tags and note, changed:\n";
  for (const auto& e : history) {
    std::string what;
    if (e.kind() == "note") {
      what = fmt::format("note {} (was {})", shown(e.value()), shown(e.previous()));
    } else if (e.kind() == "tag removed") {
      what = fmt::format("tag removed: {} (set by {})", e.value(), e.previous());
    } else {
      what = fmt::format("{}: {}", e.kind(), e.value());
    }
    out += fmt::format("  {}  {}  {}\n", When(e.at_us()), e.who(), what);
  }
  return out;
}

std::string TagList(const google::protobuf::RepeatedPtrField<cart::v1::Tag>& tags) {
  std::string out;
  for (const auto& tag : tags) out += (out.empty() ? "" : ", ") + tag.name();
  return out.empty() ? "-" : out;
}

void PrintRuns(const google::protobuf::RepeatedPtrField<cart::v1::RunView>& runs, bool dry_run) {
  std::vector<std::string> keys = VaryingKeys(runs);
  Table t;
  std::vector<std::string> header = {"id", "name"};
  if (!dry_run) header.insert(header.end(), {"state", "progress", "loss", "rho", "mfu", "mfu 6N"});
  for (const auto& k : keys) header.push_back(k);
  header.insert(header.end(), {"stored", "effective", "mem est"});
  if (dry_run) header.insert(header.end(), {"tokens", "3090 h"});
  const bool tagged =
      std::any_of(runs.begin(), runs.end(), [](const auto& r) { return r.tags_size() > 0; });
  if (tagged) header.push_back("tags");
  // The device column, on a mixed fleet: which card model trained each run, and which runs'
  // attempts span models (docs/architecture.md "Device classes").
  std::set<std::string> classes;
  bool spans = false;
  for (const auto& r : runs) {
    classes.insert(r.device_classes().begin(), r.device_classes().end());
    spans = spans || r.device_classes_size() > 1;
  }
  const bool device_column = !dry_run && (classes.size() > 1 || spans);
  if (device_column) header.push_back("device");
  t.Header(header);
  bool any_mfu = false;
  for (const auto& r : runs) {
    std::vector<std::string> row = {std::to_string(r.run_id()), r.name()};
    if (!dry_run) {
      auto metric = [&](const char* name) {
        auto it = r.latest().find(name);
        return it == r.latest().end() ? std::string("-") : fmt::format("{:.4f}", it->second);
      };
      // Model FLOPs utilisation, logged by the worker beside tokens/s by each convention
      // (docs/gpu.md "Two MFUs").
      auto percent = [&](const char* name) {
        auto it = r.latest().find(name);
        if (it == r.latest().end()) return std::string("-");
        any_mfu = true;
        return fmt::format("{:.1f}%", 100 * it->second);
      };
      row.insert(row.end(), {Colored(StateName(r.state())), Progress(r), metric("loss"),
                             metric("rho_max"), percent("mfu"), percent("mfu_6n")});
    }
    for (const auto& k : keys) {
      auto it = r.params().find(k);
      row.push_back(it == r.params().end() ? "-" : it->second);
    }
    row.insert(row.end(),
               {fmt::format("{:.2f}M", r.stored_params() / 1e6),
                fmt::format("{:.2f}M", r.effective_params() / 1e6), Mib(r.memory_estimate_mib())});
    if (dry_run) {
      row.insert(row.end(), {fmt::format("{:.1f}M", r.tokens() / 1e6),
                             fmt::format("{:.2f}", r.est_hours_rtx3090())});
    }
    if (tagged) row.push_back(TagList(r.tags()));
    if (device_column) {
      std::vector<std::string> names;
      for (const std::string& c : r.device_classes()) names.push_back(config::ShortDeviceName(c));
      row.push_back(names.empty() ? std::string("-")
                                  : StrJoin(names, "+") + (names.size() > 1 ? " (SPANS)" : ""));
    }
    t.Row(row);
  }
  t.Print(std::cout);
  if (any_mfu) std::cout << kMfuLegend << "\n";
}

std::string DeviceHoursText(double hours) {
  return std::fabs(hours) < 0.1 && hours != 0 ? fmt::format("{:.4f} h", hours)
                                              : fmt::format("{:.1f} h", hours);
}

std::string BudgetText(const cart::v1::BudgetView& b) {
  return fmt::format(
      "{} {}: budget {}, {} spent, {} held by running runs, {} left ({})", b.scope(), b.name(),
      DeviceHoursText(b.limit_device_hours()), DeviceHoursText(b.spent_device_hours()),
      DeviceHoursText(b.held_device_hours()), DeviceHoursText(b.left_device_hours()), b.source());
}

}  // namespace cart::cli
