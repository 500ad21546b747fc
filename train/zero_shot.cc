#include "train/zero_shot.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "common/status.h"
#include "common/strings.h"
#include "data/token_file.h"
#include "model/readout.h"
#include "train/precision.h"
#include "train/torch_error.h"

namespace cart::train {
namespace {

// Characters (Unicode code points) of UTF-8 text, as Python's len() counts them for acc_norm.
double CharLength(const std::string& text) { return static_cast<double>(Utf8Length(text)); }

// Mean and its standard error (sample standard deviation / √n), lm-eval's mean_stderr.
std::pair<double, double> MeanAndStderr(const std::vector<double>& xs) {
  const double n = static_cast<double>(xs.size());
  const double mean = std::accumulate(xs.begin(), xs.end(), 0.0) / n;
  if (xs.size() < 2) return {mean, 0.0};
  double var = 0;
  for (double x : xs) var += (x - mean) * (x - mean);
  return {mean, std::sqrt(var / (n - 1) / n)};
}

absl::Status ScoreBatch(model::LanguageModel& model,
                        const std::vector<ContinuationRequest>& requests,
                        const std::vector<size_t>& order, size_t begin, size_t end,
                        const ZeroShotOptions& options, std::vector<ContinuationScore>* out) {
  // Input i is (context + continuation)[-(max_len + 1):][:-1]; the continuation's targets are
  // the last |continuation| positions of it.
  std::vector<std::vector<int64_t>> inputs;
  int64_t width = 0;
  for (size_t k = begin; k < end; ++k) {
    const ContinuationRequest& r = requests[order[k]];
    std::vector<int64_t> all = r.context;
    all.insert(all.end(), r.continuation.begin(), r.continuation.end());
    const size_t keep = std::min(all.size(), static_cast<size_t>(options.max_len + 1));
    std::vector<int64_t> input(all.end() - static_cast<std::ptrdiff_t>(keep), all.end() - 1);
    width = std::max<int64_t>(width, static_cast<int64_t>(input.size()));
    inputs.push_back(std::move(input));
  }
  const int64_t b = static_cast<int64_t>(inputs.size());
  torch::Tensor ids = torch::zeros({b, width}, torch::kInt64);  // right padding: id 0
  auto acc = ids.accessor<int64_t, 2>();
  for (int64_t i = 0; i < b; ++i) {
    for (size_t t = 0; t < inputs[i].size(); ++t) acc[i][static_cast<int64_t>(t)] = inputs[i][t];
  }
  const torch::Device device = model.parameters().front().device();
  model::ForwardOptions forward;
  forward.loops = options.loops;
  // Only the continuation rows are normalised, on the model's device: the whole (B, W, V)
  // log-softmax would be vocab-sized per position and, on a GPU, a large copy back.
  torch::Tensor logits;
  {
    MixedPrecisionScope scope(options.mixed_precision, device);
    logits = model.Forward(ids.to(device), forward);  // (B, W, V)
  }
  // Every continuation's targets in one host tensor, copied once; each request's log-probability
  // and greedy match stay on the device until one read for the batch.
  std::vector<int64_t> targets;
  for (int64_t i = 0; i < b; ++i) {
    const ContinuationRequest& r = requests[order[begin + static_cast<size_t>(i)]];
    targets.insert(targets.end(), r.continuation.begin(), r.continuation.end());
  }
  const torch::Tensor all_targets = torch::tensor(targets, torch::kInt64).to(device);
  std::vector<torch::Tensor> values;
  values.reserve(static_cast<size_t>(2 * b));
  int64_t offset = 0;
  for (int64_t i = 0; i < b; ++i) {
    const ContinuationRequest& r = requests[order[begin + static_cast<size_t>(i)]];
    const int64_t len = static_cast<int64_t>(inputs[i].size());
    const int64_t n = static_cast<int64_t>(r.continuation.size());
    torch::Tensor rows =
        torch::log_softmax(logits[i].slice(0, len - n, len).to(torch::kFloat32), -1);  // (n, V)
    const torch::Tensor target = all_targets.slice(0, offset, offset + n);
    offset += n;
    values.push_back(rows.gather(1, target.unsqueeze(1)).sum());
    values.push_back(rows.argmax(1).eq(target).all());
  }
  const std::vector<double> host = model::ReadToHost(values);
  for (int64_t i = 0; i < b; ++i) {
    ContinuationScore s;
    s.logprob = host[static_cast<size_t>(2 * i)];
    s.greedy = host[static_cast<size_t>(2 * i + 1)] != 0;
    (*out)[order[begin + static_cast<size_t>(i)]] = s;
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::vector<ContinuationScore>> ScoreContinuations(
    model::LanguageModel& model, const std::vector<ContinuationRequest>& requests,
    const ZeroShotOptions& options) {
  if (options.max_len < 1 || options.batch < 1) {
    return absl::InvalidArgumentError(
        StrCat("max_len ", options.max_len, " and batch ", options.batch, " must be positive"));
  }
  const int64_t vocab = model.config().vocab;
  for (size_t i = 0; i < requests.size(); ++i) {
    const ContinuationRequest& r = requests[i];
    if (r.context.empty() || r.continuation.empty()) {
      return absl::InvalidArgumentError(
          StrCat("request ", i, ": context and continuation must both be non-empty"));
    }
    if (static_cast<int64_t>(r.continuation.size()) > options.max_len) {
      return absl::InvalidArgumentError(
          StrCat("request ", i, ": continuation of ", r.continuation.size(),
                 " tokens is longer than the model context ", options.max_len));
    }
    for (const auto* part : {&r.context, &r.continuation}) {
      for (int64_t id : *part) {
        if (id < 0 || id >= vocab) {
          return absl::InvalidArgumentError(
              StrCat("request ", i, ": token id ", id, " outside the model's vocabulary 0..",
                     vocab - 1, " (was the run trained with another tokenizer?)"));
        }
      }
    }
  }
  // Longest first, so that a batch holds inputs of similar length (less padding).
  std::vector<size_t> order(requests.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    return requests[a].context.size() + requests[a].continuation.size() >
           requests[b].context.size() + requests[b].continuation.size();
  });
  std::vector<ContinuationScore> out(requests.size());
  const bool was_training = model.is_training();
  model.eval();
  torch::NoGradGuard no_grad;
  absl::Status status;
  try {
    for (size_t begin = 0; begin < order.size() && status.ok();
         begin += static_cast<size_t>(options.batch)) {
      const size_t end = std::min(order.size(), begin + static_cast<size_t>(options.batch));
      status = ScoreBatch(model, requests, order, begin, end, options, &out);
    }
  } catch (const std::exception& e) {
    status = FromTorchError(e, "forward pass failed");
  }
  model.train(was_training);
  CART_RETURN_IF_ERROR(status);
  return out;
}

ContinuationRequest EncodePair(const data::Tokenizer& tokenizer, const std::string& context,
                               const std::string& continuation, bool prepend_bos) {
  auto [ctx, cont] = data::SplitTrailingSpaces(context, continuation);
  std::vector<int64_t> whole = tokenizer.Encode(ctx + cont);
  std::vector<int64_t> context_ids = tokenizer.Encode(ctx);
  ContinuationRequest r;
  if (prepend_bos && tokenizer.bos_id() >= 0) r.context.push_back(tokenizer.bos_id());
  const size_t split = std::min(context_ids.size(), whole.size());
  r.context.insert(r.context.end(), whole.begin(), whole.begin() + split);
  r.continuation.assign(whole.begin() + split, whole.end());
  return r;
}

absl::StatusOr<TaskResult> AggregateTask(const data::Task& task,
                                         const std::vector<ContinuationScore>& scores) {
  size_t expected = 0;
  for (const data::TaskItem& item : task.items) expected += item.choices.size();
  if (scores.size() != expected) {
    return absl::InvalidArgumentError(
        StrCat(task.name, ": ", scores.size(), " scores for ", expected, " choices"));
  }
  TaskResult result;
  result.name = task.name;
  result.kind = task.kind;
  result.items = static_cast<int64_t>(task.items.size());
  std::vector<double> acc, acc_norm;
  double target_logprob = 0;
  size_t k = 0;
  for (const data::TaskItem& item : task.items) {
    if (task.kind == data::TaskKind::kLambada) {
      acc.push_back(scores[k].greedy ? 1.0 : 0.0);
      result.item_correct.push_back(scores[k].greedy ? '1' : '0');
      result.item_logprob.push_back(scores[k].logprob);
      result.item_choice_logprob.push_back({scores[k].logprob});
      result.item_gold.push_back(0);
      target_logprob += scores[k].logprob;
      k += 1;
      continue;
    }
    int best = 0, best_norm = 0;
    double best_ll = -INFINITY, best_ll_norm = -INFINITY;
    std::vector<double>& lls = result.item_choice_logprob.emplace_back();
    for (size_t c = 0; c < item.choices.size(); ++c, ++k) {
      const double ll = scores[k].logprob;
      lls.push_back(ll);
      // lm-eval divides by the length of the choice text (without the leading space).
      const double norm = ll / std::max(1.0, CharLength(item.choices[c]));
      if (ll > best_ll) best_ll = ll, best = static_cast<int>(c);
      if (norm > best_ll_norm) best_ll_norm = norm, best_norm = static_cast<int>(c);
    }
    acc.push_back(best == item.gold ? 1.0 : 0.0);
    acc_norm.push_back(best_norm == item.gold ? 1.0 : 0.0);
    result.item_correct.push_back(best == item.gold ? '1' : '0');
    result.item_correct_norm.push_back(best_norm == item.gold ? '1' : '0');
    result.item_gold.push_back(item.gold);
    result.item_choice.push_back(best);
    result.item_choice_norm.push_back(best_norm);
    const int64_t n = static_cast<int64_t>(item.choices.size());
    result.chance_choices = (result.chance_choices == 0 || result.chance_choices == n) ? n : -1;
  }
  std::tie(result.acc, result.acc_stderr) = MeanAndStderr(acc);
  if (!acc_norm.empty())
    std::tie(result.acc_norm, result.acc_norm_stderr) = MeanAndStderr(acc_norm);
  if (task.kind == data::TaskKind::kLambada) {
    result.perplexity = std::exp(-target_logprob / static_cast<double>(task.items.size()));
  }
  return result;
}

absl::StatusOr<TaskResult> EvaluateTask(model::LanguageModel& model,
                                        const data::Tokenizer& tokenizer, const data::Task& task,
                                        const ZeroShotOptions& options) {
  std::vector<ContinuationRequest> requests;
  for (const data::TaskItem& item : task.items) {
    for (const std::string& choice : item.choices) {
      ContinuationRequest r =
          EncodePair(tokenizer, item.context, " " + choice, options.prepend_bos);
      if (r.context.empty() || r.continuation.empty()) {
        return absl::InvalidArgumentError(StrCat(task.path, ":", item.line,
                                                 ": the context or the choice \"", choice,
                                                 "\" encodes to no tokens"));
      }
      requests.push_back(std::move(r));
    }
  }
  CART_ASSIGN_OR_RETURN(std::vector<ContinuationScore> scores,
                        ScoreContinuations(model, requests, options));
  CART_ASSIGN_OR_RETURN(TaskResult result, AggregateTask(task, scores));
  result.prepend_bos = options.prepend_bos;
  return result;
}

absl::StatusOr<std::unique_ptr<data::Tokenizer>> RunTokenizer(const config::RunConfig& config) {
  if (config.data.train_data.empty()) {
    return absl::InvalidArgumentError(
        "the run names no train_data to take its tokenizer from; give --tokenizer SPEC");
  }
  CART_ASSIGN_OR_RETURN(data::TokenFile file, data::TokenFile::Open(config.data.train_data));
  return data::Tokenizer::Load(file.info().tokenizer);
}

absl::StatusOr<std::vector<data::Task>> LoadRunTasks(const config::RunConfig& config) {
  std::vector<data::Task> tasks;
  for (const auto& [name, spec] : config.data.tasks) {
    CART_ASSIGN_OR_RETURN(data::TaskSource source, data::ParseTaskSource(name + ":" + spec));
    CART_ASSIGN_OR_RETURN(data::Task task, data::LoadTask(source));
    tasks.push_back(std::move(task));
  }
  return tasks;
}

}  // namespace cart::train
