#include "replication/pg/pg_conn.h"

#include <algorithm>
#include <cstdint>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/cord.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "replication/status_macros.h"
#include "spdlog/spdlog.h"

namespace walfeed::replication::pg {
namespace {

std::string Field(const PGresult* result, int field) {
  const char* value = PQresultErrorField(result, field);
  return value == nullptr ? "" : value;
}

}  // namespace

absl::StatusCode CodeForSqlState(absl::string_view sqlstate) {
  if (sqlstate.size() != 5) return absl::StatusCode::kUnavailable;
  const absl::string_view cls = sqlstate.substr(0, 2);
  if (sqlstate == "55006") return absl::StatusCode::kUnavailable;  // object in use: slot busy
  if (sqlstate == "55000") return absl::StatusCode::kFailedPrecondition;  // e.g. slot invalidated
  if (sqlstate == "42501") return absl::StatusCode::kPermissionDenied;
  if (sqlstate == "42704" || sqlstate == "42P01" || sqlstate == "42883") {
    return absl::StatusCode::kNotFound;  // undefined object / table / function
  }
  if (sqlstate == "42601") return absl::StatusCode::kInvalidArgument;  // syntax error
  if (sqlstate == "53400") return absl::StatusCode::kResourceExhausted;  // slots/senders full
  if (cls == "28") return absl::StatusCode::kPermissionDenied;  // authentication
  if (cls == "3D" || cls == "3F") return absl::StatusCode::kNotFound;  // database / schema
  if (cls == "42" || cls == "22" || cls == "0A" || cls == "55" || cls == "F0") {
    return absl::StatusCode::kFailedPrecondition;
  }
  if (cls == "40") return absl::StatusCode::kAborted;
  // 08 connection, 57 operator intervention (shutdown, restart), 53 resources,
  // XX internal and anything unknown: transient unless proven otherwise.
  return absl::StatusCode::kUnavailable;
}

absl::Status StatusFromResult(const PGresult* result, absl::string_view what) {
  if (result == nullptr) return absl::UnavailableError(absl::StrCat(what, ": no result"));
  const std::string sqlstate = Field(result, PG_DIAG_SQLSTATE);
  std::string message = absl::StrCat(what, ": ", Field(result, PG_DIAG_MESSAGE_PRIMARY));
  if (message.size() == what.size() + 2) {
    message = absl::StrCat(what, ": ", PQresultErrorMessage(result));
  }
  if (!sqlstate.empty()) absl::StrAppend(&message, " (SQLSTATE ", sqlstate, ")");
  const std::string detail = Field(result, PG_DIAG_MESSAGE_DETAIL);
  if (!detail.empty()) absl::StrAppend(&message, "; detail: ", detail);
  const std::string hint = Field(result, PG_DIAG_MESSAGE_HINT);
  if (!hint.empty()) absl::StrAppend(&message, "; hint: ", hint);
  absl::Status status(CodeForSqlState(sqlstate), message);
  SetSqlState(status, sqlstate);
  return status;
}

absl::Status StatusFromConnectionMessage(absl::string_view error, absl::string_view what) {
  // Connections run with verbose errors (see Connect), so a refusal by the
  // server reads "<severity>:  <SQLSTATE>: <message>", whatever language the
  // server's messages are in; with several hosts tried, each attempt adds a
  // line, and the last attempt decides. libpq's own failures (refused, reset,
  // timed out) carry no SQLSTATE and are transient.
  std::string sqlstate;
  std::string message;
  bool first_line = true;  // Of an attempt: the only line that may carry the code.
  for (absl::string_view line : absl::StrSplit(error, '\n')) {
    line = absl::StripTrailingAsciiWhitespace(line);
    if (line.empty() || absl::StartsWith(line, "LOCATION:")) continue;
    // libpq starts each host's attempt with "connection to server ...": a new
    // attempt, whose outcome replaces the previous one's.
    if (absl::StartsWith(line, "connection to server")) {
      sqlstate.clear();
      message.clear();
      first_line = true;
    }
    const bool may_carry_code = std::exchange(first_line, false);
    // The code follows the first ":  " and is itself followed by ": ".
    const size_t at = line.find(":  ");
    if (may_carry_code && at != absl::string_view::npos && line.size() >= at + 3 + 7 &&
        line.substr(at + 3 + 5, 2) == ": " &&
        std::all_of(line.begin() + at + 3, line.begin() + at + 3 + 5, [](char c) {
          return absl::ascii_isdigit(static_cast<unsigned char>(c)) ||
                 absl::ascii_isupper(static_cast<unsigned char>(c));
        })) {
      sqlstate = std::string(line.substr(at + 3, 5));
      message = absl::StrCat(line.substr(0, at + 3), line.substr(at + 3 + 7));
      continue;
    }
    absl::StrAppend(&message, message.empty() ? "" : "; ", line);
  }
  if (message.empty()) message = "connection failed";
  if (sqlstate.empty()) return absl::UnavailableError(absl::StrCat(what, ": ", message));
  absl::Status status(CodeForSqlState(sqlstate),
                      absl::StrCat(what, ": ", message, " (SQLSTATE ", sqlstate, ")"));
  SetSqlState(status, sqlstate);
  return status;
}

absl::Status StatusFromConnection(const PGconn* conn, absl::string_view what) {
  if (conn == nullptr) return absl::UnavailableError(absl::StrCat(what, ": out of memory"));
  return StatusFromConnectionMessage(PQerrorMessage(conn), what);
}

namespace {
void LogNotice(void*, const char* message) {
  std::string text(message);
  while (!text.empty() && text.back() == '\n') text.pop_back();
  spdlog::info("postgres: {}", text);
}

// The keywords and values every connect passes to libpq (null-terminated arrays
// pointing into `conninfo`, which the caller keeps alive).
//
// libpq processes these in order and a repeated keyword takes the last value, so:
// our defaults first (a conninfo that sets one overrides it), then the conninfo
// itself (expanded from the first dbname keyword), then replication=database
// last so a conninfo cannot turn it off.
//
// The defaults bound a silent network: without them a connect to a host that
// drops packets waits for the kernel's SYN retries (about 2 minutes), and an
// idle connection to a vanished host is never noticed. TCP keepalives after
// 10 s idle, every 5 s, 3 probes; unacknowledged data for 30 s ends the
// connection (tcp_user_timeout); a connect gives up after 10 s. (Ignored for
// Unix sockets.)
struct ConnectParams {
  ConnectParams(const std::string& conninfo, ConnectionKind kind,
                const std::string& application_name)
      : keys{"application_name", "connect_timeout",     "keepalives",
             "keepalives_idle",  "keepalives_interval", "keepalives_count",
             "tcp_user_timeout", "dbname"},
        values{application_name.c_str(), "10", "1", "10", "5", "3", "30000", conninfo.c_str()} {
    if (kind == ConnectionKind::kReplication) {
      keys.push_back("replication");
      values.push_back("database");
    }
    keys.push_back(nullptr);
    values.push_back(nullptr);
  }
  std::vector<const char*> keys;
  std::vector<const char*> values;
};
}  // namespace

PgConnPtr StartConnect(absl::string_view conninfo, ConnectionKind kind) {
  const std::string conninfo_str(conninfo);
  const std::string application_name(kDefaultApplicationName);
  const ConnectParams params(conninfo_str, kind, application_name);
  PgConnPtr conn(PQconnectStartParams(params.keys.data(), params.values.data(),
                                      /*expand_dbname=*/1));
  if (conn != nullptr && PQstatus(conn.get()) != CONNECTION_BAD) {
    PQsetErrorVerbosity(conn.get(), PQERRORS_VERBOSE);
    PQsetNoticeProcessor(conn.get(), &LogNotice, nullptr);
  }
  return conn;
}

absl::Status CheckConninfo(absl::string_view conninfo) {
  const std::string text(conninfo);
  char* error = nullptr;
  PQconninfoOption* options = PQconninfoParse(text.c_str(), &error);
  if (options != nullptr) {
    PQconninfoFree(options);
    return absl::OkStatus();
  }
  std::string why = error != nullptr ? std::string(absl::StripAsciiWhitespace(error)) : "";
  if (error != nullptr) PQfreemem(error);
  // libpq's other messages may quote a piece of the string.
  if (!absl::StartsWith(why, "invalid connection option")) {
    why = "it is neither key=value pairs nor a postgresql:// URI libpq can parse";
  }
  return absl::InvalidArgumentError(absl::StrCat(
      "the conninfo is not a valid libpq connection string: ", why,
      " (https://www.postgresql.org/docs/15/libpq-connect.html#LIBPQ-CONNSTRING)"));
}

std::string StreamWalsenderName(absl::string_view checkpoint_schema, absl::string_view stream) {
  std::string name = absl::StrCat(kDefaultApplicationName, " ", checkpoint_schema, "/", stream);
  // PostgreSQL stores what it is given only when it is printable ASCII within
  // NAMEDATALEN - 1 bytes (others it rewrites or cuts, and the name must match
  // what it shows). Distinct names must stay distinct, and every instance must
  // compute the same one: otherwise a readable start, then FNV-1a of the whole
  // (absl's hash is seeded per process).
  constexpr size_t kMax = 63;
  uint64_t fnv = 14695981039346656037ull;
  bool printable = true;
  for (const unsigned char c : name) {
    fnv = (fnv ^ c) * 1099511628211ull;
    printable = printable && c >= 0x20 && c < 0x7f;
  }
  if (printable && name.size() <= kMax) return name;
  const std::string hash = absl::StrFormat("%016x", fnv);
  for (char& c : name) {
    if (static_cast<unsigned char>(c) < 0x20 || static_cast<unsigned char>(c) >= 0x7f) c = '?';
  }
  name.resize(std::min(name.size(), kMax - hash.size() - 1));
  return absl::StrCat(name, "~", hash);
}

absl::StatusOr<PgConnPtr> Connect(absl::string_view conninfo, ConnectionKind kind,
                                  absl::string_view application_name) {
  WALFEED_RETURN_IF_ERROR(CheckConninfo(conninfo));
  const std::string conninfo_str(conninfo);
  const std::string application_name_str(application_name);
  const ConnectParams params(conninfo_str, kind, application_name_str);
  const std::vector<const char*>& keys = params.keys;
  const std::vector<const char*>& values = params.values;
  // One blocking connect, with libpq's own handling of several hosts and
  // addresses (connect_timeout per address, then the next one). A success costs
  // one connection.
  PgConnPtr conn(PQconnectdbParams(keys.data(), values.data(), /*expand_dbname=*/1));
  if (conn == nullptr) return absl::UnavailableError("connecting to PostgreSQL: out of memory");
  if (PQstatus(conn.get()) != CONNECTION_OK) {
    // Verbose errors carry the SQLSTATE of a refusal (see StatusFromConnection),
    // and the verbosity must be set before the startup's errors are formatted,
    // so connect once more that way: a connection object that has only begun,
    // the verbosity, then PQreset (which keeps it). Not after a connect timeout,
    // which has no SQLSTATE and would only take as long again (libpq's own
    // message; with a translated libpq the second try still answers right, only
    // later).
    if (absl::StrContains(PQerrorMessage(conn.get()), "timeout expired")) {
      return StatusFromConnection(conn.get(), "connecting to PostgreSQL");
    }
    conn.reset(PQconnectStartParams(keys.data(), values.data(), /*expand_dbname=*/1));
    if (conn == nullptr) return absl::UnavailableError("connecting to PostgreSQL: out of memory");
    if (PQstatus(conn.get()) != CONNECTION_BAD) {
      PQsetErrorVerbosity(conn.get(), PQERRORS_VERBOSE);
      PQreset(conn.get());
    }
    if (PQstatus(conn.get()) != CONNECTION_OK) {
      return StatusFromConnection(conn.get(), "connecting to PostgreSQL");
    }
  }
  // libpq prints server notices (e.g. "forwarding to X" when a start position is
  // below the slot's) on stderr; route them through the log instead.
  PQsetNoticeProcessor(conn.get(), &LogNotice, nullptr);
  return conn;
}

namespace {

// `result`, the outcome of running `sql` on `conn`, or the error it carries.
// PGRES_COPY_BOTH is START_REPLICATION's success.
absl::StatusOr<PgResultPtr> Checked(PGconn* conn, PgResultPtr result, absl::string_view sql) {
  const ExecStatusType status = PQresultStatus(result.get());
  if (status == PGRES_COMMAND_OK || status == PGRES_TUPLES_OK || status == PGRES_COPY_BOTH) {
    return result;
  }
  if (result == nullptr || PQstatus(conn) != CONNECTION_OK) {
    return StatusFromConnection(conn, sql);
  }
  return StatusFromResult(result.get(), sql);
}

}  // namespace

absl::StatusOr<PgResultPtr> Exec(PGconn* conn, absl::string_view sql,
                                 const std::vector<std::optional<std::string>>& params) {
  std::vector<const char*> values;
  values.reserve(params.size());
  for (const auto& p : params) values.push_back(p ? p->c_str() : nullptr);
  return Checked(conn,
                 PgResultPtr(PQexecParams(conn, std::string(sql).c_str(),
                                          static_cast<int>(values.size()), nullptr,
                                          values.data(), nullptr, nullptr, 0)),
                 sql);
}

absl::StatusOr<PgResultPtr> ExecSimple(PGconn* conn, absl::string_view sql) {
  return Checked(conn, PgResultPtr(PQexec(conn, std::string(sql).c_str())), sql);
}

absl::StatusOr<PgResultPtr> Exec(const SqlChannel& channel, absl::string_view sql,
                                 const std::vector<std::optional<std::string>>& params) {
  if (channel.kind == ConnectionKind::kSql) return Exec(channel.conn, sql, params);
  absl::StatusOr<std::string> inlined = InlineParameters(sql, params);
  if (!inlined.ok()) {
    return absl::InvalidArgumentError(absl::StrCat(sql, ": ", inlined.status().message()));
  }
  return Checked(channel.conn, PgResultPtr(PQexec(channel.conn, inlined->c_str())), sql);
}

std::optional<std::string> Value(const PGresult* result, int row, int column) {
  if (PQgetisnull(result, row, column)) return std::nullopt;
  return std::string(PQgetvalue(result, row, column),
                     static_cast<size_t>(PQgetlength(result, row, column)));
}

std::string TextValue(const PGresult* result, int row, int column) {
  return Value(result, row, column).value_or("");
}

bool BoolValue(const PGresult* result, int row, int column) {
  return !PQgetisnull(result, row, column) &&
         absl::string_view(PQgetvalue(result, row, column)) == "t";
}

}  // namespace walfeed::replication::pg
