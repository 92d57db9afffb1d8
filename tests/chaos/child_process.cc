#include "tests/chaos/child_process.h"

#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <climits>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "tests/testing/wait.h"

extern char** environ;

namespace walfeed::chaos {

absl::StatusOr<std::unique_ptr<ChildProcess>> ChildProcess::Spawn(
    const std::vector<std::string>& argv, const std::string& log_path, LineHandler on_line) {
  // Writing to a child that was just killed must be an error, not a SIGPIPE.
  signal(SIGPIPE, SIG_IGN);
  int to_child[2];
  int from_child[2] = {-1, -1};
  // O_CLOEXEC: no other child (pg_ctl, the server) may inherit a pipe end, or
  // end of file would never arrive.
  if (pipe2(to_child, O_CLOEXEC) != 0) return absl::InternalError("pipe2 failed");
  if (on_line && pipe2(from_child, O_CLOEXEC) != 0) {
    close(to_child[0]);
    close(to_child[1]);
    return absl::InternalError("pipe2 failed");
  }
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_adddup2(&actions, to_child[0], STDIN_FILENO);
  posix_spawn_file_actions_addopen(&actions, STDERR_FILENO, log_path.c_str(),
                                   O_WRONLY | O_CREAT | O_APPEND, 0644);
  if (on_line) {
    posix_spawn_file_actions_adddup2(&actions, from_child[1], STDOUT_FILENO);
  } else {
    posix_spawn_file_actions_adddup2(&actions, STDERR_FILENO, STDOUT_FILENO);
  }
  std::vector<std::string> copy = argv;
  std::vector<char*> args;
  for (std::string& arg : copy) args.push_back(arg.data());
  args.push_back(nullptr);
  pid_t pid = -1;
  const int rc = posix_spawn(&pid, args[0], &actions, nullptr, args.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  close(to_child[0]);
  if (on_line) close(from_child[1]);
  if (rc != 0) {
    close(to_child[1]);
    if (on_line) close(from_child[0]);
    return absl::InternalError(absl::StrCat("posix_spawn ", argv[0], ": ", strerror(rc)));
  }
  // Decided before on_line is moved into the constructor's parameter.
  const int stdout_fd = on_line ? from_child[0] : -1;
  return std::unique_ptr<ChildProcess>(
      new ChildProcess(pid, to_child[1], stdout_fd, std::move(on_line)));
}

ChildProcess::ChildProcess(pid_t pid, int stdin_fd, int stdout_fd, LineHandler on_line)
    : pid_(pid), stdin_fd_(stdin_fd), stdout_fd_(stdout_fd), on_line_(std::move(on_line)) {
  if (stdout_fd_ >= 0) {
    drain_ = std::thread([this] { Drain(); });
  } else {
    absl::MutexLock lock(&mu_);
    output_done_ = true;
  }
}

ChildProcess::~ChildProcess() {
  Kill();
  close(stdin_fd_);
  if (drain_.joinable()) drain_.join();  // End of file: the child is gone.
  if (stdout_fd_ >= 0) close(stdout_fd_);
}

absl::Status ChildProcess::WriteLine(absl::string_view line) {
  const std::string text = absl::StrCat(line, "\n");
  size_t done = 0;
  while (done < text.size()) {
    const ssize_t n = write(stdin_fd_, text.data() + done, text.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return absl::UnavailableError(absl::StrCat("write: ", strerror(errno)));
    done += static_cast<size_t>(n);
  }
  return absl::OkStatus();
}

bool ChildProcess::Reap(int flags) {
  if (wait_status_) return true;
  for (;;) {
    int status = 0;
    const pid_t r = waitpid(pid_, &status, flags);
    if (r == pid_) {
      wait_status_ = status;
      return true;
    }
    if (r < 0 && errno == EINTR) continue;
    return false;
  }
}

absl::Status ChildProcess::Signal(int signal) {
  absl::MutexLock lock(&mu_);
  if (wait_status_) return absl::FailedPreconditionError("the child was already reaped");
  if (kill(pid_, signal) != 0) return absl::InternalError(strerror(errno));
  return absl::OkStatus();
}

void ChildProcess::Kill() {
  absl::MutexLock lock(&mu_);
  if (wait_status_) return;
  kill(pid_, SIGKILL);
  Reap(0);
}

bool ChildProcess::exited() {
  absl::MutexLock lock(&mu_);
  return Reap(WNOHANG);
}

std::optional<int> ChildProcess::WaitForExit(absl::Duration timeout) {
  // waitpid has no timeout; re-check with WNOHANG until the deadline.
  testing::WaitUntil([this] { return exited(); }, timeout, absl::Milliseconds(5));
  absl::MutexLock lock(&mu_);
  return wait_status_;
}

void ChildProcess::WaitForOutputEnd() {
  absl::MutexLock lock(&mu_);
  mu_.Await(absl::Condition(&output_done_));
}

void ChildProcess::Drain() {
  char buffer[8192];
  std::string partial;
  for (;;) {
    const ssize_t n = read(stdout_fd_, buffer, sizeof(buffer));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    partial.append(buffer, static_cast<size_t>(n));
    size_t start = 0;
    for (size_t newline; (newline = partial.find('\n', start)) != std::string::npos;
         start = newline + 1) {
      on_line_(partial.substr(start, newline - start));
    }
    partial.erase(0, start);
  }
  absl::MutexLock lock(&mu_);
  output_done_ = true;
}

std::string SelfPath() {
  char path[PATH_MAX];
  const ssize_t n = readlink("/proc/self/exe", path, sizeof(path) - 1);
  if (n <= 0) return "";
  return std::string(path, static_cast<size_t>(n));
}

}  // namespace walfeed::chaos
