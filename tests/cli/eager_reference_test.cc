// The eager PyTorch reference that bench/train_vs_eager.sh races against `cart train`
// (bench/reference/cart_eager.py) trains the same model: from the same initial weights, on the
// same token windows, with the same optimizer and schedule, its loss at every step equals
// `cart train`'s. Without this the benchmark's ratio could compare two different computations.

#include <cmath>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/support/test_support.h"

namespace cart::testing {
namespace {

// The interpreter whose PyTorch is the reference: Debian's (LibTorch 1.13) for the default build,
// the torch2 build's virtual environment (PyTorch 2.x) for that build (tests/cli/CMakeLists.txt).
constexpr char kPython[] = CART_TEST_PYTHON;

std::string Reference() { return std::string(CART_SOURCE_DIR) + "/bench/reference/cart_eager.py"; }

// The "loss" of each JSON line of `text` (metrics.jsonl or the reference's output), in order.
std::vector<double> Losses(const std::string& text) {
  std::vector<double> losses;
  std::istringstream lines(text);
  std::string line;
  while (std::getline(lines, line)) {
    if (line.empty() || line[0] != '{') continue;
    nlohmann::json j = nlohmann::json::parse(line);
    if (j.contains("loss")) losses.push_back(j["loss"].get<double>());
  }
  return losses;
}

class EagerReferenceTest : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    if (RunCommand(std::string(kPython) + " -c 'import torch' 2>&1").exit_code != 0) {
      GTEST_SKIP() << kPython << " cannot import torch: install Debian's python3-torch "
                   << "(deploy/install-deps.sh --test does) or, for the torch2 build, run "
                   << "deploy/install-torch2.sh";
    }
  }
};

TEST_P(EagerReferenceTest, LossesEqualCartTrainsStepByStep) {
  const std::string kv = GetParam();
  TempDir dir;
  const std::string data = dir.File("synth.bin");
  ASSERT_EQ(RunCart("data synth --vocab 512 --order 1 --tokens 60000 --val-tokens 4096 --seed 3 "
                    "--out " +
                    data)
                .exit_code,
            0);
  const int steps = 8;
  WriteFile(dir.File("run.yaml"),
            "model: cart\nvocab: 512\nd: 128\nP: 1\nR: 2\nkv: " + kv +
                "\nseq_len: 64\nbatch: 4\naccum: 1\nsteps: " + std::to_string(steps) +
                "\nwarmup: 2\nlog_every: 1\neval_every: 0\n"
                "checkpoint_every: 0\nthreads: 1\ntrain_data: " +
                data + "\n");
  CommandResult init = RunCart("model init " + dir.File("run.yaml") + " --seed 42 --out " +
                               dir.File("init.safetensors"));
  ASSERT_EQ(init.exit_code, 0) << init.output;
  CommandResult train = RunCart("train " + dir.File("run.yaml") + " --out " + dir.File("out"));
  ASSERT_EQ(train.exit_code, 0) << train.output;
  const std::vector<double> cart = Losses(ReadFile(dir.File("out/metrics.jsonl")));

  CommandResult eager = RunCommand(
      "OPENBLAS_NUM_THREADS=1 " + std::string(kPython) + " " + Reference() + " --tokens " + data +
      " --init " + dir.File("init.safetensors") + " --vocab 512 --d 128 --P 1 --R 2 --kv " + kv +
      " --seq-len 64 --batch 4 --warmup 2 --threads 1 --steps " + std::to_string(steps));
  ASSERT_EQ(eager.exit_code, 0) << eager.output;
  const std::vector<double> reference = Losses(eager.output);

  ASSERT_EQ(cart.size(), static_cast<size_t>(steps));
  ASSERT_EQ(reference.size(), static_cast<size_t>(steps)) << eager.output;
  // The losses must move (the optimizer works in both) and agree at every step. The two run the
  // same LibTorch kernels in the same order today and agree to the bit; the tolerance leaves room
  // for a fused kernel in either that reorders a sum.
  EXPECT_GT(std::abs(cart.front() - cart.back()), 1e-3);
  for (int i = 0; i < steps; ++i) {
    EXPECT_NEAR(cart[i], reference[i], 2e-5 * std::abs(reference[i])) << "step " << i + 1;
  }
}

INSTANTIATE_TEST_SUITE_P(KvModes, EagerReferenceTest, ::testing::Values("frozen", "recompute"));

}  // namespace
}  // namespace cart::testing
