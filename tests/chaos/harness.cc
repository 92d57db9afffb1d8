#include "tests/chaos/harness.h"

#include <signal.h>

#include <fstream>
#include <sstream>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "tests/testing/wait.h"

namespace walfeed::chaos {

std::string ServerYaml(const std::string& conninfo, const std::string& state_dir) {
  // A small memory tier, so a lagging consumer's backlog goes to the spill and
  // every fault meets the disk tier too.
  return absl::StrCat("listen: \"127.0.0.1:0\"\nplaintext: true\nshutdown_timeout: ",
                      absl::ToInt64Seconds(kShutdownTimeout), "s\n",
                      "state_dir: ", state_dir, "\ndefaults:\n  buffer_bytes: 131072\n",
                      "streams:\n  - name: ", kStream, "\n    conninfo: \"", conninfo,
                      "\"\n    slot: ", kSlot, "\n    publications: [", kSlot,
                      "]\n    tables: [public.chaos_a, public.chaos_b]\n"
                      "    create_missing: true\n");
}

absl::StatusOr<std::unique_ptr<ServerHandle>> ServerHandle::Start(const std::string& config_path,
                                                                  const std::string& log_path) {
  std::unique_ptr<ServerHandle> server(new ServerHandle());
  server->log_path_ = log_path;
  absl::StatusOr<std::unique_ptr<ChildProcess>> process =
      ChildProcess::Spawn({WALFEED_SERVER_BINARY, "--config", config_path}, log_path);
  if (!process.ok()) return process.status();
  server->process_ = std::move(*process);
  // "walfeed-server listening on 127.0.0.1:0 (port 41234, plaintext)"
  const bool listening = testing::WaitUntil(
      [&] {
        const std::string log = server->Log();
        const size_t at = log.rfind("(port ");
        if (at == std::string::npos) return server->process_->exited();
        const size_t end = log.find(',', at);
        return end != std::string::npos &&
               absl::SimpleAtoi(log.substr(at + 6, end - at - 6), &server->port_);
      },
      absl::Seconds(30), absl::Milliseconds(5));
  if (!listening || server->port_ <= 0) {
    return absl::UnavailableError(absl::StrCat("walfeed-server did not listen:\n", server->Log()));
  }
  return server;
}

absl::StatusOr<ServerHandle::Termination> ServerHandle::Terminate() {
  const absl::Time signalled = absl::Now();
  if (absl::Status s = process_->Signal(SIGTERM); !s.ok()) return s;
  Termination t;
  t.wait_status = process_->WaitForExit(kExitBound + absl::Seconds(30));
  t.took = absl::Now() - signalled;
  if (!t.wait_status) process_->Kill();
  return t;
}

std::string ServerHandle::Log() const {
  std::ifstream in(log_path_);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

absl::StatusOr<std::unique_ptr<ConsumerHandle>> ConsumerHandle::Start(
    const ConsumerFlags& flags, const std::string& stderr_path) {
  std::unique_ptr<ConsumerHandle> consumer(new ConsumerHandle(flags));
  ConsumerHandle* raw = consumer.get();
  absl::StatusOr<std::unique_ptr<ChildProcess>> process = ChildProcess::Spawn(
      ConsumerArgv(flags), stderr_path, [raw](const std::string& line) { raw->OnLine(line); });
  if (!process.ok()) return process.status();
  consumer->process_ = std::move(*process);
  return consumer;
}

void ConsumerHandle::OnLine(const std::string& line) {
  absl::MutexLock lock(&mu_);
  int64_t value = 0;
  if (line.rfind("n ", 0) == 0 && absl::SimpleAtoi(line.substr(2), &value)) {
    handled_ = static_cast<uint64_t>(value);
  } else if (line.rfind("mark ", 0) == 0 && absl::SimpleAtoi(line.substr(5), &value)) {
    marks_.insert(value);
  } else if (line.rfind("started ", 0) == 0) {
    ++sessions_;
  } else if (line.rfind("acked ", 0) == 0) {
    ++acks_;
  } else if (line.rfind("exit ", 0) == 0) {
    exit_ = line.substr(5);
  }
}

uint64_t ConsumerHandle::handled() const {
  absl::MutexLock lock(&mu_);
  return handled_;
}

bool ConsumerHandle::WaitForHandled(uint64_t n, absl::Duration timeout) const {
  absl::MutexLock lock(&mu_);
  auto done = [this, n]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return handled_ >= n || exit_.has_value();
  };
  return mu_.AwaitWithTimeout(absl::Condition(&done), timeout) && handled_ >= n;
}

bool ConsumerHandle::WaitForSessions(int n, absl::Duration timeout) const {
  absl::MutexLock lock(&mu_);
  auto done = [this, n]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return sessions_ >= n; };
  return mu_.AwaitWithTimeout(absl::Condition(&done), timeout);
}

bool ConsumerHandle::WaitForAcks(int n, absl::Duration timeout) const {
  absl::MutexLock lock(&mu_);
  auto done = [this, n]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return acks_ >= n; };
  return mu_.AwaitWithTimeout(absl::Condition(&done), timeout);
}

bool ConsumerHandle::WaitForMark(int64_t n, absl::Duration timeout) const {
  absl::MutexLock lock(&mu_);
  auto done = [this, n]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return marks_.count(n) > 0 || exit_.has_value();
  };
  return mu_.AwaitWithTimeout(absl::Condition(&done), timeout) && marks_.count(n) > 0;
}

std::optional<std::string> ConsumerHandle::WaitForExitLine(absl::Duration timeout) const {
  absl::MutexLock lock(&mu_);
  auto done = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return exit_.has_value(); };
  mu_.AwaitWithTimeout(absl::Condition(&done), timeout);
  return exit_;
}

std::optional<std::string> ConsumerHandle::exit_line() const {
  absl::MutexLock lock(&mu_);
  return exit_;
}

}  // namespace walfeed::chaos
