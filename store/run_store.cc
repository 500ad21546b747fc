// RunStore: opening the store. The writes live by aggregate in sweep_writes.cc, lease_writes.cc,
// ingest_writes.cc and action_writes.cc (their shared helpers in internal/writes.h); the reads in
// run_queries.cc and page_queries.cc.
#include "store/run_store.h"

#include <utility>

#include "common/status.h"
#include "common/strings.h"
#include "store/internal/schema.h"
#include "store/internal/sql.h"
#include "store/internal/writer.h"

namespace cart::store {

using internal::Database;

RunStore::RunStore(StoreOptions options, std::unique_ptr<internal::Writer> writer,
                   std::unique_ptr<internal::ReaderPool> readers)
    : options_(std::move(options)),
      writer_(std::move(writer)),
      readers_(std::move(readers)),
      notify_(std::make_unique<NotifyStore>(writer_.get(), readers_.get())) {}

RunStore::~RunStore() = default;

absl::StatusOr<std::unique_ptr<RunStore>> RunStore::Open(const StoreOptions& options) {
  if (options.path.empty()) return absl::InvalidArgumentError("store path is empty");
  if (options.lease_ttl_us <= 0) {
    return absl::InvalidArgumentError(
        StrCat("lease_ttl_us must be positive, got ", options.lease_ttl_us));
  }
  if (options.max_runs_per_sweep <= 0 || options.max_points_per_batch <= 0) {
    return absl::InvalidArgumentError("max_runs_per_sweep and max_points_per_batch must be > 0");
  }
  internal::DatabaseOptions write_options;
  write_options.busy_timeout_ms = options.busy_timeout_ms;
  write_options.cache_kib = options.writer_cache_kib;
  write_options.wal_autocheckpoint_pages = options.wal_checkpoint_pages;
  write_options.synchronous =
      options.synchronous_full ? internal::Synchronous::kFull : internal::Synchronous::kNormal;
  CART_ASSIGN_OR_RETURN(std::unique_ptr<Database> db, Database::Open(options.path, write_options));
  CART_RETURN_IF_ERROR(internal::Migrate(*db));
  internal::DatabaseOptions read_options = write_options;
  read_options.create = false;
  read_options.query_only = true;
  read_options.cache_kib = options.reader_cache_kib;
  auto writer = std::make_unique<internal::Writer>(std::move(db), options.max_calls_per_commit);
  auto readers = std::make_unique<internal::ReaderPool>(options.path, read_options);
  return std::unique_ptr<RunStore>(new RunStore(options, std::move(writer), std::move(readers)));
}

}  // namespace cart::store
