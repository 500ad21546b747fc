#pragma once

// The one conversion of an exception thrown by LibTorch (or by the standard library inside it)
// into a Status, used by every place in train/ and worker/ that catches one.

#include <exception>
#include <string_view>

#include "absl/status/status.h"

namespace cart::train {

// ResourceExhausted for out-of-memory (c10::OutOfMemoryError, which CUDA's caching allocator and
// the CPU allocator throw, and std::bad_alloc), `other` for any other error (Internal by default;
// a caller whose input explains every other failure passes its own, as checkpoint reading passes
// DataLoss); the message starts with `context` when it is not empty, then LibTorch's text
// without its C++ backtrace.
absl::Status FromTorchError(const std::exception& e, std::string_view context = "",
                            absl::StatusCode other = absl::StatusCode::kInternal);

}  // namespace cart::train
