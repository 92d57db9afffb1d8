#include "server/consumer_registry.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "replication/error_reason.h"

namespace walfeed::server {

namespace reason = replication::reason;

ConsumerRegistry::ConsumerRegistry(Options options) : options_(std::move(options)) {}

EventId ConsumerRegistry::Load(replication::AckTracker* tracker,
                               const absl::flat_hash_map<std::string, EventId>& checkpoints,
                               EventId deliver_after,
                               const absl::flat_hash_map<std::string, EventId>& detached) {
  absl::MutexLock lock(&mu_);
  // Consumers kept through an Unload had work in flight, which may be stored
  // after the caller read `checkpoints`: a first ack (the consumer is not in
  // them at all), or a reset that re-attaches it at an older target than every
  // stored checkpoint. Delivering only after `deliver_after` would then resume
  // such a consumer past events it never received, so the floor goes down to
  // where each of them holds the stream.
  for (const auto& [name, c] : consumers_) {
    if (!c.detached) deliver_after = std::min(deliver_after, c.checkpoint);
  }
  // Kept consumers may also know a newer ack.
  for (const auto& [consumer, checkpoint] : checkpoints) {
    if (removed_unloaded_.contains(consumer)) continue;
    Consumer& c = consumers_[consumer];
    c.checkpoint = std::max(c.checkpoint, checkpoint);
  }
  for (const auto& [consumer, checkpoint] : detached) {
    if (removed_unloaded_.contains(consumer)) continue;
    Consumer& c = consumers_[consumer];
    c.checkpoint = std::max(c.checkpoint, checkpoint);
    // A reset in flight or stored since Unload re-attached it.
    if (!c.reattached_from && !reattached_unloaded_.contains(consumer)) c.detached = true;
  }
  removed_unloaded_.clear();
  reattached_unloaded_.clear();
  for (const auto& [consumer, state] : consumers_) {
    if (!state.detached) (void)tracker->AddConsumer(consumer, state.checkpoint);
  }
  buffer_ = StreamBuffer(deliver_after);
  floor_ = deliver_after;
  tracker_ = tracker;
  loaded_ = true;
  return deliver_after;
}

bool ConsumerRegistry::loaded() const {
  absl::MutexLock lock(&mu_);
  return loaded_;
}

std::shared_ptr<Session> ConsumerRegistry::EndLocked(const std::shared_ptr<Session>& session,
                                                     absl::Status status) {
  auto it = sessions_.find(session.get());
  if (it != sessions_.end() && !it->second.end) it->second.end = std::move(status);
  return session;
}

SessionList ConsumerRegistry::EndAllLocked(const absl::Status& why) {
  SessionList ended;
  for (auto& [key, entry] : sessions_) {  // Ephemeral sessions too.
    if (entry.end) continue;
    entry.end = why;
    ended.push_back(entry.session);
  }
  for (auto& [name, consumer] : consumers_) consumer.active.reset();
  return ended;
}

SessionList ConsumerRegistry::Stop(const absl::Status& why) {
  absl::MutexLock lock(&mu_);
  stopping_ = true;
  return EndAllLocked(why);
}

SessionList ConsumerRegistry::Unload(const absl::Status& why) {
  absl::MutexLock lock(&mu_);
  SessionList ended = EndAllLocked(why);
  loaded_ = false;
  // Consumers with an ack, removal, reset or detach in flight keep their marks
  // (those calls finish against them, and a removal must still wait for the
  // acks); every other one comes back from the stored checkpoints at Load().
  for (auto it = consumers_.begin(); it != consumers_.end();) {
    Consumer& c = it->second;
    if (c.acks_in_flight > 0 || c.removing || c.resetting || c.detaching) {
      c.active.reset();
      c.session_start = EventId{};
      ++it;
    } else {
      consumers_.erase(it++);
    }
  }
  buffer_ = StreamBuffer();
  arrivals_ = ArrivalClock();  // The stream is read again from an older position.
  hold_.reset();
  return ended;
}

SessionList ConsumerRegistry::Fail(const absl::Status& why) {
  absl::MutexLock lock(&mu_);
  // Failures PostgreSQL's side classified (the slot's) keep their reason.
  failed_ = reason::ReasonOf(why).empty() ? reason::WithReason(why, reason::kStreamFailed) : why;
  return EndAllLocked(*failed_);
}

absl::StatusOr<OpenedSession> ConsumerRegistry::Open(const std::string& consumer,
                                                     std::optional<EventId> start_after,
                                                     SessionOptions options) {
  absl::MutexLock lock(&mu_);
  if (failed_) return *failed_;
  if (stopping_)
    return reason::WithReason(absl::UnavailableError("walfeed-server is stopping"),
                              reason::kServerStopping);
  if (!loaded_) return options_.not_ready();
  if (start_after) {
    // An id past the newest WAL PostgreSQL has reported cannot be an event's
    // yet: a typo, or an id from another database. Accepted, it would wait
    // silently until the WAL got there. (Unknown before the first message.)
    const replication::Lsn wal_end = options_.server_wal_end();
    if (wal_end.valid() && start_after->commit_lsn > wal_end) {
      return reason::WithReason(
          absl::InvalidArgumentError(absl::StrCat(
              "start_after ", start_after->ToString(), " is beyond the newest WAL position of "
              "stream \"", options_.stream, "\"'s database (", wal_end.ToString(),
              "): it is no event's id; give an id walfeed delivered, or leave start_after "
              "empty")),
          reason::kInvalidRequest, {{"field", "start_after"}});
    }
  }
  if (options.ephemeral) {
    if (start_after && *start_after < floor_) {
      return reason::WithReason(
          absl::OutOfRangeError(absl::StrCat(
              "start_after ", start_after->ToString(), " is below what stream \"", options_.stream,
              "\" still holds (events after ", floor_.ToString(), ")")),
          reason::kStartNotHeld, {{"stream", options_.stream}});
    }
    const EventId start = start_after ? *start_after : buffer_.newest();
    OpenedSession opened;
    opened.session = AddSessionLocked(consumer, std::move(options), start);
    opened.start_after = start;
    return opened;
  }
  // Refusals first: a refused Subscribe must not register the consumer.
  if (absl::Status busy = BusyLocked(consumer); !busy.ok()) return busy;
  auto known = consumers_.find(consumer);
  if (start_after) {
    const EventId checkpoint = known == consumers_.end() ? EventId{} : known->second.checkpoint;
    if (*start_after < checkpoint) {  // Never for a new consumer.
      return reason::WithReason(
          absl::OutOfRangeError(absl::StrCat(
              "start_after ", start_after->ToString(), " is below consumer \"", consumer,
              "\"'s checkpoint ", checkpoint.ToString(),
              ": events up to the checkpoint were acked and may no longer be available; start "
              "after the checkpoint (leave start_after empty) or after a later id")),
          reason::kStartBelowCheckpoint, {{"stream", options_.stream}, {"consumer", consumer}});
    }
    if (*start_after < floor_) {
      // Starting at the trim point instead would silently skip the events between.
      const EventId trimmed = floor_;
      return reason::WithReason(
          absl::OutOfRangeError(absl::StrCat(
              "start_after ", start_after->ToString(), " is below what stream \"", options_.stream,
              "\" still holds: every event up to ", trimmed.ToString(),
              " was acked by all its consumers and is no longer available to consumer \"", consumer,
              "\"; start after ", trimmed.ToString(),
              " or a later id, or leave start_after empty")),
          reason::kStartNotHeld, {{"stream", options_.stream}, {"consumer", consumer}});
    }
  }
  auto [it, inserted] = consumers_.try_emplace(consumer);
  Consumer& state = it->second;
  // A known consumer resumes where it needs: after its checkpoint, or, if it has
  // not acked yet, after where its first session started.
  EventId start = NeedsAfter(state);
  if (inserted) {
    // A new consumer starts at the oldest event still held for the stream, or
    // after the newest. Either way it holds the slot from the stream's durable
    // position until its first ack: confirming anything for a consumer that has
    // acked nothing could skip events a later consumer is promised.
    start = options.start_latest ? buffer_.newest() : floor_;
    (void)tracker_->AddConsumer(consumer, EventId{});
  }
  if (start_after) start = std::max(start, *start_after);
  state.session_start = start;
  state.progressed_at = absl::Now();

  OpenedSession opened;
  opened.session = AddSessionLocked(consumer, std::move(options), start);
  ++state.sessions;
  if (state.active) {
    ++state.superseded;
    opened.superseded = EndLocked(
        state.active,
        reason::WithReason(
            absl::AbortedError(absl::StrCat("session ", state.active->id(), " of consumer \"",
                                            consumer, "\" was superseded by a newer Subscribe (",
                                            opened.session->id(), ")")),
            reason::kSessionSuperseded, {{"stream", options_.stream}, {"consumer", consumer}}));
  }
  state.active = opened.session;
  opened.checkpoint = state.checkpoint;
  opened.start_after = start;
  return opened;
}

std::shared_ptr<Session> ConsumerRegistry::AddSessionLocked(const std::string& consumer,
                                                            SessionOptions options,
                                                            EventId start) {
  auto session = std::make_shared<Session>(options_.new_session_id(), consumer, std::move(options));
  sessions_.emplace(session.get(),
                    SessionEntry{session, SessionFramer(session->options(), start, absl::Now(), session->consumer()),
                                 false, std::nullopt, StreamBuffer(), false, false});
  return session;
}

bool ConsumerRegistry::Close(const std::shared_ptr<Session>& session) {
  absl::MutexLock lock(&mu_);
  sessions_.erase(session.get());
  auto it = consumers_.find(session->consumer());
  if (it == consumers_.end() || it->second.active != session) return false;
  it->second.active.reset();
  return ForgetIfIdleLocked(session->consumer());
}

bool ConsumerRegistry::ForgetIfIdleLocked(const std::string& consumer) {
  // A consumer that never acked has no durable position to come back to, so once
  // it has no session (and nothing of it is in flight) it holds nothing: neither
  // the buffer nor the slot. If it subscribes again it is a new consumer.
  auto it = consumers_.find(consumer);
  if (it == consumers_.end()) return false;
  const Consumer& state = it->second;
  if (state.checkpoint != EventId{} || state.active || state.removing || state.resetting ||
      state.detaching || state.acks_in_flight > 0) {
    return false;
  }
  consumers_.erase(it);
  if (tracker_ != nullptr) (void)tracker_->RemoveConsumer(consumer);
  TrimLocked();
  return true;
}

absl::Status ConsumerRegistry::BusyLocked(const std::string& consumer) const {
  auto it = consumers_.find(consumer);
  if (it == consumers_.end()) return absl::OkStatus();
  // Not UNAVAILABLE: a client retrying would come back as a new consumer once a
  // removal is done and silently skip what it never acked.
  if (it->second.removing) {
    return reason::WithReason(absl::AbortedError(absl::StrCat(
                                  "consumer \"", consumer, "\" is being removed (RemoveConsumer)")),
                              reason::kConsumerRemoved,
                              {{"stream", options_.stream}, {"consumer", consumer}});
  }
  if (it->second.resetting) {
    return reason::WithReason(
        absl::AbortedError(absl::StrCat("consumer \"", consumer,
                                        "\" is being reset (ResetConsumer); resubscribe")),
        reason::kConsumerBusy, {{"stream", options_.stream}, {"consumer", consumer}});
  }
  if (it->second.detaching || it->second.detached) return DetachedError(consumer, it->second);
  return absl::OkStatus();
}

bool ConsumerRegistry::NextFrame(const Session& session, absl::Time now, std::string* frame,
                                 std::optional<absl::Status>* end, bool* wake_reader) {
  absl::MutexLock lock(&mu_);
  auto it = sessions_.find(&session);
  if (it == sessions_.end()) {
    *end = absl::InternalError("the session was closed");
    return false;
  }
  SessionEntry& entry = it->second;
  if (!entry.end && session.options().ephemeral && entry.framer.cursor() < floor_) {
    // Durable consumers acked past events it had not received: they are gone.
    const EventId passed = entry.framer.cursor();
    const EventId trimmed = floor_;
    entry.end = reason::WithReason(
        absl::OutOfRangeError(absl::StrCat(
            "ephemeral session ", session.id(), " fell behind: it had passed ",
            passed == EventId{} ? "nothing" : passed.ToString(),
            " and the server no longer holds the events up to ", trimmed.ToString(), " (",
            trimmed.commit_lsn.value() - std::min(trimmed.commit_lsn, passed.commit_lsn).value(),
            " bytes of WAL later); subscribe again to continue from the newest events, or use a "
            "durable consumer to receive everything")),
        reason::kEphemeralFellBehind, {{"stream", options_.stream}});
  }
  if (entry.end && entry.framer.started()) {
    *end = entry.end;
    return false;
  }
  auto consumer = consumers_.find(session.consumer());
  SessionFramer::Context context;
  context.session_id = session.id();
  context.checkpoint = consumer == consumers_.end() ? EventId{} : consumer->second.checkpoint;
  context.slot_name = options_.slot_name;
  context.server_wal_end = options_.server_wal_end;
  bool sent = false;
  // Events staged from disk end a batch early; when the filters left all of
  // them out, go on with what follows (memory, or the next disk read) now.
  const uint64_t sent_before = entry.framer.sent_events();
  for (int turn = 0; turn < 2 && !sent; ++turn) {
    const EventId before = entry.framer.cursor();
    const StreamBuffer& source = SourceForLocked(entry);
    sent = entry.framer.Next(source, context, now, frame);
    if (sent || &source != &entry.staged || entry.framer.cursor() == before) break;
  }
  const uint64_t sent_now = entry.framer.sent_events() - sent_before;
  delivered_ += sent_now;
  if (consumer != consumers_.end() && consumer->second.active.get() == &session) {
    consumer->second.delivered += sent_now;
  }
  // The cursor also moves over filtered events, without a frame.
  if (reader_awaits_ && entry.framer.cursor() >= *reader_awaits_) {
    reader_awaits_.reset();
    if (wake_reader != nullptr) *wake_reader = true;
  }
  if (sent) return true;
  entry.waiting = true;
  if (options_.progress_due) options_.progress_due(entry.framer.progress_due_at());
  return false;
}

SessionList ConsumerRegistry::DueForProgress(absl::Time now, std::optional<absl::Time>* next) {
  absl::MutexLock lock(&mu_);
  SessionList due;
  if (next != nullptr) next->reset();
  for (auto& [key, entry] : sessions_) {
    if (!entry.waiting || entry.end) continue;
    if (entry.framer.ProgressDue(now)) {
      entry.waiting = false;
      due.push_back(entry.session);
    } else if (next != nullptr) {
      const absl::Time at = entry.framer.progress_due_at();
      if (!next->has_value() || at < **next) *next = at;
    }
  }
  return due;
}

absl::StatusOr<ConsumerRegistry::AckTicket> ConsumerRegistry::BeginAck(
    const std::string& consumer, const std::string& session_id, EventId id) {
  absl::MutexLock lock(&mu_);
  if (failed_) return *failed_;
  // Before the stored consumers are loaded, "no such consumer" would be a lie
  // that a client takes as definite (a restarted server's first moments).
  if (!loaded_) return options_.not_ready();
  auto it = consumers_.find(consumer);
  if (it == consumers_.end() || !it->second.active || it->second.active->id() != session_id) {
    for (const auto& [key, entry] : sessions_) {
      if (entry.session->id() == session_id && entry.session->options().ephemeral) {
        return reason::WithReason(
            absl::FailedPreconditionError(absl::StrCat(
                "session ", session_id,
                " is ephemeral: ephemeral subscriptions keep no checkpoint and are not acked")),
            reason::kEphemeralNotAcked, {{"stream", options_.stream}});
      }
    }
  }
  if (it == consumers_.end()) {
    return reason::WithReason(
        absl::NotFoundError(absl::StrCat("stream \"", options_.stream, "\" has no consumer \"",
                                         consumer, "\" (it never subscribed, or was removed)")),
        reason::kConsumerNotFound, {{"stream", options_.stream}, {"consumer", consumer}});
  }
  Consumer& state = it->second;
  if (!state.active || state.active->id() != session_id) {
    return reason::WithReason(
        absl::AbortedError(absl::StrCat(
            "session \"", session_id, "\" is not the active session of consumer \"", consumer, "\"",
            state.active ? absl::StrCat(" (superseded by ", state.active->id(), ")")
                         : " (it ended)",
            ": acks must come from the newest Subscribe, which resumes after the checkpoint")),
        reason::kSessionNotActive, {{"stream", options_.stream}, {"consumer", consumer}});
  }
  // At or below what it already acked (or, before its first ack, where its
  // session started): nothing to store. The window still shrinks: a session that
  // took over may hold redelivered events an earlier session's ack covered.
  if (id <= NeedsAfter(state)) {
    sessions_.at(state.active.get()).framer.Acked(id);
    return AckTicket{/*noop=*/true, state.checkpoint};
  }
  const EventId passed = sessions_.at(state.active.get()).framer.cursor();
  if (passed < id) {
    return reason::WithReason(
        absl::OutOfRangeError(absl::StrCat(
            "event ", id.ToString(), " was not delivered to consumer \"", consumer,
            "\" in this session (last passed: ", passed.ToStringOrEmpty(),
            ")")),
        reason::kAckNotDelivered, {{"stream", options_.stream}, {"consumer", consumer}});
  }
  ++state.acks_in_flight;
  return AckTicket{/*noop=*/false, state.checkpoint};
}

EventId ConsumerRegistry::FinishAck(const std::string& consumer, EventId id, SessionList* wake) {
  absl::MutexLock lock(&mu_);
  EventId checkpoint;
  auto it = consumers_.find(consumer);
  if (it != consumers_.end()) {
    Consumer& state = it->second;
    --state.acks_in_flight;
    state.checkpoint = std::max(state.checkpoint, id);
    state.progressed_at = absl::Now();
    checkpoint = state.checkpoint;
    if (state.active) state.acked += sessions_.at(state.active.get()).framer.Acked(id);
  }
  TrimLocked();
  *wake = TakeWaitingLocked();
  return checkpoint;
}

void ConsumerRegistry::AbandonAck(const std::string& consumer) {
  absl::MutexLock lock(&mu_);
  if (auto it = consumers_.find(consumer); it != consumers_.end()) --it->second.acks_in_flight;
  ForgetIfIdleLocked(consumer);
}
void ConsumerRegistry::TrimLocked() {
  // With no consumer yet nothing is dropped: the slot does not advance without
  // one either, so the reader simply waits (backpressure) and the first consumer
  // gets everything from the stream's position, whenever it subscribes.
  //
  // Until some consumer has a durable checkpoint nothing is dropped either: the
  // slot is not confirmed past anything then, so a consumer that arrives later
  // (or the first one after one that left without acking) still gets everything.
  bool any_durable = false;
  for (const auto& [name, consumer] : consumers_) {
    any_durable = any_durable || (consumer.checkpoint != EventId{} && !consumer.detached);
  }
  if (!any_durable) return;
  const EventId floor = NeedsAfter(consumers_.at(*LowestHolderLocked()));
  if (floor <= floor_) return;
  floor_ = floor;
  buffer_.TrimThrough(floor);
  arrivals_.TrimThrough(floor);
  // Whole segments only; their files are deleted off this lock (Reap).
  if (options_.spill != nullptr) options_.spill->TrimThrough(floor);
}
absl::Status ConsumerRegistry::Append(BufferedEvent event) {
  const absl::Time now = ArrivalClock::CoarseNow();
  absl::MutexLock lock(&mu_);
  const EventId id = event.id;
  absl::Status appended = buffer_.Append(std::move(event));
  if (appended.ok()) {
    arrivals_.Arrived(id, now);
    TrimLocked();
  }
  if (!buffer_.HasRoom(options_.buffer_bytes)) {
    room_unheld_.store(false, std::memory_order_release);
  }
  return appended;
}

SessionList ConsumerRegistry::TakeWaitingLocked() {
  SessionList waiting;
  for (auto& [key, entry] : sessions_) {
    if (entry.waiting && !entry.end) {
      entry.waiting = false;
      waiting.push_back(entry.session);
    }
  }
  return waiting;
}

SessionList ConsumerRegistry::TakeWaiting() {
  absl::MutexLock lock(&mu_);
  return TakeWaitingLocked();
}

}  // namespace walfeed::server
