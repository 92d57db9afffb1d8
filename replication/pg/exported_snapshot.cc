#include "replication/pg/exported_snapshot.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "replication/sql_text.h"
#include "replication/status_macros.h"

namespace walfeed::replication::pg {

absl::Status ExportedSnapshot::Import(const std::string& conninfo, const std::string& name) {
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
  absl::MutexLock lock(&mu_);
  conn_ = std::move(conn);
  return absl::OkStatus();
}

absl::StatusOr<PgResultPtr> ExportedSnapshot::Query(
    const std::string& sql, const std::vector<std::optional<std::string>>& params) {
  absl::MutexLock lock(&mu_);
  if (conn_ == nullptr) {
    return absl::FailedPreconditionError(
        "the snapshot the slot exported at its creation is no longer held (this process did "
        "not create the slot, or it was released)");
  }
  absl::StatusOr<PgResultPtr> result = Exec(conn_.get(), sql, params);
  // An error aborts the transaction: the snapshot is gone with it.
  if (!result.ok()) conn_.reset();
  return result;
}

bool ExportedSnapshot::held() const {
  absl::MutexLock lock(&mu_);
  return conn_ != nullptr;
}

void ExportedSnapshot::Release() {
  absl::MutexLock lock(&mu_);
  conn_.reset();
}

}  // namespace walfeed::replication::pg
