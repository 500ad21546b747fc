#include "data/synth.h"

#include <cmath>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/support/test_support.h"

namespace cart::data {
namespace {

using ::cart::testing::IsOk;
using ::cart::testing::StatusIs;
using ::cart::testing::TempDir;
using ::testing::HasSubstr;

TEST(MarkovChainTest, UniformRowsHaveEntropyRateLogVocab) {
  // floor = 1 makes every row uniform: the rate is ln V exactly, whatever the Dirichlet draws.
  CART_ASSERT_OK_AND_ASSIGN(MarkovChain c, MarkovChain::Create({16, 2, 3, 0.1, 1.0}));
  EXPECT_NEAR(c.entropy_rate_nats(), std::log(16.0), 1e-12);
}

TEST(MarkovChainTest, StationaryDistributionIsAFixedPointOfTheChain) {
  for (int order : {1, 2}) {
    CART_ASSERT_OK_AND_ASSIGN(MarkovChain c, MarkovChain::Create({32, order, 5, 0.1, 0.01}));
    const int64_t v = 32, s = c.num_states();
    const std::vector<double>& pi = c.stationary();
    double total = 0;
    for (double p : pi) total += p;
    EXPECT_NEAR(total, 1.0, 1e-12);
    std::vector<double> next(s, 0.0);
    for (int64_t st = 0; st < s; ++st) {
      double row = 0;
      for (int64_t x = 0; x < v; ++x) {
        next[(st * v + x) % s] += pi[st] * c.Probability(st, x);
        row += c.Probability(st, x);
        EXPECT_GE(c.Probability(st, x), 0.01 / v - 1e-15);
      }
      EXPECT_NEAR(row, 1.0, 1e-12);
    }
    double l1 = 0;
    for (int64_t st = 0; st < s; ++st) l1 += std::abs(next[st] - pi[st]);
    EXPECT_LT(l1, 1e-12) << "order " << order;
    // Recomputing the rate from π and the rows gives the stated value.
    double h = 0;
    for (int64_t st = 0; st < s; ++st) {
      for (int64_t x = 0; x < v; ++x) {
        const double p = c.Probability(st, x);
        h -= pi[st] * p * std::log(p);
      }
    }
    EXPECT_NEAR(h, c.entropy_rate_nats(), 1e-12);
  }
}

TEST(MarkovChainTest, EmpiricalConditionalEntropyOfALongSampleApproachesTheRate) {
  // Order 1 and 2; the plug-in estimate is biased low by ≈ S(V-1)/(2n) and its standard error
  // is ≈ sqrt(Var[-log p]/n) ≈ 0.001 here. 0.004 nats fails a rate computed with a uniform
  // instead of the stationary state distribution (off by 0.015 for the order-2 case).
  struct Case {
    MarkovChainOptions opts;
    int64_t n;
  };
  for (const Case& k :
       {Case{{64, 1, 11, 0.1, 0.01}, 2'000'000}, Case{{16, 2, 12, 0.2, 0.01}, 2'000'000}}) {
    CART_ASSERT_OK_AND_ASSIGN(MarkovChain c, MarkovChain::Create(k.opts));
    const std::vector<int64_t> sample = c.Sample(k.n, 99);
    const double states = static_cast<double>(c.num_states());
    const double bias = states * (k.opts.vocab - 1) / (2.0 * k.n);
    const double h = EmpiricalConditionalEntropy(sample, k.opts.order, k.opts.vocab);
    EXPECT_NEAR(h + bias, c.entropy_rate_nats(), 0.004) << "order " << k.opts.order;
    // And the chain is far from uniform: the rate is well below ln V (it has structure to learn).
    EXPECT_LT(c.entropy_rate_nats(), 0.8 * std::log(static_cast<double>(k.opts.vocab)));
  }
}

TEST(MarkovChainTest, SeedsDetermineTheChainAndStreamsTheSample) {
  CART_ASSERT_OK_AND_ASSIGN(MarkovChain a, MarkovChain::Create({64, 1, 1, 0.1, 0.01}));
  CART_ASSERT_OK_AND_ASSIGN(MarkovChain b, MarkovChain::Create({64, 1, 1, 0.1, 0.01}));
  CART_ASSERT_OK_AND_ASSIGN(MarkovChain c, MarkovChain::Create({64, 1, 2, 0.1, 0.01}));
  EXPECT_EQ(a.entropy_rate_nats(), b.entropy_rate_nats());
  EXPECT_NE(a.entropy_rate_nats(), c.entropy_rate_nats());
  EXPECT_EQ(a.Sample(1000, 5), b.Sample(1000, 5));
  EXPECT_NE(a.Sample(1000, 5), a.Sample(1000, 6));
  // The sampler resumes exactly where it stopped.
  MarkovChain::Sampler s(a, 5);
  std::vector<int64_t> pieces(1000);
  s.Next(1, pieces.data());
  s.Next(499, pieces.data() + 1);
  s.Next(500, pieces.data() + 500);
  EXPECT_EQ(pieces, a.Sample(1000, 5));
}

TEST(MarkovChainTest, OptionsOutOfRangeNameTheOption) {
  EXPECT_THAT(MarkovChain::Create({1, 1, 0, 0.1, 0.01}),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("vocab 1 out of range; allowed: 2..65536")));
  EXPECT_THAT(MarkovChain::Create({64, 0, 0, 0.1, 0.01}),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("order 0")));
  EXPECT_THAT(MarkovChain::Create({256, 3, 0, 0.1, 0.01}),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("2^24")));
  EXPECT_THAT(MarkovChain::Create({64, 1, 0, 0, 0.01}),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("concentration")));
  EXPECT_THAT(MarkovChain::Create({64, 1, 0, 0.1, 0}),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("floor")));
}

TEST(SynthTest, WritesTrainAndValidationFilesWithTheEntropyRate) {
  TempDir dir;
  SynthOptions o;
  o.chain = {64, 1, 3, 0.1, 0.01};
  o.tokens = 50'000;
  o.val_tokens = 5'000;
  o.out = dir.File("synth.bin");
  CART_ASSERT_OK_AND_ASSIGN(SynthResult r, WriteSynthetic(o));
  EXPECT_EQ(r.val_path, dir.File("synth.val.bin"));
  CART_ASSERT_OK_AND_ASSIGN(MarkovChain chain, MarkovChain::Create(o.chain));
  for (const std::string& path : {o.out, r.val_path}) {
    CART_ASSERT_OK_AND_ASSIGN(TokenFile f, TokenFile::Open(path));
    EXPECT_EQ(f.info().tokenizer, "synth:64");
    EXPECT_EQ(f.info().vocab, 64);
    EXPECT_EQ(f.info().bos_id, -1);
    ASSERT_TRUE(f.info().entropy_rate_nats.has_value());
    EXPECT_EQ(*f.info().entropy_rate_nats, chain.entropy_rate_nats());
    EXPECT_THAT(f.info().sources[0], HasSubstr("seed=3"));
  }
  CART_ASSERT_OK_AND_ASSIGN(TokenFile train, TokenFile::Open(o.out));
  CART_ASSERT_OK_AND_ASSIGN(TokenFile val, TokenFile::Open(r.val_path));
  EXPECT_EQ(train.size(), 50'000);
  EXPECT_EQ(val.size(), 5'000);
  std::vector<int64_t> a(100), b(100);
  ASSERT_THAT(train.Read(0, 100, a.data()), IsOk());
  ASSERT_THAT(val.Read(0, 100, b.data()), IsOk());
  EXPECT_NE(a, b) << "validation must be an independent path, not a copy of training";
  // Same options, same bytes.
  o.out = dir.File("again.bin");
  CART_ASSERT_OK_AND_ASSIGN(SynthResult again, WriteSynthetic(o));
  EXPECT_EQ(again.train.sha256, r.train.sha256);
  EXPECT_EQ(again.val.sha256, r.val.sha256);
}

}  // namespace
}  // namespace cart::data
