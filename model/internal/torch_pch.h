#pragma once
// Precompiled header for every LibTorch translation unit (cart_model and the targets that reuse
// its PCH). Only Torch and the standard library belong here.
#include <torch/torch.h>
