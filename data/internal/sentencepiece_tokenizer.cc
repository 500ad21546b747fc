#include <filesystem>

#include "common/strings.h"
#include "data/internal/sentencepiece_shim.h"
#include "data/internal/tokenizers.h"

namespace cart::data::internal {
namespace {

class SentencePieceTokenizer : public Tokenizer {
 public:
  SentencePieceTokenizer(std::unique_ptr<SpModel> model, std::string path)
      : model_(std::move(model)), path_(std::move(path)) {}

  std::vector<int64_t> Encode(std::string_view text) const override {
    const std::vector<int> ids = model_->Encode(text);
    return std::vector<int64_t>(ids.begin(), ids.end());
  }
  std::string Decode(const std::vector<int64_t>& ids) const override {
    std::vector<int> narrow;
    narrow.reserve(ids.size());
    for (int64_t id : ids) {
      if (id == bos_id() || id == eos_id()) continue;
      narrow.push_back(id < 0 || id > INT32_MAX ? -1 : static_cast<int>(id));
    }
    return model_->Decode(narrow);
  }
  int64_t vocab_size() const override { return model_->piece_size(); }
  int64_t bos_id() const override { return model_->bos_id(); }
  int64_t eos_id() const override { return model_->eos_id(); }
  std::string spec() const override { return path_; }

 private:
  std::unique_ptr<SpModel> model_;
  std::string path_;
};

}  // namespace

absl::StatusOr<std::unique_ptr<Tokenizer>> LoadSentencePieceTokenizer(const std::string& path) {
  std::error_code ec;
  if (!std::filesystem::exists(path, ec)) {
    return absl::NotFoundError(StrCat("SentencePiece model ", path, " does not exist"));
  }
  std::string error;
  std::unique_ptr<SpModel> model = SpModel::Load(path, &error);
  if (model == nullptr) {
    return absl::InvalidArgumentError(
        StrCat(path, ": not a SentencePiece model (libsentencepiece: ", error, ")"));
  }
  const std::string absolute = std::filesystem::absolute(path, ec).lexically_normal().string();
  return std::unique_ptr<Tokenizer>(
      std::make_unique<SentencePieceTokenizer>(std::move(model), ec ? path : absolute));
}

}  // namespace cart::data::internal
