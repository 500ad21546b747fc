#include "data/tasks.h"

#include <sys/stat.h>
#include <zlib.h>

#include <cerrno>
#include <cstring>
#include <nlohmann/json.hpp>

#include "common/status.h"
#include "common/strings.h"

namespace cart::data {
namespace {

using nlohmann::json;

constexpr TaskKind kKinds[] = {TaskKind::kHellaSwag, TaskKind::kPiqa, TaskKind::kArc,
                               TaskKind::kLambada};

// The whole (possibly gzip-compressed) file. Evaluation sets are small: HellaSwag's validation
// split, the largest, is 11 MB.
absl::StatusOr<std::string> ReadTaskFile(const std::string& path) {
  struct stat st;
  if (::stat(path.c_str(), &st) != 0) {
    if (errno == ENOENT) return absl::NotFoundError(StrCat("task file ", path, " does not exist"));
    return absl::PermissionDeniedError(StrCat("cannot stat ", path, ": ", std::strerror(errno)));
  }
  if (S_ISDIR(st.st_mode)) {
    return absl::InvalidArgumentError(StrCat("task file ", path, " is a directory"));
  }
  gzFile f = gzopen(path.c_str(), "rb");
  if (f == nullptr) {
    return absl::PermissionDeniedError(StrCat("cannot open ", path, ": ", std::strerror(errno)));
  }
  std::string out;
  char buffer[1 << 16];
  while (true) {
    const int n = gzread(f, buffer, sizeof buffer);
    if (n > 0) {
      out.append(buffer, static_cast<size_t>(n));
      continue;
    }
    int errnum = Z_OK;
    const char* msg = gzerror(f, &errnum);
    const std::string message = msg == nullptr ? "zlib error" : msg;
    gzclose(f);
    if (n < 0 || (errnum != Z_OK)) {
      return absl::DataLossError(StrCat(path, ": corrupt or truncated gzip stream: ", message));
    }
    return out;
  }
}

std::string Where(const std::string& path, int64_t line) { return StrCat(path, ":", line, ": "); }

absl::StatusOr<std::string> StringField(const json& j, const char* field, const std::string& at) {
  auto it = j.find(field);
  if (it == j.end()) return absl::InvalidArgumentError(StrCat(at, "missing field \"", field, "\""));
  if (!it->is_string()) {
    return absl::InvalidArgumentError(
        StrCat(at, "field \"", field, "\" must be a string, got ", it->type_name()));
  }
  return it->get<std::string>();
}

// A label given as a JSON integer or a string of digits, in [0, n).
absl::StatusOr<int> LabelField(const json& j, const char* field, int n, const std::string& at) {
  auto it = j.find(field);
  if (it == j.end()) {
    return absl::InvalidArgumentError(StrCat(at, "missing field \"", field,
                                             "\" (test splits carry no labels; use a labelled "
                                             "split)"));
  }
  std::optional<int64_t> v;
  if (it->is_number_integer()) {
    v = it->get<int64_t>();
  } else if (it->is_string()) {
    v = ParseInt64(it->get<std::string>());
  }
  if (!v || *v < 0 || *v >= n) {
    return absl::InvalidArgumentError(
        StrCat(at, "field \"", field, "\" is ", it->dump(), "; allowed: an integer 0..", n - 1));
  }
  return static_cast<int>(*v);
}

// Python's str.capitalize() on ASCII: first letter upper, the rest lower. Bytes above 0x7F are
// left as they are (lm-eval would case-map them too; HellaSwag's text is ASCII).
std::string Capitalize(std::string s) {
  for (size_t i = 0; i < s.size(); ++i) {
    const unsigned char c = static_cast<unsigned char>(s[i]);
    if (c >= 0x80) continue;
    s[i] = static_cast<char>(i == 0 ? std::toupper(c) : std::tolower(c));
  }
  return s;
}

absl::StatusOr<TaskItem> HellaSwagItem(const json& j, const std::string& at) {
  std::string ctx;
  if (j.contains("ctx_a") && j.contains("ctx_b")) {
    CART_ASSIGN_OR_RETURN(std::string a, StringField(j, "ctx_a", at));
    CART_ASSIGN_OR_RETURN(std::string b, StringField(j, "ctx_b", at));
    ctx = a + " " + Capitalize(b);
  } else {
    CART_ASSIGN_OR_RETURN(ctx, StringField(j, "ctx", at));
  }
  std::string activity;
  if (j.contains("activity_label")) {
    CART_ASSIGN_OR_RETURN(activity, StringField(j, "activity_label", at));
  }
  TaskItem item;
  item.context = HellaSwagPreprocess(activity.empty() ? ctx : activity + ": " + ctx);
  auto endings = j.find("endings");
  if (endings == j.end() || !endings->is_array() || endings->size() < 2) {
    return absl::InvalidArgumentError(
        StrCat(at, "field \"endings\" must be an array of at least 2 strings"));
  }
  for (const json& e : *endings) {
    if (!e.is_string()) {
      return absl::InvalidArgumentError(
          StrCat(at, "field \"endings\" holds a ", e.type_name(), "; allowed: strings"));
    }
    item.choices.push_back(HellaSwagPreprocess(e.get<std::string>()));
  }
  CART_ASSIGN_OR_RETURN(item.gold,
                        LabelField(j, "label", static_cast<int>(item.choices.size()), at));
  return item;
}

absl::StatusOr<TaskItem> PiqaItem(const json& j, const std::string& at) {
  CART_ASSIGN_OR_RETURN(std::string goal, StringField(j, "goal", at));
  CART_ASSIGN_OR_RETURN(std::string sol1, StringField(j, "sol1", at));
  CART_ASSIGN_OR_RETURN(std::string sol2, StringField(j, "sol2", at));
  TaskItem item;
  item.context = StrCat("Question: ", goal, "\nAnswer:");
  item.choices = {sol1, sol2};
  if (j.contains("label")) {  // the Hugging Face export carries the label inline
    CART_ASSIGN_OR_RETURN(item.gold, LabelField(j, "label", 2, at));
  } else {
    item.gold = -1;  // from the labels file
  }
  return item;
}

absl::StatusOr<TaskItem> ArcItem(const json& j, const std::string& at) {
  TaskItem item;
  std::vector<std::string> labels;
  auto q = j.find("question");
  if (q == j.end()) return absl::InvalidArgumentError(StrCat(at, "missing field \"question\""));
  if (q->is_object()) {  // AI2 release: question.stem, question.choices[{text, label}]
    CART_ASSIGN_OR_RETURN(std::string stem, StringField(*q, "stem", at + "question: "));
    item.context = StrCat("Question: ", stem, "\nAnswer:");
    auto choices = q->find("choices");
    if (choices == q->end() || !choices->is_array()) {
      return absl::InvalidArgumentError(StrCat(at, "field \"question.choices\" must be an array"));
    }
    for (const json& c : *choices) {
      if (!c.is_object()) {
        return absl::InvalidArgumentError(
            StrCat(at, "question.choices holds a ", c.type_name(), "; allowed: {text, label}"));
      }
      CART_ASSIGN_OR_RETURN(std::string text, StringField(c, "text", at + "question.choices: "));
      CART_ASSIGN_OR_RETURN(std::string label, StringField(c, "label", at + "question.choices: "));
      item.choices.push_back(std::move(text));
      labels.push_back(std::move(label));
    }
  } else if (q->is_string()) {  // Hugging Face export: choices {text: [...], label: [...]}
    item.context = StrCat("Question: ", q->get<std::string>(), "\nAnswer:");
    auto choices = j.find("choices");
    if (choices == j.end() || !choices->is_object() || !(*choices)["text"].is_array() ||
        !(*choices)["label"].is_array() ||
        (*choices)["text"].size() != (*choices)["label"].size()) {
      return absl::InvalidArgumentError(StrCat(
          at, "field \"choices\" must be {\"text\": [...], \"label\": [...]} of equal lengths"));
    }
    for (size_t i = 0; i < (*choices)["text"].size(); ++i) {
      const json& t = (*choices)["text"][i];
      const json& l = (*choices)["label"][i];
      if (!t.is_string() || !l.is_string()) {
        return absl::InvalidArgumentError(
            StrCat(at, "choices.text and choices.label must hold strings"));
      }
      item.choices.push_back(t.get<std::string>());
      labels.push_back(l.get<std::string>());
    }
  } else {
    return absl::InvalidArgumentError(
        StrCat(at, "field \"question\" must be an object {stem, choices} or a string, got ",
               q->type_name()));
  }
  if (item.choices.size() < 2) {
    return absl::InvalidArgumentError(StrCat(at, "fewer than 2 choices"));
  }
  CART_ASSIGN_OR_RETURN(std::string key, StringField(j, "answerKey", at));
  auto it = std::find(labels.begin(), labels.end(), key);
  if (it == labels.end()) {
    return absl::InvalidArgumentError(StrCat(
        at, "answerKey \"", key, "\" is not a choice label; allowed: ", StrJoin(labels, ", ")));
  }
  item.gold = static_cast<int>(it - labels.begin());
  return item;
}

absl::StatusOr<TaskItem> LambadaItem(const json& j, const std::string& at) {
  CART_ASSIGN_OR_RETURN(std::string text, StringField(j, "text", at));
  // lm-eval: context = all words but the last (split on ' '), target = ' ' + the last word.
  const size_t space = text.rfind(' ');
  if (space == std::string::npos || space + 1 == text.size()) {
    return absl::InvalidArgumentError(
        StrCat(at, "field \"text\" must end in a word preceded by a space"));
  }
  TaskItem item;
  item.context = text.substr(0, space);
  item.choices = {text.substr(space + 1)};
  item.gold = 0;
  return item;
}

absl::StatusOr<TaskItem> ParseItem(TaskKind kind, const json& j, const std::string& at) {
  switch (kind) {
    case TaskKind::kHellaSwag:
      return HellaSwagItem(j, at);
    case TaskKind::kPiqa:
      return PiqaItem(j, at);
    case TaskKind::kArc:
      return ArcItem(j, at);
    case TaskKind::kLambada:
      return LambadaItem(j, at);
  }
  return absl::InternalError("unknown task kind");
}

std::string DefaultPiqaLabels(std::string path) {
  if (path.size() > 3 && path.substr(path.size() - 3) == ".gz") path.resize(path.size() - 3);
  if (path.size() > 6 && path.substr(path.size() - 6) == ".jsonl") path.resize(path.size() - 6);
  return path + "-labels.lst";
}

absl::Status ApplyPiqaLabels(Task& task, const std::string& labels_path, bool all_items) {
  CART_ASSIGN_OR_RETURN(std::string text, ReadTaskFile(labels_path));
  std::vector<std::string> lines = Split(text, '\n');
  while (!lines.empty() && Trim(lines.back()).empty()) lines.pop_back();
  if (all_items ? lines.size() != task.items.size() : lines.size() < task.items.size()) {
    return absl::InvalidArgumentError(StrCat(labels_path, ": ", lines.size(), " labels for ",
                                             task.items.size(), " items in ", task.path));
  }
  for (size_t i = 0; i < task.items.size(); ++i) {
    const std::string label(Trim(lines[i]));
    if (label != "0" && label != "1") {
      return absl::InvalidArgumentError(
          StrCat(labels_path, ":", i + 1, ": label \"", label, "\"; allowed: 0, 1"));
    }
    task.items[i].gold = label == "1" ? 1 : 0;
  }
  return absl::OkStatus();
}

}  // namespace

std::string TaskKindName(TaskKind kind) {
  switch (kind) {
    case TaskKind::kHellaSwag:
      return "hellaswag";
    case TaskKind::kPiqa:
      return "piqa";
    case TaskKind::kArc:
      return "arc";
    case TaskKind::kLambada:
      return "lambada";
  }
  return "?";
}

absl::StatusOr<TaskKind> ParseTaskKind(std::string_view name) {
  std::vector<std::string> names;
  for (TaskKind k : kKinds) {
    if (TaskKindName(k) == name) return k;
    names.push_back(TaskKindName(k));
  }
  return absl::InvalidArgumentError(
      StrCat("unknown task \"", name, "\"; allowed: ", StrJoin(names, ", ")));
}

absl::StatusOr<TaskSource> ParseTaskSource(std::string_view spec) {
  std::vector<std::string> parts = Split(spec, ',');
  const std::string& head = parts.front();
  const size_t eq = head.find('=');
  if (eq == std::string::npos || eq + 1 == head.size()) {
    return absl::InvalidArgumentError(
        StrCat("task \"", spec, "\": expected KIND=FILE[,labels=FILE][,limit=N]"));
  }
  TaskSource source;
  std::string kind = head.substr(0, eq);
  if (const size_t colon = kind.find(':'); colon != std::string::npos) {
    source.name = kind.substr(0, colon);
    kind = kind.substr(colon + 1);
  }
  CART_ASSIGN_OR_RETURN(source.kind, ParseTaskKind(kind));
  if (source.name.empty()) source.name = kind;
  source.path = head.substr(eq + 1);
  for (size_t i = 1; i < parts.size(); ++i) {
    const size_t e = parts[i].find('=');
    const std::string key = e == std::string::npos ? parts[i] : parts[i].substr(0, e);
    const std::string value = e == std::string::npos ? "" : parts[i].substr(e + 1);
    if (key == "labels" && source.kind == TaskKind::kPiqa && !value.empty()) {
      source.labels_path = value;
    } else if (key == "limit") {
      std::optional<int64_t> n = ParseInt64(value);
      if (!n || *n < 1) {
        return absl::InvalidArgumentError(
            StrCat("task \"", spec, "\": limit \"", value, "\" must be a positive integer"));
      }
      source.limit = *n;
    } else {
      return absl::InvalidArgumentError(
          StrCat("task \"", spec, "\": unknown option \"", parts[i], "\"; allowed: limit=N",
                 source.kind == TaskKind::kPiqa ? ", labels=FILE" : ""));
    }
  }
  return source;
}

absl::StatusOr<Task> LoadTask(const TaskSource& source) {
  CART_ASSIGN_OR_RETURN(std::string text, ReadTaskFile(source.path));
  Task task;
  task.kind = source.kind;
  task.name = source.name.empty() ? TaskKindName(source.kind) : source.name;
  task.path = source.path;
  bool piqa_inline_labels = true;
  int64_t line_number = 0;
  size_t pos = 0;
  while (pos < text.size() &&
         (source.limit == 0 || static_cast<int64_t>(task.items.size()) < source.limit)) {
    size_t end = text.find('\n', pos);
    if (end == std::string::npos) end = text.size();
    std::string_view line(text.data() + pos, end - pos);
    pos = end + 1;
    ++line_number;
    if (Trim(line).empty()) continue;
    const std::string at = Where(source.path, line_number);
    json j = json::parse(line, nullptr, /*allow_exceptions=*/false);
    if (j.is_discarded() || !j.is_object()) {
      return absl::InvalidArgumentError(StrCat(at, "not a JSON object"));
    }
    CART_ASSIGN_OR_RETURN(TaskItem item, ParseItem(source.kind, j, at));
    if (item.gold < 0) piqa_inline_labels = false;
    item.line = line_number;
    task.items.push_back(std::move(item));
  }
  if (task.items.empty()) {
    return absl::InvalidArgumentError(StrCat(source.path, ": no items"));
  }
  if (source.kind == TaskKind::kPiqa && !piqa_inline_labels) {
    const std::string labels =
        source.labels_path.empty() ? DefaultPiqaLabels(source.path) : source.labels_path;
    CART_RETURN_IF_ERROR(ApplyPiqaLabels(task, labels, /*all_items=*/source.limit == 0));
  }
  return task;
}

std::string HellaSwagPreprocess(std::string_view text) {
  std::string s(Trim(text));
  // " [title]" -> ". "
  for (size_t at = s.find(" [title]"); at != std::string::npos; at = s.find(" [title]", at + 2)) {
    s.replace(at, 8, ". ");
  }
  // Drop every "[...]" (shortest match), as re.sub(r"\[.*?\]", "", text) does.
  std::string out;
  out.reserve(s.size());
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '[') {
      const size_t close = s.find(']', i + 1);
      if (close != std::string::npos) {
        i = close;
        continue;
      }
    }
    out.push_back(s[i]);
  }
  // "  " -> " ", one pass, non-overlapping, as str.replace does.
  std::string result;
  result.reserve(out.size());
  for (size_t i = 0; i < out.size(); ++i) {
    if (out[i] == ' ' && i + 1 < out.size() && out[i + 1] == ' ') {
      result.push_back(' ');
      ++i;
      continue;
    }
    result.push_back(out[i]);
  }
  return result;
}

std::pair<std::string, std::string> SplitTrailingSpaces(std::string context,
                                                        std::string continuation) {
  size_t n = 0;
  while (n < context.size() &&
         std::isspace(static_cast<unsigned char>(context[context.size() - 1 - n]))) {
    ++n;
  }
  if (n > 0) {
    continuation = context.substr(context.size() - n) + continuation;
    context.resize(context.size() - n);
  }
  return {std::move(context), std::move(continuation)};
}

}  // namespace cart::data
