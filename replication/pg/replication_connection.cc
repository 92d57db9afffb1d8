#include "replication/pg/replication_connection.h"

#include <poll.h>
#include <sys/socket.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/cord.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "replication/pg/slot_guard.h"
#include "replication/status_macros.h"

namespace walfeed::replication::pg {
namespace {

void FreePq(char* p) { PQfreemem(p); }

}  // namespace

std::string StartReplicationCommand(const StartOptions& options) {
  // publication_names is parsed by the server like a list of SQL identifiers, so
  // each name is double-quoted inside the string literal to keep its case.
  std::vector<std::string> quoted;
  for (const std::string& name : options.publication_names) {
    quoted.push_back(QuoteIdentifier(name));
  }
  return absl::StrCat("START_REPLICATION SLOT ", QuoteIdentifier(options.slot_name),
                      " LOGICAL ", options.start_lsn.ToString(), " (\"proto_version\" '",
                      options.proto_version, "', \"publication_names\" ",
                      QuoteLiteral(absl::StrJoin(quoted, ",")), ", \"messages\" '",
                      options.messages ? "true" : "false", "')");
}

absl::StatusOr<std::unique_ptr<PgReplicationConnection>> PgReplicationConnection::Connect(
    absl::string_view conninfo, absl::string_view application_name) {
  absl::StatusOr<PgConnPtr> conn =
      pg::Connect(conninfo, ConnectionKind::kReplication, application_name);
  if (!conn.ok()) return conn.status();
  std::unique_ptr<PgReplicationConnection> rc(
      new PgReplicationConnection(std::move(*conn), std::string(conninfo)));
  // A logical walsender accepts simple SQL before START_REPLICATION.
  absl::StatusOr<PgResultPtr> timeout = ExecSimple(
      rc->conn_.get(), "SELECT setting FROM pg_settings WHERE name = 'wal_sender_timeout'");
  if (!timeout.ok()) return timeout.status();
  int64_t ms = 0;
  if (PQntuples(timeout->get()) == 1 && absl::SimpleAtoi(PQgetvalue(timeout->get(), 0, 0), &ms)) {
    rc->wal_sender_timeout_ = absl::Milliseconds(ms);
  }
  sockaddr_storage local{};
  socklen_t length = sizeof(local);
  rc->unix_socket_ = getsockname(rc->socket(), reinterpret_cast<sockaddr*>(&local), &length) == 0 &&
                     local.ss_family == AF_UNIX;
  return rc;
}

absl::Status PgReplicationConnection::Start(const StartOptions& options) {
  absl::StatusOr<PgResultPtr> result =
      ExecSimple(conn_.get(), StartReplicationCommand(options));
  if (!result.ok()) return result.status();
  if (PQresultStatus(result->get()) != PGRES_COPY_BOTH) {
    return absl::UnavailableError("START_REPLICATION did not enter CopyBoth mode");
  }
  if (PQsetnonblocking(conn_.get(), 1) != 0) {
    return StatusFromConnection(conn_.get(), "switching to non-blocking mode");
  }
  streaming_ = true;
  slot_name_ = options.slot_name;
  return absl::OkStatus();
}

void PgReplicationConnection::RequestAliveCheck() {
  if (!streaming_) return;
  if (watch_ == nullptr) {
    // A check that takes longer than the walsender's own timeout says no more.
    const absl::Duration timeout =
        wal_sender_timeout_ > absl::ZeroDuration() ? wal_sender_timeout_ : absl::Seconds(60);
    watch_ = std::make_unique<WalSenderWatch>(conninfo_, slot_name_, PQbackendPID(conn_.get()),
                                              timeout);
  }
  watch_->Request();
}

uint64_t PgReplicationConnection::alive_confirmations() const {
  return watch_ == nullptr ? 0 : watch_->confirmations();
}

std::string PgReplicationConnection::alive_check_failure() const {
  return watch_ == nullptr ? "" : watch_->last_failure();
}

absl::Status PgReplicationConnection::StreamEndStatus() {
  // The copy ended; the server's ErrorResponse, if it sent one, is in a result.
  streaming_ = false;
  absl::Status status;
  while (PGresult* raw = PQgetResult(conn_.get())) {
    PgResultPtr result(raw);
    const ExecStatusType s = PQresultStatus(raw);
    if (s == PGRES_FATAL_ERROR || s == PGRES_NONFATAL_ERROR) {
      status = StatusFromResult(raw, "replication stream");
      // Where decoding failed ("slot ..., output plugin ..., associated LSN ..."),
      // which names the point an operator must get the slot past.
      const char* context = PQresultErrorField(raw, PG_DIAG_CONTEXT);
      if (context != nullptr && *context != '\0') {
        absl::Status with_context(status.code(), absl::StrCat(status.message(), "; context: ",
                                                              absl::StripAsciiWhitespace(context)));
        // Keeps the SQLSTATE (a payload) that callers classify by.
        status.ForEachPayload([&](absl::string_view key, const absl::Cord& value) {
          with_context.SetPayload(key, value);
        });
        status = std::move(with_context);
      }
    }
  }
  if (status.ok() && PQstatus(conn_.get()) == CONNECTION_BAD) {
    status = StatusFromConnection(conn_.get(), "replication stream");
  }
  return status;
}

absl::StatusOr<std::optional<CopyFrame>> PgReplicationConnection::TryRead() {
  char* buffer = nullptr;
  const int n = PQgetCopyData(conn_.get(), &buffer, /*async=*/1);
  if (n > 0) return std::optional<CopyFrame>(CopyFrame(buffer, n, FreePq));
  if (n == 0) return std::optional<CopyFrame>();
  if (n == -1) {
    absl::Status status = StreamEndStatus();
    if (status.ok()) status = absl::UnavailableError("the server ended the replication stream");
    return status;
  }
  return StatusFromConnection(conn_.get(), "reading the replication stream");
}

absl::Status PgReplicationConnection::ConsumeInput() {
  if (PQconsumeInput(conn_.get()) == 0) {
    return StatusFromConnection(conn_.get(), "reading the replication stream");
  }
  return absl::OkStatus();
}

absl::Status PgReplicationConnection::Send(absl::Span<const uint8_t> message) {
  if (PQputCopyData(conn_.get(), reinterpret_cast<const char*>(message.data()),
                    static_cast<int>(message.size())) != 1) {
    return StatusFromConnection(conn_.get(), "sending a status update");
  }
  return FlushOutput();
}

absl::Status PgReplicationConnection::FlushOutput() {
  const int rc = PQflush(conn_.get());
  if (rc < 0) return StatusFromConnection(conn_.get(), "sending a status update");
  pending_output_ = rc == 1;
  return absl::OkStatus();
}

absl::Status PgReplicationConnection::Finish(absl::Duration timeout) {
  if (!streaming_) return absl::OkStatus();
  // Still non-blocking: after CopyDone a PG 15 walsender first sends the rest of a
  // transaction it is in the middle of, which can take as long as the transaction
  // is large. Drain until the server ends the copy or the deadline passes.
  const absl::Time deadline = absl::Now() + timeout;
  if (PQputCopyEnd(conn_.get(), nullptr) != 1) {
    streaming_ = false;
    return StatusFromConnection(conn_.get(), "ending the replication stream");
  }
  for (;;) {
    const int flushed = PQflush(conn_.get());
    if (flushed < 0) {
      streaming_ = false;
      return StatusFromConnection(conn_.get(), "ending the replication stream");
    }
    char* buffer = nullptr;
    const int n = PQgetCopyData(conn_.get(), &buffer, /*async=*/1);
    if (n > 0) {
      PQfreemem(buffer);
      continue;
    }
    if (n == -1) break;  // The server ended the copy.
    if (n < -1) {
      streaming_ = false;
      return StatusFromConnection(conn_.get(), "ending the replication stream");
    }
    const absl::Time now = absl::Now();
    if (now >= deadline) {
      streaming_ = false;
      return absl::DeadlineExceededError(absl::StrCat(
          "the server was still sending after ", absl::FormatDuration(timeout),
          "; closed without waiting for the end of the copy"));
    }
    pollfd fd{socket(), static_cast<short>(POLLIN | (flushed == 1 ? POLLOUT : 0)), 0};
    const int64_t ms = absl::ToInt64Milliseconds(absl::Ceil(deadline - now, absl::Milliseconds(1)));
    if (poll(&fd, 1, static_cast<int>(std::min<int64_t>(ms, 1000))) > 0 &&
        (fd.revents & (POLLIN | POLLERR | POLLHUP)) != 0 && PQconsumeInput(conn_.get()) == 0) {
      streaming_ = false;
      return StatusFromConnection(conn_.get(), "ending the replication stream");
    }
  }
  return StreamEndStatus();
}

absl::StatusOr<Readiness> PgReplicationConnection::Wait(bool want_input, absl::Time deadline,
                                                        int wake_fd) {
  pollfd fds[2] = {
      {socket(), static_cast<short>((want_input ? POLLIN : 0) | (pending_output_ ? POLLOUT : 0)),
       0},
      {wake_fd, POLLIN, 0}};
  // ppoll, not poll: poll's millisecond timeout rounds a read window of a few
  // hundred microseconds (read_coalesce) up to a whole millisecond.
  const absl::Duration left =
      std::clamp(deadline - absl::Now(), absl::ZeroDuration(), absl::Seconds(60));
  const timespec timeout = absl::ToTimespec(left);
  Readiness ready;
  if (ppoll(fds, 2, &timeout, nullptr) < 0) {
    if (errno == EINTR) return ready;
    // ENOMEM and the like pass; the reader reconnects rather than failing the stream.
    return absl::UnavailableError(absl::StrCat("ppoll() failed: ", strerror(errno)));
  }
  // A hang-up or error is reported whether or not input was wanted (poll() sets
  // them regardless): the caller must consume it to see the broken connection,
  // or a full sink would make it spin on a dead socket.
  ready.input = (want_input && (fds[0].revents & POLLIN) != 0) ||
                (fds[0].revents & (POLLERR | POLLHUP | POLLNVAL)) != 0;
  ready.output = (fds[0].revents & POLLOUT) != 0;
  ready.woken = fds[1].revents != 0;
  return ready;
}

absl::Status PgReplicationOpener::StartOn(PgReplicationConnection& conn, Lsn start) {
  SlotCheck check{options_.stream_name, options_.slot_name, options_.checkpoint_schema, 0, {}};
  if (options_.expected_slot) {
    WALFEED_ASSIGN_OR_RETURN(check.system_identifier, ReadSystemIdentifier(conn.pg()));
    WALFEED_ASSIGN_OR_RETURN(check.slot, ReadSlot(conn.pg(), options_.slot_name));
    WALFEED_RETURN_IF_ERROR(CheckResume(check, *options_.expected_slot, start));
  }
  StartOptions start_options;
  start_options.slot_name = options_.slot_name;
  start_options.start_lsn = start;
  start_options.publication_names = options_.publication_names;
  if (absl::Status started = conn.Start(start_options); !started.ok()) {
    return ExplainStartFailure(started, check, start);
  }
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<ReplicationConnection>> PgReplicationOpener::Open(Lsn start) {
  std::unique_ptr<PgReplicationConnection> conn =
      options_.handoff ? options_.handoff->Take() : nullptr;
  if (conn != nullptr) {
    absl::Status started = StartOn(*conn, start);
    if (started.ok()) return std::unique_ptr<ReplicationConnection>(std::move(conn));
    // Only a connection that broke while it waited (the server restarted, or
    // ended the idle session) is replaced; the slot checks' and the server's
    // refusals stand, as they would on a new connection.
    if (PQstatus(conn->pg()) != CONNECTION_BAD) return started;
  }
  WALFEED_ASSIGN_OR_RETURN(
      conn, PgReplicationConnection::Connect(options_.conninfo, options_.walsender_name));
  WALFEED_RETURN_IF_ERROR(StartOn(*conn, start));
  return std::unique_ptr<ReplicationConnection>(std::move(conn));
}

}  // namespace walfeed::replication::pg
