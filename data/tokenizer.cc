#include "data/tokenizer.h"

#include <fcntl.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <thread>

#include "common/status.h"
#include "common/strings.h"
#include "data/corpus.h"
#include "data/internal/sentencepiece_shim.h"
#include "data/internal/tokenizers.h"

namespace cart::data {
namespace internal {
namespace {

class ByteTokenizer : public Tokenizer {
 public:
  std::vector<int64_t> Encode(std::string_view text) const override {
    std::vector<int64_t> ids(text.size());
    for (size_t i = 0; i < text.size(); ++i) ids[i] = static_cast<unsigned char>(text[i]);
    return ids;
  }
  std::string Decode(const std::vector<int64_t>& ids) const override {
    std::string out;
    out.reserve(ids.size());
    for (int64_t id : ids) {
      if (id >= 0 && id < 256) {
        out += static_cast<char>(id);
      } else if (id != kBos && id != kEos) {
        out += "\xEF\xBF\xBD";
      }
    }
    return out;
  }
  int64_t vocab_size() const override { return 258; }
  int64_t bos_id() const override { return kBos; }
  int64_t eos_id() const override { return kEos; }
  std::string spec() const override { return "bytes"; }

 private:
  static constexpr int64_t kBos = 256, kEos = 257;
};

// Synthetic ids have no text; their "text" is the ids in decimal, so that `cart data info`
// and samples can still show them.
class SynthTokenizer : public Tokenizer {
 public:
  explicit SynthTokenizer(int64_t vocab) : vocab_(vocab) {}
  std::vector<int64_t> Encode(std::string_view text) const override {
    std::vector<int64_t> ids;
    for (const std::string& word : Split(text, ' ')) {
      std::optional<int64_t> id = ParseInt64(word);
      if (id && *id >= 0 && *id < vocab_) ids.push_back(*id);
    }
    return ids;
  }
  std::string Decode(const std::vector<int64_t>& ids) const override {
    std::string out;
    for (int64_t id : ids) {
      if (!out.empty()) out += ' ';
      out += id >= 0 && id < vocab_ ? std::to_string(id) : "\xEF\xBF\xBD";
    }
    return out;
  }
  int64_t vocab_size() const override { return vocab_; }
  int64_t bos_id() const override { return -1; }
  int64_t eos_id() const override { return -1; }
  std::string spec() const override { return StrCat("synth:", vocab_); }

 private:
  int64_t vocab_;
};

}  // namespace

std::unique_ptr<Tokenizer> NewByteTokenizer() { return std::make_unique<ByteTokenizer>(); }

absl::StatusOr<std::unique_ptr<Tokenizer>> NewSynthTokenizer(int64_t vocab) {
  if (vocab < 1 || vocab > (int64_t{1} << 31)) {
    return absl::InvalidArgumentError(
        StrCat("synthetic vocab ", vocab, " out of range; allowed: 1..2147483648"));
  }
  return std::unique_ptr<Tokenizer>(std::make_unique<SynthTokenizer>(vocab));
}

}  // namespace internal

absl::StatusOr<std::unique_ptr<Tokenizer>> Tokenizer::Load(const std::string& spec) {
  if (spec == "bytes") return internal::NewByteTokenizer();
  if (spec.rfind("gpt2:", 0) == 0) {
    const std::string dir = spec.substr(5);
    if (dir.empty()) {
      return absl::InvalidArgumentError(
          "tokenizer \"gpt2:\" needs a directory: gpt2:<dir holding encoder.json and vocab.bpe>");
    }
    std::error_code ec;
    const std::filesystem::path abs = std::filesystem::absolute(dir, ec).lexically_normal();
    std::string d = ec ? dir : abs.string();
    if (d.size() > 1 && d.back() == '/') d.pop_back();
    return internal::LoadGpt2Tokenizer(d);
  }
  if (spec.rfind("synth:", 0) == 0) {
    std::optional<int64_t> vocab = ParseInt64(spec.substr(6));
    if (!vocab) {
      return absl::InvalidArgumentError(
          StrCat("tokenizer \"", spec, "\": expected synth:<vocab size>, e.g. synth:64"));
    }
    return internal::NewSynthTokenizer(*vocab);
  }
  if (spec.size() > 6 && spec.compare(spec.size() - 6, 6, ".model") == 0) {
    return internal::LoadSentencePieceTokenizer(spec);
  }
  return absl::InvalidArgumentError(
      StrCat("unknown tokenizer \"", spec,
             "\"; allowed: bytes, PATH.model (SentencePiece), gpt2:DIR (encoder.json + "
             "vocab.bpe), synth:VOCAB"));
}

// Longest training sentence handed to SentencePiece, in bytes.
constexpr size_t kMaxTrainSentenceBytes = 8192;

absl::Status TrainSentencePiece(const std::vector<CorpusInput>& inputs,
                                const SentencePieceTrainOptions& options,
                                const std::string& model_path) {
  if (model_path.size() <= 6 || model_path.compare(model_path.size() - 6, 6, ".model") != 0) {
    return absl::InvalidArgumentError(
        StrCat("model path ", model_path, " must end in .model (that is how Load knows it)"));
  }
  if (inputs.empty()) return absl::InvalidArgumentError("no training input given");
  if (options.vocab < 260) {
    return absl::InvalidArgumentError(StrCat(
        "vocab ", options.vocab, " too small; allowed: >= 260 (3 specials + 256 byte pieces + 1)"));
  }
  if (!(options.character_coverage > 0 && options.character_coverage <= 1)) {
    return absl::InvalidArgumentError(StrCat("character coverage ", options.character_coverage,
                                             " out of range; allowed: (0, 1]"));
  }
  // Open every input first so that a missing file fails before minutes of training.
  std::vector<std::unique_ptr<DocumentReader>> readers;
  CART_ASSIGN_OR_RETURN(std::vector<CorpusInput> files, ExpandCorpusInputs(inputs));
  for (const CorpusInput& in : files) {
    CART_ASSIGN_OR_RETURN(auto reader, DocumentReader::Open(in));
    readers.push_back(std::move(reader));
  }
  const int threads = options.threads > 0
                          ? options.threads
                          : std::max(1, static_cast<int>(std::thread::hardware_concurrency()));
  const std::unordered_map<std::string, std::string> flags = {
      {"model_type", "bpe"},
      {"vocab_size", std::to_string(options.vocab)},
      {"character_coverage", StrCat(options.character_coverage)},
      {"input_sentence_size", std::to_string(options.max_sentences)},
      {"shuffle_input_sentence", "true"},
      {"num_threads", std::to_string(threads)},
      {"byte_fallback", "true"},
      {"split_digits", "true"},
      {"allow_whitespace_only_pieces", "true"},
      {"remove_extra_whitespaces", "false"},
      {"normalization_rule_name", "identity"},
      {"unk_id", "0"},
      {"bos_id", "1"},
      {"eos_id", "2"},
      {"pad_id", "-1"},
      {"max_sentence_length", std::to_string(kMaxTrainSentenceBytes)},
      {"minloglevel", "100"},  // never log: see data/internal/sentencepiece_module.cc
  };
  // Each line of each document is one training sentence.
  size_t reader_index = 0;
  DocumentPiece piece;
  std::vector<std::string> lines;
  size_t next_line = 0;
  absl::Status read_status;
  const std::function<bool(std::string*)> next = [&](std::string* out) {
    while (next_line == lines.size()) {
      if (reader_index == readers.size()) return false;
      absl::StatusOr<bool> got = readers[reader_index]->Next(&piece);
      if (!got.ok()) {
        read_status = got.status();
        return false;
      }
      if (!*got) {
        ++reader_index;
        continue;
      }
      lines = Split(piece.text, '\n');
      next_line = 0;
    }
    // SentencePiece drops sentences longer than max_sentence_length; long lines (a whole speech
    // or article on one line is common) are cut at a space so that they still count.
    std::string& line = lines[next_line];
    if (line.size() <= kMaxTrainSentenceBytes) {
      *out = std::move(line);
      ++next_line;
      return true;
    }
    size_t cut = line.rfind(' ', kMaxTrainSentenceBytes);
    if (cut == std::string::npos || cut == 0) {
      cut = Utf8Boundary(line, kMaxTrainSentenceBytes);
    }
    *out = line.substr(0, cut);
    line.erase(0, cut);
    return true;
  };
  std::string model, error;
  const bool ok = internal::SpTrain(flags, next, &model, &error);
  CART_RETURN_IF_ERROR(read_status);
  if (!ok) return absl::InvalidArgumentError(StrCat("SentencePiece training failed: ", error));

  const std::string tmp = StrCat(model_path, ".tmp.", getpid());
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    out.write(model.data(), static_cast<std::streamsize>(model.size()));
    out.flush();
    if (!out) return absl::UnavailableError(StrCat("cannot write ", tmp));
  }
  const int fd = ::open(tmp.c_str(), O_RDONLY);
  if (fd >= 0) {
    ::fsync(fd);
    ::close(fd);
  }
  if (std::rename(tmp.c_str(), model_path.c_str()) != 0) {
    std::remove(tmp.c_str());
    return absl::UnavailableError(StrCat("cannot rename ", tmp, " to ", model_path));
  }
  return absl::OkStatus();
}

}  // namespace cart::data
