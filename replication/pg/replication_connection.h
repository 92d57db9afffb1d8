// PgReplicationConnection: the ReplicationConnection (replication/
// replication_connection.h) over libpq, and PgReplicationOpener, which starts a
// stream's walsender sessions on it after checking its slot.
//
// Owned and used by exactly one thread (libpq connections are not thread-safe).
// After Start() the connection is non-blocking: TryRead() hands out complete
// CopyData frames that libpq already buffered and never waits; Wait() polls the
// socket (for writability only while output is pending) and the caller's wake
// descriptor.
#ifndef WALFEED_REPLICATION_PG_REPLICATION_CONNECTION_H_
#define WALFEED_REPLICATION_PG_REPLICATION_CONNECTION_H_

#include <libpq-fe.h>

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "replication/lsn.h"
#include "replication/pg/pg_conn.h"
#include "replication/pg/walsender_watch.h"
#include "replication/replication_connection.h"
#include "replication/start_plan.h"

namespace walfeed::replication::pg {

struct StartOptions {
  std::string slot_name;
  Lsn start_lsn;  // Where to start; a position below the slot's is forwarded.
  std::vector<std::string> publication_names;
  uint32_t proto_version = 1;
  bool messages = true;  // Forward pg_logical_emit_message (transactional ones).
};

class PgReplicationConnection final : public ReplicationConnection {
 public:
  // Connects with replication=database, as `application_name` unless the
  // conninfo sets one (a stream's: StreamWalsenderName). Reads
  // wal_sender_timeout (it sets the feedback cadence) before streaming starts.
  static absl::StatusOr<std::unique_ptr<PgReplicationConnection>> Connect(
      absl::string_view conninfo, absl::string_view application_name = kDefaultApplicationName);

  // The underlying connection, for simple SQL and replication commands
  // (IDENTIFY_SYSTEM, reading pg_replication_slots) before Start(). Never use it
  // once streaming.
  PGconn* pg() { return conn_.get(); }

  // Runs START_REPLICATION and switches to non-blocking CopyBoth.
  absl::Status Start(const StartOptions& options);

  absl::Duration wal_sender_timeout() const override { return wal_sender_timeout_; }
  bool unix_socket() const override { return unix_socket_; }
  absl::StatusOr<std::optional<CopyFrame>> TryRead() override;
  absl::Status ConsumeInput() override;
  absl::Status Send(absl::Span<const uint8_t> message) override;
  absl::Status FlushOutput() override;
  bool HasPendingOutput() const override { return pending_output_; }
  absl::StatusOr<Readiness> Wait(bool want_input, absl::Time deadline, int wake_fd) override;
  absl::Status Finish(absl::Duration timeout) override;
  void RequestAliveCheck() override;
  uint64_t alive_confirmations() const override;
  std::string alive_check_failure() const override;

  int socket() const { return PQsocket(conn_.get()); }

 private:
  PgReplicationConnection(PgConnPtr conn, std::string conninfo)
      : conn_(std::move(conn)), conninfo_(std::move(conninfo)) {}
  absl::Status StreamEndStatus();

  PgConnPtr conn_;
  const std::string conninfo_;
  std::string slot_name_;                 // Set by Start().
  std::unique_ptr<WalSenderWatch> watch_;  // The first RequestAliveCheck() makes it.
  absl::Duration wal_sender_timeout_ = absl::Seconds(60);
  bool unix_socket_ = false;
  bool streaming_ = false;
  bool pending_output_ = false;  // libpq holds unsent output.
};

// A replication connection opened before its stream was prepared (the start-up
// reads the slot over it), kept for the reader's first session: a backend start
// and a cold catalog cache fewer between "prepared" and "streaming". Taken at
// most once; if nobody takes it, dropping the last reference closes it.
class WalSenderHandoff {
 public:
  explicit WalSenderHandoff(std::unique_ptr<PgReplicationConnection> conn)
      : conn_(std::move(conn)) {}
  std::unique_ptr<PgReplicationConnection> Take() ABSL_LOCKS_EXCLUDED(mu_) {
    absl::MutexLock lock(&mu_);
    return std::move(conn_);
  }

 private:
  absl::Mutex mu_;
  std::unique_ptr<PgReplicationConnection> conn_ ABSL_GUARDED_BY(mu_);
};

// The START_REPLICATION command for `options` (exposed for tests).
std::string StartReplicationCommand(const StartOptions& options);

// Opens a stream's sessions: connect, and when `expected_slot` is set, check that
// the slot still exists, is not invalidated, is the same slot and is not ahead of
// the start position (start_plan.h: CheckResume) before START_REPLICATION, whose
// refusals are explained the same way (ExplainStartFailure).
class PgReplicationOpener final : public ReplicationOpener {
 public:
  struct Options {
    std::string stream_name;
    std::string conninfo;
    std::string slot_name;
    std::vector<std::string> publication_names;
    std::string checkpoint_schema;  // For the remedies in error messages.
    std::optional<SlotIdentity> expected_slot;
    // The first Open() starts on this connection when it is still there and
    // still up (one that broke while it waited is replaced by a new one).
    std::shared_ptr<WalSenderHandoff> handoff;
    // The application_name of new connections (StreamWalsenderName).
    std::string walsender_name = kDefaultApplicationName;
  };
  explicit PgReplicationOpener(Options options) : options_(std::move(options)) {}
  absl::StatusOr<std::unique_ptr<ReplicationConnection>> Open(Lsn start) override;

 private:
  // The slot checks and START_REPLICATION on `conn`.
  absl::Status StartOn(PgReplicationConnection& conn, Lsn start);

  const Options options_;
};

}  // namespace walfeed::replication::pg

#endif  // WALFEED_REPLICATION_PG_REPLICATION_CONNECTION_H_
