#pragma once

// LibTorch's autocast state, one API across versions: it took a device type in LibTorch 2.4;
// before, CUDA and the CPU had functions each. train/precision.h opens the bf16 scope with these;
// model/layers.cc asks them to cast a weight it stacks once per forward pass.

#include <c10/core/DeviceType.h>
#include <c10/core/ScalarType.h>

namespace cart::model {

bool AutocastEnabled(c10::DeviceType t);
void SetAutocastEnabled(c10::DeviceType t, bool on);
c10::ScalarType AutocastDtype(c10::DeviceType t);
void SetAutocastDtype(c10::DeviceType t, c10::ScalarType d);

}  // namespace cart::model
