// Small libpq helpers: owning handles, SQL execution with parameters, and the one
// place where PostgreSQL errors become canonical absl::Status codes.
//
// Classification (see replication/retry.h): SQLSTATE classes that no retry can fix
// become definite codes (NotFound, PermissionDenied, FailedPrecondition,
// InvalidArgument, DataLoss for an invalidated slot); a lost connection, a server
// shutting down or restarting, a slot held by another process, and anything not
// recognised become Unavailable (transient). Messages carry the SQLSTATE, the
// server's message, detail and hint.
#ifndef WALFEED_REPLICATION_PG_PG_CONN_H_
#define WALFEED_REPLICATION_PG_PG_CONN_H_

#include <libpq-fe.h>

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "replication/sql_text.h"

namespace walfeed::replication::pg {

struct PgConnCloser {
  void operator()(PGconn* conn) const { PQfinish(conn); }
};
using PgConnPtr = std::unique_ptr<PGconn, PgConnCloser>;

struct PgResultClearer {
  void operator()(PGresult* result) const { PQclear(result); }
};
using PgResultPtr = std::unique_ptr<PGresult, PgResultClearer>;

enum class ConnectionKind {
  kSql,          // An ordinary connection.
  kReplication,  // replication=database: a logical walsender (simple queries only).
};

// Connects with `conninfo` (key/value string or postgresql:// URL). The password
// comes from libpq's usual places (PGPASSWORD, PGPASSFILE / ~/.pgpass, or the
// conninfo itself) and sslmode is honoured as given. application_name defaults to
// "walfeed", connect_timeout to 10 s, and TCP keepalives / tcp_user_timeout bound
// a silent peer (see pg_conn.cc), unless the conninfo sets them.
// `application_name` replaces that default (a conninfo that sets one still wins).
inline constexpr char kDefaultApplicationName[] = "walfeed";
absl::StatusOr<PgConnPtr> Connect(absl::string_view conninfo, ConnectionKind kind,
                                  absl::string_view application_name = kDefaultApplicationName);
// The application_name of the walsenders through which a stream reads its slot:
// "walfeed <checkpoint schema>/<stream>", cut to PostgreSQL's 63 bytes with a
// hash of the whole when longer. A new leader ends a walsender left on the slot
// only under its own stream's name (leader_lock.h), never another stream's.
std::string StreamWalsenderName(absl::string_view checkpoint_schema, absl::string_view stream);
// Whether libpq takes `conninfo` (key=value pairs or a postgresql:// URI), as
// Connect checks first: an unknown option or a malformed string is a
// configuration error (InvalidArgument) that no retry cures. The message names
// an unknown option's key but never quotes the string (it may hold a password).
absl::Status CheckConninfo(absl::string_view conninfo);
// The same defaults, but only begun (PQconnectStartParams): the caller drives
// PQconnectPoll and bounds the time itself. Errors are verbose. Null when out
// of memory; check PQstatus for CONNECTION_BAD.
PgConnPtr StartConnect(absl::string_view conninfo, ConnectionKind kind);

// Runs one statement with text parameters ($1, $2, ...; nullopt = NULL). Not on
// replication connections (they accept only the simple query protocol).
absl::StatusOr<PgResultPtr> Exec(PGconn* conn, absl::string_view sql,
                                 const std::vector<std::optional<std::string>>& params = {});
// Runs a command with the simple query protocol (replication connections).
absl::StatusOr<PgResultPtr> ExecSimple(PGconn* conn, absl::string_view sql);

// A connection catalog queries can run on: an ordinary one, or a logical
// walsender (replication=database), which runs SQL too but only over the
// simple query protocol. Implicit from a PGconn* (an ordinary connection), so
// code written for either takes a channel.
struct SqlChannel {
  SqlChannel(PGconn* conn, ConnectionKind kind = ConnectionKind::kSql)  // NOLINT: implicit
      : conn(conn), kind(kind) {}
  PGconn* conn;
  ConnectionKind kind;
};
// Exec() on either kind: on a walsender the parameters are inlined as literals
// (InlineParameters, sql_text.h) and the statement runs as a simple query.
// Errors name `sql` as written, parameters not filled in.
absl::StatusOr<PgResultPtr> Exec(const SqlChannel& channel, absl::string_view sql,
                                 const std::vector<std::optional<std::string>>& params = {});

// The status for a failed result / broken connection; `what` says what was tried.
absl::Status StatusFromResult(const PGresult* result, absl::string_view what);
absl::Status StatusFromConnection(const PGconn* conn, absl::string_view what);
// The same from the connection's error text: classified by the SQLSTATE in it
// (connections report errors verbosely), never by wording; none: UNAVAILABLE.
absl::Status StatusFromConnectionMessage(absl::string_view error, absl::string_view what);
// The SQLSTATE of a server error returned by Exec/ExecSimple/StatusFromResult is
// carried as a Status payload: SqlStateOf (replication/sql_text.h) reads it.
// The canonical code for a SQLSTATE (exposed for tests).
absl::StatusCode CodeForSqlState(absl::string_view sqlstate);

// Value of row `row`, column `column`, or nullopt for NULL.
std::optional<std::string> Value(const PGresult* result, int row, int column);
// The same with NULL read as "", and a boolean column's value (NULL is false).
std::string TextValue(const PGresult* result, int row, int column);
bool BoolValue(const PGresult* result, int row, int column);

}  // namespace walfeed::replication::pg

#endif  // WALFEED_REPLICATION_PG_PG_CONN_H_
