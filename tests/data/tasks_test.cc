// Zero-shot task files in their published formats, read into lm-eval's requests.

#include "data/tasks.h"

#include <zlib.h>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/support/test_support.h"

namespace cart::data {
namespace {

using ::cart::testing::StatusIs;
using ::cart::testing::TempDir;
using ::cart::testing::WriteFile;
using ::testing::ElementsAre;
using ::testing::HasSubstr;

// Two lines in the layout of hellaswag_val.jsonl (fields as the release has them).
constexpr char kHellaSwag[] =
    R"({"ind": 24, "activity_label": "Roof shingle removal", "ctx_a": "A man is sitting on a roof.", "ctx_b": "he", "ctx": "A man is sitting on a roof. he", "split": "val", "split_type": "indomain", "label": 3, "endings": ["is using wrap to wrap a pair of skis.", "is ripping level tiles off.", "is holding a rubik's cube.", "starts pulling up roofing on a roof."], "source_id": "activitynet~v_-JhWjGDPHMY"})"
    "\n\n"
    R"({"ind": 92, "activity_label": "Finance and Business", "ctx_a": "[header] How to make a budget [title] Write down your income.", "ctx_b": "THEN list costs", "label": "0", "endings": ["[step] Add  them up.", "Eat.", "Sleep [substeps] well.", "Run."]})"
    "\n";

TEST(HellaSwagTest, BuildsLmEvalQueryAndCleansEndings) {
  TempDir dir;
  WriteFile(dir.File("hs.jsonl"), kHellaSwag);
  auto task = LoadTask({TaskKind::kHellaSwag, "hellaswag", dir.File("hs.jsonl")});
  ASSERT_TRUE(task.ok()) << task.status();
  ASSERT_EQ(task->items.size(), 2u);
  const TaskItem& a = task->items[0];
  // activity_label + ": " + ctx_a + " " + ctx_b.capitalize()
  EXPECT_EQ(a.context, "Roof shingle removal: A man is sitting on a roof. He");
  EXPECT_EQ(a.choices.size(), 4u);
  EXPECT_EQ(a.choices[3], "starts pulling up roofing on a roof.");
  EXPECT_EQ(a.gold, 3);
  EXPECT_EQ(a.line, 1);
  const TaskItem& b = task->items[1];
  // "[header]" dropped, " [title]" -> ". ", capitalize() lowers the rest, "  " -> " ". As in
  // lm-eval, a tag that opens an ending leaves its leading space: " Add them up.".
  EXPECT_EQ(b.context,
            "Finance and Business: How to make a budget. Write down your income. Then list costs");
  EXPECT_THAT(b.choices, ElementsAre(" Add them up.", "Eat.", "Sleep well.", "Run."));
  EXPECT_EQ(b.gold, 0);
  EXPECT_EQ(b.line, 3);
}

TEST(HellaSwagTest, PreprocessMatchesLmEval) {
  EXPECT_EQ(HellaSwagPreprocess("  a [title] b  "), "a. b");
  EXPECT_EQ(HellaSwagPreprocess("x [step] y [substeps] z"), "x y z");
  EXPECT_EQ(HellaSwagPreprocess("open [ bracket"), "open [ bracket");
  EXPECT_EQ(HellaSwagPreprocess("a   b"), "a  b");  // one non-overlapping pass, as str.replace
}

TEST(HellaSwagTest, MissingOrBadLabelNamesFileLineAndAllowedValues) {
  TempDir dir;
  WriteFile(dir.File("test.jsonl"), R"({"ctx": "c", "endings": ["a", "b", "c", "d"]})"
                                    "\n");
  EXPECT_THAT(LoadTask({TaskKind::kHellaSwag, "hs", dir.File("test.jsonl")}),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       AllOf(HasSubstr("test.jsonl:1:"), HasSubstr("\"label\""))));
  WriteFile(dir.File("bad.jsonl"), R"({"ctx": "c", "endings": ["a", "b", "c", "d"], "label": 0})"
                                   "\n"
                                   R"({"ctx": "c", "endings": ["a", "b", "c", "d"], "label": 4})"
                                   "\n");
  EXPECT_THAT(LoadTask({TaskKind::kHellaSwag, "hs", dir.File("bad.jsonl")}),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       AllOf(HasSubstr("bad.jsonl:2:"), HasSubstr("0..3"))));
  WriteFile(dir.File("json.jsonl"), "{\"ctx\": \n");
  EXPECT_THAT(LoadTask({TaskKind::kHellaSwag, "hs", dir.File("json.jsonl")}),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       AllOf(HasSubstr("json.jsonl:1:"), HasSubstr("not a JSON object"))));
}

TEST(PiqaTest, ReadsLabelsFileBesideTheJsonlAndHonoursLimit) {
  TempDir dir;
  WriteFile(
      dir.File("valid.jsonl"),
      R"({"goal": "How do I dry a phone?", "sol1": "Put it in rice.", "sol2": "Put it in water."})"
      "\n"
      R"({"goal": "Open a jar", "sol1": "Hit it with a hammer", "sol2": "Twist the lid"})"
      "\n");
  WriteFile(dir.File("valid-labels.lst"), "0\n1\n");
  auto task = LoadTask({TaskKind::kPiqa, "piqa", dir.File("valid.jsonl")});
  ASSERT_TRUE(task.ok()) << task.status();
  ASSERT_EQ(task->items.size(), 2u);
  EXPECT_EQ(task->items[0].context, "Question: How do I dry a phone?\nAnswer:");
  EXPECT_THAT(task->items[0].choices, ElementsAre("Put it in rice.", "Put it in water."));
  EXPECT_EQ(task->items[0].gold, 0);
  EXPECT_EQ(task->items[1].gold, 1);

  TaskSource limited{TaskKind::kPiqa, "piqa", dir.File("valid.jsonl")};
  limited.limit = 1;
  auto one = LoadTask(limited);
  ASSERT_TRUE(one.ok()) << one.status();
  EXPECT_EQ(one->items.size(), 1u);

  WriteFile(dir.File("other.lst"), "1\n2\n");
  TaskSource bad{TaskKind::kPiqa, "piqa", dir.File("valid.jsonl"), dir.File("other.lst")};
  EXPECT_THAT(LoadTask(bad), StatusIs(absl::StatusCode::kInvalidArgument,
                                      AllOf(HasSubstr("other.lst:2"), HasSubstr("allowed: 0, 1"))));
  WriteFile(dir.File("short.lst"), "1\n");
  TaskSource short_labels{TaskKind::kPiqa, "piqa", dir.File("valid.jsonl"), dir.File("short.lst")};
  EXPECT_THAT(LoadTask(short_labels),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("1 labels for 2 items")));
  std::filesystem::remove(dir.File("valid-labels.lst"));
  EXPECT_THAT(LoadTask({TaskKind::kPiqa, "piqa", dir.File("valid.jsonl")}),
              StatusIs(absl::StatusCode::kNotFound, HasSubstr("valid-labels.lst")));
}

TEST(ArcTest, ReadsTheAi2ReleaseAndTheHuggingFaceExport) {
  TempDir dir;
  WriteFile(dir.File("ARC-Easy-Dev.jsonl.gz"), "");  // replaced below with real gzip
  gzFile gz = gzopen(dir.File("ARC-Easy-Dev.jsonl.gz").c_str(), "wb");
  const std::string ai2 =
      R"({"id": "MCAS_2000_4_6", "question": {"stem": "Which is a metal?", "choices": [{"text": "wood", "label": "A"}, {"text": "iron", "label": "B"}, {"text": "glass", "label": "C"}]}, "answerKey": "B"})"
      "\n"
      R"({"id": "NYSEDREGENTS_2008_4_4", "question": {"stem": "Pick one.", "choices": [{"text": "x", "label": "1"}, {"text": "y", "label": "2"}, {"text": "z", "label": "3"}, {"text": "w", "label": "4"}]}, "answerKey": "4"})"
      "\n";
  gzwrite(gz, ai2.data(), static_cast<unsigned>(ai2.size()));
  gzclose(gz);
  auto task = LoadTask({TaskKind::kArc, "arc_easy", dir.File("ARC-Easy-Dev.jsonl.gz")});
  ASSERT_TRUE(task.ok()) << task.status();
  ASSERT_EQ(task->items.size(), 2u);
  EXPECT_EQ(task->items[0].context, "Question: Which is a metal?\nAnswer:");
  EXPECT_THAT(task->items[0].choices, ElementsAre("wood", "iron", "glass"));
  EXPECT_EQ(task->items[0].gold, 1);
  EXPECT_EQ(task->items[1].gold, 3);
  EXPECT_EQ(task->name, "arc_easy");

  WriteFile(
      dir.File("hf.jsonl"),
      R"({"id": "q1", "question": "Which is a gas?", "choices": {"text": ["rock", "air"], "label": ["A", "B"]}, "answerKey": "B"})"
      "\n"
      R"({"id": "q2", "question": "Which?", "choices": {"text": ["a", "b"], "label": ["A", "B"]}, "answerKey": "E"})"
      "\n");
  EXPECT_THAT(LoadTask({TaskKind::kArc, "arc", dir.File("hf.jsonl")}),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       AllOf(HasSubstr("hf.jsonl:2:"), HasSubstr("answerKey \"E\""),
                             HasSubstr("allowed: A, B"))));
  TaskSource first{TaskKind::kArc, "arc", dir.File("hf.jsonl")};
  first.limit = 1;
  auto hf = LoadTask(first);
  ASSERT_TRUE(hf.ok()) << hf.status();
  EXPECT_EQ(hf->items[0].context, "Question: Which is a gas?\nAnswer:");
  EXPECT_EQ(hf->items[0].gold, 1);
}

TEST(LambadaTest, TargetIsTheLastSpaceSeparatedWord) {
  TempDir dir;
  WriteFile(dir.File("lambada_test.jsonl"),
            R"({"text": "she handed him the key and said goodbye to Harriet"})"
            "\n"
            R"({"text": "oneword"})"
            "\n");
  TaskSource one{TaskKind::kLambada, "lambada", dir.File("lambada_test.jsonl")};
  one.limit = 1;
  auto task = LoadTask(one);
  ASSERT_TRUE(task.ok()) << task.status();
  EXPECT_EQ(task->items[0].context, "she handed him the key and said goodbye to");
  EXPECT_THAT(task->items[0].choices, ElementsAre("Harriet"));
  EXPECT_THAT(LoadTask({TaskKind::kLambada, "lambada", dir.File("lambada_test.jsonl")}),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("lambada_test.jsonl:2:")));
}

TEST(TaskSourceTest, ParsesKindNameAndOptions) {
  auto s = ParseTaskSource("arc_challenge:arc=/d/ARC-Challenge-Test.jsonl,limit=50");
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_EQ(s->kind, TaskKind::kArc);
  EXPECT_EQ(s->name, "arc_challenge");
  EXPECT_EQ(s->path, "/d/ARC-Challenge-Test.jsonl");
  EXPECT_EQ(s->limit, 50);
  auto p = ParseTaskSource("piqa=valid.jsonl,labels=l.lst");
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_EQ(p->name, "piqa");
  EXPECT_EQ(p->labels_path, "l.lst");
  EXPECT_THAT(ParseTaskSource("mmlu=x.jsonl"),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("allowed: hellaswag, piqa, arc, lambada")));
  EXPECT_THAT(ParseTaskSource("hellaswag"),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("KIND=FILE")));
  EXPECT_THAT(ParseTaskSource("arc=x.jsonl,labels=y"),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("allowed: limit=N")));
  EXPECT_THAT(ParseTaskSource("arc=x.jsonl,limit=0"),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("positive integer")));
  EXPECT_THAT(LoadTask({TaskKind::kArc, "arc", "/nonexistent/arc.jsonl"}),
              StatusIs(absl::StatusCode::kNotFound, HasSubstr("/nonexistent/arc.jsonl")));
}

TEST(TaskSourceTest, TrailingSpacesMoveToTheContinuation) {
  EXPECT_EQ(SplitTrailingSpaces("Answer: ", "yes"),
            std::make_pair(std::string("Answer:"), std::string(" yes")));
  EXPECT_EQ(SplitTrailingSpaces("Answer:", " yes"),
            std::make_pair(std::string("Answer:"), std::string(" yes")));
}

}  // namespace
}  // namespace cart::data
