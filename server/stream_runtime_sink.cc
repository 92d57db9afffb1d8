// StreamRuntime as the reader thread's StreamSink: room in the buffer (and
// spilling to disk when memory is full), appending events, completing backfill
// chunks at their high watermarks, waking sessions, connection state.
#include <utility>

#include "absl/strings/str_cat.h"
#include "server/backfill/read_events.h"
#include "server/stream_log.h"
#include "server/stream_runtime.h"  // IWYU pragma: associated

namespace walfeed::server {

bool StreamRuntime::HasRoom() {
  std::optional<HoldChange> change;
  bool room = registry_.HasRoom(&change);
  if (!room && spill_) {
    // Memory is full: move its oldest events to disk, while the budget lasts.
    absl::Status spilled = registry_.SpillOverflow();
    if (!spilled.ok() && !spill_failing_.exchange(true)) {
      StreamLogger()->error("stream {}: cannot write the spill in {}: {}; the stream waits "
                            "(nothing is lost) and retries every second",
                            name(), spill_->dir(), spilled.ToString());
    } else if (spilled.ok() && spill_failing_.exchange(false)) {
      StreamLogger()->info("stream {}: the spill can be written again", name());
    }
    std::optional<HoldChange> again;
    room = registry_.HasRoom(&again);
    if (again) change = again;
  }
  if (!room && options_.retention.laggard_policy == LaggardPolicy::kDetach) {
    retention_->Notify();  // It detaches the laggard, off this thread.
  }
  if (change && change->started &&
      options_.retention.laggard_policy == LaggardPolicy::kDetach && !change->holder.empty()) {
    StreamLogger()->warn("stream {}: the buffer is full ({} bytes held; buffer_bytes {}, "
                         "retention_bytes {} on disk) because of consumer {}: detaching it "
                         "(laggard_policy detach)",
                         name(), change->held_bytes, options_.buffer_bytes,
                         spill_ ? options_.retention.retention_bytes : 0, change->holder);
  } else if (change && change->started) {
    StreamLogger()->warn(
        "stream {}: the buffer is full ({} bytes held; buffer_bytes {}, retention_bytes {} on "
        "disk): the stream waits for consumer {}, which has not acked the oldest of them; it "
        "holds every other consumer and the slot until it acks (walfeed status shows who "
        "holds what; remove-consumer or reset-consumer release it)",
        name(), change->held_bytes, options_.buffer_bytes,
        spill_ ? options_.retention.retention_bytes : 0,
        change->holder.empty() ? "(none yet: the stream keeps everything for its first)"
                               : change->holder);
  } else if (change) {
    StreamLogger()->info("stream {}: the buffer has room again after {}; consumer {} no longer "
                         "holds the stream",
                         name(), absl::FormatDuration(absl::Trunc(change->lasted,
                                                                  absl::Milliseconds(1))),
                         change->holder.empty() ? "(none)" : change->holder);
  }
  return room;
}

void StreamRuntime::OnEvent(replication::ChangeEvent event) {
  if (windows_.Observe(event)) {
    // A backfill's watermark: in the buffer, so ids and positions stay whole,
    // for no session.
    BufferedEvent watermark = encoder_.Encode(event);
    watermark.key.audience = NoAudience();
    absl::Status appended = registry_.Append(std::move(watermark));
    if (!appended.ok()) StreamLogger()->error("stream {}: {}", name(), appended.ToString());
    return;
  }
  absl::Status appended = registry_.Append(encoder_.Encode(event, forms_wanted_.load()));
  if (!appended.ok()) {
    // The delivery gate makes ids strictly increasing; a repeat reaching the
    // buffer is a bug upstream, and delivering it would break the id contract.
    StreamLogger()->error("stream {}: {}", name(), appended.ToString());
  }
}

void StreamRuntime::OnCommit(const replication::TransactionCommitted& commit) {
  for (replication::CompletedChunk& chunk : windows_.OnCommit(commit)) DeliverChunk(chunk);
}

void StreamRuntime::DeliverChunk(replication::CompletedChunk& chunk) {
  if (backfills_ == nullptr) return;
  if (chunk.outcome == replication::CompletedChunk::Outcome::kDelivered &&
      !chunk.survivors.empty()) {
    std::vector<replication::ChangeEvent> reads = ReadEvents(chunk);
    // Tracked first: an ack of a READ event must find it delivered.
    absl::Status tracked =
        tracker_.load()->OnAppended(chunk.high_watermark.commit_lsn,
                                    static_cast<uint32_t>(reads.size()));
    if (!tracked.ok()) {
      chunk.outcome = replication::CompletedChunk::Outcome::kRetry;
      chunk.retry_reason = std::string(tracked.message());
      backfills_->OnCompleted(chunk, EventId{}, 0);
      return;
    }
    for (const replication::ChangeEvent& read : reads) {
      BufferedEvent event = encoder_.Encode(read, forms_wanted_.load());
      event.key.audience = chunk.consumer;
      absl::Status appended = registry_.Append(std::move(event));
      if (!appended.ok()) StreamLogger()->error("stream {}: {}", name(), appended.ToString());
    }
    backfills_->OnCompleted(chunk, ChunkBoundary(chunk, reads.size()), reads.size());
    return;
  }
  backfills_->OnCompleted(chunk, ChunkBoundary(chunk, 0), 0);
}

void StreamRuntime::OnDrained() {
  // Waking waiting sessions here rather than per event lets one frame carry what
  // one turn of the reader brought (measured: about 6 events per frame on a
  // backlog when woken per event), and keeps the reader thread, which runs the
  // wake-ups' first writes inline, on reading. The price: an event read early in
  // a turn waits for the rest of the turn (at most the reader's drain bound)
  // before sessions hear of it.
  WakeAll(registry_.TakeWaiting());
}

void StreamRuntime::OnConnected(Lsn start) {
  StreamLogger()->info("stream {}: streaming from {}", name(), start.ToString());
  connections_.fetch_add(1);
  supervisor_.SetState(walfeed::v1::STREAM_STATE_STREAMING, "");
}

void StreamRuntime::OnDisconnected(const absl::Status& why) {
  supervisor_.SetState(walfeed::v1::STREAM_STATE_CONNECTING, std::string(why.message()));
}

}  // namespace walfeed::server
