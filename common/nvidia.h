#pragma once

// What the NVIDIA driver says of this box's cards, without LibTorch: how many NVML lists and how
// many of those a CUDA process may use (CUDA_VISIBLE_DEVICES). `cart up` starts one worker per
// usable card, and the trainer says when the driver lists a card that LibTorch does not see.
// NVML is loaded at run time (libnvidia-ml.so.1, or the library CART_NVML_LIBRARY names, as for
// cart-worker's device readings), so a box without a driver simply has no card.

#include <optional>
#include <string>
#include <string_view>

namespace cart {

// NVML's library, loaded with dlopen: the one CART_NVML_LIBRARY names, else the driver's
// libnvidia-ml.so.1; the caller dlcloses it. nullptr when it cannot be loaded; `named_error`,
// when given, then holds dlerror()'s reason if the library was one the user named (no driver is
// no error).
void* OpenNvml(std::string* named_error = nullptr);

// The cards NVML lists; 0 without a driver or when NVML cannot start.
int NvmlGpuCount();

// Of `listed` cards, how many CUDA_VISIBLE_DEVICES lets a process use: all when it is unset; none
// when it is empty or starts with -1 (CUDA stops at the first invalid entry); else its entries
// up to the first that is not a listed index or a GPU UUID, at most `listed`. `visible` is the
// variable's value (nullopt: unset).
int VisibleGpuCount(int listed, std::optional<std::string_view> visible);

// VisibleGpuCount(NvmlGpuCount(), this process's CUDA_VISIBLE_DEVICES).
int UsableGpuCount();

}  // namespace cart
