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

void StreamSupervisor::Start() {
  thread_ = std::thread([this] { Main(); });
  checker_ = std::thread([this] { CheckLoop(); });
}

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
  if (checker_.joinable()) checker_.join();
  source_->Resign();
}

bool StreamSupervisor::WaitForStop(absl::Duration delay) {
  absl::MutexLock lock(&mu_);
  mu_.AwaitWithTimeout(absl::Condition(&stopping_), delay);
  return stopping_;
}

void StreamSupervisor::SetState(walfeed::v1::StreamState state, std::string error) {
  {
    absl::MutexLock lock(&mu_);
    // A reader's late OnConnected / OnDisconnected must not cover STANDBY.
    if (!state_.leading) return;
  }
  Publish(state, std::move(error));
}

void StreamSupervisor::Publish(walfeed::v1::StreamState state, std::string error) {
  bool changed;
  {
    absl::MutexLock lock(&mu_);
    if (failed_) return;  // Failure is final.
    changed = state_.state != state;
    state_.state = state;
    state_.error = std::move(error);
  }
  if (changed && hooks_.on_state) hooks_.on_state(state);
}

StreamSupervisor::State StreamSupervisor::state() const {
  absl::MutexLock lock(&mu_);
  return state_;
}

absl::Status StreamSupervisor::NotReady() const {
  absl::MutexLock lock(&mu_);
  if (state_.state == walfeed::v1::STREAM_STATE_STANDBY) {
    return reason::WithReason(
        absl::UnavailableError(absl::StrCat(
            "this walfeed-server is a standby for stream \"", options_.stream, "\": ",
            state_.active.empty() ? "another instance streams it"
                                  : absl::StrCat("the active instance is ", state_.active),
            "; connect to the active instance, or through an address that follows the health "
            "service (walfeed.v1.ChangeStream/",
            options_.stream, " is SERVING only where the stream streams)")),
        reason::kStandby, {{"stream", options_.stream}, {"active", state_.active}});
  }
  return reason::WithReason(
      absl::UnavailableError(
          absl::StrCat("stream \"", options_.stream, "\" is still connecting to PostgreSQL",
                       state_.error.empty() ? "" : ": ", state_.error, "; retry shortly")),
      reason::kStreamNotReady, {{"stream", options_.stream}});
}

absl::Status StreamSupervisor::LeadLost(const absl::Status& why) const {
  // Not STANDBY: whether another instance takes over is not known yet (with
  // one instance, this one leads again once PostgreSQL answers).
  return reason::WithReason(
      absl::UnavailableError(absl::StrCat("this walfeed-server stopped streaming stream \"",
                                          options_.stream, "\" (", why.message(),
                                          "); subscribe again, through an address that follows "
                                          "the health service when you run a standby (your "
                                          "checkpoint is kept)")),
      reason::kStreamNotReady, {{"stream", options_.stream}});
}

void StreamSupervisor::Fail(const absl::Status& status) {
  {
    absl::MutexLock lock(&mu_);
    failed_ = true;
    state_.state = walfeed::v1::STREAM_STATE_FAILED;
    state_.error = std::string(status.message());
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
    Publish(walfeed::v1::STREAM_STATE_CONNECTING, std::string(result.status().message()));
    if (WaitForStop(delay)) return false;
    absl::MutexLock lock(&mu_);
    if (lead_lost_) return false;
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
  Publish(walfeed::v1::STREAM_STATE_CONNECTING, std::string(why.message()));
  source_->Interrupt();
}

bool StreamSupervisor::Lead() {
  replication::Backoff backoff(options_.retry_base, options_.retry_cap,
                               absl::Uniform<uint64_t>(absl::BitGen()));
  std::optional<std::string> reported;  // The leader last logged, while standby.
  for (;;) {
    {
      absl::MutexLock lock(&mu_);
      if (stopping_) return false;
    }
    absl::StatusOr<bool> leads = source_->TryLead();
    absl::Duration delay = options_.lead_poll;
    if (leads.ok() && *leads) {
      {
        absl::MutexLock lock(&mu_);
        state_.leading = true;
        state_.active.clear();
      }
      StreamLogger()->info("stream {}: this instance leads it", options_.stream);
      Publish(walfeed::v1::STREAM_STATE_CONNECTING, "");
      return true;
    }
    if (!leads.ok()) {
      if (!replication::IsTransient(leads.status())) {
        Fail(leads.status());
        return false;
      }
      delay = backoff.Next();
      StreamLogger()->warn("stream {}: cannot take the lead yet: {}; retrying in {}",
                           options_.stream, leads.status().ToString(),
                           absl::FormatDuration(delay));
      Publish(walfeed::v1::STREAM_STATE_CONNECTING, std::string(leads.status().message()));
    } else {
      const std::string active = source_->Leader();
      {
        absl::MutexLock lock(&mu_);
        state_.active = active;
      }
      if (reported != active) {
        StreamLogger()->info("stream {}: standby; {} streams it", options_.stream,
                             active.empty() ? "another instance" : active);
        reported = active;
      }
      Publish(walfeed::v1::STREAM_STATE_STANDBY, "");  // Not an error: `active` says who leads.
    }
    if (WaitForStop(delay)) return false;
  }
}

void StreamSupervisor::CheckLoop() {
  for (;;) {
    if (WaitForStop(options_.lead_check)) return;
    {
      absl::MutexLock lock(&mu_);
      if (!state_.leading || lead_lost_ || failed_) continue;
    }
    const absl::Status check = source_->CheckLead();
    if (check.ok()) continue;
    bool running;
    {
      absl::MutexLock lock(&mu_);
      if (stopping_ || failed_) return;
      lead_lost_ = true;
      state_.leading = false;
      running = running_;
    }
    StreamLogger()->warn("stream {}: {}; ending every session until this instance leads again",
                         options_.stream, check.ToString());
    Publish(walfeed::v1::STREAM_STATE_CONNECTING, std::string(check.message()));
    // At once, not when the run ends (that may wait on PostgreSQL): nothing
    // this process holds may be served from now on.
    if (hooks_.on_lead_lost) hooks_.on_lead_lost(check);
    // Only a run in progress: an interrupt before Run would end the run of
    // the next lead at once (Main sees lead_lost_ before it runs).
    if (running) source_->Interrupt();
  }
}

bool StreamSupervisor::TakeLeadLost() {
  {
    absl::MutexLock lock(&mu_);
    if (stopping_ || !lead_lost_) return false;
    lead_lost_ = false;
  }
  // Again, in case the run was prepared (and loaded what it holds) after the
  // checking thread unloaded it.
  if (hooks_.on_lead_lost) hooks_.on_lead_lost(absl::UnavailableError("the lead was lost"));
  source_->Resign();
  return true;
}

void StreamSupervisor::Main() {
  for (;;) {
    if (!Lead()) return;
    replication::PreparedSource prepared;
    if (!Prepare(&prepared)) {
      if (TakeLeadLost()) continue;
      return;  // Stopping, or failed.
    }
    for (const std::string& warning : prepared.warnings) {
      StreamLogger()->warn("stream {}: {}", options_.stream, warning);
    }
    for (const std::string& note : prepared.notes) {
      StreamLogger()->info("stream {}: {}", options_.stream, note);
    }
    const replication::StartPlan& plan = prepared.plan;
    if (tracker_) {
      // Kept (an ack in flight may still use it) but emptied.
      tracker_->Retire();
      retired_.push_back(std::move(tracker_));
    }
    tracker_ = std::make_unique<replication::AckTracker>(plan.start);
    {
      absl::MutexLock lock(&mu_);
      if (stopping_) return;
    }
    if (hooks_.on_prepared) hooks_.on_prepared(prepared, tracker_.get());
    bool lost;
    {
      // Atomically with the check: a lead lost from here on interrupts the
      // run (which then returns at once if it has not started yet).
      absl::MutexLock lock(&mu_);
      lost = lead_lost_;
      running_ = !lost;
    }
    if (lost) {
      TakeLeadLost();
      continue;
    }
    StreamLogger()->info("stream {}: starting slot {} at {} with {} consumer checkpoint(s)",
                         options_.stream, options_.slot_name, plan.start.ToString(),
                         plan.consumers.size());
    const absl::Status result = source_->Run(plan, tracker_.get(), sink_);
    {
      absl::MutexLock lock(&mu_);
      running_ = false;
    }
    // Whatever the run ended with after a lost lead: this process no longer
    // streams the stream.
    if (TakeLeadLost()) continue;
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
