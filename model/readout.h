#pragma once

// The one way values computed on a device reach the host in the training and evaluation paths.
// On a GPU each read waits for everything queued before it, so a step reads what it needs in
// one call, at its end; on the CPU the read costs a copy and no wait.

#include <torch/torch.h>

#include <vector>

namespace cart::model {

// Every element of `tensors` (any shapes, any float dtypes, one device; undefined tensors are
// skipped and give no values), in order, flattened, as doubles, with one device-to-host copy.
// The copy runs inside a profiler scope named kReadToHostScope, so that tests can count reads.
std::vector<double> ReadToHost(const std::vector<torch::Tensor>& tensors);

inline constexpr char kReadToHostScope[] = "cart::read_to_host";

}  // namespace cart::model
