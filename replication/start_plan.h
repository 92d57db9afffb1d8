// Fail closed on a slot that is not the one walfeed has been confirming to.
//
// walfeed stores a confirmed position before it sends it to the slot, so the slot
// walfeed streams from can only be at or behind the stored position (behind after
// a PostgreSQL restart, postgres-replication.md §4.4; harmless, walfeed restarts
// from the stored value and PostgreSQL honours the higher request). Anything else
// means changes were, or may have been, lost behind walfeed's back:
//
//   slot missing                          dropped (or invalidated and removed)
//   wal_status = 'lost'                   invalidated: WAL it needs was removed
//   identity differs (cluster, database,  recreated, or a different server
//     plugin)
//   slot confirmed_flush > stored         advanced or recreated by someone else
//                                         (creating a slot writes WAL, so a new
//                                         slot always starts past anything
//                                         walfeed confirmed)
//
// Each is a definite DataLoss error whose text names what was lost and how to
// recover; walfeed never recreates or re-binds a slot by itself. The checks run at
// start-up (PlanStart) and again before every reconnect (CheckResume), because a
// slot dropped and recreated while the connection was down would otherwise be
// streamed from its new, later position without a word.
#ifndef WALFEED_REPLICATION_START_PLAN_H_
#define WALFEED_REPLICATION_START_PLAN_H_

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "replication/checkpoint_store.h"
#include "replication/event_id.h"
#include "replication/lsn.h"

namespace walfeed::replication {


// A logical slot as pg_replication_slots shows it.
struct SlotState {
  std::string plugin;
  uint32_t database_oid = 0;
  bool temporary = false;
  bool active = false;
  Lsn confirmed_flush;     // 0/0 when NULL.
  Lsn restart_lsn;         // 0/0 when NULL (invalidated).
  std::string wal_status;  // "reserved", "extended", "unreserved", "lost"; "" when NULL.
  // Bytes of WAL that can still be written before the slot is in danger of
  // being invalidated (pg_replication_slots.safe_wal_size); nullopt when
  // max_slot_wal_keep_size is -1 (no limit) or the slot is lost.
  std::optional<int64_t> safe_wal_size;
};

// The identity of `slot` in the cluster `system_identifier`.
SlotIdentity IdentityOf(const SlotState& slot, uint64_t system_identifier);

// Names what to do after one of the errors above: the SQL that forgets the
// stream's stored position (so walfeed binds the slot as it now is, or creates
// one when allowed), and when to forget consumer checkpoints too.
std::string RecoveryHint(absl::string_view stream, absl::string_view checkpoint_schema);

// Where a stream starts, decided from its stored checkpoint and the slot.
struct StartPlan {
  Lsn start;              // START_REPLICATION position: the stored one, or the slot's.
  SlotIdentity identity;  // What the slot must still be on every reconnect.
  bool bind = false;      // Record the slot (BindSlot at `start`) before streaming.
  // Every stored consumer has acked at least this far: events at or below it are
  // never handed to the sink (EventId{} = deliver everything).
  EventId deliver_after;
  absl::flat_hash_map<std::string, EventId> consumers;  // Stored checkpoints.
  // Detached consumers' checkpoints (not in `consumers`: they hold nothing).
  absl::flat_hash_map<std::string, EventId> detached;
  std::vector<std::string> warnings;                    // For the log.
};

struct SlotCheck {
  std::string stream;
  std::string slot_name;  // As configured.
  std::string checkpoint_schema;
  uint64_t system_identifier = 0;   // Of the server the slot is read from.
  std::optional<SlotState> slot;    // nullopt: no such slot.
};

// Decides the start of a stream (pure). Errors: DataLoss for every case in the
// table above, FailedPrecondition when the stream is bound to a different slot
// name than configured, NotFound when there is no slot and nothing was ever
// stored (create it, or let walfeed create it).
absl::StatusOr<StartPlan> PlanStart(const SlotCheck& check, const StreamCheckpoint& stored);

// Before a reconnect: OK if `check.slot` is still the slot with `identity` and is
// not ahead of `durable` (the position walfeed stored and confirmed); the errors
// of PlanStart otherwise.
absl::Status CheckResume(const SlotCheck& check, const SlotIdentity& identity, Lsn durable);

// Turns START_REPLICATION's refusal into the definite error above when it says
// the slot is gone (42704) or invalidated (55000); other errors pass through.
absl::Status ExplainStartFailure(const absl::Status& status, const SlotCheck& check,
                                 Lsn durable);

// What GetStatus shows about a stream's slot: the slot as pg_replication_slots
// reports it and the server's current WAL position.
struct SlotReport {
  std::optional<SlotState> slot;  // nullopt: no such slot.
  Lsn server_wal_lsn;             // pg_current_wal_lsn() (on a standby: last replayed).
};

}  // namespace walfeed::replication

#endif  // WALFEED_REPLICATION_START_PLAN_H_
