#include "train/torch_error.h"

#include <c10/util/Exception.h>

#include <new>
#include <string>

#include "common/strings.h"

namespace cart::train {

absl::Status FromTorchError(const std::exception& e, std::string_view context,
                            absl::StatusCode other) {
  const std::string prefix = context.empty() ? std::string() : StrCat(context, ": ");
  if (const auto* oom = dynamic_cast<const c10::OutOfMemoryError*>(&e)) {
    return absl::ResourceExhaustedError(
        StrCat(prefix, "out of memory: ", oom->what_without_backtrace()));
  }
  if (dynamic_cast<const std::bad_alloc*>(&e) != nullptr) {
    return absl::ResourceExhaustedError(StrCat(prefix, "out of memory: ", e.what()));
  }
  if (const auto* error = dynamic_cast<const c10::Error*>(&e)) {
    // LibTorch before 2.x throws a plain c10::Error when the CPU allocator fails; its text is the
    // only sign.
    if (error->msg().find("DefaultCPUAllocator: not enough memory") != std::string::npos) {
      return absl::ResourceExhaustedError(
          StrCat(prefix, "out of memory: ", error->what_without_backtrace()));
    }
    return absl::Status(other, StrCat(prefix, "LibTorch error: ", error->what_without_backtrace()));
  }
  return absl::Status(other, StrCat(prefix, e.what()));
}

}  // namespace cart::train
