// PgBackfillDatabase's durable records: tables backfills and backfill_chunks in
// the checkpoint schema, created on first use. Every write is one statement
// with synchronous_commit on (set when the connection is made).
#include <utility>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "replication/pg/pg_backfill_database.h"
#include "replication/sql_text.h"
#include "replication/status_macros.h"

namespace walfeed::replication::pg {
namespace {

constexpr absl::string_view kCreateSql = R"sql(
CREATE TABLE IF NOT EXISTS $schema.backfills (
  id bigserial PRIMARY KEY,
  stream text NOT NULL,
  consumer text NOT NULL,
  table_schema text NOT NULL,
  table_name text NOT NULL,
  predicate text NOT NULL DEFAULT '',
  chunk_rows integer NOT NULL,
  state text NOT NULL,
  error text NOT NULL DEFAULT '',
  key_columns text[] NOT NULL,
  rows_read bigint NOT NULL DEFAULT 0,
  chunks bigint NOT NULL DEFAULT 0,
  superseded_rows bigint NOT NULL DEFAULT 0,
  initial_snapshot boolean NOT NULL DEFAULT false,
  created_at timestamptz NOT NULL DEFAULT now(),
  finished_at timestamptz);
CREATE TABLE IF NOT EXISTS $schema.backfill_chunks (
  backfill_id bigint NOT NULL REFERENCES $schema.backfills (id) ON DELETE CASCADE,
  commit_lsn pg_lsn NOT NULL,
  event_index bigint NOT NULL,
  last_key text[] NOT NULL,
  final boolean NOT NULL,
  PRIMARY KEY (backfill_id, commit_lsn, event_index)))sql";

constexpr absl::string_view kColumns =
    "id, stream, consumer, table_schema, table_name, predicate, chunk_rows, state, error, "
    "key_columns, rows_read, chunks, superseded_rows, "
    "extract(epoch from created_at)::float8, extract(epoch from finished_at)::float8, "
    "initial_snapshot";

// A text[] value as printed by PostgreSQL ({a,"b c"}), back to its elements.
std::vector<std::string> ParseTextArray(absl::string_view text) {
  std::vector<std::string> out;
  if (text.size() < 2) return out;
  text = text.substr(1, text.size() - 2);
  size_t i = 0;
  while (i < text.size()) {
    std::string element;
    if (text[i] == '"') {
      for (++i; i < text.size() && text[i] != '"'; ++i) {
        if (text[i] == '\\' && i + 1 < text.size()) ++i;
        element += text[i];
      }
      ++i;  // The closing quote.
    } else {
      for (; i < text.size() && text[i] != ','; ++i) element += text[i];
    }
    out.push_back(std::move(element));
    ++i;  // The comma.
  }
  return out;
}

BackfillState StateOf(absl::string_view name) {
  if (name == "done") return BackfillState::kDone;
  if (name == "cancelled") return BackfillState::kCancelled;
  if (name == "failed") return BackfillState::kFailed;
  return BackfillState::kRunning;
}

absl::Time TimeOf(const PGresult* result, int row, int column) {
  double seconds = 0;
  if (PQgetisnull(result, row, column) ||
      !absl::SimpleAtod(PQgetvalue(result, row, column), &seconds)) {
    return absl::InfinitePast();
  }
  return absl::FromUnixMicros(static_cast<int64_t>(seconds * 1e6));
}

BackfillRecord RecordOf(const PGresult* result, int row) {
  BackfillRecord record;
  record.id = PQgetvalue(result, row, 0);
  record.stream = PQgetvalue(result, row, 1);
  record.consumer = PQgetvalue(result, row, 2);
  record.table = TableName{PQgetvalue(result, row, 3), PQgetvalue(result, row, 4)};
  record.where = PQgetvalue(result, row, 5);
  (void)absl::SimpleAtoi(PQgetvalue(result, row, 6), &record.chunk_rows);
  record.state = StateOf(PQgetvalue(result, row, 7));
  record.error = PQgetvalue(result, row, 8);
  record.key_columns = ParseTextArray(PQgetvalue(result, row, 9));
  (void)absl::SimpleAtoi(PQgetvalue(result, row, 10), &record.rows);
  (void)absl::SimpleAtoi(PQgetvalue(result, row, 11), &record.chunks);
  (void)absl::SimpleAtoi(PQgetvalue(result, row, 12), &record.superseded_rows);
  record.created_at = TimeOf(result, row, 13);
  record.finished_at = TimeOf(result, row, 14);
  record.initial_snapshot = PQgetvalue(result, row, 15)[0] == 't';
  return record;
}

}  // namespace

absl::StatusOr<BackfillRecord> PgBackfillDatabase::Create(BackfillRecord record) {
  const std::string create = absl::StrReplaceAll(kCreateSql, {{"$schema", schema_}});
  // Several statements: the simple protocol. A concurrent creator can make it
  // fail once on the catalog's unique index; the second try sees the tables.
  absl::Status created = OnStore("SELECT 1", {}).status();
  PGconn* conn = store_conninfo_ == source_conninfo_ ? source_.get() : store_.get();
  if (created.ok()) created = ExecSimple(conn, create).status();
  if (!created.ok() && conn != nullptr) created = ExecSimple(conn, create).status();
  WALFEED_RETURN_IF_ERROR(created);
  WALFEED_ASSIGN_OR_RETURN(
      PgResultPtr inserted,
      OnStore(absl::StrCat("INSERT INTO ", schema_,
                           ".backfills (stream, consumer, table_schema, table_name, predicate, "
                           "chunk_rows, state, error, key_columns, initial_snapshot, "
                           "finished_at) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9::text[], $10, "
                           "CASE WHEN $7 = 'running' THEN NULL ELSE now() END) RETURNING ",
                           kColumns),
              {record.stream, record.consumer, record.table.schema, record.table.table,
               record.where, absl::StrCat(record.chunk_rows),
               std::string(BackfillStateName(record.state)), record.error,
               ArrayLiteral(record.key_columns), record.initial_snapshot ? "true" : "false"}));
  return RecordOf(inserted.get(), 0);
}

absl::Status PgBackfillDatabase::SaveProgress(const BackfillRecord& record) {
  const bool ended = record.state != BackfillState::kRunning;
  return OnStore(absl::StrCat("UPDATE ", schema_,
                              ".backfills SET state = $2, error = $3, rows_read = $4, "
                              "chunks = $5, superseded_rows = $6, finished_at = CASE WHEN $7 "
                              "THEN coalesce(finished_at, now()) END "
                              "WHERE id = $1 AND state = 'running'"),
                 {record.id, std::string(BackfillStateName(record.state)), record.error,
                  absl::StrCat(record.rows), absl::StrCat(record.chunks),
                  absl::StrCat(record.superseded_rows), ended ? "true" : "false"})
      .status();
}

absl::Status PgBackfillDatabase::AddChunk(const std::string& backfill_id,
                                          const ChunkRecord& chunk) {
  return OnStore(absl::StrCat("INSERT INTO ", schema_,
                              ".backfill_chunks (backfill_id, commit_lsn, event_index, "
                              "last_key, final) VALUES ($1, $2, $3, $4::text[], $5) "
                              // Chunks that delivered nothing share the boundary
                              // of the one before: the newest key is the one.
                              "ON CONFLICT (backfill_id, commit_lsn, event_index) DO UPDATE "
                              "SET last_key = EXCLUDED.last_key, final = EXCLUDED.final"),
                 {backfill_id, chunk.boundary.commit_lsn.ToString(),
                  absl::StrCat(chunk.boundary.index), ArrayLiteral(chunk.last_key),
                  chunk.final ? "true" : "false"})
      .status();
}

absl::Status PgBackfillDatabase::PruneChunks(const std::string& backfill_id, EventId keep) {
  return OnStore(absl::StrCat("DELETE FROM ", schema_,
                              ".backfill_chunks WHERE backfill_id = $1 AND "
                              "(commit_lsn, event_index) < ($2::pg_lsn, $3)"),
                 {backfill_id, keep.commit_lsn.ToString(), absl::StrCat(keep.index)})
      .status();
}

absl::Status PgBackfillDatabase::DropChunksAfter(const std::string& backfill_id, EventId after) {
  return OnStore(absl::StrCat("DELETE FROM ", schema_,
                              ".backfill_chunks WHERE backfill_id = $1 AND "
                              "(commit_lsn, event_index) > ($2::pg_lsn, $3)"),
                 {backfill_id, after.commit_lsn.ToString(), absl::StrCat(after.index)})
      .status();
}

absl::StatusOr<std::vector<BackfillDatabase::Loaded>> PgBackfillDatabase::Load(
    const std::string& stream) {
  // A backend start (tens of milliseconds of a loaded server's CPU, at every
  // stream start) only to learn what the stream's start already read.
  if (tables_exist_ != nullptr && !tables_exist_->load()) return std::vector<Loaded>{};
  absl::StatusOr<PgResultPtr> exists =
      OnStore(absl::StrCat("SELECT to_regclass('", absl::StrReplaceAll(schema_, {{"'", "''"}}),
                           ".backfill_chunks') IS NOT NULL"),
              {});
  WALFEED_RETURN_IF_ERROR(exists.status());
  if (PQgetvalue(exists->get(), 0, 0)[0] != 't') return std::vector<Loaded>{};
  WALFEED_ASSIGN_OR_RETURN(
      PgResultPtr records,
      OnStore(absl::StrCat("SELECT ", kColumns, " FROM ", schema_,
                           ".backfills WHERE stream = $1 ORDER BY id DESC"),
              {stream}));
  WALFEED_ASSIGN_OR_RETURN(
      PgResultPtr chunks,
      OnStore(absl::StrCat("SELECT c.backfill_id, c.commit_lsn, c.event_index, c.last_key, "
                           "c.final FROM ", schema_, ".backfill_chunks c JOIN ", schema_,
                           ".backfills b ON b.id = c.backfill_id WHERE b.stream = $1 AND "
                           "b.state = 'running' ORDER BY c.commit_lsn, c.event_index"),
              {stream}));
  std::vector<Loaded> loaded;
  for (int row = 0; row < PQntuples(records.get()); ++row) {
    loaded.push_back(Loaded{RecordOf(records.get(), row), {}});
  }
  for (int row = 0; row < PQntuples(chunks.get()); ++row) {
    const std::string id = PQgetvalue(chunks.get(), row, 0);
    ChunkRecord chunk;
    absl::StatusOr<Lsn> lsn = Lsn::Parse(PQgetvalue(chunks.get(), row, 1));
    if (!lsn.ok()) continue;
    chunk.boundary.commit_lsn = *lsn;
    (void)absl::SimpleAtoi(PQgetvalue(chunks.get(), row, 2), &chunk.boundary.index);
    chunk.last_key = ParseTextArray(PQgetvalue(chunks.get(), row, 3));
    chunk.final = PQgetvalue(chunks.get(), row, 4)[0] == 't';
    for (Loaded& entry : loaded) {
      if (entry.record.id == id) entry.chunks.push_back(std::move(chunk));
    }
  }
  return loaded;
}

}  // namespace walfeed::replication::pg
