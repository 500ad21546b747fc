// Zero-shot scoring: log-likelihoods against a direct computation, batching and truncation,
// and the lm-eval aggregation (acc, acc_norm, LAMBADA perplexity) on known scores.

#include "train/zero_shot.h"

#include <algorithm>
#include <cmath>
#include <iostream>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "model/language_model.h"
#include "tests/support/test_support.h"

namespace cart::train {
namespace {

using ::cart::testing::StatusIs;
using ::testing::HasSubstr;

std::shared_ptr<model::LanguageModel> TinyModel() {
  config::ModelConfig c;
  c.vocab = 40;
  c.d = 64;
  c.P = 1;
  c.R = 2;
  auto m = model::BuildModel(c, 7);
  EXPECT_TRUE(m.ok()) << m.status();
  return *m;
}

// log p(tokens[t] | tokens[<t]) summed over the last `n` tokens, from one forward pass over the
// whole sequence: the definition the scorer must reproduce.
double DirectLogprob(model::LanguageModel& m, const std::vector<int64_t>& tokens, size_t n) {
  torch::NoGradGuard no_grad;
  m.eval();
  std::vector<int64_t> input(tokens.begin(), tokens.end() - 1);
  torch::Tensor logp =
      torch::log_softmax(m.Forward(torch::tensor(input, torch::kInt64).unsqueeze(0)), -1)[0];
  double sum = 0;
  for (size_t t = tokens.size() - n; t < tokens.size(); ++t) {
    sum += logp[static_cast<int64_t>(t) - 1][tokens[t]].item<double>();
  }
  return sum;
}

TEST(ScoreContinuationsTest, EqualsTheDirectLogLikelihoodWhateverTheBatch) {
  auto m = TinyModel();
  std::vector<ContinuationRequest> requests = {
      {{1, 2, 3, 4, 5}, {6, 7}},
      {{9}, {10, 11, 12}},
      {{3, 3, 3, 3, 3, 3, 3, 3, 3}, {39}},
      {{20, 21}, {22}},
  };
  ZeroShotOptions one;
  one.batch = 1;
  ZeroShotOptions all;
  all.batch = 8;
  auto a = ScoreContinuations(*m, requests, one);
  auto b = ScoreContinuations(*m, requests, all);
  ASSERT_TRUE(a.ok()) << a.status();
  ASSERT_TRUE(b.ok()) << b.status();
  for (size_t i = 0; i < requests.size(); ++i) {
    std::vector<int64_t> whole = requests[i].context;
    whole.insert(whole.end(), requests[i].continuation.begin(), requests[i].continuation.end());
    const double direct = DirectLogprob(*m, whole, requests[i].continuation.size());
    EXPECT_NEAR((*a)[i].logprob, direct, 1e-5) << "request " << i;
    // Right padding in a batch must not reach earlier positions of a causal model.
    EXPECT_NEAR((*b)[i].logprob, direct, 1e-4) << "request " << i;
    EXPECT_EQ((*a)[i].greedy, (*b)[i].greedy);
    EXPECT_LT(direct, 0);
  }
}

// Under the run's precision (bf16 autocast; LibTorch has it on the CPU too) the scores stay within
// the stated tolerance of fp32: 0.05 nats per request at this size (measured: the message below).
TEST(ScoreContinuationsTest, UnderBf16AutocastTheScoresStayNearFp32) {
  auto m = TinyModel();
  std::vector<ContinuationRequest> requests = {
      {{1, 2, 3, 4, 5}, {6, 7}}, {{9}, {10, 11, 12}}, {{3, 3, 3, 3}, {39}}, {{20, 21}, {22}}};
  ZeroShotOptions fp32;
  ZeroShotOptions bf16;
  bf16.mixed_precision = true;
  auto a = ScoreContinuations(*m, requests, fp32);
  auto b = ScoreContinuations(*m, requests, bf16);
  ASSERT_TRUE(a.ok()) << a.status();
  ASSERT_TRUE(b.ok()) << b.status();
  double worst = 0, differ = 0;
  for (size_t i = 0; i < requests.size(); ++i) {
    const double gap = std::abs((*a)[i].logprob - (*b)[i].logprob);
    worst = std::max(worst, gap);
    differ += gap;
    EXPECT_NEAR((*b)[i].logprob, (*a)[i].logprob, 0.05) << "request " << i;
  }
  EXPECT_GT(differ, 0) << "bf16 ran: the scores are not fp32's to the bit";
  std::cout << "bf16 autocast vs fp32 zero-shot log-probability: at most " << worst << " nats\n";
}

TEST(ScoreContinuationsTest, GreedyIsTrueExactlyWhenEveryTokenIsTheArgmax) {
  auto m = TinyModel();
  // Extend a context by the model's own argmax three times: that continuation is greedy.
  std::vector<int64_t> seq = {5, 17, 2};
  {
    torch::NoGradGuard no_grad;
    m->eval();
    for (int k = 0; k < 3; ++k) {
      torch::Tensor logits = m->Forward(torch::tensor(seq, torch::kInt64).unsqueeze(0));
      seq.push_back(logits[0][-1].argmax().item<int64_t>());
    }
  }
  ContinuationRequest greedy{{5, 17, 2}, {seq[3], seq[4], seq[5]}};
  ContinuationRequest not_greedy = greedy;
  not_greedy.continuation[2] = (seq[5] + 1) % 40;
  auto s = ScoreContinuations(*m, {greedy, not_greedy}, {});
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_TRUE((*s)[0].greedy);
  EXPECT_FALSE((*s)[1].greedy);
  EXPECT_GT((*s)[0].logprob, (*s)[1].logprob);
}

TEST(ScoreContinuationsTest, LongInputsKeepTheirLastMaxLenTokens) {
  auto m = TinyModel();
  std::vector<int64_t> context;
  for (int i = 0; i < 30; ++i) context.push_back((i * 7) % 40);
  ContinuationRequest r{context, {1, 2}};
  ZeroShotOptions o;
  o.max_len = 12;
  auto s = ScoreContinuations(*m, {r}, o);
  ASSERT_TRUE(s.ok()) << s.status();
  std::vector<int64_t> whole = context;
  whole.push_back(1);
  whole.push_back(2);
  std::vector<int64_t> last(whole.end() - 13, whole.end());  // max_len + 1 tokens
  EXPECT_NEAR((*s)[0].logprob, DirectLogprob(*m, last, 2), 1e-5);
}

TEST(ScoreContinuationsTest, BadRequestsGetClearErrors) {
  auto m = TinyModel();
  EXPECT_THAT(ScoreContinuations(*m, {{{1}, {}}}, {}),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("non-empty")));
  EXPECT_THAT(ScoreContinuations(*m, {{{1}, {2, 40}}}, {}),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       AllOf(HasSubstr("token id 40"), HasSubstr("0..39"))));
  ZeroShotOptions o;
  o.max_len = 2;
  EXPECT_THAT(ScoreContinuations(*m, {{{1}, {2, 3, 4}}}, o),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("longer than the model")));
}

TEST(EncodePairTest, SplitsWhereLmEvalDoesAndStartsWithBosOnlyWhenAsked) {
  auto bytes = data::Tokenizer::Load("bytes");
  ASSERT_TRUE(bytes.ok()) << bytes.status();
  // The context's trailing space moves to the continuation; by default (as lm-eval does for
  // causal models) no BOS starts the context.
  ContinuationRequest plain = EncodePair(**bytes, "Answer: ", "yes", /*prepend_bos=*/false);
  EXPECT_EQ(plain.context, (std::vector<int64_t>{'A', 'n', 's', 'w', 'e', 'r', ':'}));
  EXPECT_EQ(plain.continuation, (std::vector<int64_t>{' ', 'y', 'e', 's'}));
  // Asked for, BOS (256) starts the context and the continuation is unchanged.
  ContinuationRequest bos = EncodePair(**bytes, "Answer: ", "yes", /*prepend_bos=*/true);
  EXPECT_EQ(bos.context, (std::vector<int64_t>{256, 'A', 'n', 's', 'w', 'e', 'r', ':'}));
  EXPECT_EQ(bos.continuation, plain.continuation);
}

data::Task McTask(std::vector<std::vector<std::string>> choices, std::vector<int> gold) {
  data::Task t;
  t.kind = data::TaskKind::kHellaSwag;
  t.name = "hs";
  for (size_t i = 0; i < choices.size(); ++i) {
    data::TaskItem item;
    item.context = "c";
    item.choices = choices[i];
    item.gold = gold[i];
    t.items.push_back(item);
  }
  return t;
}

std::vector<ContinuationScore> Scores(std::vector<double> lls) {
  std::vector<ContinuationScore> out;
  for (double ll : lls) out.push_back({ll, false});
  return out;
}

TEST(AggregateTaskTest, AccPicksTheLargestSumAccNormTheLargestPerCharacter) {
  // Item 1: the long right answer has the lower sum (-12 < -4) but the higher per-character
  // log-likelihood (-12/24 = -0.5 > -4/2 = -2): acc misses it, acc_norm finds it.
  // Item 2: both pick choice 1, which is right. Item 3: both pick choice 0, which is wrong.
  // Item 4: a tie goes to the first choice, as numpy.argmax does.
  data::Task task =
      McTask({{std::string(24, 'x'), "no"}, {"a", "b"}, {"a", "b"}, {"ab", "cd"}}, {0, 1, 1, 0});
  auto r = AggregateTask(task, Scores({-12, -4, -3, -1, -1, -3, -2, -2}));
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->items, 4);
  EXPECT_DOUBLE_EQ(r->acc, 0.5);        // items 2 and 4
  EXPECT_DOUBLE_EQ(r->acc_norm, 0.75);  // items 1, 2 and 4
  // Sample standard deviation of {0,1,0,1} is 0.57735; / √4.
  EXPECT_NEAR(r->acc_stderr, std::sqrt(1.0 / 3.0) / 2.0, 1e-12);
  EXPECT_EQ(r->chance_choices, 2);
  // Each item's outcome, in order, for the paired tests over items.
  EXPECT_EQ(r->item_correct, "0101");
  EXPECT_EQ(r->item_correct_norm, "1101");
  EXPECT_TRUE(r->item_logprob.empty());
  EXPECT_THAT(AggregateTask(task, Scores({-1, -2})),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("2 scores for 8 choices")));
}

TEST(AggregateTaskTest, AccNormCountsCharactersNotBytes) {
  // "ééé" is 3 characters in 6 bytes. By characters: -3.3/3 = -1.1 < -4/4 = -1.0, so acc_norm
  // picks choice 1 (right); counting bytes (-3.3/6 = -0.55) would pick choice 0. acc picks the
  // larger sum, choice 0 (wrong).
  data::Task task = McTask({{"\xc3\xa9\xc3\xa9\xc3\xa9", "abcd"}}, {1});
  auto r = AggregateTask(task, Scores({-3.3, -4}));
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_DOUBLE_EQ(r->acc_norm, 1.0);
  EXPECT_DOUBLE_EQ(r->acc, 0.0);
}

TEST(AggregateTaskTest, LambadaReportsGreedyAccuracyAndPerplexity) {
  data::Task task;
  task.kind = data::TaskKind::kLambada;
  task.name = "lambada";
  for (int i = 0; i < 3; ++i) task.items.push_back({"ctx", {"word"}, 0, i + 1});
  std::vector<ContinuationScore> s = {{-1.0, true}, {-2.0, false}, {-3.0, true}};
  auto r = AggregateTask(task, s);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_NEAR(r->acc, 2.0 / 3.0, 1e-12);
  EXPECT_NEAR(r->perplexity, std::exp(2.0), 1e-9);  // exp(−mean(−1, −2, −3))
  EXPECT_EQ(r->item_correct, "101");
  EXPECT_TRUE(r->item_correct_norm.empty());
  EXPECT_EQ(r->item_logprob, (std::vector<double>{-1.0, -2.0, -3.0}));
}

}  // namespace
}  // namespace cart::train
