// ConsumerRegistry: a stream's consumers, their sessions and the buffer they
// read, under one mutex.
//
//   reader thread:  Append ─► StreamBuffer ─► TakeWaiting (sessions to wake)
//   Subscribe:      Open (fencing: a newer session supersedes the consumer's
//                   active one) ─► NextFrame (SessionFramer) ─► Close
//   Ack:            BeginAck (fencing, "was it delivered?") ─► durable write by
//                   the caller ─► FinishAck (checkpoint, window, trim)
//   RemoveConsumer: BeginRemove ─► AwaitAcksLanded ─► durable delete by the
//                   caller ─► FinishRemove
//
// Retention: an event stays held until every consumer with a checkpoint, or
// with a session, has acked it, so a consumer that reconnects (or a session
// taking over) always finds everything after its checkpoint; a consumer that
// never acked holds nothing once its session ends. Before any consumer exists
// nothing is dropped, so the first one gets everything from the stream's
// position.
//
// Two tiers: the newest events in memory (StreamBuffer, ≤ buffer_bytes), and,
// with a spill, the older ones on disk (SpillLog, ≤ retention_bytes):
//
//   floor_ ──── spill (disk) ──── buffer_.trimmed() ──── memory ──── newest
//
// The reader thread moves the oldest events to disk when memory is full
// (SpillOverflow); a session whose cursor is below memory asks for a disk read
// (want_disk), which another thread performs outside the mutex and hands over
// (TakeDiskRequests / FinishDiskRead). When both tiers are full, HasRoom() is
// false and the reader stops reading (the laggard policy decides what then).
//
// Locks: mu_ is a leaf except for the AckTracker (registered consumers are added
// and removed in it under mu_) and the progress frame's read of the reader's
// position. Nothing here blocks on I/O or wakes a session under mu_: methods
// return the sessions to wake and the caller wakes them after unlocking.
#ifndef WALFEED_SERVER_CONSUMER_REGISTRY_H_
#define WALFEED_SERVER_CONSUMER_REGISTRY_H_

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "replication/ack_tracker.h"
#include "replication/event_id.h"
#include "replication/lsn.h"
#include "server/arrival_clock.h"
#include "server/session.h"
#include "server/session_framer.h"
#include "server/spill/spill_log.h"
#include "server/stream_buffer.h"

namespace walfeed::server {

using SessionList = std::vector<std::shared_ptr<Session>>;

struct OpenedSession {
  std::shared_ptr<Session> session;
  EventId checkpoint;   // EventId{} when the consumer never acked.
  EventId start_after;  // The session delivers events after this id.
  std::shared_ptr<Session> superseded;  // The consumer's previous session, ended.
};

struct ConsumerSnapshot {
  std::string name;
  EventId checkpoint;
  // Where the consumer stands: its checkpoint, or for one that never acked, where
  // its session started; its commit LSN may be 0/0 (the stream's start).
  EventId position;
  std::string session_id;  // "" when no session is active.
  uint64_t unacked_events = 0;
  uint64_t held_bytes = 0;  // Buffered only because this consumer has not acked them.
  bool detached = false;    // By the laggard policy; holds nothing.
  // Since the consumer became known to this process (counters for metrics).
  uint64_t delivered_events = 0;     // Sent in its sessions' frames (redeliveries count).
  uint64_t acked_events = 0;         // Of those, acknowledged.
  uint64_t sessions_started = 0;
  uint64_t sessions_superseded = 0;  // Ended by a newer Subscribe of the same consumer.
  // How long ago the oldest event it still needs arrived (ArrivalClock); zero
  // when it needs nothing the stream has read.
  absl::Duration lag;
};

// The buffer filled up (and the reader waits) because of `holder`, or stopped
// being full: what the caller logs, once each way.
struct HoldChange {
  bool started = false;  // False: it ended.
  std::string holder;
  uint64_t held_bytes = 0;
  absl::Duration lasted;  // When it ended.
};

struct RegistrySnapshot {
  size_t buffered_events = 0;  // In memory.
  size_t buffered_bytes = 0;
  size_t buffer_limit_bytes = 0;  // buffer_bytes.
  uint64_t spilled_bytes = 0;  // On disk.
  uint64_t retention_bytes = 0;  // The disk budget; 0 without a spill.
  size_t ephemeral_sessions = 0;
  uint64_t delivered_events = 0;  // To every session, ephemeral ones included.
  std::string held_by;  // While the buffer is full: the consumer it waits for.
  absl::Time held_since;
  // The consumer of the current hold episode, which goes on until the buffer
  // has had room for kHoldSettle: held_by, and through the settling time
  // after it (a slow consumer that refills the buffer every few seconds is
  // one episode, for the log and the metrics' alerts).
  std::string hold_episode_by;
  std::vector<ConsumerSnapshot> consumers;  // In name order.
};

class ConsumerRegistry {
 public:
  struct Options {
    std::string stream;     // For messages.
    std::string slot_name;  // For started frames.
    size_t buffer_bytes = 64u << 20;
    // Why a call cannot be served before Load() (the stream is still connecting).
    std::function<absl::Status()> not_ready;
    // The newest position heard from PostgreSQL, for progress frames.
    std::function<replication::Lsn()> server_wal_end;
    // Session ids; unique per process.
    std::function<std::string()> new_session_id;
    // The stream's spill (null: memory only) and how many bytes it may hold.
    spill::SpillLog* spill = nullptr;
    uint64_t retention_bytes = 0;
    // A session needs events from the spill: wake the thread that reads it. May
    // be called under mu_ (it must only signal).
    std::function<void()> want_disk;
    // A session went idle: its next progress frame is due at the given time;
    // ask for a DueForProgress call then. Called under mu_ (it must only signal).
    std::function<void(absl::Time)> progress_due;
  };

  explicit ConsumerRegistry(Options options);
  ConsumerRegistry(const ConsumerRegistry&) = delete;
  ConsumerRegistry& operator=(const ConsumerRegistry&) = delete;

  // The stream was prepared: the stored checkpoints (registered in `tracker`,
  // which must outlive the registry), the floor nothing at or below which is
  // delivered, and the detached consumers' checkpoints (they hold nothing).
  // Returns the floor the run must deliver after: `deliver_after`, or lower
  // when a consumer kept through Unload (an ack, a reset in flight) holds the
  // stream from further back than the checkpoints the caller read. What this
  // process did to a consumer since Unload (a removal, a re-attaching reset)
  // wins over those checkpoints, which may have been read before it was stored.
  EventId Load(replication::AckTracker* tracker,
               const absl::flat_hash_map<std::string, EventId>& checkpoints,
               EventId deliver_after,
               const absl::flat_hash_map<std::string, EventId>& detached = {})
      ABSL_LOCKS_EXCLUDED(mu_);
  bool loaded() const ABSL_LOCKS_EXCLUDED(mu_);

  // Ends every active session with `why`. After Stop, Open and BeginRemove are
  // UNAVAILABLE; after Fail, every call returns `why`.
  SessionList Stop(const absl::Status& why) ABSL_LOCKS_EXCLUDED(mu_);
  // The stream is re-read from the slot: ends every session with `why`, drops
  // every event and consumer; calls are not_ready() until the next Load().
  SessionList Unload(const absl::Status& why) ABSL_LOCKS_EXCLUDED(mu_);
  SessionList Fail(const absl::Status& why) ABSL_LOCKS_EXCLUDED(mu_);

  // Subscribe. OUT_OF_RANGE for a start_after below the consumer's checkpoint or
  // below what the buffer still holds (starting later would skip events);
  // ABORTED while the consumer is being removed or reset. An ephemeral session
  // (options.ephemeral) is no consumer: it starts at the newest event held (or
  // after start_after) and registers nothing.
  absl::StatusOr<OpenedSession> Open(const std::string& consumer,
                                     std::optional<EventId> start_after,
                                     SessionOptions options) ABSL_LOCKS_EXCLUDED(mu_);
  // The reactor is done with `session` (also after it was superseded). A
  // consumer that never acked is forgotten with its last session (it held the
  // buffer and the slot only while connected): true then, and the reader may
  // have room again.
  bool Close(const std::shared_ptr<Session>& session) ABSL_LOCKS_EXCLUDED(mu_);
  // The session's next frame (SessionFramer::Next). False when there is nothing
  // to send now (the session is woken when there is); `*end` is set when the
  // session is over.
  // `*wake_reader` (if given) is set when the reader waits for this session to
  // pass what it would spill, and it now has.
  bool NextFrame(const Session& session, absl::Time now, std::string* frame,
                 std::optional<absl::Status>* end, bool* wake_reader = nullptr)
      ABSL_LOCKS_EXCLUDED(mu_);
  // Waiting sessions whose progress frame is due.
  // `next`, if given: when the earliest idle session not yet due will be (unset
  // if none), so the caller can come back then: a tick taken for one session must
  // not lose another's later due time.
  SessionList DueForProgress(absl::Time now, std::optional<absl::Time>* next = nullptr)
      ABSL_LOCKS_EXCLUDED(mu_);

  // Ack, step 1: NOT_FOUND unknown consumer, ABORTED not from its active
  // session, OUT_OF_RANGE never delivered to that session. An id at or below the
  // checkpoint is a no-op: `noop` is set and nothing is counted. Otherwise the
  // ack counts as in flight (a removal waits for it) until FinishAck/AbandonAck.
  struct AckTicket {
    bool noop = false;
    EventId checkpoint;
  };
  absl::StatusOr<AckTicket> BeginAck(const std::string& consumer, const std::string& session_id,
                                     EventId id) ABSL_LOCKS_EXCLUDED(mu_);
  // Step 2, once the ack is durable (and tracked): the checkpoint moves, the
  // window shrinks, the buffer is trimmed. Returns the checkpoint and fills
  // `*wake` with the sessions to wake.
  EventId FinishAck(const std::string& consumer, EventId id, SessionList* wake)
      ABSL_LOCKS_EXCLUDED(mu_);
  // Step 2 when the durable write failed.
  void AbandonAck(const std::string& consumer) ABSL_LOCKS_EXCLUDED(mu_);

  // RemoveConsumer, step 1: marks the consumer as being removed (Subscribe as it
  // is ABORTED meanwhile) and ends its session, which it returns (may be null).
  // NOT_FOUND unknown, ABORTED already being removed.
  absl::StatusOr<std::shared_ptr<Session>> BeginRemove(const std::string& consumer)
      ABSL_LOCKS_EXCLUDED(mu_);
  // Step 2: waits until no ack of the consumer is between its checks and its
  // durable write (one stored after the delete would bring the checkpoint back),
  // and returns the checkpoint including what those acks stored.
  EventId AwaitAcksLanded(const std::string& consumer) ABSL_LOCKS_EXCLUDED(mu_);
  // Step 3, once the delete is durable: the consumer stops holding the buffer
  // and the tracker. Fills `*wake`.
  void FinishRemove(const std::string& consumer, SessionList* wake) ABSL_LOCKS_EXCLUDED(mu_);
  // Step 3 when the delete failed: the consumer is kept.
  void AbandonRemove(const std::string& consumer) ABSL_LOCKS_EXCLUDED(mu_);

  // ResetConsumer, step 1: resolves the target (the last buffered event at or
  // below `to`, or the newest buffered event when `to` is nullopt), marks the
  // consumer busy (Subscribe as it is ABORTED meanwhile) and ends its session.
  // NOT_FOUND unknown, ABORTED busy, FAILED_PRECONDITION below the checkpoint,
  // OUT_OF_RANGE beyond the newest event held.
  struct ResetTicket {
    EventId previous;  // The checkpoint before.
    EventId target;    // Where it moves (== previous: nothing to do).
    std::shared_ptr<Session> ended;
    bool detached = false;  // The reset re-attaches it (FinishReset tracks it again).
  };
  absl::StatusOr<ResetTicket> BeginReset(const std::string& consumer, std::optional<EventId> to)
      ABSL_LOCKS_EXCLUDED(mu_);
  // Step 2 (after AwaitAcksLanded and the durable write of `target`): the
  // checkpoint moves, the buffer is trimmed. Fills `*wake`.
  void FinishReset(const std::string& consumer, EventId target, SessionList* wake)
      ABSL_LOCKS_EXCLUDED(mu_);
  // Step 2 when the write failed.
  void AbandonReset(const std::string& consumer) ABSL_LOCKS_EXCLUDED(mu_);

  // Reader thread: while memory is full and the spill has budget, moves the
  // oldest events to disk (the write happens outside the mutex), but only those
  // the leading session has passed: spilling what every connected session still
  // has to read would only send them all to disk, so then the reader waits for
  // the leader instead (NextFrame's wake_reader says when). Returns the spill's
  // write error (the events stay in memory and the reader waits).
  absl::Status SpillOverflow() ABSL_LOCKS_EXCLUDED(mu_);

  // The disk tier's reads, for the thread that performs them. Each request is
  // a session whose next events are in the spill: read after `after`, about
  // `max_bytes`, and hand the result to FinishDiskRead.
  struct DiskRequest {
    std::shared_ptr<Session> session;
    EventId after;       // The session's cursor when asked.
    EventId read_after;  // Where to read: the cursor, or floor_ if higher.
    size_t max_bytes = 0;
  };
  std::vector<DiskRequest> TakeDiskRequests() ABSL_LOCKS_EXCLUDED(mu_);
  // Stages what was read for the session (if it still waits for it) and fills
  // `*wake`. DataLoss when the spill lost events the session needs (a damaged
  // or cleared segment): the stream must be re-read from the slot.
  absl::Status FinishDiskRead(const DiskRequest& request,
                              absl::StatusOr<std::vector<BufferedEvent>> read, SessionList* wake)
      ABSL_LOCKS_EXCLUDED(mu_);

  // The laggard policy's detach, in the removal's steps. LaggardToDetach: while
  // both tiers are full, the consumer holding the oldest events (nullopt when
  // none can be detached). It is spared while an ack of it is being stored,
  // and while its session has been sent everything the stream holds and it
  // subscribed or had an ack stored within kCaughtUpGrace of `now`: one event
  // larger than the buffer fills it without anyone lagging, and the consumer
  // that acks it last must not lose its place for it. BeginDetach ends its
  // session with the detach error and marks it busy; returns whether the mark
  // must be stored (false for one that never acked: it is simply forgotten
  // when its session closes). After AwaitAcksLanded and the durable mark,
  // FinishDetach: it holds nothing, and Subscribe refuses it until a reset.
  std::optional<std::string> LaggardToDetach(absl::Time now) ABSL_LOCKS_EXCLUDED(mu_);
  static constexpr absl::Duration kCaughtUpGrace = absl::Seconds(10);
  absl::StatusOr<bool> BeginDetach(const std::string& consumer, SessionList* ended)
      ABSL_LOCKS_EXCLUDED(mu_);
  void FinishDetach(const std::string& consumer, SessionList* wake) ABSL_LOCKS_EXCLUDED(mu_);
  void AbandonDetach(const std::string& consumer) ABSL_LOCKS_EXCLUDED(mu_);

  // Reader side (never blocks). When the buffer becomes full, `*change` says so
  // and names the consumer that holds the stream; when it has had room for
  // kHoldSettle since (a slow consumer refills it at once), that it ended.
  bool HasRoom(std::optional<HoldChange>* change = nullptr) ABSL_LOCKS_EXCLUDED(mu_);
  // Whether memory or the spill takes more events now, without HasRoom's
  // bookkeeping (for a backfill deciding whether to read its next chunk).
  bool TakesMore() const ABSL_LOCKS_EXCLUDED(mu_);
  absl::Status Append(BufferedEvent event) ABSL_LOCKS_EXCLUDED(mu_);
  // Sessions waiting for news, marked as no longer waiting.
  SessionList TakeWaiting() ABSL_LOCKS_EXCLUDED(mu_);

  RegistrySnapshot Snapshot() const ABSL_LOCKS_EXCLUDED(mu_);

 private:
  struct Consumer {
    EventId checkpoint;                // Durable ack (or EventId{}).
    std::shared_ptr<Session> active;   // The session acks must come from.
    // RemoveConsumer is storing the removal: no session may start, but the
    // consumer still holds the buffer and the slot until the removal is durable.
    bool removing = false;
    // ResetConsumer is storing a new checkpoint: no session may start.
    bool resetting = false;
    // The laggard policy is storing its detach: no session may start.
    bool detaching = false;
    // Detached: holds nothing (not in the tracker, not in the floor) and may not
    // subscribe until a reset moves its checkpoint to what is still held.
    bool detached = false;
    // A reset is re-attaching it: its checkpoint before (restored if the reset's
    // write fails). It holds the stream from the target from BeginReset on.
    std::optional<EventId> reattached_from;
    // Where its current session started (the position of a consumer that never
    // acked, for status).
    EventId session_start;
    // Acks between their checks and their durable write.
    int acks_in_flight = 0;
    // When it last subscribed or had an ack stored (LaggardToDetach).
    absl::Time progressed_at = absl::InfinitePast();
    // Counters for ConsumerSnapshot.
    uint64_t delivered = 0;
    uint64_t acked = 0;
    uint64_t sessions = 0;
    uint64_t superseded = 0;
  };
  // What a consumer still needs: everything after its checkpoint, or, before
  // its first ack, after where its session started. A detached one needs
  // nothing (callers skip it).
  static EventId NeedsAfter(const Consumer& c) {
    return c.checkpoint != EventId{} ? c.checkpoint : c.session_start;
  }
  // The consumer with the lowest NeedsAfter among those that hold the stream.
  const std::string* LowestHolderLocked() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  struct SessionEntry {
    std::shared_ptr<Session> session;
    SessionFramer framer;
    bool waiting = false;              // Asked for a frame and got none: wake on news.
    std::optional<absl::Status> end;   // Set once: the session is over.
    // Events read from the spill for it, after its cursor.
    StreamBuffer staged;
    bool disk_wanted = false;   // Needs a disk read (TakeDiskRequests takes it).
    bool disk_reading = false;  // A read is under way.
  };

  // Ends `session` with `status` (once); returns it for waking.
  std::shared_ptr<Session> EndLocked(const std::shared_ptr<Session>& session,
                                     absl::Status status) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  SessionList EndAllLocked(const absl::Status& why) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  SessionList TakeWaitingLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The consumer a removal or reset acts on: the stream's failure, UNAVAILABLE
  // (stopping, not loaded), NOT_FOUND, or ABORTED while another one runs.
  absl::StatusOr<Consumer*> AdminTargetLocked(const std::string& consumer)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Forgets `consumer` if it never acked and has no session, nothing in flight
  // and no removal or reset running; true if it did.
  bool ForgetIfIdleLocked(const std::string& consumer) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Registers a new session starting after `start`.
  std::shared_ptr<Session> AddSessionLocked(const std::string& consumer, SessionOptions options,
                                            EventId start) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The error a detached consumer's Subscribe gets: its checkpoint, what the
  // stream still holds, and the command that re-attaches it.
  absl::Status DetachedError(const std::string& consumer, const Consumer& state) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Why `consumer` cannot start a session now (being removed or reset), or OK.
  absl::Status BusyLocked(const std::string& consumer) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Bytes of the buffered events after `from` up to and including `through`.
  uint64_t BytesBetweenLocked(EventId from, std::optional<EventId> through) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Drops held events every registered consumer has acked.
  void TrimLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // What a session's framer reads next: memory, or, when its cursor is below
  // memory, the events staged from disk (asking for a read when none are).
  const StreamBuffer& SourceForLocked(SessionEntry& entry) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Whether both tiers are full (the reader must wait).
  bool FullLocked() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const Options options_;

  mutable absl::Mutex mu_;
  bool loaded_ ABSL_GUARDED_BY(mu_) = false;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  std::optional<absl::Status> failed_ ABSL_GUARDED_BY(mu_);
  replication::AckTracker* tracker_ ABSL_GUARDED_BY(mu_) = nullptr;
  StreamBuffer buffer_ ABSL_GUARDED_BY(mu_);  // The memory tier.
  ArrivalClock arrivals_ ABSL_GUARDED_BY(mu_);  // For consumers' lag in seconds.
  uint64_t delivered_ ABSL_GUARDED_BY(mu_) = 0;  // Events sent to any session.
  // The newest event no longer held anywhere (or the stream's start).
  EventId floor_ ABSL_GUARDED_BY(mu_);
  // The reader waits until some session passes this id (SpillOverflow).
  std::optional<EventId> reader_awaits_ ABSL_GUARDED_BY(mu_);
  const StreamBuffer empty_;  // What a session waiting for a disk read reads.
  absl::flat_hash_map<std::string, Consumer> consumers_ ABSL_GUARDED_BY(mu_);
  // Between Unload and Load: consumers whose removal, or re-attaching reset,
  // was stored meanwhile. The checkpoints Load is given may predate the write.
  absl::flat_hash_set<std::string> removed_unloaded_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_set<std::string> reattached_unloaded_ ABSL_GUARDED_BY(mu_);
  // Every session not yet closed, by identity (ended ones too, until Close).
  absl::flat_hash_map<const Session*, SessionEntry> sessions_ ABSL_GUARDED_BY(mu_);
  // The current episode of a full buffer: who holds it, since when, and since
  // when it has had room again (the episode ends kHoldSettle after that).
  struct Hold {
    std::string holder;
    absl::Time since;
    std::optional<absl::Time> room_since;
  };
  static constexpr absl::Duration kHoldSettle = absl::Seconds(5);
  // HasRoom's answer and bookkeeping, under mu_.
  bool RoomLocked(std::optional<HoldChange>* change) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  std::optional<Hold> hold_ ABSL_GUARDED_BY(mu_);
  // HasRoom's answer without mu_, for the reader's check after every frame:
  // the buffer had room and no hold was open when last seen under mu_. Only
  // Append (the one way bytes grow) and HasRoom (the one place a hold opens)
  // can make it false, and both store it, so it is never true when the answer
  // is false. It may be false while there is room (acks, the spill or an
  // unload freed some since): HasRoom then takes mu_ and stores it afresh.
  std::atomic<bool> room_unheld_{true};
};

}  // namespace walfeed::server

#endif  // WALFEED_SERVER_CONSUMER_REGISTRY_H_
