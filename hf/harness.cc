#include "hf/harness.h"

#include <signal.h>
#include <sys/wait.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <optional>
#include <thread>

#include "common/file.h"
#include "common/process.h"
#include "common/status.h"
#include "common/strings.h"
#include "data/tasks.h"
#include "hf/python_sources.h"

namespace cart::hf {
namespace fs = std::filesystem;
using nlohmann::json;

namespace {

// The last `lines` lines of `text`, without the newline that ends it.
std::string Tail(std::string text, int lines) {
  while (!text.empty() && text.back() == '\n') text.pop_back();
  size_t at = text.size();
  while (lines-- > 0) {
    const size_t nl = at == 0 ? std::string::npos : text.rfind('\n', at - 1);
    if (nl == std::string::npos) return text;
    at = nl;
  }
  return text.substr(at + 1);
}

double Number(const json& v) { return v.is_number() ? v.get<double>() : 0.0; }

absl::StatusOr<train::TaskResult> ToTaskResult(const json& t, const HarnessTask& task) {
  train::TaskResult r;
  r.name = task.name;
  const bool loglikelihood = t.contains("perplexity") && t["perplexity"].is_number();
  if (!task.kind.empty()) {
    CART_ASSIGN_OR_RETURN(r.kind, data::ParseTaskKind(task.kind));
  } else {
    // A registry task: a loglikelihood task reports perplexity as LAMBADA does; any other is
    // scored as multiple choice.
    r.kind = loglikelihood ? data::TaskKind::kLambada : data::TaskKind::kArc;
  }
  r.items = t.value("items", int64_t{0});
  r.acc = Number(t["acc"]);
  r.acc_stderr = Number(t["acc_stderr"]);
  r.acc_norm = Number(t["acc_norm"]);
  r.has_acc_norm = t["acc_norm"].is_number();
  r.acc_norm_stderr = Number(t["acc_norm_stderr"]);
  r.perplexity = Number(t["perplexity"]);
  const json& lls = t["item_logprobs"];
  const json& acc = t["item_acc"];
  const json& acc_norm = t["item_acc_norm"];
  const json& gold = t["gold"];
  int64_t choices = 0;
  for (size_t i = 0; i < lls.size(); ++i) {
    std::vector<double> item = lls[i].get<std::vector<double>>();
    r.item_correct.push_back(Number(acc[i]) > 0.5 ? '1' : '0');
    if (r.kind == data::TaskKind::kLambada) {
      r.item_logprob.push_back(item.empty() ? 0.0 : item[0]);
      r.item_gold.push_back(0);
    } else {
      if (r.has_acc_norm) r.item_correct_norm.push_back(Number(acc_norm[i]) > 0.5 ? '1' : '0');
      r.item_gold.push_back(gold[i].is_number() ? gold[i].get<int>() : -1);
      // Ties go to the first choice, as numpy.argmax does.
      r.item_choice.push_back(
          static_cast<int>(std::max_element(item.begin(), item.end()) - item.begin()));
      const int64_t n = static_cast<int64_t>(item.size());
      choices = (choices == 0 || choices == n) ? n : -1;
    }
    r.item_choice_logprob.push_back(std::move(item));
  }
  r.chance_choices = choices;
  return r;
}

}  // namespace

absl::StatusOr<std::vector<HarnessTask>> HarnessTasksFor(const config::RunConfig& config) {
  std::vector<HarnessTask> tasks;
  for (const std::string& name : config::LmEvalTasks(config.data)) {
    HarnessTask task;
    task.name = name;
    auto local = config.data.tasks.find(name);
    if (local != config.data.tasks.end()) {
      CART_ASSIGN_OR_RETURN(data::TaskSource source,
                            data::ParseTaskSource(name + ":" + local->second));
      task.kind = data::TaskKindName(source.kind);
      task.path = source.path;
      task.labels = source.labels_path;
      task.limit = source.limit;
    }
    tasks.push_back(std::move(task));
  }
  return tasks;
}

absl::StatusOr<std::vector<train::TaskResult>> RunHarness(const HarnessRequest& request) {
  std::error_code ec;
  fs::create_directories(request.work_dir, ec);
  if (ec) {
    return absl::InternalError(StrCat("cannot create ", request.work_dir, ": ", ec.message()));
  }
  const fs::path work(request.work_dir);
  const std::string runner = (work / "cart_harness.py").string();
  const std::string output = (work / "result.json").string();
  const std::string log = (work / "harness.log").string();
  CART_RETURN_IF_ERROR(WriteFileAtomically(runner, PythonSource("cart_harness.py")));
  json tasks = json::array();
  for (const HarnessTask& t : request.tasks) {
    json task = {{"name", t.name}};
    if (!t.path.empty()) {
      task.update({{"kind", t.kind}, {"path", t.path}, {"labels", t.labels}, {"limit", t.limit}});
    }
    tasks.push_back(task);
  }
  const json spec = {{"model", request.model_dir},
                     {"output", output},
                     {"work_dir", (work / "tasks").string()},
                     {"device", request.device},
                     {"batch_size", request.batch},
                     {"add_bos_token", request.add_bos},
                     {"loops", request.loops},
                     {"tasks", tasks}};
  const std::string spec_path = (work / "request.json").string();
  CART_RETURN_IF_ERROR(WriteFileAtomically(spec_path, spec.dump(1)));
  fs::remove(output, ec);
  fs::remove(log, ec);
  SpawnOptions options;
  options.output_path = log;
  const std::optional<std::string> python = FindProgram(request.python);
  if (!python) {
    return absl::FailedPreconditionError(
        StrCat("no Python '", request.python,
               "' (not executable, or not on PATH) to run lm-evaluation-harness; point the "
               "worker's --python at the environment deploy/install-torch2.sh makes"));
  }
  // The harness's PyTorch uses the threads the worker trains with, not every core.
  if (request.threads > 0) {
    options.env.push_back(StrCat("OMP_NUM_THREADS=", request.threads));
    options.env.push_back(StrCat("MKL_NUM_THREADS=", request.threads));
  }
  CART_ASSIGN_OR_RETURN(pid_t pid, Spawn(*python, {runner, spec_path}, options));
  // Waits for it, ending it (SIGTERM, then SIGKILL after 10 s) once *stop turns true.
  int status = 0;
  bool signalled = false;
  auto stopped_at = std::chrono::steady_clock::time_point();
  for (;;) {
    const pid_t done = waitpid(pid, &status, WNOHANG);
    if (done == pid) break;
    if (done < 0 && errno != EINTR) {
      return absl::InternalError(StrCat("waiting for lm-eval (pid ", pid, "): ", strerror(errno)));
    }
    if (request.stop != nullptr && request.stop->load()) {
      const auto now = std::chrono::steady_clock::now();
      if (!signalled) {
        stopped_at = now;
        signalled = true;
        kill(pid, SIGTERM);
      } else if (now - stopped_at > std::chrono::seconds(10)) {
        kill(pid, SIGKILL);
      }
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  if (signalled) return absl::CancelledError("lm-eval stopped: the job was asked to stop");
  const std::string said = ReadWholeFile(log).value_or("");
  const int code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  if (code == 2) {
    const size_t at = said.rfind("cart_harness: ");
    std::string message = at == std::string::npos ? Tail(said, 3) : said.substr(at + 14);
    while (!message.empty() && message.back() == '\n') message.pop_back();
    return absl::InvalidArgumentError(message);
  }
  if (said.find("CUDA out of memory") != std::string::npos ||
      said.find("OutOfMemoryError") != std::string::npos) {
    return absl::ResourceExhaustedError(
        StrCat("lm-eval ran out of device memory: ", Tail(said, 1)));
  }
  if (code == 127 || said.find("No module named 'lm_eval'") != std::string::npos ||
      said.find("No module named 'transformers'") != std::string::npos) {
    return absl::FailedPreconditionError(
        StrCat(request.python, " cannot run lm-evaluation-harness (", Tail(said, 1),
               "); point the worker's --python at the environment deploy/install-torch2.sh makes"));
  }
  if (code != 0) {
    return absl::InternalError(
        StrCat("lm-eval exited with status ", code, "; the end of ", log, ":\n", Tail(said, 15)));
  }
  CART_ASSIGN_OR_RETURN(std::string text, ReadWholeFile(output));
  json result = json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (!result.is_object() || !result["tasks"].is_array() ||
      result["tasks"].size() != request.tasks.size()) {
    return absl::InternalError(StrCat(output, ": not the harness runner's result"));
  }
  std::vector<train::TaskResult> results;
  for (size_t i = 0; i < request.tasks.size(); ++i) {
    CART_ASSIGN_OR_RETURN(train::TaskResult r, ToTaskResult(result["tasks"][i], request.tasks[i]));
    results.push_back(std::move(r));
  }
  return results;
}

}  // namespace cart::hf
