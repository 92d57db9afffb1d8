// The processes a chaos run drives: walfeed-server (the real binary) and
// consumer children, each wrapped with the state the verifier waits on.
#ifndef WALFEED_TESTS_CHAOS_HARNESS_H_
#define WALFEED_TESTS_CHAOS_HARNESS_H_

#include <cstdint>
#include <memory>
#include <optional>
#include <set>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "tests/chaos/child_process.h"
#include "tests/chaos/consumer_child.h"

namespace walfeed::chaos {

inline constexpr char kStream[] = "chaos";
inline constexpr char kSlot[] = "walfeed_chaos";
// walfeed-server's shutdown_timeout in ServerYaml. It promises to exit within it
// after SIGTERM whatever PostgreSQL does; the run allows 2 s more for a loaded
// machine, and a later exit fails the run.
inline constexpr absl::Duration kShutdownTimeout = absl::Seconds(3);
inline const absl::Duration kExitBound = kShutdownTimeout + absl::Seconds(2);

// A config for one stream over `conninfo`, listening on a free loopback port,
// spilling to `state_dir` beyond a small memory tier.
std::string ServerYaml(const std::string& conninfo, const std::string& state_dir);

class ServerHandle {
 public:
  // Starts walfeed-server with `config_path`, logging to `log_path`, and waits
  // until it logs its port.
  static absl::StatusOr<std::unique_ptr<ServerHandle>> Start(const std::string& config_path,
                                                             const std::string& log_path);
  int port() const { return port_; }
  ChildProcess& process() { return *process_; }
  std::string Log() const;

  // SIGTERM, then how long the exit took. It waits well past kExitBound, so a
  // late exit is measured rather than cut off, and SIGKILLs a process still
  // running then (wait_status stays empty).
  struct Termination {
    std::optional<int> wait_status;
    absl::Duration took;
  };
  absl::StatusOr<Termination> Terminate();

 private:
  ServerHandle() = default;
  std::unique_ptr<ChildProcess> process_;
  std::string log_path_;
  int port_ = 0;
};

// A consumer child and what it reported on stdout.
class ConsumerHandle {
 public:
  static absl::StatusOr<std::unique_ptr<ConsumerHandle>> Start(const ConsumerFlags& flags,
                                                               const std::string& stderr_path);
  ChildProcess& process() { return *process_; }
  const ConsumerFlags& flags() const { return flags_; }

  uint64_t handled() const;
  // True once it had `n` sessions / `n` durable acks in total.
  bool WaitForSessions(int n, absl::Duration timeout) const;
  bool WaitForAcks(int n, absl::Duration timeout) const;
  // True once it handled at least `n` events.
  bool WaitForHandled(uint64_t n, absl::Duration timeout) const;
  // True once it saw marker `n`; false at the deadline or when it ended first.
  bool WaitForMark(int64_t n, absl::Duration timeout) const;
  // Its Run's status code ("OK", "ABORTED", ...) once it said so.
  std::optional<std::string> WaitForExitLine(absl::Duration timeout) const;
  std::optional<std::string> exit_line() const;

 private:
  explicit ConsumerHandle(ConsumerFlags flags) : flags_(std::move(flags)) {}
  void OnLine(const std::string& line);

  ConsumerFlags flags_;
  std::unique_ptr<ChildProcess> process_;
  mutable absl::Mutex mu_;
  uint64_t handled_ ABSL_GUARDED_BY(mu_) = 0;
  int sessions_ ABSL_GUARDED_BY(mu_) = 0;
  int acks_ ABSL_GUARDED_BY(mu_) = 0;
  std::set<int64_t> marks_ ABSL_GUARDED_BY(mu_);
  std::optional<std::string> exit_ ABSL_GUARDED_BY(mu_);
};

}  // namespace walfeed::chaos

#endif  // WALFEED_TESTS_CHAOS_HARNESS_H_
