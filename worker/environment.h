#pragma once

// An attempt's environment record (docs/architecture.md "Environment records"): what the
// attempt runs on, as the worker process sees it, sent with the attempt's hello and kept by
// cartd with the attempt. Taken from what the process loaded, not from a package list: the
// LibTorch build's own configuration, the BLAS and LibTorch libraries mapped into the process,
// this binary's bytes, the kernel's and NVML's answers. Items are (key, value) pairs in a fixed
// order; keys are [a-z0-9_.], values one line of at most 1,024 bytes.

#include <string>
#include <utility>
#include <vector>

#include "worker/system_metrics.h"

namespace cart::worker {

using EnvironmentItems = std::vector<std::pair<std::string, std::string>>;

// What stays the same while the process lives: cart-worker's version, protocol, binary sha256 and
// the git commit it was built from; LibTorch's version, commit, CUDA and cuDNN builds and BLAS;
// the LibTorch and BLAS libraries loaded; the CPU, OS, kernel, host and container. Taken once.
const EnvironmentItems& ProcessEnvironment();

// What one attempt runs on: the process's items, then its device (`device`: the worker's, GPU
// fields from NVML), the LibTorch device it trains on, its precision, the step's optimizer and
// projection kernels (train/optimizer.h, model/layers.h), whether its step is replayed as a CUDA
// graph (train/cuda_graph.h) and its thread setting.
EnvironmentItems AttemptEnvironment(const DeviceDescription& device,
                                    const std::string& torch_device, const std::string& precision,
                                    int64_t threads, bool cuda_graph = false);

// The items of the LibTorch build configuration text (at::show_config()'s "Build settings")
// this record uses: torch.version, torch.commit, torch.cuda, torch.cudnn, torch.blas.
EnvironmentItems TorchBuildItems(const std::string& show_config);

// The path of the first mapped file in /proc/self/maps text `maps` whose file name starts with
// one of `prefixes` ("libopenblas", ...); empty when none is.
std::string MappedLibrary(const std::string& maps, const std::vector<std::string>& prefixes);

}  // namespace cart::worker
