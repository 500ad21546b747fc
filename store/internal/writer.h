#pragma once

// The store's one writer path: a thread that owns the write connection and runs queued calls,
// committing all that have queued up (up to a limit) in one transaction. Each call runs inside its
// own savepoint: a call that fails is rolled back alone and the others of its batch still commit.
// A call's future is ready once its transaction has committed (or failed).
//
// Why group commit: a commit costs a WAL append (and with synchronous=FULL an fsync) whatever its
// size, so many small calls (heartbeats, metric batches from tens of workers) in one commit is
// what makes the ingest rate independent of how finely workers batch.

#include <deque>
#include <functional>
#include <future>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <unordered_map>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "store/internal/sql.h"

namespace cart::store::internal {

// What a call sees while it runs on the writer thread.
class WriteContext {
 public:
  WriteContext(Database* db, std::unordered_map<std::string, int64_t>* metric_ids)
      : db_(db), metric_ids_(metric_ids) {}

  Database& db() { return *db_; }
  // Runs `fn` on the writer thread after the call's transaction committed; dropped if the call
  // fails or the transaction does not commit (e.g. to publish ids into a cache only once durable).
  void OnCommit(std::function<void()> fn) { on_commit_.push_back(std::move(fn)); }
  // Metric name -> id for names whose rows have committed. Only the writer thread touches it.
  const std::unordered_map<std::string, int64_t>& committed_metric_ids() const {
    return *metric_ids_;
  }
  std::unordered_map<std::string, int64_t>* mutable_metric_ids() { return metric_ids_; }

  std::vector<std::function<void()>> TakeOnCommit() { return std::move(on_commit_); }

 private:
  Database* db_;
  std::unordered_map<std::string, int64_t>* metric_ids_;
  std::vector<std::function<void()>> on_commit_;
};

class Writer {
 public:
  using Fn = std::function<absl::Status(WriteContext&)>;
  using Done = std::function<void(absl::Status)>;

  // Takes the write connection (already migrated) and starts the thread.
  Writer(std::unique_ptr<Database> db, int max_calls_per_commit);
  // Runs every queued call, then stops the thread and closes the connection.
  ~Writer();
  Writer(const Writer&) = delete;
  Writer& operator=(const Writer&) = delete;

  // Queues `fn`; `done` runs on the writer thread with fn's status, or the commit's error.
  void Enqueue(Fn fn, Done done);

  // Queues `fn` and returns a future for its result, ready when committed.
  template <typename T>
  std::future<absl::StatusOr<T>> Submit(std::function<absl::StatusOr<T>(WriteContext&)> fn) {
    auto promise = std::make_shared<std::promise<absl::StatusOr<T>>>();
    auto result = std::make_shared<std::optional<absl::StatusOr<T>>>();
    std::future<absl::StatusOr<T>> future = promise->get_future();
    Enqueue(
        [fn = std::move(fn), result](WriteContext& ctx) {
          result->emplace(fn(ctx));
          return (*result)->ok() ? absl::OkStatus() : (*result)->status();
        },
        [promise, result](absl::Status status) {
          if (status.ok()) {
            promise->set_value(std::move(**result));
          } else {
            promise->set_value(std::move(status));
          }
        });
    return future;
  }

  // Submit and wait.
  template <typename T>
  absl::StatusOr<T> Run(std::function<absl::StatusOr<T>(WriteContext&)> fn) {
    return Submit<T>(std::move(fn)).get();
  }

 private:
  struct Call {
    Fn fn;
    Done done;
  };

  void Loop();
  // Runs `calls` in one transaction; calls left unrun because SQLite aborted the transaction go
  // back to the front of the queue.
  void RunBatch(std::vector<Call> calls);
  bool HasWorkOrStopping() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return !queue_.empty() || stopping_;
  }

  // Constant after construction.
  const int max_calls_per_commit_;

  // Touched only by the writer thread.
  std::unique_ptr<Database> db_;
  std::unordered_map<std::string, int64_t> metric_ids_;

  // Protected by mu_.
  absl::Mutex mu_;
  std::deque<Call> queue_ ABSL_GUARDED_BY(mu_);
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;

  std::thread thread_;  // last: starts after everything above is ready
};

// Reader connections (query_only), lent one at a time; returned connections are kept for reuse.
class ReaderPool {
 public:
  ReaderPool(std::string path, DatabaseOptions options);

  // A borrowed connection; goes back to the pool when destroyed.
  class Lease {
   public:
    Lease(ReaderPool* pool, std::unique_ptr<Database> db) : pool_(pool), db_(std::move(db)) {}
    Lease(Lease&&) = default;
    Lease& operator=(Lease&&) = delete;
    ~Lease();
    Database& db() { return *db_; }

   private:
    ReaderPool* pool_;
    std::unique_ptr<Database> db_;
  };

  absl::StatusOr<Lease> Acquire();

 private:
  static constexpr size_t kMaxIdle = 8;

  // Constant after construction.
  const std::string path_;
  const DatabaseOptions options_;

  // Protected by mu_.
  absl::Mutex mu_;
  std::vector<std::unique_ptr<Database>> idle_ ABSL_GUARDED_BY(mu_);
};

// Runs fn(Database&) -> StatusOr<T> on a pooled reader inside one read transaction: one snapshot.
template <typename T, typename Fn>
absl::StatusOr<T> ReadSnapshot(ReaderPool& pool, Fn&& fn) {
  absl::StatusOr<ReaderPool::Lease> lease = pool.Acquire();
  if (!lease.ok()) return lease.status();
  Transaction txn(&lease->db());  // ends before the lease gives the connection back
  if (absl::Status begin = txn.Begin(); !begin.ok()) return begin;
  absl::StatusOr<T> out = fn(lease->db());
  if (!out.ok()) return out;
  if (absl::Status commit = txn.Commit(); !commit.ok()) return commit;
  return out;
}

}  // namespace cart::store::internal
