// libcart_sentencepiece.so: the only code that includes SentencePiece's headers and links it.
// Loaded by data/internal/sentencepiece_shim.cc; see sentencepiece_api.h for why.

#include <sentencepiece_processor.h>
#include <sentencepiece_trainer.h>

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

class Processor : public SpProcessorApi {
 public:
  std::vector<int> Encode(std::string_view text) const override {
    std::vector<int> ids;
    processor_.Encode(text, &ids).IgnoreError();
    return ids;
  }
  std::string Decode(const std::vector<int>& ids) const override {
    std::string text;
    processor_.Decode(ids, &text).IgnoreError();
    return text;
  }
  int piece_size() const override { return processor_.GetPieceSize(); }
  int bos_id() const override { return processor_.bos_id(); }
  int eos_id() const override { return processor_.eos_id(); }

  sentencepiece::SentencePieceProcessor processor_;
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
