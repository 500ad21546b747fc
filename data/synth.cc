#include "data/synth.h"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <unordered_map>

#include "common/status.h"
#include "common/strings.h"
#include "data/internal/random.h"

namespace cart::data {
namespace {

constexpr int64_t kMaxTableEntries = int64_t{1} << 24;
constexpr double kStationaryTolerance = 1e-14;
// Rounding can hold the L1 change of a large state space just above kStationaryTolerance; a
// change below kStallTolerance that has not improved for kStallSteps steps is the fixed point.
constexpr double kStallTolerance = 1e-12;
constexpr int kStallSteps = 50;
constexpr int kMaxIterations = 100'000;
// Stream seeds of the training and validation paths, mixed with the chain seed.
constexpr uint64_t kTrainStream = 0x7472616996e5ull;
constexpr uint64_t kValStream = 0x76616c69ca7eull;

double RowEntropy(const double* p, int64_t n) {
  double h = 0;
  for (int64_t i = 0; i < n; ++i) {
    if (p[i] > 0) h -= p[i] * std::log(p[i]);
  }
  return h;
}

std::string ChainDescription(const MarkovChainOptions& o) {
  return StrCat("markov vocab=", o.vocab, " order=", o.order, " seed=", o.seed,
                " concentration=", o.concentration, " floor=", o.floor);
}

}  // namespace

absl::StatusOr<MarkovChain> MarkovChain::Create(const MarkovChainOptions& options) {
  if (options.vocab < 2 || options.vocab > 65536) {
    return absl::InvalidArgumentError(
        StrCat("synthetic vocab ", options.vocab, " out of range; allowed: 2..65536"));
  }
  if (options.order < 1 || options.order > 4) {
    return absl::InvalidArgumentError(
        StrCat("synthetic order ", options.order, " out of range; allowed: 1..4"));
  }
  int64_t states = 1;
  for (int i = 0; i < options.order; ++i) {
    states *= options.vocab;
    if (states * options.vocab > kMaxTableEntries) {
      return absl::InvalidArgumentError(StrCat(
          "synthetic chain too large: vocab^(order+1) = ", options.vocab, "^", options.order + 1,
          " exceeds 2^24 transition probabilities; lower --vocab or --order"));
    }
  }
  if (!(options.concentration > 0) || !std::isfinite(options.concentration)) {
    return absl::InvalidArgumentError(
        StrCat("synthetic concentration ", options.concentration, " out of range; allowed: > 0"));
  }
  if (!(options.floor > 0 && options.floor <= 1)) {
    return absl::InvalidArgumentError(
        StrCat("synthetic floor ", options.floor, " out of range; allowed: (0, 1]"));
  }
  MarkovChain chain;
  chain.options_ = options;
  chain.num_states_ = states;
  const int64_t v = options.vocab;
  chain.probs_.resize(states * v);
  chain.cdf_.resize(states * v);
  internal::Rng rng(options.seed);
  std::vector<double> g(v);
  for (int64_t s = 0; s < states; ++s) {
    double sum = 0;
    for (int64_t x = 0; x < v; ++x) sum += (g[x] = rng.Gamma(options.concentration));
    double* row = &chain.probs_[s * v];
    for (int64_t x = 0; x < v; ++x) {
      // A row whose gammas all underflowed to 0 (tiny α) falls back to the uniform part only.
      const double dirichlet = sum > 0 ? g[x] / sum : 1.0 / v;
      row[x] = (1.0 - options.floor) * dirichlet + options.floor / v;
    }
    double c = 0;
    for (int64_t x = 0; x < v; ++x) chain.cdf_[s * v + x] = (c += row[x]);
  }

  // Stationary distribution over states by power iteration: state s = (x_1..x_k) moves to
  // s' = (x_2..x_k, x), i.e. s' = (s·V + x) mod V^k, with probability P(x | s).
  std::vector<double> pi(states, 1.0 / states), next(states);
  double change = 1, best = 1;
  int it = 0, best_it = 0;
  while (change >= kStationaryTolerance && it < kMaxIterations &&
         !(best < kStallTolerance && it - best_it > kStallSteps)) {
    std::fill(next.begin(), next.end(), 0.0);
    for (int64_t s = 0; s < states; ++s) {
      const double mass = pi[s];
      const int64_t base = (s * v) % states;
      const double* row = &chain.probs_[s * v];
      for (int64_t x = 0; x < v; ++x) next[base + x] += mass * row[x];
    }
    double total = 0;
    for (double p : next) total += p;
    change = 0;
    for (int64_t s = 0; s < states; ++s) {
      next[s] /= total;  // keeps rounding from drifting the mass away from 1
      change += std::abs(next[s] - pi[s]);
    }
    pi.swap(next);
    ++it;
    if (change < best) best = change, best_it = it;
  }
  if (best >= kStallTolerance) {
    return absl::InternalError(StrCat("stationary distribution of ", ChainDescription(options),
                                      " did not converge in ", kMaxIterations, " steps"));
  }
  chain.iterations_ = it;
  chain.stationary_ = pi;
  chain.stationary_cdf_.resize(states);
  double c = 0, h = 0;
  for (int64_t s = 0; s < states; ++s) {
    chain.stationary_cdf_[s] = (c += pi[s]);
    h += pi[s] * RowEntropy(&chain.probs_[s * v], v);
  }
  chain.entropy_rate_ = h;
  return chain;
}

int64_t MarkovChain::Draw(const double* cdf, int64_t n, double u) const {
  // The last entry may round below 1; anything past it lands on the last outcome.
  const int64_t i = std::upper_bound(cdf, cdf + n, u * cdf[n - 1]) - cdf;
  return std::min(i, n - 1);
}

MarkovChain::Sampler::Sampler(const MarkovChain& chain, uint64_t stream_seed)
    : chain_(&chain),
      rng_(std::make_unique<internal::Rng>(internal::Mix64(chain.options_.seed) ^ stream_seed)) {
  state_ = chain.Draw(chain.stationary_cdf_.data(), chain.num_states_, rng_->Uniform());
  // The state's k tokens, oldest first, are the path's first k tokens.
  pending_.resize(chain.options_.order);
  int64_t s = state_;
  for (int i = chain.options_.order - 1; i >= 0; --i) {
    pending_[i] = s % chain.options_.vocab;
    s /= chain.options_.vocab;
  }
}

MarkovChain::Sampler::~Sampler() = default;
MarkovChain::Sampler::Sampler(Sampler&&) noexcept = default;

void MarkovChain::Sampler::Next(int64_t n, int64_t* out) {
  const int64_t v = chain_->options_.vocab;
  int64_t i = 0;
  for (; i < n && pending_pos_ < pending_.size(); ++i) out[i] = pending_[pending_pos_++];
  for (; i < n; ++i) {
    const int64_t x = chain_->Draw(&chain_->cdf_[state_ * v], v, rng_->Uniform());
    out[i] = x;
    state_ = (state_ * v + x) % chain_->num_states_;
  }
}

std::vector<int64_t> MarkovChain::Sample(int64_t n, uint64_t stream_seed) const {
  std::vector<int64_t> out(std::max<int64_t>(n, 0));
  Sampler sampler(*this, stream_seed);
  sampler.Next(static_cast<int64_t>(out.size()), out.data());
  return out;
}

double EmpiricalConditionalEntropy(const std::vector<int64_t>& tokens, int order, int64_t vocab) {
  // counts[(context, next)] and context totals; context encoded like MarkovChain states.
  std::unordered_map<int64_t, std::unordered_map<int64_t, int64_t>> counts;
  int64_t states = 1;
  for (int i = 0; i < order; ++i) states *= vocab;
  int64_t context = 0, n = 0;
  for (size_t t = 0; t < tokens.size(); ++t) {
    if (t >= static_cast<size_t>(order)) {
      ++counts[context][tokens[t]];
      ++n;
    }
    context = (context * vocab + tokens[t]) % states;
  }
  double h = 0;
  for (const auto& [ctx, next] : counts) {
    int64_t total = 0;
    for (const auto& [x, c] : next) total += c;
    for (const auto& [x, c] : next) {
      h -= static_cast<double>(c) / n * std::log(static_cast<double>(c) / total);
    }
  }
  return h;
}

absl::StatusOr<SynthResult> WriteSynthetic(const SynthOptions& options) {
  CART_ASSIGN_OR_RETURN(MarkovChain chain, MarkovChain::Create(options.chain));
  if (options.tokens < 1) {
    return absl::InvalidArgumentError(
        StrCat("synthetic tokens ", options.tokens, " out of range; allowed: >= 1"));
  }
  if (options.val_tokens < 0) {
    return absl::InvalidArgumentError(
        StrCat("synthetic validation tokens ", options.val_tokens, " out of range; allowed: >= 0"));
  }
  const std::string& out = options.out;
  std::string val_out = options.val_out;
  if (val_out.empty() && out.size() > 4 && out.compare(out.size() - 4, 4, ".bin") == 0) {
    val_out = out.substr(0, out.size() - 4) + ".val.bin";
  }
  if (options.val_tokens > 0 && val_out == out) {
    return absl::InvalidArgumentError(
        StrCat("validation output ", val_out, " is the training output; give another path"));
  }
  const std::string description = ChainDescription(options.chain);
  const auto write = [&](const std::string& path, int64_t n, uint64_t stream,
                         const char* name) -> absl::StatusOr<TokenFileInfo> {
    TokenFileInfo meta;
    meta.tokenizer = StrCat("synth:", options.chain.vocab);
    meta.vocab = options.chain.vocab;
    meta.sources = {StrCat("synth: ", description, " stream=", name)};
    meta.entropy_rate_nats = chain.entropy_rate_nats();
    CART_ASSIGN_OR_RETURN(TokenFileWriter writer, TokenFileWriter::Create(path, std::move(meta)));
    MarkovChain::Sampler sampler(chain, stream);
    std::vector<int64_t> buf(1 << 16);
    for (int64_t done = 0; done < n;) {
      const int64_t m = std::min<int64_t>(n - done, static_cast<int64_t>(buf.size()));
      sampler.Next(m, buf.data());
      CART_RETURN_IF_ERROR(writer.Append(buf.data(), m));
      done += m;
    }
    return writer.Finish();
  };
  SynthResult result;
  CART_ASSIGN_OR_RETURN(result.train, write(out, options.tokens, kTrainStream, "train"));
  if (options.val_tokens > 0) {
    result.val_path = val_out;
    CART_ASSIGN_OR_RETURN(result.val, write(val_out, options.val_tokens, kValStream, "val"));
  }
  return result;
}

}  // namespace cart::data
