// `cart model params | init | logits` run as a user would, through the built binary.

#include <nlohmann/json.hpp>
#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/support/test_support.h"

namespace cart::testing {
namespace {

using ::testing::HasSubstr;

// Runs `cart ARGS` and returns {exit code, stdout + stderr}.
std::pair<int, std::string> Cart(const std::string& args) {
  CommandResult r = RunCart(args);
  return {r.exit_code, r.output};
}

TEST(ModelCliTest, ParamsPrintsTheSpecCountsAsJson) {
  TempDir dir;
  WriteFile(dir.File("run.yaml"), "vocab: 32000\nd: 256\nP: 6\nR: 6\n");
  auto [code, out] = Cart("model params " + dir.File("run.yaml") + " --json");
  ASSERT_EQ(code, 0) << out;
  nlohmann::json j = nlohmann::json::parse(out);
  EXPECT_EQ(j["stored"].get<int64_t>(), 14'365'187);
  EXPECT_EQ(j["effective"].get<int64_t>(), 17'972'227);
  auto [code2, text] = Cart("model params " + dir.File("run.yaml") + " --set d=1024");
  ASSERT_EQ(code2, 0) << text;
  EXPECT_THAT(text, HasSubstr("125.09M"));
  EXPECT_THAT(text, HasSubstr("7 layers"));
  EXPECT_THAT(text, HasSubstr("12 layers"));
}

TEST(ModelCliTest, InitThenLogitsIsSeededAndHonoursRInfer) {
  TempDir dir;
  WriteFile(dir.File("run.yaml"), "vocab: 40\nd: 64\nP: 1\nR: 3\n");
  ASSERT_EQ(
      Cart("model init " + dir.File("run.yaml") + " --seed 5 --out " + dir.File("a.safetensors"))
          .first,
      0);
  ASSERT_EQ(
      Cart("model init " + dir.File("run.yaml") + " --seed 5 --out " + dir.File("b.safetensors"))
          .first,
      0);
  EXPECT_TRUE(ReadFile(dir.File("a.safetensors")) == ReadFile(dir.File("b.safetensors")));
  auto [code, out] = Cart("model logits " + dir.File("a.safetensors") + " --ids 1,2,3");
  ASSERT_EQ(code, 0) << out;
  nlohmann::json r3 = nlohmann::json::parse(out);
  ASSERT_EQ(r3["logits"].size(), 3u);
  ASSERT_EQ(r3["logits"][0].size(), 40u);
  EXPECT_EQ(r3["h_norm"].size(), 3u);
  EXPECT_NEAR(r3["rho"]["max"].get<double>(), 0.9, 1e-6);
  auto [code8, out8] =
      Cart("model logits " + dir.File("a.safetensors") + " --ids 1,2,3 --R-infer 8");
  ASSERT_EQ(code8, 0) << out8;
  nlohmann::json r8 = nlohmann::json::parse(out8);
  EXPECT_EQ(r8["h_norm"].size(), 8u);
  EXPECT_NE(r8["logits"][2][0].get<double>(), r3["logits"][2][0].get<double>());
}

TEST(ModelCliTest, BadInputGetsAClearErrorAndExitCodeTwo) {
  TempDir dir;
  WriteFile(dir.File("run.yaml"), "vocab: 40\nd: 64\nP: 1\nR: 3\n");
  ASSERT_EQ(
      Cart("model init " + dir.File("run.yaml") + " --out " + dir.File("m.safetensors")).first, 0);
  auto [code, out] = Cart("model logits " + dir.File("m.safetensors") + " --ids 1,99");
  EXPECT_EQ(code, 2);
  EXPECT_THAT(out, HasSubstr("'99' is not a token id in 0..39"));
  WriteFile(dir.File("bad.yaml"), "d: 100\n");
  auto [code2, out2] = Cart("model params " + dir.File("bad.yaml"));
  EXPECT_EQ(code2, 2);
  EXPECT_THAT(out2, HasSubstr("d: 100 is not a positive multiple of 64"));
  WriteFile(dir.File("junk.safetensors"), "not a model");
  auto [code3, out3] = Cart("model logits " + dir.File("junk.safetensors") + " --ids 1");
  EXPECT_EQ(code3, 2);
  EXPECT_THAT(out3, HasSubstr("not a valid safetensors file"));
}

}  // namespace
}  // namespace cart::testing
