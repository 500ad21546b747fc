#pragma once

// What the training tests share: a synthetic Markov source on disk and a tiny run that learns it in
// a few seconds on one CPU thread.

#include <cmath>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "config/config.h"
#include "data/synth.h"
#include "gtest/gtest.h"
#include "tests/support/test_support.h"

namespace cart::train::testing {

// A first-order Markov chain over 32 tokens in dir/synth.bin (+ its validation set); the entropy
// rate is written into the metadata.
inline data::SynthResult MakeData(const cart::testing::TempDir& dir, int64_t tokens = 60'000,
                                  uint64_t seed = 3) {
  data::SynthOptions o;
  o.chain.vocab = 32;
  o.chain.order = 1;
  o.chain.seed = seed;
  o.chain.concentration = 0.05;
  o.tokens = tokens;
  o.val_tokens = 8'000;
  o.out = dir.File("synth.bin");
  auto r = data::WriteSynthetic(o);
  EXPECT_TRUE(r.ok()) << r.status();
  return *r;
}

// CART d 64, P 1, R 2 over vocab 32: 12 steps of 4 x 2 windows of 32 tokens, logging every step,
// evaluating every 6, a checkpoint every 4 (2 kept), one thread. No data set yet.
inline config::RunConfig TinyRun() {
  config::RunConfig c;
  c.model.vocab = 32;
  c.model.d = 64;
  c.model.P = 1;
  c.model.R = 2;
  c.train.steps = 12;
  c.train.seq_len = 32;
  c.train.batch = 4;
  c.train.accum = 2;
  c.train.lr = 3e-3;
  c.train.lr_min = 3e-4;
  c.train.warmup = 2;
  c.train.log_every = 1;
  c.train.eval_every = 6;
  c.train.checkpoint_every = 4;
  c.train.keep_checkpoints = 2;
  c.train.eval_sequences = 8;
  c.train.threads = 1;
  return c;
}

// The JSON lines of a metrics.jsonl.
inline std::vector<nlohmann::json> ReadMetrics(const std::string& path) {
  std::vector<nlohmann::json> out;
  std::ifstream in(path);
  std::string line;
  while (std::getline(in, line)) out.push_back(nlohmann::json::parse(line));
  return out;
}

// The "loss" of each record that has one, in order.
inline std::vector<double> Losses(const std::vector<nlohmann::json>& metrics) {
  std::vector<double> out;
  for (const auto& m : metrics) {
    if (m.contains("loss")) out.push_back(m["loss"].get<double>());
  }
  return out;
}

// A test that trains TinyRun on MakeData's chain in a directory of its own, without evaluation;
// each run in dir_/<name>.
class TinyRunTest : public ::testing::Test {
 protected:
  void SetUp() override {
    MakeData(dir_);
    config_ = TinyRun();
    config_.data.train_data = dir_.File("synth.bin");
    config_.train.eval_every = 0;
  }
  std::vector<nlohmann::json> MetricsOf(const std::string& run) const {
    return ReadMetrics(dir_.File(run + "/metrics.jsonl"));
  }
  cart::testing::TempDir dir_;
  config::RunConfig config_;
};

// Each of `losses` within `relative` of `reference`'s loss at the same step; as many steps.
// `name` labels the run in a failure.
inline void ExpectLossesNear(const std::vector<double>& losses,
                             const std::vector<double>& reference, double relative,
                             const std::string& name) {
  ASSERT_EQ(losses.size(), reference.size()) << name;
  for (size_t i = 0; i < losses.size(); ++i) {
    EXPECT_NEAR(losses[i], reference[i], relative * std::abs(reference[i]))
        << name << " step " << i + 1;
  }
}

}  // namespace cart::train::testing
