#include "worker/device_choice.h"

#include "common/strings.h"
#include "train/device.h"

namespace cart::worker {
namespace {

DeviceChoice Cpu(const DeviceProbe& probe, std::string note = "") {
  DeviceChoice c;
  c.description = probe.cpu();
  c.torch_device = "cpu";
  c.note = std::move(note);
  return c;
}

absl::StatusOr<DeviceChoice> Cuda(int index, const DeviceProbe& probe, std::string_view spec) {
  if (index >= probe.cuda_devices) {
    return absl::FailedPreconditionError(StrCat(
        "--device ", spec, ": LibTorch sees ", probe.cuda_devices, " CUDA device(s)",
        probe.cuda_devices == 0 ? " (a CPU-only LibTorch, such as Debian's, or no driver)" : "",
        probe.nvml_devices > 0 ? StrCat("; NVML sees ", probe.nvml_devices, " GPU(s)") : ""));
  }
  if (!probe.nvml_available) {
    return absl::FailedPreconditionError(
        StrCat("--device ", spec,
               ": NVML (libnvidia-ml.so.1, from the NVIDIA driver) is not "
               "available, so the card's name and memory are unknown"));
  }
  const std::optional<std::string> bus = probe.cuda_pci_bus_id(index);
  if (!bus) {
    return absl::FailedPreconditionError(
        StrCat("--device ", spec, ": the CUDA runtime gives no PCI bus id for device ", index));
  }
  const std::optional<int> nvml_index = probe.nvml_index_of_bus(*bus);
  std::optional<DeviceDescription> card;
  if (nvml_index) card = probe.nvml_device(*nvml_index);
  if (!card) {
    return absl::FailedPreconditionError(
        StrCat("--device ", spec, ": NVML knows no GPU at PCI bus ", *bus, " (CUDA device ", index,
               "); refusing to report another card's memory"));
  }
  DeviceChoice c;
  c.description = *card;
  c.description.kind = "cuda";
  c.description.index = index;
  c.torch_device = StrCat("cuda:", index);
  c.nvml_index = *nvml_index;
  if (*nvml_index != index) {
    c.note = StrCat("cuda:", index, " is NVML's GPU ", *nvml_index, " (PCI ", *bus,
                    "; CUDA_VISIBLE_DEVICES renumbers CUDA's devices)");
  }
  return c;
}

}  // namespace

absl::StatusOr<DeviceChoice> ChooseDevice(std::string_view spec, const DeviceProbe& probe) {
  if (spec == "cpu") return Cpu(probe);
  if (spec == "auto") {
    if (probe.cuda_devices > 0) return Cuda(0, probe, spec);
    if (probe.nvml_devices > 0) {
      return Cpu(probe, StrCat("--device auto: NVML sees ", probe.nvml_devices,
                               " GPU(s) but this LibTorch cannot use CUDA (a CPU-only build, "
                               "such as Debian's): training on the CPU"));
    }
    return Cpu(probe);
  }
  std::optional<int64_t> index;
  if (spec == "cuda") {
    index = 0;
  } else if (spec.rfind("cuda:", 0) == 0) {
    index = ParseInt64(spec.substr(5));
  }
  if (!index || *index < 0 || *index > 1024) {
    return absl::InvalidArgumentError(
        StrCat("--device '", spec, "' is not one of auto, cpu, cuda, cuda:N"));
  }
  return Cuda(static_cast<int>(*index), probe, spec);
}

DeviceProbe ProbeMachine(SystemMetrics& nvml) {
  DeviceProbe p;
  p.cuda_devices = train::CudaDeviceCount();
  p.cuda_pci_bus_id = [](int i) { return train::CudaPciBusId(i); };
  p.nvml_available = nvml.nvml_available();
  p.nvml_devices = nvml.GpuCount();
  p.nvml_index_of_bus = [&nvml](const std::string& bus) { return nvml.IndexOfPciBusId(bus); };
  p.nvml_device = [&nvml](int i) { return nvml.Gpu(i); };
  p.cpu = [] { return SystemMetrics::Cpu(); };
  return p;
}

}  // namespace cart::worker
