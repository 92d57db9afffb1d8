// ReplicationConnection: one logical walsender session in CopyBoth mode, as the
// stream loop drives it; and ReplicationOpener, which starts such sessions.
//
// replication/pg implements both over libpq; tests implement them over recorded
// frames (tests/golden) in simulated time, so the loop's decisions are tested
// without a server. The shape is pg_recvlogical's: TryRead() hands out complete
// CopyData frames already received and never waits; Wait() is the one place the
// loop blocks, until input, room for output, a wake-up, or a deadline.
//
// A connection is owned and used by exactly one thread.
#ifndef WALFEED_REPLICATION_REPLICATION_CONNECTION_H_
#define WALFEED_REPLICATION_REPLICATION_CONNECTION_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "replication/lsn.h"

namespace walfeed::replication {

// One CopyData payload, in memory owned by the frame (freed by its deleter).
class CopyFrame {
 public:
  using Deleter = void (*)(char*);
  CopyFrame(char* data, size_t size, Deleter deleter) : data_(data, deleter), size_(size) {}
  absl::Span<const uint8_t> bytes() const {
    return {reinterpret_cast<const uint8_t*>(data_.get()), size_};
  }

 private:
  std::unique_ptr<char, Deleter> data_;
  size_t size_;
};

// What ended a Wait().
struct Readiness {
  bool input = false;   // The connection has input to consume (or an error to report).
  bool output = false;  // Queued output may be flushed.
  bool woken = false;   // The wake descriptor fired.
};

class ReplicationConnection {
 public:
  virtual ~ReplicationConnection() = default;

  // The server's wal_sender_timeout; zero when disabled.
  virtual absl::Duration wal_sender_timeout() const = 0;
  // The session runs over a Unix-domain socket (no TCP segments, and the
  // walsender's sends block once its socket's small send buffer is full).
  virtual bool unix_socket() const { return false; }

  // The next complete frame already received, nullopt if the caller must wait.
  // An error when the stream ended or the connection broke; server errors carry
  // their SQLSTATE (sql_text.h) and are classified as in retry.h.
  virtual absl::StatusOr<std::optional<CopyFrame>> TryRead() = 0;
  // Moves what has arrived into the connection's buffer; call after Wait()
  // reported input.
  virtual absl::Status ConsumeInput() = 0;

  // Queues one message (a standby status update) and tries to flush it.
  virtual absl::Status Send(absl::Span<const uint8_t> message) = 0;
  // Continues flushing queued output; call after Wait() reported output.
  virtual absl::Status FlushOutput() = 0;
  virtual bool HasPendingOutput() const = 0;

  // Blocks until the connection is readable (only when `want_input`), writable
  // (only while output is pending), `wake_fd` is readable, or `deadline`.
  // Interruption by a signal returns with nothing ready.
  virtual absl::StatusOr<Readiness> Wait(bool want_input, absl::Time deadline, int wake_fd) = 0;

  // A silent session's second opinion (see pg/walsender_watch.h): starts,
  // without blocking, a check over another connection that the walsender still
  // holds the slot; alive_confirmations() counts the checks that found it did.
  // Connections that cannot check never confirm.
  virtual void RequestAliveCheck() {}
  virtual uint64_t alive_confirmations() const { return 0; }
  // Why the last check did not confirm; empty when none failed.
  virtual std::string alive_check_failure() const { return ""; }

  // Ends the copy cleanly (CopyDone), drains what the server still sends and
  // reports its final status; gives up after `timeout` so that a shutdown in the
  // middle of a huge transaction stays bounded.
  virtual absl::Status Finish(absl::Duration timeout) = 0;
};

class ReplicationOpener {
 public:
  virtual ~ReplicationOpener() = default;
  // Connects, checks that the slot is still the one walfeed streams from, and
  // starts streaming from `start` (the durably stored confirmed position, or 0/0
  // for the slot's own). Definite errors (a dropped or invalidated slot) end the
  // stream; transient ones are retried by the caller.
  virtual absl::StatusOr<std::unique_ptr<ReplicationConnection>> Open(Lsn start) = 0;
};

}  // namespace walfeed::replication

#endif  // WALFEED_REPLICATION_REPLICATION_CONNECTION_H_
