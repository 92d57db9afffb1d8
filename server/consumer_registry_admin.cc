// ConsumerRegistry, the operators' side (consumer_registry.h): removing and
// resetting consumers, and what the registry tells about who holds the stream
// (full-buffer episodes, snapshots for GetStatus).
#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "replication/error_reason.h"
#include "server/consumer_registry.h"  // IWYU pragma: associated

namespace walfeed::server {

namespace reason = replication::reason;

absl::StatusOr<ConsumerRegistry::Consumer*> ConsumerRegistry::AdminTargetLocked(
    const std::string& consumer) {
  // The stream's own state first: before it is loaded, consumers_ is not
  // complete and "no such consumer" would be a lie.
  if (failed_) return *failed_;
  if (stopping_)
    return reason::WithReason(absl::UnavailableError("walfeed-server is stopping"),
                              reason::kServerStopping);
  if (!loaded_) return options_.not_ready();
  auto it = consumers_.find(consumer);
  if (it == consumers_.end()) {
    return reason::WithReason(
        absl::NotFoundError(absl::StrCat("stream \"", options_.stream, "\" has no consumer \"",
                                         consumer, "\" (never subscribed, or already removed)")),
        reason::kConsumerNotFound, {{"stream", options_.stream}, {"consumer", consumer}});
  }
  Consumer& state = it->second;
  if (state.removing || state.resetting || state.detaching) {
    return reason::WithReason(
        absl::AbortedError(absl::StrCat("consumer \"", consumer, "\" is being ",
                                        state.removing    ? "removed"
                                        : state.resetting ? "reset"
                                                          : "detached",
                                        " by another call")),
        reason::kConsumerBusy, {{"stream", options_.stream}, {"consumer", consumer}});
  }
  return &state;
}

const std::string* ConsumerRegistry::LowestHolderLocked() const {
  const std::string* holder = nullptr;
  EventId lowest;
  for (const auto& [name, consumer] : consumers_) {
    if (consumer.detached) continue;
    if (holder == nullptr || NeedsAfter(consumer) < lowest) {
      holder = &name;
      lowest = NeedsAfter(consumer);
    }
  }
  return holder;
}

absl::Status ConsumerRegistry::DetachedError(const std::string& consumer,
                                             const Consumer& state) const {
  const std::string checkpoint =
      state.checkpoint == EventId{} ? "none" : state.checkpoint.ToString();
  return reason::WithReason(
      absl::FailedPreconditionError(absl::StrCat(
          "consumer \"", consumer, "\" of stream \"", options_.stream,
          "\" was detached by laggard_policy detach: it fell too far behind (the stream's "
          "retention was full) and no longer holds the stream. Its checkpoint is ",
          checkpoint, "; the stream holds only the events after ", floor_.ToString(),
          ", so the events in between are lost to it. To resume, accepting that gap, run "
          "`walfeed reset-consumer --stream ",
          options_.stream, " --consumer ", consumer, " --to-head --yes` (or --to an id after ",
          floor_.ToString(), "); or `walfeed remove-consumer` to forget it")),
      reason::kConsumerDetached, {{"stream", options_.stream}, {"consumer", consumer}});
}

std::optional<std::string> ConsumerRegistry::LaggardToDetach(absl::Time now) {
  absl::MutexLock lock(&mu_);
  if (!loaded_ || stopping_ || failed_ || !FullLocked()) return std::nullopt;
  const std::string* holder = LowestHolderLocked();
  if (holder == nullptr) return std::nullopt;
  const Consumer& state = consumers_.at(*holder);
  if (state.removing || state.resetting || state.detaching) return std::nullopt;
  // Its ack is being stored and may move it off the bottom: look again once it
  // has landed (asking now would pick it again and again until then).
  if (state.acks_in_flight > 0) return std::nullopt;
  // Not behind: sent everything held, and acking (or just subscribed).
  if (state.active && now - state.progressed_at < kCaughtUpGrace &&
      sessions_.at(state.active.get()).framer.cursor() >= buffer_.newest()) {
    return std::nullopt;
  }
  // Detaching the one durable consumer would free nothing (nothing is dropped
  // before some consumer has a checkpoint) and cost it its position.
  bool other_durable = false;
  for (const auto& [name, other] : consumers_) {
    other_durable = other_durable ||
                    (name != *holder && !other.detached && other.checkpoint != EventId{});
  }
  if (!other_durable) return std::nullopt;
  return *holder;
}

absl::StatusOr<bool> ConsumerRegistry::BeginDetach(const std::string& consumer,
                                                   SessionList* ended) {
  absl::MutexLock lock(&mu_);
  absl::StatusOr<Consumer*> found = AdminTargetLocked(consumer);
  if (!found.ok()) return found.status();
  Consumer& state = **found;
  if (state.detached) return false;
  state.detaching = true;
  if (state.active) {
    ended->push_back(EndLocked(state.active, DetachedError(consumer, state)));
    state.active.reset();
  }
  if (state.checkpoint != EventId{}) return true;
  // Never acked: no durable position to mark; with its session gone it holds
  // nothing and is forgotten.
  state.detaching = false;
  ForgetIfIdleLocked(consumer);
  return false;
}

void ConsumerRegistry::FinishDetach(const std::string& consumer, SessionList* wake) {
  absl::MutexLock lock(&mu_);
  if (auto it = consumers_.find(consumer); it != consumers_.end()) {
    it->second.detaching = false;
    it->second.detached = true;
    (void)tracker_->RemoveConsumer(consumer);
  }
  TrimLocked();
  *wake = TakeWaitingLocked();
}

void ConsumerRegistry::AbandonDetach(const std::string& consumer) {
  absl::MutexLock lock(&mu_);
  if (auto it = consumers_.find(consumer); it != consumers_.end()) it->second.detaching = false;
}

absl::StatusOr<std::shared_ptr<Session>> ConsumerRegistry::BeginRemove(
    const std::string& consumer) {
  absl::MutexLock lock(&mu_);
  absl::StatusOr<Consumer*> found = AdminTargetLocked(consumer);
  if (!found.ok()) return found.status();
  Consumer& state = **found;
  state.removing = true;
  std::shared_ptr<Session> ended;
  if (state.active) {
    ended = EndLocked(
        state.active,
        reason::WithReason(absl::AbortedError(absl::StrCat("consumer \"", consumer,
                                                           "\" was removed (RemoveConsumer)")),
                           reason::kConsumerRemoved,
                           {{"stream", options_.stream}, {"consumer", consumer}}));
    state.active.reset();
  }
  return ended;
}

EventId ConsumerRegistry::AwaitAcksLanded(const std::string& consumer) {
  absl::MutexLock lock(&mu_);
  auto none_in_flight = [this, &consumer]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    auto it = consumers_.find(consumer);
    return it == consumers_.end() || it->second.acks_in_flight == 0;
  };
  mu_.Await(absl::Condition(&none_in_flight));
  auto it = consumers_.find(consumer);
  return it == consumers_.end() ? EventId{} : it->second.checkpoint;
}

void ConsumerRegistry::FinishRemove(const std::string& consumer, SessionList* wake) {
  absl::MutexLock lock(&mu_);
  consumers_.erase(consumer);
  if (!loaded_) removed_unloaded_.insert(consumer);
  (void)tracker_->RemoveConsumer(consumer);
  TrimLocked();
  *wake = TakeWaitingLocked();
}

void ConsumerRegistry::AbandonRemove(const std::string& consumer) {
  absl::MutexLock lock(&mu_);
  if (auto it = consumers_.find(consumer); it != consumers_.end()) it->second.removing = false;
  ForgetIfIdleLocked(consumer);
}

absl::StatusOr<ConsumerRegistry::ResetTicket> ConsumerRegistry::BeginReset(
    const std::string& consumer, std::optional<EventId> to) {
  absl::MutexLock lock(&mu_);
  absl::StatusOr<Consumer*> found = AdminTargetLocked(consumer);
  if (!found.ok()) return found.status();
  Consumer& state = **found;
  ResetTicket ticket;
  ticket.previous = state.checkpoint;
  ticket.detached = state.detached;
  if (state.detached && to && *to < floor_) {
    return reason::WithReason(
        absl::FailedPreconditionError(
            absl::StrCat("cannot reset detached consumer \"", consumer, "\" to ", to->ToString(),
                         ": the stream holds only the events after ", floor_.ToString(),
                         "; reset it to an id after that, or --to-head")),
        reason::kResetTargetInvalid, {{"stream", options_.stream}, {"consumer", consumer}});
  }
  if (!to) {
    ticket.target = std::max(state.checkpoint, buffer_.newest());
  } else {
    if (*to < state.checkpoint) {
      return reason::WithReason(
          absl::FailedPreconditionError(absl::StrCat(
              "cannot reset consumer \"", consumer, "\" to ", to->ToString(),
              ": its checkpoint is already ", state.checkpoint.ToString(),
              " and checkpoints only move forward (to read events again, a new consumer "
              "can start_after an id the server still holds)")),
          reason::kResetTargetInvalid, {{"stream", options_.stream}, {"consumer", consumer}});
    }
    if (*to > buffer_.newest()) {
      return reason::WithReason(
          absl::OutOfRangeError(
              absl::StrCat("cannot reset consumer \"", consumer, "\" to ", to->ToString(),
                           ": the newest event stream \"", options_.stream, "\" holds is ",
                           buffer_.newest() == EventId{} ? "none yet" : buffer_.newest().ToString(),
                           "; use --to-head, or wait until the event was read")),
          reason::kResetTargetInvalid, {{"stream", options_.stream}, {"consumer", consumer}});
    }
    // The last event at or below `to` (the tracker confirms only real events).
    ticket.target = state.checkpoint;
    if (*to <= buffer_.trimmed() && *to > std::max(ticket.target, floor_)) {
      // On disk, where the registry does not look under its lock: the id must
      // be an event's own.
      if (!tracker_->CheckDelivered(*to).ok()) {
        return reason::WithReason(
            absl::InvalidArgumentError(absl::StrCat(
                "cannot reset consumer \"", consumer, "\" to ", to->ToString(),
                ": it is not the id of an event stream \"", options_.stream,
                "\" holds on disk; give an event's exact id (walfeed tail shows them)")),
            reason::kResetTargetInvalid, {{"stream", options_.stream}, {"consumer", consumer}});
      }
      ticket.target = *to;
    }
    for (auto e = buffer_.After(ticket.target); e != buffer_.end() && e->id <= *to; ++e) {
      ticket.target = e->id;
    }
  }
  if (state.detached) {
    // It re-attaches at what is still held at the earliest, and holds the
    // stream from there at once (before the write: an ack of another consumer
    // meanwhile must not let the floor or the slot pass the target). The target
    // must be newer than its stored checkpoint, or no write would clear the
    // stored mark.
    ticket.target = std::max(ticket.target, floor_);
    if (ticket.target <= state.checkpoint) {
      return reason::WithReason(absl::FailedPreconditionError(absl::StrCat(
                                    "cannot re-attach detached consumer \"", consumer,
                                    "\" yet: the stream holds no event "
                                    "after its checkpoint ",
                                    state.checkpoint.ToString(), "; retry once new events arrive")),
                                reason::kResetTargetInvalid,
                                {{"stream", options_.stream}, {"consumer", consumer}});
    }
    state.reattached_from = state.checkpoint;
    state.checkpoint = ticket.target;
    state.detached = false;
    (void)tracker_->AddConsumer(consumer, ticket.target);
  }
  state.resetting = true;
  if (state.active) {
    ticket.ended = EndLocked(
        state.active,
        reason::WithReason(
            absl::AbortedError(absl::StrCat("consumer \"", consumer, "\" was reset to ",
                                            ticket.target.ToString(),
                                            " (ResetConsumer); resubscribe to resume after it")),
            reason::kConsumerReset, {{"stream", options_.stream}, {"consumer", consumer}}));
    state.active.reset();
  }
  return ticket;
}

void ConsumerRegistry::FinishReset(const std::string& consumer, EventId target,
                                   SessionList* wake) {
  absl::MutexLock lock(&mu_);
  if (auto it = consumers_.find(consumer); it != consumers_.end()) {
    if (!loaded_ && it->second.reattached_from) reattached_unloaded_.insert(consumer);
    it->second.resetting = false;
    it->second.reattached_from.reset();
    it->second.checkpoint = std::max(it->second.checkpoint, target);
  }
  ForgetIfIdleLocked(consumer);  // A reset to nothing of one that never acked.
  TrimLocked();
  *wake = TakeWaitingLocked();
}

void ConsumerRegistry::AbandonReset(const std::string& consumer) {
  absl::MutexLock lock(&mu_);
  if (auto it = consumers_.find(consumer); it != consumers_.end()) {
    Consumer& state = it->second;
    state.resetting = false;
    if (state.reattached_from) {  // Stays detached, as stored.
      state.checkpoint = *state.reattached_from;
      state.reattached_from.reset();
      state.detached = true;
      (void)tracker_->RemoveConsumer(consumer);
    }
  }
  ForgetIfIdleLocked(consumer);
}

bool ConsumerRegistry::TakesMore() const {
  absl::MutexLock lock(&mu_);
  return buffer_.HasRoom(options_.buffer_bytes) || !FullLocked();
}

bool ConsumerRegistry::HasRoom(std::optional<HoldChange>* change) {
  // The common case, per frame: room and no hold, nothing to do.
  if (room_unheld_.load(std::memory_order_acquire)) return true;
  absl::MutexLock lock(&mu_);
  const bool room = RoomLocked(change);
  // A hold that opened or goes on keeps it false; one that ended makes it true.
  room_unheld_.store(room && !hold_, std::memory_order_release);
  return room;
}

bool ConsumerRegistry::RoomLocked(std::optional<HoldChange>* change) {
  const bool room = buffer_.HasRoom(options_.buffer_bytes);
  if (room && !hold_) return room;
  // Memory is full but the spill can take its oldest events: no one holds the
  // stream yet (the caller spills).
  if (!room && !FullLocked()) return room;
  const absl::Time now = absl::Now();
  if (!room) {
    // The consumer with the lowest checkpoint keeps the oldest events.
    const std::string* holder = LowestHolderLocked();
    const std::string name = holder != nullptr ? *holder : std::string();
    if (hold_) {
      hold_->room_since.reset();  // Still (or again) held: the episode goes on.
      hold_->holder = name;
      return room;
    }
    hold_ = Hold{name, now, std::nullopt};
    if (change != nullptr) {
      const uint64_t spilled = options_.spill != nullptr ? options_.spill->bytes() : 0;
      *change = HoldChange{true, name, buffer_.bytes() + spilled, absl::ZeroDuration()};
    }
    return room;
  }
  // A slow consumer that keeps acking fills the buffer again and again: the
  // episode ends only after the buffer had room for kHoldSettle.
  if (!hold_->room_since) hold_->room_since = now;
  if (now - *hold_->room_since < kHoldSettle) return room;
  if (change != nullptr) *change = HoldChange{false, hold_->holder, 0, now - hold_->since};
  hold_.reset();
  return room;
}

uint64_t ConsumerRegistry::BytesBetweenLocked(EventId from,
                                              std::optional<EventId> through) const {
  uint64_t bytes = 0;
  if (options_.spill != nullptr && from < buffer_.trimmed()) {
    // On disk, to segment granularity.
    const uint64_t after_from = options_.spill->BytesAfter(from);
    const uint64_t after_through =
        through && *through < buffer_.trimmed() ? options_.spill->BytesAfter(*through) : 0;
    bytes += after_from - std::min(after_from, after_through);
  }
  for (auto it = buffer_.After(from); it != buffer_.end() && (!through || it->id <= *through);
       ++it) {
    bytes += it->bytes;
  }
  return bytes;
}

RegistrySnapshot ConsumerRegistry::Snapshot() const {
  const absl::Time now = absl::Now();
  absl::MutexLock lock(&mu_);
  RegistrySnapshot snapshot;
  snapshot.delivered_events = delivered_;
  snapshot.buffered_events = buffer_.size();
  snapshot.buffered_bytes = buffer_.bytes();
  snapshot.buffer_limit_bytes = options_.buffer_bytes;
  if (options_.spill != nullptr) {
    snapshot.spilled_bytes = options_.spill->bytes();
    snapshot.retention_bytes = options_.retention_bytes;
  }
  for (const auto& [key, entry] : sessions_) {
    if (entry.session->options().ephemeral && !entry.end) ++snapshot.ephemeral_sessions;
  }
  // Held now, not in the settling time after the buffer found room again
  // (the episode's end, logged and counted, waits kHoldSettle; the status
  // says what is true at the moment it is asked).
  if (hold_) snapshot.hold_episode_by = hold_->holder;
  if (hold_ && !hold_->room_since) {
    snapshot.held_by = hold_->holder;
    snapshot.held_since = hold_->since;
  }
  for (const auto& [name, consumer] : consumers_) {
    ConsumerSnapshot c;
    c.name = name;
    c.checkpoint = consumer.checkpoint;
    c.position = consumer.checkpoint != EventId{} ? consumer.checkpoint : consumer.session_start;
    c.detached = consumer.detached;
    c.delivered_events = consumer.delivered;
    c.acked_events = consumer.acked;
    c.sessions_started = consumer.sessions;
    c.sessions_superseded = consumer.superseded;
    if (!consumer.detached) {
      if (std::optional<absl::Time> oldest =
              arrivals_.FirstArrivalAfter(NeedsAfter(consumer), arrivals_.newest())) {
        c.lag = std::max(now - *oldest, absl::ZeroDuration());
      }
    }
    if (consumer.active) {
      c.session_id = consumer.active->id();
      c.unacked_events = sessions_.at(consumer.active.get()).framer.unacked_events();
    }
    // What it alone holds: after its checkpoint, up to the lowest other one.
    std::optional<EventId> others;
    for (const auto& [other_name, other] : consumers_) {
      if (other_name != name && !other.detached) {
        others = std::min(others.value_or(NeedsAfter(other)), NeedsAfter(other));
      }
    }
    if (!consumer.detached) c.held_bytes = BytesBetweenLocked(NeedsAfter(consumer), others);
    snapshot.consumers.push_back(std::move(c));
  }
  std::sort(snapshot.consumers.begin(), snapshot.consumers.end(),
            [](const ConsumerSnapshot& a, const ConsumerSnapshot& b) { return a.name < b.name; });
  return snapshot;
}

}  // namespace walfeed::server
