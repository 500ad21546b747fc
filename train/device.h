#pragma once

// Where a run computes: the one place a device name from a flag or a worker becomes a
// torch::Device.

#include <c10/core/Device.h>

#include <string_view>

#include "absl/status/statusor.h"

namespace cart::train {

// "auto": cuda:0 when LibTorch sees a CUDA device, else cpu; "cpu"; "cuda" (= cuda:0); "cuda:N".
// InvalidArgument listing the allowed forms for anything else; FailedPrecondition naming how many
// CUDA devices LibTorch sees when a CUDA device is asked for and absent.
absl::StatusOr<c10::Device> ResolveDevice(std::string_view spec);

}  // namespace cart::train
