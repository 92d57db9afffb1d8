// Durable checkpoints: each consumer's cumulative ack and each stream's confirmed
// LSN, kept outside the replication slot.
//
// Why: the slot's confirmed_flush_lsn lives in shared memory and reaches disk only
// at checkpoints, so after a crash (and, before PostgreSQL 17, even after a clean
// shutdown) it can move backwards. walfeed therefore stores its own position
// first, confirms it to the slot second, restarts START_REPLICATION from the
// stored position and drops redelivered events at or below each consumer's
// stored ack.
//
//   Ack RPCs ──► GroupCommitter ──(one Commit per stream per round)──► CheckpointStore
//   reader   ──► SetConfirmed ──┘                                       (PgCheckpointStore:
//                                                                        tables in the
//                                                                        source database)
//
// Three pieces:
// * CheckpointStore, the interface the server is written against (tests use a
//   fake). Stored values never move backwards: a Commit of a lower ack or a lower
//   confirmed LSN leaves the stored one in place, so a duplicate, reordered or
//   retried write is harmless.
// * PgCheckpointStore, the implementation in PostgreSQL: by default in the source
//   database (any walfeed instance can take over a stream), through its own
//   conninfo so it can live elsewhere (for instance when decoding from a read-only
//   standby).
// * GroupCommitter, which makes many concurrent acks cost one write: acks that
//   arrive while a write is in flight ride together in the next one.
//
// CONTRACT WITH THE STREAM READER (the store's own writes are not change events).
// The checkpoint tables are ordinary logged tables, so a FOR ALL TABLES publication
// publishes their rows and pgoutput sends them like any other change (PostgreSQL 15
// has no way to exclude a table from FOR ALL TABLES, and pgoutput's origin filter
// only exists from 16). The reader must drop every Insert/Update/Delete of a
// relation whose namespace (as sent in pgoutput's Relation message) equals
// PgCheckpointStore::schema(), byte for byte, and leave such relations out of
// Truncate, before event ids are assigned. In return the store guarantees that
// every write it makes is one short transaction of its own connection that touches
// only its tables, so after the filter a checkpoint transaction is empty: it takes
// no index and only moves the transaction boundary (an empty transaction is fully
// acked by definition). The schema name is configurable; kDefaultCheckpointSchema
// is "walfeed".
//
// Feedback-loop caveat for the reader: persisting the confirmed LSN writes WAL,
// which the slot decodes as one more (empty) transaction, which lets the
// confirmable position advance again. Persisting every advance therefore keeps an
// idle stream writing forever at the feedback cadence; persist when real events
// were acked, or when the gain is worth a write, not on every tick.
//
// SLOT IDENTITY (fail closed on a recreated slot). Each stream remembers the slot it
// is bound to: its name, the cluster's system identifier, the database oid and the
// output plugin (BindSlot). Because walfeed stores a confirmed LSN before it sends
// it to the slot, its own slot can never be ahead of the stored value; it can only
// be behind (server-side regression after a restart, which is harmless: walfeed
// restarts from the stored value). So, for a stream whose slot is bound, the
// reader treats
//   slot missing                                   → the slot was dropped;
//   slot name or identity != stored ones           → a different slot or cluster;
//   slot.confirmed_flush_lsn > stored confirmed_lsn → advanced or recreated by
//                                                    someone else (creating a slot
//                                                    writes WAL, so a new slot always
//                                                    starts past anything confirmed);
// as definite errors, never as "start from the slot". Recovering from one is an
// explicit operator action that ends in BindSlot with the new slot's position.
// BindSlot belongs right after walfeed creates the slot, before the first
// START_REPLICATION; an unbound stream whose slot already exists (a crash between
// the two, or a slot made by hand) is the same question and deserves the same
// explicit answer.
#ifndef WALFEED_REPLICATION_CHECKPOINT_STORE_H_
#define WALFEED_REPLICATION_CHECKPOINT_STORE_H_

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "replication/event_id.h"
#include "replication/lsn.h"

namespace walfeed::replication {

// The schema PgCheckpointStore uses unless configured otherwise. The stream reader
// drops changes to relations in the store's schema (see the contract above).
inline constexpr absl::string_view kDefaultCheckpointSchema = "walfeed";

// What, besides its name, identifies a replication slot. All three are facts
// about the source server that the caller reads there (the store may live on
// another server): IDENTIFY_SYSTEM's systemid or pg_control_system(), and
// pg_replication_slots.datoid / .plugin.
struct SlotIdentity {
  uint64_t system_identifier = 0;  // The cluster; changes when it is re-initialised.
  uint32_t database_oid = 0;       // The database the logical slot decodes.
  std::string plugin;              // The output plugin, "pgoutput".

  friend bool operator==(const SlotIdentity& a, const SlotIdentity& b) {
    return a.system_identifier == b.system_identifier && a.database_oid == b.database_oid &&
           a.plugin == b.plugin;
  }
  friend bool operator!=(const SlotIdentity& a, const SlotIdentity& b) { return !(a == b); }
};

struct StreamCheckpoint {
  // Highest LSN durably recorded as confirmed for the stream's slot; 0/0 if none.
  Lsn confirmed_lsn;
  // The slot the stream is bound to; empty until BindSlot.
  std::string slot_name;
  SlotIdentity slot_identity;  // Meaningful only when slot_name is set.
  // Each consumer's cumulative ack: everything up to and including the id was
  // processed.
  absl::flat_hash_map<std::string, EventId> consumers;
  // Consumers (also in `consumers`) detached by the laggard policy: they hold
  // nothing until an ack is stored for them again (an operator's reset).
  absl::flat_hash_set<std::string> detached;

  bool slot_bound() const { return !slot_name.empty(); }
};

// Durable per-stream checkpoints. Implementations decide their own thread safety;
// GroupCommitter serializes its calls.
class CheckpointStore {
 public:
  virtual ~CheckpointStore() = default;

  // The stream's checkpoint; an empty one (confirmed 0/0, no slot, no consumers)
  // for a stream never written.
  virtual absl::StatusOr<StreamCheckpoint> Load(absl::string_view stream) = 0;

  // Durably records consumer acks and, if given, the stream's confirmed LSN, in one
  // transaction: all of it or none of it. Cumulative: a stored ack or confirmed LSN
  // never moves backwards (a lower value is ignored, not an error). A consumer named
  // twice counts with its highest id. Returns only once the write is durable.
  virtual absl::Status Commit(absl::string_view stream,
                              const std::vector<std::pair<std::string, EventId>>& acks,
                              std::optional<Lsn> confirmed_lsn) = 0;

  // Forgets a consumer's checkpoint (it no longer holds the stream back). OK when
  // there was none, so a retried call is harmless.
  virtual absl::Status RemoveConsumer(absl::string_view stream, absl::string_view consumer) = 0;

  // Marks a consumer detached, keeping its checkpoint: Load reports it in
  // `detached` until a Commit stores a higher ack for it, which clears the mark.
  // OK when it has no checkpoint (nothing to mark), so a retry is harmless.
  virtual absl::Status DetachConsumer(absl::string_view stream, absl::string_view consumer) = 0;

  // Binds the stream to a slot: records its name and identity and REPLACES the
  // confirmed LSN with `confirmed_lsn` (the new slot's confirmed_flush_lsn, i.e. its
  // consistent point). This is the one write that may lower the confirmed LSN:
  // call it when walfeed created the slot, or when an operator accepted a
  // recreated one. Consumer checkpoints are kept.
  virtual absl::Status BindSlot(absl::string_view stream, absl::string_view slot_name,
                                const SlotIdentity& identity, Lsn confirmed_lsn) = 0;

  // One cheap round trip to the database (no write): how the replication
  // reader, while it cannot read its own connection, learns that PostgreSQL is
  // shutting down. Stores without a database answer OK.
  virtual absl::Status Ping() { return absl::OkStatus(); }

  // The streams other than `stream` bound to slot `slot_name` of the cluster
  // `system_identifier`, by name. Two streams must never read one slot: each
  // would confirm the other's events away. Stores that record no slots have none.
  virtual absl::StatusOr<std::vector<std::string>> OtherStreamsOnSlot(
      absl::string_view /*stream*/, absl::string_view /*slot_name*/,
      uint64_t /*system_identifier*/) {
    return std::vector<std::string>{};
  }
};

}  // namespace walfeed::replication

#endif  // WALFEED_REPLICATION_CHECKPOINT_STORE_H_
