// cart-worker's device choice against probes of machines this one is not: a GPU box with a
// CPU-only LibTorch, a box whose CUDA_VISIBLE_DEVICES renumbers the cards, a card NVML cannot
// match. The real probe of this machine is checked too.

#include "worker/device_choice.h"

#include <map>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/support/test_support.h"
#include "train/device.h"

namespace cart::worker {
namespace {

using ::cart::testing::StatusIs;
using ::testing::HasSubstr;

DeviceDescription Card(const std::string& name, int nvml_index, int64_t mib) {
  return DeviceDescription{"cuda", name, nvml_index, mib};
}

// A machine with `cards` (NVML's numbering, by PCI bus id) of which LibTorch sees the ones
// listed in `cuda` (CUDA's numbering: cuda[i] is the bus id of cuda:i).
DeviceProbe Machine(std::map<std::string, DeviceDescription> cards, std::vector<std::string> cuda) {
  DeviceProbe p;
  p.cuda_devices = static_cast<int64_t>(cuda.size());
  p.cuda_pci_bus_id = [cuda](int i) -> std::optional<std::string> {
    if (i < 0 || i >= static_cast<int>(cuda.size())) return std::nullopt;
    return cuda[static_cast<size_t>(i)];
  };
  p.nvml_available = !cards.empty();
  p.nvml_devices = static_cast<int>(cards.size());
  p.nvml_index_of_bus = [cards](const std::string& bus) -> std::optional<int> {
    auto it = cards.find(bus);
    if (it == cards.end()) return std::nullopt;
    return it->second.index;
  };
  p.nvml_device = [cards](int i) -> std::optional<DeviceDescription> {
    for (const auto& [bus, card] : cards) {
      if (card.index == i) return card;
    }
    return std::nullopt;
  };
  p.cpu = [] { return DeviceDescription{"cpu", "Test CPU", 0, 16'000}; };
  return p;
}

const std::map<std::string, DeviceDescription> kTwoCards = {
    {"0000:01:00.0", Card("NVIDIA GeForce RTX 3050", 0, 8'192)},
    {"0000:41:00.0", Card("NVIDIA GeForce RTX 3090", 1, 24'576)}};

TEST(DeviceChoiceTest, AutoOnAGpuBoxWithCpuOnlyLibTorchTrainsOnTheCpuAndSaysWhy) {
  CART_ASSERT_OK_AND_ASSIGN(DeviceChoice c, ChooseDevice("auto", Machine(kTwoCards, {})));
  EXPECT_EQ(c.torch_device, "cpu");
  EXPECT_EQ(c.description.kind, "cpu");
  EXPECT_EQ(c.nvml_index, -1);
  EXPECT_THAT(c.note, HasSubstr("NVML sees 2 GPU(s) but this LibTorch cannot use CUDA"));
}

TEST(DeviceChoiceTest, ExplicitCudaWithCpuOnlyLibTorchFailsAtStartNamingLibTorch) {
  EXPECT_THAT(ChooseDevice("cuda:0", Machine(kTwoCards, {})),
              StatusIs(absl::StatusCode::kFailedPrecondition,
                       HasSubstr("LibTorch sees 0 CUDA device(s) (a CPU-only LibTorch")));
  EXPECT_THAT(ChooseDevice("cuda:2", Machine(kTwoCards, {"0000:01:00.0", "0000:41:00.0"})),
              StatusIs(absl::StatusCode::kFailedPrecondition,
                       HasSubstr("LibTorch sees 2 CUDA device(s); NVML sees 2 GPU(s)")));
}

TEST(DeviceChoiceTest, AutoWithCudaTakesTheFirstCudaDevice) {
  CART_ASSERT_OK_AND_ASSIGN(
      DeviceChoice c, ChooseDevice("auto", Machine(kTwoCards, {"0000:01:00.0", "0000:41:00.0"})));
  EXPECT_EQ(c.torch_device, "cuda:0");
  EXPECT_EQ(c.description.name, "NVIDIA GeForce RTX 3050");
  EXPECT_EQ(c.nvml_index, 0);
  EXPECT_EQ(c.note, "");
}

// CUDA_VISIBLE_DEVICES=1: CUDA's only device, cuda:0, is NVML's GPU 1. Matched by index the
// worker would report the 3050's name and 8 GiB for a run training on the 3090.
TEST(DeviceChoiceTest, CudaVisibleDevicesRenumberingIsMatchedByPciBusId) {
  CART_ASSERT_OK_AND_ASSIGN(DeviceChoice c,
                            ChooseDevice("cuda:0", Machine(kTwoCards, {"0000:41:00.0"})));
  EXPECT_EQ(c.torch_device, "cuda:0");
  EXPECT_EQ(c.description.name, "NVIDIA GeForce RTX 3090");
  EXPECT_EQ(c.description.memory_mib, 24'576);
  EXPECT_EQ(c.description.index, 0);  // the user's cuda:0
  EXPECT_EQ(c.nvml_index, 1);         // metrics come from the right card
  EXPECT_THAT(c.note, HasSubstr("cuda:0 is NVML's GPU 1 (PCI 0000:41:00.0"));
}

TEST(DeviceChoiceTest, ACardNvmlCannotMatchIsRefused) {
  EXPECT_THAT(ChooseDevice("cuda:0", Machine(kTwoCards, {"0000:81:00.0"})),
              StatusIs(absl::StatusCode::kFailedPrecondition,
                       HasSubstr("NVML knows no GPU at PCI bus 0000:81:00.0")));
  DeviceProbe no_bus = Machine(kTwoCards, {"0000:01:00.0"});
  no_bus.cuda_pci_bus_id = [](int) { return std::optional<std::string>(); };
  EXPECT_THAT(ChooseDevice("cuda", no_bus),
              StatusIs(absl::StatusCode::kFailedPrecondition, HasSubstr("no PCI bus id")));
  DeviceProbe no_nvml = Machine({}, {"0000:01:00.0"});
  EXPECT_THAT(ChooseDevice("cuda:0", no_nvml),
              StatusIs(absl::StatusCode::kFailedPrecondition, HasSubstr("NVML")));
}

TEST(DeviceChoiceTest, BadSpecsListTheAllowedForms) {
  for (const char* bad : {"gpu", "cuda:", "cuda:x", "cuda:-1", "CPU"}) {
    EXPECT_THAT(ChooseDevice(bad, Machine(kTwoCards, {})),
                StatusIs(absl::StatusCode::kInvalidArgument,
                         HasSubstr("not one of auto, cpu, cuda, cuda:N")))
        << bad;
  }
}

// This machine, probed for real: the choice for auto agrees with what LibTorch can use.
TEST(DeviceChoiceTest, TheRealProbeAgreesWithLibTorch) {
  SystemMetrics nvml;
  DeviceProbe probe = ProbeMachine(nvml);
  EXPECT_EQ(probe.cuda_devices, train::CudaDeviceCount());
  CART_ASSERT_OK_AND_ASSIGN(DeviceChoice c, ChooseDevice("auto", probe));
  EXPECT_EQ(c.torch_device, train::CudaDeviceCount() > 0 ? "cuda:0" : "cpu");
  if (train::CudaDeviceCount() == 0) {
    EXPECT_FALSE(train::CudaPciBusId(0).has_value());
    EXPECT_THAT(ChooseDevice("cuda:0", probe),
                StatusIs(absl::StatusCode::kFailedPrecondition, HasSubstr("LibTorch sees 0")));
  }
}

}  // namespace
}  // namespace cart::worker
