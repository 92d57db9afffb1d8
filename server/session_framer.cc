#include "server/session_framer.h"

#include <memory>
#include <utility>
#include <vector>

#include "server/events_frame.h"
#include "server/value_forms.h"
#include "walfeed/v1/change_stream.pb.h"

namespace walfeed::server {

bool SessionFramer::Next(const StreamBuffer& buffer, const Context& context, absl::Time now,
                         std::string* frame) {
  walfeed::v1::SubscribeResponse response;
  if (!started_sent_) {
    started_sent_ = true;
    walfeed::v1::Started* started = response.mutable_started();
    started->set_session_id(context.session_id);
    started->set_checkpoint(context.checkpoint.ToStringOrEmpty());
    started->set_start_after(cursor_.ToStringOrEmpty());
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
  progress->set_checkpoint(context.checkpoint.ToStringOrEmpty());
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

const std::string* SessionFramer::FormOf(const BufferedEvent& event,
                                         std::vector<std::unique_ptr<std::string>>* converted,
                                         const std::string** shape) {
  const EventForm form = options_.form;
  if (form.index() == 0) return &event.serialized;
  const EventForms* forms = event.forms.get();
  if (forms != nullptr && !forms->serialized[form.index()].empty()) {
    if (form.compact && shapes_sent_.insert(forms->shape_ref).second) *shape = forms->shape.get();
    return &forms->serialized[form.index()];
  }
  // Converted before any session wanted this form, or read back from the
  // spill: the full form describes itself, so a compact session reads it as
  // is; typed values are converted here, for this session alone.
  const walfeed::v1::Operation op = event.key.op;
  const bool row = op == walfeed::v1::OPERATION_INSERT || op == walfeed::v1::OPERATION_UPDATE ||
                   op == walfeed::v1::OPERATION_DELETE || op == walfeed::v1::OPERATION_READ;
  if (form.values == ValueForm::kText || !row) return &event.serialized;
  auto bytes = std::make_unique<std::string>();
  // Our own bytes always parse; should they not, send them as they are.
  if (!TranscodeFull(event.serialized, form.values, bytes.get())) return &event.serialized;
  converted->push_back(std::move(bytes));
  return converted->back().get();
}

bool SessionFramer::ComposeEvents(const StreamBuffer& buffer, std::string* frame) {
  if (!WindowOpen()) return false;
  const SessionLimits& limits = options_.limits;
  std::vector<const std::string*> batch;  // Stable: the buffer is locked until composed.
  std::vector<const std::string*> shapes;  // Compact: shapes first needed in this batch.
  // Forms made for this batch alone; empty (no allocation) for most sessions.
  std::vector<std::unique_ptr<std::string>> converted;
  size_t bytes = 0;
  EventId last;
  for (auto it = buffer.After(cursor_); it != buffer.end(); ++it) {
    if (!batch.empty() && (batch.size() >= limits.max_batch_events || !WindowOpen())) break;
    if (!it->key.ReachableBy(consumer_, options_.ephemeral) || !options_.filter.Matches(it->key)) {
      cursor_ = it->id;
      continue;
    }
    const std::string* shape = nullptr;
    const std::string* form = FormOf(*it, &converted, &shape);
    // What the event costs in the form this session gets, as if it were the
    // only one held (the other forms are not sent).
    const size_t cost = it->bytes - (it->forms ? it->forms->bytes() : 0) -
                        it->serialized.size() + form->size();
    if (!batch.empty() && bytes + cost > limits.max_batch_bytes) {
      // Sent with the next batch: that one must carry its shape.
      if (shape != nullptr) shapes_sent_.erase(it->forms->shape_ref);
      break;
    }
    cursor_ = it->id;
    if (shape != nullptr) shapes.push_back(shape);
    batch.push_back(form);
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
