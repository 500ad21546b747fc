#pragma once

// An ordered parallel map: one producer thread makes batches, `threads` workers transform them,
// and the calling thread consumes the results in production order. At most `max_in_flight`
// batches exist at once, so memory stays bounded however long the input is.

#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"

namespace cart::data::internal {

// produce: returns the next batch, nullopt at the end, or an error (runs on one thread).
// work: runs concurrently on the worker threads; must be thread-safe.
// consume: runs on the calling thread, in order; an error stops everything.
// Returns the first error of produce or consume, else OK after every batch was consumed.
template <typename Batch, typename Result>
absl::Status RunOrderedPipeline(
    int threads, int max_in_flight,
    const std::function<absl::StatusOr<std::optional<Batch>>()>& produce,
    const std::function<Result(Batch&)>& work,
    const std::function<absl::Status(Result&)>& consume) {
  struct Shared {
    absl::Mutex mu;
    std::map<int64_t, Batch> todo ABSL_GUARDED_BY(mu);
    std::map<int64_t, Result> done ABSL_GUARDED_BY(mu);
    int64_t produced ABSL_GUARDED_BY(mu) = 0;
    int64_t consumed ABSL_GUARDED_BY(mu) = 0;
    bool producer_finished ABSL_GUARDED_BY(mu) = false;
    bool cancelled ABSL_GUARDED_BY(mu) = false;
    absl::Status producer_status ABSL_GUARDED_BY(mu);
  } sh;
  if (threads < 1) threads = 1;
  if (max_in_flight < threads) max_in_flight = threads;

  std::thread producer([&] {
    while (true) {
      {
        absl::MutexLock lock(&sh.mu);
        const auto room = [&] {
          sh.mu.AssertHeld();
          return sh.cancelled || sh.produced - sh.consumed < max_in_flight;
        };
        sh.mu.Await(absl::Condition(&room));
        if (sh.cancelled) return;
      }
      absl::StatusOr<std::optional<Batch>> next = produce();
      absl::MutexLock lock(&sh.mu);
      if (!next.ok() || !next->has_value()) {
        if (!next.ok()) sh.producer_status = next.status();
        sh.producer_finished = true;
        return;
      }
      sh.todo.emplace(sh.produced++, std::move(**next));
    }
  });
  std::vector<std::thread> workers;
  for (int i = 0; i < threads; ++i) {
    workers.emplace_back([&] {
      while (true) {
        Batch batch;
        int64_t seq;
        {
          absl::MutexLock lock(&sh.mu);
          const auto ready = [&] {
            sh.mu.AssertHeld();
            return sh.cancelled || !sh.todo.empty() || sh.producer_finished;
          };
          sh.mu.Await(absl::Condition(&ready));
          if (sh.cancelled || sh.todo.empty()) return;
          auto it = sh.todo.begin();
          seq = it->first;
          batch = std::move(it->second);
          sh.todo.erase(it);
        }
        Result result = work(batch);
        absl::MutexLock lock(&sh.mu);
        sh.done.emplace(seq, std::move(result));
      }
    });
  }

  absl::Status status;
  while (true) {
    Result result;
    {
      absl::MutexLock lock(&sh.mu);
      const auto ready = [&] {
        sh.mu.AssertHeld();
        return sh.done.count(sh.consumed) > 0 ||
               (sh.producer_finished && (sh.consumed == sh.produced || !sh.producer_status.ok()));
      };
      sh.mu.Await(absl::Condition(&ready));
      auto it = sh.done.find(sh.consumed);
      if (it == sh.done.end()) {
        status = sh.producer_status;
        sh.cancelled = true;
        break;
      }
      result = std::move(it->second);
      sh.done.erase(it);
    }
    status = consume(result);
    absl::MutexLock lock(&sh.mu);
    ++sh.consumed;
    if (!status.ok()) {
      sh.cancelled = true;
      break;
    }
  }
  producer.join();
  for (std::thread& w : workers) w.join();
  return status;
}

}  // namespace cart::data::internal
