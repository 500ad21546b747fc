// cart data prepare --source: each corpus source prepared (and capped), then interleaved; and the
// dry run that says what that would give.

#include <algorithm>
#include <numeric>
#include <set>

#include "common/status.h"
#include "common/strings.h"
#include "data/prepare.h"
#include "data/tokenizer.h"

namespace cart::data {
namespace {

absl::Status ValidateSources(const SourceMixtureOptions& options) {
  if (options.sources.empty()) return absl::InvalidArgumentError("a mixture needs a source");
  std::set<std::string> names;
  for (const CorpusSource& s : options.sources) {
    const bool name_ok = !s.name.empty() && s.name.size() <= 64 &&
                         s.name.find_first_not_of(
                             "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRS"
                             "TUVWXYZ0123456789_-.") == std::string::npos;
    if (!name_ok) {
      return absl::InvalidArgumentError(
          StrCat("source name '", s.name, "' must be 1..64 letters, digits, '_', '-' or '.'"));
    }
    if (!names.insert(s.name).second) {
      return absl::InvalidArgumentError(StrCat("source '", s.name, "' is given twice"));
    }
    if (s.inputs.empty()) {
      return absl::InvalidArgumentError(StrCat("source '", s.name, "' has no input"));
    }
    if (s.weight < 1) {
      return absl::InvalidArgumentError(
          StrCat("source '", s.name, "': weight ", s.weight, " out of range; allowed: >= 1"));
    }
    if (s.max_tokens < 0) {
      return absl::InvalidArgumentError(StrCat("source '", s.name, "': max tokens ", s.max_tokens,
                                               " out of range; allowed: >= 0 (0: all)"));
    }
  }
  if (options.chunk_tokens < 1) {
    return absl::InvalidArgumentError(
        StrCat("--chunk-tokens ", options.chunk_tokens, " out of range; allowed: >= 1"));
  }
  return absl::OkStatus();
}

}  // namespace

std::string SourceFilePath(const std::string& out, const std::string& name) {
  std::string stem = out;
  if (stem.size() > 4 && stem.compare(stem.size() - 4, 4, ".bin") == 0)
    stem.resize(stem.size() - 4);
  return StrCat(stem, ".", name, ".bin");
}

absl::StatusOr<SourceMixtureResult> PrepareSourceMixture(const SourceMixtureOptions& options) {
  CART_RETURN_IF_ERROR(ValidateSources(options));
  SourceMixtureResult result;
  MixOptions mix;
  mix.chunk_tokens = options.chunk_tokens;
  mix.max_tokens = options.max_tokens;
  mix.out = options.out;
  for (const CorpusSource& s : options.sources) {
    PrepareOptions prepare;
    prepare.inputs = s.inputs;
    prepare.tokenizer = options.tokenizer;
    prepare.out = SourceFilePath(options.out, s.name);
    prepare.threads = options.threads;
    prepare.max_tokens = s.max_tokens;
    if (options.progress) {
      prepare.progress = [&](const PrepareProgress& p) { options.progress(s.name, p); };
    }
    CART_ASSIGN_OR_RETURN(PrepareResult prepared, Prepare(prepare));
    result.sources.push_back(PreparedSource{prepared.train, prepared.capped});
    mix.sources.push_back(MixSource{s.name, prepared.train.path, s.weight});
  }
  CART_ASSIGN_OR_RETURN(result.mixture, BuildMixture(mix));
  return result;
}

absl::StatusOr<SourceMixturePlan> PlanSourceMixture(const SourceMixtureOptions& options,
                                                    uint64_t sample_bytes) {
  CART_RETURN_IF_ERROR(ValidateSources(options));
  CART_ASSIGN_OR_RETURN(std::unique_ptr<Tokenizer> tokenizer, Tokenizer::Load(options.tokenizer));
  SourceMixturePlan plan;
  plan.bytes_per_token = tokenizer->vocab_size() <= 65536 ? 2 : 4;
  int64_t g = 0;
  for (const CorpusSource& s : options.sources) g = std::gcd(g, s.weight);
  int64_t cycles = INT64_MAX, cycle_chunks = 0;
  for (const CorpusSource& s : options.sources) {
    CART_ASSIGN_OR_RETURN(SourceEstimate est,
                          EstimateTokens(s.inputs, options.tokenizer, sample_bytes));
    const int64_t tokens = s.max_tokens > 0 ? std::min(est.tokens, s.max_tokens) : est.tokens;
    plan.estimates.push_back(est);
    plan.tokens.push_back(tokens);
    // BuildMixture takes whole cycles of weight/g chunks from every source.
    const int64_t w = s.weight / g;
    cycles = std::min(cycles, tokens / (w * options.chunk_tokens));
    cycle_chunks += w;
    plan.disk_bytes += static_cast<uint64_t>(tokens) * plan.bytes_per_token;
  }
  plan.mixture_tokens = cycles * cycle_chunks * options.chunk_tokens;
  if (options.max_tokens > 0)
    plan.mixture_tokens = std::min(plan.mixture_tokens, options.max_tokens);
  plan.disk_bytes += static_cast<uint64_t>(plan.mixture_tokens) * plan.bytes_per_token;
  return plan;
}

}  // namespace cart::data
