// End-to-end: the `cart data` commands as a user runs them.

#include <nlohmann/json.hpp>

#include "data/token_file.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/support/test_support.h"

namespace cart::data {
namespace {

using ::cart::testing::BinDir;
using ::cart::testing::IsOk;
using ::cart::testing::TempDir;
using ::cart::testing::WriteFile;
using ::testing::HasSubstr;

using CliRun = ::cart::testing::CommandResult;

CliRun Cart(const std::string& args) { return ::cart::testing::RunCart(args); }

TEST(DataCliTest, SynthThenInfoShowsTheEntropyRate) {
  TempDir dir;
  CliRun synth =
      Cart("data synth --vocab 32 --order 1 --tokens 20000 --val-tokens 2000 --seed 4 --out " +
           dir.File("s.bin"));
  ASSERT_EQ(synth.exit_code, 0) << synth.output;
  EXPECT_THAT(synth.output, HasSubstr("entropy rate"));
  CliRun info = Cart("data info --json --verify " + dir.File("s.val.bin"));
  ASSERT_EQ(info.exit_code, 0) << info.output;
  nlohmann::json j = nlohmann::json::parse(info.output);
  EXPECT_EQ(j["tokens"], 2000);
  EXPECT_EQ(j["tokenizer"], "synth:32");
  EXPECT_GT(j["entropy_rate_nats"].get<double>(), 0.0);
  EXPECT_LT(j["entropy_rate_nats"].get<double>(), std::log(32.0));
}

TEST(DataCliTest, PrepareWithHoldoutAndMixture) {
  TempDir dir;
  std::string stories;
  for (int i = 0; i < 200; ++i) stories += "Tale " + std::to_string(i) + "\n<|endoftext|>\n";
  WriteFile(dir.path() / "tiny.txt", stories);
  WriteFile(dir.path() / "wiki.jsonl", "{\"text\": \"Wiki one\"}\n{\"text\": \"Wiki two\"}\n");
  CliRun prep = Cart("data prepare " + dir.File("tiny.txt") + " --out " + dir.File("tiny.bin") +
                     " --val tiny_val=20 --threads 2");
  ASSERT_EQ(prep.exit_code, 0) << prep.output;
  EXPECT_THAT(prep.output, HasSubstr("180 documents"));
  EXPECT_THAT(prep.output, HasSubstr("20 documents"));
  auto val = TokenFile::Open(dir.File("tiny_val.bin"));
  ASSERT_THAT(val, IsOk());
  CliRun wiki = Cart("data prepare " + dir.File("wiki.jsonl") + " --out " + dir.File("wiki.bin"));
  ASSERT_EQ(wiki.exit_code, 0) << wiki.output;
  CliRun mix =
      Cart("data prepare --mix tiny=" + dir.File("tiny.bin") + ":3,wiki=" + dir.File("wiki.bin") +
           ":1 --chunk-tokens 4 --out " + dir.File("mix.bin"));
  ASSERT_EQ(mix.exit_code, 0) << mix.output;
  auto m = TokenFile::Open(dir.File("mix.bin"));
  ASSERT_THAT(m, IsOk());
  // wiki.bin has 2 × (1 + 8 + 1) = 20 tokens = 5 chunks of 4, so 5 cycles of 16 tokens.
  EXPECT_EQ(m->size(), 5 * 16);
  // Without --chunk-tokens the mixture uses the reference loader's 512-token chunks: a 1:1 mix
  // of tiny.bin with itself has one cycle of 2 × 512 tokens per 512 tokens of tiny.bin.
  CliRun mix512 = Cart("data prepare --mix tiny=" + dir.File("tiny.bin") +
                       ":1,tiny2=" + dir.File("tiny.bin") + ":1 --out " + dir.File("mix512.bin"));
  ASSERT_EQ(mix512.exit_code, 0) << mix512.output;
  EXPECT_THAT(mix512.output, HasSubstr("chunks of 512 tokens"));
  auto m512 = TokenFile::Open(dir.File("mix512.bin"));
  ASSERT_THAT(m512, IsOk());
  auto tiny = TokenFile::Open(dir.File("tiny.bin"));
  ASSERT_THAT(tiny, IsOk());
  ASSERT_GE(tiny->size(), 512);
  EXPECT_EQ(m512->size(), tiny->size() / 512 * 1024);
  CliRun info = Cart("data info --head 5 " + dir.File("tiny.bin"));
  ASSERT_EQ(info.exit_code, 0) << info.output;
  EXPECT_THAT(info.output, HasSubstr("first 5 ids: 256 84 97 108 101"));
  EXPECT_THAT(info.output, HasSubstr("decoded: Tale"));
}

TEST(DataCliTest, ErrorsNameFileAndLineAndExitTwo) {
  TempDir dir;
  WriteFile(dir.path() / "bad.jsonl", "{\"text\": \"ok\"}\n{\"txt\": \"no\"}\n");
  CliRun bad = Cart("data prepare " + dir.File("bad.jsonl") + " --out " + dir.File("o.bin"));
  EXPECT_EQ(bad.exit_code, 2);
  EXPECT_THAT(bad.output, HasSubstr("bad.jsonl:2: no \"text\" field"));
  CliRun missing = Cart("data info " + dir.File("nothing.bin"));
  EXPECT_EQ(missing.exit_code, 2);
  EXPECT_THAT(missing.output, HasSubstr("nothing.json"));
  CliRun both = Cart("data prepare " + dir.File("bad.jsonl") +
                     " --mix a=x.bin --chunk-tokens 4 --out " + dir.File("o.bin"));
  EXPECT_EQ(both.exit_code, 2);
  EXPECT_THAT(both.output, HasSubstr("not both"));
  // Progress bars are for terminals only: a pipe gets none.
  WriteFile(dir.path() / "ok.txt", "fine\n");
  CliRun ok = Cart("data prepare " + dir.File("ok.txt") + " --out " + dir.File("ok.bin"));
  ASSERT_EQ(ok.exit_code, 0) << ok.output;
  EXPECT_THAT(ok.output, ::testing::Not(HasSubstr("\r")));
}

}  // namespace
}  // namespace cart::data
