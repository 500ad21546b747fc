#include "config/sweep.h"

#include <fstream>
#include <sstream>

#include "common/strings.h"
#include "config/accounting.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/support/test_support.h"

namespace cart::config {
namespace {

using ::cart::testing::StatusIs;
using ::testing::HasSubstr;

constexpr char kStage1[] = R"(name: stage1
base:
  d: 256
  steps: 3000
  seq_len: 512
grid:
  d: [256, 512, 768, 1024]
  R: [2, 4, 6, 8]
  P: [2, 3, 4, 6]
seeds: [42]
priority: 5
)";

TEST(SweepTest, Stage1ExpandsToSixtyFourRunsWithAccounting) {
  CART_ASSERT_OK_AND_ASSIGN(SweepSpec spec, ParseSweepYaml(kStage1, "stage1.yaml"));
  EXPECT_EQ(spec.priority, 5);
  CART_ASSERT_OK_AND_ASSIGN(auto runs, ExpandSweep(spec, "stage1.yaml"));
  ASSERT_EQ(runs.size(), 64u);
  EXPECT_EQ(runs[0].name, "stage1/0");
  EXPECT_EQ(runs[0].params.at("d"), "256");
  EXPECT_EQ(runs[0].params.at("R"), "2");
  EXPECT_EQ(runs[0].params.at("P"), "2");
  EXPECT_EQ(runs[1].params.at("P"), "3");  // last grid key varies fastest
  EXPECT_EQ(runs[63].params.at("d"), "1024");
  EXPECT_EQ(runs[63].params.at("R"), "8");
  EXPECT_EQ(runs[63].params.at("steps"), "3000");
  EXPECT_GT(runs[63].stored_params, runs[0].stored_params);
  EXPECT_GT(runs[63].memory_estimate_bytes, runs[0].memory_estimate_bytes);
  for (const auto& r : runs) EXPECT_EQ(r.kind, JobKind::kTrain);
}

// device_classes (docs/architecture.md "Device classes"): off by default; each key's values are
// named when wrong.
TEST(SweepTest, DeviceClassesAreReadAndTheirErrorsNamed) {
  CART_ASSERT_OK_AND_ASSIGN(SweepSpec plain, ParseSweepYaml(kStage1, "stage1.yaml"));
  EXPECT_FALSE(plain.balance_device_classes);
  EXPECT_FALSE(plain.resume_any_device_class);
  CART_ASSERT_OK_AND_ASSIGN(
      SweepSpec spec,
      ParseSweepYaml(StrCat(kStage1, "device_classes: {balance: true, resume: any}\n"), "s.yaml"));
  EXPECT_TRUE(spec.balance_device_classes);
  EXPECT_TRUE(spec.resume_any_device_class);
  EXPECT_THAT(ParseSweepYaml(StrCat(kStage1, "device_classes: {resume: elsewhere}\n"), "s.yaml"),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("s.yaml:12: device_classes.resume: 'elsewhere' is not one of "
                                 "same, any")));
  EXPECT_THAT(ParseSweepYaml(StrCat(kStage1, "device_classes: {spread: true}\n"), "s.yaml"),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("device_classes: unknown key 'spread' (known: balance, "
                                 "resume)")));
  EXPECT_THAT(ParseSweepYaml(StrCat(kStage1, "device_classes: balance\n"), "s.yaml"),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("s.yaml:12: device_classes: must be a mapping")));
}

TEST(SweepTest, AKeyGivenTwiceIsRefusedWithBothLines) {
  EXPECT_THAT(ParseSweepYaml("name: a\nname: b\nbase: {d: 64}\n", "dup.yaml"),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("dup.yaml:2: 'name' is given twice in one mapping (first at line "
                                 "1)")));
  EXPECT_THAT(ParseSweepYaml("name: a\ngrid:\n  R: [1, 2]\n  d: [64]\n  R: [3]\n", "grid.yaml"),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("grid.yaml:5: 'R' is given twice in one mapping (first at line "
                                 "3)")));
}

TEST(SweepTest, DerivedJobsPastMaxRunsAreCountedAndRefusedBeforeAnyIsBuilt) {
  // 1,000 trained runs and 40 derived aliases of every one of them: 41,000 runs.
  std::string yaml =
      "name: many\nbase: {d: 64, vocab: 100, P: 1, R: 2, steps: 10}\n"
      "grid: {lr: [0.001, 0.002, 0.003, 0.004, 0.005, 0.006, 0.007, 0.008, "
      "0.009, 0.01]}\nseeds: [";
  for (int i = 0; i < 100; ++i) yaml += StrCat(i == 0 ? "" : ", ", i);
  yaml += "]\nmax_runs: 1000\nderived:\n";
  for (int i = 0; i < 40; ++i) {
    yaml += StrCat("  - {name: alias", i, ", kind: eval, from: {match: {R: 2}}}\n");
  }
  CART_ASSERT_OK_AND_ASSIGN(SweepSpec spec, ParseSweepYaml(yaml, "many.yaml"));
  EXPECT_THAT(ExpandSweep(spec, "many.yaml"),
              StatusIs(absl::StatusCode::kResourceExhausted,
                       HasSubstr("expands to 41000 runs with its derived jobs, more than "
                                 "max_runs = 1000")));
}

TEST(SweepTest, SeedsVaryFastestAndDerivedJobsFollowTheirParents) {
  constexpr char kYaml[] = R"(name: s2
base: {d: 64, vocab: 100, P: 1, steps: 10}
grid: {R: [2, 4]}
seeds: [42, 137, 271]
derived:
  - name: varR
    from: {match: {R: 4}, checkpoint: final}
    eval_loops: [1, 2, 8]
)";
  CART_ASSERT_OK_AND_ASSIGN(SweepSpec spec, ParseSweepYaml(kYaml, "s2.yaml"));
  CART_ASSERT_OK_AND_ASSIGN(auto runs, ExpandSweep(spec, "s2.yaml"));
  ASSERT_EQ(runs.size(), 9u);
  EXPECT_EQ(runs[0].params.at("seed"), "42");
  EXPECT_EQ(runs[1].params.at("seed"), "137");
  EXPECT_EQ(runs[3].params.at("R"), "4");
  for (int i = 6; i < 9; ++i) {
    EXPECT_EQ(runs[i].kind, JobKind::kEval);
    EXPECT_EQ(runs[i].parent_index, i - 3);
    EXPECT_EQ(runs[i].parent_checkpoint_step, -1);
    EXPECT_EQ(runs[i].eval_loops, (std::vector<int>{1, 2, 8}));
  }
}

TEST(SweepTest, ABudgetIsDeviceHoursAboveZero) {
  CART_ASSERT_OK_AND_ASSIGN(SweepSpec spec,
                            ParseSweepYaml("name: a\nbudget_device_hours: 12.5\n", "a.yaml"));
  EXPECT_EQ(spec.budget_device_hours, 12.5);
  CART_ASSERT_OK_AND_ASSIGN(SweepSpec none, ParseSweepYaml("name: a\n", "a.yaml"));
  EXPECT_FALSE(none.budget_device_hours.has_value());
  for (const char* bad : {"0", "-3", "lots", "[1]", ".inf"}) {
    EXPECT_THAT(
        ParseSweepYaml(StrCat("name: a\nbudget_device_hours: ", bad, "\n"), "a.yaml"),
        StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("a.yaml:2: budget_device_hours: ")))
        << bad;
  }
}

TEST(SweepTest, ErrorsNameFileLineKeyAndAllowedValues) {
  EXPECT_THAT(ParseSweepYaml("name: a\ngrid:\n  kv: [frozen, frozn]\n", "a.yaml"),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("a.yaml:3: grid.kv: 'frozn' is not one of frozen, recompute")));
  EXPECT_THAT(
      ParseSweepYaml("name: a\ngird: {}\n", "a.yaml"),
      StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("a.yaml:2: unknown key 'gird'")));
  EXPECT_THAT(ParseSweepYaml("name: a\nbase:\n  d: 256\n  widht: 3\n", "a.yaml"),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("a.yaml:4")));
  EXPECT_THAT(ParseSweepYaml("grid: {}\n", "a.yaml"),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("name: missing")));
  CART_ASSERT_OK_AND_ASSIGN(SweepSpec bad, ParseSweepYaml("name: a\ngrid: {d: [100]}\n", "a.yaml"));
  EXPECT_THAT(ExpandSweep(bad, "a.yaml"),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("run a/0 (d=100)")));
}

TEST(SweepTest, GridPastTheLimitIsRefusedWithTheCount) {
  CART_ASSERT_OK_AND_ASSIGN(
      SweepSpec spec,
      ParseSweepYaml("name: big\nmax_runs: 100\ngrid:\n  seq_len: [1,2,3,4,5,6,7,8,9,10,11]\n"
                     "  batch: [1,2,3,4,5,6,7,8,9,10]\n",
                     "big.yaml"));
  EXPECT_THAT(ExpandSweep(spec, "big.yaml"),
              StatusIs(absl::StatusCode::kResourceExhausted, HasSubstr("expands to 110 runs")));
}

TEST(SweepTest, ExtraSeedsAddRunsAtTheNamedPointsAfterTheGridWithoutRenumberingIt) {
  constexpr char kYaml[] = R"(name: s1
base: {vocab: 100, steps: 10, lr: 1e-3}
grid:
  d: [64, 128]
  R: [2, 4]
  P: [1, 2]
seeds: [42]
extra_seeds:
  - at: {d: 128, P: 2}
    seeds: [43, 44]
)";
  constexpr char kPlain[] = R"(name: s1
base: {vocab: 100, steps: 10, lr: 1e-3}
grid: {d: [64, 128], R: [2, 4], P: [1, 2]}
seeds: [42]
)";
  CART_ASSERT_OK_AND_ASSIGN(SweepSpec spec, ParseSweepYaml(kYaml, "s1.yaml"));
  CART_ASSERT_OK_AND_ASSIGN(auto runs, ExpandSweep(spec, "s1.yaml"));
  ASSERT_EQ(runs.size(), 12u);  // 8 grid runs, then 2 points × 2 seeds
  // The grid's runs are numbered as without the entry.
  CART_ASSERT_OK_AND_ASSIGN(SweepSpec plain, ParseSweepYaml(kPlain, "plain.yaml"));
  CART_ASSERT_OK_AND_ASSIGN(auto plain_runs, ExpandSweep(plain, "plain.yaml"));
  ASSERT_EQ(plain_runs.size(), 8u);
  for (size_t i = 0; i < 8; ++i) EXPECT_EQ(runs[i].params, plain_runs[i].params) << i;
  const std::vector<std::pair<std::string, std::string>> want = {
      {"2", "43"}, {"2", "44"}, {"4", "43"}, {"4", "44"}};
  for (size_t i = 8; i < 12; ++i) {
    EXPECT_EQ(runs[i].name, StrCat("s1/", i));
    EXPECT_EQ(runs[i].params.at("d"), "128");
    EXPECT_EQ(runs[i].params.at("P"), "2");
    EXPECT_EQ(runs[i].params.at("R"), want[i - 8].first);
    EXPECT_EQ(runs[i].params.at("seed"), want[i - 8].second);
    EXPECT_EQ(runs[i].config.train.seed, std::stoll(want[i - 8].second));
  }
  // A value is matched in its stored form, as the grid's own (1e-3 and 0.001 are one rate).
  CART_ASSERT_OK_AND_ASSIGN(SweepSpec lr,
                            ParseSweepYaml("name: l\nbase: {vocab: 100, d: 64, steps: 10}\n"
                                           "grid: {lr: [1e-3, 2e-3]}\nextra_seeds:\n"
                                           "  - {at: {lr: 0.001}, seeds: [7]}\n",
                                           "lr.yaml"));
  CART_ASSERT_OK_AND_ASSIGN(auto lr_runs, ExpandSweep(lr, "lr.yaml"));
  ASSERT_EQ(lr_runs.size(), 3u);
  EXPECT_EQ(lr_runs[2].params.at("seed"), "7");
  EXPECT_EQ(lr_runs[2].config.train.lr, 1e-3);
}

TEST(SweepTest, ExtraSeedsErrorsNameFileLineAndWhatIsAllowed) {
  auto parse = [](const std::string& extra) {
    return ParseSweepYaml(StrCat("name: a\nbase: {vocab: 100, steps: 10}\ngrid:\n  d: [64, 128]\n"
                                 "  R: [2, 4]\nseeds: [1, 2]\nextra_seeds:\n",
                                 extra),
                          "a.yaml");
  };
  EXPECT_THAT(parse("  - at: {P: 2}\n    seeds: [3]\n"),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("a.yaml:8: extra_seeds.at: 'P' is not a grid key (grid keys: d, "
                                 "R)")));
  EXPECT_THAT(parse("  - at: {d: 96}\n    seeds: [3]\n"),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("a.yaml:8: extra_seeds.at.d: 96 is not one of the grid's values "
                                 "(64, 128)")));
  EXPECT_THAT(parse("  - at: {d: 128}\n    seeds: [2, 3]\n"),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("a.yaml:8: extra_seeds.seeds: 2 is already one of seeds")));
  EXPECT_THAT(parse("  - at: {d: 128}\n    seeds: [3, 3]\n"),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("a.yaml:9: extra_seeds.seeds: 3 is listed twice")));
  EXPECT_THAT(parse("  - at: {}\n    seeds: [3]\n"),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("a.yaml:8: extra_seeds.at: must map one or more grid keys")));
  EXPECT_THAT(parse("  - seeds: [3]\n"),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("a.yaml:8: extra_seeds: every entry needs at:")));
  EXPECT_THAT(parse("  - at: {d: 64}\n    seed: [3]\n"),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("a.yaml:9: extra_seeds: unknown key 'seed' (known: at, seeds)")));
  EXPECT_THAT(parse("  - at: {d: 64}\n    seeds: [x]\n"),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("a.yaml:9: extra_seeds.seeds: 'x' is not an integer")));
  // Two entries giving one point the same seed: the run would be there twice.
  CART_ASSERT_OK_AND_ASSIGN(
      SweepSpec twice, parse("  - at: {d: 128}\n    seeds: [3]\n  - at: {R: 4}\n    seeds: [3]\n"));
  EXPECT_THAT(
      ExpandSweep(twice, "a.yaml"),
      StatusIs(absl::StatusCode::kInvalidArgument,
               HasSubstr("a.yaml:10: extra_seeds: seed 3 is given twice at one grid point")));
  // Counted against max_runs before any extra run is built.
  CART_ASSERT_OK_AND_ASSIGN(SweepSpec many,
                            ParseSweepYaml("name: m\nmax_runs: 10\nbase: {vocab: 100, d: 64}\n"
                                           "grid: {R: [2, 4]}\nseeds: [1, 2, 3, 4]\nextra_seeds:\n"
                                           "  - {at: {R: 4}, seeds: [5, 6, 7]}\n",
                                           "m.yaml"));
  EXPECT_THAT(ExpandSweep(many, "m.yaml"),
              StatusIs(absl::StatusCode::kResourceExhausted,
                       HasSubstr("m.yaml: the grid expands to 11 runs with its extra seeds, more "
                                 "than max_runs = 10")));
}

// ---- The paper's program as sweep files (sweeps/paper/).

SweepSpec LoadPaperSweep(const std::string& name) {
  const std::string path = std::string(CART_SOURCE_DIR) + "/sweeps/paper/" + name + ".yaml";
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  absl::StatusOr<SweepSpec> spec = ParseSweepYaml(text.str(), path);
  EXPECT_TRUE(spec.ok()) << spec.status();
  return spec.ok() ? *spec : SweepSpec{};
}

std::vector<ExpandedRun> ExpandPaper(const std::string& name,
                                     const std::map<std::string, std::vector<ParentRun>>& p = {}) {
  absl::StatusOr<std::vector<ExpandedRun>> runs = ExpandSweep(LoadPaperSweep(name), name, p);
  EXPECT_TRUE(runs.ok()) << runs.status();
  return runs.ok() ? *runs : std::vector<ExpandedRun>{};
}

int CountKind(const std::vector<ExpandedRun>& runs, JobKind kind) {
  int n = 0;
  for (const auto& r : runs) n += r.kind == kind;
  return n;
}

TEST(PaperSweepsTest, EachFileExpandsToTheProgramsRunCounts) {
  EXPECT_EQ(ExpandPaper("stage1").size(), 64u);  // 4 d × 4 R × 4 P, one seed
  const std::vector<ExpandedRun> stage2 = ExpandPaper("stage2");
  EXPECT_EQ(CountKind(stage2, JobKind::kTrain), 36);  // 4 d × 3 R × 3 seeds
  EXPECT_EQ(CountKind(stage2, JobKind::kEval), 12);   // variable-R of every R = 6 model
  EXPECT_EQ(ExpandPaper("baselines").size(), 6u);     // 2 depths × 3 seeds
  EXPECT_EQ(ExpandPaper("faithfulness").size(), 3u);  // the other 3 of 2 gates × 2 scopes
  EXPECT_EQ(ExpandPaper("leak").size(), 2u);          // causal and not
  EXPECT_EQ(ExpandPaper("ablations").size(), 6u);     // baseline and five ablations

  std::map<std::string, std::vector<ParentRun>> parents;
  for (const ExpandedRun& r : stage2) {
    if (r.kind == JobKind::kTrain) parents["stage2"].push_back(AsParentRun(r));
  }
  const std::vector<ExpandedRun> varr = ExpandPaper("variable_r", parents);
  ASSERT_EQ(varr.size(), 3u);  // the three seeds of d = 1024, R = 6
  for (const ExpandedRun& r : varr) {
    EXPECT_EQ(r.kind, JobKind::kEval);
    EXPECT_EQ(r.config.model.d, 1024);
    EXPECT_EQ(r.config.model.R, 6);
    EXPECT_EQ(r.eval_loops, (std::vector<int>{1, 2, 4, 6, 8, 12, 16}));
    EXPECT_EQ(r.config.data.tasks.size(), 4u);
    EXPECT_EQ(r.config.data.tasks.at("lambada"), "lambada=var/data/tasks/lambada_test.jsonl");
    EXPECT_FALSE(r.config.train.eval_bos);  // lm-eval's default
    EXPECT_EQ(r.parent_index, -1);
    EXPECT_TRUE(r.parent_name.rfind("stage2/", 0) == 0) << r.parent_name;
  }
}

// The faithfulness questions' reference arm is not trained again: it is the ablations' baseline,
// which only holds while both files keep one recipe (cart report takes the ablations' runs whose
// config equals a faithfulness run's but for gate, weight-decay scope and seed).
TEST(PaperSweepsTest, FaithfulnessSharesItsRecipeWithTheAblationsBaseline) {
  const std::vector<ExpandedRun> faithfulness = ExpandPaper("faithfulness");
  const std::vector<ExpandedRun> ablations = ExpandPaper("ablations");
  ASSERT_FALSE(faithfulness.empty());
  ASSERT_FALSE(ablations.empty());
  std::map<std::string, std::string> reference = ablations.front().params;
  EXPECT_EQ(reference.at("gate"), "paper");
  EXPECT_EQ(reference.at("weight_decay_scope"), "all");
  for (const ExpandedRun& r : faithfulness) {
    std::map<std::string, std::string> params = r.params;
    EXPECT_FALSE(params.at("gate") == "paper" && params.at("weight_decay_scope") == "all")
        << r.name << ": the reference arm is trained by the ablations";
    for (const char* key : {"gate", "weight_decay_scope"}) params[key] = reference[key];
    EXPECT_EQ(params, reference) << r.name;
  }
}

TEST(PaperSweepsTest, BaselineDepthsAreWhatTheParameterHelperMatches) {
  ModelConfig cart;  // the stage-2 headline CART
  cart.vocab = 32000;
  cart.d = 1024;
  cart.P = 6;
  cart.R = 6;
  const std::vector<ExpandedRun> runs = ExpandPaper("baselines");
  ASSERT_EQ(runs.size(), 6u);
  EXPECT_EQ(runs.front().config.model.layers, MatchDenseDepth(cart, MatchTarget::kStored).layers);
  EXPECT_EQ(runs.back().config.model.layers, MatchDenseDepth(cart, MatchTarget::kEffective).layers);
  for (const ExpandedRun& r : runs) EXPECT_EQ(r.config.model.model, ModelKind::kDense);
}

TEST(PaperSweepsTest, AblationVariantsChangeOneSwitchSetEach) {
  const std::vector<ExpandedRun> runs = ExpandPaper("ablations");
  ASSERT_EQ(runs.size(), 6u);
  EXPECT_EQ(runs[0].params.at("kv"), "frozen");
  EXPECT_EQ(runs[1].params.at("kv"), "recompute");
  EXPECT_EQ(runs[2].params.at("R"), "1");
  EXPECT_EQ(runs[3].params.at("core"), "unshared");
  EXPECT_EQ(runs[3].params.at("core_attn"), "cross");
  EXPECT_EQ(runs[4].params.at("core_attn"), "self");
  EXPECT_EQ(runs[5].params.at("hyper"), "off");
  // Everything else is the baseline's.
  EXPECT_EQ(runs[5].params.at("R"), "6");
  EXPECT_EQ(runs[5].params.at("kv"), "frozen");
}

TEST(PaperSweepsTest, DryRunCostUsesThePapersThroughput) {
  // At a measured width, with the paper's own config, the estimate is the measured speed:
  // 30,500 steps × 32,768 tokens at 32,393 tokens/s = 8.57 h.
  const std::vector<ExpandedRun> stage2 = ExpandPaper("stage2");
  const ExpandedRun* headline = nullptr;
  for (const ExpandedRun& r : stage2) {
    if (r.kind == JobKind::kTrain && r.config.model.d == 1024 && r.config.model.R == 6)
      headline = &r;
  }
  ASSERT_NE(headline, nullptr);
  const RunCost cost = EstimateRunCost(headline->config, false, {});
  EXPECT_EQ(cost.tokens, int64_t{30500} * 32768);
  EXPECT_NEAR(cost.rtx3090_hours, 30500.0 * 32768 / 32393 / 3600, 0.01);
  // R = 10 costs more FLOPs per token, so more hours at the same width.
  const ExpandedRun* r10 = nullptr;
  for (const ExpandedRun& r : stage2) {
    if (r.kind == JobKind::kTrain && r.config.model.d == 1024 && r.config.model.R == 10) r10 = &r;
  }
  ASSERT_NE(r10, nullptr);
  EXPECT_GT(EstimateRunCost(r10->config, false, {}).rtx3090_hours, cost.rtx3090_hours);
}

TEST(SweepTest, DerivedJobsFromAnotherSweepNeedItsRuns) {
  constexpr char kDerivedOnly[] = R"(name: later
derived:
  - name: evalR
    kind: eval
    from: {sweep: first, match: {R: 4}}
    eval_loops: [1, 4]
)";
  CART_ASSERT_OK_AND_ASSIGN(SweepSpec spec, ParseSweepYaml(kDerivedOnly, "later.yaml"));
  EXPECT_EQ(ParentSweeps(spec), std::vector<std::string>{"first"});
  EXPECT_THAT(ExpandSweep(spec, "later.yaml"),
              StatusIs(absl::StatusCode::kNotFound, HasSubstr("sweep 'first'")));
  std::map<std::string, std::vector<ParentRun>> parents;
  for (int r : {2, 4}) {
    ParentRun p;
    p.run_id = 100 + r;
    p.index = r;
    p.name = "first/" + std::to_string(r);
    p.config.model.R = r;
    p.params["R"] = std::to_string(r);
    parents["first"].push_back(p);
  }
  CART_ASSERT_OK_AND_ASSIGN(auto runs, ExpandSweep(spec, "later.yaml", parents));
  ASSERT_EQ(runs.size(), 1u);  // no grid of its own: only the derived job
  EXPECT_EQ(runs[0].parent_run_id, 104);
  EXPECT_EQ(runs[0].parent_index, -1);
  EXPECT_EQ(runs[0].config.model.R, 4);
  parents["first"].pop_back();
  EXPECT_THAT(ExpandSweep(spec, "later.yaml", parents),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("matches no run of sweep")));
}

}  // namespace
}  // namespace cart::config
