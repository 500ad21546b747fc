#pragma once

// The only door to libsentencepiece, which is loaded at run time from libcart_sentencepiece.so
// (see sentencepiece_api.h for why). sentencepiece_processor.h declares
// `namespace absl { using std::string_view; }`, which collides with Debian's Abseil (whose
// absl::string_view is a class of its own), so no translation unit may include both. This header
// uses the standard library only; sentencepiece_shim.cc includes SentencePiece and no Abseil.

#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace cart::data::internal {

class SpProcessorApi;

class SpModel {
 public:
  // Loads a .model file; null with *error set on failure.
  static std::unique_ptr<SpModel> Load(const std::string& path, std::string* error);
  ~SpModel();

  // Thread-safe (SentencePieceProcessor's encode and decode are const and keep no state).
  std::vector<int> Encode(std::string_view text) const;
  // The same ids, always computed on the whole text at once (slower on long text; for tests).
  std::vector<int> EncodeWhole(std::string_view text) const;
  // Whether Encode splits long text (the model's normalizer and pieces make that exact).
  bool segmented() const;
  // Ids outside [0, piece_size) decode as U+FFFD.
  std::string Decode(const std::vector<int>& ids) const;
  int piece_size() const;
  int bos_id() const;  // -1 when the model has none
  int eos_id() const;

 private:
  SpModel();
  std::unique_ptr<SpProcessorApi> processor_;  // from libcart_sentencepiece.so
};

// Trains a model with SentencePieceTrainer from the sentences `next` yields (false at the end),
// with the trainer flags in `flags` (as spm_train's --name=value, without dashes). Returns the
// serialized model proto in *model, or "" with the trainer's message in *error.
bool SpTrain(const std::unordered_map<std::string, std::string>& flags,
             const std::function<bool(std::string*)>& next, std::string* model, std::string* error);

}  // namespace cart::data::internal
