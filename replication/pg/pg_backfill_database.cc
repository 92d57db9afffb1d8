// PgBackfillDatabase: connections, watermarks and chunk reads. The plan is in
// backfill_plan.cc, the durable records in backfill_records.cc.
#include "replication/pg/pg_backfill_database.h"

#include <algorithm>
#include <thread>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "replication/sql_text.h"
#include "replication/status_macros.h"

namespace walfeed::replication::pg {
namespace {

// Makes a connection read text exactly as pgoutput sends it.
absl::Status Configure(PGconn* conn) {
  return Exec(conn,
              "SELECT set_config('client_encoding', current_setting('server_encoding'), false), "
              "set_config('synchronous_commit', 'on', false)")
      .status();
}

// Runs `sql` on `*conn` (connecting first when it is null); drops the
// connection after a failure that broke it.
absl::StatusOr<PgResultPtr> RunOn(PgConnPtr* conn, const std::string& conninfo,
                                  const std::string& sql,
                                  const std::vector<std::optional<std::string>>& params) {
  if (*conn == nullptr) {
    WALFEED_ASSIGN_OR_RETURN(*conn, Connect(conninfo, ConnectionKind::kSql));
    absl::Status configured = Configure(conn->get());
    if (!configured.ok()) {
      conn->reset();
      return configured;
    }
  }
  absl::StatusOr<PgResultPtr> result = Exec(conn->get(), sql, params);
  if (!result.ok() && PQstatus(conn->get()) != CONNECTION_OK) conn->reset();
  return result;
}

// A chunk statement's result (ChunkSql's columns: the table's, then the key's)
// as tuples in pgoutput's text form, and the last row's key.
ChunkRows RowsOf(const PGresult* rows, const BackfillTable& table) {
  const int columns = static_cast<int>(table.relation->columns.size());
  const int keys = static_cast<int>(table.key_columns.size());
  ChunkRows chunk;
  chunk.rows.reserve(PQntuples(rows));
  for (int row = 0; row < PQntuples(rows); ++row) {
    pgoutput::TupleData tuple;
    tuple.columns.resize(columns);
    for (int column = 0; column < columns; ++column) {
      pgoutput::TupleValue& value = tuple.columns[column];
      if (PQgetisnull(rows, row, column)) continue;  // kNull.
      value.kind = pgoutput::TupleValue::Kind::kText;
      value.data.assign(PQgetvalue(rows, row, column),
                        static_cast<size_t>(PQgetlength(rows, row, column)));
    }
    chunk.rows.push_back(std::move(tuple));
  }
  if (!chunk.rows.empty()) {
    const int last = PQntuples(rows) - 1;
    for (int key = 0; key < keys; ++key) {
      chunk.last_key.push_back(PQgetvalue(rows, last, columns + key));
    }
  }
  return chunk;
}

}  // namespace

PgBackfillDatabase::PgBackfillDatabase(std::string source_conninfo, std::string store_conninfo,
                                       std::string schema,
                                       std::shared_ptr<ExportedSnapshot> exported,
                                       std::shared_ptr<const std::atomic<bool>> tables_exist)
    : source_conninfo_(std::move(source_conninfo)),
      store_conninfo_(store_conninfo.empty() ? source_conninfo_ : std::move(store_conninfo)),
      schema_(QuoteIdentifier(schema)),
      exported_(std::move(exported)),
      tables_exist_(std::move(tables_exist)) {}

absl::StatusOr<PgResultPtr> PgBackfillDatabase::OnSource(
    const std::string& sql, const std::vector<std::optional<std::string>>& params) {
  return RunOn(&source_, source_conninfo_, sql, params);
}

absl::StatusOr<PgResultPtr> PgBackfillDatabase::OnStore(
    const std::string& sql, const std::vector<std::optional<std::string>>& params) {
  // The same database: the same connection (store writes never fall inside a
  // chunk's transaction; both run on the one thread that owns this object).
  if (store_conninfo_ == source_conninfo_) return RunOn(&source_, source_conninfo_, sql, params);
  return RunOn(&store_, store_conninfo_, sql, params);
}

absl::StatusOr<std::vector<std::string>> PgBackfillDatabase::WriteLow(const std::string& token) {
  WALFEED_RETURN_IF_ERROR(OnSource("SELECT pg_logical_emit_message(true, $1, $2)",
                                   {std::string(kWatermarkPrefix),
                                    WatermarkContent(WatermarkKind::kLow, token)})
                              .status());
  // Taken after the watermark committed: every transaction whose commit record
  // precedes it is either visible to new snapshots already or still listed here.
  WALFEED_ASSIGN_OR_RETURN(
      PgResultPtr running,
      OnSource("SELECT x::text FROM pg_snapshot_xip(pg_current_snapshot()) AS x", {}));
  std::vector<std::string> xids;
  for (int row = 0; row < PQntuples(running.get()); ++row) {
    xids.push_back(PQgetvalue(running.get(), row, 0));
  }
  return xids;
}

absl::Status PgBackfillDatabase::WriteHigh(const std::string& token) {
  return OnSource("SELECT pg_logical_emit_message(true, $1, $2)",
                  {std::string(kWatermarkPrefix), WatermarkContent(WatermarkKind::kHigh, token)})
      .status();
}

std::string PgBackfillDatabase::ChunkSql(const BackfillTable& table, const std::string& where,
                                         bool after, uint32_t limit) const {
  std::vector<std::string> columns;
  for (const ColumnInfo& column : table.relation->columns) {
    columns.push_back(QuoteIdentifier(column.name));
  }
  std::vector<std::string> keys;
  std::vector<std::string> params;
  for (size_t i = 0; i < table.key_columns.size(); ++i) {
    keys.push_back(QuoteIdentifier(table.key_columns[i]));
    params.push_back(absl::StrCat("$", i + 1, "::", table.key_types[i]));
  }
  std::vector<std::string> conditions;
  if (!table.row_filter.empty()) conditions.push_back(absl::StrCat("(", table.row_filter, ")"));
  if (!where.empty()) conditions.push_back(absl::StrCat("(", where, ")"));
  if (after) {
    conditions.push_back(absl::StrCat("(", absl::StrJoin(keys, ", "), ") > (",
                                      absl::StrJoin(params, ", "), ")"));
  }
  return absl::StrCat("SELECT ", absl::StrJoin(columns, ", "), ", ", absl::StrJoin(keys, ", "),
                      " FROM ", table.name.Quoted(),
                      conditions.empty() ? "" : " WHERE ", absl::StrJoin(conditions, " AND "),
                      " ORDER BY ", absl::StrJoin(keys, ", "), " LIMIT ", limit);
}

absl::StatusOr<ChunkRows> PgBackfillDatabase::ReadChunk(const BackfillTable& table,
                                                        const std::string& where,
                                                        const std::vector<std::string>& after,
                                                        uint32_t limit,
                                                        const std::vector<std::string>& running,
                                                        absl::Duration wait) {
  const std::string running_array = absl::StrCat("{", absl::StrJoin(running, ","), "}");
  const absl::Time deadline = absl::Now() + wait;
  absl::Duration pause = absl::Milliseconds(1);
  while (true) {
    WALFEED_RETURN_IF_ERROR(
        OnSource("BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY", {}).status());
    // The first statement fixes the transaction's snapshot.
    absl::StatusOr<PgResultPtr> waiting = OnSource(
        "SELECT x::text FROM pg_snapshot_xip(pg_current_snapshot()) AS x "
        "WHERE x::text = ANY($1::text[]) LIMIT 1",
        {running_array});
    if (!waiting.ok()) {
      (void)OnSource("ROLLBACK", {});
      return waiting.status();
    }
    if (PQntuples(waiting->get()) == 0) break;
    const std::string xid = PQgetvalue(waiting->get(), 0, 0);
    (void)OnSource("ROLLBACK", {});
    const absl::Time now = absl::Now();
    if (now >= deadline) {
      return absl::DeadlineExceededError(absl::StrCat(
          "transaction ", xid, " was running when the chunk's low watermark was written and "
          "has not ended since; a backfill chunk waits for every such transaction (see "
          "pg_stat_activity where backend_xid = '", xid, "')"));
    }
    std::this_thread::sleep_for(absl::ToChronoNanoseconds(pause));
    pause = std::min(pause * 2, absl::Milliseconds(50));
  }
  std::vector<std::optional<std::string>> params(after.begin(), after.end());
  absl::StatusOr<PgResultPtr> result =
      OnSource(ChunkSql(table, where, !after.empty(), limit), params);
  if (!result.ok()) {
    (void)OnSource("ROLLBACK", {});
    return result.status();
  }
  WALFEED_RETURN_IF_ERROR(OnSource("COMMIT", {}).status());
  return RowsOf(result->get(), table);
}

absl::StatusOr<ChunkRows> PgBackfillDatabase::ReadExported(const BackfillTable& table,
                                                           const std::string& where,
                                                           const std::vector<std::string>& after,
                                                           uint32_t limit) {
  if (exported_ == nullptr) return BackfillDatabase::ReadExported(table, where, after, limit);
  std::vector<std::optional<std::string>> params(after.begin(), after.end());
  WALFEED_ASSIGN_OR_RETURN(PgResultPtr result,
                           exported_->Query(ChunkSql(table, where, !after.empty(), limit), params));
  return RowsOf(result.get(), table);
}

void PgBackfillDatabase::ReleaseExported() {
  if (exported_ != nullptr) exported_->Release();
}

}  // namespace walfeed::replication::pg
