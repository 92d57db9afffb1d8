#include "tests/testing/fake_replication.h"

#include <poll.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>

#include "absl/strings/ascii.h"
#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "replication/byte_reader.h"
#include "tests/testing/pgoutput_encoder.h"

namespace walfeed::testing {
namespace {

void FreeNew(char* p) { delete[] p; }

bool WakeFdReadable(int fd, int timeout_ms = 0) {
  pollfd p{fd, POLLIN, 0};
  return poll(&p, 1, timeout_ms) > 0 && (p.revents & POLLIN) != 0;
}

}  // namespace

absl::Time FakeClock::Now() const {
  absl::MutexLock lock(&mu_);
  return now_;
}

void FakeClock::AdvanceTo(absl::Time t) {
  absl::MutexLock lock(&mu_);
  if (t > now_) now_ = t;
}

Script& Script::Frame(std::vector<uint8_t> bytes, absl::Duration after) {
  steps_.push_back(Step{after, std::move(bytes), absl::OkStatus()});
  return *this;
}

Script& Script::Frames(const std::vector<std::vector<uint8_t>>& frames) {
  for (const auto& frame : frames) Frame(frame);
  return *this;
}

Script& Script::Trickle(const std::vector<std::vector<uint8_t>>& frames) {
  for (const auto& frame : frames) {
    steps_.push_back(Step{absl::ZeroDuration(), frame, absl::OkStatus(), /*trickles=*/true});
  }
  return *this;
}

Script& Script::Fail(absl::Status status, absl::Duration after) {
  steps_.push_back(Step{after, {}, std::move(status)});
  return *this;
}

Script& Script::WalSenderTimeout(absl::Duration timeout) {
  wal_sender_timeout_ = timeout;
  return *this;
}

Script& Script::UnixSocket() {
  unix_socket_ = true;
  return *this;
}

Script& Script::Busy() {
  silent_ = true;
  busy_ = true;
  return *this;
}

Script& Script::Silent() {
  silent_ = true;
  return *this;
}

std::vector<replication::Lsn> FakeLog::starts() const {
  absl::MutexLock lock(&mu_);
  return starts_;
}

std::vector<SentUpdate> FakeLog::updates() const {
  absl::MutexLock lock(&mu_);
  return updates_;
}

int FakeLog::finished() const {
  absl::MutexLock lock(&mu_);
  return finished_;
}

std::vector<absl::Duration> FakeLog::input_pauses() const {
  absl::MutexLock lock(&mu_);
  return input_pauses_;
}

std::vector<absl::Time> FakeLog::alive_checks() const {
  absl::MutexLock lock(&mu_);
  return alive_checks_;
}

class FakeConnection : public replication::ReplicationConnection {
 public:
  FakeConnection(FakeClock* clock, const Script& script, int session, std::shared_ptr<FakeLog> log)
      : clock_(clock),
        session_(session),
        log_(std::move(log)),
        wal_sender_timeout_(script.wal_sender_timeout()),
        silent_(script.silent()),
        busy_(script.busy()),
        unix_socket_(script.unix_socket()),
        limit_(clock->Now() + FakeOpener::kSimulatedLimit) {
    absl::Time at = clock->Now();
    for (const Script::Step& step : script.steps()) {
      at += step.after;
      pending_.push_back(Pending{at, step.frame, step.failure, step.trickles});
    }
  }

  absl::Duration wal_sender_timeout() const override { return wal_sender_timeout_; }
  bool unix_socket() const override { return unix_socket_; }

  absl::StatusOr<std::optional<replication::CopyFrame>> TryRead() override {
    if (!broken_.ok()) return broken_;
    if (clock_->Now() > limit_) {
      return absl::FailedPreconditionError("the fake's simulated time limit passed");
    }
    if (pending_.empty() || !Visible(pending_.front())) {
      return std::optional<replication::CopyFrame>();
    }
    Pending next = std::move(pending_.front());
    pending_.pop_front();
    last_visible_read_ = reads_;
    if (!next.failure.ok()) {
      broken_ = next.failure;
      return broken_;
    }
    // The walsender's position, for the keepalives that answer reply requests:
    // a keepalive's walEnd is at byte 1, an XLogData's at byte 9.
    const size_t at = next.frame.empty()      ? 0
                      : next.frame[0] == 'k' ? 1
                      : next.frame[0] == 'w' ? 9
                                             : 0;
    if (at > 0 && next.frame.size() >= at + 8) {
      uint64_t lsn = 0;
      for (size_t i = 0; i < 8; ++i) lsn = (lsn << 8) | next.frame[at + i];
      wal_end_ = std::max(wal_end_, lsn);
    }
    char* data = new char[next.frame.size()];
    std::memcpy(data, next.frame.data(), next.frame.size());
    return std::optional<replication::CopyFrame>(
        replication::CopyFrame(data, next.frame.size(), FreeNew));
  }

  absl::Status ConsumeInput() override {
    ++reads_;
    return broken_;
  }

  absl::Status Send(absl::Span<const uint8_t> message) override {
    if (!broken_.ok()) return broken_;
    replication::ByteReader reader(message);
    SentUpdate update;
    update.at = clock_->Now();
    update.session = session_;
    absl::StatusOr<uint8_t> kind = reader.ReadUint8("kind");
    absl::StatusOr<uint64_t> write = reader.ReadUint64("write");
    absl::StatusOr<uint64_t> flush = reader.ReadUint64("flush");
    if (!kind.ok() || *kind != 'r' || !write.ok() || !flush.ok()) {
      return absl::InvalidArgumentError("the loop sent something other than a status update");
    }
    update.write = replication::Lsn(*write);
    update.flush = replication::Lsn(*flush);
    update.reply_requested = message.back() != 0;
    {
      absl::MutexLock lock(&log_->mu_);
      log_->updates_.push_back(update);
    }
    if (log_->on_update) log_->on_update(update);
    if (update.reply_requested && !silent_) {
      // Answered at once, ahead of anything scripted later.
      auto later = std::find_if(pending_.begin(), pending_.end(),
                                [&](const Pending& p) { return p.at > update.at; });
      pending_.insert(later, Pending{update.at,
                                     EncodeKeepalive(replication::Lsn(wal_end_), 0, false),
                                     absl::OkStatus()});
    }
    return absl::OkStatus();
  }

  absl::Status FlushOutput() override { return absl::OkStatus(); }
  bool HasPendingOutput() const override { return false; }
  void RequestAliveCheck() override {
    {
      absl::MutexLock lock(&log_->mu_);
      log_->alive_checks_.push_back(clock_->Now());
    }
    if (busy_) ++alive_confirmations_;
  }
  uint64_t alive_confirmations() const override { return alive_confirmations_; }
  std::string alive_check_failure() const override {
    return busy_ ? "" : "the fake cannot check";
  }

  absl::StatusOr<replication::Readiness> Wait(bool want_input, absl::Time deadline,
                                              int wake_fd) override {
    replication::Readiness ready;
    if (WakeFdReadable(wake_fd)) {
      ready.woken = true;
      return ready;
    }
    const absl::Time now = clock_->Now();
    if (want_input && !pending_.empty() && pending_.front().at <= deadline) {
      clock_->AdvanceTo(pending_.front().at);
      ready.input = true;
      return ready;
    }
    if (!want_input && deadline > now) {
      absl::MutexLock lock(&log_->mu_);
      log_->input_pauses_.push_back(deadline - now);
    }
    // Nothing scripted arrives before the deadline. Threads of the loop's own (its
    // store) get a real millisecond to report, as they would in a real wait,
    // before simulated time jumps.
    if (WakeFdReadable(wake_fd, /*timeout_ms=*/1)) {
      ready.woken = true;
      return ready;
    }
    clock_->AdvanceTo(deadline);
    return ready;
  }

  absl::Status Finish(absl::Duration) override {
    absl::MutexLock lock(&log_->mu_);
    ++log_->finished_;
    return absl::OkStatus();
  }

 private:
  struct Pending {
    absl::Time at;
    std::vector<uint8_t> frame;
    absl::Status failure;
    bool trickles = false;
  };
  // A trickling frame is visible once a read followed the one that made the
  // frame before it visible.
  bool Visible(const Pending& next) const {
    return next.at <= clock_->Now() && (!next.trickles || reads_ > last_visible_read_);
  }
  int reads_ = 0;               // ConsumeInput() calls.
  int last_visible_read_ = -1;  // reads_ when the last frame was handed out.
  FakeClock* const clock_;
  const int session_;
  const std::shared_ptr<FakeLog> log_;
  const absl::Duration wal_sender_timeout_;
  const bool silent_;
  const bool busy_;
  const bool unix_socket_;
  uint64_t alive_confirmations_ = 0;
  const absl::Time limit_;
  uint64_t wal_end_ = 0;  // The newest walEnd delivered.
  std::deque<Pending> pending_;
  absl::Status broken_;
};

FakeOpener::FakeOpener(FakeClock* clock, std::vector<Script> sessions,
                       std::shared_ptr<FakeLog> log)
    : clock_(clock), sessions_(sessions.begin(), sessions.end()), log_(std::move(log)) {}

absl::StatusOr<std::unique_ptr<replication::ReplicationConnection>> FakeOpener::Open(
    replication::Lsn start) {
  {
    absl::MutexLock lock(&log_->mu_);
    log_->starts_.push_back(start);
  }
  if (sessions_.empty()) return absl::FailedPreconditionError("script: no more sessions");
  Script script = std::move(sessions_.front());
  sessions_.pop_front();
  return std::unique_ptr<replication::ReplicationConnection>(
      std::make_unique<FakeConnection>(clock_, script, opened_++, log_));
}

absl::StatusOr<std::vector<std::vector<uint8_t>>> LoadGoldenFrames(absl::string_view path) {
  std::ifstream in{std::string(path)};
  if (!in) return absl::NotFoundError(absl::StrCat("cannot read ", path));
  std::vector<std::vector<uint8_t>> frames;
  std::string line;
  while (std::getline(in, line)) {
    line = std::string(absl::StripAsciiWhitespace(line));
    if (line.empty() || line[0] == '#') continue;
    const std::string bytes = absl::HexStringToBytes(line);
    frames.emplace_back(bytes.begin(), bytes.end());
  }
  return frames;
}

}  // namespace walfeed::testing
