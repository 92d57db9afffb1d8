#include "replication/pg/exported_snapshot.h"

#include <spdlog/spdlog.h>

#include <utility>

#include "absl/strings/str_cat.h"
#include "replication/sql_text.h"
#include "replication/status_macros.h"

namespace walfeed::replication::pg {
namespace {

absl::StatusOr<PgConnPtr> ImportOn(const std::string& conninfo, const std::string& name) {
  WALFEED_ASSIGN_OR_RETURN(PgConnPtr conn, Connect(conninfo, ConnectionKind::kSql));
  // Text exactly as pgoutput sends it (see PgBackfillDatabase).
  WALFEED_RETURN_IF_ERROR(
      Exec(conn.get(),
           "SELECT set_config('client_encoding', current_setting('server_encoding'), false)")
          .status());
  WALFEED_RETURN_IF_ERROR(
      Exec(conn.get(), "BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY").status());
  // SET TRANSACTION SNAPSHOT takes a literal, not a parameter.
  WALFEED_RETURN_IF_ERROR(
      Exec(conn.get(), absl::StrCat("SET TRANSACTION SNAPSHOT ", QuoteLiteral(name))).status());
  return conn;
}

}  // namespace

absl::Status ExportedSnapshot::Import(const std::string& conninfo, const std::string& name,
                                      int connections) {
  std::vector<Holder> holders;
  for (int i = 0; i < std::max(connections, 1); ++i) {
    absl::StatusOr<PgConnPtr> conn = ImportOn(conninfo, name);
    if (!conn.ok()) {
      if (holders.empty()) return conn.status();
      spdlog::warn("initial snapshot: {} of {} connections imported the slot's snapshot; "
                   "the next one failed ({}), so {} table(s) are read at once",
                   holders.size(), connections, conn.status().ToString(), holders.size());
      break;
    }
    holders.push_back(Holder{std::move(*conn), false});
  }
  absl::MutexLock lock(&mu_);
  mu_.Await(absl::Condition(this, &ExportedSnapshot::NoneBusy));
  holders_ = std::move(holders);
  return absl::OkStatus();
}

bool ExportedSnapshot::AnyFreeOrNoneHeld() const {
  bool held = false;
  for (const Holder& holder : holders_) {
    if (holder.conn == nullptr) continue;
    if (!holder.busy) return true;
    held = true;
  }
  return !held;
}

bool ExportedSnapshot::NoneBusy() const {
  for (const Holder& holder : holders_) {
    if (holder.busy) return false;
  }
  return true;
}

absl::StatusOr<PgResultPtr> ExportedSnapshot::Query(
    const std::string& sql, const std::vector<std::optional<std::string>>& params) {
  Holder* mine = nullptr;
  {
    absl::MutexLock lock(&mu_);
    mu_.Await(absl::Condition(this, &ExportedSnapshot::AnyFreeOrNoneHeld));
    for (Holder& holder : holders_) {
      if (holder.conn != nullptr && !holder.busy) {
        mine = &holder;
        break;
      }
    }
    if (mine == nullptr) {
      return absl::FailedPreconditionError(
          "the snapshot the slot exported at its creation is no longer held (this process did "
          "not create the slot, or it was released)");
    }
    mine->busy = true;  // Import and Release wait for this flag: `mine` stays valid.
  }
  absl::StatusOr<PgResultPtr> result = Exec(mine->conn.get(), sql, params);
  absl::MutexLock lock(&mu_);
  mine->busy = false;
  // An error aborts the transaction: the snapshot is gone with it.
  if (!result.ok()) mine->conn.reset();
  return result;
}

bool ExportedSnapshot::held() const { return connections() > 0; }

int ExportedSnapshot::connections() const {
  absl::MutexLock lock(&mu_);
  int held = 0;
  for (const Holder& holder : holders_) held += holder.conn != nullptr ? 1 : 0;
  return held;
}

void ExportedSnapshot::Release() {
  absl::MutexLock lock(&mu_);
  mu_.Await(absl::Condition(this, &ExportedSnapshot::NoneBusy));
  holders_.clear();
}

}  // namespace walfeed::replication::pg
