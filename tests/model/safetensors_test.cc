#include "model/safetensors.h"

#include "gtest/gtest.h"
#include "model/language_model.h"
#include "tests/support/test_support.h"

namespace cart::model {
namespace {

using ::cart::testing::StatusIs;
using ::cart::testing::TempDir;
using ::testing::HasSubstr;

config::ModelConfig Tiny() {
  config::ModelConfig m;
  m.vocab = 40;
  m.d = 64;
  m.P = 2;
  m.R = 2;
  return m;
}

TEST(SafetensorsTest, Fp32ExportLoadsBackBitIdentically) {
  TempDir dir;
  auto model = BuildModel(Tiny(), 1).value();
  CART_ASSERT_OK(SaveModel(*model, dir.File("m.safetensors"), torch::kFloat32));
  CART_ASSERT_OK_AND_ASSIGN(SafetensorsFile file, ReadSafetensors(dir.File("m.safetensors")));
  auto other = BuildModel(Tiny(), 2).value();
  CART_ASSERT_OK(LoadModel(*other, file));
  auto a = model->named_parameters();
  for (const auto& p : other->named_parameters()) {
    EXPECT_TRUE(torch::equal(p.value(), a[p.key()])) << p.key();
  }
  CART_ASSERT_OK_AND_ASSIGN(config::ModelConfig config, ConfigFromMetadata(file, "m"));
  EXPECT_EQ(config.d, 64);
  EXPECT_EQ(config.R, 2);
}

TEST(SafetensorsTest, Bf16ExportRoundTripsItsOwnBitsExactly) {
  TempDir dir;
  auto model = BuildModel(Tiny(), 1).value();
  CART_ASSERT_OK(SaveModel(*model, dir.File("m.safetensors"), torch::kBFloat16));
  CART_ASSERT_OK_AND_ASSIGN(SafetensorsFile file, ReadSafetensors(dir.File("m.safetensors")));
  EXPECT_EQ(file.tensors.at("embed.weight").scalar_type(), torch::kBFloat16);
  // Writing what was read gives the same bytes.
  std::vector<std::pair<std::string, torch::Tensor>> tensors(file.tensors.begin(),
                                                             file.tensors.end());
  CART_ASSERT_OK(WriteSafetensors(dir.File("again.safetensors"), tensors, file.metadata));
  EXPECT_TRUE(testing::ReadFile(dir.File("m.safetensors")) ==
              testing::ReadFile(dir.File("again.safetensors")));
  auto a = model->named_parameters();
  EXPECT_TRUE(torch::equal(file.tensors.at("lti.a"), a["lti.a"].to(torch::kBFloat16)));
}

TEST(SafetensorsTest, MalformedFilesGetClearErrors) {
  TempDir dir;
  auto model = BuildModel(Tiny(), 1).value();
  const std::string good = dir.File("good.safetensors");
  CART_ASSERT_OK(SaveModel(*model, good, torch::kFloat32));
  std::string bytes = testing::ReadFile(good);

  testing::WriteFile(dir.File("short"), "abc");
  EXPECT_THAT(ReadSafetensors(dir.File("short")),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("< 8")));
  testing::WriteFile(dir.File("truncated"), bytes.substr(0, bytes.size() - 100));
  EXPECT_THAT(ReadSafetensors(dir.File("truncated")),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("outside the data section")));
  std::string bad_json = bytes;
  bad_json[8] = '[';
  bad_json[9] = '!';
  testing::WriteFile(dir.File("badjson"), bad_json);
  EXPECT_THAT(ReadSafetensors(dir.File("badjson")),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("not JSON")));
  std::string huge = bytes;
  huge[7] = 0x7f;
  testing::WriteFile(dir.File("huge"), huge);
  EXPECT_THAT(ReadSafetensors(dir.File("huge")),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("exceeds the file")));
  EXPECT_THAT(ReadSafetensors(dir.File("missing")),
              StatusIs(absl::StatusCode::kNotFound, HasSubstr("missing")));
}

TEST(SafetensorsTest, LoadIntoAModelOfAnotherShapeNamesTheMismatch) {
  TempDir dir;
  auto model = BuildModel(Tiny(), 1).value();
  CART_ASSERT_OK(SaveModel(*model, dir.File("m.safetensors"), torch::kFloat32));
  CART_ASSERT_OK_AND_ASSIGN(SafetensorsFile file, ReadSafetensors(dir.File("m.safetensors")));
  config::ModelConfig wider = Tiny();
  wider.d = 128;
  auto other = BuildModel(wider, 1).value();
  torch::Tensor before = other->named_parameters()["embed.weight"].clone();
  EXPECT_THAT(LoadModel(*other, file),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("embed.weight has shape")));
  EXPECT_TRUE(torch::equal(before, other->named_parameters()["embed.weight"]));
  config::ModelConfig no_lie = Tiny();
  no_lie.lie = false;
  EXPECT_THAT(LoadModel(*BuildModel(no_lie, 1).value(), file),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("unexpected lie.weight")));
}

}  // namespace
}  // namespace cart::model
