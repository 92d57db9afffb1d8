// StreamReader: the per-stream replication loop, one thread, the only owner of its
// replication connection.
//
//   Wait(connection, wake fd; deadline = next status update, or the
//     │ readable           read_coalesce window after a read)
//     ▼                                   │ deadline / reply requested / stored
//   read until nothing is buffered,       ▼
//   handing over every CopyData frame   AckTracker::Confirmable()
//   (while the sink has room), then       → ConfirmedPersister (its own thread)
//   sink->OnDrained()                     → 'r' status update, flush = durable
//     │ copy_data::Decode
//     ├─ 'k' keepalive ─► AckTracker::OnKeepalive
//     └─ 'w' XLogData ─► pgoutput::Decode ─► TransactionAssembler ─► DeliveryGate
//                          ─► AckTracker (Begin/Event/Commit) ─► StreamSink
//
// The loop is written against ReplicationOpener/ReplicationConnection and a Clock
// (replication/), so its decisions are unit-tested on recorded frames in simulated
// time (tests/replication/pg/stream_reader_unit_test.cc); PgReplicationOpener is
// the real one.
//
// Why it is shaped like this:
// * Draining every buffered frame before polling again halves the walsender's CPU
//   per event compared with waking once per message (measured: 14 µs vs 6-7 µs).
// * Backpressure never kills the connection: when the sink is full the loop stops
//   asking for POLLIN, so TCP fills and the walsender blocks, but status updates
//   keep going out on their deadline, which is all wal_sender_timeout needs.
// * The flush position sent is what AckTracker allows AND what was durably stored
//   first: after a crash walfeed restarts from its stored position, which must
//   never be behind what PostgreSQL was told. Storing runs on the persister's
//   thread; the loop never waits on SQL. When a store completes the loop is woken
//   and confirms the new position at once.
// * The cadence is min(max_feedback_interval, wal_sender_timeout / 2), read from
//   the server, and a keepalive that requests a reply is answered at once.
// * After a transient error the loop reconnects with capped, jittered backoff from
//   the durable confirmed position. PostgreSQL then re-sends transactions this
//   process already delivered; the DeliveryGate recognises them by commit LSN and
//   index (ids are deterministic) and drops them, so the sink sees every event
//   exactly once per process. Definite errors end Run() with the error.
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
//   the reader resumes from its stored position afterwards. Counting requests
//   rather than a rate keeps this independent of how fast each reply goes out.
// * Silence is bounded. A walsender answers a status update that requests a
//   reply at once, even while it decodes a large transaction, so after a status
//   interval with nothing heard the next update asks for one; when nothing at all
//   arrives for wal_sender_timeout (the walsender's own limit for us) the
//   connection is presumed dead (a black-holed network, a frozen host) and the
//   session ends as transient, unless a check over a second connection, asked
//   for when a probe went unanswered for half a status interval (an idle
//   walsender answers at once: idle streams start no backends), found the
//   walsender still holding the slot: a
//   walsender busy writing a large transaction to disk answers nothing for a
//   while (pg/walsender_watch.h), and each confirmation counts as hearing from
//   it. Otherwise the session ends as transient: the stream reports CONNECTING with the reason and
//   reconnects. Not while the sink is full (the socket is not read then), and
//   not with wal_sender_timeout 0 (TCP keepalives, set by pg::Connect, bound it).
//   Known gap: while the sink is full the socket is
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
#include "replication/checkpoint_store.h"
#include "replication/clock.h"
#include "replication/confirmed_persister.h"
#include "replication/delivery_gate.h"
#include "replication/pg/pg_conn.h"
#include "replication/pg/read_window.h"
#include "replication/replication_connection.h"
#include "replication/stream_source.h"
#include "replication/transaction_assembler.h"

namespace walfeed::replication::pg {

class WalSenderHandoff;  // replication_connection.h

struct ReaderOptions {
  std::string stream_name;  // For logs.
  std::string conninfo;
  // The application_name of the session's walsenders (ReaderOptionsFor sets
  // the stream's: StreamWalsenderName); a new leader ends only those.
  std::string walsender_name = kDefaultApplicationName;
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
  // not ahead of the stored position (start_plan.h), and a failed check ends Run()
  // with DataLoss instead of streaming from a slot that skipped changes.
  std::optional<SlotIdentity> expected_slot;
  // Every stored consumer has acked at least this far: events at or below it are
  // fed to the AckTracker but never handed to the sink (PostgreSQL re-sends them
  // after a restart from a confirmed commit LSN, or after its own slot regressed).
  EventId deliver_after;
  absl::Duration backoff_base = absl::Milliseconds(100);
  absl::Duration backoff_cap = absl::Seconds(30);
  // 0: random per reader, so instances restarted together do not reconnect in
  // lockstep; tests may fix it.
  uint64_t backoff_seed = 0;
  // After a read that emptied the socket, or brought less than kSmallRead,
  // wait this long (or for Stop/Wake) before reading it again, so that the
  // next read finds more. Unset: kTcpReadWindow over TCP, kUnixReadWindow
  // adapted over a Unix-domain socket, either waited only while the stream is
  // busy (kBusyFramesPerSecond), and kTcpBacklogReadWindow while a backlog is
  // read over TCP; set: that, after every such read, over either. The cost is
  // at most this much added latency for changes that arrive during the
  // window; the first change after a quiet period is read at once. Zero
  // reads as soon as anything arrives.
  std::optional<absl::Duration> read_coalesce;
  // A replication connection the start-up kept open (PreparedStream::walsender):
  // the first session starts on it instead of connecting.
  std::shared_ptr<WalSenderHandoff> first_connection;
};

class StreamReader {
 public:
  using Stats = ReaderStats;

  // Streams from PostgreSQL (PgReplicationOpener over `options`) in real time.
  // `tracker`, `sink` and `store` must outlive the reader.
  StreamReader(ReaderOptions options, AckTracker* tracker, StreamSink* sink,
               ConfirmedLsnStore* store);
  // Streams through `opener` on `clock` (tests: recorded frames, simulated time).
  StreamReader(ReaderOptions options, std::unique_ptr<ReplicationOpener> opener,
               const Clock* clock, AckTracker* tracker, StreamSink* sink,
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
  void Wake();  // The sink has room again, or a store finished.
  Stats stats() const;
  // Waits until `condition(stats())` holds; false after `timeout`.
  bool AwaitStats(const std::function<bool(const Stats&)>& condition,
                  absl::Duration timeout) const;

 private:
  // Run's loop: sessions with backoff until a stop or a definite error.
  absl::Status RunSessions();
  absl::Status RunSession(Lsn start);
  absl::Status HandleFrame(absl::Span<const uint8_t> frame, bool* reply_now);
  absl::Status Dispatch(TransactionAssembler::Output output);
  // Asks the persister for the confirmable position when it is ahead of what was
  // stored and the last request is min_persist_interval old.
  void RequestPersist(absl::Time now);
  // `request_reply`: ask the walsender to answer at once (a liveness probe).
  absl::Status SendStatusUpdate(ReplicationConnection& conn, bool request_reply = false);
  // A failed store write or ping: logged; or, while the sink is `full` and it
  // says PostgreSQL is shutting down (57P01-57P03), the error that ends the
  // session.
  absl::Status CheckStore(bool full);
  // Waits up to `timeout` (real time) for Stop()/Wake(); drains the wake fd.
  void WaitForWake(absl::Duration timeout);
  void DrainWakeFd();

  // Consecutive early reply requests that mean "the walsender is shutting down".
  static constexpr int kShutdownQuickRequests = 10;
  // Frames handled per turn of the loop at most (between status-update checks).
  static constexpr int kMaxDrainFrames = 4096;
  // A read that brought less than this (libpq reads up to 8-16 kB at once)
  // ends the turn when there is a read window (read_coalesce).
  static constexpr size_t kSmallRead = 4096;
  // How long a stopping reader waits for its last store before the final update.
  static constexpr absl::Duration kFinalStoreWait = absl::Seconds(2);

  const ReaderOptions options_;
  const std::unique_ptr<ReplicationOpener> opener_;
  const Clock* const clock_;
  AckTracker* const tracker_;
  StreamSink* const sink_;
  const int wake_fd_;  // eventfd: Stop(), Wake() and the persister write, the loop waits on it.
  std::atomic<bool> stop_{false};

  // Reader-thread state.
  TransactionAssembler assembler_;
  DeliveryGate gate_;
  std::unique_ptr<ConfirmedPersister> persister_;  // Created by Run().
  ConfirmedLsnStore* const store_;
  Lsn durable_;              // Confirmed position known stored (sent as flush).
  absl::Time last_persist_ = absl::InfinitePast();  // When a store was last requested.
  bool last_session_streamed_ = false;  // The last session received data.
  absl::Time last_status_sent_ = absl::InfinitePast();  // Our last status update.
  absl::Time turn_started_ = absl::InfinitePast();  // When this read turn began.
  std::optional<ReadWindow> window_;  // This session's.
  // How long after its commit the walsender sent the last Begin of this turn
  // (PostgreSQL's clock on both sides); unset: the turn began none.
  std::optional<absl::Duration> turn_begin_lag_;
  bool last_status_replied_ = false;  // It answered a reply request.
  // A reply request sooner than this after our last status update is not a
  // timeout ping (those come wal_sender_timeout / 2 after it; margin halves it).
  absl::Duration ping_floor_ = absl::InfiniteDuration();
  int quick_requests_ = 0;  // Length of the current chain of early reply requests.
  std::vector<TransactionAssembler::Output> outputs_;  // Reused per frame.

  // What frames and outputs add to stats_, counted without the lock and
  // published (PublishCounts) before the sink sees an event or a commit and at
  // the end of each turn, so whoever the sink wakes reads counts that cover
  // what it holds. A lock per frame and per output cost 3-4 % of the server's
  // CPU on single-row transactions (six lock pairs per transaction; now two).
  struct PendingCounts {
    uint64_t frames = 0;
    uint64_t keepalives = 0;
    uint64_t events = 0;
    uint64_t transactions = 0;
    uint64_t wal_bytes = 0;
    Lsn server_wal_end;
    bool data = false;  // An XLogData arrived: last_data_at moves.
  };
  PendingCounts pending_;
  // Adds pending_ (and the gate's drop counts) to stats_ and clears it.
  void PublishCounts();
  bool skipped_message_logged_ = false;  // The first skipped logical message was logged.

  mutable absl::Mutex stats_mu_;
  Stats stats_ ABSL_GUARDED_BY(stats_mu_);
};

// The opener StreamReader uses for `options` against PostgreSQL.
std::unique_ptr<ReplicationOpener> MakePgOpener(const ReaderOptions& options);

}  // namespace walfeed::replication::pg

#endif  // WALFEED_REPLICATION_PG_STREAM_READER_H_
