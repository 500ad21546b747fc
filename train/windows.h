#pragma once

// Fixed-order windows over a token file (docs/model.md §6): window i covers tokens
// [i·T, i·T + T + 1); x = w[:-1], y = w[1:]. One pass, no shuffle; the cursor is the index of the
// next window and is what a checkpoint stores.

#include <torch/torch.h>

#include <cstdint>

#include "absl/status/statusor.h"
#include "data/token_file.h"

namespace cart::train {

struct Batch {
  torch::Tensor x;  // (B, T) int64
  torch::Tensor y;  // (B, T) int64
};

class WindowReader {
 public:
  // `file` must outlive the reader. FailedPrecondition when the file holds fewer than T+1 tokens.
  static absl::StatusOr<WindowReader> Create(const data::TokenFile* file, int64_t seq_len);

  int64_t windows() const { return windows_; }  // complete windows in one pass
  int64_t cursor() const { return cursor_; }    // next window, counting across passes
  void set_cursor(int64_t cursor) { cursor_ = cursor; }
  int64_t epoch() const { return cursor_ / windows_; }  // 0 during the first (paper) pass

  // The next `batch` windows, advancing the cursor; wraps to the start after the last window.
  absl::StatusOr<Batch> Next(int64_t batch);
  // Window `index` (within one pass), without moving the cursor.
  absl::StatusOr<Batch> At(int64_t index) const;

 private:
  WindowReader(const data::TokenFile* file, int64_t seq_len, int64_t windows)
      : file_(file), seq_len_(seq_len), windows_(windows) {}
  const data::TokenFile* file_;
  int64_t seq_len_;
  int64_t windows_;
  int64_t cursor_ = 0;
};

}  // namespace cart::train
