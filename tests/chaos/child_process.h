// ChildProcess: a process the verifier starts, signals and reaps, with its stdin
// on a pipe (commands) and its stdout either on a pipe (read as lines by a thread
// that never stops draining it) or appended to a log file.
//
// The drain thread matters: a child that blocks on a full stdout pipe would look
// like a stalled consumer and distort the fault being measured.
#ifndef WALFEED_TESTS_CHAOS_CHILD_PROCESS_H_
#define WALFEED_TESTS_CHAOS_CHILD_PROCESS_H_

#include <sys/types.h>

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"

namespace walfeed::chaos {

class ChildProcess {
 public:
  // Called on the drain thread for every complete line of the child's stdout.
  using LineHandler = std::function<void(const std::string& line)>;

  // Spawns argv[0]. With `on_line` the child's stdout is read line by line;
  // without it, stdout goes to `log_path`. stderr always goes to `log_path`.
  static absl::StatusOr<std::unique_ptr<ChildProcess>> Spawn(const std::vector<std::string>& argv,
                                                             const std::string& log_path,
                                                             LineHandler on_line = nullptr);

  // SIGKILLs and reaps the child if it is still running.
  ~ChildProcess();
  ChildProcess(const ChildProcess&) = delete;
  ChildProcess& operator=(const ChildProcess&) = delete;

  pid_t pid() const { return pid_; }
  absl::Status WriteLine(absl::string_view line);
  // Sends `signal`; an error once the child was reaped.
  absl::Status Signal(int signal);
  // SIGKILL and reap: the child gets no chance to flush or say goodbye.
  void Kill();
  // The wait status once the child exited within `timeout`.
  std::optional<int> WaitForExit(absl::Duration timeout);
  bool exited();
  // Waits until the drain thread saw end of file (every line was handled).
  void WaitForOutputEnd();

 private:
  ChildProcess(pid_t pid, int stdin_fd, int stdout_fd, LineHandler on_line);
  void Drain();
  bool Reap(int flags) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const pid_t pid_;
  const int stdin_fd_;
  const int stdout_fd_;  // -1 when stdout goes to the log.
  LineHandler on_line_;
  std::thread drain_;
  absl::Mutex mu_;
  std::optional<int> wait_status_ ABSL_GUARDED_BY(mu_);
  bool output_done_ ABSL_GUARDED_BY(mu_) = false;
};

// This binary's own path, to re-run it as a consumer child.
std::string SelfPath();

}  // namespace walfeed::chaos

#endif  // WALFEED_TESTS_CHAOS_CHILD_PROCESS_H_
