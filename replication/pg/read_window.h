// ReadWindow: how long StreamReader waits, after a read that emptied the
// socket, before reading it again, so that the next read finds more; and
// whether it waits at all. A session's window is fixed when configured
// (ReaderOptions::read_coalesce) and waited after every such read. Unset,
// three rules decide it, each after a turn of reads (AfterTurn):
// * Busy: it is waited only while frames arrive at kBusyFramesPerSecond or
//   more, so a quiet stream's latency is the walsender's, not the window's.
// * TCP: while a backlog is read (the walsender sends transactions kBacklogLag
//   or more after their commit) the window is kTcpBacklogReadWindow, at any
//   rate, until it is caught up again (kCaughtUpLag).
// * Unix-domain socket: the window shrinks while the turns after it fill the
//   walsender's send buffer, and grows back while they do not.
// The figures behind each constant are in docs/performance-history.md.
#ifndef WALFEED_REPLICATION_PG_READ_WINDOW_H_
#define WALFEED_REPLICATION_PG_READ_WINDOW_H_

#include <cstddef>
#include <optional>
#include <string>

#include "absl/time/time.h"

namespace walfeed::replication::pg {

// The read window over TCP unless configured. A reader that wakes for every
// message makes the walsender pay a wake-up per message, and one that reads
// again at once while messages trickle in has the kernel acknowledge each as
// it comes, so the walsender's sends go out one TCP segment each: on a
// backlog of single-row transactions, reading at once gave about a quarter
// less throughput and a third more walsender CPU per event than 1 ms
// (docs/performance-history.md).
inline constexpr absl::Duration kTcpReadWindow = absl::Milliseconds(1);
// The read window over TCP, unless configured, while a backlog is read: the
// last transaction a turn began was sent by the walsender kBacklogLag or more
// after its commit (its Begin's commit time against the frame's send time, both
// PostgreSQL's clock, so no clock skew enters). Its changes are that old
// already, so a longer window costs them little, and it lets the walsender's
// sends gather into fewer TCP segments: on the peer harness's W1 backlog,
// 8-10 ms against 1 ms cut the walsender's CPU per event by about a third
// (W3 did not move; docs/performance-history.md). Back to kTcpReadWindow once
// a turn's last Begin was sent within kCaughtUpLag of its commit; in between
// the window stays as it is, so a lag near the threshold does not flip it
// every turn.
// The same holds for a live stream that falls behind: a walsender that sends
// transactions 20 ms after their commit is short of CPU, and at 1 ms it
// spends more per message than the writers leave it, so with 10,000 tx/s on
// two cores a stall of a few milliseconds grew into a backlog of up to two
// seconds before the window changed (p99 0.6-1.9 s in 5 of 10 runs). With the
// 8 ms window from a lag of 20 ms, 6 alternating runs had p99 6-69 ms and
// never more than 139 ms (docs/performance-history.md).
// The socket's receive buffer is left to the kernel: a locked 128 kB one kept
// the walsender's sends queued and cheaper still on a large transaction, but
// dropped segments and stalled some drains for seconds on retransmission
// timeouts (docs/performance-history.md, 2026-12-07 afternoon).
inline constexpr absl::Duration kTcpBacklogReadWindow = absl::Milliseconds(8);
inline constexpr absl::Duration kBacklogLag = absl::Milliseconds(20);
inline constexpr absl::Duration kCaughtUpLag = absl::Milliseconds(5);
// A fall behind logged at info (with its end); shorter ones at debug.
inline constexpr absl::Duration kLoggedBacklogLag = absl::Seconds(1);
// The read window over a Unix-domain socket unless configured: at most
// kUnixReadWindow, halved down to kUnixMinReadWindow while the turns after a
// window bring half of what the walsender's send buffer holds, and doubled
// back while they bring less than an eighth (ReadWindow::AfterTurn).
// There each message the walsender sends is charged a buffer of its own,
// about 0.8 kB with its bytes, against the socket's 208 kB default: at full
// speed it fills it within a millisecond and then blocks, so a fixed 1 ms
// window held single-row transactions to about half the rate of reading at
// once (51k against 83-95k events/s). No window at all is no better: at
// 10,000 tx/s the reader then wakes for every message and latency collapses
// (p99 0.7 s) as it does over TCP.
inline constexpr absl::Duration kUnixReadWindow = absl::Milliseconds(1);
inline constexpr absl::Duration kUnixMinReadWindow = absl::Microseconds(100);
// Unset, the window (kTcpReadWindow, or the Unix one) is waited only while the
// stream is busy: frames read at kBusyFramesPerSecond or more, counted with a
// decay of time constant kLoadDecay (ReadWindow::AfterTurn; a steady stream
// that is being windowed stays busy down to about 6,300 frames/s, and one
// that is not turns busy near 7,800: some hysteresis). While changes
// trickle in, the socket is read again as soon as it has data, so a quiet
// stream's latency is the walsender's, not the window's: at 1,000 single-row
// transactions/s (3,000 frames/s) a 1 ms window after every read was most of
// the latency. At 10,000 (30,000 frames/s) a reader that never waits wakes
// for every message and falls behind (p99 0.5-1.7 s;
// docs/performance-history.md). A backlog read over TCP keeps
// kTcpBacklogReadWindow whatever the rate; over a Unix socket a backlog comes
// at far more than this (a blocked walsender's send buffer is hundreds of
// frames), except one of very wide rows, which gains little from a window.
// A turn that finds the count below kQuietLoad (about one frame in the last
// few milliseconds) ends a quiet spell: the Unix window goes back to its whole
// length for the next busy one. A stall of a few milliseconds in a backlog is
// not quiet: the count stays far above it.
inline constexpr double kQuietLoad = 1;
inline constexpr double kBusyFramesPerSecond = 8000;
inline constexpr absl::Duration kLoadDecay = absl::Milliseconds(2);

// The walsender's send buffer over a Unix-domain socket (the kernel's
// default, net.core.wmem_default) and what each message costs it besides its
// bytes (its socket buffer's overhead).
inline constexpr size_t kUnixSendBuffer = 212992;
inline constexpr size_t kUnixMessageCharge = 768;

class ReadWindow {
 public:
  // A session's window over a Unix-domain socket or TCP, starting at `now`;
  // `configured` (read_coalesce) fixes it. `stream_name`: for logs.
  ReadWindow(std::optional<absl::Duration> configured, bool unix_socket, absl::Time now,
             std::string stream_name);

  // Accounts a turn of reads that ended at `now` with `frames` frames of
  // `bytes` bytes. `after_window`: the turn followed a wait of the window.
  // `begin_lag`: how long after its commit the walsender sent the last Begin
  // the turn read (PostgreSQL's clock on both sides), unset if it read none.
  void AfterTurn(absl::Time now, int frames, size_t bytes, bool after_window,
                 std::optional<absl::Duration> begin_lag);

  // The window's length now (zero: no wait).
  absl::Duration length() const { return length_; }
  // Whether the turn AfterTurn() accounted is followed by a wait of length(),
  // when a wait may follow it at all (it brought data and emptied the socket).
  bool applies() const;
  // For the session's first log line, e.g. "1ms while 8000 frames/s or more
  // arrive, 8ms while a backlog is read: TCP".
  std::string Describe() const;

 private:
  void AdaptUnix(int frames, size_t bytes);
  void AdaptTcp(absl::Duration lag);
  // Decays the count of frames read (load_) to `now` and adds a turn's
  // `frames` to it; returns the count as it was before they were added.
  double AddToLoad(absl::Time now, int frames);

  const std::optional<absl::Duration> configured_;
  const bool unix_socket_;
  const std::string stream_name_;
  absl::Duration length_;
  // The current backlog window's start was logged at info (kLoggedBacklogLag).
  bool backlog_logged_ = false;
  // Frames read, each decaying with kLoadDecay since it was read: about the
  // frame rate times kLoadDecay. As of load_at_.
  double load_ = 0;
  absl::Time load_at_;
};

}  // namespace walfeed::replication::pg

#endif  // WALFEED_REPLICATION_PG_READ_WINDOW_H_
