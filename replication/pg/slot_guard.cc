#include "replication/pg/slot_guard.h"

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "replication/pg/pg_conn.h"
#include "replication/status_macros.h"

namespace walfeed::replication::pg {

absl::StatusOr<std::optional<SlotState>> ReadSlot(PGconn* conn, absl::string_view slot_name) {
  // Simple protocol with a quoted literal: a walsender accepts no parameters.
  WALFEED_ASSIGN_OR_RETURN(
      PgResultPtr result,
      ExecSimple(conn, absl::StrCat("SELECT coalesce(plugin, ''), coalesce(datoid, 0), "
                                    "temporary, active, confirmed_flush_lsn, restart_lsn, "
                                    "coalesce(wal_status, ''), safe_wal_size "
                                    "FROM pg_replication_slots "
                                    "WHERE slot_name = ",
                                    QuoteLiteral(slot_name))));
  if (PQntuples(result.get()) == 0) return std::optional<SlotState>();
  const PGresult* r = result.get();
  SlotState slot;
  slot.plugin = Value(r, 0, 0).value_or("");
  if (!absl::SimpleAtoi(Value(r, 0, 1).value_or(""), &slot.database_oid)) {
    return absl::DataLossError("pg_replication_slots.datoid is not a number");
  }
  slot.temporary = Value(r, 0, 2).value_or("") == "t";
  slot.active = Value(r, 0, 3).value_or("") == "t";
  for (auto [column, out] : {std::pair{4, &slot.confirmed_flush}, {5, &slot.restart_lsn}}) {
    const std::optional<std::string> text = Value(r, 0, column);
    if (!text) continue;
    WALFEED_ASSIGN_OR_RETURN(*out, Lsn::Parse(*text));
  }
  slot.wal_status = Value(r, 0, 6).value_or("");
  if (const std::optional<std::string> safe = Value(r, 0, 7)) {
    int64_t bytes = 0;
    if (!absl::SimpleAtoi(*safe, &bytes)) {
      return absl::DataLossError("pg_replication_slots.safe_wal_size is not a number");
    }
    slot.safe_wal_size = bytes;
  }
  return std::optional<SlotState>(std::move(slot));
}

absl::StatusOr<uint64_t> ReadSystemIdentifier(PGconn* conn) {
  WALFEED_ASSIGN_OR_RETURN(PgResultPtr result, ExecSimple(conn, "IDENTIFY_SYSTEM"));
  uint64_t id = 0;
  if (PQntuples(result.get()) != 1 || !absl::SimpleAtoi(Value(result.get(), 0, 0).value_or(""), &id)) {
    return absl::DataLossError("IDENTIFY_SYSTEM returned no system identifier");
  }
  return id;
}

}  // namespace walfeed::replication::pg
