#pragma once

// Zero-shot evaluation sets in their published file formats, turned into the requests that
// lm-evaluation-harness makes for them: a context and one continuation per choice, scored by
// the sum of the continuation's token log-likelihoods. No LibTorch here; train/zero_shot.h
// scores the requests with a model.
//
// Formats (every file may be gzip-compressed; one JSON object per line, blank lines skipped):
//   hellaswag  hellaswag_{train,val}.jsonl: "ctx_a" + "ctx_b" (or "ctx"), "activity_label",
//              "endings" (4 strings), "label" (0..3, integer or string)
//   piqa       {train,valid}.jsonl: "goal", "sol1", "sol2"; labels in a second file,
//              {train,valid}-labels.lst, one 0/1 per line (by default found beside the jsonl)
//   arc        ARC-{Easy,Challenge}-{Train,Dev,Test}.jsonl from the AI2 release
//              ("question": {"stem", "choices": [{"text", "label"}]}, "answerKey"), or the
//              Hugging Face export ("question": string, "choices": {"text": [], "label": []})
//   lambada    lambada_test.jsonl (the lambada_openai layout): "text"; the last word is the target

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"

namespace cart::data {

enum class TaskKind { kHellaSwag, kPiqa, kArc, kLambada };

std::string TaskKindName(TaskKind kind);  // "hellaswag", "piqa", "arc", "lambada"
// InvalidArgument listing the allowed names for anything else.
absl::StatusOr<TaskKind> ParseTaskKind(std::string_view name);

// One item. Multiple choice: `choices` holds every option as it is scored (lm-eval's
// doc_to_choice, without the leading space) and `gold` the index of the right one. LAMBADA:
// `choices` holds the single target word and gold is 0.
struct TaskItem {
  std::string context;
  std::vector<std::string> choices;
  int gold = 0;
  int64_t line = 0;  // 1-based line of the item in its file, for messages
};

struct Task {
  TaskKind kind = TaskKind::kHellaSwag;
  std::string name;  // as given (e.g. "hellaswag", "arc_easy")
  std::string path;
  std::vector<TaskItem> items;
};

// What a Task file is and where its extra parts are.
struct TaskSource {
  TaskKind kind = TaskKind::kHellaSwag;
  std::string name;
  std::string path;
  // PIQA only: the labels file; empty means PATH with ".jsonl" (and any ".gz") replaced by
  // "-labels.lst", which is how the PIQA release names it.
  std::string labels_path;
  int64_t limit = 0;  // read at most this many items; 0 means all
};

// Parses "KIND=PATH[,labels=PATH][,limit=N]" or "NAME:KIND=PATH..." (a name other than the kind,
// e.g. "arc_challenge:arc=ARC-Challenge-Test.jsonl"). InvalidArgument naming the part at fault.
absl::StatusOr<TaskSource> ParseTaskSource(std::string_view spec);

// Reads a task. NotFound for a missing file; InvalidArgument "PATH:LINE: problem" naming the
// field and, for labels, the allowed values; InvalidArgument when the file holds no items.
absl::StatusOr<Task> LoadTask(const TaskSource& source);

// lm-eval's HellaSwag text clean-up: strip, " [title]" -> ". ", drop "[...]" tags, "  " -> " ".
std::string HellaSwagPreprocess(std::string_view text);

// Where lm-eval joins a context and a continuation: any spaces that end the context move to the
// start of the continuation, so that the tokenizer sees " word" as it would in running text.
// Returns {context, continuation}.
std::pair<std::string, std::string> SplitTrailingSpaces(std::string context,
                                                        std::string continuation);

}  // namespace cart::data
