#include "data/internal/sentencepiece_shim.h"

#include <dlfcn.h>
#include <unistd.h>

#include <filesystem>
#include <mutex>

#include "data/internal/sentencepiece_api.h"

namespace cart::data::internal {
namespace {

std::string ExeDir() {
  std::error_code ec;
  return std::filesystem::read_symlink("/proc/self/exe", ec).parent_path().string();
}

// Opens libcart_sentencepiece.so once per process: $CART_SENTENCEPIECE_LIB, then beside the
// executable, then ../lib from it, then the build tree it was compiled in.
SpLibraryApi* Library(std::string* error) {
  static SpLibraryApi* library = nullptr;
  static std::string load_error;
  static std::once_flag once;
  std::call_once(once, [] {
    std::vector<std::string> candidates;
    if (const char* env = std::getenv("CART_SENTENCEPIECE_LIB"); env && *env) {
      candidates.push_back(env);
    }
    const std::string exe = ExeDir();
    candidates.push_back(exe + "/libcart_sentencepiece.so");
    candidates.push_back(exe + "/../lib/libcart_sentencepiece.so");
#ifdef CART_SENTENCEPIECE_MODULE
    candidates.push_back(CART_SENTENCEPIECE_MODULE);
#endif
    std::string tried;
    for (const std::string& path : candidates) {
      if (!std::filesystem::exists(path)) {
        tried += " " + path;
        continue;
      }
      void* handle = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL | RTLD_DEEPBIND);
      if (handle == nullptr) {
        load_error = std::string("cannot load ") + path + ": " + dlerror();
        return;
      }
      auto* entry =
          reinterpret_cast<SpLibraryApi* (*)()>(dlsym(handle, "CartSentencePieceLibrary"));
      if (entry == nullptr) {
        load_error = path + " has no CartSentencePieceLibrary";
        return;
      }
      library = entry();
      return;
    }
    load_error = "SentencePiece support module libcart_sentencepiece.so not found (looked at" +
                 tried + "; set CART_SENTENCEPIECE_LIB)";
  });
  if (library == nullptr) *error = load_error;
  return library;
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
