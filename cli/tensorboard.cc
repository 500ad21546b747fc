#include "cli/tensorboard.h"

#include <cstring>

#include "common/crc32c.h"
#include "common/file.h"

namespace cart::cli {
namespace {

// Protocol buffer wire format, the few pieces an Event needs.
void Varint(std::string& out, uint64_t v) {
  while (v >= 0x80) {
    out.push_back(static_cast<char>((v & 0x7F) | 0x80));
    v >>= 7;
  }
  out.push_back(static_cast<char>(v));
}
void Tag(std::string& out, int field, int wire_type) {
  Varint(out, (static_cast<uint64_t>(field) << 3) | static_cast<uint64_t>(wire_type));
}
template <typename T>
void Fixed(std::string& out, T value) {  // little-endian, as x86 and ARM Linux store it
  char bytes[sizeof(T)];
  std::memcpy(bytes, &value, sizeof(T));
  out.append(bytes, sizeof(T));
}
void Bytes(std::string& out, int field, std::string_view data) {
  Tag(out, field, 2);
  Varint(out, data.size());
  out.append(data);
}

// tensorflow.Event: wall_time = 1 (double), step = 2 (int64), file_version = 3 (string),
// summary = 5 (Summary). Summary: value = 1 (repeated Value). Value: tag = 1 (string),
// simple_value = 2 (float).
std::string EventHead(int64_t step, double wall_time_s) {
  std::string event;
  Tag(event, 1, 1);
  Fixed(event, wall_time_s);
  if (step != 0) {
    Tag(event, 2, 0);
    Varint(event, static_cast<uint64_t>(step));
  }
  return event;
}

}  // namespace

uint32_t Crc32c(std::string_view data) { return cart::Crc32c(0, data.data(), data.size()); }

uint32_t MaskedCrc32c(std::string_view data) {
  const uint32_t crc = Crc32c(data);
  return ((crc >> 15) | (crc << 17)) + 0xa282ead8u;
}

EventFileWriter::EventFileWriter(double wall_time_s) {
  std::string event = EventHead(0, wall_time_s);
  Bytes(event, 3, "brain.Event:2");
  AddRecord(event);
}

void EventFileWriter::AddScalars(int64_t step, double wall_time_s,
                                 const std::vector<std::pair<std::string, double>>& values) {
  std::string summary;
  for (const auto& [tag, value] : values) {
    std::string v;
    Bytes(v, 1, tag);
    Tag(v, 2, 5);
    Fixed(v, static_cast<float>(value));
    Bytes(summary, 1, v);
  }
  std::string event = EventHead(step, wall_time_s);
  Bytes(event, 5, summary);
  AddRecord(event);
  ++events_;
}

void EventFileWriter::AddRecord(const std::string& event) {
  std::string length;
  Fixed(length, static_cast<uint64_t>(event.size()));
  bytes_ += length;
  Fixed(bytes_, MaskedCrc32c(length));
  bytes_ += event;
  Fixed(bytes_, MaskedCrc32c(event));
}

absl::Status EventFileWriter::WriteTo(const std::string& path) const {
  return WriteFileAtomically(path, bytes_);
}

}  // namespace cart::cli
