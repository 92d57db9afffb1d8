#include "replication/pg/slot_report.h"

#include "replication/pg/pg_conn.h"
#include "replication/status_macros.h"

namespace walfeed::replication::pg {

absl::StatusOr<SlotReport> ReadSlotReport(absl::string_view conninfo,
                                          absl::string_view slot_name) {
  WALFEED_ASSIGN_OR_RETURN(PgConnPtr conn, Connect(conninfo, ConnectionKind::kSql));
  SlotReport report;
  WALFEED_ASSIGN_OR_RETURN(report.slot, ReadSlot(conn.get(), slot_name));
  WALFEED_ASSIGN_OR_RETURN(
      PgResultPtr position,
      ExecSimple(conn.get(),
                 "SELECT CASE WHEN pg_is_in_recovery() THEN pg_last_wal_replay_lsn() "
                 "ELSE pg_current_wal_lsn() END"));
  if (std::optional<std::string> text = Value(position.get(), 0, 0)) {
    WALFEED_ASSIGN_OR_RETURN(report.server_wal_lsn, Lsn::Parse(*text));
  }
  return report;
}

}  // namespace walfeed::replication::pg
