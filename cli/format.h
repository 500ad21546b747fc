#pragma once

// How `cart` shows runs and sweeps: state names and colours, progress bars, sizes, times, JSON,
// and the run table shared by `sweep show`, `runs ls` and dry runs.

#include <cstdint>
#include <string>
#include <vector>

#include "cart/v1/scheduler.pb.h"
#include "google/protobuf/message.h"

namespace cart::cli {

// "QUEUED", … (the enum name without "RUN_STATE_").
std::string StateName(cart::v1::RunState s);
// The state in colour when stdout is a terminal.
std::string Colored(const std::string& state);
// Device-hours for reading: "12.3 h", or four decimals below 0.1 (a CPU-scale sweep's runs).
std::string DeviceHoursText(double hours);
// A budget in one line: "sweep s: budget 40.0 h, 12.3 h spent, 1.0 h held by running runs,
// 26.7 h left (sweep file or admin)".
std::string BudgetText(const cart::v1::BudgetView& b);
// A message as indented JSON with the proto's field names.
std::string ToJson(const google::protobuf::Message& m);
// "512 MiB", "9.1 GiB".
std::string Mib(int64_t mib);
// Local time of a Unix time in microseconds; "-" for 0.
std::string When(int64_t us);
// "note (<who>, <when>):\n<text>\n"; empty when there is no note.
std::string NoteBlock(const cart::v1::Note& note);
// "tags and note, changed:" and one line per change (who, when, what it replaced); empty when
// there is none. A note is shown by its first line, cut at 60 characters.
// A run's attempts, each with who ran it and how it ended, and what it ran on: the first
// recorded environment whole, each later one by how it differs from the one before.
// One line on a run's device classes (docs/architecture.md "Device classes"): which card model
// trained it, SPANS CLASSES when its attempts trained on more than one, where its later attempts
// go, and whether its sweep balances seeds over classes.
std::string DeviceClassLine(const cart::v1::RunView& run);
std::string AttemptsBlock(
    const google::protobuf::RepeatedPtrField<cart::v1::AttemptView>& attempts);

std::string AnnotationHistoryBlock(
    const google::protobuf::RepeatedPtrField<cart::v1::AnnotationHistoryEntry>& history);
// Tag names joined by ", "; "-" when there are none.
std::string TagList(const google::protobuf::RepeatedPtrField<cart::v1::Tag>& tags);
// An expected finish (Unix microseconds) as "2026-12-03 14:10:00 (in 41.2 h)" against the local
// clock, "-" for 0 (no estimate).
std::string ExpectedAt(int64_t us);
// "[#####.......]  42%" from step / total_steps; empty without total_steps.
std::string Progress(const cart::v1::RunView& r);
// The config keys whose value differs between the runs.
std::vector<std::string> VaryingKeys(
    const google::protobuf::RepeatedPtrField<cart::v1::RunView>& runs);
// The run table: id, name, (state, progress, loss, ρ), the varying keys, parameter counts and
// memory; a dry run adds tokens and the estimated RTX 3090 hours.
// What the two MFU columns count, printed under a table that has them (docs/gpu.md "Two MFUs").
inline constexpr const char* kMfuLegend =
    "mfu: model FLOPs (matmuls and attention products, attention in full T x T); mfu 6N: 6 x "
    "effective parameters per token, the CART paper's count";

void PrintRuns(const google::protobuf::RepeatedPtrField<cart::v1::RunView>& runs, bool dry_run);

}  // namespace cart::cli
