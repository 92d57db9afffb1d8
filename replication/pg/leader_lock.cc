#include "replication/pg/leader_lock.h"

#include <poll.h>

#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "replication/status_macros.h"
#include "spdlog/spdlog.h"

namespace walfeed::replication::pg {
namespace {

constexpr char kSessionPrefix[] = "walfeed leader ";

// The lock's key text; hashtextextended makes it the advisory lock's bigint.
std::string KeyText(const std::string& key) { return absl::StrCat("walfeed leader ", key); }

}  // namespace

std::string LeaderLock::Advertise() const {
  return options_.advertise ? options_.advertise() : std::string();
}

std::string LeaderLock::SessionName() const {
  std::string name = absl::StrCat(kSessionPrefix, options_.instance, " ", Advertise());
  if (name.size() > 63) name.resize(63);  // NAMEDATALEN - 1.
  return name;
}

absl::Status LeaderLock::Connect() {
  WALFEED_ASSIGN_OR_RETURN(PgConnPtr conn, pg::Connect(options_.conninfo, ConnectionKind::kSql));
  // A dead peer's session ends soon (TCP keepalives and user timeout;
  // ignored on Unix sockets, where a dead process closes the socket at once).
  WALFEED_RETURN_IF_ERROR(
      Exec(conn.get(),
           "SELECT set_config('application_name', $1, false), "
           "set_config('tcp_keepalives_idle', '2', false), "
           "set_config('tcp_keepalives_interval', '1', false), "
           "set_config('tcp_keepalives_count', '3', false), "
           "set_config('tcp_user_timeout', '5000', false)",
           {SessionName()})
          .status());
  conn_ = std::move(conn);
  return absl::OkStatus();
}

absl::StatusOr<bool> LeaderLock::TryAcquire() {
  if (held_) return true;
  if (conn_ == nullptr || PQstatus(conn_.get()) != CONNECTION_OK) {
    conn_.reset();
    WALFEED_RETURN_IF_ERROR(Connect());
  }
  const std::string key = KeyText(options_.key);
  for (int attempt = 0; attempt < 2; ++attempt) {
    WALFEED_ASSIGN_OR_RETURN(
        PgResultPtr locked,
        Exec(conn_.get(), "SELECT pg_try_advisory_lock(hashtextextended($1, 0))", {key}));
    if (Value(locked.get(), 0, 0).value_or("") == "t") {
      // The lease: PostgreSQL ends this session (and frees the lock) when no
      // query arrives for kServerTimeout, whatever the network or this
      // process does (a cut, a stall, a frozen process). Check() queries far
      // more often.
      absl::StatusOr<PgResultPtr> lease = Exec(
          conn_.get(), "SELECT set_config('idle_session_timeout', $1, false)",
          {absl::StrCat(absl::ToInt64Milliseconds(kServerTimeout), "ms")});
      if (!lease.ok()) {
        conn_.reset();  // Frees the lock: never lead without the lease.
        return lease.status();
      }
      held_ = true;
      holder_ = Advertise();
      break;
    }
    // Who holds it: a session-level advisory lock on a bigint shows in
    // pg_locks as classid (high half) and objid (low half), objsubid 1.
    WALFEED_ASSIGN_OR_RETURN(
        PgResultPtr who,
        Exec(conn_.get(),
             "SELECT a.pid, coalesce(a.application_name, '') FROM pg_locks l "
             "JOIN pg_stat_activity a ON a.pid = l.pid "
             "WHERE l.locktype = 'advisory' AND l.granted AND l.objsubid = 1 "
             "AND ((l.classid::int8 << 32) | l.objid::int8) = hashtextextended($1, 0)",
             {key}));
    holder_.clear();
    if (PQntuples(who.get()) == 0) continue;  // Released meanwhile: try again.
    const std::string pid = Value(who.get(), 0, 0).value_or("");
    const std::string name = Value(who.get(), 0, 1).value_or("");
    std::vector<std::string> parts = absl::StrSplit(name, ' ');
    // "walfeed leader <instance> <advertise>"
    if (parts.size() >= 3 && parts[0] == "walfeed" && parts[1] == "leader") {
      if (parts[2] == options_.instance && attempt == 0) {
        // Our own session from before our connection dropped: PostgreSQL has
        // not noticed yet. End it rather than wait.
        spdlog::info("{}: ending this instance's stale leadership session (pid {})",
                     options_.key, pid);
        // With a timeout: it waits until the session is gone (and the lock free).
        (void)Exec(conn_.get(), "SELECT pg_terminate_backend($1::int, 3000)", {pid});
        continue;
      }
      if (parts.size() >= 4) holder_ = parts[3];
    }
    return false;
  }
  if (!held_) return false;
  // A walsender under this stream's name still on the slot is a deposed
  // leader's (this instance was not streaming): end it instead of waiting for
  // wal_sender_timeout, and wait (up to 3 s) until it is gone, so the slot is
  // free when this instance starts streaming. Any other client on the slot is
  // left alone, another stream's too: ending it would hand this stream a slot
  // the start then refuses as shared (SLOT_SHARED), and cost the other stream
  // a reconnect. The functions behind the views pg_replication_slots
  // and pg_stat_activity: on the new session's cold catalog cache, expanding
  // the views took about 10 ms of a start-up's critical path, the functions
  // about 3.5.
  absl::StatusOr<PgResultPtr> ended =
      Exec(conn_.get(),
           "SELECT s.active_pid, pg_terminate_backend(s.active_pid, 3000) "
           "FROM pg_get_replication_slots() s "
           "CROSS JOIN LATERAL pg_stat_get_activity(s.active_pid) a "
           "WHERE s.slot_name = $1 AND s.active_pid IS NOT NULL AND a.pid = s.active_pid "
           "AND a.backend_type = 'walsender' AND a.application_name = $2",
           {options_.slot_name, options_.walsender_name});
  if (!ended.ok()) {
    spdlog::warn("{}: could not end the previous leader's walsender on slot {}: {}",
                 options_.key, options_.slot_name, ended.status().ToString());
  } else if (PQntuples(ended->get()) > 0) {
    spdlog::warn("{}: ended walsender pid {}, through which a previous leader of this stream "
                 "still held slot {}",
                 options_.key, Value(ended->get(), 0, 0).value_or("?"), options_.slot_name);
  }
  return true;
}

absl::Status LeaderLock::Check() {
  if (!held_ || conn_ == nullptr) {
    return absl::UnavailableError(absl::StrCat("the leadership of ", options_.key, " is not held"));
  }
  auto lost = [&](absl::string_view why) {
    // The message first: `why` may point into the connection (PQerrorMessage).
    absl::Status status =
        absl::UnavailableError(absl::StrCat("lost the leadership of ", options_.key, ": ", why));
    conn_.reset();  // Whatever PostgreSQL still thinks, this instance stops leading.
    held_ = false;
    return status;
  };
  PGconn* conn = conn_.get();
  if (PQsetnonblocking(conn, 1) != 0 || PQsendQuery(conn, "SELECT 1") != 1) {
    return lost(PQerrorMessage(conn));
  }
  const absl::Time deadline = absl::Now() + kCheckTimeout;
  for (;;) {
    const int flushed = PQflush(conn);
    if (flushed < 0) return lost(PQerrorMessage(conn));
    if (flushed == 0) {
      if (PQconsumeInput(conn) != 1) return lost(PQerrorMessage(conn));
      if (!PQisBusy(conn)) break;
    }
    const absl::Duration left = deadline - absl::Now();
    if (left <= absl::ZeroDuration()) {
      return lost(absl::StrCat("PostgreSQL did not answer within ",
                               absl::FormatDuration(kCheckTimeout)));
    }
    pollfd fd{PQsocket(conn), static_cast<short>(POLLIN | (flushed == 1 ? POLLOUT : 0)), 0};
    poll(&fd, 1, static_cast<int>(absl::ToInt64Milliseconds(left)) + 1);
  }
  absl::Status status = absl::OkStatus();
  while (PGresult* raw = PQgetResult(conn)) {
    PgResultPtr result(raw);
    if (PQresultStatus(raw) != PGRES_TUPLES_OK && status.ok()) {
      status = StatusFromResult(raw, "SELECT 1");
    }
  }
  if (!status.ok()) return lost(status.message());
  return absl::OkStatus();
}

void LeaderLock::Release() {
  conn_.reset();
  held_ = false;
}

}  // namespace walfeed::replication::pg
