#include "replication/pg/walsender_watch.h"

#include <libpq-fe.h>
#include <poll.h>

#include <algorithm>
#include <optional>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "replication/pg/pg_conn.h"
#include "replication/status_macros.h"

namespace walfeed::replication::pg {
namespace {

constexpr char kWhat[] = "asking whether the walsender still holds the slot";
// A running check looks at `stop` at least this often.
constexpr absl::Duration kSlice = absl::Milliseconds(100);

// Waits until `conn`'s socket is readable (`read`) or writable, in slices.
absl::Status AwaitSocket(PGconn* conn, bool read, absl::Time deadline,
                         const std::atomic<bool>* stop) {
  for (;;) {
    if (stop != nullptr && stop->load()) return absl::CancelledError("stopping");
    const absl::Time now = absl::Now();
    if (now >= deadline) return absl::DeadlineExceededError(absl::StrCat(kWhat, ": no answer"));
    pollfd fd{};
    fd.fd = PQsocket(conn);
    if (fd.fd < 0) return StatusFromConnection(conn, kWhat);
    fd.events = read ? POLLIN : POLLOUT;
    const int ms = static_cast<int>(
        absl::ToInt64Milliseconds(std::min(kSlice, deadline - now)) + 1);
    const int ready = poll(&fd, 1, ms);
    if (ready > 0) return absl::OkStatus();
    // ready < 0 (EINTR): look again.
  }
}

}  // namespace

WalSenderWatch::WalSenderWatch(std::string conninfo, std::string slot_name, int walsender_pid,
                               absl::Duration check_timeout)
    : conninfo_(std::move(conninfo)),
      slot_name_(std::move(slot_name)),
      walsender_pid_(walsender_pid),
      check_timeout_(check_timeout) {}

WalSenderWatch::~WalSenderWatch() {
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
  }
  stop_.store(true);
  if (thread_.joinable()) thread_.join();
}

void WalSenderWatch::Request() {
  absl::MutexLock lock(&mu_);
  requested_ = true;
  if (!thread_.joinable()) thread_ = std::thread([this] { Loop(); });
}

uint64_t WalSenderWatch::confirmations() const {
  absl::MutexLock lock(&mu_);
  return confirmations_;
}

uint64_t WalSenderWatch::failures() const {
  absl::MutexLock lock(&mu_);
  return failures_;
}

std::string WalSenderWatch::last_failure() const {
  absl::MutexLock lock(&mu_);
  return last_failure_;
}

void WalSenderWatch::Loop() {
  for (;;) {
    {
      absl::MutexLock lock(&mu_);
      mu_.Await(absl::Condition(
          +[](WalSenderWatch* w) ABSL_EXCLUSIVE_LOCKS_REQUIRED(w->mu_) {
            return w->requested_ || w->stopping_;
          },
          this));
      if (stopping_) return;
      requested_ = false;  // A request during this check asks for another one.
    }
    absl::StatusOr<bool> holds = HoldsSlot(conninfo_, slot_name_, walsender_pid_,
                                           absl::Now() + check_timeout_, &stop_);
    absl::MutexLock lock(&mu_);
    if (holds.ok() && *holds) {
      ++confirmations_;
    } else {
      ++failures_;
      last_failure_ = holds.ok() ? absl::StrCat("pid ", walsender_pid_,
                                                " no longer holds slot ", slot_name_)
                                 : holds.status().ToString();
    }
  }
}

absl::StatusOr<bool> WalSenderWatch::HoldsSlot(const std::string& conninfo,
                                               const std::string& slot_name, int walsender_pid,
                                               absl::Time deadline,
                                               const std::atomic<bool>* stop) {
  PgConnPtr conn = StartConnect(conninfo, ConnectionKind::kSql);
  if (conn == nullptr) return absl::UnavailableError(absl::StrCat(kWhat, ": out of memory"));
  PGconn* const c = conn.get();
  // libpq's asynchronous connect: before the first PQconnectPoll, wait as if it
  // had said "writing"; the socket may change between calls (several hosts).
  PostgresPollingStatusType polling = PGRES_POLLING_WRITING;
  while (polling != PGRES_POLLING_OK) {
    if (polling == PGRES_POLLING_FAILED || PQstatus(c) == CONNECTION_BAD) {
      return StatusFromConnection(c, kWhat);
    }
    WALFEED_RETURN_IF_ERROR(AwaitSocket(c, polling == PGRES_POLLING_READING, deadline, stop));
    polling = PQconnectPoll(c);
  }
  if (PQsetnonblocking(c, 1) != 0) return StatusFromConnection(c, kWhat);
  const char* params[] = {slot_name.c_str()};
  if (PQsendQueryParams(c,
                        "SELECT active_pid FROM pg_catalog.pg_replication_slots "
                        "WHERE slot_name = $1",
                        1, nullptr, params, nullptr, nullptr, 0) == 0) {
    return StatusFromConnection(c, kWhat);
  }
  for (;;) {
    const int flushed = PQflush(c);
    if (flushed < 0) return StatusFromConnection(c, kWhat);
    if (flushed == 0) break;
    WALFEED_RETURN_IF_ERROR(AwaitSocket(c, /*read=*/false, deadline, stop));
  }
  bool holds = false;
  for (;;) {
    while (PQisBusy(c)) {
      WALFEED_RETURN_IF_ERROR(AwaitSocket(c, /*read=*/true, deadline, stop));
      if (PQconsumeInput(c) == 0) return StatusFromConnection(c, kWhat);
    }
    PgResultPtr result(PQgetResult(c));
    if (result == nullptr) break;
    if (PQresultStatus(result.get()) != PGRES_TUPLES_OK) {
      return StatusFromResult(result.get(), kWhat);
    }
    if (PQntuples(result.get()) == 1) {
      const std::optional<std::string> pid = Value(result.get(), 0, 0);
      holds = pid.has_value() && *pid == absl::StrCat(walsender_pid);
    }
  }
  return holds;
}

}  // namespace walfeed::replication::pg
