// StreamSupervisor: the life of one stream's source, on a thread of its own.
//
//   Lead (one process streams a stream: until this one leads, STANDBY, trying
//   every lead_poll) ─► Prepare (retrying transient errors with capped,
//   jittered backoff; state CONNECTING with the reason) ─► on_prepared(plan,
//   tracker) ─► Run the source (it reconnects by itself)
//     ─► a definite error: FAILED, for good
//     └► Restart(): prepare and run again, re-reading the stream from its
//        stored position
//     └► the lead is lost (a check every lead_check fails): on_lead_lost, the
//        run ends, and the stream goes back to Lead
//
// It owns the stream's state (STANDBY / CONNECTING / STREAMING / FAILED and
// the last error) and reports every change through on_state (health follows
// it). The source's sink forwards OnConnected / OnDisconnected here.
#ifndef WALFEED_SERVER_STREAM_SUPERVISOR_H_
#define WALFEED_SERVER_STREAM_SUPERVISOR_H_

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "replication/ack_tracker.h"
#include "replication/stream_source.h"
#include "walfeed/v1/change_stream.pb.h"

namespace walfeed::server {

class StreamSupervisor {
 public:
  struct Options {
    std::string stream;  // For logs and messages.
    std::string slot_name;
    absl::Duration retry_base = absl::Milliseconds(200);
    absl::Duration retry_cap = absl::Seconds(30);
    // How often a standby tries to take the lead, and a leader checks it.
    absl::Duration lead_poll = absl::Seconds(1);
    absl::Duration lead_check = absl::Milliseconds(500);
  };
  struct Hooks {
    // The stream was prepared; `tracker` (owned here, alive until the supervisor
    // is destroyed) is the one the source will run with. Called before Run,
    // which runs the plan as the hook leaves it (it may lower deliver_after).
    std::function<void(replication::PreparedSource&, replication::AckTracker*)> on_prepared;
    // The stream failed for good (the error is also the state's).
    std::function<void(const absl::Status&)> on_failed;
    // The state changed (no lock held).
    std::function<void(walfeed::v1::StreamState)> on_state;
    // This process no longer leads the stream (`why`): what it holds must not
    // be served any more. Called on the checking thread, before the run ends.
    std::function<void(const absl::Status&)> on_lead_lost;
  };
  struct State {
    walfeed::v1::StreamState state = walfeed::v1::STREAM_STATE_CONNECTING;
    std::string error;
    bool leading = false;
    std::string active;  // While STANDBY: the leader's address, if known.
  };

  // `source` and `sink` must outlive the supervisor.
  StreamSupervisor(Options options, replication::StreamSource* source,
                   replication::StreamSink* sink, Hooks hooks);
  ~StreamSupervisor();  // Stops.
  StreamSupervisor(const StreamSupervisor&) = delete;
  StreamSupervisor& operator=(const StreamSupervisor&) = delete;

  void Start();
  // Tells the source to stop (a clean CopyDone after a last status update)
  // without waiting for it.
  void BeginStop() ABSL_LOCKS_EXCLUDED(mu_);
  // BeginStop, then joins the source's thread.
  void Stop() ABSL_LOCKS_EXCLUDED(mu_);
  // Ends the current run and starts over from Prepare (state CONNECTING with
  // `why`): for when what was read can no longer be served (a damaged spill).
  // The caller has already dropped what it held. No-op once stopping or failed.
  void Restart(const absl::Status& why) ABSL_LOCKS_EXCLUDED(mu_);

  // From the sink: the connection streams / was lost (transient).
  void SetState(walfeed::v1::StreamState state, std::string error) ABSL_LOCKS_EXCLUDED(mu_);
  State state() const ABSL_LOCKS_EXCLUDED(mu_);
  // UNAVAILABLE "still connecting" with the last reason, or "a standby" naming
  // the active instance: what calls get before the stream was prepared.
  absl::Status NotReady() const ABSL_LOCKS_EXCLUDED(mu_);
  // The error sessions end with when the lead is lost.
  absl::Status LeadLost(const absl::Status& why) const;

 private:
  void Main() ABSL_LOCKS_EXCLUDED(mu_);
  // True once this process leads; false when it failed or stops.
  bool Lead() ABSL_LOCKS_EXCLUDED(mu_);
  // Checks the lead every lead_check while leading, until Stop.
  void CheckLoop() ABSL_LOCKS_EXCLUDED(mu_);
  // If the lead was lost: unloads again, resigns, and returns true (Main
  // goes back to Lead). A pending restart_ stays: its interrupt may still be
  // waiting for the next run.
  bool TakeLeadLost() ABSL_LOCKS_EXCLUDED(mu_);
  // Sets the state (and reports a change) whatever the lead.
  void Publish(walfeed::v1::StreamState state, std::string error) ABSL_LOCKS_EXCLUDED(mu_);
  // True once prepared; false when it failed for good or the supervisor stops.
  bool Prepare(replication::PreparedSource* prepared) ABSL_LOCKS_EXCLUDED(mu_);
  void Fail(const absl::Status& status) ABSL_LOCKS_EXCLUDED(mu_);
  // Waits up to `delay` for Stop(); true when stopping.
  bool WaitForStop(absl::Duration delay) ABSL_LOCKS_EXCLUDED(mu_);

  const Options options_;
  replication::StreamSource* const source_;
  replication::StreamSink* const sink_;
  const Hooks hooks_;
  std::unique_ptr<replication::AckTracker> tracker_;  // Main()'s, once prepared.
  // Trackers of earlier runs, retired (emptied): an Ack in flight across a
  // restart may still use one, so they live as long as the supervisor.
  std::vector<std::unique_ptr<replication::AckTracker>> retired_;
  std::thread thread_;
  std::thread checker_;

  mutable absl::Mutex mu_;
  // The lead was lost during this run: Main resigns and leads again.
  bool lead_lost_ ABSL_GUARDED_BY(mu_) = false;
  // Main is in (or about to enter) source_->Run.
  bool running_ ABSL_GUARDED_BY(mu_) = false;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  bool failed_ ABSL_GUARDED_BY(mu_) = false;
  std::optional<absl::Status> restart_ ABSL_GUARDED_BY(mu_);
  State state_ ABSL_GUARDED_BY(mu_);
};

}  // namespace walfeed::server

#endif  // WALFEED_SERVER_STREAM_SUPERVISOR_H_
