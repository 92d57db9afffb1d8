// Reading a slot and the cluster's identity from PostgreSQL, for the checks of
// replication/start_plan.h (which decides what they mean).
#ifndef WALFEED_REPLICATION_PG_SLOT_GUARD_H_
#define WALFEED_REPLICATION_PG_SLOT_GUARD_H_

#include <libpq-fe.h>

#include <cstdint>
#include <optional>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "replication/start_plan.h"

namespace walfeed::replication::pg {

// Reads `slot_name` from pg_replication_slots over `conn` (an SQL connection or a
// logical replication connection before START_REPLICATION). nullopt when there is
// no such slot. Physical slots are reported with an empty plugin.
absl::StatusOr<std::optional<SlotState>> ReadSlot(PGconn* conn, absl::string_view slot_name);

// IDENTIFY_SYSTEM's systemid: the cluster's identifier. Needs a replication
// connection.
absl::StatusOr<uint64_t> ReadSystemIdentifier(PGconn* conn);

}  // namespace walfeed::replication::pg

#endif  // WALFEED_REPLICATION_PG_SLOT_GUARD_H_
