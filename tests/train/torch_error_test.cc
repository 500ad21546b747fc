// train::FromTorchError, the one conversion of a LibTorch exception into a Status, on errors that
// LibTorch itself throws: out of memory (from the CPU allocator, tests/train/out_of_memory.h), a
// shape mismatch, and the standard library's errors.

#include "train/torch_error.h"

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <new>
#include <stdexcept>
#include <string>

#include "tests/train/out_of_memory.h"

namespace cart::train {
namespace {

// The status FromTorchError makes of whatever `op` throws (OK if it throws nothing).
template <typename Op>
absl::Status Caught(Op op, std::string_view context = "",
                    absl::StatusCode other = absl::StatusCode::kInternal) {
  try {
    op();
  } catch (const std::exception& e) {
    return FromTorchError(e, context, other);
  }
  return absl::OkStatus();
}

TEST(TorchErrorTest, TheCpuAllocatorRunningOutIsResourceExhausted) {
  absl::Status s;
  {
    testing::ScopedOutOfMemory no_memory;
    s = Caught([] { (void)torch::ones({64, 64}); }, "evaluating m.pt");
  }
  EXPECT_EQ(s.code(), absl::StatusCode::kResourceExhausted) << s;
  const std::string m(s.message());
  EXPECT_EQ(m.rfind("evaluating m.pt: out of memory: ", 0), 0u) << m;
  EXPECT_NE(m.find("you tried to allocate 16384 bytes"), std::string::npos) << m;
  EXPECT_EQ(m.find("Exception raised from"), std::string::npos) << "a C++ backtrace: " << m;
  // The allocator is back to normal outside the scope.
  EXPECT_TRUE(Caught([] { (void)torch::ones({64, 64}); }).ok());
}

TEST(TorchErrorTest, OutOfMemoryStaysResourceExhaustedWhateverTheOtherCode) {
  testing::ScopedOutOfMemory no_memory;
  EXPECT_EQ(Caught([] { (void)torch::zeros({8}); }, "", absl::StatusCode::kDataLoss).code(),
            absl::StatusCode::kResourceExhausted);
}

TEST(TorchErrorTest, AnyOtherLibTorchErrorTakesTheCallersCodeWithoutItsBacktrace) {
  auto mismatch = [] { (void)torch::matmul(torch::ones({2, 3}), torch::ones({4, 5})); };
  const absl::Status s = Caught(mismatch, "step 7");
  EXPECT_EQ(s.code(), absl::StatusCode::kInternal) << s;
  const std::string m(s.message());
  EXPECT_EQ(m.rfind("step 7: LibTorch error: ", 0), 0u) << m;
  EXPECT_NE(m.find("cannot be multiplied"), std::string::npos) << m;
  EXPECT_EQ(m.find("Exception raised from"), std::string::npos) << "a C++ backtrace: " << m;
  EXPECT_EQ(Caught(mismatch, "reading ckpt", absl::StatusCode::kDataLoss).code(),
            absl::StatusCode::kDataLoss);
}

TEST(TorchErrorTest, TheStandardLibrarysErrors) {
  const absl::Status oom = Caught([] { throw std::bad_alloc(); });
  EXPECT_EQ(oom.code(), absl::StatusCode::kResourceExhausted) << oom;
  EXPECT_EQ(std::string(oom.message()).rfind("out of memory: ", 0), 0u) << oom;
  const absl::Status other = Caught([] { throw std::runtime_error("disk on fire"); }, "saving");
  EXPECT_EQ(other.code(), absl::StatusCode::kInternal);
  EXPECT_EQ(other.message(), "saving: disk on fire");
}

}  // namespace
}  // namespace cart::train
