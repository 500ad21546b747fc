// RunStore: device-hour budgets (docs/operations.md "Budgets"): a sweep's and a user's, set
// only at or above what is already spent, and what placement reads to keep them.

#include <cmath>

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
using internal::ReadSnapshot;
using internal::WriteContext;

namespace {

// Device-hours in microseconds, counted as Spending counts them: each attempt from its start (its
// lease when it never started) to its end, or ?1 (now) while it runs.
// store::OwnerName in SQL: what follows the first ':' of a caller name.
#define CART_OWNER_NAME(column) "substr(" column ", instr(" column ", ':') + 1)"
#define CART_ATTEMPT_SPAN_US \
  "max(0, coalesce(a.ended_us, ?1) - coalesce(a.started_us, a.leased_us))"
constexpr char kSelectSweepUse[] =
    "SELECT s.id, s.name, s.created_by, s.budget_device_hours, coalesce((SELECT "
    "sum(" CART_ATTEMPT_SPAN_US
    ") FROM attempts AS a JOIN runs AS r ON r.id = a.run_id WHERE "
    "r.sweep_id = s.id), 0) FROM sweeps AS s ORDER BY s.id";
constexpr char kSelectSweepSpent[] = "SELECT coalesce(sum(" CART_ATTEMPT_SPAN_US
                                     "), 0) FROM attempts AS a JOIN runs AS r ON "
                                     "r.id = a.run_id WHERE r.sweep_id = ?2";
constexpr char kSelectUserSpent[] =
    "SELECT coalesce((SELECT sum(" CART_ATTEMPT_SPAN_US ") FROM attempts AS a JOIN runs AS r ON "
    "r.id = a.run_id JOIN sweeps AS s ON s.id = r.sweep_id WHERE " CART_OWNER_NAME("s.created_by")
    " = ?2), 0) + coalesce((SELECT sum(ended_us - started_us) FROM deleted_usage WHERE "
    CART_OWNER_NAME("owner") " = ?2), 0)";
#undef CART_ATTEMPT_SPAN_US
#undef CART_OWNER_NAME
constexpr char kSelectDeletedUse[] =
    "SELECT owner, sum(ended_us - started_us) FROM deleted_usage GROUP BY owner";
constexpr char kSelectUserBudgets[] =
    "SELECT user, device_hours, set_by, set_us FROM user_budgets ORDER BY user";
constexpr char kAnyBudget[] =
    "SELECT EXISTS(SELECT 1 FROM sweeps WHERE budget_device_hours IS NOT NULL) OR "
    "EXISTS(SELECT 1 FROM user_budgets)";
constexpr char kSetSweepBudget[] = "UPDATE sweeps SET budget_device_hours = ? WHERE id = ?";
constexpr char kUpsertUserBudget[] =
    "INSERT INTO user_budgets(user, device_hours, set_by, set_us) VALUES(?1, ?2, ?3, ?4) "
    "ON CONFLICT(user) DO UPDATE SET device_hours = ?2, set_by = ?3, set_us = ?4";

double Hours(int64_t us) { return static_cast<double>(us) / 3.6e9; }

absl::Status CheckHours(double hours) {
  if (!(hours > 0) || !std::isfinite(hours)) {
    return absl::InvalidArgumentError(
        StrCat("a budget must be a number of device-hours > 0, not ", hours));
  }
  return absl::OkStatus();
}

// One number from `sql` bound to (now, key).
template <typename Key>
absl::StatusOr<double> SpentHours(Database& db, const char* sql, int64_t now_us, const Key& key) {
  CART_ASSIGN_OR_RETURN(auto select, db.Cached(sql));
  select->BindAll(now_us, key);
  CART_ASSIGN_OR_RETURN(bool row, select->Step());
  return row ? Hours(select->ColumnInt64(0)) : 0.0;
}

absl::Status NotBelowSpent(double hours, double spent, const std::string& whose) {
  if (hours + 1e-9 >= spent) return absl::OkStatus();
  return absl::FailedPreconditionError(StrCat(whose, " has already spent ", Fixed(spent, 4),
                                              " device-hours: a budget of ", hours,
                                              " would be below it (give at least that much)"));
}

}  // namespace

absl::Status RunStore::SetSweepBudget(const std::string& name, double hours, const Audit& audit) {
  CART_RETURN_IF_ERROR(internal::ValidateAudit(audit));
  CART_RETURN_IF_ERROR(CheckHours(hours));
  return writer_
      ->Run<bool>([&](WriteContext& ctx) -> absl::StatusOr<bool> {
        Database& db = ctx.db();
        CART_ASSIGN_OR_RETURN(SweepRecord sweep, internal::LoadSweepByName(db, name));
        CART_ASSIGN_OR_RETURN(double spent,
                              SpentHours(db, kSelectSweepSpent, audit.at_us, sweep.id));
        CART_RETURN_IF_ERROR(NotBelowSpent(hours, spent, StrCat("sweep '", name, "'")));
        CART_RETURN_IF_ERROR(Exec(db, kSetSweepBudget, hours, sweep.id));
        const std::string state = sweep.cancelled ? "CANCELLED" : "ACTIVE";
        CART_RETURN_IF_ERROR(
            internal::InsertEvent(db, std::nullopt, sweep.id, state, state, audit));
        return true;
      })
      .status();
}

absl::Status RunStore::SetUserBudget(const std::string& user, double hours, const Audit& audit) {
  CART_RETURN_IF_ERROR(internal::ValidateAudit(audit));
  CART_RETURN_IF_ERROR(CheckHours(hours));
  if (user.empty() || user.size() > 256) {
    return absl::InvalidArgumentError("a user budget needs a user name of 1 to 256 bytes");
  }
  return writer_
      ->Run<bool>([&](WriteContext& ctx) -> absl::StatusOr<bool> {
        Database& db = ctx.db();
        CART_ASSIGN_OR_RETURN(double spent, SpentHours(db, kSelectUserSpent, audit.at_us, user));
        CART_RETURN_IF_ERROR(NotBelowSpent(hours, spent, StrCat("user '", user, "'")));
        CART_RETURN_IF_ERROR(Exec(db, kUpsertUserBudget, user, hours, audit.who, audit.at_us));
        return true;
      })
      .status();
}

absl::StatusOr<bool> RunStore::AnyBudget() {
  return ReadSnapshot<bool>(*readers_, [&](Database& db) -> absl::StatusOr<bool> {
    CART_ASSIGN_OR_RETURN(auto select, db.Cached(kAnyBudget));
    CART_ASSIGN_OR_RETURN(bool row, select->Step());
    return row && select->ColumnInt64(0) != 0;
  });
}

absl::StatusOr<BudgetUse> RunStore::ReadBudgetUse(int64_t now_us) {
  return ReadSnapshot<BudgetUse>(*readers_, [&](Database& db) -> absl::StatusOr<BudgetUse> {
    BudgetUse out;
    {
      CART_ASSIGN_OR_RETURN(auto select, db.Cached(kSelectSweepUse));
      select->BindAll(now_us);
      CART_RETURN_IF_ERROR(select->ForEachRow([&](const auto& cur) {
        SweepBudgetUse& s = out.sweeps[cur.ColumnInt64(0)];
        s.name = cur.ColumnText(1);
        s.owner = cur.ColumnText(2);
        if (!cur.ColumnIsNull(3)) s.limit = cur.ColumnDouble(3);
        s.spent = Hours(cur.ColumnInt64(4));
      }));
    }
    {
      CART_ASSIGN_OR_RETURN(auto select, db.Cached(kSelectDeletedUse));
      CART_RETURN_IF_ERROR(select->ForEachRow([&](const auto& cur) {
        out.deleted_spent[cur.ColumnText(0)] = Hours(cur.ColumnInt64(1));
      }));
    }
    CART_ASSIGN_OR_RETURN(auto select, db.Cached(kSelectUserBudgets));
    CART_RETURN_IF_ERROR(select->ForEachRow([&](const auto& cur) {
      UserBudget& u = out.users[cur.ColumnText(0)];
      u.user = cur.ColumnText(0);
      u.device_hours = cur.ColumnDouble(1);
      u.set_by = cur.ColumnText(2);
      u.set_us = cur.ColumnInt64(3);
    }));
    return out;
  });
}

}  // namespace cart::store
