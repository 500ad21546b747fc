// GPT-2 byte-level BPE (Radford et al. 2019; the reference is openai/gpt-2 src/encoder.py):
// text -> regex pre-tokens -> UTF-8 bytes, each byte a base token -> merges applied by rank.

#include <array>
#include <fstream>
#include <limits>
#include <nlohmann/json.hpp>
#include <sstream>
#include <unordered_map>

#include "common/status.h"
#include "common/strings.h"
#include "data/internal/tokenizers.h"

namespace cart::data::internal {
namespace {

constexpr char kEndOfText[] = "<|endoftext|>";

void AppendUtf8(uint32_t cp, std::string* out) {
  if (cp < 0x80) {
    *out += static_cast<char>(cp);
  } else if (cp < 0x800) {
    *out += static_cast<char>(0xC0 | (cp >> 6));
    *out += static_cast<char>(0x80 | (cp & 0x3F));
  } else {
    *out += static_cast<char>(0xE0 | (cp >> 12));
    *out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    *out += static_cast<char>(0x80 | (cp & 0x3F));
  }
}

// GPT-2's bytes_to_unicode(): printable Latin-1 bytes stand for themselves, the other 68 bytes
// are mapped in order onto U+0100.., so that every byte is a visible character in encoder.json.
std::array<uint32_t, 256> ByteToCodePoint() {
  std::array<uint32_t, 256> map{};
  uint32_t next = 256;
  for (uint32_t b = 0; b < 256; ++b) {
    const bool printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE);
    map[b] = printable ? b : next++;
  }
  return map;
}

std::string ReadWholeFile(const std::string& path, absl::Status* status) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    *status = absl::NotFoundError(
        StrCat("GPT-2 tokenizer file ", path, " does not exist or cannot be read"));
    return "";
  }
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

class Gpt2Tokenizer : public Tokenizer {
 public:
  static absl::StatusOr<std::unique_ptr<Tokenizer>> Load(const std::string& dir);

  std::vector<int64_t> Encode(std::string_view text) const override {
    std::vector<int64_t> ids;
    ids.reserve(text.size() / 3);
    // Pre-tokens repeat a lot within one call; caching their ids per call keeps Encode free of
    // shared mutable state (so it stays thread-safe) while skipping most BPE work.
    std::unordered_map<std::string_view, std::vector<int32_t>> cache;
    std::vector<int32_t> word;
    Gpt2PreTokenize(text, [&](size_t begin, size_t len) {
      const std::string_view piece = text.substr(begin, len);
      auto it = cache.find(piece);
      if (it == cache.end()) {
        word.clear();
        for (unsigned char b : piece) word.push_back(byte_ids_[b]);
        ApplyMerges(&word);
        it = cache.emplace(piece, word).first;
      }
      ids.insert(ids.end(), it->second.begin(), it->second.end());
    });
    return ids;
  }

  std::string Decode(const std::vector<int64_t>& ids) const override {
    std::string out;
    for (int64_t id : ids) {
      if (id < 0 || id >= vocab_) {
        out += "\xEF\xBF\xBD";
      } else if (id == eot_id_) {
        continue;
      } else {
        out += token_bytes_[id];
      }
    }
    return out;
  }

  int64_t vocab_size() const override { return vocab_; }
  int64_t bos_id() const override { return eot_id_; }
  int64_t eos_id() const override { return eot_id_; }
  std::string spec() const override { return "gpt2:" + dir_; }

 private:
  struct Merge {
    int32_t rank;
    int32_t merged;
  };
  static uint64_t Key(int32_t a, int32_t b) {
    return (static_cast<uint64_t>(static_cast<uint32_t>(a)) << 32) | static_cast<uint32_t>(b);
  }

  // Repeatedly merges the adjacent pair of lowest rank (all its occurrences, left to right), as
  // encoder.py's bpe() does, until no adjacent pair has a merge.
  void ApplyMerges(std::vector<int32_t>* word) const {
    std::vector<int32_t>& w = *word;
    while (w.size() >= 2) {
      int32_t best_rank = std::numeric_limits<int32_t>::max();
      int32_t a = -1, b = -1, merged = -1;
      for (size_t i = 0; i + 1 < w.size(); ++i) {
        auto it = merges_.find(Key(w[i], w[i + 1]));
        if (it != merges_.end() && it->second.rank < best_rank) {
          best_rank = it->second.rank;
          a = w[i], b = w[i + 1], merged = it->second.merged;
        }
      }
      if (merged < 0) break;
      size_t out = 0;
      for (size_t i = 0; i < w.size(); ++i) {
        if (i + 1 < w.size() && w[i] == a && w[i + 1] == b) {
          w[out++] = merged;
          ++i;
        } else {
          w[out++] = w[i];
        }
      }
      w.resize(out);
    }
  }

  std::string dir_;
  int64_t vocab_ = 0;
  int64_t eot_id_ = -1;
  std::array<int32_t, 256> byte_ids_{};
  std::vector<std::string> token_bytes_;  // id -> the bytes it stands for
  std::unordered_map<uint64_t, Merge> merges_;
};

absl::StatusOr<std::unique_ptr<Tokenizer>> Gpt2Tokenizer::Load(const std::string& dir) {
  auto tok = std::make_unique<Gpt2Tokenizer>();
  tok->dir_ = dir;
  const std::string encoder_path = dir + "/encoder.json";
  const std::string merges_path = dir + "/vocab.bpe";
  absl::Status st;
  const std::string encoder_text = ReadWholeFile(encoder_path, &st);
  CART_RETURN_IF_ERROR(st);
  const std::string merges_text = ReadWholeFile(merges_path, &st);
  CART_RETURN_IF_ERROR(st);

  nlohmann::json encoder = nlohmann::json::parse(encoder_text, nullptr, false);
  if (encoder.is_discarded() || !encoder.is_object()) {
    return absl::InvalidArgumentError(
        StrCat(encoder_path, ": not a JSON object mapping token strings to ids"));
  }
  // Base-token strings (one visible character per byte) back to bytes.
  const std::array<uint32_t, 256> byte_cp = ByteToCodePoint();
  std::unordered_map<uint32_t, uint8_t> cp_byte;
  for (int b = 0; b < 256; ++b) cp_byte[byte_cp[b]] = static_cast<uint8_t>(b);

  std::unordered_map<std::string, int32_t> ids;
  int64_t max_id = -1;
  for (auto it = encoder.begin(); it != encoder.end(); ++it) {
    if (!it.value().is_number_integer() || it.value().get<int64_t>() < 0 ||
        it.value().get<int64_t>() > std::numeric_limits<int32_t>::max()) {
      return absl::InvalidArgumentError(StrCat(encoder_path, ": token \"", it.key(), "\" has id ",
                                               it.value().dump(),
                                               "; allowed: a non-negative integer"));
    }
    const int32_t id = it.value().get<int32_t>();
    ids[it.key()] = id;
    max_id = std::max<int64_t>(max_id, id);
  }
  tok->vocab_ = max_id + 1;
  tok->token_bytes_.assign(tok->vocab_, "");
  std::vector<bool> seen(tok->vocab_, false);
  for (const auto& [text, id] : ids) {
    if (seen[id]) {
      return absl::InvalidArgumentError(StrCat(
          encoder_path, ": id ", id, " is given to more than one token (one is \"", text, "\")"));
    }
    seen[id] = true;
    if (text == kEndOfText) {
      tok->eot_id_ = id;
      continue;
    }
    std::string bytes;
    for (size_t pos = 0, len = 0; pos < text.size(); pos += len) {
      const uint32_t cp = DecodeUtf8(text, pos, &len);
      auto b = cp_byte.find(cp);
      if (b == cp_byte.end()) {
        return absl::InvalidArgumentError(
            StrCat(encoder_path, ": token \"", text, "\" (id ", id,
                   ") has a character outside GPT-2's byte alphabet (bytes_to_unicode)"));
      }
      bytes += static_cast<char>(b->second);
    }
    tok->token_bytes_[id] = std::move(bytes);
  }
  for (int b = 0; b < 256; ++b) {
    std::string s;
    AppendUtf8(byte_cp[b], &s);
    auto it = ids.find(s);
    if (it == ids.end()) {
      return absl::InvalidArgumentError(StrCat(encoder_path, ": no token for byte 0x", std::hex, b,
                                               std::dec, " (\"", s,
                                               "\"); byte-level BPE needs all 256 byte tokens"));
    }
    tok->byte_ids_[b] = it->second;
  }

  std::istringstream lines(merges_text);
  std::string line;
  int64_t line_no = 0;
  int32_t rank = 0;
  while (std::getline(lines, line)) {
    ++line_no;
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (line.empty() || (line_no == 1 && line.rfind("#version", 0) == 0)) continue;
    const size_t sp = line.find(' ');
    if (sp == std::string::npos || sp == 0 || sp + 1 == line.size() ||
        line.find(' ', sp + 1) != std::string::npos) {
      return absl::InvalidArgumentError(
          StrCat(merges_path, ":", line_no, ": expected \"A B\" (two tokens and one space), got \"",
                 line, "\""));
    }
    const std::string a = line.substr(0, sp), b = line.substr(sp + 1);
    const auto ia = ids.find(a), ib = ids.find(b), im = ids.find(a + b);
    for (const auto& [it, name] : {std::pair{ia, a}, std::pair{ib, b}, std::pair{im, a + b}}) {
      if (it == ids.end()) {
        return absl::InvalidArgumentError(StrCat(merges_path, ":", line_no, ": token \"", name,
                                                 "\" of merge \"", line, "\" is not in ",
                                                 encoder_path));
      }
    }
    // A pair listed twice takes its last rank, as encoder.py's dict(zip(merges, ranks)) does.
    tok->merges_.insert_or_assign(Key(ia->second, ib->second), Merge{rank++, im->second});
  }
  return std::unique_ptr<Tokenizer>(std::move(tok));
}

}  // namespace

absl::StatusOr<std::unique_ptr<Tokenizer>> LoadGpt2Tokenizer(const std::string& dir) {
  return Gpt2Tokenizer::Load(dir);
}

}  // namespace cart::data::internal
