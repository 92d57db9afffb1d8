#include "server/change_stream_service.h"

#include <algorithm>
#include <string>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "grpcpp/support/byte_buffer.h"
#include "grpcpp/support/slice.h"
#include "replication/error_reason.h"
#include "server/subscribe_options.h"
#include "spdlog/spdlog.h"

namespace walfeed::server {
namespace {

namespace reason = replication::reason;

// Stream and consumer names: 1-63 of A-Z a-z 0-9 _ . -
absl::Status ValidateName(absl::string_view field, absl::string_view name) {
  const bool ok = !name.empty() && name.size() <= 63 &&
                  std::all_of(name.begin(), name.end(), [](char c) {
                    return absl::ascii_isalnum(static_cast<unsigned char>(c)) || c == '_' ||
                           c == '.' || c == '-';
                  });
  if (ok) return absl::OkStatus();
  return reason::WithReason(
      absl::InvalidArgumentError(absl::StrCat(field, ": \"", absl::CHexEscape(name.substr(0, 80)),
                                              "\" is not a valid ", field,
                                              " name: use 1-63 characters of A-Z a-z 0-9 _ . -")),
      reason::kInvalidRequest, {{"field", std::string(field)}});
}


// The id from the Subscribe's `started` frame (32 hex digits); anything empty or
// far longer is a client bug, not a superseded session.
absl::Status ValidateSessionId(absl::string_view session_id) {
  if (!session_id.empty() && session_id.size() <= 64) return absl::OkStatus();
  return reason::WithReason(
      absl::InvalidArgumentError(
          session_id.empty()
              ? "session_id: empty; send the session_id of the Subscribe call's `started` frame"
              : "session_id: longer than any session id; send the session_id of the Subscribe "
                "call's `started` frame"),
      reason::kInvalidRequest, {{"field", "session_id"}});
}

absl::StatusOr<replication::EventId> ParseId(absl::string_view field, absl::string_view text) {
  absl::StatusOr<replication::EventId> id = replication::EventId::Parse(text);
  if (!id.ok()) {
    return reason::WithReason(
        absl::InvalidArgumentError(absl::StrCat(field, ": ", id.status().message())),
        reason::kInvalidRequest, {{"field", std::string(field)}});
  }
  return id;
}

// A ByteBuffer that takes `bytes` over instead of copying them.
grpc::ByteBuffer OwningBuffer(std::string bytes) {
  auto* owned = new std::string(std::move(bytes));
  grpc::Slice slice(
      owned->data(), owned->size(), [](void* p) { delete static_cast<std::string*>(p); }, owned);
  return grpc::ByteBuffer(&slice, 1);
}

// A Subscribe that ends before it starts: finishes with `status` at once.
class FailedSubscribe : public grpc::ServerWriteReactor<grpc::ByteBuffer> {
 public:
  explicit FailedSubscribe(const grpc::Status& status) { Finish(status); }
  void OnDone() override { delete this; }
};

// One Subscribe call: pulls frames from the runtime, one write in flight.
class SubscribeReactor : public grpc::ServerWriteReactor<grpc::ByteBuffer>,
                         public SessionListener {
 public:
  SubscribeReactor(StreamRuntime* runtime, std::shared_ptr<Session> session,
                   ChangeStreamService::SubscribeCount* count)
      : runtime_(runtime), session_(std::move(session)), count_(count) {
    count_->Add(1);
    session_->Attach(this);
    Pump();
  }

  void Wake() override { Pump(); }

  void OnWriteDone(bool ok) override {
    {
      absl::MutexLock lock(&mu_);
      writing_ = false;
      if (!ok) broken_ = true;  // The client went away; OnCancel follows.
    }
    Pump();
  }

  void OnCancel() override {
    {
      absl::MutexLock lock(&mu_);
      broken_ = true;
    }
    Pump();
  }

  void OnDone() override {
    runtime_->Close(session_);
    count_->Add(-1);  // Its last status was sent.
    delete this;
  }

 private:
  // Sends the next frame, or finishes, unless a write is in flight.
  void Pump() ABSL_LOCKS_EXCLUDED(mu_) {
    std::optional<grpc::Status> finish;
    {
      absl::MutexLock lock(&mu_);
      if (writing_ || finished_) return;
      if (broken_) {
        finished_ = true;
        finish = grpc::Status(grpc::StatusCode::CANCELLED, "the client went away");
      } else {
        std::optional<absl::Status> end;
        std::string bytes;
        if (runtime_->NextFrame(*session_, &bytes, &end)) {
          writing_ = true;
          frame_ = OwningBuffer(std::move(bytes));
        } else if (end) {
          finished_ = true;
          finish = ToGrpc(*end);
        } else {
          return;  // Woken when there is news.
        }
      }
    }
    // Outside the lock: gRPC may run reactions inline.
    if (finish) {
      Finish(*finish);
    } else {
      StartWrite(&frame_);
    }
  }

  StreamRuntime* const runtime_;
  const std::shared_ptr<Session> session_;
  ChangeStreamService::SubscribeCount* const count_;
  absl::Mutex mu_;
  bool writing_ ABSL_GUARDED_BY(mu_) = false;
  bool finished_ ABSL_GUARDED_BY(mu_) = false;
  bool broken_ ABSL_GUARDED_BY(mu_) = false;
  grpc::ByteBuffer frame_;  // Owned by the write in flight while writing_.
};

}  // namespace

absl::Status ValidateConsumerName(absl::string_view consumer) {
  return ValidateName("consumer", consumer);
}

ChangeStreamService::ChangeStreamService(std::map<std::string, StreamRuntime*> streams,
                                         const TokenAuthorizer* authorizer, WorkerPool* pool,
                                         WorkerPool* status_pool, SessionLimits defaults)
    : streams_(std::move(streams)),
      authorizer_(authorizer),
      pool_(pool),
      status_pool_(status_pool),
      defaults_(defaults) {}

absl::Status ChangeStreamService::Authorize(grpc::CallbackServerContext* context, Right right,
                                            absl::string_view stream) const {
  if (authorizer_ == nullptr) return absl::OkStatus();
  const auto& metadata = context->client_metadata();
  auto it = metadata.find("authorization");
  const absl::string_view header =
      it == metadata.end() ? absl::string_view()
                           : absl::string_view(it->second.data(), it->second.size());
  return authorizer_->Authorize(header, right, stream);
}

absl::StatusOr<StreamRuntime*> ChangeStreamService::Find(absl::string_view stream) const {
  if (absl::Status valid = ValidateName("stream", stream); !valid.ok()) return valid;
  auto it = streams_.find(std::string(stream));
  if (it != streams_.end()) return it->second;
  std::string known;
  for (const auto& [name, runtime] : streams_) absl::StrAppend(&known, known.empty() ? "" : ", ", name);
  return reason::WithReason(
      absl::NotFoundError(absl::StrCat("stream: no stream named \"", stream.substr(0, 80),
                                       "\" is configured on this server (streams: ", known, ")")),
      reason::kStreamNotFound, {{"stream", std::string(stream.substr(0, 80))}});
}

grpc::ServerWriteReactor<grpc::ByteBuffer>* ChangeStreamService::Subscribe(
    grpc::CallbackServerContext* context, const grpc::ByteBuffer* raw_request) {
  walfeed::v1::SubscribeRequest parsed;
  if (grpc::ByteBuffer copy(*raw_request);  // Shares the slices; Deserialize consumes it.
      !grpc::SerializationTraits<walfeed::v1::SubscribeRequest>::Deserialize(&copy, &parsed)
           .ok()) {
    return new FailedSubscribe(ToGrpc(reason::WithReason(
        absl::InvalidArgumentError("the request is not a walfeed.v1.SubscribeRequest"),
        reason::kInvalidRequest)));
  }
  {
    absl::MutexLock lock(&mu_);
    if (stopping_) return new FailedSubscribe(ToGrpc(*stopping_));
  }
  const walfeed::v1::SubscribeRequest* request = &parsed;
  absl::Status status = Authorize(context, Right::kSubscribe, request->stream());
  if (!status.ok()) return new FailedSubscribe(ToGrpc(status));
  absl::StatusOr<StreamRuntime*> runtime = Find(request->stream());
  if (!runtime.ok()) return new FailedSubscribe(ToGrpc(runtime.status()));
  // An ephemeral subscription needs no consumer name (it only labels logs).
  if (!(request->ephemeral() && request->consumer().empty())) {
    if (status = ValidateConsumerName(request->consumer()); !status.ok()) {
      return new FailedSubscribe(ToGrpc(status));
    }
  }
  std::optional<replication::EventId> start_after;
  if (!request->start_after().empty()) {
    absl::StatusOr<replication::EventId> id = ParseId("start_after", request->start_after());
    if (!id.ok()) return new FailedSubscribe(ToGrpc(id.status()));
    start_after = *id;
  }
  absl::StatusOr<SessionOptions> options = SessionOptionsFor(*request, defaults_);
  if (!options.ok()) return new FailedSubscribe(ToGrpc(options.status()));
  absl::StatusOr<OpenedSession> opened =
      (*runtime)->Open(request->consumer(), start_after, std::move(*options));
  if (!opened.ok()) return new FailedSubscribe(ToGrpc(opened.status()));
  return new SubscribeReactor(*runtime, std::move(opened->session), &subscriptions_);
}

grpc::ServerUnaryReactor* ChangeStreamService::Ack(grpc::CallbackServerContext* context,
                                                   const walfeed::v1::AckRequest* request,
                                                   walfeed::v1::AckResponse* response) {
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  absl::Status status = Authorize(context, Right::kSubscribe, request->stream());
  absl::StatusOr<StreamRuntime*> runtime = Find(request->stream());
  absl::StatusOr<replication::EventId> id = ParseId("event_id", request->event_id());
  if (status.ok() && !runtime.ok()) status = runtime.status();
  if (status.ok()) status = ValidateConsumerName(request->consumer());
  if (status.ok()) status = ValidateSessionId(request->session_id());
  if (status.ok() && !id.ok()) status = id.status();
  if (!status.ok()) {
    reactor->Finish(ToGrpc(status));
    return reactor;
  }
  const std::optional<UnaryCalls::Id> call = calls_.Open(reactor);
  if (!call) return reactor;
  pool_->Run([this, call = *call, consumer = request->consumer(),
              session_id = request->session_id(), response, runtime = *runtime, id = *id] {
    absl::StatusOr<AckOutcome> outcome = runtime->Ack(consumer, session_id, id);
    calls_.Finish(call, ToGrpc(outcome.status()), [&] {
      response->set_checkpoint(outcome->checkpoint.ToStringOrEmpty());
      response->set_confirmed_lsn(outcome->confirmed.ToString());
    });
  });
  return reactor;
}

grpc::ServerUnaryReactor* ChangeStreamService::RemoveConsumer(
    grpc::CallbackServerContext* context, const walfeed::v1::RemoveConsumerRequest* request,
    walfeed::v1::RemoveConsumerResponse* response) {
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  absl::Status status = Authorize(context, Right::kAdmin, request->stream());
  absl::StatusOr<StreamRuntime*> runtime = Find(request->stream());
  if (status.ok() && !runtime.ok()) status = runtime.status();
  if (status.ok()) status = ValidateConsumerName(request->consumer());
  if (!status.ok()) {
    reactor->Finish(ToGrpc(status));
    return reactor;
  }
  // Blocks on the durable delete (and on the consumer's acks in flight).
  const std::optional<UnaryCalls::Id> call = calls_.Open(reactor);
  if (!call) return reactor;
  pool_->Run([this, call = *call, consumer = request->consumer(), response,
              runtime = *runtime] {
    absl::StatusOr<replication::EventId> checkpoint = runtime->RemoveConsumer(consumer);
    calls_.Finish(call, ToGrpc(checkpoint.status()), [&] {
      response->set_checkpoint(checkpoint->ToStringOrEmpty());
    });
  });
  return reactor;
}

grpc::ServerUnaryReactor* ChangeStreamService::ResetConsumer(
    grpc::CallbackServerContext* context, const walfeed::v1::ResetConsumerRequest* request,
    walfeed::v1::ResetConsumerResponse* response) {
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  absl::Status status = Authorize(context, Right::kAdmin, request->stream());
  absl::StatusOr<StreamRuntime*> runtime = Find(request->stream());
  if (status.ok() && !runtime.ok()) status = runtime.status();
  if (status.ok()) status = ValidateConsumerName(request->consumer());
  std::optional<replication::EventId> to;
  if (status.ok() && request->to().empty() == !request->to_head()) {
    status = reason::WithReason(
        absl::InvalidArgumentError(
            "give exactly one of `to` (an event id) and `to_head` (the newest event held)"),
        reason::kInvalidRequest, {{"field", "to"}});
  }
  if (status.ok() && !request->to().empty()) {
    absl::StatusOr<replication::EventId> id = ParseId("to", request->to());
    if (id.ok()) {
      to = *id;
    } else {
      status = id.status();
    }
  }
  if (!status.ok()) {
    reactor->Finish(ToGrpc(status));
    return reactor;
  }
  // Blocks on the durable write (and on the consumer's acks in flight).
  const std::optional<UnaryCalls::Id> call = calls_.Open(reactor);
  if (!call) return reactor;
  pool_->Run([this, call = *call, consumer = request->consumer(), response, runtime = *runtime,
              to] {
    absl::StatusOr<StreamRuntime::ResetOutcome> reset = runtime->ResetConsumer(consumer, to);
    calls_.Finish(call, ToGrpc(reset.status()), [&] {
      response->set_previous_checkpoint(reset->previous.ToStringOrEmpty());
      response->set_checkpoint(reset->checkpoint.ToStringOrEmpty());
    });
  });
  return reactor;
}

grpc::ServerUnaryReactor* ChangeStreamService::GetStatus(
    grpc::CallbackServerContext* context, const walfeed::v1::GetStatusRequest* request,
    walfeed::v1::GetStatusResponse* response) {
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  std::vector<StreamRuntime*> selected;
  if (!request->stream().empty()) {
    absl::Status status = Authorize(context, Right::kStatus, request->stream());
    absl::StatusOr<StreamRuntime*> runtime = Find(request->stream());
    if (status.ok() && !runtime.ok()) status = runtime.status();
    if (!status.ok()) {
      reactor->Finish(ToGrpc(status));
      return reactor;
    }
    selected.push_back(*runtime);
  } else {
    absl::Status last_denial;
    for (const auto& [name, runtime] : streams_) {
      absl::Status status = Authorize(context, Right::kStatus, name);
      if (status.ok()) {
        selected.push_back(runtime);
      } else {
        last_denial = status;
      }
    }
    if (selected.empty() && !last_denial.ok()) {
      reactor->Finish(ToGrpc(last_denial));
      return reactor;
    }
  }
  // Session ids are what an Ack must name: only callers that may administer a
  // stream see its consumers' (without tokens, every caller may).
  std::vector<bool> show_sessions;
  for (StreamRuntime* runtime : selected) {
    show_sessions.push_back(Authorize(context, Right::kAdmin, runtime->name()).ok());
  }
  const std::optional<UnaryCalls::Id> call = calls_.Open(reactor);
  if (!call) return reactor;
  // On its own pool: a client polling status hard, or a database slow to
  // answer the slot query, must not hold the workers acks wait on.
  // The wait counts from the call's arrival, not from when a worker is free.
  const absl::Time asked = absl::Now();
  status_pool_->Run([this, call = *call, response, selected, show_sessions, asked] {
    if (!calls_.IsOpen(call)) return;  // Answered by a shutdown meanwhile.
    // Every stream's slot read starts now; each waits for the same deadline.
    for (StreamRuntime* runtime : selected) runtime->WantSlot();
    const absl::Time deadline = asked + kSlotReadWait;
    walfeed::v1::GetStatusResponse built;
    for (size_t s = 0; s < selected.size(); ++s) {
      StreamRuntime* runtime = selected[s];
      const RuntimeSnapshot snapshot = runtime->Snapshot();
      walfeed::v1::StreamStatus* stream = built.add_streams();
      stream->set_name(snapshot.name);
      stream->set_state(snapshot.state);
      stream->set_error(snapshot.error);
      stream->set_active(snapshot.active);
      stream->set_stored_confirmed_lsn(snapshot.confirmed.ToString());
      walfeed::v1::SlotInfo* slot = stream->mutable_slot();
      slot->set_name(snapshot.slot_name);
      const SlotMonitor::View view = runtime->SlotView(asked, deadline);
      const Lsn server_lsn = ServerLsnOf(snapshot, view);
      if (view.report) {
        SetTime(view.read_at, stream->mutable_slot_read_at());
      }
      // An error first: the latest read failed (the figures below are older),
      // or PostgreSQL did not answer in time.
      if (stream->error().empty() && view.error) {
        stream->set_error(absl::StrCat("could not read the slot: ", view.error->message()));
      } else if (stream->error().empty() && !view.fresh) {
        stream->set_error(absl::StrCat("PostgreSQL did not answer the slot query within ",
                                       absl::FormatDuration(kSlotReadWait)));
      }
      if (view.report) {
        if (!view.fresh || view.error) {
          absl::StrAppend(stream->mutable_error(), stream->error().empty() ? "" : "; ",
                          "the slot figures are from ",
                          absl::FormatDuration(
                              absl::Trunc(absl::Now() - view.read_at, absl::Seconds(1))),
                          " ago");
        }
        if (const std::optional<replication::SlotState>& state = view.report->slot) {
          slot->set_plugin(state->plugin);
          slot->set_active(state->active);
          slot->set_confirmed_flush_lsn(state->confirmed_flush.ToString());
          slot->set_restart_lsn(state->restart_lsn.ToString());
          slot->set_wal_status(state->wal_status);
          slot->set_retained_wal_bytes(RetainedWalBytes(*state, server_lsn));
        } else {
          slot->set_wal_status("missing");
        }
      }
      stream->set_server_wal_lsn(server_lsn.ToString());
      stream->set_buffered_events(snapshot.buffered_events);
      stream->set_buffered_bytes(snapshot.buffered_bytes);
      stream->set_spilled_bytes(snapshot.spilled_bytes);
      stream->set_retention_bytes(snapshot.retention_bytes);
      stream->set_ephemeral_sessions(static_cast<uint32_t>(snapshot.ephemeral_sessions));
      if (!snapshot.held_by.empty()) {
        stream->set_held_by(snapshot.held_by);
        SetTime(snapshot.held_since, stream->mutable_held_since());
      }
      for (const ConsumerSnapshot& c : snapshot.consumers) {
        walfeed::v1::ConsumerStatus* consumer = stream->add_consumers();
        consumer->set_name(c.name);
        consumer->set_checkpoint(c.checkpoint.ToStringOrEmpty());
        if (show_sessions[s]) consumer->set_session_id(c.session_id);
        consumer->set_unacked_events(c.unacked_events);
        consumer->set_held_bytes(c.held_bytes);
        consumer->set_detached(c.detached);
        consumer->set_lag_bytes(LagBytes(snapshot, c, server_lsn));
      }
      if (runtime->backfills() != nullptr) {
        for (const BackfillView& view : runtime->backfills()->List(/*running_only=*/true)) {
          BackfillToProto(view, stream->add_backfills());
        }
      }
    }
    calls_.Finish(call, grpc::Status::OK, [&] { response->Swap(&built); });
  });
  return reactor;
}

void ChangeStreamService::SubscribeCount::Add(int delta) {
  absl::MutexLock lock(&mu_);
  live_ += delta;
}

bool ChangeStreamService::SubscribeCount::AwaitNone(absl::Time deadline) {
  absl::MutexLock lock(&mu_);
  auto none = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return live_ == 0; };
  return mu_.AwaitWithDeadline(absl::Condition(&none), deadline);
}

bool ChangeStreamService::AwaitSubscriptionsDone(absl::Time deadline) {
  return subscriptions_.AwaitNone(deadline);
}

void ChangeStreamService::Stop(const absl::Status& why) {
  {
    absl::MutexLock lock(&mu_);
    stopping_ = why;
  }
  // A unary call cut short may have taken effect already: say so.
  calls_.Stop(ToGrpc(reason::WithReason(
      absl::UnavailableError(absl::StrCat(
          why.message(),
          "; a call the server was still answering may or may not have taken effect: retry an "
          "Ack (acks are cumulative), check GetStatus after RemoveConsumer or ResetConsumer")),
      reason::kServerStopping)));
}

}  // namespace walfeed::server
