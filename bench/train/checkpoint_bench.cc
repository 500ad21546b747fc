// Where the synchronous checkpoint write's time goes, for a checkpoint the size of the paper's
// d = 1024 runs' (CART d 1024, P 6, vocab 32,000: fp32 weights and both AdamW moments, 1.4 GiB):
// LibTorch's serializer into a sink that drops the bytes, zlib's CRC-32 and CRC-32C of that many
// bytes, the same bytes written to a file with and without fsync, and train::WriteCheckpoint whole
// as it was (each tensor's bytes written from its own memory, zlib's CRC-32, fsync), through the
// staging buffer, as `cart train` writes it (staged, CRC-32C, fsync) and as a worker writes it
// (staged, CRC-32C, no fsync: cartd's store holds the durable copy).
// Medians of timed repetitions, printed; asserts nothing (docs/design.md "Storage").
//
//   build/bin/bench-checkpoint [--dir DIR] [--reps N] [--d D]

#include <fcntl.h>
#include <fmt/format.h>
#include <torch/torch.h>
#include <unistd.h>
#include <zlib.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <functional>
#include <string>
#include <vector>

#include "common/crc32c.h"
#include "model/language_model.h"
#include "train/checkpoint.h"

namespace {

// Each repetition starts with the disk's queue empty (sync(2), untimed): otherwise the previous
// repetition's 1.4 GiB, still being written back, slows the next.
double MedianSeconds(const std::function<void()>& f, int reps) {
  std::vector<double> times;
  for (int i = 0; i < reps; ++i) {
    ::sync();
    const auto t0 = std::chrono::steady_clock::now();
    f();
    times.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  }
  std::sort(times.begin(), times.end());
  return times[times.size() / 2];
}

// Writes `bytes` to `path` in 8 MiB pieces; fsync when `sync`; removes it afterwards.
void WriteFile(const std::string& path, const std::vector<char>& bytes, bool sync) {
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  for (size_t off = 0; off < bytes.size();) {
    const size_t n = std::min<size_t>(bytes.size() - off, size_t{8} << 20);
    const ssize_t w = ::write(fd, bytes.data() + off, n);
    if (w <= 0) break;
    off += static_cast<size_t>(w);
  }
  if (sync) ::fsync(fd);
  ::close(fd);
  ::unlink(path.c_str());
}

}  // namespace

int main(int argc, char** argv) {
  std::string dir = std::filesystem::temp_directory_path().string();
  int reps = 5;
  int64_t d = 1024;
  for (int i = 1; i + 1 < argc; ++i) {
    if (!std::strcmp(argv[i], "--dir")) dir = argv[i + 1];
    if (!std::strcmp(argv[i], "--reps")) reps = std::atoi(argv[i + 1]);
    if (!std::strcmp(argv[i], "--d")) d = std::atoll(argv[i + 1]);
  }
  torch::set_num_threads(1);
  cart::config::ModelConfig config;
  config.vocab = 32000;
  config.d = d;
  config.P = 6;
  config.R = 2;
  auto model = cart::model::BuildModel(config, 1).value();
  torch::optim::AdamW optimizer(model->parameters(), torch::optim::AdamWOptions(1e-4));
  for (auto& p : model->parameters()) p.mutable_grad() = torch::zeros_like(p);
  optimizer.step();  // both moments exist, as in a checkpoint after step 1

  auto serialize = [&](const std::function<size_t(const void*, size_t)>& sink) {
    torch::serialize::OutputArchive archive, model_archive, optimizer_archive;
    model->save(model_archive);
    archive.write("model", model_archive);
    optimizer.save(optimizer_archive);
    archive.write("optimizer", optimizer_archive);
    archive.save_to(sink);
  };
  std::vector<char> bytes;
  serialize([&](const void* data, size_t n) {
    bytes.insert(bytes.end(), static_cast<const char*>(data), static_cast<const char*>(data) + n);
    return n;
  });
  const double gib = static_cast<double>(bytes.size()) / (1 << 30);
  fmt::print("checkpoint of CART d={} P=6 vocab 32000: {:.2f} GiB; files in {}; median of {}\n", d,
             gib, dir, reps);
  const double t_serialize =
      MedianSeconds([&] { serialize([](const void*, size_t n) { return n; }); }, reps);
  const double t_crc = MedianSeconds(
      [&] {
        uLong crc = crc32(0L, Z_NULL, 0);
        for (size_t off = 0; off < bytes.size();) {
          const size_t n = std::min<size_t>(bytes.size() - off, size_t{1} << 30);
          crc =
              crc32(crc, reinterpret_cast<const Bytef*>(bytes.data() + off), static_cast<uInt>(n));
          off += n;
        }
      },
      reps);
  const double t_crc32c = MedianSeconds(
      [&] {
        volatile uint32_t crc = cart::Crc32c(0, bytes.data(), bytes.size());
        (void)crc;
      },
      reps);
  const std::string file = dir + "/bench-checkpoint.bin";
  const double t_write = MedianSeconds([&] { WriteFile(file, bytes, false); }, reps);
  const double t_write_sync = MedianSeconds([&] { WriteFile(file, bytes, true); }, reps);
  const std::string ckpt_dir = dir + "/bench-checkpoint";
  cart::train::CheckpointState state;
  state.step = 1;
  auto whole = [&](bool crc32c, bool durable, bool staged) {
    cart::train::CheckpointWriteOptions write;
    write.crc32c = crc32c;
    write.durable = durable;
    write.staged = staged;
    const double s = MedianSeconds(
        [&] {
          if (!cart::train::WriteCheckpoint(ckpt_dir, state, *model, optimizer, 1, write).ok()) {
            fmt::print("WriteCheckpoint failed\n");
          }
        },
        reps);
    std::filesystem::remove_all(ckpt_dir);
    return s;
  };
  const double t_before = whole(false, true, false);
  const double t_staged = whole(false, true, true);
  const double t_train = whole(true, true, true);
  const double t_worker = whole(true, false, true);
  auto row = [&](const char* what, double s) {
    fmt::print("{:<60}{:>8.3f} s{:>10.0f} MB/s\n", what, s, bytes.size() / s / 1e6);
  };
  row("LibTorch serializer into a sink that drops the bytes", t_serialize);
  row("CRC-32 (zlib)", t_crc);
  row(cart::Crc32cInHardware() ? "CRC-32C (the crc32 instruction)" : "CRC-32C (a table)", t_crc32c);
  row("write(2) to a file, no fsync", t_write);
  row("write(2) to a file, fsync", t_write_sync);
  row("WriteCheckpoint as before: unstaged, zlib CRC-32, fsync", t_before);
  row("WriteCheckpoint staged, zlib CRC-32, fsync", t_staged);
  row("WriteCheckpoint for cart train: staged, CRC-32C, fsync", t_train);
  row("WriteCheckpoint for a worker: staged, CRC-32C, no fsync", t_worker);
  return 0;
}
