#include "data/internal/sentencepiece_shim.h"

#include "data/internal/module_loader.h"
#include "data/internal/sentencepiece_api.h"

namespace cart::data::internal {
namespace {

// libcart_sentencepiece.so, opened once per process (module_loader.h says where it looks).
SpLibraryApi* Library(std::string* error) {
#ifdef CART_SENTENCEPIECE_MODULE
  const char* compiled = CART_SENTENCEPIECE_MODULE;
#else
  const char* compiled = nullptr;
#endif
  return LoadModule<SpLibraryApi>({"libcart_sentencepiece.so", "CART_SENTENCEPIECE_LIB", compiled,
                                   "CartSentencePieceLibrary", "SentencePiece support"},
                                  error);
}

}  // namespace

SpModel::SpModel() = default;
SpModel::~SpModel() = default;

std::unique_ptr<SpModel> SpModel::Load(const std::string& path, std::string* error) {
  SpLibraryApi* library = Library(error);
  if (library == nullptr) return nullptr;
  std::unique_ptr<SpProcessorApi> processor = library->Load(path, error);
  if (processor == nullptr) return nullptr;
  std::unique_ptr<SpModel> model(new SpModel());
  model->processor_ = std::move(processor);
  return model;
}

std::vector<int> SpModel::Encode(std::string_view text) const { return processor_->Encode(text); }
std::vector<int> SpModel::EncodeWhole(std::string_view text) const {
  return processor_->EncodeWhole(text);
}
bool SpModel::segmented() const { return processor_->segmented(); }

std::string SpModel::Decode(const std::vector<int>& ids) const {
  const int n = processor_->piece_size();
  std::string out;
  std::vector<int> run;
  const auto flush = [&] {
    out += processor_->Decode(run);
    run.clear();
  };
  for (int id : ids) {
    if (id >= 0 && id < n) {
      run.push_back(id);
    } else {
      flush();
      out += "\xEF\xBF\xBD";
    }
  }
  flush();
  return out;
}

int SpModel::piece_size() const { return processor_->piece_size(); }
int SpModel::bos_id() const { return processor_->bos_id(); }
int SpModel::eos_id() const { return processor_->eos_id(); }

bool SpTrain(const std::unordered_map<std::string, std::string>& flags,
             const std::function<bool(std::string*)>& next, std::string* model,
             std::string* error) {
  SpLibraryApi* library = Library(error);
  if (library == nullptr) return false;
  return library->Train(flags, next, model, error);
}

}  // namespace cart::data::internal
