#pragma once

// Where torch::optim keeps a parameter's state, for the code that reads or writes it beside the
// optimizer's own step (train/checkpoint.cc, train/optimizer.cc).

#include <torch/torch.h>

#include <sstream>
#include <string>
#include <type_traits>

namespace cart::train::internal {

// The key of `p`'s state in an optimizer's state map: LibTorch keys it by the parameter's
// TensorImpl, as its address in text before 2.x and as the address itself since; the map's own
// key type says which.
using OptimizerStateKey =
    std::decay_t<decltype(std::declval<torch::optim::Optimizer&>().state())>::key_type;
template <typename Key = OptimizerStateKey>
Key StateKey(const torch::Tensor& p) {
  if constexpr (std::is_same_v<Key, std::string>) {
    std::ostringstream text;  // as LibTorch 1.x writes it (c10::guts::to_string, gone in 2.x)
    text << static_cast<const void*>(p.unsafeGetTensorImpl());
    return text.str();
  } else {
    return static_cast<Key>(p.unsafeGetTensorImpl());
  }
}

}  // namespace cart::train::internal
