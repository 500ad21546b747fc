#pragma once

// The interface between cart_data and libcart_sentencepiece.so, the module that wraps
// libsentencepiece.
//
// Why a separately loaded module: Debian's libsentencepiece carries its own copy of protobuf-lite
// and exports its symbols. In a process that also loads libprotobuf.so (LibTorch and gRPC do), the
// two copies interpose each other and the process crashes in static initialisation. The module is
// opened with dlopen(RTLD_LOCAL | RTLD_DEEPBIND), so sentencepiece binds to its own protobuf and
// nothing else ever sees it. Both sides are built by this project with the same compiler and
// standard library, so a C++ interface across the boundary is safe.

#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace cart::data::internal {

class SpProcessorApi {
 public:
  virtual ~SpProcessorApi() = default;
  // Encode splits long text at word starts when the model allows it exactly (see
  // sentencepiece_module.cc); EncodeWhole always hands SentencePiece the whole text.
  virtual std::vector<int> Encode(std::string_view text) const = 0;
  virtual std::vector<int> EncodeWhole(std::string_view text) const = 0;
  virtual bool segmented() const = 0;
  virtual std::string Decode(const std::vector<int>& ids) const = 0;  // ids must be valid
  virtual int piece_size() const = 0;
  virtual int bos_id() const = 0;
  virtual int eos_id() const = 0;
};

class SpLibraryApi {
 public:
  virtual ~SpLibraryApi() = default;
  // Null with *error set on failure.
  virtual std::unique_ptr<SpProcessorApi> Load(const std::string& path, std::string* error) = 0;
  virtual bool Train(const std::unordered_map<std::string, std::string>& flags,
                     const std::function<bool(std::string*)>& next, std::string* model,
                     std::string* error) = 0;
};

}  // namespace cart::data::internal

// Exported by libcart_sentencepiece.so; returns a process-lifetime singleton.
extern "C" cart::data::internal::SpLibraryApi* CartSentencePieceLibrary();
