// StreamSource: the database side of one stream, as the server sees it.
//
//   server (StreamSupervisor)                     replication/pg (wired in main)
//   Prepare() ─────────────────────────────────► open the checkpoint store, check
//     │                                           and provision the slot, plan
//     ▼ StartPlan: start, deliver_after, stored consumer checkpoints
//   Run(plan, tracker, sink) ──────────────────► the reader loop (one thread)
//     ◄── StreamSink: OnEvent / OnCommit / OnDrained / OnConnected ...
//   committer(): durable acks (GroupCommitter)
//   ReadSlot(): what GetStatus shows about the slot
//
// The server is written against these interfaces only, so it includes nothing
// from replication/pg, and its stream layer is tested without a database.
#ifndef WALFEED_REPLICATION_STREAM_SOURCE_H_
#define WALFEED_REPLICATION_STREAM_SOURCE_H_

#include <algorithm>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "replication/ack_tracker.h"
#include "replication/backfill_database.h"
#include "replication/group_committer.h"
#include "replication/lsn.h"
#include "replication/start_plan.h"
#include "replication/stream_config.h"
#include "replication/transaction_assembler.h"

namespace walfeed::replication {

// Receives the stream's events on the reader thread. Must never block.
class StreamSink {
 public:
  virtual ~StreamSink() = default;
  // False when the sink cannot take more now; the reader stops reading the socket
  // (status updates continue) until it is woken.
  virtual bool HasRoom() = 0;
  virtual void OnEvent(ChangeEvent event) = 0;
  // Every transaction's Commit, even one whose events were all at or below the
  // plan's deliver_after (and so never passed to OnEvent).
  virtual void OnCommit(const TransactionCommitted& commit) = 0;
  // Called once per turn of the reader's loop, after it handed over what it
  // read (possibly nothing), and when a session ends: a sink that wakes
  // consumers can do it here instead of once per event.
  virtual void OnDrained() {}
  // The connection is streaming from `start` / was lost with `why` (transient).
  virtual void OnConnected(Lsn start) { (void)start; }
  virtual void OnDisconnected(const absl::Status& why) { (void)why; }
};

// Makes the stream's confirmed position durable before it is sent to PostgreSQL.
// May block (it writes to a database); the reader calls it from a thread of its
// own (ConfirmedPersister), never from the replication loop.
class ConfirmedLsnStore {
 public:
  virtual ~ConfirmedLsnStore() = default;
  virtual absl::Status PersistConfirmed(Lsn lsn) = 0;
  // A round trip to the store's database without a write (CheckpointStore::Ping).
  virtual absl::Status Ping() { return absl::OkStatus(); }
};

// What the reader has counted; read by status and tests.
struct ReaderStats {
  uint64_t frames = 0;
  uint64_t events = 0;
  uint64_t transactions = 0;
  uint64_t keepalives = 0;
  uint64_t status_updates = 0;
  uint64_t reconnects = 0;
  uint64_t redelivered_dropped = 0;  // Events re-sent after a reconnect, dropped.
  uint64_t below_checkpoint = 0;     // Events at or below deliver_after, dropped.
  uint64_t non_transactional_messages = 0;
  Lsn confirmed_sent;   // Last flush position sent to PostgreSQL.
  Lsn server_wal_end;   // Largest keepalive walEnd / commit end seen.
  uint64_t wal_bytes = 0;  // pgoutput message bytes received (XLogData payloads).
  // The last XLogData received and the last status update sent (InfinitePast:
  // none yet): what an operator's "is it moving?" alert looks at.
  absl::Time last_data_at = absl::InfinitePast();
  absl::Time last_status_update_at = absl::InfinitePast();

  // Adds `earlier`'s counters (a previous reader's) to these; positions and
  // times stay this one's unless it has none yet.
  void AddEarlier(const ReaderStats& earlier) {
    for (auto [mine, theirs] :
         {std::pair{&frames, earlier.frames}, {&events, earlier.events},
          {&transactions, earlier.transactions}, {&keepalives, earlier.keepalives},
          {&status_updates, earlier.status_updates}, {&reconnects, earlier.reconnects},
          {&redelivered_dropped, earlier.redelivered_dropped},
          {&below_checkpoint, earlier.below_checkpoint},
          {&non_transactional_messages, earlier.non_transactional_messages},
          {&wal_bytes, earlier.wal_bytes}}) {
      *mine += theirs;
    }
    confirmed_sent = std::max(confirmed_sent, earlier.confirmed_sent);
    server_wal_end = std::max(server_wal_end, earlier.server_wal_end);
    last_data_at = std::max(last_data_at, earlier.last_data_at);
    last_status_update_at = std::max(last_status_update_at, earlier.last_status_update_at);
  }
};

// Everything a source needs to know about its stream.
struct SourceOptions {
  StreamConfig config;
  std::string checkpoint_schema = std::string(kDefaultCheckpointSchema);
  // Where the checkpoint tables live; "" = the stream's own database.
  std::string checkpoint_conninfo;
  absl::Duration max_feedback_interval = absl::Seconds(1);
  // Storing the confirmed position writes WAL, which a quiet publication decodes
  // into the next idle advance: advances are stored at most this often.
  absl::Duration min_persist_interval = absl::Seconds(10);
  // See ReaderOptions::read_coalesce (replication/pg/stream_reader.h); unset:
  // chosen by the connection's transport, and adapted over a Unix socket.
  std::optional<absl::Duration> read_coalesce;
  // This process, for leadership (StreamSource::TryLead): an id unique per
  // start, and the address clients reach it at ("" when unknown; asked when
  // it takes the lead, since the port may be bound after the source is made).
  std::string instance_id;
  std::function<std::string()> advertise_address;
};

// A table of the initial snapshot this Prepare() began (StreamConfig::
// initial_snapshot): its backfill reads under the slot's exported snapshot,
// so the stream must note the table's key changes from its first event on
// (BackfillWindows::OpenFromStart).
struct InitialSnapshotTable {
  std::string backfill_id;
  uint32_t relation_id = 0;
  std::vector<std::string> key_columns;
};

// The result of Prepare(): where to start, and what to tell the operator.
struct PreparedSource {
  StartPlan plan;
  // Non-empty only from the Prepare() that created the slot and holds its
  // exported snapshot.
  std::vector<InitialSnapshotTable> initial_snapshot;
  std::vector<std::string> notes;     // What was created (log at info).
  std::vector<std::string> warnings;  // Preflight and plan warnings (log at warn).
};

class StreamSource {
 public:
  virtual ~StreamSource() = default;

  // Opens the checkpoint store (once) and prepares the stream: fail-closed slot
  // checks, creating missing objects when allowed, binding the slot. Transient
  // errors (retry.h) are the caller's to retry.
  virtual absl::StatusOr<PreparedSource> Prepare() = 0;
  // The checkpoint store's group committer; set once Prepare() succeeded, shared
  // with Ack callers, lives as long as the source.
  virtual GroupCommitter* committer() = 0;

  // Streams from `plan` until Stop() (OK) or a definite error (returned);
  // reconnects by itself after transient ones. `tracker` and `sink` must outlive
  // the call. Returns at once if Stop() was called before.
  virtual absl::Status Run(const StartPlan& plan, AckTracker* tracker, StreamSink* sink) = 0;
  // Thread-safe.
  virtual void Stop() = 0;
  // Ends the current Run (it returns OK) without stopping the source: Prepare
  // and Run may be called again, to re-read the stream from its stored position.
  // Before Run, the next Run returns at once. Thread-safe.
  virtual void Interrupt() = 0;
  virtual void Wake() = 0;  // The sink has room again.
  // The current (or last) reader's figures.
  virtual ReaderStats stats() const = 0;
  // The same with counters summed over every reader this source ran, so they
  // only grow for the process's lifetime (metrics).
  virtual ReaderStats totals() const { return stats(); }

  // The slot as the database reports it now (blocking; for status).
  virtual absl::StatusOr<SlotReport> ReadSlot() = 0;

  // Active/standby: at most one process streams a stream. The supervisor
  // leads before it prepares, checks the lead while it streams, and resigns
  // when a check fails. A source without leadership always leads.
  // TryLead: one attempt; true when this process leads (now or already).
  virtual absl::StatusOr<bool> TryLead() { return true; }
  // OK while this process still leads; otherwise it no longer does, and the
  // error says why.
  virtual absl::Status CheckLead() { return absl::OkStatus(); }
  virtual void Resign() {}
  // Where clients reach the leading process ("" when unknown), as of the last
  // TryLead that did not lead.
  virtual std::string Leader() { return ""; }

  // A new handle on the database for backfills (each its own connections,
  // opened on first use); null when the source has none (backfills are then
  // refused).
  virtual std::unique_ptr<BackfillDatabase> NewBackfillDatabase() { return nullptr; }
};

using StreamSourceFactory = std::function<std::unique_ptr<StreamSource>(SourceOptions)>;

}  // namespace walfeed::replication

#endif  // WALFEED_REPLICATION_STREAM_SOURCE_H_
