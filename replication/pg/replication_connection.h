// ReplicationConnection: one logical walsender session in CopyBoth mode.
//
// Owned and used by exactly one thread (libpq connections are not thread-safe).
// After Start() the connection is non-blocking: TryRead() hands out complete
// CopyData frames that libpq already buffered and never waits; the caller polls
// socket() for readability (and for writability while HasPendingOutput()) with
// its own deadline, then calls ConsumeInput() / FlushOutput(). This is the shape
// of pg_recvlogical's loop, which keeps feedback flowing whatever the consumer
// does.
#ifndef WALFEED_REPLICATION_PG_REPLICATION_CONNECTION_H_
#define WALFEED_REPLICATION_PG_REPLICATION_CONNECTION_H_

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "replication/lsn.h"
#include "replication/pg/pg_conn.h"

namespace walfeed::replication::pg {

// One CopyData payload, in libpq's buffer (freed with PQfreemem).
class Frame {
 public:
  Frame(char* data, int size) : data_(data), size_(size) {}
  absl::Span<const uint8_t> bytes() const {
    return {reinterpret_cast<const uint8_t*>(data_.get()), static_cast<size_t>(size_)};
  }

 private:
  struct Free {
    void operator()(char* p) const { PQfreemem(p); }
  };
  std::unique_ptr<char, Free> data_;
  int size_;
};

struct StartOptions {
  std::string slot_name;
  Lsn start_lsn;  // Where to start; a position below the slot's is forwarded.
  std::vector<std::string> publication_names;
  uint32_t proto_version = 1;
  bool messages = true;  // Forward pg_logical_emit_message (transactional ones).
};

class ReplicationConnection {
 public:
  // Connects with replication=database. Reads wal_sender_timeout (it sets the
  // feedback cadence) before streaming starts.
  static absl::StatusOr<std::unique_ptr<ReplicationConnection>> Connect(
      absl::string_view conninfo);

  // The server's wal_sender_timeout; zero when disabled.
  absl::Duration wal_sender_timeout() const { return wal_sender_timeout_; }

  // The underlying connection, for simple SQL and replication commands
  // (IDENTIFY_SYSTEM, reading pg_replication_slots) before Start(). Never use it
  // once streaming.
  PGconn* pg() { return conn_.get(); }

  // Runs START_REPLICATION and switches to non-blocking CopyBoth.
  absl::Status Start(const StartOptions& options);

  // The next complete frame if one is buffered, nullopt if the caller must wait
  // for the socket. An error when the stream ended or the connection broke;
  // server errors (slot invalidated, publication missing) carry their SQLSTATE
  // class, classified as in pg_conn.h.
  absl::StatusOr<std::optional<Frame>> TryRead();
  // Reads whatever the socket has into libpq's buffer; call when poll() said
  // readable.
  absl::Status ConsumeInput();

  // Queues one message (a standby status update) and tries to flush it.
  absl::Status Send(absl::Span<const uint8_t> message);
  // Continues flushing queued output; call when poll() said writable.
  absl::Status FlushOutput();
  bool HasPendingOutput() const { return pending_output_; }

  int socket() const { return PQsocket(conn_.get()); }

  // Ends the copy cleanly (CopyDone), drains what the server still sends and
  // reports its final status: OK, or the error it ended with. Gives up after
  // `timeout` (DeadlineExceeded; the caller then just closes the connection), so
  // a shutdown in the middle of a huge transaction stays bounded.
  absl::Status Finish(absl::Duration timeout = absl::Seconds(2));

 private:
  explicit ReplicationConnection(PgConnPtr conn) : conn_(std::move(conn)) {}
  absl::Status StreamEndStatus();

  PgConnPtr conn_;
  absl::Duration wal_sender_timeout_ = absl::Seconds(60);
  bool streaming_ = false;
  bool pending_output_ = false;  // libpq holds unsent output.
};

// The START_REPLICATION command for `options` (exposed for tests).
std::string StartReplicationCommand(const StartOptions& options);

}  // namespace walfeed::replication::pg

#endif  // WALFEED_REPLICATION_PG_REPLICATION_CONNECTION_H_
