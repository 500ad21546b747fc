#include "cli/tensorboard.h"

#include <cstring>

#include "common/crc32c.h"
#include "common/file.h"
#include "tensorboard/event.pb.h"

namespace cart::cli {
namespace {

// TFRecord's fixed-width fields: little-endian, as x86 and ARM Linux store them.
template <typename T>
void Fixed(std::string& out, T value) {
  char bytes[sizeof(T)];
  std::memcpy(bytes, &value, sizeof(T));
  out.append(bytes, sizeof(T));
}

}  // namespace

uint32_t Crc32c(std::string_view data) { return cart::Crc32c(0, data.data(), data.size()); }

uint32_t MaskedCrc32c(std::string_view data) {
  const uint32_t crc = Crc32c(data);
  return ((crc >> 15) | (crc << 17)) + 0xa282ead8u;
}

EventFileWriter::EventFileWriter(double wall_time_s) {
  tensorboard::Event event;
  event.set_wall_time(wall_time_s);
  event.set_file_version("brain.Event:2");
  AddRecord(event.SerializeAsString());
}

void EventFileWriter::AddScalars(int64_t step, double wall_time_s,
                                 const std::vector<std::pair<std::string, double>>& values) {
  tensorboard::Event event;
  event.set_wall_time(wall_time_s);
  event.set_step(step);
  tensorboard::Summary* summary = event.mutable_summary();
  for (const auto& [tag, value] : values) {
    tensorboard::Summary::Value* v = summary->add_value();
    v->set_tag(tag);
    v->set_simple_value(static_cast<float>(value));
  }
  AddRecord(event.SerializeAsString());
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
