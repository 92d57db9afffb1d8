// SessionFramer: what one session sends next, and what it has sent.
//
//   started (once) ─► events batches from the stream buffer after the cursor,
//                     filtered, ≤ max_batch_events / max_batch_bytes, while the
//                     window (delivered, not yet acked) is below max_unacked_*
//                 └─► a progress frame when nothing was sent for progress_interval
//
// The cursor is the id the session has passed: every buffered event at or below
// it was sent or filtered out. Acks shrink the window (Acked).
//
// Pure and not thread-safe: the ConsumerRegistry keeps one per session under its
// mutex; tests drive it with a StreamBuffer and explicit times.
#ifndef WALFEED_SERVER_SESSION_FRAMER_H_
#define WALFEED_SERVER_SESSION_FRAMER_H_

#include <cstddef>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_set.h"
#include "absl/time/time.h"
#include "replication/event_id.h"
#include "replication/lsn.h"
#include "server/session.h"
#include "server/stream_buffer.h"

namespace walfeed::server {

class SessionFramer {
 public:
  // What a frame says beyond the session's own state.
  struct Context {
    std::string session_id;
    EventId checkpoint;     // The consumer's durable checkpoint (EventId{}: none).
    std::string slot_name;  // For the started frame.
    // The newest position heard from PostgreSQL; read only for progress frames.
    std::function<replication::Lsn()> server_wal_end;
  };

  // `options` must outlive the framer. The session starts after `start`; `now` is
  // when it opened.
  // `consumer` decides which audience-bound events (FilterKey::audience) it gets.
  SessionFramer(const SessionOptions& options, EventId start, absl::Time now,
                std::string consumer = "")
      : options_(options),
        consumer_(std::move(consumer)),
        start_(start),
        cursor_(start),
        last_frame_(now) {}

  // Sets `*frame` to the next serialized SubscribeResponse: `started` first, then
  // an events batch, or a progress frame when one is due. False when there is
  // nothing to send now.
  bool Next(const StreamBuffer& buffer, const Context& context, absl::Time now,
            std::string* frame);

  // The consumer's ack of `id` is durable: events up to it leave the window.
  // Returns how many did.
  size_t Acked(EventId id);

  bool ProgressDue(absl::Time now) const { return now >= progress_due_at(); }
  // When the next progress frame is due if nothing else is sent before.
  absl::Time progress_due_at() const { return last_frame_ + options_.limits.progress_interval; }
  bool started() const { return started_sent_; }
  EventId cursor() const { return cursor_; }
  size_t unacked_events() const { return unacked_.size(); }
  uint64_t unacked_bytes() const { return unacked_bytes_; }
  uint64_t sent_events() const { return sent_events_; }  // In every frame so far.

 private:
  // An ephemeral session is never acked: gRPC's flow control paces it instead.
  bool WindowOpen() const {
    return options_.ephemeral || (unacked_.size() < options_.limits.max_unacked_events &&
                                  unacked_bytes_ < options_.limits.max_unacked_bytes);
  }
  bool ComposeEvents(const StreamBuffer& buffer, std::string* frame);
  // `event` in this session's form: held in the buffer, or converted into
  // `converted`. `*shape` is set when the form is compact and the session has
  // not had the event's RelationShape yet (it counts as sent from now on).
  const std::string* FormOf(const BufferedEvent& event,
                            std::vector<std::unique_ptr<std::string>>* converted,
                            const std::string** shape);

  // Compact form: the RelationShape refs this session was sent.
  absl::flat_hash_set<uint32_t> shapes_sent_;
  const SessionOptions& options_;
  const std::string consumer_;
  const EventId start_;  // Where the session started: not something it passed.
  EventId cursor_;
  std::deque<std::pair<EventId, size_t>> unacked_;  // Sent, not yet acked.
  uint64_t unacked_bytes_ = 0;
  uint64_t sent_events_ = 0;
  bool started_sent_ = false;
  absl::Time last_frame_;
};

}  // namespace walfeed::server

#endif  // WALFEED_SERVER_SESSION_FRAMER_H_
