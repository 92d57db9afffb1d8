// StreamBuffer: a stream's events, serialized, in id order, between the reader
// and every session. Sessions read it by cursor (the id they have passed), never
// by copy; it is trimmed from the front by a floor (everything at or below it is
// no longer needed). Bounded by its owner: HasRoom() compares its bytes with a
// limit, and the reader stops reading while it is full.
//
// Held serialized: a parsed ChangeEvent costs about 6.5 times its wire size in
// memory (measured 928 vs 143 bytes), which would make the byte bound a poor
// bound. Sessions copy `serialized` into their frames as it is (events_frame.h)
// and filter on `key`, so an event is never parsed back.
//
// Not thread-safe: the ConsumerRegistry's mutex guards it.
#ifndef WALFEED_SERVER_STREAM_BUFFER_H_
#define WALFEED_SERVER_STREAM_BUFFER_H_

#include <cstddef>
#include <deque>
#include <string>

#include "absl/status/status.h"
#include "replication/event_id.h"
#include "server/buffered_event.h"

namespace walfeed::server {

class StreamBuffer {
 public:
  using const_iterator = std::deque<BufferedEvent>::const_iterator;

  // `start`: the stream's delivery floor; nothing at or below it is ever held.
  explicit StreamBuffer(EventId start = EventId{}) : trimmed_(start), newest_(start) {}

  // Appends an event newer than every event appended so far. FailedPrecondition
  // otherwise: the delivery gate upstream makes ids strictly increasing, and a
  // buffer that accepted a repeat would deliver it twice.
  absl::Status Append(BufferedEvent event);

  // The first event after `cursor` (end() when there is none).
  const_iterator After(EventId cursor) const;
  const_iterator end() const { return events_.end(); }

  // Drops every event at or below `floor`.
  void TrimThrough(EventId floor);

  size_t bytes() const { return bytes_; }
  size_t size() const { return events_.size(); }
  bool HasRoom(size_t limit) const { return bytes_ < limit; }
  // The newest id dropped (or the start): a cursor below it would skip events.
  EventId trimmed() const { return trimmed_; }
  EventId newest() const { return newest_; }

 private:
  std::deque<BufferedEvent> events_;
  size_t bytes_ = 0;
  EventId trimmed_;
  EventId newest_;
};

}  // namespace walfeed::server

#endif  // WALFEED_SERVER_STREAM_BUFFER_H_
