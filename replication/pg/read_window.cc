#include "replication/pg/read_window.h"

#include <algorithm>
#include <cmath>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "replication/pg/replication_log.h"

namespace walfeed::replication::pg {

ReadWindow::ReadWindow(std::optional<absl::Duration> configured, bool unix_socket,
                       absl::Time now, std::string stream_name)
    : configured_(configured),
      unix_socket_(unix_socket),
      stream_name_(std::move(stream_name)),
      length_(configured ? *configured : unix_socket ? kUnixReadWindow : kTcpReadWindow),
      load_at_(now) {}

void ReadWindow::AfterTurn(absl::Time now, int frames, size_t bytes, bool after_window,
                           std::optional<absl::Duration> begin_lag) {
  const double load_before = AddToLoad(now, frames);
  if (configured_) return;
  if (unix_socket_) {
    if (after_window) AdaptUnix(frames, bytes);
    // A quiet stream's next busy spell starts from the whole window, as the
    // first window of a session does; it shortens again within a few turns.
    if (load_before < kQuietLoad) length_ = kUnixReadWindow;
  } else if (begin_lag) {
    AdaptTcp(*begin_lag);
  }
}

bool ReadWindow::applies() const {
  if (configured_) return true;
  // Frames come at kBusyFramesPerSecond or more, or a backlog is read over TCP.
  return load_ >= kBusyFramesPerSecond * absl::ToDoubleSeconds(kLoadDecay) ||
         (!unix_socket_ && length_ == kTcpBacklogReadWindow);
}

std::string ReadWindow::Describe() const {
  if (configured_) return absl::FormatDuration(length_);
  const std::string busy = absl::StrFormat("%s while %.0f frames/s or more arrive",
                                           absl::FormatDuration(length_), kBusyFramesPerSecond);
  return unix_socket_ ? absl::StrCat(busy, ", less while a backlog is read: Unix socket")
                      : absl::StrCat(busy, ", ", absl::FormatDuration(kTcpBacklogReadWindow),
                                     " while a backlog is read: TCP");
}

void ReadWindow::AdaptUnix(int frames, size_t bytes) {
  // What the turn's messages held of the walsender's send buffer: each is
  // charged its bytes and a buffer of its own.
  const size_t charged = bytes + static_cast<size_t>(frames) * kUnixMessageCharge;
  if (charged >= kUnixSendBuffer / 2) {
    length_ = std::max(length_ / 2, kUnixMinReadWindow);
  } else if (charged < kUnixSendBuffer / 8) {
    length_ = std::min(length_ * 2, kUnixReadWindow);
  }
}

void ReadWindow::AdaptTcp(absl::Duration lag) {
  const absl::Duration window = lag >= kBacklogLag     ? kTcpBacklogReadWindow
                                : lag < kCaughtUpLag ? kTcpReadWindow
                                                       : length_;
  if (window == length_) return;
  length_ = window;
  const std::string sent = absl::FormatDuration(absl::Trunc(lag, absl::Milliseconds(1)));
  // A backlog of a second or more is logged at info, with its end; a live
  // stream's brief falls behind, which may come every few seconds under
  // load, at debug.
  if (window == kTcpBacklogReadWindow) {
    backlog_logged_ = lag >= kLoggedBacklogLag;
    ReplicationLogger()->log(backlog_logged_ ? spdlog::level::info : spdlog::level::debug,
                  "stream {}: reading a backlog (PostgreSQL sent a transaction {} after its "
                  "commit): read window {} until caught up",
                  stream_name_, sent, absl::FormatDuration(window));
  } else {
    ReplicationLogger()->log(backlog_logged_ ? spdlog::level::info : spdlog::level::debug,
                  "stream {}: caught up (a transaction sent {} after its commit): read window {}",
                  stream_name_, sent, absl::FormatDuration(window));
    backlog_logged_ = false;
  }
}

double ReadWindow::AddToLoad(absl::Time now, int frames) {
  // Never negative: a wall clock stepped back must not grow the count.
  const absl::Duration elapsed = std::max(now - load_at_, absl::ZeroDuration());
  const double before = load_ * std::exp(-absl::FDivDuration(elapsed, kLoadDecay));
  load_ = before + frames;
  load_at_ = now;
  return before;
}

}  // namespace walfeed::replication::pg
