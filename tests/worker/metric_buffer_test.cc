#include "worker/metric_buffer.h"

#include <thread>

#include "gtest/gtest.h"

namespace cart::worker {
namespace {

std::vector<Point> Steps(int64_t from, int64_t to) {
  std::vector<Point> out;
  for (int64_t s = from; s <= to; ++s) out.push_back({s, "loss", 1.0 / s, 0});
  return out;
}

TEST(MetricBufferTest, BatchesAreSentOnceAndDroppedOnlyWhenAcknowledged) {
  MetricBuffer buffer(100);
  buffer.Add(Steps(1, 10));
  auto a = buffer.NextBatch(4);
  ASSERT_EQ(a.size(), 4u);
  EXPECT_EQ(a.front().step, 1);
  auto b = buffer.NextBatch(100);
  ASSERT_EQ(b.size(), 6u);
  EXPECT_EQ(b.front().step, 5);
  EXPECT_TRUE(buffer.NextBatch(100).empty());
  EXPECT_EQ(buffer.Ack(4), 4u);
  EXPECT_EQ(buffer.unacked(), 6u);
  EXPECT_EQ(buffer.unsent(), 0u);
}

// The last step's training metrics leave in one batch; the evaluation at that same step is logged
// after it. The batch's ack (step 40) must not drop the evaluation, which cartd has not seen: it
// did, and a run's final val_ppl was lost while the run reported SUCCEEDED.
TEST(MetricBufferTest, AnAckDropsOnlyPointsSentNotLaterOnesOfTheSameStep) {
  MetricBuffer buffer(100);
  buffer.Add({{40, "loss", 2.0, 0}, {40, "rho_max", 0.9, 0}});
  ASSERT_EQ(buffer.NextBatch(100).size(), 2u);
  buffer.Add({{40, "val_ppl/wiki", 11.2, 0}, {40, "val_loss/wiki", 2.4, 0}});
  EXPECT_EQ(buffer.Ack(40), 2u);
  EXPECT_EQ(buffer.unacked(), 2u);
  const std::vector<Point> eval = buffer.NextBatch(100);
  ASSERT_EQ(eval.size(), 2u);
  EXPECT_EQ(eval[0].name, "val_ppl/wiki");
  EXPECT_EQ(buffer.Ack(40), 2u);
  EXPECT_EQ(buffer.unacked(), 0u);
  // An ack that arrives after a reconnect rewound the outbox drops nothing: all is resent.
  buffer.Add(Steps(41, 43));
  buffer.NextBatch(100);
  buffer.Rewind();
  EXPECT_EQ(buffer.Ack(43), 0u);
  EXPECT_EQ(buffer.NextBatch(100).size(), 3u);
}

TEST(MetricBufferTest, RewindResendsEverythingUnacknowledgedAfterAReconnect) {
  MetricBuffer buffer(100);
  buffer.Add(Steps(1, 10));
  buffer.NextBatch(100);
  buffer.Ack(3);
  buffer.Rewind();  // the stream broke; acks for 4..10 never came
  auto again = buffer.NextBatch(100);
  ASSERT_EQ(again.size(), 7u);
  EXPECT_EQ(again.front().step, 4);
  EXPECT_EQ(again.back().step, 10);
}

TEST(MetricBufferTest, AddBlocksWhenFullUntilAnAckMakesRoom) {
  MetricBuffer buffer(5);
  buffer.Add(Steps(1, 5));
  std::atomic<bool> added{false};
  std::thread producer([&] {
    buffer.Add(Steps(6, 7));
    added = true;
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  EXPECT_FALSE(added);  // blocked: 5 of 5 held
  buffer.NextBatch(5);
  buffer.Ack(2);
  producer.join();
  EXPECT_TRUE(added);
  EXPECT_EQ(buffer.unacked(), 5u);
}

TEST(MetricBufferTest, WaitEmptyReturnsWhenAllAcknowledged) {
  MetricBuffer buffer(10);
  buffer.Add(Steps(1, 3));
  EXPECT_FALSE(buffer.WaitEmpty(10));
  buffer.NextBatch(10);
  std::thread acker([&] { buffer.Ack(3); });
  EXPECT_TRUE(buffer.WaitEmpty(5000));
  acker.join();
}

}  // namespace
}  // namespace cart::worker
