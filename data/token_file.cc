#include "data/token_file.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "common/sha256.h"
#include "common/status.h"
#include "common/strings.h"

namespace cart::data {
namespace {

constexpr char kFormat[] = "cart-tokens/1";
constexpr size_t kWriteBufferTokens = 1 << 19;

absl::Status ErrnoStatus(const std::string& what, const std::string& path) {
  const int err = errno;
  const std::string message = StrCat(what, " ", path, ": ", std::strerror(err));
  if (err == ENOENT) return absl::NotFoundError(message);
  if (err == EACCES || err == EPERM) return absl::PermissionDeniedError(message);
  return absl::UnavailableError(message);
}

bool EndsWith(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() &&
         s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

// A unique temporary name beside `path` (same directory, so rename() is atomic).
std::string TempPathFor(const std::string& path) {
  static std::atomic<uint64_t> counter{0};
  return StrCat(path, ".tmp.", getpid(), ".", counter.fetch_add(1));
}

absl::Status FsyncDirectoryOf(const std::string& path) {
  std::string dir = std::filesystem::path(path).parent_path().string();
  if (dir.empty()) dir = ".";
  const int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY);
  if (fd < 0) return ErrnoStatus("cannot open directory", dir);
  ::fsync(fd);
  ::close(fd);
  return absl::OkStatus();
}

absl::Status WriteAll(int fd, const void* data, size_t size, const std::string& path) {
  const auto* p = static_cast<const char*>(data);
  while (size > 0) {
    const ssize_t n = ::write(fd, p, size);
    if (n < 0) {
      if (errno == EINTR) continue;
      return ErrnoStatus("cannot write", path);
    }
    p += n, size -= static_cast<size_t>(n);
  }
  return absl::OkStatus();
}

// Writes `text` to `path` through a temporary file + fsync + rename.
absl::Status WriteFileAtomically(const std::string& path, const std::string& text) {
  const std::string tmp = TempPathFor(path);
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return ErrnoStatus("cannot create", tmp);
  absl::Status st = WriteAll(fd, text.data(), text.size(), tmp);
  if (st.ok() && ::fsync(fd) != 0) st = ErrnoStatus("cannot fsync", tmp);
  ::close(fd);
  if (st.ok() && ::rename(tmp.c_str(), path.c_str()) != 0)
    st = ErrnoStatus("cannot rename to", path);
  if (!st.ok()) ::unlink(tmp.c_str());
  return st;
}

}  // namespace

std::string DtypeForVocab(int64_t vocab) { return vocab <= 65536 ? "uint16" : "uint32"; }

int BytesPerToken(const std::string& dtype) {
  if (dtype == "uint16") return 2;
  if (dtype == "uint32") return 4;
  return 0;
}

std::string MetadataPath(const std::string& bin_path) {
  if (EndsWith(bin_path, ".bin")) return bin_path.substr(0, bin_path.size() - 4) + ".json";
  return bin_path + ".json";
}

std::string TokenFileInfoToJson(const TokenFileInfo& info) {
  nlohmann::ordered_json j;
  j["format"] = kFormat;
  j["tokenizer"] = info.tokenizer;
  j["vocab"] = info.vocab;
  j["tokens"] = info.tokens;
  j["dtype"] = info.dtype;
  j["sha256"] = info.sha256;
  j["sources"] = info.sources;
  j["bos_id"] = info.bos_id;
  j["eos_id"] = info.eos_id;
  if (info.entropy_rate_nats) j["entropy_rate_nats"] = *info.entropy_rate_nats;
  return j.dump(2) + "\n";
}

absl::StatusOr<TokenFileInfo> ReadTokenFileInfo(const std::string& json_path) {
  std::ifstream in(json_path);
  if (!in) {
    if (!std::filesystem::exists(json_path)) {
      return absl::NotFoundError(StrCat("token file metadata ", json_path, " does not exist"));
    }
    return absl::PermissionDeniedError(StrCat("cannot read ", json_path));
  }
  std::stringstream text;
  text << in.rdbuf();
  return ParseTokenFileInfo(text.str(), json_path);
}

absl::StatusOr<TokenFileInfo> ParseTokenFileInfo(std::string_view text,
                                                 const std::string& json_path) {
  nlohmann::json j = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object()) {
    return absl::InvalidArgumentError(StrCat(json_path, ": not a JSON object"));
  }
  const auto bad = [&](const char* field, const char* want) {
    return absl::InvalidArgumentError(
        StrCat(json_path, ": field \"", field, "\" is missing or not ", want));
  };
  if (j.contains("format") && j["format"] != kFormat) {
    return absl::InvalidArgumentError(StrCat(json_path, ": field \"format\" is ",
                                             j["format"].dump(), "; allowed: \"", kFormat, "\""));
  }
  TokenFileInfo info;
  if (!j.contains("tokenizer") || !j["tokenizer"].is_string()) return bad("tokenizer", "a string");
  info.tokenizer = j["tokenizer"].get<std::string>();
  if (!j.contains("vocab") || !j["vocab"].is_number_integer() || j["vocab"].get<int64_t>() <= 0) {
    return bad("vocab", "a positive integer");
  }
  info.vocab = j["vocab"].get<int64_t>();
  if (!j.contains("tokens") || !j["tokens"].is_number_integer() || j["tokens"].get<int64_t>() < 0) {
    return bad("tokens", "a non-negative integer");
  }
  info.tokens = j["tokens"].get<int64_t>();
  if (!j.contains("dtype") || !j["dtype"].is_string() ||
      BytesPerToken(j["dtype"].get<std::string>()) == 0) {
    return bad("dtype", "one of \"uint16\", \"uint32\"");
  }
  info.dtype = j["dtype"].get<std::string>();
  if (!j.contains("sha256") || !j["sha256"].is_string()) return bad("sha256", "a string");
  info.sha256 = j["sha256"].get<std::string>();
  if (j.contains("sources")) {
    if (!j["sources"].is_array()) return bad("sources", "an array of strings");
    for (const auto& s : j["sources"]) {
      if (!s.is_string()) return bad("sources", "an array of strings");
      info.sources.push_back(s.get<std::string>());
    }
  }
  for (auto [field, dest] :
       {std::pair{"bos_id", &info.bos_id}, std::pair{"eos_id", &info.eos_id}}) {
    if (!j.contains(field)) continue;
    if (!j[field].is_number_integer()) return bad(field, "an integer");
    *dest = j[field].get<int64_t>();
    if (*dest < -1 || *dest >= info.vocab) {
      return absl::InvalidArgumentError(StrCat(json_path, ": field \"", field, "\" is ", *dest,
                                               "; allowed: -1 or 0..", info.vocab - 1));
    }
  }
  if (j.contains("entropy_rate_nats") && !j["entropy_rate_nats"].is_null()) {
    if (!j["entropy_rate_nats"].is_number()) return bad("entropy_rate_nats", "a number");
    info.entropy_rate_nats = j["entropy_rate_nats"].get<double>();
  }
  return info;
}

// ---------------------------------------------------------------------------------------------
// TokenFile

absl::StatusOr<TokenFile> TokenFile::Open(const std::string& bin_path) {
  CART_ASSIGN_OR_RETURN(TokenFileInfo info, ReadTokenFileInfo(MetadataPath(bin_path)));
  const int fd = ::open(bin_path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return ErrnoStatus("cannot open token file", bin_path);
  struct stat st;
  if (::fstat(fd, &st) != 0) {
    absl::Status s = ErrnoStatus("cannot stat", bin_path);
    ::close(fd);
    return s;
  }
  TokenFile file;
  file.path_ = bin_path;
  file.info_ = std::move(info);
  file.bytes_per_token_ = BytesPerToken(file.info_.dtype);
  const uint64_t want = static_cast<uint64_t>(file.info_.tokens) * file.bytes_per_token_;
  if (static_cast<uint64_t>(st.st_size) != want) {
    ::close(fd);
    return absl::InvalidArgumentError(
        StrCat(bin_path, ": size is ", st.st_size, " bytes but ", MetadataPath(bin_path), " says ",
               file.info_.tokens, " tokens of ", file.info_.dtype, " (", want, " bytes)"));
  }
  if (want > 0) {
    void* p = ::mmap(nullptr, want, PROT_READ, MAP_SHARED, fd, 0);
    if (p == MAP_FAILED) {
      absl::Status s = ErrnoStatus("cannot mmap", bin_path);
      ::close(fd);
      return s;
    }
    file.data_ = static_cast<const uint8_t*>(p);
    file.mapped_bytes_ = want;
  }
  ::close(fd);
  return file;
}

TokenFile::TokenFile(TokenFile&& other) noexcept { *this = std::move(other); }

TokenFile& TokenFile::operator=(TokenFile&& other) noexcept {
  if (this != &other) {
    Unmap();
    path_ = std::move(other.path_);
    info_ = std::move(other.info_);
    data_ = other.data_;
    mapped_bytes_ = other.mapped_bytes_;
    bytes_per_token_ = other.bytes_per_token_;
    other.data_ = nullptr;
    other.mapped_bytes_ = 0;
  }
  return *this;
}

TokenFile::~TokenFile() { Unmap(); }

void TokenFile::Unmap() {
  if (data_ != nullptr) ::munmap(const_cast<uint8_t*>(data_), mapped_bytes_);
  data_ = nullptr;
  mapped_bytes_ = 0;
}

absl::Status TokenFile::Read(int64_t start, int64_t n, int64_t* out) const {
  if (start < 0 || n < 0 || start > info_.tokens || n > info_.tokens - start) {
    return absl::OutOfRangeError(StrCat(path_, ": read of tokens [", start, ", ", start + n,
                                        ") is outside [0, ", info_.tokens, ")"));
  }
  // Little-endian on disk; assembled bytewise so the code is right on any host.
  if (bytes_per_token_ == 2) {
    const uint8_t* p = data_ + start * 2;
    for (int64_t i = 0; i < n; ++i, p += 2) out[i] = int64_t{p[0]} | (int64_t{p[1]} << 8);
  } else {
    const uint8_t* p = data_ + start * 4;
    for (int64_t i = 0; i < n; ++i, p += 4) {
      out[i] = int64_t{p[0]} | (int64_t{p[1]} << 8) | (int64_t{p[2]} << 16) | (int64_t{p[3]} << 24);
    }
  }
  return absl::OkStatus();
}

absl::Status TokenFile::Verify() const {
  Sha256 sha;
  if (mapped_bytes_ > 0) sha.Update(data_, mapped_bytes_);
  const std::string got = sha.HexDigest();
  if (got != info_.sha256) {
    return absl::DataLossError(
        StrCat(path_, ": sha256 is ", got, " but ", MetadataPath(path_), " says ", info_.sha256));
  }
  return absl::OkStatus();
}

// ---------------------------------------------------------------------------------------------
// TokenFileWriter

struct TokenFileWriter::State {
  std::string path;
  std::string tmp_path;
  TokenFileInfo info;
  int fd = -1;
  int bytes_per_token = 2;
  std::vector<uint8_t> buffer;
  Sha256 sha;
  bool finished = false;

  absl::Status Flush() {
    if (buffer.empty()) return absl::OkStatus();
    sha.Update(buffer.data(), buffer.size());
    absl::Status st = WriteAll(fd, buffer.data(), buffer.size(), tmp_path);
    buffer.clear();
    return st;
  }

  ~State() {
    if (fd >= 0) ::close(fd);
    if (!finished && !tmp_path.empty()) ::unlink(tmp_path.c_str());
  }
};

TokenFileWriter::TokenFileWriter(std::unique_ptr<State> state) : state_(std::move(state)) {}
TokenFileWriter::TokenFileWriter(TokenFileWriter&& other) noexcept = default;
TokenFileWriter& TokenFileWriter::operator=(TokenFileWriter&& other) noexcept = default;
TokenFileWriter::~TokenFileWriter() = default;

absl::StatusOr<TokenFileWriter> TokenFileWriter::Create(const std::string& bin_path,
                                                        TokenFileInfo meta) {
  if (!EndsWith(bin_path, ".bin") || bin_path.size() <= 4) {
    return absl::InvalidArgumentError(StrCat(
        "token file path ", bin_path, " must end in .bin (the metadata goes beside it as .json)"));
  }
  if (meta.vocab <= 0) {
    return absl::InvalidArgumentError(
        StrCat(bin_path, ": vocab is ", meta.vocab, "; allowed: a positive integer"));
  }
  const std::filesystem::path parent = std::filesystem::path(bin_path).parent_path();
  std::error_code ec;
  if (!parent.empty() && !std::filesystem::exists(parent, ec)) {
    std::filesystem::create_directories(parent, ec);
    if (ec) {
      return absl::PermissionDeniedError(StrCat("cannot create directory ", parent.string(),
                                                " for ", bin_path, ": ", ec.message()));
    }
  }
  auto state = std::make_unique<State>();
  state->path = bin_path;
  state->tmp_path = TempPathFor(bin_path);
  state->info = std::move(meta);
  state->info.tokens = 0;
  state->info.dtype = DtypeForVocab(state->info.vocab);
  state->info.sha256.clear();
  state->bytes_per_token = BytesPerToken(state->info.dtype);
  state->buffer.reserve(kWriteBufferTokens * state->bytes_per_token);
  state->fd = ::open(state->tmp_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (state->fd < 0) {
    absl::Status s = ErrnoStatus("cannot create", state->tmp_path);
    state->tmp_path.clear();
    return s;
  }
  return TokenFileWriter(std::move(state));
}

absl::Status TokenFileWriter::Append(const int64_t* ids, int64_t n) {
  State& s = *state_;
  if (s.finished) return absl::FailedPreconditionError(StrCat(s.path, ": writer already finished"));
  for (int64_t i = 0; i < n; ++i) {
    if (ids[i] < 0 || ids[i] >= s.info.vocab) {
      return absl::InvalidArgumentError(StrCat(s.path, ": token id ", ids[i], " at offset ",
                                               s.info.tokens + i, " is outside [0, ", s.info.vocab,
                                               ")"));
    }
  }
  // Encoded straight into the buffer, flushed whenever it fills.
  const size_t capacity = kWriteBufferTokens * s.bytes_per_token;
  for (int64_t i = 0; i < n;) {
    const int64_t room = static_cast<int64_t>((capacity - s.buffer.size()) / s.bytes_per_token);
    const int64_t take = std::min(n - i, room);
    const size_t old = s.buffer.size();
    s.buffer.resize(old + take * s.bytes_per_token);
    uint8_t* p = s.buffer.data() + old;
    if (s.bytes_per_token == 2) {
      for (int64_t j = 0; j < take; ++j, p += 2) {
        const uint32_t v = static_cast<uint32_t>(ids[i + j]);
        p[0] = static_cast<uint8_t>(v), p[1] = static_cast<uint8_t>(v >> 8);
      }
    } else {
      for (int64_t j = 0; j < take; ++j, p += 4) {
        const uint32_t v = static_cast<uint32_t>(ids[i + j]);
        p[0] = static_cast<uint8_t>(v), p[1] = static_cast<uint8_t>(v >> 8);
        p[2] = static_cast<uint8_t>(v >> 16), p[3] = static_cast<uint8_t>(v >> 24);
      }
    }
    i += take;
    if (s.buffer.size() >= capacity) CART_RETURN_IF_ERROR(s.Flush());
  }
  s.info.tokens += n;
  return absl::OkStatus();
}

int64_t TokenFileWriter::tokens() const { return state_->info.tokens; }
const std::string& TokenFileWriter::path() const { return state_->path; }

absl::StatusOr<TokenFileInfo> TokenFileWriter::Finish() {
  State& s = *state_;
  if (s.finished) return absl::FailedPreconditionError(StrCat(s.path, ": writer already finished"));
  CART_RETURN_IF_ERROR(s.Flush());
  if (::fsync(s.fd) != 0) return ErrnoStatus("cannot fsync", s.tmp_path);
  ::close(s.fd);
  s.fd = -1;
  s.info.sha256 = s.sha.HexDigest();
  if (::rename(s.tmp_path.c_str(), s.path.c_str()) != 0) {
    return ErrnoStatus("cannot rename to", s.path);
  }
  s.finished = true;
  CART_RETURN_IF_ERROR(WriteFileAtomically(MetadataPath(s.path), TokenFileInfoToJson(s.info)));
  CART_RETURN_IF_ERROR(FsyncDirectoryOf(s.path));
  return s.info;
}

}  // namespace cart::data
