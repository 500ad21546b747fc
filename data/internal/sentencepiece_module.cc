// libcart_sentencepiece.so: the only code that includes SentencePiece's headers and links it.
// Loaded by data/internal/sentencepiece_shim.cc; see sentencepiece_api.h for why.

#include <sentencepiece_processor.h>
#include <sentencepiece_trainer.h>

#include <string_view>

#include "data/internal/sentencepiece_api.h"

namespace sentencepiece::logging {
void SetMinLogLevel(int level);  // exported by libsentencepiece, not declared in its headers
}

namespace cart::data::internal {
namespace {

// Under RTLD_DEEPBIND, libsentencepiece's references to std::cerr bind to libstdc++'s own copy of
// the object, which is never constructed (the executable's copy-relocated std::cerr is the one
// that ios_base::Init builds), so any log line would crash the process. SentencePiece must
// therefore never log: its level is set above every severity, and trainer errors still come
// back as statuses.
constexpr int kNoLogging = 100;

class CallbackIterator : public sentencepiece::SentenceIterator {
 public:
  explicit CallbackIterator(const std::function<bool(std::string*)>& next) : next_(next) {
    Advance();
  }
  bool done() const override { return done_; }
  void Next() override { Advance(); }
  const std::string& value() const override { return value_; }
  sentencepiece::util::Status status() const override { return {}; }

 private:
  void Advance() { done_ = !next_(&value_); }

  const std::function<bool(std::string*)>& next_;
  std::string value_;
  bool done_ = false;
};

// --- Reading the model's settings -----------------------------------------------------------
// The public headers do not expose ModelProto's fields, so the few needed are read from the
// serialized proto (protobuf wire format; field numbers from sentencepiece_model.proto).

struct ModelSettings {
  int model_type = 1;                    // TrainerSpec.model_type (3): UNIGRAM=1, BPE=2
  std::string normalizer;                // NormalizerSpec.name (1)
  bool has_charmap = false;              // NormalizerSpec.precompiled_charmap (2) non-empty
  bool add_dummy_prefix = true;          // NormalizerSpec (3)
  bool remove_extra_whitespaces = true;  // NormalizerSpec (4)
  bool escape_whitespaces = true;        // NormalizerSpec (5)
};

class WireReader {
 public:
  explicit WireReader(std::string_view data) : data_(data) {}
  bool done() const { return pos_ >= data_.size(); }
  bool Varint(uint64_t* v) {
    *v = 0;
    for (int shift = 0; shift < 64 && pos_ < data_.size(); shift += 7) {
      const uint8_t b = static_cast<uint8_t>(data_[pos_++]);
      *v |= static_cast<uint64_t>(b & 0x7F) << shift;
      if ((b & 0x80) == 0) return true;
    }
    return false;
  }
  // Reads one field; *bytes is set for length-delimited fields, *value for varints.
  bool Field(int* number, std::string_view* bytes, uint64_t* value) {
    uint64_t key;
    if (!Varint(&key)) return false;
    *number = static_cast<int>(key >> 3);
    switch (key & 7) {
      case 0:
        return Varint(value);
      case 1:
        return Skip(8);
      case 2: {
        uint64_t len;
        if (!Varint(&len) || len > data_.size() - pos_) return false;
        *bytes = data_.substr(pos_, len);
        pos_ += len;
        return true;
      }
      case 5:
        return Skip(4);
      default:
        return false;
    }
  }

 private:
  bool Skip(size_t n) {
    if (n > data_.size() - pos_) return false;
    pos_ += n;
    return true;
  }
  std::string_view data_;
  size_t pos_ = 0;
};

bool ReadSettings(std::string_view proto, ModelSettings* out) {
  WireReader model(proto);
  while (!model.done()) {
    int field;
    std::string_view bytes;
    uint64_t value = 0;
    if (!model.Field(&field, &bytes, &value)) return false;
    if (field != 2 && field != 3) continue;
    WireReader spec(bytes);
    while (!spec.done()) {
      int f;
      std::string_view b;
      uint64_t v = 0;
      if (!spec.Field(&f, &b, &v)) return false;
      if (field == 2 && f == 3) out->model_type = static_cast<int>(v);
      if (field == 3 && f == 1) out->normalizer = std::string(b);
      if (field == 3 && f == 2) out->has_charmap = !b.empty();
      if (field == 3 && f == 3) out->add_dummy_prefix = v != 0;
      if (field == 3 && f == 4) out->remove_extra_whitespaces = v != 0;
      if (field == 3 && f == 5) out->escape_whitespaces = v != 0;
    }
  }
  return true;
}

constexpr std::string_view kSpace = "\xE2\x96\x81";  // U+2581, SentencePiece's escaped ' '
constexpr size_t kSegmentBytes = 1024;

class Processor : public SpProcessorApi {
 public:
  // SentencePiece's BPE encoder slows down sharply on long inputs (measured 1.1 MB/s on 1 KiB
  // pieces of text and 0.2 MB/s on 1 MiB ones). Long text is therefore cut where a ' ' follows
  // another character, when that is exact: a BPE model with the identity normalizer that escapes
  // ' ' as U+2581 and folds no whitespace, none of whose pieces has U+2581 after another
  // character. Then no piece spans such a cut, BPE merges on the two sides never interact, and
  // each side encodes alone to the same ids; with a dummy prefix, one ' ' is dropped from the
  // start of every later segment because SentencePiece puts it back.
  void DecideSegmentation() {
    ModelSettings m;
    if (!ReadSettings(processor_.serialized_model_proto(), &m)) return;
    if (m.model_type != 2 || m.normalizer != "identity" || m.has_charmap ||
        m.remove_extra_whitespaces || !m.escape_whitespaces) {
      return;
    }
    for (int id = 0; id < processor_.GetPieceSize(); ++id) {
      if (processor_.IsControl(id) || processor_.IsUnknown(id) || processor_.IsByte(id)) continue;
      const std::string& piece = processor_.IdToPiece(id);
      bool only_spaces_so_far = true;
      for (size_t pos = 0; pos < piece.size();) {
        if (piece.compare(pos, kSpace.size(), kSpace) == 0) {
          if (!only_spaces_so_far) return;
          pos += kSpace.size();
        } else {
          only_spaces_so_far = false;
          ++pos;
        }
      }
    }
    dummy_prefix_ = m.add_dummy_prefix;
    segmented_ = true;
  }

  std::vector<int> Encode(std::string_view text) const override {
    if (!segmented_ || text.size() <= kSegmentBytes) return EncodeWhole(text);
    std::vector<int> ids;
    size_t start = 0;
    while (start < text.size()) {
      // The first cut at or after kSegmentBytes: a ' ' after a non-' ', with more than spaces
      // after it.
      size_t cut = text.size();
      for (size_t i = start + kSegmentBytes; i < text.size(); ++i) {
        if (text[i] == ' ' && text[i - 1] != ' ') {
          const size_t next = text.find_first_not_of(' ', i);
          if (next != std::string_view::npos) {
            cut = i;
            break;
          }
          break;  // only spaces remain: they stay with this segment
        }
      }
      std::string_view segment = text.substr(start, cut - start);
      if (start > 0 && dummy_prefix_) segment.remove_prefix(1);
      const std::vector<int> part = EncodeWhole(segment);
      ids.insert(ids.end(), part.begin(), part.end());
      start = cut;
    }
    return ids;
  }
  std::vector<int> EncodeWhole(std::string_view text) const override {
    std::vector<int> ids;
    processor_.Encode(text, &ids).IgnoreError();
    return ids;
  }
  bool segmented() const override { return segmented_; }
  std::string Decode(const std::vector<int>& ids) const override {
    std::string text;
    processor_.Decode(ids, &text).IgnoreError();
    return text;
  }
  int piece_size() const override { return processor_.GetPieceSize(); }
  int bos_id() const override { return processor_.bos_id(); }
  int eos_id() const override { return processor_.eos_id(); }

  sentencepiece::SentencePieceProcessor processor_;

 private:
  bool segmented_ = false;
  bool dummy_prefix_ = true;
};

class Library : public SpLibraryApi {
 public:
  std::unique_ptr<SpProcessorApi> Load(const std::string& path, std::string* error) override {
    auto p = std::make_unique<Processor>();
    const auto status = p->processor_.Load(path);
    if (!status.ok()) {
      *error = status.ToString();
      return nullptr;
    }
    p->DecideSegmentation();
    return p;
  }
  bool Train(const std::unordered_map<std::string, std::string>& flags,
             const std::function<bool(std::string*)>& next, std::string* model,
             std::string* error) override {
    CallbackIterator iterator(next);
    const auto status = sentencepiece::SentencePieceTrainer::Train(flags, &iterator, model);
    if (!status.ok()) {
      *error = status.ToString();
      return false;
    }
    return true;
  }
};

}  // namespace
}  // namespace cart::data::internal

extern "C" __attribute__((visibility("default"))) cart::data::internal::SpLibraryApi*
CartSentencePieceLibrary() {
  static auto* library = [] {
    sentencepiece::logging::SetMinLogLevel(cart::data::internal::kNoLogging);
    return new cart::data::internal::Library();
  }();
  return library;
}
