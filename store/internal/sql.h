#pragma once

// Small RAII wrappers over the SQLite C API, in the manner of Chromium's sql/ (Database, Statement,
// Transaction). Private to store/: this header is the only one that includes sqlite3.h, and no
// public header of store/ includes it.
//
// Thread safety: a Database and its Statements belong to one thread at a time (SQLite's
// "multi-thread" mode); the store hands each connection to one thread (the writer thread, or a
// reader that borrowed it from the pool).

#include <sqlite3.h>

#include <algorithm>
#include <cstdint>
#include <limits>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <type_traits>
#include <unordered_map>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace cart::store::internal {

class Database;

// Turns a SQLite result code into a Status: BUSY/LOCKED -> Unavailable, CONSTRAINT ->
// FailedPrecondition, CORRUPT/NOTADB -> DataLoss, FULL -> ResourceExhausted, anything else ->
// Internal. `what` names the operation (a statement's first words, "open /path/db").
absl::Status SqliteError(int code, sqlite3* db, std::string_view what);

// Bytes to bind as a BLOB (BindAll binds strings as TEXT).
struct Blob {
  std::string_view bytes;
};

// One prepared statement. Parameters are bound by position (1-based, as SQLite counts) with typed
// Bind* calls or all at once with BindAll; columns are read 0-based.
class Statement {
 public:
  ~Statement();
  Statement(const Statement&) = delete;
  Statement& operator=(const Statement&) = delete;

  void BindInt64(int index, int64_t value);
  // NaN is stored as NULL (SQLite's own behaviour, made explicit); ColumnDouble reads NULL as NaN.
  void BindDouble(int index, double value);
  // The text is copied (SQLITE_TRANSIENT), so the argument may die before Step().
  void BindText(int index, std::string_view value);
  void BindNull(int index);
  void BindBlob(int index, std::string_view bytes);  // copied, as BindText

  // Binds args to parameters 1..N: integral types as INTEGER, floating types as REAL, strings as
  // TEXT, std::nullopt / nullptr as NULL, std::optional<T> as T or NULL.
  template <typename... Args>
  void BindAll(const Args&... args) {
    int index = 0;
    (BindOne(++index, args), ...);
  }

  // Advances: true when a row is ready to read, false when done. An error leaves the statement
  // to be Reset() before reuse.
  absl::StatusOr<bool> Step();
  // Steps through every row, calling fn(const Statement&) on each; fn returns void or a Status,
  // and the first error (SQLite's or fn's) stops the walk and is returned.
  template <typename Fn>
  absl::Status ForEachRow(Fn&& fn) {
    while (true) {
      absl::StatusOr<bool> row = Step();
      if (!row.ok()) return row.status();
      if (!*row) return absl::OkStatus();
      if constexpr (std::is_void_v<decltype(fn(*this))>) {
        fn(*this);
      } else {
        absl::Status status = fn(*this);
        if (!status.ok()) return status;
      }
    }
  }
  // Runs a statement that returns no rows (INSERT/UPDATE/DELETE) to completion.
  absl::Status Run();
  // Ready to run again with new bindings (bindings cleared).
  void Reset();

  bool ColumnIsNull(int col) const;
  int64_t ColumnInt64(int col) const;
  double ColumnDouble(int col) const;  // NULL -> NaN
  std::string ColumnText(int col) const;
  std::string ColumnBlob(int col) const;  // the bytes of a BLOB (or TEXT) column; NULL: empty
  std::optional<int64_t> ColumnOptionalInt64(int col) const;
  std::optional<std::string> ColumnOptionalText(int col) const;

 private:
  friend class Database;
  Statement(sqlite3* db, sqlite3_stmt* stmt) : db_(db), stmt_(stmt) {}

  template <typename T>
  void BindOne(int index, const T& value) {
    if constexpr (std::is_same_v<T, std::nullopt_t> || std::is_same_v<T, std::nullptr_t>) {
      BindNull(index);
    } else if constexpr (std::is_same_v<T, bool> || std::is_integral_v<T>) {
      BindInt64(index, static_cast<int64_t>(value));
    } else if constexpr (std::is_floating_point_v<T>) {
      BindDouble(index, static_cast<double>(value));
    } else if constexpr (std::is_same_v<T, Blob>) {
      BindBlob(index, value.bytes);
    } else if constexpr (std::is_convertible_v<const T&, std::string_view>) {
      BindText(index, std::string_view(value));
    } else {
      // std::optional<U>
      if (value.has_value()) {
        BindOne(index, *value);
      } else {
        BindNull(index);
      }
    }
  }

  sqlite3* db_;
  sqlite3_stmt* stmt_;
};

// A borrowed cached statement; resets it (ending any read it holds open) when it goes out of
// scope, so a statement stepped once for a single row does not pin a snapshot.
class CachedStatement {
 public:
  explicit CachedStatement(Statement* statement) : statement_(statement) {}
  CachedStatement(CachedStatement&& other) noexcept : statement_(other.statement_) {
    other.statement_ = nullptr;
  }
  CachedStatement& operator=(CachedStatement&&) = delete;
  ~CachedStatement() {
    if (statement_ != nullptr) statement_->Reset();
  }
  Statement* operator->() const { return statement_; }
  Statement& operator*() const { return *statement_; }

 private:
  Statement* statement_;
};

// Durability of a commit in WAL mode (PRAGMA synchronous).
enum class Synchronous {
  // A commit has reached the operating system when it returns: it survives the death of the
  // process (SIGKILL, crash), not a power cut or kernel crash, which may lose the last commits
  // (never corrupt the file). No fsync per commit.
  kNormal,
  // fsync of the WAL on every commit: survives power loss as well.
  kFull,
};

struct DatabaseOptions {
  // Create the file when it does not exist. When false, a missing file is NotFound.
  bool create = true;
  // Open for reading only (SQLITE_OPEN_READONLY); for admin tools that must not change the file.
  bool read_only = false;
  // PRAGMA query_only: a read-write handle that refuses writes (the store's reader connections).
  bool query_only = false;
  // How long a statement waits for a lock held by another connection, milliseconds.
  int busy_timeout_ms = 5000;
  Synchronous synchronous = Synchronous::kNormal;
  // Page cache of this connection, KiB (PRAGMA cache_size). The writer wants the leaf pages of
  // every metric series being appended to (tens of runs × tens of metrics) to stay cached.
  int cache_kib = 2048;
  // PRAGMA wal_autocheckpoint: the connection that commits copies the WAL back into the database
  // once it holds this many pages. A leaf being appended to is rewritten into the WAL by many
  // commits but copied back once per checkpoint, so a longer WAL means fewer page writes.
  int wal_autocheckpoint_pages = 1000;
};

// One connection. Set up at open: journal_mode=WAL (unless read_only), foreign_keys=ON,
// busy_timeout, synchronous. Closing finalizes every cached statement first.
class Database {
 public:
  // Errors: NotFound when the file is missing and !options.create; DataLoss when it is not a
  // SQLite database; Unavailable when it is locked past the busy timeout.
  static absl::StatusOr<std::unique_ptr<Database>> Open(const std::string& path,
                                                        const DatabaseOptions& options);
  ~Database();
  Database(const Database&) = delete;
  Database& operator=(const Database&) = delete;

  // Runs one or more statements without parameters (DDL, PRAGMA, BEGIN/COMMIT).
  absl::Status Execute(const char* sql);

  // A prepared statement kept for the life of the connection, reset and with bindings cleared;
  // reset again when the handle dies. Do not hold two handles on the same SQL text at once (e.g.
  // in a nested loop): both would share one statement.
  absl::StatusOr<CachedStatement> Cached(std::string_view sql);
  // A statement owned by the caller (for SQL used once).
  absl::StatusOr<std::unique_ptr<Statement>> Prepare(std::string_view sql);

  int64_t LastInsertRowId() const;
  // Rows changed by the last INSERT/UPDATE/DELETE.
  int64_t Changes() const;
  // False while a transaction is open. SQLite rolls a transaction back by itself after some errors
  // (SQLITE_FULL, IOERR, NOMEM, BUSY in some cases); this is how callers notice.
  bool InAutocommit() const;

  const std::string& path() const { return path_; }
  sqlite3* raw() const { return db_; }

 private:
  Database(sqlite3* db, std::string path) : db_(db), path_(std::move(path)) {}

  sqlite3* db_;
  std::string path_;
  std::unordered_map<std::string, std::unique_ptr<Statement>> cache_;
};

// The SQL of multi-row INSERTs, built once: head + tuple × k (comma-separated) + tail for
// k = 1..max_rows, e.g. head "INSERT INTO t(a, b) VALUES ", tuple "(?, ?)", tail
// " ON CONFLICT(a) DO NOTHING". Keep one as a function-local static per call site.
class MultiRowInsertSql {
 public:
  MultiRowInsertSql(std::string_view head, std::string_view tuple, int params_per_row,
                    std::string_view tail, size_t max_rows);
  const std::string& sql(size_t rows) const { return sql_[rows - 1]; }
  size_t max_rows() const { return sql_.size(); }
  int params_per_row() const { return params_per_row_; }

 private:
  std::vector<std::string> sql_;
  int params_per_row_;
};

// Inserts `rows` rows in chunks of up to sql.max_rows() rows per statement: one statement
// execution per chunk instead of per row, the fastest way to load many rows into SQLite.
// bind_row(statement, first_index, row) binds row `row` starting at parameter first_index.
template <typename BindRow>
absl::Status InsertRows(Database& db, const MultiRowInsertSql& sql, size_t rows,
                        BindRow&& bind_row);

// A transaction that rolls back unless Commit() succeeded. Not nestable (see Savepoint).
class Transaction {
 public:
  enum class Mode {
    kDeferred,   // a read snapshot starts with the first SELECT
    kImmediate,  // takes the write lock at Begin, so a later write cannot hit SQLITE_BUSY
  };
  explicit Transaction(Database* db) : db_(db) {}
  ~Transaction();
  Transaction(const Transaction&) = delete;
  Transaction& operator=(const Transaction&) = delete;

  absl::Status Begin(Mode mode = Mode::kDeferred);
  absl::Status Commit();
  // Explicit rollback; also what the destructor does while active.
  void Rollback();
  bool active() const { return active_; }

 private:
  Database* db_;
  bool active_ = false;
};

// A savepoint inside an open transaction: released on Release(), rolled back to (and released)
// otherwise. Used by the writer to keep one failed task from undoing the others of its batch.
class Savepoint {
 public:
  explicit Savepoint(Database* db) : db_(db) {}
  ~Savepoint();
  Savepoint(const Savepoint&) = delete;
  Savepoint& operator=(const Savepoint&) = delete;

  absl::Status Begin();
  absl::Status Release();
  void RollbackAndRelease();

 private:
  Database* db_;
  bool active_ = false;
};

template <typename BindRow>
absl::Status InsertRows(Database& db, const MultiRowInsertSql& sql, size_t rows,
                        BindRow&& bind_row) {
  for (size_t first = 0; first < rows; first += sql.max_rows()) {
    const size_t k = std::min(sql.max_rows(), rows - first);
    absl::StatusOr<CachedStatement> insert = db.Cached(sql.sql(k));
    if (!insert.ok()) return insert.status();
    for (size_t i = 0; i < k; ++i) {
      bind_row(**insert, static_cast<int>(i) * sql.params_per_row() + 1, first + i);
    }
    if (absl::Status status = (*insert)->Run(); !status.ok()) return status;
  }
  return absl::OkStatus();
}

}  // namespace cart::store::internal
