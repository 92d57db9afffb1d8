#include "walfeed/pg_watermark.h"

#include <libpq-fe.h>

#include <memory>
#include <utility>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"

namespace walfeed {
namespace {

struct ResultClearer {
  void operator()(PGresult* result) const { PQclear(result); }
};
using ResultPtr = std::unique_ptr<PGresult, ResultClearer>;

// A canonical code for a failed statement: serialization failures and
// deadlocks mean "roll back and retry the batch", lost connections are
// transient, the rest needs a person.
absl::Status Failed(PGconn* conn, const PGresult* result, absl::string_view what) {
  const char* state = result ? PQresultErrorField(result, PG_DIAG_SQLSTATE) : nullptr;
  const std::string sqlstate = state ? state : "";
  const std::string message = result && *PQresultErrorMessage(result)
                                  ? PQresultErrorMessage(result)
                                  : PQerrorMessage(conn);
  const std::string text = absl::StrCat(
      "watermark: ", what, " failed", sqlstate.empty() ? "" : absl::StrCat(" (SQLSTATE ", sqlstate, ")"),
      ": ", absl::StripTrailingAsciiWhitespace(message));
  if (PQstatus(conn) == CONNECTION_BAD || absl::StartsWith(sqlstate, "08") ||
      absl::StartsWith(sqlstate, "57P")) {
    return absl::UnavailableError(text);
  }
  if (absl::StartsWith(sqlstate, "40")) return absl::AbortedError(text);
  // Syntax or access rule violations, a missing schema: the table option is wrong.
  if (absl::StartsWith(sqlstate, "42") || absl::StartsWith(sqlstate, "3F")) {
    return absl::InvalidArgumentError(text);
  }
  return absl::InternalError(text);
}

// Runs one statement with text parameters; rows or OK.
absl::StatusOr<ResultPtr> Exec(PGconn* conn, const std::string& sql,
                               const std::vector<std::string>& params, absl::string_view what) {
  std::vector<const char*> values;
  values.reserve(params.size());
  for (const std::string& p : params) values.push_back(p.c_str());
  ResultPtr result(PQexecParams(conn, sql.c_str(), static_cast<int>(values.size()), nullptr,
                                values.data(), nullptr, nullptr, 0));
  const ExecStatusType status = result ? PQresultStatus(result.get()) : PGRES_FATAL_ERROR;
  if (status != PGRES_COMMAND_OK && status != PGRES_TUPLES_OK) {
    return Failed(conn, result.get(), what);
  }
  return result;
}

absl::StatusOr<std::string> QuoteTable(PGconn* conn, const std::string& table) {
  std::vector<std::string> parts = absl::StrSplit(table, '.');
  if (table.empty() || parts.size() > 2) {
    return absl::InvalidArgumentError(absl::StrCat(
        "watermark table \"", table, "\": expected \"name\" or \"schema.name\""));
  }
  std::string quoted;
  for (const std::string& part : parts) {
    if (part.empty()) {
      return absl::InvalidArgumentError(
          absl::StrCat("watermark table \"", table, "\": empty name part"));
    }
    char* escaped = PQescapeIdentifier(conn, part.data(), part.size());
    if (escaped == nullptr) return Failed(conn, nullptr, "quoting the table name");
    absl::StrAppend(&quoted, quoted.empty() ? "" : ".", escaped);
    PQfreemem(escaped);
  }
  return quoted;
}

}  // namespace

absl::StatusOr<PgWatermark> PgWatermark::Open(PGconn* conn, Options options) {
  if (conn == nullptr || PQstatus(conn) != CONNECTION_OK) {
    return absl::UnavailableError("watermark: the connection is not open");
  }
  if (PQtransactionStatus(conn) != PQTRANS_IDLE) {
    return absl::FailedPreconditionError(
        "watermark: call Open outside a transaction (it commits the table and the row)");
  }
  if (options.stream.empty() || options.consumer.empty()) {
    return absl::InvalidArgumentError("watermark: stream and consumer must be set");
  }
  absl::StatusOr<std::string> table = QuoteTable(conn, options.table);
  if (!table.ok()) return table.status();
  const std::string create = absl::StrCat(
      "CREATE TABLE IF NOT EXISTS ", *table,
      " (consumer text NOT NULL, stream text NOT NULL, last_id text, commit_lsn pg_lsn, "
      "idx bigint CHECK (idx BETWEEN 0 AND 4294967295), "
      "updated_at timestamptz NOT NULL DEFAULT now(), PRIMARY KEY (consumer, stream))");
  // Looked up first only to spare the caller IF NOT EXISTS's notice.
  absl::StatusOr<ResultPtr> exists =
      Exec(conn, "SELECT to_regclass($1) IS NOT NULL", {*table}, "looking up the table");
  if (!exists.ok()) return exists.status();
  const bool missing = std::string(PQgetvalue(exists->get(), 0, 0)) != "t";
  absl::StatusOr<ResultPtr> created =
      missing ? Exec(conn, create, {}, "creating the table") : std::move(exists);
  // Two processes creating the table at once: one of them sees a duplicate in
  // the catalog (unique_violation or duplicate_table); the table exists then.
  if (!created.ok() && (absl::StrContains(created.status().message(), "SQLSTATE 23505") ||
                        absl::StrContains(created.status().message(), "SQLSTATE 42P07"))) {
    created = Exec(conn, create, {}, "creating the table");
  }
  if (!created.ok()) return created.status();
  // The row exists before any Apply, so Apply can always lock it: two appliers
  // then serialize instead of both inserting it.
  absl::StatusOr<ResultPtr> row = Exec(
      conn, absl::StrCat("INSERT INTO ", *table,
                         " (consumer, stream) VALUES ($1, $2) ON CONFLICT DO NOTHING"),
      {options.consumer, options.stream}, "creating the consumer's row");
  if (!row.ok()) return row.status();
  return PgWatermark(std::move(options), *std::move(table));
}

absl::StatusOr<std::string> PgWatermark::Resume(PGconn* conn) const {
  absl::StatusOr<ResultPtr> result =
      Exec(conn, absl::StrCat("SELECT last_id FROM ", table_, " WHERE consumer = $1 AND stream = $2"),
           {options_.consumer, options_.stream}, "reading the watermark");
  if (!result.ok()) return result.status();
  if (PQntuples(result->get()) == 0 || PQgetisnull(result->get(), 0, 0)) return std::string();
  const std::string stored = PQgetvalue(result->get(), 0, 0);
  absl::StatusOr<EventId> id = EventId::Parse(stored);
  if (!id.ok()) {
    return absl::DataLossError(absl::StrCat("watermark of consumer \"", options_.consumer,
                                            "\" holds a malformed id: ", id.status().message()));
  }
  return id->ToString();
}

absl::StatusOr<PgWatermark::Result> PgWatermark::Apply(PGconn* conn, const Batch& batch,
                                                       const Effect& effect) const {
  if (PQtransactionStatus(conn) != PQTRANS_INTRANS) {
    return absl::FailedPreconditionError(
        "watermark: Apply must run inside the caller's open transaction (BEGIN first): the "
        "effects and the stored id have to commit together");
  }
  const std::vector<std::string> key = {options_.consumer, options_.stream};
  const std::string lock_sql = absl::StrCat("SELECT last_id FROM ", table_,
                                            " WHERE consumer = $1 AND stream = $2 FOR UPDATE");
  absl::StatusOr<ResultPtr> locked = Exec(conn, lock_sql, key, "locking the watermark");
  if (!locked.ok()) return locked.status();
  if (PQntuples(locked->get()) == 0) {
    // The row was deleted since Open: make it again (waits for a concurrent
    // creator), then lock it.
    absl::StatusOr<ResultPtr> inserted =
        Exec(conn, absl::StrCat("INSERT INTO ", table_,
                                " (consumer, stream) VALUES ($1, $2) ON CONFLICT DO NOTHING"),
             key, "re-creating the consumer's row");
    if (!inserted.ok()) return inserted.status();
    locked = Exec(conn, lock_sql, key, "locking the watermark");
    if (!locked.ok()) return locked.status();
  }
  Result result;
  if (PQntuples(locked->get()) > 0 && !PQgetisnull(locked->get(), 0, 0)) {
    absl::StatusOr<EventId> stored = EventId::Parse(PQgetvalue(locked->get(), 0, 0));
    if (!stored.ok()) {
      return absl::DataLossError(absl::StrCat("watermark of consumer \"", options_.consumer,
                                              "\" holds a malformed id: ",
                                              stored.status().message()));
    }
    result.watermark = *stored;
  }
  std::optional<EventId> newest;
  for (int i = 0; i < batch.size(); ++i) {
    if (result.watermark && batch.id(i) <= *result.watermark) {
      ++result.skipped;
      continue;
    }
    if (absl::Status done = effect(conn, batch.event(i)); !done.ok()) {
      return absl::Status(done.code(), absl::StrCat("effect of event ", batch.id(i).ToString(),
                                                    ": ", done.message()));
    }
    ++result.applied;
    newest = batch.id(i);
  }
  if (!newest) return result;
  absl::StatusOr<ResultPtr> stored = Exec(
      conn,
      absl::StrCat("UPDATE ", table_,
                   " SET last_id = $3, commit_lsn = $4::pg_lsn, idx = $5::bigint, "
                   "updated_at = now() WHERE consumer = $1 AND stream = $2"),
      {options_.consumer, options_.stream, newest->ToString(), newest->CommitLsnText(),
       absl::StrCat(newest->index())},
      "storing the watermark");
  if (!stored.ok()) return stored.status();
  result.watermark = newest;
  return result;
}

}  // namespace walfeed
