// StreamRuntime: one configured stream inside walfeed-server, assembled from
// parts that each answer one question:
//
//   StreamSource (replication/stream_source.h; PostgreSQL's is wired in main)
//     │ supervised by StreamSupervisor: prepare, run, retry, state, health
//     │ StreamSink on the reader thread: OnEvent ─► EventEncoder (serialized once)
//     ▼
//   ConsumerRegistry: StreamBuffer (events in id order, ≤ buffer_bytes) +
//     consumers (checkpoint, fencing, removal) + sessions (SessionFramer:
//     window, batching, progress), under one mutex
//     ▲ Open / NextFrame / Close from the Subscribe reactor (never blocks)
//     ▲ Ack / RemoveConsumer from a worker (blocks on the durable write)
//
// What lives here is the order of the two protocols that cross parts:
//   Ack:    registry checks ─► AckTracker::CheckDelivered ─► GroupCommitter
//           (durable) ─► AckTracker::Ack ─► registry (checkpoint, window, trim)
//           ─► wake sessions and the reader
//   Remove: registry marks + ends the session ─► waits for its acks in flight
//           ─► durable delete ─► registry forgets it (buffer, tracker) ─► wake
//   Reset:  registry resolves the target + ends the session ─► waits for its
//           acks in flight ─► durable ack of the target ─► AckTracker ─►
//           registry (checkpoint, trim) ─► wake
// Durable before visible, in both: a crash in between never leaves a checkpoint
// the slot has moved past.
#ifndef WALFEED_SERVER_STREAM_RUNTIME_H_
#define WALFEED_SERVER_STREAM_RUNTIME_H_

#include <atomic>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "replication/ack_tracker.h"
#include "replication/event_id.h"
#include "replication/stream_source.h"
#include "replication/backfill_window.h"
#include "server/backfill/backfill_runner.h"
#include "server/consumer_registry.h"
#include "server/event_encoder.h"
#include "server/retention_options.h"
#include "server/retention_worker.h"
#include "server/spill/spill_log.h"
#include "server/session.h"
#include "server/slot_monitor.h"
#include "server/stream_supervisor.h"
#include "walfeed/v1/change_stream.pb.h"

namespace walfeed::server {

using replication::Lsn;

struct RuntimeOptions {
  replication::SourceOptions source;
  size_t buffer_bytes = 64u << 20;
  // How many bytes the spill (if any) may hold beyond memory, and what happens
  // when both are full.
  RetentionOptions retention;
  absl::Duration retry_base = absl::Milliseconds(200);
  absl::Duration retry_cap = absl::Seconds(30);
  // Active/standby: how often a standby tries to lead, a leader checks its lead.
  absl::Duration lead_poll = absl::Seconds(1);
  absl::Duration lead_check = absl::Milliseconds(500);
  // An idle session's next progress frame is due then: call Tick() by that time
  // (see ConsumerRegistry::Options::progress_due). Unset: Tick's caller's period.
  std::function<void(absl::Time)> progress_due;
  BackfillOptions backfill;
};

struct AckOutcome {
  EventId checkpoint;
  Lsn confirmed;  // Last flush position sent to PostgreSQL.
};

// The registry's view (buffer, consumers, holds) and the stream's state.
struct RuntimeSnapshot : RegistrySnapshot {
  std::string name;
  std::string slot_name;
  walfeed::v1::StreamState state = walfeed::v1::STREAM_STATE_CONNECTING;
  std::string error;
  bool leading = false;  // This process leads the stream (active/standby).
  std::string active;    // While standby: the active instance's address, if known.
  Lsn server_wal_end;  // Newest position heard from the walsender.
  Lsn confirmed;       // Last flush position sent.
  Lsn stream_start;    // Where the stream started streaming in this process.
  replication::ReaderStats reader;  // Counters over the process's lifetime.
  uint64_t connections = 0;         // Replication connections that started streaming.
};

// What GetStatus and the metrics both show, computed one way:
// The server's WAL position: the slot read's when there is one, else the
// newest the reader heard.
Lsn ServerLsnOf(const RuntimeSnapshot& snapshot, const SlotMonitor::View& view);
// WAL the slot keeps from being recycled: from its restart_lsn to `server`.
uint64_t RetainedWalBytes(const replication::SlotState& slot, Lsn server);
// How far `consumer` is behind `server`, in WAL bytes: from its checkpoint, or
// for one that never acked, from where it started (not 0).
uint64_t LagBytes(const RuntimeSnapshot& snapshot, const ConsumerSnapshot& consumer, Lsn server);

class StreamRuntime : public replication::StreamSink {
 public:
  // `on_state` is called (from the supervisor or reader thread, no lock held)
  // whenever the stream's state changes. `spill` (optional) holds what does not
  // fit in memory, up to options.retention_bytes.
  StreamRuntime(RuntimeOptions options, std::unique_ptr<replication::StreamSource> source,
                std::function<void(walfeed::v1::StreamState)> on_state,
                std::unique_ptr<spill::SpillLog> spill = nullptr);
  ~StreamRuntime() override;
  StreamRuntime(const StreamRuntime&) = delete;
  StreamRuntime& operator=(const StreamRuntime&) = delete;

  const std::string& name() const { return options_.source.config.name; }
  const replication::StreamConfig& config() const { return options_.source.config; }

  void Start();
  // Ends every session with `why` and tells the source to stop, without
  // waiting for it (shutdown answers clients before it waits on PostgreSQL).
  void BeginStop(const absl::Status& why);
  // BeginStop, then joins the source's and the retention worker's threads.
  void Stop(const absl::Status& why);

  // Subscribe (ConsumerRegistry::Open). Errors: the stream's failure (DATA_LOSS
  // ...), UNAVAILABLE while the stream has never been prepared or is stopping,
  // OUT_OF_RANGE for a start_after that would skip events, ABORTED while the
  // consumer is being removed.
  absl::StatusOr<OpenedSession> Open(const std::string& consumer,
                                     std::optional<EventId> start_after, SessionOptions options);
  void Close(const std::shared_ptr<Session>& session);
  bool NextFrame(const Session& session, std::string* frame, std::optional<absl::Status>* end);

  // Blocks until the ack is durable. NOT_FOUND unknown consumer, ABORTED
  // superseded or ended session, OUT_OF_RANGE never delivered to this consumer,
  // UNAVAILABLE the durable write failed (retry).
  absl::StatusOr<AckOutcome> Ack(const std::string& consumer, const std::string& session_id,
                                 EventId id);

  // Forgets `consumer` (RemoveConsumer), in the order described above. Returns
  // the checkpoint it had. NOT_FOUND unknown (or already removed) consumer;
  // ABORTED another removal of it is running; UNAVAILABLE stream not prepared
  // yet, stopping, or the delete could not be stored (the consumer is kept).
  absl::StatusOr<EventId> RemoveConsumer(const std::string& consumer);

  // Moves `consumer`'s checkpoint forward (ResetConsumer): to the last event at
  // or below `to`, or to the newest event held when `to` is nullopt. Stored
  // durably before it takes effect; the consumer's session ends with ABORTED.
  // Errors: ConsumerRegistry::BeginReset's, UNAVAILABLE when the write failed.
  struct ResetOutcome {
    EventId previous;
    EventId checkpoint;
  };
  absl::StatusOr<ResetOutcome> ResetConsumer(const std::string& consumer,
                                             std::optional<EventId> to);

  RuntimeSnapshot Snapshot() const;
  // The slot as PostgreSQL last reported it (SlotMonitor): WantSlot asks for a
  // fresh read without waiting; SlotView waits for one until `deadline`, then
  // answers with the last read and its age.
  void WantSlot() { slot_monitor_->Want(); }
  SlotMonitor::View SlotView(absl::Time asked, absl::Time deadline) {
    return slot_monitor_->Get(asked, deadline);
  }

  // Wakes sessions whose progress frame is due; the server calls it periodically.
  void Tick();

  // The stream's backfills; null when its source cannot backfill.
  BackfillRunner* backfills() const { return backfills_.get(); }

  // StreamSink (reader thread).
  bool HasRoom() override;
  void OnEvent(replication::ChangeEvent event) override;
  void OnCommit(const replication::TransactionCommitted& commit) override;
  void OnDrained() override;
  void OnConnected(Lsn start) override;
  void OnDisconnected(const absl::Status& why) override;

 private:
  static void WakeAll(const SessionList& sessions);
  // What was held can no longer be served (a damaged spill): every session
  // ends UNAVAILABLE and the stream is read again from its stored position.
  void RestartFromSlot(const absl::Status& why);
  // The laggard policy's detach of `consumer`, in the removal's order: the
  // registry marks it and ends its session, its acks in flight land, the mark
  // is stored, then it stops holding the stream. Blocks on the store.
  void DetachLaggard(const std::string& consumer);
  // What is full when a laggard is detached, for its log line.
  std::string FullBudget() const;
  // Reader thread: a chunk's high watermark committed: its READ events go to
  // the buffer for its consumer only, then the runner hears of it.
  void DeliverChunk(replication::CompletedChunk& chunk);

  const RuntimeOptions options_;
  const std::unique_ptr<replication::StreamSource> source_;
  const std::unique_ptr<spill::SpillLog> spill_;
  std::atomic<bool> spill_failing_{false};  // The last spill write failed (logged once).
  EventEncoder encoder_;  // Reader thread only.
  // The forms (EventForm: compact, typed values) sessions have asked for: row
  // events are converted to each of them. Never reset (such a session may come
  // back after a reconnect).
  std::atomic<FormMask> forms_wanted_{0};
  // Set once the stream is prepared, before the registry is loaded (so any call
  // the registry lets through sees it); owned by the supervisor.
  std::atomic<replication::AckTracker*> tracker_{nullptr};
  std::atomic<uint64_t> stream_start_{0};  // The plan's start LSN, for status.
  std::atomic<uint64_t> connections_{0};   // OnConnected calls.
  ConsumerRegistry registry_;
  replication::BackfillWindows windows_;
  // Non-zero while the stream is prepared here (see BackfillRunner::Hooks).
  std::atomic<uint64_t> generation_{0};
  std::atomic<uint64_t> generations_{0};
  std::unique_ptr<BackfillRunner> backfills_;
  std::unique_ptr<RetentionWorker> retention_;
  StreamSupervisor supervisor_;
  std::unique_ptr<SlotMonitor> slot_monitor_;  // Reads source_; goes first.
};

}  // namespace walfeed::server

#endif  // WALFEED_SERVER_STREAM_RUNTIME_H_
