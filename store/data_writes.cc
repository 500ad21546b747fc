// RunStore's data lineage (docs/architecture.md "Runs are bound to their data by content"): which
// data files each run reads and, once recorded, their identities. Rows are written at submit
// (CreateSweep, with what the submitting client could hash) and by the first worker that opens a
// file (RecordRunData), and read with the run when it is leased (Claim::data), so that every
// attempt checks its files.
#include <algorithm>

#include "common/sha256.h"
#include "common/status.h"
#include "common/strings.h"
#include "store/internal/records.h"
#include "store/internal/sql.h"
#include "store/internal/validate.h"
#include "store/internal/writer.h"
#include "store/internal/writes.h"
#include "store/run_store.h"

namespace cart::store {

using internal::Database;
using internal::Exec;
using internal::WriteContext;

namespace internal {
namespace {

constexpr char kUpsertEvalItems[] =
    "INSERT INTO eval_items(run_id, task, loops, items, correct, correct_norm, logprob, "
    "recorded_us) VALUES(?, ?, ?, ?, ?, ?, ?, ?) ON CONFLICT(run_id, task, loops) DO UPDATE SET "
    "items = excluded.items, correct = excluded.correct, correct_norm = excluded.correct_norm, "
    "logprob = excluded.logprob, recorded_us = excluded.recorded_us";

// The most data files one run reads, and so the most rows it has in run_data: a train file and
// up to 64 validation and 64 task sets (config/config.cc).
constexpr size_t kMaxRunDataRoles = 129;

constexpr char kInsertDataFile[] =
    "INSERT INTO data_files(sha256, size_bytes, tokens, tokenizer, tokenizer_sha256) "
    "VALUES(?, ?, ?, ?, ?) ON CONFLICT DO NOTHING";
constexpr char kSelectDataFile[] =
    "SELECT id FROM data_files WHERE sha256 = ? AND size_bytes = ? AND tokens = ? AND "
    "tokenizer = ? AND tokenizer_sha256 = ?";
// A new row, or an identity for a row that has none (same path); a recorded one stays.
constexpr char kUpsertRunData[] =
    "INSERT INTO run_data(run_id, role, path, file_id, recorded_by, recorded_us) "
    "VALUES(?1, ?2, ?3, ?4, ?5, ?6) ON CONFLICT(run_id, role) DO UPDATE SET "
    "file_id = excluded.file_id, recorded_by = excluded.recorded_by, "
    "recorded_us = excluded.recorded_us "
    "WHERE run_data.file_id IS NULL AND excluded.file_id IS NOT NULL AND "
    "run_data.path = excluded.path";
// Derived runs at any depth (runs_by_parent) reading the same file without an identity.
constexpr char kPropagateRunData[] =
    "WITH RECURSIVE d(id) AS (SELECT id FROM runs WHERE parent_run_id = ?1 "
    "UNION SELECT r.id FROM runs AS r JOIN d ON r.parent_run_id = d.id) "
    "UPDATE run_data SET file_id = ?4, recorded_by = ?5, recorded_us = ?6 "
    "WHERE run_id IN (SELECT id FROM d) AND role = ?2 AND path = ?3 AND file_id IS NULL";
constexpr char kInheritRunData[] =
    "UPDATE run_data AS c SET file_id = p.file_id, recorded_by = ?3, recorded_us = ?4 "
    "FROM run_data AS p WHERE c.run_id = ?1 AND p.run_id = ?2 AND p.role = c.role AND "
    "p.path = c.path AND c.file_id IS NULL AND p.file_id IS NOT NULL";
constexpr char kSelectRunData[] =
    "SELECT d.role, d.path, f.sha256, f.size_bytes, f.tokens, f.tokenizer, f.tokenizer_sha256, "
    "d.recorded_by, d.recorded_us FROM run_data AS d LEFT JOIN data_files AS f ON f.id = "
    "d.file_id WHERE d.run_id = ? ORDER BY d.role != 'train', d.role";

absl::StatusOr<int64_t> DataFileId(Database& db, const data::FileIdentity& id) {
  CART_RETURN_IF_ERROR(Exec(db, kInsertDataFile, id.sha256, id.size_bytes, id.tokens, id.tokenizer,
                            id.tokenizer_sha256));
  CART_ASSIGN_OR_RETURN(auto select, db.Cached(kSelectDataFile));
  select->BindAll(id.sha256, id.size_bytes, id.tokens, id.tokenizer, id.tokenizer_sha256);
  CART_ASSIGN_OR_RETURN(bool row, select->Step());
  if (!row) return absl::InternalError("data_files: the row just written is missing");
  const int64_t file_id = select->ColumnInt64(0);
  select->Reset();
  return file_id;
}

}  // namespace

absl::Status WriteRunData(Database& db, int64_t run_id, const std::vector<RunDataRecord>& files,
                          int64_t now_us) {
  for (const RunDataRecord& f : files) {
    std::optional<int64_t> file_id;
    if (f.identity) {
      CART_ASSIGN_OR_RETURN(file_id, DataFileId(db, *f.identity));
    }
    const int64_t at = f.recorded_us > 0 ? f.recorded_us : now_us;
    CART_RETURN_IF_ERROR(
        Exec(db, kUpsertRunData, run_id, f.role, f.path, file_id, f.recorded_by, at));
    if (file_id && db.Changes() > 0) {
      CART_RETURN_IF_ERROR(Exec(db, kPropagateRunData, run_id, f.role, f.path, *file_id,
                                StrCat("run ", run_id, " (its parent)"), at));
    }
  }
  return absl::OkStatus();
}

absl::Status InheritRunData(Database& db, int64_t run_id, int64_t parent_id, int64_t now_us) {
  return Exec(db, kInheritRunData, run_id, parent_id, StrCat("run ", parent_id, " (its parent)"),
              now_us);
}

absl::StatusOr<std::vector<RunDataRecord>> LoadRunData(Database& db, int64_t run_id) {
  CART_ASSIGN_OR_RETURN(auto select, db.Cached(kSelectRunData));
  select->BindAll(run_id);
  std::vector<RunDataRecord> out;
  CART_RETURN_IF_ERROR(select->ForEachRow([&](const Statement& row) {
    RunDataRecord r;
    r.role = row.ColumnText(0);
    r.path = row.ColumnText(1);
    if (std::optional<std::string> sha = row.ColumnOptionalText(2)) {
      data::FileIdentity id;
      id.sha256 = *std::move(sha);
      id.size_bytes = row.ColumnInt64(3);
      id.tokens = row.ColumnInt64(4);
      id.tokenizer = row.ColumnText(5);
      id.tokenizer_sha256 = row.ColumnText(6);
      r.identity = std::move(id);
    }
    r.recorded_by = row.ColumnText(7);
    r.recorded_us = row.ColumnInt64(8);
    out.push_back(std::move(r));
  }));
  return out;
}

}  // namespace internal

absl::StatusOr<std::vector<RunDataRecord>> RunStore::RecordRunData(
    int64_t run_id, int64_t attempt, const std::vector<RunDataRecord>& files, int64_t now_us) {
  CART_RETURN_IF_ERROR(internal::ValidateRunData(files, StrCat("run ", run_id)));
  for (const RunDataRecord& f : files) {
    if (!f.identity) {
      return absl::InvalidArgumentError(
          StrCat("run ", run_id, ": data ", f.role, ": no identity to record"));
    }
  }
  using Out = std::vector<RunDataRecord>;
  return writer_->Run<Out>([&](WriteContext& ctx) -> absl::StatusOr<Out> {
    Database& db = ctx.db();
    CART_RETURN_IF_ERROR(internal::CheckFence(db, run_id, attempt, "data record").status());
    // A run reads at most kMaxRunDataRoles files (a config names a train file and at most 64
    // validation and 64 task sets): rows for more would be invented roles, kept for good
    // (thousands of them made one run's answer 78 MB). A role it has no row for is still taken
    // (a run stored before lineage has rows for some of its files only).
    CART_ASSIGN_OR_RETURN(const std::vector<RunDataRecord> known,
                          internal::LoadRunData(db, run_id));
    size_t roles = known.size();
    for (const RunDataRecord& f : files) {
      const bool is_new = std::none_of(known.begin(), known.end(),
                                       [&](const RunDataRecord& k) { return k.role == f.role; });
      if (is_new && ++roles > internal::kMaxRunDataRoles) {
        return absl::InvalidArgumentError(
            StrCat("run ", run_id, ": data role '", f.role, "' would make ", roles,
                   " files for one run; a run reads at most ", internal::kMaxRunDataRoles,
                   " (a train file, 64 validation and 64 task sets)"));
      }
    }
    CART_RETURN_IF_ERROR(internal::WriteRunData(db, run_id, files, now_us));
    return internal::LoadRunData(db, run_id);
  });
}

namespace {

constexpr char kInsertEnvironment[] =
    "INSERT INTO environments(sha256, items) VALUES(?, ?) ON CONFLICT(sha256) DO NOTHING";
constexpr char kSetAttemptEnvironment[] =
    "UPDATE attempts SET environment_id = (SELECT id FROM environments WHERE sha256 = ?) "
    "WHERE run_id = ? AND attempt = ?";

}  // namespace

namespace internal {

absl::Status ValidateItems(const std::vector<std::pair<std::string, std::string>>& items,
                           const std::string& who, const std::string& what, size_t most) {
  if (items.size() > most) {
    return absl::InvalidArgumentError(
        StrCat(who, ": ", items.size(), " ", what, "s; at most ", most));
  }
  for (const auto& [key, value] : items) {
    const bool key_ok =
        !key.empty() && key.size() <= 64 && std::all_of(key.begin(), key.end(), [](char c) {
          return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_' || c == '.';
        });
    if (!key_ok) {
      return absl::InvalidArgumentError(
          StrCat(who, ": ", what, " key '", key.substr(0, 80),
                 "' must be 1 to 64 characters of a-z, 0-9, '_' and '.'"));
    }
    if (value.size() > 1024 ||
        value.find_first_of(std::string_view("\n\0", 2)) != std::string::npos) {
      return absl::InvalidArgumentError(StrCat(who, ": ", what, " '", key,
                                               "' must be one line of at most 1024 bytes (it is ",
                                               value.size(), " bytes)"));
    }
  }
  return absl::OkStatus();
}

std::string EnvironmentText(const std::vector<std::pair<std::string, std::string>>& items) {
  std::string text;
  for (const auto& [key, value] : items) text += StrCat(key, "\t", value, "\n");
  return text;
}

std::vector<std::pair<std::string, std::string>> ParseEnvironmentText(std::string_view text) {
  std::vector<std::pair<std::string, std::string>> items;
  for (const std::string& line : Split(text, '\n')) {
    const size_t tab = line.find('\t');
    if (tab == std::string::npos) continue;
    items.emplace_back(line.substr(0, tab), line.substr(tab + 1));
  }
  return items;
}

}  // namespace internal

absl::Status RunStore::RecordEnvironment(
    int64_t run_id, int64_t attempt,
    const std::vector<std::pair<std::string, std::string>>& items) {
  CART_RETURN_IF_ERROR(internal::ValidateItems(items, StrCat("run ", run_id, " attempt ", attempt),
                                               "environment item", kMaxEnvironmentItems));
  const std::string text = internal::EnvironmentText(items);
  Sha256 hash;
  hash.Update(text);
  const std::string sha256 = hash.HexDigest();
  return writer_
      ->Run<bool>([&](WriteContext& ctx) -> absl::StatusOr<bool> {
        Database& db = ctx.db();
        CART_RETURN_IF_ERROR(
            internal::CheckFence(db, run_id, attempt, "environment record").status());
        CART_ASSIGN_OR_RETURN(auto insert, db.Cached(kInsertEnvironment));
        insert->BindAll(sha256, text);
        CART_RETURN_IF_ERROR(insert->Run());
        CART_ASSIGN_OR_RETURN(auto set, db.Cached(kSetAttemptEnvironment));
        set->BindAll(sha256, run_id, attempt);
        CART_RETURN_IF_ERROR(set->Run());
        return true;
      })
      .status();
}

absl::Status RunStore::RecordEvalItems(int64_t run_id, int64_t attempt,
                                       const std::vector<EvalItems>& items, int64_t now_us) {
  CART_RETURN_IF_ERROR(internal::ValidateEvalItems(run_id, items));
  return writer_
      ->Run<bool>([&](WriteContext& ctx) -> absl::StatusOr<bool> {
        Database& db = ctx.db();
        CART_RETURN_IF_ERROR(
            internal::CheckFence(db, run_id, attempt, "evaluation items").status());
        for (const EvalItems& e : items) {
          // Little-endian doubles: the platforms cartd builds on.
          const std::string blob(reinterpret_cast<const char*>(e.logprob.data()),
                                 e.logprob.size() * sizeof(double));
          CART_ASSIGN_OR_RETURN(auto upsert, db.Cached(internal::kUpsertEvalItems));
          upsert->BindAll(run_id, e.task, e.loops, static_cast<int64_t>(e.correct.size()),
                          e.correct, e.correct_norm, internal::Blob{blob}, now_us);
          CART_RETURN_IF_ERROR(upsert->Run());
        }
        return true;
      })
      .status();
}

}  // namespace cart::store
