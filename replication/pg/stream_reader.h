// StreamReader: the per-stream replication loop, one thread, the only owner of its
// replication connection.
//
//   poll(socket, wake fd; deadline = next status update, or the read_coalesce
//     │ readable       window after a read)      │ deadline / reply requested
//     ▼                                           ▼
//   read the socket until empty, handing   AckTracker::Confirmable()
//   over every CopyData frame (while the      → persist it (ConfirmedLsnStore)
//   sink has room), then sink->OnDrained()
//     │ copy_data::Decode                       → 'r' status update, flush = durable
//     ├─ 'k' keepalive ─► AckTracker::OnKeepalive
//     └─ 'w' XLogData ─► pgoutput::Decode ─► TransactionAssembler
//                          ─► AckTracker (Begin/Event/Commit) ─► StreamSink
//
// Why it is shaped like this:
// * Draining every buffered frame before polling again halves the walsender's CPU
//   per event compared with waking once per message (measured: 14 µs vs 6-7 µs).
// * Backpressure never kills the connection: when the sink is full the loop stops
//   asking for POLLIN, so TCP fills and the walsender blocks, but status updates
//   keep going out on their deadline, which is all wal_sender_timeout needs.
// * The flush position sent is what AckTracker allows AND what was durably stored
//   first: after a crash walfeed restarts from its stored position, which must
//   never be behind what PostgreSQL was told.
// * The cadence is min(max_feedback_interval, wal_sender_timeout / 2), read from
//   the server, and a keepalive that requests a reply is answered at once.
// * After a transient error the loop reconnects with capped, jittered backoff from
//   the durable confirmed position. PostgreSQL then re-sends transactions this
//   process already delivered; they are recognised by commit LSN and index (ids are
//   deterministic) and dropped, so the sink sees every event exactly once per
//   process. Definite errors end Run() with the error.
// * A shutting-down walsender (pg_ctl stop -m fast) waits until the client has
//   confirmed everything it sent, asking again the moment each reply arrives
//   (PG 15 WalSndDone). walfeed confirms only what is acked and stored, and the
//   store is that very server, so the wait would never end. A live walsender
//   requests a reply only when wal_sender_timeout / 2 passed without hearing from
//   us (never when the timeout is 0), so it cannot ask again soon after we
//   answered its request; the shutdown wait asks again at once. A chain of
//   kShutdownQuickRequests requests, each arriving less than
//   wal_sender_timeout / 4 after our reply to the previous one, with no data
//   between them, ends the session as transient, letting the shutdown finish;
//   the reader resumes from its stored position afterwards. Counting requests rather than a rate keeps this
//   independent of how long each reply takes (storing the position may itself
//   wait on the stopping server). Known gap: while the sink is full the socket is
//   not read, so the requests go unseen and the shutdown waits until the buffer
//   has room again (or walfeed stops).
#ifndef WALFEED_REPLICATION_PG_STREAM_READER_H_
#define WALFEED_REPLICATION_PG_STREAM_READER_H_

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "replication/ack_tracker.h"
#include "replication/pg/checkpoint_store.h"
#include "replication/pg/replication_connection.h"
#include "replication/transaction_assembler.h"

namespace walfeed::replication::pg {

// Receives the stream's events on the reader thread. Must never block.
class StreamSink {
 public:
  virtual ~StreamSink() = default;
  // False when the sink cannot take more now; the reader stops reading the socket
  // (status updates continue) until StreamReader::Wake().
  virtual bool HasRoom() = 0;
  virtual void OnEvent(ChangeEvent event) = 0;
  // Every transaction's Commit, even one whose events were all at or below
  // ReaderOptions::deliver_after (and so never passed to OnEvent).
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
class ConfirmedLsnStore {
 public:
  virtual ~ConfirmedLsnStore() = default;
  virtual absl::Status PersistConfirmed(Lsn lsn) = 0;
};

struct ReaderOptions {
  std::string stream_name;  // For logs.
  std::string conninfo;
  std::string slot_name;
  std::vector<std::string> publication_names;
  // Changes to tables in this schema (the checkpoint store's) are never delivered.
  std::string excluded_schema = "walfeed";
  absl::Duration max_feedback_interval = absl::Seconds(1);
  // Storing the confirmed position writes WAL, and on a quiet publication that WAL
  // is itself the next idle advance: storing on every status update would make an
  // idle stream write forever, once a second. Advances are therefore stored (and
  // then confirmed) at most this often.
  absl::Duration min_persist_interval = absl::Seconds(10);
  // The slot walfeed bound (PlanStart's identity). When set, every session first
  // checks that the slot still exists, is not invalidated, is the same slot and is
  // not ahead of the stored position (slot_guard.h), and a failed check ends Run()
  // with DataLoss instead of streaming from a slot that skipped changes.
  std::optional<SlotIdentity> expected_slot;
  // Every stored consumer has acked at least this far: events at or below it are
  // fed to the AckTracker but never handed to the sink (PostgreSQL re-sends them
  // after a restart from a confirmed commit LSN, or after its own slot regressed).
  EventId deliver_after;
  absl::Duration backoff_base = absl::Milliseconds(100);
  absl::Duration backoff_cap = absl::Seconds(30);
  uint64_t backoff_seed = 1;
  // After a read that emptied the socket, wait this long (or for Stop/Wake)
  // before reading it again, so that the next read finds more. A reader that
  // wakes for every message the walsender writes makes the walsender pay a
  // wake-up per message: on a backlog of single-row transactions, reading at
  // once gave about a quarter less throughput and a third more walsender CPU
  // per event than 1 ms (docs/performance.md). The cost is at most this much
  // added latency for changes that arrive during the window; the first change
  // after a quiet period is read at once. Zero reads as soon as anything arrives.
  absl::Duration read_coalesce = absl::Milliseconds(1);
};

class StreamReader {
 public:
  struct Stats {
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
  };

  // `tracker`, `sink` and `store` must outlive the reader.
  StreamReader(ReaderOptions options, AckTracker* tracker, StreamSink* sink,
               ConfirmedLsnStore* store);
  ~StreamReader();
  StreamReader(const StreamReader&) = delete;
  StreamReader& operator=(const StreamReader&) = delete;

  // Streams from `start` (a durably stored confirmed position, or 0/0 for the
  // slot's own) until Stop() (returns OK after closing the copy cleanly) or a
  // definite error (returned). Call from the reader thread only.
  absl::Status Run(Lsn start);

  // Thread-safe.
  void Stop();
  void Wake();  // The sink has room again.
  Stats stats() const;
  // Waits until `condition(stats())` holds; false after `timeout`.
  bool AwaitStats(const std::function<bool(const Stats&)>& condition,
                  absl::Duration timeout) const;

 private:
  struct OpenTransaction {
    Lsn commit_lsn;
    uint32_t delivered = 0;  // Events handed to the sink (and tracker).
  };

  absl::Status RunSession(Lsn start);
  absl::Status HandleFrame(absl::Span<const uint8_t> frame, bool* reply_now);
  absl::Status Dispatch(TransactionAssembler::Output output);
  absl::Status SendStatusUpdate(ReplicationConnection& conn);
  // Waits up to `timeout` for Stop()/Wake(); drains the wake fd.
  void WaitForWake(absl::Duration timeout);
  void DrainWakeFd();

  // Consecutive early reply requests that mean "the walsender is shutting down".
  static constexpr int kShutdownQuickRequests = 10;
  // Frames handled per turn of the loop at most (between status-update checks).
  static constexpr int kMaxDrainFrames = 4096;

  const ReaderOptions options_;
  AckTracker* const tracker_;
  StreamSink* const sink_;
  ConfirmedLsnStore* const store_;
  const int wake_fd_;  // eventfd: Stop() and Wake() write, the loop polls it.
  std::atomic<bool> stop_{false};

  // Reader-thread state.
  TransactionAssembler assembler_;
  Lsn durable_;              // Confirmed position known durable (sent as flush).
  absl::Time last_persist_ = absl::InfinitePast();  // When durable_ was last stored.
  Lsn last_committed_;       // Commit LSN of the newest transaction fully delivered.
  std::optional<OpenTransaction> open_;  // Begun and partly delivered.
  bool skipping_ = false;    // Inside a transaction re-sent after a reconnect.
  bool last_session_streamed_ = false;  // The last session received data.
  absl::Time last_status_sent_ = absl::InfinitePast();  // Our last status update.
  bool last_status_replied_ = false;  // It answered a reply request.
  // A reply request sooner than this after our last status update is not a
  // timeout ping (those come wal_sender_timeout / 2 after it; margin halves it).
  absl::Duration ping_floor_ = absl::InfiniteDuration();
  int quick_requests_ = 0;  // Length of the current chain of early reply requests.
  std::vector<TransactionAssembler::Output> outputs_;  // Reused per frame.

  mutable absl::Mutex stats_mu_;
  Stats stats_ ABSL_GUARDED_BY(stats_mu_);
};

}  // namespace walfeed::replication::pg

#endif  // WALFEED_REPLICATION_PG_STREAM_READER_H_
