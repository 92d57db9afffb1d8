#include "server/session_framer.h"

#include <vector>

#include "server/events_frame.h"
#include "walfeed/v1/change_stream.pb.h"

namespace walfeed::server {
namespace {

std::string IdText(EventId id) { return id == EventId{} ? "" : id.ToString(); }

}  // namespace

bool SessionFramer::Next(const StreamBuffer& buffer, const Context& context, absl::Time now,
                         std::string* frame) {
  walfeed::v1::SubscribeResponse response;
  if (!started_sent_) {
    started_sent_ = true;
    walfeed::v1::Started* started = response.mutable_started();
    started->set_session_id(context.session_id);
    started->set_checkpoint(IdText(context.checkpoint));
    started->set_start_after(IdText(cursor_));
    started->mutable_slot()->set_name(context.slot_name);
    started->mutable_slot()->set_plugin("pgoutput");
    response.SerializeToString(frame);
    last_frame_ = now;
    return true;
  }
  if (ComposeEvents(buffer, frame)) {
    last_frame_ = now;
    return true;
  }
  if (!ProgressDue(now)) return false;
  walfeed::v1::Progress* progress = response.mutable_progress();
  const replication::Lsn server_end =
      context.server_wal_end ? context.server_wal_end() : replication::Lsn();
  progress->set_server_wal_lsn(server_end.ToString());
  progress->set_last_delivered(unacked_.empty() ? "" : unacked_.back().first.ToString());
  progress->set_checkpoint(IdText(context.checkpoint));
  progress->set_unacked_events(unacked_.size());
  const replication::Lsn from = context.checkpoint.commit_lsn;
  progress->set_lag_bytes(from.valid() && server_end > from ? server_end.value() - from.value()
                                                            : 0);
  // Only what this session passed: its start is the consumer's business already
  // (and, for one that never acked, not something the server could store).
  if (cursor_ > start_) progress->set_passed(cursor_.ToString());
  response.SerializeToString(frame);
  last_frame_ = now;
  return true;
}

bool SessionFramer::ComposeEvents(const StreamBuffer& buffer, std::string* frame) {
  if (!WindowOpen()) return false;
  const SessionLimits& limits = options_.limits;
  std::vector<const std::string*> batch;  // Stable: the buffer is locked until composed.
  std::vector<const std::string*> shapes;  // Compact: shapes first needed in this batch.
  size_t bytes = 0;
  EventId last;
  for (auto it = buffer.After(cursor_); it != buffer.end(); ++it) {
    const CompactForm* form = options_.compact ? it->compact.get() : nullptr;
    // What the event costs in the form this session gets, as if it were the
    // only one held (the other form is not sent).
    const size_t full_cost =
        it->bytes - (it->compact ? it->compact->serialized.size() + sizeof(CompactForm) : 0);
    const size_t cost =
        form != nullptr ? full_cost - it->serialized.size() + form->serialized.size() : full_cost;
    if (!batch.empty() && (batch.size() >= limits.max_batch_events ||
                           bytes + cost > limits.max_batch_bytes || !WindowOpen())) {
      break;
    }
    cursor_ = it->id;
    if (!it->key.ReachableBy(consumer_, options_.ephemeral) || !options_.filter.Matches(it->key)) {
      continue;
    }
    if (form != nullptr && shapes_sent_.insert(form->shape_ref).second) {
      shapes.push_back(form->shape.get());
    }
    batch.push_back(form != nullptr ? &form->serialized : &it->serialized);
    last = it->id;
    bytes += cost;
    if (options_.ephemeral) continue;
    unacked_.emplace_back(it->id, cost);
    unacked_bytes_ += cost;
  }
  if (batch.empty()) return false;
  sent_events_ += batch.size();
  // Events the filters left out after the last one sent: the client may ack past
  // them (EventBatch.passed).
  ComposeEventsFrame(batch, frame, cursor_ > last ? cursor_.ToString() : std::string(), shapes);
  return true;
}

size_t SessionFramer::Acked(EventId id) {
  size_t acked = 0;
  while (!unacked_.empty() && unacked_.front().first <= id) {
    unacked_bytes_ -= unacked_.front().second;
    unacked_.pop_front();
    ++acked;
  }
  return acked;
}

}  // namespace walfeed::server
