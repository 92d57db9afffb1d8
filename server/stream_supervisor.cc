#include "server/stream_supervisor.h"

#include <utility>

#include "absl/random/random.h"
#include "absl/strings/str_cat.h"
#include "replication/error_reason.h"
#include "replication/retry.h"
#include "server/stream_log.h"

namespace walfeed::server {

namespace reason = replication::reason;

StreamSupervisor::StreamSupervisor(Options options, replication::StreamSource* source,
                                   replication::StreamSink* sink, Hooks hooks)
    : options_(std::move(options)), source_(source), sink_(sink), hooks_(std::move(hooks)) {}

StreamSupervisor::~StreamSupervisor() { Stop(); }

void StreamSupervisor::Start() { thread_ = std::thread([this] { Main(); }); }

void StreamSupervisor::BeginStop() {
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
  }
  source_->Stop();
}

void StreamSupervisor::Stop() {
  BeginStop();
  if (thread_.joinable()) thread_.join();
}

bool StreamSupervisor::WaitForStop(absl::Duration delay) {
  absl::MutexLock lock(&mu_);
  mu_.AwaitWithTimeout(absl::Condition(&stopping_), delay);
  return stopping_;
}

void StreamSupervisor::SetState(walfeed::v1::StreamState state, std::string error) {
  bool changed;
  {
    absl::MutexLock lock(&mu_);
    if (failed_) return;  // Failure is final.
    changed = state_.state != state;
    state_ = State{state, std::move(error)};
  }
  if (changed && hooks_.on_state) hooks_.on_state(state);
}

StreamSupervisor::State StreamSupervisor::state() const {
  absl::MutexLock lock(&mu_);
  return state_;
}

absl::Status StreamSupervisor::NotReady() const {
  absl::MutexLock lock(&mu_);
  return reason::WithReason(
      absl::UnavailableError(
          absl::StrCat("stream \"", options_.stream, "\" is still connecting to PostgreSQL",
                       state_.error.empty() ? "" : ": ", state_.error, "; retry shortly")),
      reason::kStreamNotReady, {{"stream", options_.stream}});
}

void StreamSupervisor::Fail(const absl::Status& status) {
  {
    absl::MutexLock lock(&mu_);
    failed_ = true;
    state_ = State{walfeed::v1::STREAM_STATE_FAILED, std::string(status.message())};
  }
  StreamLogger()->error("stream {}: failed, no longer streaming: {}", options_.stream,
                  status.ToString());
  if (hooks_.on_failed) hooks_.on_failed(status);
  if (hooks_.on_state) hooks_.on_state(walfeed::v1::STREAM_STATE_FAILED);
}

bool StreamSupervisor::Prepare(replication::PreparedSource* prepared) {
  // Seeded per process and stream, so instances restarted together do not retry
  // in lockstep.
  replication::Backoff backoff(options_.retry_base, options_.retry_cap,
                               absl::Uniform<uint64_t>(absl::BitGen()));
  for (;;) {
    absl::StatusOr<replication::PreparedSource> result = source_->Prepare();
    if (result.ok()) {
      *prepared = std::move(*result);
      return true;
    }
    if (!replication::IsTransient(result.status())) {
      Fail(result.status());
      return false;
    }
    const absl::Duration delay = backoff.Next();
    StreamLogger()->warn("stream {}: cannot start yet: {}; retrying in {}", options_.stream,
                   result.status().ToString(), absl::FormatDuration(delay));
    SetState(walfeed::v1::STREAM_STATE_CONNECTING, std::string(result.status().message()));
    if (WaitForStop(delay)) return false;
  }
}

void StreamSupervisor::Restart(const absl::Status& why) {
  {
    absl::MutexLock lock(&mu_);
    if (stopping_ || failed_ || restart_) return;
    restart_ = why;
  }
  StreamLogger()->warn("stream {}: restarting from the slot's stored position: {}",
                       options_.stream, why.ToString());
  SetState(walfeed::v1::STREAM_STATE_CONNECTING, std::string(why.message()));
  source_->Interrupt();
}

void StreamSupervisor::Main() {
  for (;;) {
    replication::PreparedSource prepared;
    if (!Prepare(&prepared)) return;
    for (const std::string& warning : prepared.warnings) {
      StreamLogger()->warn("stream {}: {}", options_.stream, warning);
    }
    for (const std::string& note : prepared.notes) {
      StreamLogger()->info("stream {}: {}", options_.stream, note);
    }
    const replication::StartPlan& plan = prepared.plan;
    if (tracker_) retired_.push_back(std::move(tracker_));
    tracker_ = std::make_unique<replication::AckTracker>(plan.start);
    {
      absl::MutexLock lock(&mu_);
      if (stopping_) return;
    }
    if (hooks_.on_prepared) hooks_.on_prepared(plan, tracker_.get());
    StreamLogger()->info("stream {}: starting slot {} at {} with {} consumer checkpoint(s)",
                         options_.stream, options_.slot_name, plan.start.ToString(),
                         plan.consumers.size());
    const absl::Status result = source_->Run(plan, tracker_.get(), sink_);
    if (!result.ok()) {
      Fail(result);
      return;
    }
    absl::MutexLock lock(&mu_);
    if (stopping_ || !restart_) return;
    restart_.reset();  // The next run reads from the stored position.
  }
}

}  // namespace walfeed::server
