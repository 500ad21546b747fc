#include "train/windows.h"

#include <vector>

#include "common/status.h"
#include "common/strings.h"

namespace cart::train {

absl::StatusOr<WindowReader> WindowReader::Create(const data::TokenFile* file, int64_t seq_len) {
  if (file->size() < seq_len + 1) {
    return absl::FailedPreconditionError(
        StrCat(file->path(), ": ", file->size(),
               " tokens, fewer than one window of seq_len+1 = ", seq_len + 1));
  }
  // Windows start every T tokens and need T+1 tokens.
  const int64_t windows = (file->size() - 1) / seq_len;
  return WindowReader(file, seq_len, windows);
}

absl::StatusOr<Batch> WindowReader::At(int64_t index) const {
  std::vector<int64_t> buf(seq_len_ + 1);
  CART_RETURN_IF_ERROR(file_->Read(index * seq_len_, seq_len_ + 1, buf.data()));
  torch::Tensor w = torch::tensor(buf, torch::kInt64);
  return Batch{w.narrow(0, 0, seq_len_).unsqueeze(0), w.narrow(0, 1, seq_len_).unsqueeze(0)};
}

absl::StatusOr<Batch> WindowReader::Next(int64_t batch) {
  torch::Tensor buf = torch::empty({batch, seq_len_ + 1}, torch::kInt64);
  for (int64_t b = 0; b < batch; ++b) {
    const int64_t index = cursor_ % windows_;
    CART_RETURN_IF_ERROR(file_->Read(index * seq_len_, seq_len_ + 1, buf[b].data_ptr<int64_t>()));
    ++cursor_;
  }
  return Batch{buf.narrow(1, 0, seq_len_).contiguous(), buf.narrow(1, 1, seq_len_).contiguous()};
}

}  // namespace cart::train
