#pragma once

// A seeded synthetic source with a known entropy rate: a random order-k Markov chain over a
// small vocabulary. Its token files carry the exact entropy rate (TokenFileInfo::
// entropy_rate_nats), the floor below which no model's validation loss can honestly go; the
// trainer's leak check compares against it.
//
// The chain: the state is the last k tokens (V^k states). Each state's next-token distribution
// is drawn once from a symmetric Dirichlet(concentration) and mixed with the uniform
// distribution: p = (1 - floor) · Dirichlet + floor / V. Small concentrations make rows peaked;
// the floor keeps every transition possible, so the chain is irreducible and aperiodic, its
// stationary distribution is unique and strictly positive, and sequences never get stuck.
//
// Entropy rate: H = Σ_s π(s) · H(P(· | s)), with π the stationary distribution over states,
// computed by power iteration π ← π·P from the uniform distribution, renormalized each step, until
// the L1 change between iterates is below 1e-14, or has stalled below 1e-12 at the level of
// floating-point rounding. The error of π is then below ~1e-12 in L1 (the floor makes each step
// a contraction), so the stated rate is exact to ~1e-12 · ln V.

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "data/token_file.h"

namespace cart::data {
namespace internal {
class Rng;
}

struct MarkovChainOptions {
  int64_t vocab = 64;          // tokens 0..vocab-1; 2..65536
  int order = 1;               // k, tokens of context; 1..4, and vocab^(order+1) <= 2^24
  uint64_t seed = 1;           // draws the transition table
  double concentration = 0.1;  // Dirichlet α of each row; > 0 (smaller = more peaked)
  double floor = 0.01;         // weight of the uniform mixture in each row; (0, 1]
};

// Immutable after Create; Sample is const and thread-safe.
class MarkovChain {
 public:
  // InvalidArgument naming the option and its allowed range; Internal if the stationary
  // distribution fails to converge (cannot happen with floor > 0, but is checked).
  static absl::StatusOr<MarkovChain> Create(const MarkovChainOptions& options);

  const MarkovChainOptions& options() const { return options_; }
  int64_t num_states() const { return num_states_; }
  // P(next | state); state = x_1·V^(k-1) + … + x_k for the last k tokens x_1..x_k.
  double Probability(int64_t state, int64_t next) const {
    return probs_[state * options_.vocab + next];
  }
  const std::vector<double>& stationary() const { return stationary_; }
  double entropy_rate_nats() const { return entropy_rate_; }
  // Power-iteration steps the stationary distribution took.
  int iterations() const { return iterations_; }

  // n tokens of a stationary sample path: the first k tokens are a state drawn from π, the rest
  // follow the chain. Deterministic in (chain, stream_seed).
  std::vector<int64_t> Sample(int64_t n, uint64_t stream_seed) const;

  // A resumable sampler, for paths too long to hold in memory.
  class Sampler {
   public:
    Sampler(const MarkovChain& chain, uint64_t stream_seed);
    // Fills out[0..n) with the next n tokens.
    void Next(int64_t n, int64_t* out);

    ~Sampler();
    Sampler(Sampler&&) noexcept;

   private:
    const MarkovChain* chain_;
    std::unique_ptr<internal::Rng> rng_;
    std::vector<int64_t> pending_;  // the initial state's tokens, not yet returned
    size_t pending_pos_ = 0;
    int64_t state_ = 0;
  };

 private:
  MarkovChain() = default;
  int64_t Draw(const double* cdf, int64_t n, double u) const;

  MarkovChainOptions options_;
  int64_t num_states_ = 0;
  std::vector<double> probs_;       // num_states × vocab
  std::vector<double> cdf_;         // row-wise cumulative probs_
  std::vector<double> stationary_;  // num_states
  std::vector<double> stationary_cdf_;
  double entropy_rate_ = 0;
  int iterations_ = 0;
};

// The plug-in estimate of H(X_t | X_{t-k..t-1}) from a sample, in nats: the empirical
// conditional entropy over all positions with k tokens of context. Biased low by about
// (states · (V-1)) / (2 · n) nats; used by tests to check the stated rate.
double EmpiricalConditionalEntropy(const std::vector<int64_t>& tokens, int order, int64_t vocab);

struct SynthOptions {
  MarkovChainOptions chain;
  int64_t tokens = 1'000'000;   // training tokens; >= 1
  int64_t val_tokens = 65'536;  // held-out tokens, an independent path of the same chain; >= 0
  std::string out;              // NAME.bin
  std::string val_out;          // default: NAME.val.bin beside out; unused when val_tokens == 0
};

struct SynthResult {
  TokenFileInfo train;
  std::string val_path;  // empty when no validation file was written
  TokenFileInfo val;
};

// Writes the training and validation token files (tokenizer "synth:<vocab>", no BOS/EOS,
// entropy_rate_nats set). The two paths are independent sample paths (different streams).
absl::StatusOr<SynthResult> WriteSynthetic(const SynthOptions& options);

}  // namespace cart::data
