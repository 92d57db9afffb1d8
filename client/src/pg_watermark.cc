#include "walfeed/pg_watermark.h"

#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "absl/strings/str_split.h"

namespace walfeed {
namespace {

// Prefixes a failed statement's message with what the watermark was doing.
absl::Status Failed(const absl::Status& status, absl::string_view what) {
  return absl::Status(status.code(), absl::StrCat("watermark: ", what, ": ", status.message()));
}

absl::StatusOr<std::vector<SqlConnection::Row>> Exec(SqlConnection& conn, const std::string& sql,
                                                     const std::vector<std::string>& params,
                                                     absl::string_view what) {
  absl::StatusOr<std::vector<SqlConnection::Row>> rows = conn.Execute(sql, params);
  if (!rows.ok()) return Failed(rows.status(), what);
  return rows;
}

// "name" or "schema.name" as quoted identifiers (a double quote doubled, as
// PostgreSQL's quote_ident does).
absl::StatusOr<std::string> QuoteTable(const std::string& table) {
  std::vector<std::string> parts = absl::StrSplit(table, '.');
  if (table.empty() || parts.size() > 2) {
    return absl::InvalidArgumentError(absl::StrCat(
        "watermark table \"", table, "\": expected \"name\" or \"schema.name\""));
  }
  std::string quoted;
  for (const std::string& part : parts) {
    if (part.empty() || part.find('\0') != std::string::npos) {
      return absl::InvalidArgumentError(
          absl::StrCat("watermark table \"", table, "\": empty name part"));
    }
    absl::StrAppend(&quoted, quoted.empty() ? "" : ".", "\"",
                    absl::StrReplaceAll(part, {{"\"", "\"\""}}), "\"");
  }
  return quoted;
}

// The stored id of a watermark row's last_id column (nullopt: nothing applied).
absl::StatusOr<std::optional<EventId>> StoredId(const std::vector<SqlConnection::Row>& rows,
                                                const std::string& consumer) {
  if (rows.empty() || rows[0].empty() || !rows[0][0]) return std::optional<EventId>();
  absl::StatusOr<EventId> id = EventId::Parse(*rows[0][0]);
  if (!id.ok()) {
    return absl::DataLossError(absl::StrCat("watermark of consumer \"", consumer,
                                            "\" holds a malformed id: ", id.status().message()));
  }
  return std::optional<EventId>(*id);
}

}  // namespace

absl::StatusOr<PgWatermark> PgWatermark::Open(SqlConnection& conn, Options options) {
  if (conn.InTransaction()) {
    return absl::FailedPreconditionError(
        "watermark: call Open outside a transaction (it commits the table and the row)");
  }
  if (options.stream.empty() || options.consumer.empty()) {
    return absl::InvalidArgumentError("watermark: stream and consumer must be set");
  }
  absl::StatusOr<std::string> table = QuoteTable(options.table);
  if (!table.ok()) return table.status();
  const std::string create = absl::StrCat(
      "CREATE TABLE IF NOT EXISTS ", *table,
      " (consumer text NOT NULL, stream text NOT NULL, last_id text, commit_lsn pg_lsn, "
      "idx bigint CHECK (idx BETWEEN 0 AND 4294967295), "
      "updated_at timestamptz NOT NULL DEFAULT now(), PRIMARY KEY (consumer, stream))");
  // Looked up first only to spare the caller IF NOT EXISTS's notice.
  absl::StatusOr<std::vector<SqlConnection::Row>> exists =
      Exec(conn, "SELECT to_regclass($1) IS NOT NULL", {*table}, "looking up the table");
  if (!exists.ok()) return exists.status();
  const bool missing = exists->empty() || exists->front().empty() ||
                       exists->front()[0] != std::optional<std::string>("t");
  if (missing) {
    absl::StatusOr<std::vector<SqlConnection::Row>> created =
        Exec(conn, create, {}, "creating the table");
    // Two processes creating the table at once: one of them fails on a
    // duplicate in the catalog, and then the table exists; once more is enough.
    if (!created.ok()) created = Exec(conn, create, {}, "creating the table");
    if (!created.ok()) return created.status();
  }
  // The row exists before any Apply, so Apply can always lock it: two appliers
  // then serialize instead of both inserting it.
  absl::StatusOr<std::vector<SqlConnection::Row>> row = Exec(
      conn, absl::StrCat("INSERT INTO ", *table,
                         " (consumer, stream) VALUES ($1, $2) ON CONFLICT DO NOTHING"),
      {options.consumer, options.stream}, "creating the consumer's row");
  if (!row.ok()) return row.status();
  return PgWatermark(std::move(options), *std::move(table));
}

absl::StatusOr<std::string> PgWatermark::Resume(SqlConnection& conn) const {
  absl::StatusOr<std::vector<SqlConnection::Row>> rows =
      Exec(conn, absl::StrCat("SELECT last_id FROM ", table_, " WHERE consumer = $1 AND stream = $2"),
           {options_.consumer, options_.stream}, "reading the watermark");
  if (!rows.ok()) return rows.status();
  absl::StatusOr<std::optional<EventId>> stored = StoredId(*rows, options_.consumer);
  if (!stored.ok()) return stored.status();
  return *stored ? (*stored)->ToString() : std::string();
}

absl::StatusOr<PgWatermark::Result> PgWatermark::Apply(SqlConnection& conn, const Batch& batch,
                                                       const Effect& effect) const {
  if (!conn.InTransaction()) {
    return absl::FailedPreconditionError(
        "watermark: Apply must run inside the caller's open transaction (BEGIN first): the "
        "effects and the stored id have to commit together");
  }
  const std::vector<std::string> key = {options_.consumer, options_.stream};
  const std::string lock_sql = absl::StrCat("SELECT last_id FROM ", table_,
                                            " WHERE consumer = $1 AND stream = $2 FOR UPDATE");
  absl::StatusOr<std::vector<SqlConnection::Row>> locked =
      Exec(conn, lock_sql, key, "locking the watermark");
  if (!locked.ok()) return locked.status();
  if (locked->empty()) {
    // The row was deleted since Open: make it again (waits for a concurrent
    // creator), then lock it.
    absl::StatusOr<std::vector<SqlConnection::Row>> inserted =
        Exec(conn, absl::StrCat("INSERT INTO ", table_,
                                " (consumer, stream) VALUES ($1, $2) ON CONFLICT DO NOTHING"),
             key, "re-creating the consumer's row");
    if (!inserted.ok()) return inserted.status();
    locked = Exec(conn, lock_sql, key, "locking the watermark");
    if (!locked.ok()) return locked.status();
  }
  Result result;
  absl::StatusOr<std::optional<EventId>> stored = StoredId(*locked, options_.consumer);
  if (!stored.ok()) return stored.status();
  result.watermark = *stored;
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
  absl::StatusOr<std::vector<SqlConnection::Row>> updated = Exec(
      conn,
      absl::StrCat("UPDATE ", table_,
                   " SET last_id = $3, commit_lsn = $4::pg_lsn, idx = $5::bigint, "
                   "updated_at = now() WHERE consumer = $1 AND stream = $2"),
      {options_.consumer, options_.stream, newest->ToString(), newest->CommitLsnText(),
       absl::StrCat(newest->index())},
      "storing the watermark");
  if (!updated.ok()) return updated.status();
  result.watermark = newest;
  return result;
}

}  // namespace walfeed
