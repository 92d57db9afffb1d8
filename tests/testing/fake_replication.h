// A walsender in simulated time, for unit tests of the stream loop: scripted
// sessions of CopyData frames (recorded ones from tests/golden, or encoded ones)
// that arrive at given simulated times, a clock that the loop's own waits
// advance, and a record of every status update the loop sent.
//
//   FakeOpener::Open(start) ─► the next Script as a FakeConnection
//   FakeConnection::Wait(deadline): returns at once with input when a frame has
//     arrived by the deadline (advancing the clock to it); otherwise it gives the
//     loop's own threads (its store) one real millisecond to wake it, then
//     advances the clock to the deadline.
//
// A test of ten simulated minutes runs in milliseconds. A
// session whose simulated time passes kSimulatedLimit ends with an error, so a
// test that forgets to stop the loop fails instead of hanging.
#ifndef WALFEED_TESTS_TESTING_FAKE_REPLICATION_H_
#define WALFEED_TESTS_TESTING_FAKE_REPLICATION_H_

#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "replication/clock.h"
#include "replication/lsn.h"
#include "replication/replication_connection.h"

namespace walfeed::testing {

class FakeClock : public replication::Clock {
 public:
  explicit FakeClock(absl::Time start = absl::FromUnixSeconds(1'800'000'000)) : now_(start) {}
  absl::Time Now() const override ABSL_LOCKS_EXCLUDED(mu_);
  void AdvanceTo(absl::Time t) ABSL_LOCKS_EXCLUDED(mu_);  // Never backwards.

 private:
  mutable absl::Mutex mu_;
  absl::Time now_ ABSL_GUARDED_BY(mu_);
};

// One walsender session: frames and failures, each arriving `after` the
// previous step (simulated).
class Script {
 public:
  struct Step {
    absl::Duration after;
    std::vector<uint8_t> frame;  // Empty for a failure.
    absl::Status failure;        // The connection breaks with it (and stays broken).
    // Arrives while the previous frame is being read: visible only to a read
    // (ConsumeInput) after the one that brought the previous frame, as
    // messages trickling into a socket come a few per read.
    bool trickles = false;
  };
  Script& Frame(std::vector<uint8_t> bytes, absl::Duration after = absl::ZeroDuration());
  Script& Frames(const std::vector<std::vector<uint8_t>>& frames);
  // `frames`, each arriving during the read of the one before (Step::trickles).
  Script& Trickle(const std::vector<std::vector<uint8_t>>& frames);
  Script& Fail(absl::Status status, absl::Duration after = absl::ZeroDuration());
  Script& WalSenderTimeout(absl::Duration timeout);
  // The session reports a Unix-domain socket (ReplicationConnection::unix_socket).
  Script& UnixSocket();
  // A black hole: a status update that requests a reply gets none (a live
  // walsender answers it at once with a keepalive, and so does the fake).
  Script& Silent();
  // Silent, but the walsender holds the slot: every alive check confirms it
  // (a walsender busy spilling a large transaction to disk).
  Script& Busy();

  const std::vector<Step>& steps() const { return steps_; }
  absl::Duration wal_sender_timeout() const { return wal_sender_timeout_; }
  bool silent() const { return silent_; }
  bool busy() const { return busy_; }
  bool unix_socket() const { return unix_socket_; }

 private:
  std::vector<Step> steps_;
  absl::Duration wal_sender_timeout_ = absl::Seconds(60);
  bool silent_ = false;
  bool busy_ = false;
  bool unix_socket_ = false;
};

// A standby status update as the loop sent it.
struct SentUpdate {
  absl::Time at;  // Simulated.
  int session = 0;  // 0-based index of the session it was sent on.
  replication::Lsn write;
  replication::Lsn flush;
  bool reply_requested = false;
};

// What the fake saw, shared between the test and the opener the loop owns.
class FakeLog {
 public:
  std::vector<replication::Lsn> starts() const ABSL_LOCKS_EXCLUDED(mu_);
  std::vector<SentUpdate> updates() const ABSL_LOCKS_EXCLUDED(mu_);
  int finished() const ABSL_LOCKS_EXCLUDED(mu_);  // Sessions ended with Finish().
  // Waits made without asking for input while nothing was pending, and their length.
  std::vector<absl::Duration> input_pauses() const ABSL_LOCKS_EXCLUDED(mu_);
  // When each check over a second connection (RequestAliveCheck) was asked for.
  std::vector<absl::Time> alive_checks() const ABSL_LOCKS_EXCLUDED(mu_);

  // Runs on the loop's thread after every status update is recorded.
  std::function<void(const SentUpdate&)> on_update;

 private:
  friend class FakeConnection;
  friend class FakeOpener;
  mutable absl::Mutex mu_;
  std::vector<replication::Lsn> starts_ ABSL_GUARDED_BY(mu_);
  std::vector<SentUpdate> updates_ ABSL_GUARDED_BY(mu_);
  std::vector<absl::Duration> input_pauses_ ABSL_GUARDED_BY(mu_);
  std::vector<absl::Time> alive_checks_ ABSL_GUARDED_BY(mu_);
  int finished_ ABSL_GUARDED_BY(mu_) = 0;
};

class FakeOpener : public replication::ReplicationOpener {
 public:
  // After the last script, Open fails with FailedPrecondition (definite), which
  // ends the loop's Run with it.
  FakeOpener(FakeClock* clock, std::vector<Script> sessions, std::shared_ptr<FakeLog> log);
  absl::StatusOr<std::unique_ptr<replication::ReplicationConnection>> Open(
      replication::Lsn start) override;

  static constexpr absl::Duration kSimulatedLimit = absl::Hours(1);

 private:
  FakeClock* const clock_;
  std::deque<Script> sessions_;
  const std::shared_ptr<FakeLog> log_;
  int opened_ = 0;
};

// The frames of a recorded capture (tests/golden/*.hex), keepalives included.
absl::StatusOr<std::vector<std::vector<uint8_t>>> LoadGoldenFrames(absl::string_view path);

}  // namespace walfeed::testing

#endif  // WALFEED_TESTS_TESTING_FAKE_REPLICATION_H_
