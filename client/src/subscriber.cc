// Subscriber: one control thread (the caller of Run) drives everything; gRPC's
// callback reactor only hands frames over.
//
// Why a reactor and not a blocking ClientReader: Run must wake for things other
// than frames (Stop, a manual Ack, an ack interval running out) without a second
// thread that would have to share the session's state. The reactor reads one
// frame ahead into a slot guarded by the core's mutex; Run waits on that mutex
// for "a frame, the end of the stream, Stop, an Ack request or a deadline", then
// calls the handler and sends acks itself, outside the lock. A hold on the
// reactor keeps OnDone from running until Run has finished with the call, so Run
// may start reads and cancel safely from its own thread. Run also owns the
// reactor and destroys it after OnDone, so no gRPC object of the call (its
// ClientContext holds the channel) outlives Session::Run or dies on a gRPC thread.
#include "walfeed/subscriber.h"

#include <grpcpp/grpcpp.h>

#include <algorithm>
#include <utility>

#include "absl/random/random.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "walfeed/error_details.h"
#include "walfeed/v1/change_stream.grpc.pb.h"

namespace walfeed {
namespace internal_subscriber {

// Everything shared between Run's thread, Stop/Ack callers and the reactor.
struct Core {
  // Run waits for these.
  bool Wakeup() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) {
    return frame_ready || read_ended || stopping || ack_request != ack_request_seen;
  }
  bool ReadSettled() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) { return frame_ready || read_ended; }
  bool CallDone() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) { return done.has_value(); }
  bool Stopping() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) { return stopping; }

  mutable absl::Mutex mu;
  bool stopping ABSL_GUARDED_BY(mu) = false;
  bool ran ABSL_GUARDED_BY(mu) = false;
  // The newest id handed to the handler in this Run (bounds Ack requests).
  std::optional<EventId> handed ABSL_GUARDED_BY(mu);
  // The newest id passed to Ack(), and the newest Run has acted on.
  std::optional<EventId> ack_request ABSL_GUARDED_BY(mu);
  std::optional<EventId> ack_request_seen ABSL_GUARDED_BY(mu);
  std::string checkpoint ABSL_GUARDED_BY(mu);

  // The current call: a frame read ahead, the end of the reads, the final status.
  walfeed::v1::SubscribeResponse frame ABSL_GUARDED_BY(mu);
  bool frame_ready ABSL_GUARDED_BY(mu) = false;
  bool read_ended ABSL_GUARDED_BY(mu) = false;
  std::optional<grpc::Status> done ABSL_GUARDED_BY(mu);
};

}  // namespace internal_subscriber

namespace {

using internal_subscriber::Core;
using walfeed::v1::AckRequest;
using walfeed::v1::AckResponse;
using walfeed::v1::ChangeStream;
using walfeed::v1::SubscribeRequest;
using walfeed::v1::SubscribeResponse;

absl::Status Validate(const SubscriberOptions& options) {
  if (options.stream.empty()) return absl::InvalidArgumentError("options.stream is empty");
  if (options.consumer.empty() && !options.ephemeral) {
    return absl::InvalidArgumentError("options.consumer is empty (only an ephemeral "
                                      "subscription may go without a consumer name)");
  }
  if (!options.start_after.empty()) {
    absl::StatusOr<EventId> id = EventId::Parse(options.start_after);
    if (!id.ok()) {
      return absl::InvalidArgumentError(absl::StrCat("options.start_after: ", id.status().message()));
    }
  }
  if (options.backoff.base <= absl::ZeroDuration() || options.backoff.cap < options.backoff.base) {
    return absl::InvalidArgumentError("options.backoff: need 0 < base <= cap");
  }
  if (options.ack_timeout <= absl::ZeroDuration()) {
    return absl::InvalidArgumentError("options.ack_timeout must be positive");
  }
  if (options.max_receive_message_bytes <= 0) {
    return absl::InvalidArgumentError("options.max_receive_message_bytes must be positive");
  }
  return absl::OkStatus();
}

// The reactor of one Subscribe call. Session::Run owns it and destroys it on its
// own thread once OnDone has published the final status; the hold taken in Start
// keeps OnDone from running until Run calls Release.
//
// Why not `delete this` in OnDone: the ClientContext keeps a reference to the
// grpc::Channel, and OnDone runs on a thread of gRPC's callback completion queue.
// Once `done` is published, Subscriber::Run may return and drop its own channel
// references, making the context's the last one; ~Channel would then run on that
// callback thread and shut down the shared callback completion queue under the
// thread still polling it (its join of itself fails and is ignored), which ends
// in a double free in grpc_cq_internal_unref. Destroyed by Session::Run instead,
// the context (and with it the call) goes on Run's thread, before Run lets go of
// the stub and the channel.
class Call final : public grpc::ClientReadReactor<SubscribeResponse> {
 public:
  explicit Call(std::shared_ptr<Core> core) : core_(std::move(core)) {}

  grpc::ClientContext& context() { return context_; }
  SubscribeRequest& request() { return request_; }

  void Start(ChangeStream::Stub* stub) {
    stub->async()->Subscribe(&context_, &request_, this);
    AddHold();
    StartRead(&incoming_);
    StartCall();
  }
  // Only after the previous read was taken (Core::frame_ready went false).
  void ReadNext() { StartRead(&incoming_); }
  // Run is done with the call: OnDone may run from now on.
  void Release() { RemoveHold(); }

  void OnReadDone(bool ok) override {
    absl::MutexLock lock(&core_->mu);
    if (ok) {
      core_->frame.Swap(&incoming_);
      core_->frame_ready = true;
    } else {
      core_->read_ended = true;
    }
  }
  // The last use of `this`: once `done` is set, Run may destroy the Call (and the
  // Subscriber) at any moment, so the lock is taken through a reference of its
  // own that keeps the mutex alive until the unlock has returned.
  void OnDone(const grpc::Status& status) override {
    const std::shared_ptr<Core> core = core_;
    absl::MutexLock lock(&core->mu);
    core->done = status;
  }

 private:
  std::shared_ptr<Core> core_;
  grpc::ClientContext context_;
  SubscribeRequest request_;
  SubscribeResponse incoming_;
};

// How one session ended.
struct SessionEnd {
  enum class Kind {
    kStopped,    // Stop(): Run returns OK.
    kTransient,  // Reconnect after a backoff.
    kDefinite,   // Run returns `status`.
  };
  Kind kind = Kind::kTransient;
  absl::Status status;
  bool started = false;  // The session got its `started` frame.
};

// Runs one Subscribe call from start to OnDone.
class Session {
 public:
  Session(const SubscriberOptions& options, std::shared_ptr<Core> core, ChangeStream::Stub* stub,
          const Subscriber::Handler& handler, std::optional<EventId>* acked)
      : options_(options), core_(std::move(core)), stub_(stub), handler_(handler), acked_(acked) {}

  SessionEnd Run(const std::string& start_after);

 private:
  // What to do about a frame; false ends the session with end_.
  bool Process(SubscribeResponse& frame);
  // Sends the ack the policy, `flush` or an Ack() request calls for; false ends
  // the session with end_ (or starts draining after ABORTED).
  bool MaybeAck(bool flush, const std::optional<EventId>& request);
  // The server passed `passed` (EventBatch.passed / Progress.passed): every event
  // up to it was delivered or filtered out, so it is ackable once handled.
  template <typename ProtocolError>
  bool Pass(absl::string_view passed, const ProtocolError& protocol_error);
  bool SendAck(const EventId& id);
  // When an interval ack falls due.
  absl::Time AckDeadline() const;
  std::string What() const {
    return absl::StrCat("stream \"", options_.stream, "\" consumer \"", options_.consumer, "\"");
  }

  const SubscriberOptions& options_;
  std::shared_ptr<Core> core_;
  ChangeStream::Stub* stub_;
  const Subscriber::Handler& handler_;
  std::optional<EventId>* acked_;  // Across sessions: acks never go backwards.

  std::string session_id_;
  Batch::Shapes shapes_;  // Compact form: what this session received.
  bool started_ = false;
  std::optional<EventId> delivered_;  // Newest id handed to the handler in this session.
  std::optional<EventId> handled_;    // Newest id the handler returned OK for (or passed).
  std::optional<EventId> last_event_;  // Newest event id (not a passed position) delivered.
  uint64_t unacked_events_ = 0;       // Handled since the last ack.
  absl::Time first_unacked_ = absl::InfiniteFuture();
  // After an Ack failed with ABORTED: frames are dropped until the stream's own
  // status says whether another session took over (ABORTED) or the server is
  // going away (UNAVAILABLE).
  bool draining_ = false;
  absl::Status drain_cause_;
  absl::Time drain_deadline_ = absl::InfiniteFuture();
  std::optional<SessionEnd> end_;
};

absl::Time Session::AckDeadline() const {
  if (draining_) return drain_deadline_;
  absl::Time deadline = absl::InfiniteFuture();
  if (options_.ack.interval > absl::ZeroDuration() && first_unacked_ != absl::InfiniteFuture()) {
    deadline = first_unacked_ + options_.ack.interval;
  }
  return deadline;
}

SessionEnd Session::Run(const std::string& start_after) {
  auto call = std::make_unique<Call>(core_);
  SubscribeRequest& request = call->request();
  request.set_stream(options_.stream);
  request.set_consumer(options_.consumer);
  request.set_start_after(start_after);
  request.set_ephemeral(options_.ephemeral);
  request.set_start(options_.start);
  request.set_event_form(options_.event_form);
  request.set_value_form(options_.value_form);
  for (const std::string& table : options_.tables) request.add_tables(table);
  for (walfeed::v1::Operation op : options_.operations) request.add_operations(op);
  request.set_max_batch_events(options_.max_batch_events);
  request.set_max_batch_bytes(options_.max_batch_bytes);
  request.set_max_unacked_events(options_.max_unacked_events);
  request.set_max_unacked_bytes(options_.max_unacked_bytes);
  request.set_progress_interval_ms(
      static_cast<uint32_t>(std::max<int64_t>(0, absl::ToInt64Milliseconds(options_.progress_interval))));
  if (!options_.bearer_token.empty()) {
    call->context().AddMetadata("authorization", "Bearer " + options_.bearer_token);
  }
  {
    absl::MutexLock lock(&core_->mu);
    core_->frame.Clear();
    core_->frame_ready = false;
    core_->read_ended = false;
    core_->done.reset();
  }
  call->Start(stub_);
  bool read_outstanding = true;

  while (!end_) {
    SubscribeResponse frame;
    bool got_frame = false;
    bool stop = false;
    bool stream_ended = false;
    std::optional<EventId> request_id;
    {
      absl::MutexLock lock(&core_->mu);
      const absl::Time deadline = AckDeadline();
      if (deadline == absl::InfiniteFuture()) {
        core_->mu.Await(absl::Condition(core_.get(), &Core::Wakeup));
      } else {
        core_->mu.AwaitWithDeadline(absl::Condition(core_.get(), &Core::Wakeup), deadline);
      }
      stop = core_->stopping;
      if (core_->frame_ready) {
        frame.Swap(&core_->frame);
        core_->frame_ready = false;
        got_frame = true;
        read_outstanding = false;
      }
      stream_ended = core_->read_ended;
      if (stream_ended) read_outstanding = false;
      request_id = core_->ack_request;
      core_->ack_request_seen = core_->ack_request;
    }
    if (stop) {
      if (!draining_) MaybeAck(/*flush=*/true, request_id);
      end_ = SessionEnd{SessionEnd::Kind::kStopped, absl::OkStatus()};
      break;
    }
    if (stream_ended) break;  // The stream's status decides, below.
    // Read one frame ahead while this one is handled.
    if (got_frame) {
      call->ReadNext();
      read_outstanding = true;
    }
    if (draining_) {
      if (absl::Now() >= drain_deadline_) {
        // The server refused the ack as superseded but kept the stream open:
        // trust the refusal (reconnecting could steal the consumer back).
        end_ = SessionEnd{SessionEnd::Kind::kDefinite, drain_cause_};
      }
      continue;
    }
    bool flush = false;
    if (got_frame) {
      if (!Process(frame)) break;
      flush = frame.has_progress();
    }
    if (!MaybeAck(flush, request_id)) break;
  }

  // Wind the call down: cancel unless it ended, let a pending read settle, then
  // let OnDone run and wait for the final status.
  bool ended_by_server = false;
  {
    absl::MutexLock lock(&core_->mu);
    ended_by_server = core_->read_ended;
  }
  if (!ended_by_server) call->context().TryCancel();
  if (read_outstanding) {
    absl::MutexLock lock(&core_->mu);
    core_->mu.Await(absl::Condition(core_.get(), &Core::ReadSettled));
    core_->frame.Clear();  // A frame that raced the cancel: dropped, never handled.
    core_->frame_ready = false;
  }
  call->Release();
  grpc::Status final_status;
  {
    absl::MutexLock lock(&core_->mu);
    core_->mu.Await(absl::Condition(core_.get(), &Core::CallDone));
    final_status = *core_->done;
  }
  // OnDone was called, so the reactor may go; its context goes with it, here,
  // while Subscriber::Run still holds the channel (see Call).
  call.reset();

  if (end_) {
    end_->started = started_;
    return *end_;
  }
  SessionEnd end;
  end.started = started_;
  if (final_status.ok()) {
    end.kind = SessionEnd::Kind::kTransient;
    end.status = absl::UnavailableError(absl::StrCat("Subscribe ", What(),
                                                     ": the server ended the stream without an error"));
  } else {
    end.status = StatusFromGrpc(final_status, absl::StrCat("Subscribe ", What()));
    end.kind = IsRetryable(end.status) ? SessionEnd::Kind::kTransient : SessionEnd::Kind::kDefinite;
  }
  return end;
}

bool Session::Process(SubscribeResponse& frame) {
  auto protocol_error = [&](absl::string_view why) {
    end_ = SessionEnd{SessionEnd::Kind::kDefinite,
                      absl::InternalError(absl::StrCat("Subscribe ", What(), ": the server broke the "
                                                       "protocol: ", why))};
    return false;
  };
  if (frame.has_started()) {
    if (started_) return protocol_error("a second `started` frame");
    started_ = true;
    const walfeed::v1::Started& started = frame.started();
    session_id_ = started.session_id();
    // A durable checkpoint never moves back: below what this process acked, the
    // consumer was removed on the server (RemoveConsumer) or its checkpoint
    // deleted. Resuming would run as a new consumer and silently skip or repeat.
    if (*acked_) {
      absl::StatusOr<EventId> server = started.checkpoint().empty()
                                           ? absl::StatusOr<EventId>(EventId())
                                           : EventId::Parse(started.checkpoint());
      if (!server.ok()) return protocol_error(server.status().message());
      if (*server < **acked_) {
        end_ = SessionEnd{
            SessionEnd::Kind::kDefinite,
            absl::FailedPreconditionError(absl::StrCat(
                "Subscribe ", What(), ": the server's checkpoint for this consumer is ",
                started.checkpoint().empty() ? "none" : started.checkpoint(),
                ", below ", (*acked_)->ToString(),
                " which it acknowledged to this process: the consumer was removed on the "
                "server (RemoveConsumer) or its checkpoint deleted; not resuming as a new "
                "consumer"))};
        return false;
      }
    }
    {
      absl::MutexLock lock(&core_->mu);
      core_->checkpoint = started.checkpoint();
    }
    if (options_.on_started) {
      options_.on_started(SessionInfo{started.session_id(), started.checkpoint(),
                                      started.start_after(), started.slot().name()});
    }
    return true;
  }
  if (!started_) return protocol_error("a frame before `started`");
  if (frame.has_progress()) {
    // Everything delivered is handled by now (batches are handled as they come),
    // so the position the server passed (events our filters left out) is ours to
    // ack: a filtered consumer keeps its checkpoint moving.
    return Pass(frame.progress().passed(), protocol_error);
  }
  if (!frame.has_events()) return true;  // A frame kind added later.

  const std::string passed = frame.events().passed();
  absl::StatusOr<Batch> batch =
      Batch::Create(std::move(*frame.mutable_events()), session_id_, &shapes_);
  if (!batch.ok()) return protocol_error(batch.status().message());
  if (delivered_ && batch->first_id() <= *delivered_) {
    return protocol_error(absl::StrCat("event ", batch->first_id().ToString(),
                                       " does not follow ", delivered_->ToString()));
  }
  delivered_ = batch->last_id();
  {
    absl::MutexLock lock(&core_->mu);
    if (!core_->handed || *core_->handed < *delivered_) core_->handed = delivered_;
  }
  absl::Status handled = handler_(*batch);
  if (!handled.ok()) {
    // What earlier batches finished is acked; this batch comes back after a restart.
    std::optional<EventId> request;
    {
      absl::MutexLock lock(&core_->mu);
      request = core_->ack_request;
    }
    MaybeAck(/*flush=*/true, request);
    end_ = SessionEnd{
        SessionEnd::Kind::kDefinite,
        absl::Status(handled.code(), absl::StrCat("handler failed on events ",
                                                  batch->first_id().ToString(), "..",
                                                  batch->last_id().ToString(), ": ",
                                                  handled.message()))};
    return false;
  }
  handled_ = batch->last_id();
  last_event_ = batch->last_id();
  unacked_events_ += static_cast<uint64_t>(batch->size());
  if (first_unacked_ == absl::InfiniteFuture()) first_unacked_ = absl::Now();
  return Pass(passed, protocol_error);
}

template <typename ProtocolError>
bool Session::Pass(absl::string_view passed, const ProtocolError& protocol_error) {
  if (passed.empty()) return true;
  absl::StatusOr<EventId> id = EventId::Parse(passed);
  if (!id.ok()) return protocol_error(absl::StrCat("passed: ", id.status().message()));
  if (delivered_ && *id < *delivered_) {
    return protocol_error(
        absl::StrCat("passed ", passed, " is below ", delivered_->ToString(), " delivered"));
  }
  delivered_ = *id;
  handled_ = *id;
  return true;
}

bool Session::MaybeAck(bool flush, const std::optional<EventId>& request) {
  if (!started_ || options_.ephemeral) return true;  // An ephemeral session is never acked.
  auto beyond_acked = [&](const EventId& id) { return !*acked_ || **acked_ < id; };
  if (handled_ && !beyond_acked(*handled_)) {
    // Redelivered after a reconnect and acked before: nothing is pending.
    unacked_events_ = 0;
    first_unacked_ = absl::InfiniteFuture();
  }
  std::optional<EventId> target;
  if (!options_.ack.manual() && handled_ && beyond_acked(*handled_)) {
    const bool by_count =
        options_.ack.every_events > 0 && unacked_events_ >= options_.ack.every_events;
    const bool by_time = options_.ack.interval > absl::ZeroDuration() &&
                         absl::Now() >= first_unacked_ + options_.ack.interval;
    if (flush || by_count || by_time) target = handled_;
  }
  // An Ack() request: only as far as this session delivered (the server refuses
  // an id it has not passed to this session). A request that covers the last
  // event delivered covers what the server passed after it too (events our
  // filters left out), so a manually acking consumer never holds the stream.
  if (request && delivered_) {
    const bool covers_all = last_event_ && *last_event_ <= *request;
    const EventId requested = covers_all ? *delivered_ : std::min(*request, *delivered_);
    if (beyond_acked(requested) && (!target || *target < requested)) target = requested;
  }
  // Manual, if asked: what the server passed beyond the last event, once the
  // application acked every event delivered.
  if (options_.ack.manual() && options_.ack_passed_when_manual && flush && delivered_ &&
      beyond_acked(*delivered_) && (!last_event_ || !beyond_acked(*last_event_)) &&
      (!target || *target < *delivered_)) {
    target = delivered_;
  }
  if (!target) return true;
  return SendAck(*target);
}

bool Session::SendAck(const EventId& id) {
  grpc::ClientContext context;
  context.set_deadline(absl::ToChronoTime(absl::Now() + options_.ack_timeout));
  if (!options_.bearer_token.empty()) {
    context.AddMetadata("authorization", "Bearer " + options_.bearer_token);
  }
  AckRequest request;
  request.set_stream(options_.stream);
  request.set_consumer(options_.consumer);
  request.set_session_id(session_id_);
  request.set_event_id(id.ToString());
  AckResponse response;
  const grpc::Status status = stub_->Ack(&context, request, &response);
  if (status.ok()) {
    *acked_ = id;
    if (!handled_ || *handled_ <= id) {
      unacked_events_ = 0;
      first_unacked_ = absl::InfiniteFuture();
    }
    {
      absl::MutexLock lock(&core_->mu);
      core_->checkpoint = response.checkpoint();
    }
    if (options_.on_acked) options_.on_acked(id, response.checkpoint());
    return true;
  }
  const absl::Status failed =
      StatusFromGrpc(status, absl::StrCat("Ack ", id.ToString(), " for ", What()));
  if (failed.code() == absl::StatusCode::kAborted) {
    // Superseded, or the session ended (server shutting down): the stream's own
    // end tells which, so keep reading it for a while.
    draining_ = true;
    drain_cause_ = failed;
    drain_deadline_ = absl::Now() + options_.ack_timeout;
    return true;
  }
  end_ = SessionEnd{
      IsRetryable(failed) ? SessionEnd::Kind::kTransient : SessionEnd::Kind::kDefinite, failed};
  return false;
}

absl::Duration BackoffDelay(const BackoffOptions& backoff, int attempt, absl::BitGen& random) {
  absl::Duration delay = backoff.base;
  for (int i = 0; i < attempt && delay < backoff.cap; ++i) delay *= 2;
  delay = std::min(delay, backoff.cap);
  return absl::Uniform(random, 0.5, 1.0) * delay;
}

}  // namespace

absl::StatusOr<Batch> Batch::Create(walfeed::v1::EventBatch events, std::string session_id,
                                    Shapes* shapes) {
  if (events.events_size() == 0) return absl::InvalidArgumentError("a batch holds no events");
  Batch batch;
  batch.ids_.reserve(static_cast<size_t>(events.events_size()));
  Shapes own;
  if (shapes == nullptr) shapes = &own;
  for (walfeed::v1::RelationShape& shape : *events.mutable_relations()) {
    if (shape.ref() == 0) return absl::InvalidArgumentError("a relation shape with ref 0");
    const uint32_t ref = shape.ref();
    (*shapes)[ref] = std::make_shared<const walfeed::v1::RelationShape>(std::move(shape));
  }
  for (const walfeed::v1::ChangeEvent& event : events.events()) {
    if (event.relation_ref() != 0) {
      auto found = shapes->find(event.relation_ref());
      if (found == shapes->end()) {
        return absl::InvalidArgumentError(absl::StrCat(
            "event ", event.id(), " names relation shape ", event.relation_ref(),
            ", which this session never received"));
      }
      if (batch.shapes_.empty()) batch.shapes_.resize(static_cast<size_t>(events.events_size()));
      batch.shapes_[batch.ids_.size()] = found->second;
    }
    absl::StatusOr<EventId> id = EventId::Parse(event.id());
    if (!id.ok()) return id.status();
    if (!batch.ids_.empty() && *id <= batch.ids_.back()) {
      return absl::InvalidArgumentError(absl::StrCat("event ", id->ToString(), " does not follow ",
                                                     batch.ids_.back().ToString()));
    }
    batch.ids_.push_back(*id);
  }
  batch.events_ = std::move(events);
  batch.session_id_ = std::move(session_id);
  return batch;
}

bool IsRetryable(absl::StatusCode code) {
  switch (code) {
    case absl::StatusCode::kUnavailable:
    case absl::StatusCode::kDeadlineExceeded:
    case absl::StatusCode::kResourceExhausted:
    case absl::StatusCode::kCancelled:
    case absl::StatusCode::kInternal:
    case absl::StatusCode::kUnknown:
      return true;
    default:
      return false;
  }
}

bool IsRetryable(const absl::Status& status) {
  return RetryDelay(status).has_value() || IsRetryable(status.code());
}

Subscriber::Subscriber(SubscriberOptions options)
    : options_(std::move(options)), core_(std::make_shared<internal_subscriber::Core>()) {}

Subscriber::~Subscriber() = default;

void Subscriber::Stop() {
  absl::MutexLock lock(&core_->mu);
  core_->stopping = true;
}

absl::Status Subscriber::Ack(absl::string_view id) {
  absl::StatusOr<EventId> parsed = EventId::Parse(id);
  if (!parsed.ok()) return parsed.status();
  return Ack(*parsed);
}

absl::Status Subscriber::Ack(const EventId& id) {
  absl::MutexLock lock(&core_->mu);
  if (!core_->handed || *core_->handed < id) {
    return absl::FailedPreconditionError(absl::StrCat(
        "cannot ack ", id.ToString(), ": it was not handed to the handler yet (last handed: ",
        core_->handed ? core_->handed->ToString() : "none", ")"));
  }
  if (!core_->ack_request || *core_->ack_request < id) core_->ack_request = id;
  return absl::OkStatus();
}

std::string Subscriber::checkpoint() const {
  absl::MutexLock lock(&core_->mu);
  return core_->checkpoint;
}

absl::Status Subscriber::Run(const Handler& handler) {
  {
    absl::MutexLock lock(&core_->mu);
    if (core_->ran) return absl::FailedPreconditionError("Subscriber::Run may be called once");
    core_->ran = true;
  }
  if (absl::Status valid = Validate(options_); !valid.ok()) return valid;
  absl::StatusOr<std::shared_ptr<grpc::Channel>> channel = CreateChannel(options_);
  if (!channel.ok()) return channel.status();
  std::unique_ptr<ChangeStream::Stub> stub = ChangeStream::NewStub(*channel);

  absl::BitGen random;
  std::optional<EventId> acked;
  std::optional<EventId> start_after;
  if (!options_.start_after.empty()) start_after = *EventId::Parse(options_.start_after);
  int attempt = 0;
  for (;;) {
    {
      absl::MutexLock lock(&core_->mu);
      if (core_->stopping) return absl::OkStatus();
    }
    // The requested start holds until the durable checkpoint reaches it; after
    // that the server's checkpoint is the right place to resume.
    std::string from;
    if (options_.ephemeral) {
      // No checkpoint: resume right after the last event received, if any.
      absl::MutexLock lock(&core_->mu);
      if (core_->handed) {
        from = core_->handed->ToString();
      } else if (start_after) {
        from = start_after->ToString();
      }
    } else if (start_after) {
      absl::StatusOr<EventId> checkpoint = EventId::Parse(this->checkpoint());
      if (!checkpoint.ok() || *checkpoint < *start_after) from = start_after->ToString();
    }
    Session session(options_, core_, stub.get(), handler, &acked);
    const SessionEnd end = session.Run(from);
    switch (end.kind) {
      case SessionEnd::Kind::kStopped:
        return absl::OkStatus();
      case SessionEnd::Kind::kDefinite:
        return end.status;
      case SessionEnd::Kind::kTransient:
        break;
    }
    if (end.started) attempt = 0;
    // Never sooner than the server asked (it may ask for no wait: a reset), and
    // never later than the backoff's cap, whatever it asked.
    const absl::Duration delay =
        std::max(BackoffDelay(options_.backoff, attempt, random),
                 std::min(RetryDelay(end.status).value_or(absl::ZeroDuration()),
                          options_.backoff.cap));
    attempt = std::min(attempt + 1, 30);
    if (options_.on_retry) options_.on_retry(end.status, delay);
    absl::MutexLock lock(&core_->mu);
    core_->mu.AwaitWithTimeout(absl::Condition(core_.get(), &Core::Stopping), delay);
  }
}

}  // namespace walfeed
