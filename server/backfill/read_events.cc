#include "server/backfill/read_events.h"

#include <utility>

namespace walfeed::server {

using replication::ChangeEvent;
using replication::EventId;

std::vector<ChangeEvent> ReadEvents(replication::CompletedChunk& chunk) {
  const replication::TransactionCommitted& mark = chunk.high_watermark;
  std::vector<ChangeEvent> events;
  events.reserve(chunk.survivors.size());
  for (size_t i = 0; i < chunk.survivors.size(); ++i) {
    ChangeEvent event;
    event.id = EventId{mark.commit_lsn, static_cast<uint32_t>(mark.event_count + i)};
    event.commit_time = mark.commit_time;
    event.op = ChangeEvent::Op::kRead;
    event.relation = chunk.relation;
    event.new_tuple = std::move(chunk.survivors[i]);
    events.push_back(std::move(event));
  }
  if (!events.empty()) {
    events.back().last_in_transaction = true;
    events.back().transaction_event_count = static_cast<uint32_t>(events.size());
    events.back().end_lsn = mark.end_lsn;
  }
  chunk.survivors.clear();
  return events;
}

EventId ChunkBoundary(const replication::CompletedChunk& chunk, size_t events) {
  const replication::TransactionCommitted& mark = chunk.high_watermark;
  const uint32_t own = mark.event_count == 0 ? 0 : mark.event_count - 1;
  return EventId{mark.commit_lsn, static_cast<uint32_t>(own + events)};
}

}  // namespace walfeed::server
