#include "config/config.h"

#include "common/strings.h"
#include "config/accounting.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/support/test_support.h"

namespace cart::config {
namespace {

using ::cart::testing::IsOk;
using ::cart::testing::StatusIs;
using ::testing::AllOf;
using ::testing::HasSubstr;

TEST(ConfigTest, DefaultsAreThePaperRecipeAndValid) {
  RunConfig c;
  EXPECT_THAT(Validate(c), IsOk());
  EXPECT_EQ(c.train.lr, 3e-4);
  EXPECT_EQ(c.train.lr_min, 3e-5);
  EXPECT_EQ(c.train.warmup, 100);
  EXPECT_EQ(c.train.weight_decay, 0.1);
  EXPECT_EQ(c.train.weight_decay_scope, WeightDecayScope::kAll);
  EXPECT_EQ(c.model.gate, GateMode::kPaper);
}

TEST(ConfigTest, ParsesFlatAndGroupedYaml) {
  CART_ASSERT_OK_AND_ASSIGN(RunConfig c, ParseRunConfigYaml(R"(
model: cart
d: 256
R: 4
kv: recompute
hyper: off
train:
  steps: 20
  lr: 1e-3
val_data:
  wiki: /data/wiki.bin
)",
                                                            "run.yaml"));
  EXPECT_EQ(c.model.d, 256);
  EXPECT_EQ(c.model.R, 4);
  EXPECT_EQ(c.model.kv, KvMode::kRecompute);
  EXPECT_FALSE(c.model.hyper);
  EXPECT_EQ(c.train.steps, 20);
  EXPECT_EQ(c.train.lr, 1e-3);
  EXPECT_EQ(c.data.val_data.at("wiki"), "/data/wiki.bin");
}

TEST(ConfigTest, UnknownKeyNamesFileLineAndKey) {
  auto c = ParseRunConfigYaml("d: 256\nwidht: 3\n", "run.yaml");
  EXPECT_THAT(c, StatusIs(absl::StatusCode::kInvalidArgument,
                          HasSubstr("run.yaml:2: unknown key 'widht'")));
}

TEST(ConfigTest, BadEnumListsAllowedValuesWithLine) {
  auto c = ParseRunConfigYaml("d: 256\n\nkv: frozn\n", "run.yaml");
  EXPECT_THAT(c, StatusIs(absl::StatusCode::kInvalidArgument,
                          HasSubstr("run.yaml:3: kv: 'frozn' is not one of frozen, recompute")));
}

TEST(ConfigTest, RejectsOutOfRangeValuesNamingTheKey) {
  EXPECT_THAT(ParseRunConfigYaml("d: 100\n", "a.yaml"),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("d: 100")));
  EXPECT_THAT(ParseRunConfigYaml("R: 17\n", "a.yaml"),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("R: 17 is outside 1..16")));
  EXPECT_THAT(ParseRunConfigYaml("P: 0\n", "a.yaml"),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("P: 0")));
  EXPECT_THAT(ParseRunConfigYaml("steps: ten\n", "a.yaml"),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("steps: 'ten'")));
}

TEST(ConfigTest, RejectsMeaninglessSwitchCombinations) {
  EXPECT_THAT(ParseRunConfigYaml("core_attn: self\nkv: recompute\n", "a.yaml"),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("kv: recompute needs")));
  EXPECT_THAT(ParseRunConfigYaml("core_attn: self\ncross_causal: false\n", "a.yaml"),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("cross_causal")));
}

TEST(ConfigTest, HugeValuesAreRefusedBeforeTheAccountingCanOverflow) {
  EXPECT_THAT(ParseRunConfigYaml("d: 9223372036854775744\n", "big.yaml"),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       AllOf(HasSubstr("d: 9223372036854775744"), HasSubstr("above 65536"))));
  EXPECT_THAT(ParseRunConfigYaml("steps: 10000000000\n", "big.yaml"),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("steps")));
  EXPECT_THAT(ParseRunConfigYaml("batch: 1048576\naccum: 65536\n", "big.yaml"),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("tokens per optimizer step")));
  EXPECT_THAT(ParseRunConfigYaml("lr: 1e300\n", "big.yaml"),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("lr")));
  // At the bounds the estimates stay positive.
  CART_ASSERT_OK_AND_ASSIGN(
      RunConfig c,
      ParseRunConfigYaml("d: 65536\nP: 256\nbatch: 4096\naccum: 1\nseq_len: 1048576\n", "b"));
  EXPECT_GT(EstimateTrainingBytes(c, MemoryKernels{}), 0);
  EXPECT_GT(CountParams(c.model).effective, 0);
}

// A 20 KB train_data path over a 100 x 100 grid became 814 MB of database: the path is copied
// into every run's config and params. Paths are capped at PATH_MAX.
TEST(ConfigTest, PathsLongerThanPathMaxAreRefusedNamingTheKey) {
  const std::string path = "/data/" + std::string(20'000, 'x') + ".bin";
  EXPECT_THAT(ParseRunConfigYaml("train_data: " + path + "\n", "long.yaml"),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("train_data: 20010 bytes; a path is at most 4096")));
  EXPECT_THAT(ParseRunConfigYaml("val_data: {wiki: " + path + "}\n", "long.yaml"),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("val_data.wiki: 20010 bytes; a path is at most 4096")));
  std::string many = "val_data:\n";
  for (int i = 0; i < 65; ++i) many += StrCat("  v", i, ": /d/v", i, ".bin\n");
  EXPECT_THAT(
      ParseRunConfigYaml(many, "many.yaml"),
      StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("val_data: 65 entries; at most 64")));
  // A path of ordinary length is fine.
  CART_EXPECT_OK(ParseRunConfigYaml("train_data: /data/" + std::string(200, 'y') + ".bin\n", "ok"));
}

// yaml-cpp refuses nesting past 2,000 levels with the words "bad file"; the error now says what.
TEST(ConfigTest, DeeplyNestedYamlIsRefusedSayingSo) {
  std::string deep = "d: ";
  for (int i = 0; i < 3000; ++i) deep += "[";
  for (int i = 0; i < 3000; ++i) deep += "]";
  EXPECT_THAT(ParseRunConfigYaml(deep + "\n", "deep.yaml"),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       AllOf(HasSubstr("deep.yaml:1:"), HasSubstr("levels deep"),
                             Not(HasSubstr("bad file")))));
}

TEST(ConfigTest, DuplicateKeysAndNonUtf8AreRefusedWithTheirLines) {
  EXPECT_THAT(
      ParseRunConfigYaml("d: 64\nR: 2\nR: 4\n", "dup.yaml"),
      StatusIs(absl::StatusCode::kInvalidArgument,
               HasSubstr("dup.yaml:3: 'R' is given twice in one mapping (first at line 2)")));
  EXPECT_THAT(ParseRunConfigYaml("d: 64\ntrain_data: caf\xe9.bin\n", "latin1.yaml"),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("latin1.yaml:2: not UTF-8 (byte 0xe9 at column 16)")));
}

TEST(ConfigTest, YamlRoundTripKeepsEveryKey) {
  RunConfig c;
  CART_ASSERT_OK(SetKey(c, "d", "768"));
  CART_ASSERT_OK(SetKey(c, "gate", "delta"));
  CART_ASSERT_OK(SetKey(c, "lr", "0.00123"));
  CART_ASSERT_OK(SetKey(c, "lie", "off"));
  c.data.val_data["tiny"] = "t.bin";
  CART_ASSERT_OK_AND_ASSIGN(RunConfig back, ParseRunConfigYaml(ToYaml(c), "round-trip"));
  for (const std::string& key : ScalarKeys()) {
    EXPECT_EQ(GetKey(back, key).value(), GetKey(c, key).value()) << key;
  }
  EXPECT_EQ(back.data.val_data, c.data.val_data);
}

// A number is written as %g writes it at the fewest significant digits that read back to the
// same double: the text configs stored before have.
TEST(ConfigTest, NumbersAreWrittenAtTheirShortestRoundTripInPercentGStyle) {
  const std::vector<std::pair<std::string, std::string>> written = {
      {"0.0003", "0.0003"},
      {"3e-5", "3e-05"},
      {"30500", "3.05e+04"},
      {"0.1", "0.1"},
      {"1.5e-4", "0.00015"},
      {"123456789012", "123456789012"},
      {"0.30000000000000004", "0.30000000000000004"}};
  for (const auto& [set, text] : written) {
    RunConfig c;
    CART_ASSERT_OK(SetKey(c, "lr", set));
    EXPECT_EQ(GetKey(c, "lr").value(), text) << set;
  }
}

TEST(ConfigTest, YamlScalarsAreWrittenAsYamlCppWroteThemAndReadBackUnchanged) {
  // The style yaml-cpp's emitter chose for each (configs stored before kept this text).
  const std::vector<std::pair<std::string, std::string>> styles = {{"cart", "cart"},
                                                                   {"3e-05", "3e-05"},
                                                                   {"on", "on"},
                                                                   {"", R"("")"},
                                                                   {"var/a b.bin", "var/a b.bin"},
                                                                   {"a: b", R"("a: b")"},
                                                                   {"#x", R"("#x")"},
                                                                   {"-x", "-x"},
                                                                   {"-1", "-1"},
                                                                   {"null", R"("null")"},
                                                                   {"~", R"("~")"},
                                                                   {"x,y=z", "x,y=z"},
                                                                   {"C:\\data", "C:\\data"},
                                                                   {"é.bin", "é.bin"},
                                                                   {"a\"b", "a\"b"}};
  for (const auto& [text, yaml] : styles) EXPECT_EQ(YamlScalar(text), yaml) << text;
  // Whatever a path holds, the config reads back with the same path.
  for (const std::string path : {"dir with: colon",
                                 "#hash",
                                 "tab\there",
                                 "new\nline",
                                 "quote\"back\\slash",
                                 "-",
                                 "- x",
                                 "~",
                                 "null",
                                 "",
                                 " lead",
                                 "trail ",
                                 "end:",
                                 "é/ü.bin",
                                 "[x]",
                                 "{y}",
                                 "*star",
                                 "!bang",
                                 "%pct",
                                 "@at",
                                 "`tick",
                                 "|pipe",
                                 ">gt",
                                 "'single",
                                 "a #b",
                                 "\x01ctl"}) {
    RunConfig c;
    c.data.train_data = path;
    c.data.val_data[path.empty() ? "empty" : "set"] = path;
    absl::StatusOr<RunConfig> back = ParseRunConfigYaml(ToYaml(c), "round-trip");
    ASSERT_TRUE(back.ok()) << "path '" << path << "': " << back.status() << "\n" << ToYaml(c);
    EXPECT_EQ(back->data.train_data, path);
    EXPECT_EQ(back->data.val_data, c.data.val_data);
  }
}

TEST(ConfigTest, ApplyOverridesSetsKeysInOrderAndNamesTheBadOne) {
  RunConfig c;
  EXPECT_THAT(ApplyOverrides(c, {"d=512", "kv=recompute", "d=256"}), IsOk());
  EXPECT_EQ(c.model.d, 256);
  EXPECT_EQ(c.model.kv, KvMode::kRecompute);
  EXPECT_THAT(
      ApplyOverrides(c, {"R=3", "lti"}),
      StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("--set lti: expected key=value")));
  EXPECT_EQ(c.model.R, 3);  // overrides before the bad one stay applied
  EXPECT_THAT(ApplyOverrides(c, {"kv=sometimes"}),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       AllOf(HasSubstr("--set kv=sometimes"), HasSubstr("recompute"))));
  EXPECT_THAT(ApplyOverrides(c, {"=3"}),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("expected key=value")));
}

TEST(ConfigTest, SetKeyRejectsUnknownKeys) {
  RunConfig c;
  EXPECT_THAT(SetKey(c, "nope", "1"),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("unknown key 'nope'")));
  EXPECT_THAT(GetKey(c, "nope"), StatusIs(absl::StatusCode::kNotFound, HasSubstr("nope")));
}

TEST(ConfigTest, TasksRoundTripAndNamesAreCheckedAsMetricNameParts) {
  CART_ASSERT_OK_AND_ASSIGN(
      RunConfig c, ParseRunConfigYaml("d: 64\neval_bos: true\ntasks:\n  lambada: lambada=l.jsonl\n"
                                      "  arc_c: arc=ARC.jsonl,limit=10\n",
                                      "run.yaml"));
  EXPECT_TRUE(c.train.eval_bos);
  ASSERT_EQ(c.data.tasks.size(), 2u);
  EXPECT_EQ(c.data.tasks.at("arc_c"), "arc=ARC.jsonl,limit=10");
  EXPECT_TRUE(Validate(c).ok());
  CART_ASSERT_OK_AND_ASSIGN(RunConfig back, ParseRunConfigYaml(ToYaml(c), "back.yaml"));
  EXPECT_EQ(ToYaml(back), ToYaml(c));
  c.data.tasks["mmlu"] = "mmlu=x.jsonl";
  EXPECT_THAT(Validate(c), StatusIs(absl::StatusCode::kInvalidArgument,
                                    AllOf(HasSubstr("tasks.mmlu"), HasSubstr("hellaswag, piqa"))));
  c.data.tasks.erase("mmlu");
  c.data.val_data["wiki text"] = "w.bin";
  EXPECT_THAT(Validate(c), StatusIs(absl::StatusCode::kInvalidArgument,
                                    AllOf(HasSubstr("val_data"), HasSubstr("'wiki text'"))));
}

}  // namespace
}  // namespace cart::config

namespace cart::config {
namespace {

// `lm_eval` (docs/huggingface.md): task names separated by commas, each a metric-name part, none
// twice; written and stored as a parameter only when set, so earlier configs read back unchanged.
TEST(ConfigTest, LmEvalNamesHarnessTasksAndIsWrittenOnlyWhenSet) {
  CART_ASSERT_OK_AND_ASSIGN(RunConfig c,
                            ParseRunConfigYaml("lm_eval: 'hellaswag, arc_easy,piqa'\n", "a.yaml"));
  EXPECT_EQ(LmEvalTasks(c.data), (std::vector<std::string>{"hellaswag", "arc_easy", "piqa"}));
  CART_ASSERT_OK_AND_ASSIGN(RunConfig back, ParseRunConfigYaml(ToYaml(c), "round-trip"));
  EXPECT_EQ(back.data.lm_eval, c.data.lm_eval);
  EXPECT_EQ(ParamsOf(c).at("lm_eval"), "hellaswag, arc_easy,piqa");

  const RunConfig plain;
  EXPECT_EQ(ToYaml(plain).find("lm_eval"), std::string::npos);
  EXPECT_EQ(ParamsOf(plain).count("lm_eval"), 0u);
  EXPECT_EQ(ParamsOf(plain).size(), ScalarKeys().size() - 1);
  EXPECT_TRUE(LmEvalTasks(plain.data).empty());

  EXPECT_THAT(ParseRunConfigYaml("lm_eval: 'hellaswag,,piqa'\n", "a.yaml"),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("lm_eval: task name ''")));
  EXPECT_THAT(ParseRunConfigYaml("lm_eval: 'mmlu/x'\n", "a.yaml"),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("'mmlu/x'")));
  EXPECT_THAT(ParseRunConfigYaml("lm_eval: 'piqa,piqa'\n", "a.yaml"),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("'piqa' named twice")));
}

}  // namespace
}  // namespace cart::config
