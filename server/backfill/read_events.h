// READ events: a completed chunk's surviving rows as change events, with ids
// after its high watermark transaction's own events.
//
// The watermark transaction holds one event (its logical message), so a
// chunk's rows take indexes 1..n of that commit LSN: ids no change event
// carries, which sort right where the rows are delivered (after everything
// committed before the watermark, before everything after it).
#ifndef WALFEED_SERVER_BACKFILL_READ_EVENTS_H_
#define WALFEED_SERVER_BACKFILL_READ_EVENTS_H_

#include <vector>

#include "replication/backfill_window.h"
#include "replication/transaction_assembler.h"

namespace walfeed::server {

// The READ events of `chunk` (its survivors, moved out), in key order: op
// kRead, xid 0, the watermark's commit time, the last one marked
// last_in_transaction with the chunk's count.
std::vector<replication::ChangeEvent> ReadEvents(replication::CompletedChunk& chunk);

// The chunk's boundary: its last READ event's id, or the watermark's own event
// when none survived.
replication::EventId ChunkBoundary(const replication::CompletedChunk& chunk, size_t events);

}  // namespace walfeed::server

#endif  // WALFEED_SERVER_BACKFILL_READ_EVENTS_H_
