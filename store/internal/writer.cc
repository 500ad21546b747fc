#include "store/internal/writer.h"

#include <algorithm>

namespace cart::store::internal {

Writer::Writer(std::unique_ptr<Database> db, int max_calls_per_commit)
    : max_calls_per_commit_(std::max(1, max_calls_per_commit)),
      db_(std::move(db)),
      thread_([this] { Loop(); }) {}

Writer::~Writer() {
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
  }
  thread_.join();
}

void Writer::Enqueue(Fn fn, Done done) {
  absl::MutexLock lock(&mu_);
  queue_.push_back(Call{std::move(fn), std::move(done)});
}

void Writer::Loop() {
  while (true) {
    std::vector<Call> calls;
    {
      absl::MutexLock lock(&mu_);
      mu_.Await(absl::Condition(this, &Writer::HasWorkOrStopping));
      if (queue_.empty()) return;  // stopping, and everything queued has run
      const size_t n = std::min(queue_.size(), static_cast<size_t>(max_calls_per_commit_));
      calls.reserve(n);
      for (size_t i = 0; i < n; ++i) {
        calls.push_back(std::move(queue_.front()));
        queue_.pop_front();
      }
    }
    RunBatch(std::move(calls));
  }
}

void Writer::RunBatch(std::vector<Call> calls) {
  Transaction txn(db_.get());
  if (absl::Status begin = txn.Begin(Transaction::Mode::kImmediate); !begin.ok()) {
    for (Call& call : calls) call.done(begin);
    return;
  }
  std::vector<absl::Status> results(calls.size());
  std::vector<std::function<void()>> on_commit;
  for (size_t i = 0; i < calls.size(); ++i) {
    WriteContext ctx(db_.get(), &metric_ids_);
    Savepoint savepoint(db_.get());
    absl::Status status = savepoint.Begin();
    if (status.ok()) status = calls[i].fn(ctx);
    if (status.ok()) {
      status = savepoint.Release();
    } else {
      savepoint.RollbackAndRelease();
    }
    if (db_->InAutocommit()) {
      // SQLite aborted the whole transaction (disk full, I/O error): the calls run so far are
      // undone, those not yet run are retried in a fresh transaction.
      absl::Status aborted =
          status.ok() ? absl::InternalError("sqlite aborted the transaction") : status;
      for (size_t j = 0; j <= i; ++j) calls[j].done(aborted);
      absl::MutexLock lock(&mu_);
      for (size_t j = calls.size(); j > i + 1; --j) queue_.push_front(std::move(calls[j - 1]));
      return;
    }
    results[i] = status;
    if (status.ok()) {
      for (auto& fn : ctx.TakeOnCommit()) on_commit.push_back(std::move(fn));
    }
  }
  if (absl::Status commit = txn.Commit(); !commit.ok()) {
    for (Call& call : calls) call.done(commit);
    return;
  }
  for (auto& fn : on_commit) fn();
  for (size_t i = 0; i < calls.size(); ++i) calls[i].done(std::move(results[i]));
}

ReaderPool::ReaderPool(std::string path, DatabaseOptions options)
    : path_(std::move(path)), options_(options) {}

ReaderPool::Lease::~Lease() {
  if (db_ == nullptr) return;
  absl::MutexLock lock(&pool_->mu_);
  if (pool_->idle_.size() < kMaxIdle) pool_->idle_.push_back(std::move(db_));
}

absl::StatusOr<ReaderPool::Lease> ReaderPool::Acquire() {
  {
    absl::MutexLock lock(&mu_);
    if (!idle_.empty()) {
      std::unique_ptr<Database> db = std::move(idle_.back());
      idle_.pop_back();
      return Lease(this, std::move(db));
    }
  }
  auto db = Database::Open(path_, options_);
  if (!db.ok()) return db.status();
  return Lease(this, std::move(*db));
}

}  // namespace cart::store::internal
