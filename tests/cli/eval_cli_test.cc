// `cart data prepare` + `cart train` + `cart eval --task` as a user runs them: a small byte-level
// CART learns which animal eats what, and the zero-shot tasks, in their real file formats,
// find it out.

#include <nlohmann/json.hpp>
#include <random>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/support/test_support.h"

namespace cart::testing {
namespace {

using ::testing::HasSubstr;

const std::vector<std::pair<std::string, std::string>> kEats = {
    {"cat", "fish"}, {"dog", "meat"}, {"cow", "grass"}, {"bird", "seeds"}};

// Lines "the ANIMAL eats FOOD." in a seeded random order, and a run config that learns them.
void WriteCorpusAndConfig(const TempDir& dir) {
  std::mt19937 rng(1);
  std::string text;
  for (int i = 0; i < 3000; ++i) {
    const auto& [animal, food] = kEats[rng() % kEats.size()];
    text += "the " + animal + " eats " + food + ".\n";
  }
  WriteFile(dir.File("eats.txt"), text);
  WriteFile(dir.File("run.yaml"),
            "vocab: 258\nd: 64\nP: 1\nR: 2\nsteps: 150\nseq_len: 64\n"
            "batch: 8\nlr: 1e-2\nlr_min: 1e-3\nwarmup: 20\nlog_every: 50\n"
            "eval_every: 0\ncheckpoint_every: 150\nthreads: 1\n"
            "train_data: " +
                dir.File("eats.bin") + "\n");
}

// The same facts in the layouts of HellaSwag, PIQA (+ labels file), ARC and LAMBADA.
void WriteTasks(const TempDir& dir) {
  std::string hellaswag, piqa, labels, arc, lambada;
  nlohmann::json endings = nlohmann::json::array();
  for (const auto& [animal, food] : kEats) endings.push_back(food + ".");
  for (size_t i = 0; i < kEats.size(); ++i) {
    const auto& [animal, food] = kEats[i];
    hellaswag +=
        nlohmann::json{{"ctx", "the " + animal + " eats"}, {"endings", endings}, {"label", i}}
            .dump() +
        "\n";
    const std::string other = kEats[(i + 1) % kEats.size()].second;
    piqa += nlohmann::json{{"goal", "the " + animal + " eats"}, {"sol1", other}, {"sol2", food}}
                .dump() +
            "\n";
    labels += "1\n";
    nlohmann::json choices = nlohmann::json::array();
    for (size_t k = 0; k < kEats.size(); ++k) {
      choices.push_back({{"text", kEats[k].second}, {"label", std::string(1, 'A' + k)}});
    }
    arc += nlohmann::json{{"id", i},
                          {"question",
                           {{"stem", "What does the " + animal + " eat?"}, {"choices", choices}}},
                          {"answerKey", std::string(1, 'A' + i)}}
               .dump() +
           "\n";
    lambada += nlohmann::json{{"text", "the " + animal + " eats " + food}}.dump() + "\n";
  }
  WriteFile(dir.File("hellaswag_val.jsonl"), hellaswag);
  WriteFile(dir.File("valid.jsonl"), piqa);
  WriteFile(dir.File("valid-labels.lst"), labels);
  WriteFile(dir.File("ARC-Easy-Test.jsonl"), arc);
  WriteFile(dir.File("lambada_test.jsonl"), lambada);
}

TEST(EvalCliTest, TrainedModelAnswersZeroShotTasksInTheirRealFormats) {
  TempDir dir;
  WriteCorpusAndConfig(dir);
  WriteTasks(dir);
  CommandResult prep = RunCart("data prepare " + dir.File("eats.txt") + " --format lines --out " +
                               dir.File("eats.bin"));
  ASSERT_EQ(prep.exit_code, 0) << prep.output;
  CommandResult train =
      RunCart("train " + dir.File("run.yaml") + " --out " + dir.File("run") + " --quiet");
  ASSERT_EQ(train.exit_code, 0) << train.output;

  CommandResult eval = RunCart("eval " + dir.File("run") +
                               " --json --task hellaswag=" + dir.File("hellaswag_val.jsonl") +
                               " --task piqa=" + dir.File("valid.jsonl") +
                               " --task arc_easy:arc=" + dir.File("ARC-Easy-Test.jsonl") +
                               " --task lambada=" + dir.File("lambada_test.jsonl"));
  ASSERT_EQ(eval.exit_code, 0) << eval.output;
  // Like a training run, an evaluation first says where and in which precision it runs.
  EXPECT_THAT(eval.output, HasSubstr("cart: device: cpu, fp32"));
  const nlohmann::json rows = nlohmann::json::parse(eval.output.substr(eval.output.find('[')));
  std::map<std::string, nlohmann::json> by_task;
  for (const auto& row : rows) by_task[row["task"].get<std::string>()] = row;
  ASSERT_EQ(by_task.size(), 4u) << eval.output;
  for (const auto& [name, row] : by_task) {
    EXPECT_EQ(row["items"], 4) << name;
    EXPECT_EQ(row["step"], 150) << name;
    EXPECT_EQ(row["bos"], false) << name;  // lm-eval's default for causal models
  }
  // The model saw "the cat eats fish." thousands of times: chance is 0.25 for HellaSwag; it
  // must get every item. LAMBADA: every target word is the model's greedy continuation, at a
  // perplexity near 1 (an untrained byte model is near 258).
  EXPECT_EQ(by_task["hellaswag"]["acc"], 1.0) << by_task["hellaswag"];
  EXPECT_DOUBLE_EQ(by_task["hellaswag"]["chance"].get<double>(), 0.25);
  EXPECT_EQ(by_task["lambada"]["acc"], 1.0) << by_task["lambada"];
  EXPECT_LT(by_task["lambada"]["perplexity"].get<double>(), 1.5) << by_task["lambada"];
  EXPECT_DOUBLE_EQ(by_task["piqa"]["chance"].get<double>(), 0.5);
  EXPECT_EQ(by_task["arc_easy"]["kind"], "arc");

  // --bos starts each context with BOS, the way every training document started, and says so.
  CommandResult with_bos = RunCart(
      "eval " + dir.File("run") + " --json --bos --task lambada=" + dir.File("lambada_test.jsonl"));
  ASSERT_EQ(with_bos.exit_code, 0) << with_bos.output;
  const nlohmann::json bos_rows =
      nlohmann::json::parse(with_bos.output.substr(with_bos.output.find('[')));
  ASSERT_EQ(bos_rows.size(), 1u) << with_bos.output;
  EXPECT_EQ(bos_rows[0]["bos"], true);
  EXPECT_NE(bos_rows[0]["perplexity"].get<double>(),
            by_task["lambada"]["perplexity"].get<double>());

  CommandResult bad =
      RunCart("eval " + dir.File("run") + " --task mmlu=" + dir.File("valid.jsonl"));
  EXPECT_EQ(bad.exit_code, 2) << bad.output;
  EXPECT_THAT(bad.output, HasSubstr("allowed: hellaswag, piqa, arc, lambada"));
  CommandResult missing =
      RunCart("eval " + dir.File("run") + " --task piqa=" + dir.File("nope.jsonl"));
  EXPECT_NE(missing.exit_code, 0);
  EXPECT_THAT(missing.output, HasSubstr("nope.jsonl"));
}

}  // namespace
}  // namespace cart::testing
