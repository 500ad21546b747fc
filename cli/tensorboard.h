#pragma once

// TensorBoard event files, written without TensorFlow or TensorBoard code: TFRecord framing
// (length, masked CRC-32C of the length, the record, masked CRC-32C of the record) around Event
// messages (proto/tensorboard/event.proto, compiled by protoc), the first carrying file_version
// "brain.Event:2", the
// rest one Summary of scalars (simple_value) each. TensorBoard's scalars are 32-bit floats, as
// every writer's (PyTorch's SummaryWriter, TensorFlow's): a value keeps float precision, its
// step and wall time exactly. What `cart export-metrics --format tensorboard` writes
// (export_metrics_command.cc); tests/python reads the files back with the tensorboard package.

#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/status/status.h"

namespace cart::cli {

// CRC-32C (Castagnoli, common/crc32c.h) of `data`, as TFRecord frames use it; and its "masked"
// form ((crc >> 15 | crc << 17) + 0xa282ead8).
uint32_t Crc32c(std::string_view data);
uint32_t MaskedCrc32c(std::string_view data);

class EventFileWriter {
 public:
  // The file's first record: file_version "brain.Event:2" at `wall_time_s`.
  explicit EventFileWriter(double wall_time_s);
  // One event at `step` and `wall_time_s` (Unix seconds) with a scalar per (tag, value).
  void AddScalars(int64_t step, double wall_time_s,
                  const std::vector<std::pair<std::string, double>>& values);
  // The events so far as a file's bytes.
  const std::string& bytes() const { return bytes_; }
  int64_t events() const { return events_; }
  // Writes them to `path` atomically (temp file + rename).
  absl::Status WriteTo(const std::string& path) const;

 private:
  void AddRecord(const std::string& event);
  std::string bytes_;
  int64_t events_ = 0;
};

}  // namespace cart::cli
