#include "server/stream_runtime.h"

#include <sys/random.h>

#include <cerrno>
#include <utility>

#include "absl/cleanup/cleanup.h"
#include "absl/random/random.h"
#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "replication/error_reason.h"
#include "replication/retry.h"
#include "server/stream_log.h"

namespace walfeed::server {

namespace reason = replication::reason;
namespace {

std::string IdOrNone(EventId id) { return id == EventId{} ? "none" : id.ToString(); }

// 128 random bits from the kernel, as 32 hex digits: a session id is what an Ack
// must name, so it must not be guessable from another one.
std::string NewSessionId() {
  uint8_t bytes[16];
  size_t got = 0;
  while (got < sizeof(bytes)) {
    const ssize_t n = getrandom(bytes + got, sizeof(bytes) - got, 0);
    if (n > 0) {
      got += static_cast<size_t>(n);
    } else if (n < 0 && errno != EINTR) {
      // No getrandom (an old seccomp profile): Abseil's generator, seeded from
      // the OS, still gives ids that do not follow from one another.
      absl::BitGen random;
      for (; got < sizeof(bytes); ++got) bytes[got] = absl::Uniform<uint8_t>(random);
    }
  }
  return absl::BytesToHexString(
      absl::string_view(reinterpret_cast<const char*>(bytes), sizeof(bytes)));
}

// A durable write (ack, removal, reset) that failed and changed nothing.
// Transient failures (connection lost, PostgreSQL restarting) tell the client
// to retry; others (the role lacks a grant, the table was dropped) keep their
// code, because retrying them forever would hide the problem.
absl::Status WriteFailed(const absl::Status& why, absl::string_view stream,
                         absl::string_view what, absl::string_view remedy) {
  const bool transient = replication::IsTransient(why);
  return reason::WithReason(
      absl::Status(transient ? absl::StatusCode::kUnavailable : why.code(),
                   absl::StrCat("could not store ", what, ": ", why.message(), "; ",
                                transient ? remedy : "an operator must fix this first")),
      transient ? reason::kCheckpointWriteFailed : reason::kCheckpointWriteRefused,
      {{"stream", std::string(stream)}});
}

}  // namespace

StreamRuntime::StreamRuntime(RuntimeOptions options,
                             std::unique_ptr<replication::StreamSource> source,
                             std::function<void(walfeed::v1::StreamState)> on_state,
                             std::unique_ptr<spill::SpillLog> spill)
    : options_(std::move(options)),
      source_(std::move(source)),
      spill_(std::move(spill)),
      registry_(ConsumerRegistry::Options{
          options_.source.config.name, options_.source.config.slot_name, options_.buffer_bytes,
          [this] { return supervisor_.NotReady(); },
          [this] { return source_->stats().server_wal_end; }, NewSessionId, spill_.get(),
          options_.retention.retention_bytes, [this] { retention_->Notify(); },
          options_.progress_due}),
      supervisor_(
          StreamSupervisor::Options{options_.source.config.name,
                                    options_.source.config.slot_name, options_.retry_base,
                                    options_.retry_cap, options_.lead_poll,
                                    options_.lead_check},
          source_.get(), this,
          StreamSupervisor::Hooks{
              [this](replication::PreparedSource& prepared, replication::AckTracker* tracker) {
                replication::StartPlan& plan = prepared.plan;
                // Before the first event: the initial snapshot's chunks drop
                // rows whose key changed from the stream's start on.
                for (const replication::InitialSnapshotTable& table : prepared.initial_snapshot) {
                  windows_.OpenFromStart(table.backfill_id, table.relation_id, table.key_columns);
                }
                tracker_.store(tracker);
                stream_start_.store(plan.start.value());
                const EventId deliver_after =
                    registry_.Load(tracker, plan.consumers, plan.deliver_after, plan.detached);
                if (deliver_after < plan.deliver_after) {
                  StreamLogger()->info(
                      "stream {}: delivering the events after {} rather than after {}: a "
                      "consumer's ack or reset was in flight across the restart",
                      name(), deliver_after.ToString(), plan.deliver_after.ToString());
                  plan.deliver_after = deliver_after;
                }
                generation_.store(generations_.fetch_add(1) + 1);
              },
              [this](const absl::Status& why) {
                generation_.store(0);
                WakeAll(registry_.Fail(why));
              },
              std::move(on_state),
              [this](const absl::Status& why) {
                // Another instance may stream it now: end every session and
                // drop what was read (the new leader reads it from the slot).
                generation_.store(0);
                WakeAll(registry_.Unload(supervisor_.LeadLost(why)));
                if (spill_) spill_->Clear();
              }}),
      slot_monitor_(std::make_unique<SlotMonitor>([this] { return source_->ReadSlot(); })) {
  if (source_->NewBackfillDatabase() != nullptr) {
    backfills_ = std::make_unique<BackfillRunner>(
        name(), options_.source.config.publication_names,
        [this] { return source_->NewBackfillDatabase(); }, &windows_,
        BackfillRunner::Hooks{
            [this] { return generation_.load(); },
            [this](const std::string& consumer) -> absl::StatusOr<EventId> {
              replication::AckTracker* tracker = tracker_.load();
              if (tracker == nullptr) return absl::UnavailableError("not prepared");
              // "": a backfill for every consumer is acked as far as all are.
              if (consumer.empty()) return tracker->AckedByAll();
              return tracker->AckedBy(consumer);
            },
            [this] { return registry_.TakesMore(); }},
        options_.backfill);
  }
}

StreamRuntime::~StreamRuntime() {
  Stop(reason::WithReason(absl::UnavailableError("walfeed-server is stopping"),
                          reason::kServerStopping));
}

void StreamRuntime::Start() {
  retention_ = std::make_unique<RetentionWorker>(
      &registry_, spill_.get(),
      RetentionWorker::Hooks{[this](const absl::Status& why) { RestartFromSlot(why); },
                             [this] {
                               // A failed spill write is retried when the reader
                               // next asks for room.
                               if (spill_failing_.load()) source_->Wake();
                               if (options_.retention.laggard_policy != LaggardPolicy::kDetach) {
                                 return;
                               }
                               // One at a time: the trim a detach allows may
                               // free enough; a failed store waits a tick.
                               if (std::optional<std::string> laggard =
                                       registry_.LaggardToDetach(absl::Now())) {
                                 DetachLaggard(*laggard);
                               }
                             }});
  retention_->Start();
  supervisor_.Start();
  if (backfills_) backfills_->Start();
}

std::string StreamRuntime::FullBudget() const {
  if (spill_ == nullptr) {
    return absl::StrCat("buffer_bytes ", options_.buffer_bytes, " full; no state_dir to spill to");
  }
  return absl::StrCat("buffer_bytes ", options_.buffer_bytes, " and retention_bytes ",
                      options_.retention.retention_bytes, " full");
}

void StreamRuntime::DetachLaggard(const std::string& consumer) {
  SessionList ended;
  absl::StatusOr<bool> durable = registry_.BeginDetach(consumer, &ended);
  WakeAll(ended);
  if (!durable.ok()) return;  // Removed, reset or stopping meanwhile.
  if (*durable) {
    const EventId checkpoint = registry_.AwaitAcksLanded(consumer);
    absl::Status stored = source_->committer()->DetachConsumer(name(), consumer);
    if (!stored.ok()) {
      registry_.AbandonDetach(consumer);
      StreamLogger()->error("stream {}: could not store the detach of consumer {}: {}; it still "
                            "holds the stream; retrying on the next tick (within a second)",
                            name(), consumer, stored.ToString());
      return;
    }
    SessionList wake;
    registry_.FinishDetach(consumer, &wake);
    WakeAll(wake);
    StreamLogger()->warn(
        "stream {}: consumer {} detached by laggard_policy detach ({}; its checkpoint {}): it "
        "no longer holds the stream or the slot, and its Subscribe fails until `walfeed "
        "reset-consumer` re-attaches it",
        name(), consumer, FullBudget(), IdOrNone(checkpoint));
  } else {
    StreamLogger()->warn("stream {}: consumer {} (never acked) ended by laggard_policy detach "
                         "({})",
                         name(), consumer, FullBudget());
  }
  source_->Wake();  // The buffer may have room again.
}

void StreamRuntime::BeginStop(const absl::Status& why) {
  WakeAll(registry_.Stop(why));
  supervisor_.BeginStop();
  slot_monitor_->Stop();
}

void StreamRuntime::Stop(const absl::Status& why) {
  BeginStop(why);
  if (backfills_) backfills_->Stop();
  supervisor_.Stop();
  if (retention_) retention_->Stop();
}

void StreamRuntime::RestartFromSlot(const absl::Status& why) {
  StreamLogger()->error("stream {}: {}; every session ends and the stream is read again from "
                        "the slot (nothing is lost: the slot holds everything after the lowest "
                        "checkpoint)",
                        name(), why.ToString());
  WakeAll(registry_.Unload(
      reason::WithReason(absl::UnavailableError(absl::StrCat("stream \"", name(),
                                                             "\" is being re-read from its slot (",
                                                             why.message(), "); subscribe again")),
                         reason::kStreamRestarting, {{"stream", name()}})));
  if (spill_) spill_->Clear();
  supervisor_.Restart(why);
}

void StreamRuntime::WakeAll(const SessionList& sessions) {
  for (const std::shared_ptr<Session>& session : sessions) session->Wake();
}

absl::StatusOr<OpenedSession> StreamRuntime::Open(const std::string& consumer,
                                                  std::optional<EventId> start_after,
                                                  SessionOptions options) {
  const FormMask form = MaskOf(options.form);
  if (options.form.index() != 0 && (forms_wanted_.fetch_or(form) & form) == 0) {
    // From now on; sessions convert events converted before themselves.
    StreamLogger()->info("stream {}: a session asked for {} events with {} values: row events "
                         "are also converted to that form from now on",
                         name(), options.form.compact ? "compact" : "full",
                         options.form.values == ValueForm::kText    ? "text"
                         : options.form.values == ValueForm::kTyped ? "typed"
                                                                    : "text and typed");
  }
  absl::StatusOr<OpenedSession> opened = registry_.Open(consumer, start_after, std::move(options));
  if (!opened.ok()) return opened;
  if (opened->superseded) {
    StreamLogger()->info("stream {}: consumer {} session {} superseded by {}", name(), consumer,
                         opened->superseded->id(), opened->session->id());
    opened->superseded->Wake();
  }
  if (opened->session->options().ephemeral) {
    StreamLogger()->info("stream {}: ephemeral session {}{} subscribed (delivering after {})",
                         name(), opened->session->id(),
                         consumer.empty() ? "" : absl::StrCat(" (", consumer, ")"),
                         IdOrNone(opened->start_after));
    return opened;
  }
  StreamLogger()->info(
      "stream {}: consumer {} subscribed (session {}, checkpoint {}, delivering after {})",
      name(), consumer, opened->session->id(), IdOrNone(opened->checkpoint),
      IdOrNone(opened->start_after));
  return opened;
}

void StreamRuntime::Close(const std::shared_ptr<Session>& session) {
  session->Detach();
  if (registry_.Close(session)) {
    StreamLogger()->info("stream {}: consumer {} left without ever acking; it no longer holds "
                         "the stream",
                         name(), session->consumer());
    WakeAll(registry_.TakeWaiting());
    source_->Wake();  // The buffer may have room again.
  }
}

bool StreamRuntime::NextFrame(const Session& session, std::string* frame,
                              std::optional<absl::Status>* end) {
  bool wake_reader = false;
  const bool sent = registry_.NextFrame(session, absl::Now(), frame, end, &wake_reader);
  if (wake_reader) source_->Wake();  // The leading session passed what may spill now.
  return sent;
}

absl::StatusOr<AckOutcome> StreamRuntime::Ack(const std::string& consumer,
                                              const std::string& session_id, EventId id) {
  absl::StatusOr<ConsumerRegistry::AckTicket> ticket = registry_.BeginAck(consumer, session_id, id);
  if (!ticket.ok()) return ticket.status();
  if (ticket->noop) return AckOutcome{ticket->checkpoint, source_->stats().confirmed_sent};
  // Until the durable write is over the ack counts as in flight (a removal of
  // the consumer waits for it); the early returns give it back (which may forget
  // a consumer that never acked and has left, so the reader may have room).
  absl::Cleanup abandon = [this, &consumer] {
    registry_.AbandonAck(consumer);
    source_->Wake();
  };
  replication::AckTracker* tracker = tracker_.load();
  absl::Status delivered = tracker->CheckDelivered(id);
  if (!delivered.ok()) return delivered;
  absl::Status durable = source_->committer()->AckDurably(name(), consumer, id);
  if (!durable.ok()) {
    return WriteFailed(durable, name(), "the ack durably", "retry the Ack");
  }
  if (absl::Status tracked = tracker->Ack(consumer, id); !tracked.ok()) {
    StreamLogger()->warn("stream {}: consumer {}: ack {} stored but not tracked: {}", name(), consumer,
                   id.ToString(), tracked.ToString());
  }
  std::move(abandon).Cancel();
  SessionList wake;
  AckOutcome outcome;
  outcome.checkpoint = registry_.FinishAck(consumer, id, &wake);
  outcome.confirmed = source_->stats().confirmed_sent;
  WakeAll(wake);
  source_->Wake();  // The buffer may have room again.
  return outcome;
}

absl::StatusOr<EventId> StreamRuntime::RemoveConsumer(const std::string& consumer) {
  absl::StatusOr<std::shared_ptr<Session>> ended = registry_.BeginRemove(consumer);
  if (!ended.ok()) return ended.status();
  if (*ended) (*ended)->Wake();
  const EventId checkpoint = registry_.AwaitAcksLanded(consumer);
  absl::Status removed = source_->committer()->RemoveConsumer(name(), consumer);
  if (!removed.ok()) {
    registry_.AbandonRemove(consumer);
    source_->Wake();
    return WriteFailed(removed, name(), absl::StrCat("the removal of consumer \"", consumer, "\""),
                       "it is kept, retry");
  }
  SessionList wake;
  registry_.FinishRemove(consumer, &wake);
  WakeAll(wake);
  source_->Wake();  // The buffer may have room again.
  StreamLogger()->info("stream {}: consumer {} removed (its checkpoint was {})", name(), consumer,
                 IdOrNone(checkpoint));
  return checkpoint;
}

absl::StatusOr<StreamRuntime::ResetOutcome> StreamRuntime::ResetConsumer(
    const std::string& consumer, std::optional<EventId> to) {
  absl::StatusOr<ConsumerRegistry::ResetTicket> ticket = registry_.BeginReset(consumer, to);
  if (!ticket.ok()) return ticket.status();
  if (ticket->ended) ticket->ended->Wake();
  // An ack that passed its checks before the session ended lands first; the
  // target never goes below what it stored (acks are cumulative). A detached
  // consumer has no session, so no ack in flight; its in-memory
  // checkpoint is already the target (BeginReset re-attached it), the stored
  // one is the previous.
  const EventId landed =
      ticket->detached ? ticket->previous : registry_.AwaitAcksLanded(consumer);
  const EventId target = std::max(ticket->target, landed);
  if (target > landed) {
    absl::Status durable = source_->committer()->AckDurably(name(), consumer, target);
    if (!durable.ok()) {
      registry_.AbandonReset(consumer);
      source_->Wake();
      return WriteFailed(durable, name(), absl::StrCat("the reset of consumer \"", consumer, "\""),
                         "its checkpoint is unchanged, retry");
    }
    // A re-attached consumer was added to the tracker at the target already.
    absl::Status tracked =
        ticket->detached ? absl::OkStatus() : tracker_.load()->Ack(consumer, target);
    if (!tracked.ok()) {
      StreamLogger()->warn("stream {}: consumer {}: reset to {} stored but not tracked: {}",
                           name(), consumer, target.ToString(), tracked.ToString());
    }
  }
  SessionList wake;
  registry_.FinishReset(consumer, target, &wake);
  WakeAll(wake);
  source_->Wake();  // The buffer may have room again.
  StreamLogger()->info("stream {}: consumer {} reset from {} to {}", name(), consumer,
                       IdOrNone(ticket->previous), IdOrNone(target));
  return ResetOutcome{ticket->previous, target};
}

void StreamRuntime::Tick() {
  std::optional<absl::Time> next;
  WakeAll(registry_.DueForProgress(absl::Now(), &next));
  if (next && options_.progress_due) options_.progress_due(*next);
}

}  // namespace walfeed::server
