// StreamRuntime: one configured stream inside walfeed-server.
//
//   pipeline thread: PrepareStream ─► AckTracker + StreamReader.Run (the reader
//                    thread; reconnects by itself, returns only on stop or a
//                    definite error)
//        │ OnEvent (StreamSink): converted to the API's ChangeEvent once
//        ▼
//   buffer: events in id order, bounded by bytes, shared by every session; each
//           session holds a cursor (the id it has passed), never a copy
//        │ NextFrame (called by the Subscribe reactor, never blocks)
//        ▼
//   sessions: one active per consumer (a newer Subscribe supersedes the older),
//             a window of delivered-but-unacked events per session
//        ▲ Ack (blocking: waits for the durable write; called from a worker)
//
// Retention: an event stays in the buffer until every registered consumer has
// acked it, so a consumer that reconnects (or a new session taking over) always
// finds everything after its checkpoint. When the buffer is full the reader stops
// reading (StreamSink::HasRoom) and PostgreSQL holds the rest; status updates
// keep flowing. The cost: a registered consumer that stays away holds the buffer,
// and, once it is full, the stream (GetStatus shows who). Before any consumer
// exists nothing is dropped either, so the first consumer starts at the stream's
// position however late it subscribes.
//
// Locks: a session's listener lock, then the runtime's mutex; the runtime never
// calls a listener while holding its mutex.
#ifndef WALFEED_SERVER_STREAM_RUNTIME_H_
#define WALFEED_SERVER_STREAM_RUNTIME_H_

#include <cstdint>
#include <deque>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "google/protobuf/arena.h"
#include "replication/ack_tracker.h"
#include "replication/event_id.h"
#include "replication/pg/checkpoint_store.h"
#include "replication/stream_config.h"
#include "replication/pg/stream_reader.h"
#include "replication/pg/stream_start.h"
#include "server/filter.h"
#include "walfeed/v1/change_stream.pb.h"

namespace walfeed::server {

using replication::EventId;
using replication::Lsn;

// What a Subscribe asked for, with server defaults applied.
struct SessionOptions {
  EventFilter filter;
  uint32_t max_batch_events = 256;
  uint32_t max_batch_bytes = 1 << 20;
  uint32_t max_unacked_events = 10000;
  uint64_t max_unacked_bytes = 64ull << 20;
  absl::Duration progress_interval = absl::Seconds(5);
};

// The Subscribe reactor, as the runtime sees it. Both calls may come from any
// thread and must not block.
class SessionListener {
 public:
  virtual ~SessionListener() = default;
  // There may be something to send (events, a progress frame, or the end).
  virtual void Wake() = 0;
};

class Session {
 public:
  Session(std::string id, std::string consumer, SessionOptions options)
      : id_(std::move(id)), consumer_(std::move(consumer)), options_(std::move(options)) {}
  const std::string& id() const { return id_; }
  const std::string& consumer() const { return consumer_; }
  const SessionOptions& options() const { return options_; }

  // Wakes the listener, if it is still attached.
  void Wake() ABSL_LOCKS_EXCLUDED(listener_mu_);
  void Attach(SessionListener* listener) ABSL_LOCKS_EXCLUDED(listener_mu_);
  void Detach() ABSL_LOCKS_EXCLUDED(listener_mu_);

 private:
  friend class StreamRuntime;

  const std::string id_;
  const std::string consumer_;
  const SessionOptions options_;

  absl::Mutex listener_mu_;
  SessionListener* listener_ ABSL_GUARDED_BY(listener_mu_) = nullptr;

  // Guarded by the owning StreamRuntime's mutex (not expressible to the analysis).
  EventId cursor_;  // Every buffered event at or below it was passed (sent or filtered).
  std::deque<std::pair<EventId, size_t>> unacked_;  // Sent, not yet acked.
  uint64_t unacked_bytes_ = 0;
  bool waiting_ = false;  // Asked for a frame and got none: wake on news.
  bool started_sent_ = false;
  std::optional<absl::Status> end_;  // Set once: the session is over.
  absl::Time last_frame_ = absl::Now();
};

struct RuntimeOptions {
  replication::StreamConfig config;
  std::string checkpoint_schema = "walfeed";
  // Where the checkpoint tables live; "" = the stream's own database.
  std::string checkpoint_conninfo;
  size_t buffer_bytes = 64u << 20;
  absl::Duration max_feedback_interval = absl::Seconds(1);
  absl::Duration min_persist_interval = absl::Seconds(10);
  absl::Duration read_coalesce = absl::Milliseconds(1);  // ReaderOptions::read_coalesce.
  absl::Duration retry_base = absl::Milliseconds(200);
  absl::Duration retry_cap = absl::Seconds(30);
};

// What Subscribe's first frame says.
struct OpenedSession {
  std::shared_ptr<Session> session;
  EventId checkpoint;  // EventId{} when the consumer never acked.
  EventId start_after;
};

struct AckOutcome {
  EventId checkpoint;
  Lsn confirmed;  // Last flush position sent to PostgreSQL.
};

struct ConsumerSnapshot {
  std::string name;
  EventId checkpoint;
  std::string session_id;  // "" when no session is active.
  uint64_t unacked_events = 0;
};

struct RuntimeSnapshot {
  std::string name;
  std::string slot_name;
  walfeed::v1::StreamState state = walfeed::v1::STREAM_STATE_CONNECTING;
  std::string error;
  Lsn server_wal_end;  // Newest position heard from the walsender.
  Lsn confirmed;       // Last flush position sent.
  size_t buffered_events = 0;
  size_t buffered_bytes = 0;
  std::vector<ConsumerSnapshot> consumers;  // In name order.
};

class StreamRuntime : public replication::pg::StreamSink {
 public:
  // `on_state` is called (from the pipeline or reader thread, no lock held)
  // whenever the stream's state changes.
  StreamRuntime(RuntimeOptions options, std::function<void(walfeed::v1::StreamState)> on_state);
  ~StreamRuntime() override;
  StreamRuntime(const StreamRuntime&) = delete;
  StreamRuntime& operator=(const StreamRuntime&) = delete;

  const std::string& name() const { return options_.config.name; }
  const replication::StreamConfig& config() const { return options_.config; }

  void Start();
  // Ends every session with `why`, stops the reader (a clean CopyDone after a last
  // status update) and joins the threads.
  void Stop(const absl::Status& why) ABSL_LOCKS_EXCLUDED(mu_);

  // Subscribe. Takes over the consumer's active session (it ends ABORTED).
  // Errors: the stream's failure (DATA_LOSS ...), UNAVAILABLE while the stream has
  // never been prepared, OUT_OF_RANGE for a start_after below the checkpoint or
  // below the events the stream still holds (which would skip events).
  absl::StatusOr<OpenedSession> Open(const std::string& consumer,
                                     std::optional<EventId> start_after,
                                     SessionOptions options) ABSL_LOCKS_EXCLUDED(mu_);
  // The reactor is done with `session` (also after it was superseded).
  void Close(const std::shared_ptr<Session>& session) ABSL_LOCKS_EXCLUDED(mu_);

  // Sets `*frame` to the session's next SubscribeResponse, serialized: `started`
  // first, then an events batch, or a progress frame when one is due. False when
  // there is nothing to send now (the session is woken when there is); `*end` is
  // set when the session is over.
  bool NextFrame(Session& session, std::string* frame, std::optional<absl::Status>* end)
      ABSL_LOCKS_EXCLUDED(mu_);

  // Blocks until the ack is durable. NOT_FOUND unknown consumer, ABORTED
  // superseded or ended session, OUT_OF_RANGE never delivered to this consumer.
  absl::StatusOr<AckOutcome> Ack(const std::string& consumer, const std::string& session_id,
                                 EventId id) ABSL_LOCKS_EXCLUDED(mu_);

  // Forgets `consumer` (RemoveConsumer): ends its session with ABORTED, waits for
  // its acks still being written, deletes its durable checkpoint, and only then
  // stops holding the buffer and the slot for it (so a crash in between leaves
  // the consumer whole, never a checkpoint the slot has moved past). While it
  // runs, Subscribe as that consumer is ABORTED. Returns the checkpoint it had.
  // NOT_FOUND unknown (or already removed) consumer; ABORTED another removal of
  // it is running; UNAVAILABLE stream not prepared yet, stopping, or the delete
  // could not be stored (the consumer is kept; retry).
  absl::StatusOr<EventId> RemoveConsumer(const std::string& consumer) ABSL_LOCKS_EXCLUDED(mu_);

  RuntimeSnapshot Snapshot() const ABSL_LOCKS_EXCLUDED(mu_);

  // Wakes sessions whose progress frame is due; the server calls it periodically.
  void Tick() ABSL_LOCKS_EXCLUDED(mu_);

  // StreamSink (reader thread).
  bool HasRoom() override ABSL_LOCKS_EXCLUDED(mu_);
  void OnEvent(replication::ChangeEvent event) override ABSL_LOCKS_EXCLUDED(mu_);
  void OnCommit(const replication::TransactionCommitted& commit) override;
  void OnDrained() override ABSL_LOCKS_EXCLUDED(mu_);
  void OnConnected(Lsn start) override ABSL_LOCKS_EXCLUDED(mu_);
  void OnDisconnected(const absl::Status& why) override ABSL_LOCKS_EXCLUDED(mu_);

 private:
  // Held serialized: a parsed ChangeEvent costs about 6.5 times its wire size in
  // memory (measured 928 vs 143 bytes), which would make buffer_bytes a poor bound.
  // Sessions copy `serialized` into their frames as it is (events_frame.h) and
  // filter on `key`, so an event is never parsed back.
  struct Buffered {
    EventId id;
    size_t bytes = 0;        // What the event costs in the buffer.
    std::string serialized;  // walfeed.v1.ChangeEvent, wire format.
    FilterKey key;
  };
  struct Consumer {
    EventId checkpoint;                // Durable ack (or EventId{}).
    std::shared_ptr<Session> active;   // The session acks must come from.
    // RemoveConsumer is storing the removal: no session may start, but the
    // consumer still holds the buffer and the slot until the removal is durable.
    bool removing = false;
    // Acks between their checks and their durable write: a removal waits for
    // them, so that none can store the checkpoint again after the delete.
    int acks_in_flight = 0;
  };

  void Pipeline() ABSL_LOCKS_EXCLUDED(mu_);
  void SetState(walfeed::v1::StreamState state, std::string error) ABSL_LOCKS_EXCLUDED(mu_);
  // Ends the stream: every session and every later Open get `status`.
  void Fail(const absl::Status& status) ABSL_LOCKS_EXCLUDED(mu_);
  // Ends `session` with `status` (once) and returns it for waking.
  static std::shared_ptr<Session> EndLocked(const std::shared_ptr<Session>& session,
                                            absl::Status status);
  // Drops buffered events every registered consumer has acked.
  void TrimLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Sessions waiting for news, marked as no longer waiting.
  std::vector<std::shared_ptr<Session>> TakeWaitingLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  static void WakeAll(const std::vector<std::shared_ptr<Session>>& sessions);
  bool FillEventsLocked(Session& session, std::string* frame) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void FillProgressLocked(const Session& session, walfeed::v1::Progress* progress)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Waits up to `delay` for Stop(); true when stopping.
  bool WaitForStop(absl::Duration delay) ABSL_LOCKS_EXCLUDED(mu_);

  // Opens the checkpoint store (retrying transient errors) and prepares the
  // stream; false when it failed for good or the runtime is stopping.
  bool Prepare(replication::pg::PreparedStream* prepared) ABSL_LOCKS_EXCLUDED(mu_);

  const RuntimeOptions options_;
  const std::function<void(walfeed::v1::StreamState)> on_state_;
  std::thread pipeline_;
  // Reader thread (OnEvent): the first block of the arena each event is converted on.
  static constexpr size_t kConvertBlockBytes = 64 << 10;
  const std::unique_ptr<char[]> convert_block_{new char[kConvertBlockBytes]};
  // Pipeline-thread owned; the committer is shared with Ack callers once set.
  std::unique_ptr<replication::pg::PgCheckpointStore> store_;
  std::unique_ptr<replication::pg::CommittedConfirmedStore> confirmed_store_;

  mutable absl::Mutex mu_;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  std::optional<absl::Status> failed_ ABSL_GUARDED_BY(mu_);
  walfeed::v1::StreamState state_ ABSL_GUARDED_BY(mu_) = walfeed::v1::STREAM_STATE_CONNECTING;
  std::string error_ ABSL_GUARDED_BY(mu_);
  // Set once the stream was prepared; replaced never (the reader reconnects).
  std::shared_ptr<replication::AckTracker> tracker_ ABSL_GUARDED_BY(mu_);
  std::shared_ptr<replication::GroupCommitter> committer_ ABSL_GUARDED_BY(mu_);
  std::shared_ptr<replication::pg::StreamReader> reader_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_map<std::string, Consumer> consumers_ ABSL_GUARDED_BY(mu_);
  std::deque<Buffered> buffer_ ABSL_GUARDED_BY(mu_);
  size_t buffer_bytes_ ABSL_GUARDED_BY(mu_) = 0;
  EventId trimmed_ ABSL_GUARDED_BY(mu_);  // Newest id dropped from the buffer.
  EventId newest_ ABSL_GUARDED_BY(mu_);   // Newest id appended.
};

}  // namespace walfeed::server

#endif  // WALFEED_SERVER_STREAM_RUNTIME_H_
