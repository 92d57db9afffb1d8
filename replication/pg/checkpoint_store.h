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
#ifndef WALFEED_REPLICATION_PG_CHECKPOINT_STORE_H_
#define WALFEED_REPLICATION_PG_CHECKPOINT_STORE_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "replication/event_id.h"
#include "replication/lsn.h"
#include "replication/pg/pg_conn.h"

namespace walfeed::replication::pg {

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

  // Binds the stream to a slot: records its name and identity and REPLACES the
  // confirmed LSN with `confirmed_lsn` (the new slot's confirmed_flush_lsn, i.e. its
  // consistent point). This is the one write that may lower the confirmed LSN:
  // call it when walfeed created the slot, or when an operator accepted a
  // recreated one. Consumer checkpoints are kept.
  virtual absl::Status BindSlot(absl::string_view stream, absl::string_view slot_name,
                                const SlotIdentity& identity, Lsn confirmed_lsn) = 0;
};

// CheckpointStore in PostgreSQL. Tables, in `schema` (quoted, so the name is exact):
//   consumer_checkpoints(stream, consumer, commit_lsn pg_lsn, event_index, updated_at)
//   stream_checkpoints(stream, slot_name, slot_system_identifier, slot_database_oid,
//                      slot_plugin, confirmed_lsn pg_lsn, updated_at)
// LSNs are pg_lsn so they sort as numbers in SQL and read as X/Y. Open() creates
// them if missing; it only reads the catalog when they exist, so a role without
// CREATE privilege works against tables an administrator created (it then needs
// USAGE on the schema and SELECT, INSERT, UPDATE, DELETE on the tables).
//
// Durability: every write is a single statement (one implicit transaction) with
// synchronous_commit = on for the session, whatever the database default, so an OK
// means flushed (and, with synchronous replication configured, confirmed by the
// synchronous standbys).
//
// Reconnects: the store owns one SQL connection. A call that fails with a transient
// error (lost connection, server restarting) drops the connection, reconnects and
// tries once more; every operation is idempotent (cumulative acks, GREATEST on the
// confirmed LSN, set/delete by key), so a retry after an unknown outcome is safe.
//
// NOT thread-safe: the caller serializes all calls (GroupCommitter does).
class PgCheckpointStore : public CheckpointStore {
 public:
  struct Options {
    // libpq conninfo of the database holding the checkpoints: by default the
    // stream's source database.
    std::string conninfo;
    // 1-63 bytes, taken literally; never "pg_*" or a system schema.
    std::string schema = std::string(kDefaultCheckpointSchema);
  };

  // Connects and creates the schema and tables if missing. Concurrent openers (in
  // this or other processes) serialize on an advisory lock, and a duplicate-object
  // race with a foreign creator is retried. InvalidArgument for a bad schema name;
  // otherwise the connection's or server's status.
  static absl::StatusOr<std::unique_ptr<PgCheckpointStore>> Open(Options options);

  PgCheckpointStore(const PgCheckpointStore&) = delete;
  PgCheckpointStore& operator=(const PgCheckpointStore&) = delete;

  // The schema holding the tables, unquoted: the name the reader filters on.
  const std::string& schema() const { return options_.schema; }

  absl::StatusOr<StreamCheckpoint> Load(absl::string_view stream) override;
  absl::Status Commit(absl::string_view stream,
                      const std::vector<std::pair<std::string, EventId>>& acks,
                      std::optional<Lsn> confirmed_lsn) override;
  absl::Status RemoveConsumer(absl::string_view stream, absl::string_view consumer) override;
  absl::Status BindSlot(absl::string_view stream, absl::string_view slot_name,
                        const SlotIdentity& identity, Lsn confirmed_lsn) override;

  // Connections made so far (1 after Open); for tests and metrics.
  uint64_t connects() const { return connects_; }

 private:
  explicit PgCheckpointStore(Options options);

  absl::Status EnsureConnected();
  absl::Status CreateSchema();
  // Runs `statement` with `params`, reconnecting and retrying once after a
  // transient error.
  absl::StatusOr<PgResultPtr> Run(const std::string& statement,
                                  const std::vector<std::optional<std::string>>& params);

  const Options options_;
  // Statements with the quoted schema filled in.
  const std::string load_sql_;
  const std::string commit_sql_;
  const std::string remove_sql_;
  const std::string bind_sql_;
  PgConnPtr conn_;  // Null after a transient error until the next call reconnects.
  uint64_t connects_ = 0;
};

// Group commit in front of a CheckpointStore: many threads call AckDurably, which
// blocks until its ack is durable. One caller at a time is the writer (leader); acks
// that arrive while it writes are collected and the next waiting caller writes them
// all, with one Commit per stream. In a batch, a consumer's acks collapse to the
// highest; an ack at or below what this committer already made durable returns OK
// at once without a write. Every waiter gets the status of the Commit that covered
// its ack (a failed Commit fails exactly the callers in that batch for that stream;
// nothing is retried behind their backs).
//
// All calls to the store go through the committer (Load, RemoveConsumer and
// BindSlot take the writer's turn too), which is what makes a non-thread-safe
// store safe to share. What it remembers as durable assumes it is the only writer of
// its streams' checkpoints (a process taking a stream over starts a new committer
// and Loads). Thread-safe. Callers must not be blocked in it when it is destroyed.
class GroupCommitter {
 public:
  struct Stats {
    uint64_t commits = 0;               // Store Commit calls, successful or not.
    uint64_t failed_commits = 0;        // Of which failed.
    uint64_t acks_committed = 0;        // AckDurably calls made durable by a Commit.
    uint64_t acks_failed = 0;           // AckDurably calls that got a failed Commit's status.
    uint64_t acks_already_durable = 0;  // At or below the durable ack: no write.
  };

  // `store` must outlive the committer.
  explicit GroupCommitter(CheckpointStore* store);

  GroupCommitter(const GroupCommitter&) = delete;
  GroupCommitter& operator=(const GroupCommitter&) = delete;

  // Records `consumer`'s cumulative ack of `id` and returns once it is durable, with
  // the status of the write that covered it.
  absl::Status AckDurably(absl::string_view stream, absl::string_view consumer, EventId id)
      ABSL_LOCKS_EXCLUDED(mu_);

  // Records the stream's confirmed LSN (never lowered) and returns once it is
  // durable; rides along with acks queued for the next write, or is written alone.
  absl::Status SetConfirmed(absl::string_view stream, Lsn lsn) ABSL_LOCKS_EXCLUDED(mu_);

  // Pass-throughs serialized with the writes. Load also seeds what the committer
  // knows to be durable.
  absl::StatusOr<StreamCheckpoint> Load(absl::string_view stream) ABSL_LOCKS_EXCLUDED(mu_);
  absl::Status RemoveConsumer(absl::string_view stream, absl::string_view consumer)
      ABSL_LOCKS_EXCLUDED(mu_);
  absl::Status BindSlot(absl::string_view stream, absl::string_view slot_name,
                        const SlotIdentity& identity, Lsn confirmed_lsn) ABSL_LOCKS_EXCLUDED(mu_);

  Stats stats() const ABSL_LOCKS_EXCLUDED(mu_);

  // Blocks until at least `n` acks or confirmed LSNs are queued for the next write
  // (not counting one in flight). Lets tests build a batch without sleeping.
  void AwaitQueuedForTest(size_t n) const ABSL_LOCKS_EXCLUDED(mu_);

 private:
  struct PendingStream {
    absl::flat_hash_map<std::string, EventId> acks;  // Highest per consumer.
    std::optional<Lsn> confirmed;
  };
  // One round of writes. Waiters hold a reference, so they can read their result
  // after the writer has moved on to the next batch. Guarded by mu_ while it is
  // open_; then owned by the writer that took it until that writer sets `done`
  // under mu_, after which waiters read `results` under mu_.
  struct Batch {
    absl::flat_hash_map<std::string, PendingStream> streams;
    size_t queued = 0;  // Calls waiting on this batch.
    bool done = false;
    absl::flat_hash_map<std::string, absl::Status> results;  // Per stream, once done.
  };

  // Queues into the open batch, waits for it, leading the write if nobody else
  // does, and returns the stream's result. `is_ack` picks the counter.
  absl::Status Enqueue(absl::string_view stream, const std::function<void(PendingStream&)>& add,
                       bool is_ack) ABSL_LOCKS_EXCLUDED(mu_);
  // Drops from `batch` what a Commit that finished since it was queued already
  // made durable (a value enqueued before that Commit ended may be stale), so the
  // store is never sent a value below one this committer wrote.
  void PruneDurable(Batch& batch) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Writes `batch` (mu_ not held; the caller owns the writer's turn).
  void WriteBatch(Batch& batch);
  // Waits for and takes / gives back the writer's turn.
  void AcquireWriter() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void ReleaseWriter() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  CheckpointStore* const store_;

  mutable absl::Mutex mu_;
  // A thread is inside a store call. Only that thread touches the store.
  bool writing_ ABSL_GUARDED_BY(mu_) = false;
  // Collecting acks for the next write; replaced when a writer takes it.
  std::shared_ptr<Batch> open_ ABSL_GUARDED_BY(mu_);
  // Highest values this committer knows to be durable, per stream (and consumer).
  absl::flat_hash_map<std::string, absl::flat_hash_map<std::string, EventId>> durable_acks_
      ABSL_GUARDED_BY(mu_);
  absl::flat_hash_map<std::string, Lsn> durable_confirmed_ ABSL_GUARDED_BY(mu_);
  Stats stats_ ABSL_GUARDED_BY(mu_);
};

}  // namespace walfeed::replication::pg

#endif  // WALFEED_REPLICATION_PG_CHECKPOINT_STORE_H_
