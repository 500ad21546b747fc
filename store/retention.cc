// RunStore: checkpoint retention. A run keeps its newest checkpoints (resume needs only the
// latest) and every checkpoint a derived run names; the rest are forgotten, and an artifact no
// checkpoint names any more is released for its owner (cartd) to delete from disk.

#include <set>

#include "common/status.h"
#include "common/strings.h"
#include "store/internal/sql.h"
#include "store/internal/writer.h"
#include "store/internal/writes.h"
#include "store/run_store.h"

namespace cart::store {

using internal::Database;
using internal::WriteContext;

namespace {

// Checkpoints of run ?1 (every run when NULL) with at least ?2 newer ones, unless a child run
// starts from that step. A child naming "final" starts from the latest, which is always kept.
constexpr char kDeleteOldCheckpoints[] =
    "DELETE FROM checkpoints AS c WHERE (?1 IS NULL OR c.run_id = ?1) "
    "AND (SELECT count(*) FROM checkpoints AS n WHERE n.run_id = c.run_id AND n.step > c.step) "
    "    >= ?2 "
    "AND NOT EXISTS (SELECT 1 FROM runs AS child WHERE child.parent_run_id = c.run_id "
    "                AND child.parent_checkpoint = CAST(c.step AS TEXT)) "
    "RETURNING sha256";
constexpr char kSelectArtifactNames[] = "SELECT sha256 FROM artifacts";
constexpr char kSelectArtifactNamed[] = "SELECT 1 FROM artifacts WHERE sha256 = ?";

}  // namespace

absl::StatusOr<std::vector<std::string>> RunStore::PruneCheckpoints(std::optional<int64_t> run_id,
                                                                    int64_t keep) {
  if (keep < 1) {
    return absl::InvalidArgumentError(
        StrCat("checkpoints to keep per run must be >= 1, got ", keep));
  }
  using Out = std::vector<std::string>;
  return writer_->Run<Out>([&](WriteContext& ctx) -> absl::StatusOr<Out> {
    Database& db = ctx.db();
    std::set<std::string> forgotten;
    {
      CART_ASSIGN_OR_RETURN(auto del, db.Cached(kDeleteOldCheckpoints));
      if (run_id) {
        del->BindAll(*run_id, keep);
      } else {
        del->BindAll(std::optional<int64_t>(), keep);
      }
      CART_RETURN_IF_ERROR(
          del->ForEachRow([&](const auto& row) { forgotten.insert(row.ColumnText(0)); }));
    }
    return internal::ReleaseUnnamedArtifacts(db, forgotten);
  });
}

absl::Status RunStore::RemoveUnnamedArtifacts(
    const std::vector<std::string>& shas, const std::function<void(const std::string&)>& remove) {
  for (const std::string& sha : shas) {
    CART_RETURN_IF_ERROR(writer_
                             ->Run<bool>([&](WriteContext& ctx) -> absl::StatusOr<bool> {
                               CART_ASSIGN_OR_RETURN(auto named,
                                                     ctx.db().Cached(kSelectArtifactNamed));
                               named->BindAll(sha);
                               CART_ASSIGN_OR_RETURN(bool row, named->Step());
                               if (!row) remove(sha);
                               return !row;
                             })
                             .status());
  }
  return absl::OkStatus();
}

absl::StatusOr<std::vector<std::string>> RunStore::ArtifactNames() {
  using Out = std::vector<std::string>;
  return internal::ReadSnapshot<Out>(*readers_, [&](Database& db) -> absl::StatusOr<Out> {
    CART_ASSIGN_OR_RETURN(auto select, db.Cached(kSelectArtifactNames));
    Out names;
    CART_RETURN_IF_ERROR(
        select->ForEachRow([&](const auto& row) { names.push_back(row.ColumnText(0)); }));
    return names;
  });
}

}  // namespace cart::store
