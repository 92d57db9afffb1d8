#include "tests/chaos/consumer_child.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <iostream>
#include <thread>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_replace.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "tests/chaos/child_process.h"
#include "tests/chaos/delivery_log.h"
#include "walfeed/subscriber.h"

namespace walfeed::chaos {
namespace {

// Appends whole lines with one write each (a kill can only tear the last one)
// and fsyncs on demand.
class DurableLog {
 public:
  explicit DurableLog(const std::string& path)
      : fd_(open(path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644)) {}
  ~DurableLog() {
    if (fd_ >= 0) close(fd_);
  }
  bool ok() const { return fd_ >= 0; }
  void Append(const std::string& line) { pending_ += line + "\n"; }
  // Writes what was appended and makes it durable; exits on failure, because a
  // consumer that cannot record must not ack.
  void Sync() {
    size_t done = 0;
    while (done < pending_.size()) {
      const ssize_t n = write(fd_, pending_.data() + done, pending_.size() - done);
      if (n < 0 && errno == EINTR) continue;
      if (n < 0) Die("write");
      done += static_cast<size_t>(n);
    }
    pending_.clear();
    if (fsync(fd_) != 0) Die("fsync");
  }

 private:
  [[noreturn]] static void Die(const char* what) {
    std::cerr << "consumer: " << what << ": " << strerror(errno) << std::endl;
    _exit(70);
  }
  const int fd_;
  std::string pending_;
};

// Lines to the verifier; flushed at once so it never waits on our buffer.
void Say(const std::string& line) {
  static absl::Mutex mu(absl::kConstInit);
  absl::MutexLock lock(&mu);
  std::cout << line << std::endl;
}

absl::StatusOr<ConsumerFlags> ParseFlags(const std::vector<std::string>& args) {
  ConsumerFlags flags;
  for (const std::string& arg : args) {
    const size_t eq = arg.find('=');
    if (arg.rfind("--", 0) != 0 || eq == std::string::npos) {
      return absl::InvalidArgumentError(absl::StrCat("bad flag ", arg));
    }
    const std::string name = arg.substr(2, eq - 2);
    const std::string value = arg.substr(eq + 1);
    bool ok = true;
    if (name == "server") flags.server = value;
    else if (name == "stream") flags.stream = value;
    else if (name == "consumer") flags.consumer = value;
    else if (name == "log") flags.log = value;
    else if (name == "seed") ok = absl::SimpleAtoi(value, &flags.seed);
    else if (name == "ack_events") ok = absl::SimpleAtoi(value, &flags.ack_events);
    else if (name == "ack_interval_ms") ok = absl::SimpleAtoi(value, &flags.ack_interval_ms);
    else if (name == "max_unacked") ok = absl::SimpleAtoi(value, &flags.max_unacked);
    else ok = false;
    if (!ok) return absl::InvalidArgumentError(absl::StrCat("bad flag ", arg));
  }
  return flags;
}

}  // namespace

std::vector<std::string> ConsumerArgv(const ConsumerFlags& flags) {
  return {SelfPath(),
          "consumer",
          absl::StrCat("--server=", flags.server),
          absl::StrCat("--stream=", flags.stream),
          absl::StrCat("--consumer=", flags.consumer),
          absl::StrCat("--log=", flags.log),
          absl::StrCat("--seed=", flags.seed),
          absl::StrCat("--ack_events=", flags.ack_events),
          absl::StrCat("--ack_interval_ms=", flags.ack_interval_ms),
          absl::StrCat("--max_unacked=", flags.max_unacked)};
}

int RunConsumerChild(const std::vector<std::string>& args) {
  absl::StatusOr<ConsumerFlags> flags = ParseFlags(args);
  if (!flags.ok()) {
    std::cerr << flags.status() << std::endl;
    return 2;
  }
  DurableLog log(flags->log);
  if (!log.ok()) {
    std::cerr << "cannot open " << flags->log << std::endl;
    return 2;
  }
  log.Append(absl::StrCat("P ", MonotonicNanos(), " ", getpid()));
  log.Sync();

  SubscriberOptions options;
  options.server = flags->server;
  options.stream = flags->stream;
  options.consumer = flags->consumer;
  options.max_unacked_events = flags->max_unacked;
  options.progress_interval = absl::Milliseconds(200);
  if (flags->ack_events == 0 && flags->ack_interval_ms == 0) {
    options.ack = AckPolicy::EveryEvents(1);
  } else {
    options.ack.every_events = flags->ack_events;
    options.ack.interval = absl::Milliseconds(flags->ack_interval_ms);
  }
  // Reconnect quickly: the verifier measures recovery, not backoff.
  options.backoff.base = absl::Milliseconds(20);
  options.backoff.cap = absl::Milliseconds(500);
  options.keepalive.time = absl::Seconds(10);
  options.keepalive.timeout = absl::Seconds(5);
  options.ack_timeout = absl::Seconds(10);
  options.on_started = [&](const SessionInfo& info) {
    log.Append(absl::StrCat("S ", MonotonicNanos(), " ", info.session_id, " ",
                            info.checkpoint.empty() ? "-" : info.checkpoint, " ",
                            info.start_after.empty() ? "-" : info.start_after));
    log.Sync();
    Say(absl::StrCat("started ", info.session_id));
  };
  options.on_acked = [&](const EventId& acked, const std::string& checkpoint) {
    log.Append(absl::StrCat("A ", MonotonicNanos(), " ", acked.ToString(), " ", checkpoint));
    log.Sync();
    Say(absl::StrCat("acked ", acked.ToString()));
  };
  options.on_retry = [&](const absl::Status& why, absl::Duration) {
    log.Append(absl::StrCat("R ", MonotonicNanos(), " ", absl::StatusCodeToString(why.code())));
    log.Sync();
  };
  Subscriber subscriber(options);

  absl::Mutex mu;
  absl::Duration stall_for = absl::ZeroDuration();
  std::thread commands([&] {
    std::string line;
    while (std::getline(std::cin, line)) {
      int ms = 0;
      if (line == "stop") break;
      if (line.rfind("stall ", 0) == 0 && absl::SimpleAtoi(line.substr(6), &ms)) {
        absl::MutexLock lock(&mu);
        stall_for = absl::Milliseconds(ms);
      }
    }
    subscriber.Stop();
  });
  commands.detach();  // Blocked in getline until the verifier closes stdin.

  uint64_t handled = 0;
  const absl::Status status = subscriber.Run([&](const Batch& batch) -> absl::Status {
    std::vector<std::string> marks;
    for (int i = 0; i < batch.size(); ++i) {
      const walfeed::v1::ChangeEvent& event = batch.event(i);
      const std::string signature = Signature(event);
      log.Append(absl::StrFormat("E %s %s %016x %s", batch.session_id(), event.id(),
                                 PayloadHash(event), signature));
      if (signature.rfind("mark:", 0) == 0) marks.push_back(signature.substr(5));
    }
    log.Sync();
    handled += static_cast<uint64_t>(batch.size());
    Say(absl::StrCat("n ", handled));
    for (const std::string& mark : marks) Say(absl::StrCat("mark ", mark));
    // A stalled consumer: the handler holds the batch, so nothing more is acked.
    // It waits on a condition that never becomes true, for the stall's length.
    absl::MutexLock lock(&mu);
    if (stall_for > absl::ZeroDuration()) {
      const absl::Duration pause = stall_for;
      stall_for = absl::ZeroDuration();
      bool never = false;
      mu.AwaitWithTimeout(absl::Condition(&never), pause);
    }
    return absl::OkStatus();
  });
  const std::string message = absl::StrReplaceAll(status.message(), {{"\n", " "}});
  log.Append(absl::StrCat("X ", MonotonicNanos(), " ", absl::StatusCodeToString(status.code()),
                          " ", message));
  log.Sync();
  Say(absl::StrCat("exit ", absl::StatusCodeToString(status.code())));
  // The command thread may still block on stdin; leave without joining it.
  std::cout.flush();
  _exit(status.ok() || status.code() == absl::StatusCode::kAborted ||
                status.code() == absl::StatusCode::kDataLoss
            ? 0
            : 1);
}

}  // namespace walfeed::chaos
