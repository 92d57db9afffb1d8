#include "server/stream_runtime.h"

#include <algorithm>
#include <string>
#include <vector>

#include "absl/cleanup/cleanup.h"
#include "absl/strings/str_cat.h"
#include "replication/retry.h"
#include "server/event_convert.h"
#include "server/events_frame.h"
#include "spdlog/spdlog.h"

namespace walfeed::server {
namespace {

std::shared_ptr<spdlog::logger> Logger() {
  static std::shared_ptr<spdlog::logger> logger = [] {
    std::shared_ptr<spdlog::logger> existing = spdlog::get("stream");
    return existing ? existing : spdlog::default_logger()->clone("stream");
  }();
  return logger;
}

std::string IdText(EventId id) { return id == EventId{} ? "" : id.ToString(); }
std::string IdOrNone(EventId id) { return id == EventId{} ? "none" : id.ToString(); }

}  // namespace

void Session::Wake() {
  absl::MutexLock lock(&listener_mu_);
  if (listener_ != nullptr) listener_->Wake();
}

void Session::Attach(SessionListener* listener) {
  absl::MutexLock lock(&listener_mu_);
  listener_ = listener;
}

void Session::Detach() {
  absl::MutexLock lock(&listener_mu_);
  listener_ = nullptr;
}

StreamRuntime::StreamRuntime(RuntimeOptions options,
                             std::function<void(walfeed::v1::StreamState)> on_state)
    : options_(std::move(options)), on_state_(std::move(on_state)) {}

StreamRuntime::~StreamRuntime() { Stop(absl::UnavailableError("walfeed-server is stopping")); }

void StreamRuntime::Start() { pipeline_ = std::thread([this] { Pipeline(); }); }

void StreamRuntime::Stop(const absl::Status& why) {
  std::vector<std::shared_ptr<Session>> ended;
  std::shared_ptr<replication::pg::StreamReader> reader;
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
    reader = reader_;
    for (auto& [name, consumer] : consumers_) {
      if (consumer.active) ended.push_back(EndLocked(consumer.active, why));
      consumer.active.reset();
    }
  }
  WakeAll(ended);
  if (reader) reader->Stop();
  if (pipeline_.joinable()) pipeline_.join();
}

bool StreamRuntime::WaitForStop(absl::Duration delay) {
  absl::MutexLock lock(&mu_);
  mu_.AwaitWithTimeout(absl::Condition(&stopping_), delay);
  return stopping_;
}

void StreamRuntime::SetState(walfeed::v1::StreamState state, std::string error) {
  bool changed;
  {
    absl::MutexLock lock(&mu_);
    if (failed_) return;  // Failure is final.
    changed = state_ != state;
    state_ = state;
    error_ = std::move(error);
  }
  if (changed && on_state_) on_state_(state);
}

void StreamRuntime::Fail(const absl::Status& status) {
  std::vector<std::shared_ptr<Session>> ended;
  {
    absl::MutexLock lock(&mu_);
    failed_ = status;
    state_ = walfeed::v1::STREAM_STATE_FAILED;
    error_ = std::string(status.message());
    for (auto& [name, consumer] : consumers_) {
      if (consumer.active) ended.push_back(EndLocked(consumer.active, status));
      consumer.active.reset();
    }
  }
  Logger()->error("stream {}: failed, no longer streaming: {}", name(), status.ToString());
  WakeAll(ended);
  if (on_state_) on_state_(walfeed::v1::STREAM_STATE_FAILED);
}

bool StreamRuntime::Prepare(replication::pg::PreparedStream* prepared) {
  replication::Backoff backoff(options_.retry_base, options_.retry_cap, /*seed=*/1);
  std::shared_ptr<replication::GroupCommitter> committer;
  for (;;) {
    absl::Status status;
    if (!committer) {
      absl::StatusOr<std::unique_ptr<replication::pg::PgCheckpointStore>> store =
          replication::pg::PgCheckpointStore::Open(
              {options_.checkpoint_conninfo.empty() ? options_.config.conninfo
                                                    : options_.checkpoint_conninfo,
               options_.checkpoint_schema});
      if (store.ok()) {
        store_ = std::move(*store);
        committer = std::make_shared<replication::GroupCommitter>(store_.get());
      } else {
        status = store.status();
      }
    }
    if (committer) {
      absl::StatusOr<replication::pg::PreparedStream> result = replication::pg::PrepareStream(
          options_.config, committer.get(), options_.checkpoint_schema);
      if (result.ok()) {
        *prepared = std::move(*result);
        confirmed_store_ = std::make_unique<replication::pg::CommittedConfirmedStore>(
            committer.get(), name());
        absl::MutexLock lock(&mu_);
        committer_ = committer;
        return true;
      }
      status = result.status();
    }
    if (!replication::IsTransient(status)) {
      Fail(status);
      return false;
    }
    const absl::Duration delay = backoff.Next();
    Logger()->warn("stream {}: cannot start yet: {}; retrying in {}", name(), status.ToString(),
                   absl::FormatDuration(delay));
    SetState(walfeed::v1::STREAM_STATE_CONNECTING, std::string(status.message()));
    if (WaitForStop(delay)) return false;
  }
}

void StreamRuntime::Pipeline() {
  auto prepared = std::make_unique<replication::pg::PreparedStream>();
  if (!Prepare(prepared.get())) return;
  const replication::StartPlan& plan = prepared->plan;
  for (const std::string& warning : prepared->provisioned.report.warnings) {
    Logger()->warn("stream {}: {}", name(), warning);
  }
  for (const std::string& warning : plan.warnings) Logger()->warn("stream {}: {}", name(), warning);
  if (prepared->provisioned.created_publication || prepared->provisioned.created_slot) {
    Logger()->info("stream {}: created {}{}", name(),
                   prepared->provisioned.created_publication ? "publication(s); " : "",
                   prepared->provisioned.created_slot
                       ? absl::StrCat("slot ", options_.config.slot_name, " at ",
                                      prepared->provisioned.consistent_point.ToString())
                       : "");
  }

  replication::pg::ReaderOptions reader_options =
      replication::pg::ReaderOptionsFor(options_.config, *prepared, options_.checkpoint_schema);
  reader_options.max_feedback_interval = options_.max_feedback_interval;
  reader_options.min_persist_interval = options_.min_persist_interval;
  reader_options.read_coalesce = options_.read_coalesce;
  auto tracker = std::make_shared<replication::AckTracker>(plan.start);
  std::shared_ptr<replication::pg::StreamReader> reader;
  {
    absl::MutexLock lock(&mu_);
    if (stopping_) return;
    for (const auto& [consumer, checkpoint] : plan.consumers) {
      consumers_[consumer].checkpoint = checkpoint;
    }
    for (const auto& [consumer, state] : consumers_) {
      (void)tracker->AddConsumer(consumer, state.checkpoint);
    }
    trimmed_ = plan.deliver_after;
    newest_ = plan.deliver_after;
    tracker_ = tracker;
    reader = std::make_shared<replication::pg::StreamReader>(std::move(reader_options),
                                                             tracker.get(), this,
                                                             confirmed_store_.get());
    reader_ = reader;
  }
  Logger()->info("stream {}: starting slot {} at {} with {} consumer checkpoint(s)", name(),
                 options_.config.slot_name, plan.start.ToString(), plan.consumers.size());
  const absl::Status result = reader->Run(plan.start);
  if (!result.ok()) Fail(result);
}

std::shared_ptr<Session> StreamRuntime::EndLocked(const std::shared_ptr<Session>& session,
                                                  absl::Status status) {
  if (!session->end_) session->end_ = std::move(status);
  return session;
}

void StreamRuntime::WakeAll(const std::vector<std::shared_ptr<Session>>& sessions) {
  for (const std::shared_ptr<Session>& session : sessions) session->Wake();
}

std::vector<std::shared_ptr<Session>> StreamRuntime::TakeWaitingLocked() {
  std::vector<std::shared_ptr<Session>> waiting;
  for (auto& [name, consumer] : consumers_) {
    if (consumer.active && consumer.active->waiting_) {
      consumer.active->waiting_ = false;
      waiting.push_back(consumer.active);
    }
  }
  return waiting;
}

absl::StatusOr<OpenedSession> StreamRuntime::Open(const std::string& consumer,
                                                  std::optional<EventId> start_after,
                                                  SessionOptions options) {
  std::shared_ptr<Session> superseded;
  OpenedSession opened;
  {
    absl::MutexLock lock(&mu_);
    if (failed_) return *failed_;
    if (stopping_) return absl::UnavailableError("walfeed-server is stopping");
    if (!tracker_) {
      return absl::UnavailableError(absl::StrCat(
          "stream \"", name(), "\" is still connecting to PostgreSQL", error_.empty() ? "" : ": ",
          error_, "; retry shortly"));
    }
    // Refusals first: a refused Subscribe must not register the consumer.
    if (auto known = consumers_.find(consumer);
        known != consumers_.end() && known->second.removing) {
      // Not UNAVAILABLE: a client retrying would come back as a new consumer
      // once the removal is done and silently skip what it never acked.
      return absl::AbortedError(absl::StrCat("consumer \"", consumer,
                                             "\" is being removed (RemoveConsumer)"));
    }
    if (start_after) {
      auto known = consumers_.find(consumer);
      const EventId checkpoint = known == consumers_.end() ? EventId{} : known->second.checkpoint;
      if (*start_after < checkpoint) {  // Never for a new consumer.
        return absl::OutOfRangeError(absl::StrCat(
            "start_after ", start_after->ToString(), " is below consumer \"", consumer,
            "\"'s checkpoint ", checkpoint.ToString(),
            ": events up to the checkpoint were acked and may no longer be available; start "
            "after the checkpoint (leave start_after empty) or after a later id"));
      }
      if (*start_after < trimmed_) {
        // Starting at trimmed_ instead would silently skip the events in between.
        return absl::OutOfRangeError(absl::StrCat(
            "start_after ", start_after->ToString(), " is below what stream \"", name(),
            "\" still holds: every event up to ", trimmed_.ToString(),
            " was acked by all its consumers and is no longer available to consumer \"",
            consumer, "\"; start after ", trimmed_.ToString(),
            " or a later id, or leave start_after empty"));
      }
    }
    auto [it, inserted] = consumers_.try_emplace(consumer);
    Consumer& state = it->second;
    if (inserted) {
      // A new consumer starts at the oldest event still held for the stream.
      (void)tracker_->AddConsumer(consumer, EventId{});
    }
    EventId start = inserted ? trimmed_ : state.checkpoint;
    if (start_after) start = std::max(start, *start_after);
    static std::atomic<uint64_t> counter{0};
    const std::string session_id =
        absl::StrCat(absl::Hex(absl::ToUnixNanos(absl::Now()), absl::kZeroPad16), "-",
                     absl::Hex(++counter, absl::kZeroPad8));
    auto session = std::make_shared<Session>(session_id, consumer, std::move(options));
    session->cursor_ = start;
    if (state.active) {
      superseded = EndLocked(
          state.active,
          absl::AbortedError(absl::StrCat("session ", state.active->id(), " of consumer \"",
                                          consumer, "\" was superseded by a newer Subscribe (",
                                          session_id, ")")));
    }
    state.active = session;
    opened.session = session;
    opened.checkpoint = state.checkpoint;
    opened.start_after = start;
  }
  if (superseded) {
    Logger()->info("stream {}: consumer {} session {} superseded by {}", name(), consumer,
                   superseded->id(), opened.session->id());
    superseded->Wake();
  }
  Logger()->info("stream {}: consumer {} subscribed (session {}, checkpoint {}, delivering after {})",
                 name(), consumer, opened.session->id(), IdOrNone(opened.checkpoint),
                 IdOrNone(opened.start_after));
  return opened;
}

void StreamRuntime::Close(const std::shared_ptr<Session>& session) {
  session->Detach();
  absl::MutexLock lock(&mu_);
  auto it = consumers_.find(session->consumer());
  if (it != consumers_.end() && it->second.active == session) it->second.active.reset();
}

bool StreamRuntime::NextFrame(Session& session, std::string* frame,
                              std::optional<absl::Status>* end) {
  absl::MutexLock lock(&mu_);
  walfeed::v1::SubscribeResponse response;
  if (!session.started_sent_) {
    session.started_sent_ = true;
    walfeed::v1::Started* started = response.mutable_started();
    started->set_session_id(session.id());
    auto it = consumers_.find(session.consumer());
    if (it != consumers_.end()) started->set_checkpoint(IdText(it->second.checkpoint));
    started->set_start_after(IdText(session.cursor_));
    started->mutable_slot()->set_name(options_.config.slot_name);
    started->mutable_slot()->set_plugin("pgoutput");
    response.SerializeToString(frame);
    session.last_frame_ = absl::Now();
    return true;
  }
  if (session.end_) {
    *end = session.end_;
    return false;
  }
  if (FillEventsLocked(session, frame)) {
    session.last_frame_ = absl::Now();
    return true;
  }
  const absl::Time now = absl::Now();
  if (now - session.last_frame_ >= session.options().progress_interval) {
    FillProgressLocked(session, response.mutable_progress());
    response.SerializeToString(frame);
    session.last_frame_ = now;
    return true;
  }
  session.waiting_ = true;
  return false;
}

bool StreamRuntime::FillEventsLocked(Session& session, std::string* frame) {
  const SessionOptions& options = session.options();
  auto window_open = [&] {
    return session.unacked_.size() < options.max_unacked_events &&
           session.unacked_bytes_ < options.max_unacked_bytes;
  };
  if (!window_open()) return false;
  auto it = std::upper_bound(buffer_.begin(), buffer_.end(), session.cursor_,
                             [](EventId id, const Buffered& b) { return id < b.id; });
  std::vector<const std::string*> batch;  // Stable: the buffer is locked until composed.
  size_t bytes = 0;
  for (; it != buffer_.end(); ++it) {
    if (!batch.empty() && (batch.size() >= options.max_batch_events ||
                           bytes + it->bytes > options.max_batch_bytes || !window_open())) {
      break;
    }
    session.cursor_ = it->id;
    if (!options.filter.Matches(it->key)) continue;
    batch.push_back(&it->serialized);
    bytes += it->bytes;
    session.unacked_.emplace_back(it->id, it->bytes);
    session.unacked_bytes_ += it->bytes;
  }
  if (batch.empty()) return false;
  ComposeEventsFrame(batch, frame);
  return true;
}

void StreamRuntime::FillProgressLocked(const Session& session, walfeed::v1::Progress* progress) {
  Lsn server_end;
  if (reader_) server_end = reader_->stats().server_wal_end;
  progress->set_server_wal_lsn(server_end.ToString());
  progress->set_last_delivered(
      session.unacked_.empty() ? "" : session.unacked_.back().first.ToString());
  EventId checkpoint;
  auto it = consumers_.find(session.consumer());
  if (it != consumers_.end()) checkpoint = it->second.checkpoint;
  progress->set_checkpoint(IdText(checkpoint));
  progress->set_unacked_events(session.unacked_.size());
  const Lsn from = checkpoint.commit_lsn.valid() ? checkpoint.commit_lsn : Lsn::kInvalid;
  progress->set_lag_bytes(from.valid() && server_end > from ? server_end.value() - from.value()
                                                            : 0);
}

absl::StatusOr<AckOutcome> StreamRuntime::Ack(const std::string& consumer,
                                              const std::string& session_id, EventId id) {
  std::shared_ptr<replication::AckTracker> tracker;
  std::shared_ptr<replication::GroupCommitter> committer;
  {
    absl::MutexLock lock(&mu_);
    if (failed_) return *failed_;
    auto it = consumers_.find(consumer);
    if (it == consumers_.end()) {
      return absl::NotFoundError(absl::StrCat("stream \"", name(), "\" has no consumer \"",
                                              consumer,
                                              "\" (it never subscribed, or was removed)"));
    }
    const Consumer& state = it->second;
    if (!state.active || state.active->id() != session_id) {
      return absl::AbortedError(absl::StrCat(
          "session \"", session_id, "\" is not the active session of consumer \"", consumer,
          "\"",
          state.active ? absl::StrCat(" (superseded by ", state.active->id(), ")")
                       : " (it ended)",
          ": acks must come from the newest Subscribe, which resumes after the checkpoint"));
    }
    if (id <= state.checkpoint) {
      return AckOutcome{state.checkpoint, reader_ ? reader_->stats().confirmed_sent : Lsn()};
    }
    if (state.active->cursor_ < id) {
      return absl::OutOfRangeError(absl::StrCat(
          "event ", id.ToString(), " was not delivered to consumer \"", consumer,
          "\" in this session (last passed: ", IdText(state.active->cursor_), ")"));
    }
    tracker = tracker_;
    committer = committer_;
    // Until this ack's durable write is over, a removal of the consumer waits (and
    // so the consumer stays in consumers_).
    ++it->second.acks_in_flight;
  }
  // On the early returns; the normal path counts the ack out in its last block.
  absl::Cleanup landed = [this, &consumer] {
    absl::MutexLock lock(&mu_);
    if (auto it = consumers_.find(consumer); it != consumers_.end()) --it->second.acks_in_flight;
  };
  absl::Status delivered = tracker->CheckDelivered(id);
  if (!delivered.ok()) return delivered;
  absl::Status durable = committer->AckDurably(name(), consumer, id);
  if (!durable.ok()) {
    return absl::UnavailableError(absl::StrCat("could not store the ack durably: ",
                                               durable.message(), "; retry the Ack"));
  }
  if (absl::Status tracked = tracker->Ack(consumer, id); !tracked.ok()) {
    Logger()->warn("stream {}: consumer {}: ack {} stored but not tracked: {}", name(), consumer,
                   id.ToString(), tracked.ToString());
  }
  AckOutcome outcome;
  std::vector<std::shared_ptr<Session>> wake;
  std::shared_ptr<replication::pg::StreamReader> reader;
  {
    absl::MutexLock lock(&mu_);
    auto it = consumers_.find(consumer);
    if (it != consumers_.end()) {
      Consumer& state = it->second;
      --state.acks_in_flight;
      std::move(landed).Cancel();
      state.checkpoint = std::max(state.checkpoint, id);
      outcome.checkpoint = state.checkpoint;
      if (state.active) {
        Session& session = *state.active;
        while (!session.unacked_.empty() && session.unacked_.front().first <= id) {
          session.unacked_bytes_ -= session.unacked_.front().second;
          session.unacked_.pop_front();
        }
      }
    }
    TrimLocked();
    wake = TakeWaitingLocked();
    reader = reader_;
    if (reader) outcome.confirmed = reader->stats().confirmed_sent;
  }
  WakeAll(wake);
  if (reader) reader->Wake();  // The buffer may have room again.
  return outcome;
}

absl::StatusOr<EventId> StreamRuntime::RemoveConsumer(const std::string& consumer) {
  std::shared_ptr<Session> ended;
  std::shared_ptr<replication::AckTracker> tracker;
  std::shared_ptr<replication::GroupCommitter> committer;
  {
    absl::MutexLock lock(&mu_);
    // The stream's own state first: before it is prepared, consumers_ is not
    // loaded yet and "no such consumer" would be a lie.
    if (failed_) return *failed_;
    if (stopping_) return absl::UnavailableError("walfeed-server is stopping");
    if (!tracker_ || !committer_) {
      return absl::UnavailableError(
          absl::StrCat("stream \"", name(), "\" is still connecting to PostgreSQL; retry shortly"));
    }
    auto it = consumers_.find(consumer);
    if (it == consumers_.end()) {
      return absl::NotFoundError(absl::StrCat("stream \"", name(), "\" has no consumer \"",
                                              consumer, "\" (never subscribed, or already removed)"));
    }
    Consumer& state = it->second;
    if (state.removing) {
      return absl::AbortedError(absl::StrCat("consumer \"", consumer,
                                             "\" is being removed by another call"));
    }
    state.removing = true;
    if (state.active) {
      ended = EndLocked(state.active,
                        absl::AbortedError(absl::StrCat("consumer \"", consumer,
                                                        "\" was removed (RemoveConsumer)")));
      state.active.reset();
    }
    tracker = tracker_;
    committer = committer_;
  }
  if (ended) ended->Wake();
  EventId checkpoint;
  {
    // Acks that passed their checks before the session ended finish first: one
    // stored after the delete would bring the checkpoint back.
    absl::MutexLock lock(&mu_);
    auto none_in_flight = [this, &consumer]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
      auto it = consumers_.find(consumer);
      return it == consumers_.end() || it->second.acks_in_flight == 0;
    };
    mu_.Await(absl::Condition(&none_in_flight));
    if (auto it = consumers_.find(consumer); it != consumers_.end()) {
      checkpoint = it->second.checkpoint;  // Including what those acks stored.
    }
  }
  absl::Status removed = committer->RemoveConsumer(name(), consumer);
  std::vector<std::shared_ptr<Session>> wake;
  std::shared_ptr<replication::pg::StreamReader> reader;
  {
    absl::MutexLock lock(&mu_);
    auto it = consumers_.find(consumer);
    if (!removed.ok()) {
      if (it != consumers_.end()) it->second.removing = false;
      return absl::UnavailableError(absl::StrCat("could not store the removal of consumer \"",
                                                 consumer, "\": ", removed.message(),
                                                 "; it is kept, retry"));
    }
    if (it != consumers_.end()) consumers_.erase(it);
    (void)tracker->RemoveConsumer(consumer);
    TrimLocked();
    wake = TakeWaitingLocked();
    reader = reader_;
  }
  WakeAll(wake);
  if (reader) reader->Wake();  // The buffer may have room again.
  Logger()->info("stream {}: consumer {} removed (its checkpoint was {})", name(), consumer,
                 IdOrNone(checkpoint));
  return checkpoint;
}

void StreamRuntime::TrimLocked() {
  // With no consumer yet nothing is dropped: the slot does not advance without
  // one either, so the reader simply waits (backpressure) and the first consumer
  // gets everything from the stream's position, whenever it subscribes.
  if (consumers_.empty()) return;
  EventId floor = consumers_.begin()->second.checkpoint;
  for (const auto& [name, consumer] : consumers_) floor = std::min(floor, consumer.checkpoint);
  while (!buffer_.empty() && buffer_.front().id <= floor) {
    trimmed_ = buffer_.front().id;
    buffer_bytes_ -= buffer_.front().bytes;
    buffer_.pop_front();
  }
}

void StreamRuntime::Tick() {
  std::vector<std::shared_ptr<Session>> due;
  {
    absl::MutexLock lock(&mu_);
    const absl::Time now = absl::Now();
    for (auto& [name, consumer] : consumers_) {
      Session* session = consumer.active.get();
      if (session && session->waiting_ &&
          now - session->last_frame_ >= session->options().progress_interval) {
        session->waiting_ = false;
        due.push_back(consumer.active);
      }
    }
  }
  WakeAll(due);
}

bool StreamRuntime::HasRoom() {
  absl::MutexLock lock(&mu_);
  return buffer_bytes_ < options_.buffer_bytes;
}

void StreamRuntime::OnEvent(replication::ChangeEvent event) {
  Buffered buffered;
  buffered.id = event.id;
  {
    // The converted message lives only until it is serialized: built on an arena
    // whose first block is reused, its messages and short strings cost no
    // allocation (strings longer than 15 bytes still do).
    google::protobuf::Arena arena(convert_block_.get(), kConvertBlockBytes);
    auto* converted = google::protobuf::Arena::CreateMessage<walfeed::v1::ChangeEvent>(&arena);
    ToProto(event, converted);
    converted->SerializeToString(&buffered.serialized);
    buffered.key = FilterKey::Of(*converted);
  }
  buffered.bytes = buffered.serialized.size() + sizeof(Buffered);
  for (const auto& [schema, table] : buffered.key.tables) {
    buffered.bytes += schema.size() + table.size();  // Beyond what sizeof counts, roughly.
  }
  absl::MutexLock lock(&mu_);
  if (buffered.id <= newest_) return;  // Already held (or below every checkpoint).
  newest_ = buffered.id;
  buffer_bytes_ += buffered.bytes;
  buffer_.push_back(std::move(buffered));
  TrimLocked();
}

void StreamRuntime::OnCommit(const replication::TransactionCommitted&) {}

void StreamRuntime::OnDrained() {
  // Waking waiting sessions here rather than per event lets one frame carry what
  // one turn of the reader brought (measured: about 6 events per frame on a
  // backlog when woken per event), and keeps the reader thread, which runs the
  // wake-ups' first writes inline, on reading. The price: an event read early in
  // a turn waits for the rest of the turn (at most StreamReader's
  // kMaxDrainFrames frames) before sessions hear of it.
  WakeAll([&] {
    absl::MutexLock lock(&mu_);
    return TakeWaitingLocked();
  }());
}

void StreamRuntime::OnConnected(Lsn start) {
  Logger()->info("stream {}: streaming from {}", name(), start.ToString());
  SetState(walfeed::v1::STREAM_STATE_STREAMING, "");
}

void StreamRuntime::OnDisconnected(const absl::Status& why) {
  SetState(walfeed::v1::STREAM_STATE_CONNECTING, std::string(why.message()));
}

RuntimeSnapshot StreamRuntime::Snapshot() const {
  RuntimeSnapshot snapshot;
  absl::MutexLock lock(&mu_);
  snapshot.name = name();
  snapshot.slot_name = options_.config.slot_name;
  snapshot.state = state_;
  snapshot.error = error_;
  if (reader_) {
    const replication::pg::StreamReader::Stats stats = reader_->stats();
    snapshot.server_wal_end = stats.server_wal_end;
    snapshot.confirmed = stats.confirmed_sent;
  }
  snapshot.buffered_events = buffer_.size();
  snapshot.buffered_bytes = buffer_bytes_;
  for (const auto& [consumer_name, consumer] : consumers_) {
    ConsumerSnapshot c;
    c.name = consumer_name;
    c.checkpoint = consumer.checkpoint;
    if (consumer.active) {
      c.session_id = consumer.active->id();
      c.unacked_events = consumer.active->unacked_.size();
    }
    snapshot.consumers.push_back(std::move(c));
  }
  std::sort(snapshot.consumers.begin(), snapshot.consumers.end(),
            [](const ConsumerSnapshot& a, const ConsumerSnapshot& b) { return a.name < b.name; });
  return snapshot;
}

}  // namespace walfeed::server
