// PgCheckpointStore (checkpoint tables in PostgreSQL) and GroupCommitter (many
// concurrent acks, one write).
#include "replication/pg/checkpoint_store.h"

#include <algorithm>

#include "absl/strings/cord.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "replication/retry.h"
#include "replication/status_macros.h"
#include "replication/stream_config.h"

namespace walfeed::replication::pg {
namespace {

// SQLSTATEs a concurrent creator of the same objects can cause even with
// IF NOT EXISTS (both sides pass the existence check, one loses on the catalog's
// unique index): unique_violation, duplicate_schema, duplicate_table,
// duplicate_object.
bool IsCreationRace(const absl::Status& status) {
  const std::string sqlstate = SqlStateOf(status);
  return sqlstate == "23505" || sqlstate == "42P06" || sqlstate == "42P07" || sqlstate == "42710";
}
constexpr int kCreateAttempts = 3;


// Exec's messages start with the statement text; replace that with `what` so a
// failed write reads "committing checkpoints of stream s: ..." rather than quoting
// a long statement. Code and payloads (the SQLSTATE) are kept.
absl::Status WithContext(const absl::Status& status, absl::string_view sql,
                         absl::string_view what) {
  absl::string_view message = status.message();
  if (absl::StartsWith(message, sql)) message.remove_prefix(sql.size());
  if (absl::StartsWith(message, ": ")) message.remove_prefix(2);
  absl::Status out(status.code(), absl::StrCat(what, ": ", message));
  status.ForEachPayload(
      [&out](absl::string_view url, const absl::Cord& payload) { out.SetPayload(url, payload); });
  return out;
}

absl::Status CheckName(absl::string_view kind, absl::string_view name) {
  if (name.empty()) return absl::InvalidArgumentError(absl::StrCat(kind, " name is empty"));
  if (absl::StrContains(name, '\0')) {
    return absl::InvalidArgumentError(absl::StrCat(kind, " name contains a NUL byte"));
  }
  return absl::OkStatus();
}

// Fills "$schema" in a statement template with the quoted schema.
std::string Sql(absl::string_view text, const std::string& quoted_schema) {
  return absl::StrReplaceAll(text, {{"$schema", quoted_schema}});
}

constexpr absl::string_view kStreamTableDdl = R"sql(
CREATE TABLE IF NOT EXISTS $schema.stream_checkpoints (
  stream text PRIMARY KEY,
  slot_name text,
  slot_system_identifier numeric(20, 0),
  slot_database_oid oid,
  slot_plugin text,
  confirmed_lsn pg_lsn NOT NULL DEFAULT '0/0',
  updated_at timestamptz NOT NULL DEFAULT now()))sql";

constexpr absl::string_view kConsumerTableDdl = R"sql(
CREATE TABLE IF NOT EXISTS $schema.consumer_checkpoints (
  stream text NOT NULL,
  consumer text NOT NULL,
  commit_lsn pg_lsn NOT NULL,
  event_index bigint NOT NULL CHECK (event_index BETWEEN 0 AND 4294967295),
  updated_at timestamptz NOT NULL DEFAULT now(),
  detached_at timestamptz,
  PRIMARY KEY (stream, consumer)))sql";

// Tables created before the laggard policy existed lack detached_at.
constexpr absl::string_view kDetachedColumnDdl = R"sql(
ALTER TABLE $schema.consumer_checkpoints ADD COLUMN IF NOT EXISTS detached_at timestamptz)sql";

constexpr absl::string_view kTableComment =
    "walfeed checkpoints. Written only by walfeed; walfeed drops changes to this "
    "schema from its change streams.";

// One row per consumer, or one row of NULLs when the stream has none; the stream
// columns are NULL when it was never bound or confirmed. One statement, so one
// snapshot.
constexpr absl::string_view kLoadSql = R"sql(
SELECT s.slot_name, s.slot_system_identifier, s.slot_database_oid, s.slot_plugin,
       s.confirmed_lsn, c.consumer, c.commit_lsn, c.event_index, c.detached_at IS NOT NULL,
       to_regclass($2) IS NOT NULL
FROM (SELECT $1::text AS stream) AS k
LEFT JOIN $schema.stream_checkpoints AS s USING (stream)
LEFT JOIN $schema.consumer_checkpoints AS c USING (stream))sql";

// One statement, hence one transaction. Data-modifying CTEs always run to
// completion. The WHERE clauses of ON CONFLICT make both values cumulative: a row
// is only updated by a strictly greater (commit_lsn, index) or confirmed LSN.
// A stored ack clears a consumer's detached mark (the operator's reset).
constexpr absl::string_view kCommitSql = R"sql(
WITH acks AS (
  INSERT INTO $schema.consumer_checkpoints AS c
    (stream, consumer, commit_lsn, event_index, updated_at)
  SELECT $1::text, a.consumer, a.commit_lsn, a.event_index, now()
  FROM unnest($2::text[], $3::pg_lsn[], $4::bigint[]) AS a(consumer, commit_lsn, event_index)
  ON CONFLICT (stream, consumer) DO UPDATE
    SET commit_lsn = excluded.commit_lsn, event_index = excluded.event_index,
        updated_at = excluded.updated_at, detached_at = NULL
    WHERE (excluded.commit_lsn, excluded.event_index) > (c.commit_lsn, c.event_index)
  RETURNING 1
), confirmed AS (
  INSERT INTO $schema.stream_checkpoints AS s (stream, confirmed_lsn, updated_at)
  SELECT $1::text, $5::pg_lsn, now() WHERE $5::pg_lsn IS NOT NULL
  ON CONFLICT (stream) DO UPDATE
    SET confirmed_lsn = excluded.confirmed_lsn, updated_at = excluded.updated_at
    WHERE excluded.confirmed_lsn > s.confirmed_lsn
  RETURNING 1
)
SELECT (SELECT count(*) FROM acks), (SELECT count(*) FROM confirmed))sql";

constexpr absl::string_view kRemoveSql = R"sql(
DELETE FROM $schema.consumer_checkpoints WHERE stream = $1::text AND consumer = $2::text)sql";

constexpr absl::string_view kDetachSql = R"sql(
UPDATE $schema.consumer_checkpoints SET detached_at = now(), updated_at = now()
WHERE stream = $1::text AND consumer = $2::text AND detached_at IS NULL)sql";

constexpr absl::string_view kBindSql = R"sql(
INSERT INTO $schema.stream_checkpoints AS s
  (stream, slot_name, slot_system_identifier, slot_database_oid, slot_plugin,
   confirmed_lsn, updated_at)
VALUES ($1::text, $2::text, $3::numeric, $4::oid, $5::text, $6::pg_lsn, now())
ON CONFLICT (stream) DO UPDATE
  SET slot_name = excluded.slot_name,
      slot_system_identifier = excluded.slot_system_identifier,
      slot_database_oid = excluded.slot_database_oid, slot_plugin = excluded.slot_plugin,
      confirmed_lsn = excluded.confirmed_lsn, updated_at = excluded.updated_at)sql";

constexpr absl::string_view kOnSlotSql = R"sql(
SELECT stream FROM $schema.stream_checkpoints
WHERE slot_name = $2::text AND slot_system_identifier = $3::numeric AND stream <> $1::text
ORDER BY stream)sql";

absl::StatusOr<Lsn> ParseLsnColumn(const std::optional<std::string>& text,
                                   absl::string_view column) {
  if (!text.has_value()) {
    return absl::InternalError(absl::StrCat("checkpoint store: ", column, " is NULL"));
  }
  absl::StatusOr<Lsn> lsn = Lsn::Parse(*text);
  if (!lsn.ok()) {
    return absl::InternalError(
        absl::StrCat("checkpoint store: bad ", column, ": ", lsn.status().message()));
  }
  return *lsn;
}

template <typename Int>
absl::StatusOr<Int> ParseIntColumn(const std::optional<std::string>& text,
                                   absl::string_view column) {
  Int value = 0;
  if (!text.has_value() || !absl::SimpleAtoi(*text, &value)) {
    return absl::InternalError(
        absl::StrCat("checkpoint store: bad ", column, " \"", text.value_or("NULL"), "\""));
  }
  return value;
}

}  // namespace

// ---------------------------------------------------------------------------------
// PgCheckpointStore

PgCheckpointStore::PgCheckpointStore(Options options)
    : options_(std::move(options)),
      load_sql_(Sql(kLoadSql, QuoteIdentifier(options_.schema))),
      commit_sql_(Sql(kCommitSql, QuoteIdentifier(options_.schema))),
      remove_sql_(Sql(kRemoveSql, QuoteIdentifier(options_.schema))),
      detach_sql_(Sql(kDetachSql, QuoteIdentifier(options_.schema))),
      bind_sql_(Sql(kBindSql, QuoteIdentifier(options_.schema))),
      on_slot_sql_(Sql(kOnSlotSql, QuoteIdentifier(options_.schema))),
      backfill_table_(absl::StrCat(QuoteIdentifier(options_.schema), ".backfill_chunks")) {}

absl::StatusOr<std::unique_ptr<PgCheckpointStore>> PgCheckpointStore::Open(Options options) {
  WALFEED_RETURN_IF_ERROR(CheckCheckpointSchema(options.schema));
  std::unique_ptr<PgCheckpointStore> store(new PgCheckpointStore(std::move(options)));
  WALFEED_RETURN_IF_ERROR(store->EnsureConnected());
  WALFEED_RETURN_IF_ERROR(store->CreateSchema());
  return store;
}

absl::Status PgCheckpointStore::EnsureConnected() {
  if (conn_ != nullptr) return absl::OkStatus();
  WALFEED_ASSIGN_OR_RETURN(PgConnPtr conn, Connect(options_.conninfo, ConnectionKind::kSql));
  ++connects_;
  // A hot standby accepts the connection but refuses every write with an error
  // that looks transient. At Open that is a configuration mistake, so say so; on a
  // later reconnect it is more likely a failover in progress, so stay transient.
  // OK must mean flushed, whatever the database's default: synchronous_commit
  // on, set in the same round trip.
  WALFEED_ASSIGN_OR_RETURN(
      PgResultPtr recovery,
      Exec(conn.get(),
           "SELECT pg_is_in_recovery(), set_config('synchronous_commit', 'on', false)"));
  if (Value(recovery.get(), 0, 0) == "t") {
    constexpr absl::string_view kMessage =
        "checkpoint store: the server is a standby (read-only); the checkpoint conninfo "
        "must name a writable primary";
    return connects_ == 1 ? absl::FailedPreconditionError(kMessage)
                          : absl::UnavailableError(kMessage);
  }
  conn_ = std::move(conn);
  return absl::OkStatus();
}

absl::Status PgCheckpointStore::CreateSchema() {
  const std::string quoted = QuoteIdentifier(options_.schema);
  const std::string stream_table = quoted + ".stream_checkpoints";
  const std::string consumer_table = quoted + ".consumer_checkpoints";
  const std::string what = absl::StrCat("creating checkpoint schema ", quoted);
  // Every start after the first finds everything in place: one read says so,
  // without the transaction and lock that creating needs (six round trips
  // fewer on the start-up's critical path).
  absl::StatusOr<PgResultPtr> complete =
      Exec(conn_.get(),
           "SELECT to_regnamespace($1) IS NOT NULL AND to_regclass($2) IS NOT NULL AND "
           "EXISTS (SELECT 1 FROM pg_attribute WHERE attrelid = to_regclass($3) AND "
           "attname = 'detached_at' AND NOT attisdropped)",
           {quoted, stream_table, consumer_table});
  if (complete.ok() && Value(complete->get(), 0, 0) == "t") return absl::OkStatus();
  auto attempt = [&]() -> absl::Status {
    PGconn* conn = conn_.get();
    WALFEED_RETURN_IF_ERROR(Exec(conn, "BEGIN").status());
    // Serializes walfeed instances creating the same schema, so they never race
    // on the catalog; released at COMMIT or ROLLBACK.
    WALFEED_RETURN_IF_ERROR(Exec(conn, "SELECT pg_advisory_xact_lock(hashtextextended($1, 0))",
                                 {absl::StrCat("walfeed checkpoint schema ", quoted)})
                                .status());
    // Look before creating: CREATE ... IF NOT EXISTS checks the CREATE privilege
    // before existence, so it would fail for a role that was only given the
    // tables an administrator created.
    WALFEED_ASSIGN_OR_RETURN(
        PgResultPtr exists,
        Exec(conn,
             "SELECT to_regnamespace($1) IS NOT NULL, to_regclass($2) IS NOT NULL, "
             "to_regclass($3) IS NOT NULL",
             {quoted, stream_table, consumer_table}));
    if (Value(exists.get(), 0, 0) != "t") {
      WALFEED_RETURN_IF_ERROR(Exec(conn, "CREATE SCHEMA IF NOT EXISTS " + quoted).status());
    }
    if (Value(exists.get(), 0, 1) != "t") {
      WALFEED_RETURN_IF_ERROR(Exec(conn, Sql(kStreamTableDdl, quoted)).status());
      WALFEED_RETURN_IF_ERROR(Exec(conn, absl::StrCat("COMMENT ON TABLE ", stream_table, " IS ",
                                                      QuoteLiteral(kTableComment)))
                                  .status());
    }
    if (Value(exists.get(), 0, 2) != "t") {
      WALFEED_RETURN_IF_ERROR(Exec(conn, Sql(kConsumerTableDdl, quoted)).status());
      WALFEED_RETURN_IF_ERROR(Exec(conn, absl::StrCat("COMMENT ON TABLE ", consumer_table, " IS ",
                                                      QuoteLiteral(kTableComment)))
                                  .status());
    } else {
      WALFEED_ASSIGN_OR_RETURN(
          PgResultPtr column,
          Exec(conn,
               "SELECT count(*) FROM pg_attribute WHERE attrelid = to_regclass($1) AND "
               "attname = 'detached_at' AND NOT attisdropped",
               {consumer_table}));
      if (Value(column.get(), 0, 0) == "0") {
        absl::Status added = Exec(conn, Sql(kDetachedColumnDdl, quoted)).status();
        if (!added.ok()) {
          return absl::Status(added.code(),
                              absl::StrCat("adding column detached_at to ", consumer_table,
                                           " (walfeed's laggard policy needs it): ",
                                           added.message(), "; as the table's owner run ",
                                           Sql(kDetachedColumnDdl, quoted)));
        }
      }
    }
    return Exec(conn, "COMMIT").status();
  };
  absl::Status status;
  for (int i = 0; i < kCreateAttempts; ++i) {
    status = attempt();
    if (status.ok()) return status;
    if (PQstatus(conn_.get()) != CONNECTION_OK) {
      conn_.reset();
      break;
    }
    (void)Exec(conn_.get(), "ROLLBACK");
    // The winner of a race has committed by the time we see its duplicate (the
    // unique index waits for it), so the next attempt finds its objects.
    if (!IsCreationRace(status)) break;
  }
  return WithContext(status, "", what);
}

absl::StatusOr<PgResultPtr> PgCheckpointStore::Run(
    const std::string& statement, const std::vector<std::optional<std::string>>& params) {
  absl::Status status;
  for (int attempt = 0; attempt < 2; ++attempt) {
    status = EnsureConnected();
    if (status.ok()) {
      absl::StatusOr<PgResultPtr> result = Exec(conn_.get(), statement, params);
      if (result.ok()) return result;
      status = result.status();
    }
    if (!IsTransient(status)) break;
    // A fresh session is always in a clean state; the statement is idempotent.
    conn_.reset();
  }
  return status;
}

absl::Status PgCheckpointStore::Ping() { return Run("SELECT 1", {}).status(); }

absl::StatusOr<StreamCheckpoint> PgCheckpointStore::Load(absl::string_view stream) {
  WALFEED_RETURN_IF_ERROR(CheckName("stream", stream));
  absl::StatusOr<PgResultPtr> result = Run(load_sql_, {std::string(stream), backfill_table_});
  if (!result.ok()) {
    return WithContext(result.status(), load_sql_,
                       absl::StrCat("loading checkpoints of stream \"", stream, "\""));
  }
  const PGresult* rows = result->get();
  StreamCheckpoint checkpoint;
  // The query yields a row even for a stream never written.
  if (PQntuples(rows) > 0) backfill_tables_.store(Value(rows, 0, 9) != "f");
  for (int row = 0; row < PQntuples(rows); ++row) {
    if (row == 0) {
      const std::optional<std::string> confirmed = Value(rows, 0, 4);
      if (confirmed.has_value()) {
        WALFEED_ASSIGN_OR_RETURN(checkpoint.confirmed_lsn,
                                 ParseLsnColumn(confirmed, "confirmed_lsn"));
      }
      const std::optional<std::string> slot_name = Value(rows, 0, 0);
      if (slot_name.has_value()) {
        checkpoint.slot_name = *slot_name;
        SlotIdentity& identity = checkpoint.slot_identity;
        WALFEED_ASSIGN_OR_RETURN(
            identity.system_identifier,
            ParseIntColumn<uint64_t>(Value(rows, 0, 1), "slot_system_identifier"));
        WALFEED_ASSIGN_OR_RETURN(identity.database_oid,
                                 ParseIntColumn<uint32_t>(Value(rows, 0, 2), "slot_database_oid"));
        identity.plugin = Value(rows, 0, 3).value_or("");
      }
    }
    const std::optional<std::string> consumer = Value(rows, row, 5);
    if (!consumer.has_value()) continue;  // The stream has no consumers.
    EventId id;
    WALFEED_ASSIGN_OR_RETURN(id.commit_lsn, ParseLsnColumn(Value(rows, row, 6), "commit_lsn"));
    WALFEED_ASSIGN_OR_RETURN(id.index,
                             ParseIntColumn<uint32_t>(Value(rows, row, 7), "event_index"));
    checkpoint.consumers[*consumer] = id;
    if (Value(rows, row, 8) == "t") checkpoint.detached.insert(*consumer);
  }
  return checkpoint;
}

absl::Status PgCheckpointStore::Commit(absl::string_view stream,
                                       const std::vector<std::pair<std::string, EventId>>& acks,
                                       std::optional<Lsn> confirmed_lsn) {
  WALFEED_RETURN_IF_ERROR(CheckName("stream", stream));
  // One row per consumer: ON CONFLICT cannot update a row twice in one statement.
  absl::flat_hash_map<absl::string_view, EventId> highest;
  for (const auto& [consumer, id] : acks) {
    WALFEED_RETURN_IF_ERROR(CheckName("consumer", consumer));
    auto [it, inserted] = highest.emplace(consumer, id);
    if (!inserted) it->second = std::max(it->second, id);
  }
  if (highest.empty() && !confirmed_lsn.has_value()) return absl::OkStatus();
  std::vector<std::string> consumers, lsns, indexes;
  consumers.reserve(highest.size());
  lsns.reserve(highest.size());
  indexes.reserve(highest.size());
  for (const auto& [consumer, id] : highest) {
    consumers.emplace_back(consumer);
    lsns.push_back(id.commit_lsn.ToString());
    indexes.push_back(absl::StrCat(id.index));
  }
  std::optional<std::string> confirmed;
  if (confirmed_lsn.has_value()) confirmed = confirmed_lsn->ToString();
  absl::StatusOr<PgResultPtr> result =
      Run(commit_sql_, {std::string(stream), ArrayLiteral(consumers), ArrayLiteral(lsns),
                        ArrayLiteral(indexes), confirmed});
  if (!result.ok()) {
    return WithContext(result.status(), commit_sql_,
                       absl::StrCat("committing checkpoints of stream \"", stream, "\""));
  }
  return absl::OkStatus();
}

absl::Status PgCheckpointStore::RemoveConsumer(absl::string_view stream,
                                               absl::string_view consumer) {
  WALFEED_RETURN_IF_ERROR(CheckName("stream", stream));
  WALFEED_RETURN_IF_ERROR(CheckName("consumer", consumer));
  absl::StatusOr<PgResultPtr> result =
      Run(remove_sql_, {std::string(stream), std::string(consumer)});
  if (!result.ok()) {
    return WithContext(
        result.status(), remove_sql_,
        absl::StrCat("removing consumer \"", consumer, "\" of stream \"", stream, "\""));
  }
  return absl::OkStatus();
}

absl::Status PgCheckpointStore::DetachConsumer(absl::string_view stream,
                                               absl::string_view consumer) {
  WALFEED_RETURN_IF_ERROR(CheckName("stream", stream));
  WALFEED_RETURN_IF_ERROR(CheckName("consumer", consumer));
  absl::StatusOr<PgResultPtr> result =
      Run(detach_sql_, {std::string(stream), std::string(consumer)});
  if (!result.ok()) {
    return WithContext(
        result.status(), detach_sql_,
        absl::StrCat("detaching consumer \"", consumer, "\" of stream \"", stream, "\""));
  }
  return absl::OkStatus();
}

absl::Status PgCheckpointStore::BindSlot(absl::string_view stream, absl::string_view slot_name,
                                         const SlotIdentity& identity, Lsn confirmed_lsn) {
  WALFEED_RETURN_IF_ERROR(CheckName("stream", stream));
  WALFEED_RETURN_IF_ERROR(CheckName("slot", slot_name));
  absl::StatusOr<PgResultPtr> result =
      Run(bind_sql_,
          {std::string(stream), std::string(slot_name), absl::StrCat(identity.system_identifier),
           absl::StrCat(identity.database_oid), identity.plugin, confirmed_lsn.ToString()});
  if (!result.ok()) {
    return WithContext(result.status(), bind_sql_,
                       absl::StrCat("binding stream \"", stream, "\" to slot \"", slot_name, "\""));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::vector<std::string>> PgCheckpointStore::OtherStreamsOnSlot(
    absl::string_view stream, absl::string_view slot_name, uint64_t system_identifier) {
  WALFEED_RETURN_IF_ERROR(CheckName("stream", stream));
  WALFEED_RETURN_IF_ERROR(CheckName("slot", slot_name));
  absl::StatusOr<PgResultPtr> result =
      Run(on_slot_sql_,
          {std::string(stream), std::string(slot_name), absl::StrCat(system_identifier)});
  if (!result.ok()) {
    return WithContext(result.status(), on_slot_sql_,
                       absl::StrCat("looking for other streams on slot \"", slot_name, "\""));
  }
  std::vector<std::string> streams;
  for (int row = 0; row < PQntuples(result->get()); ++row) {
    streams.push_back(Value(result->get(), row, 0).value_or(""));
  }
  return streams;
}

}  // namespace walfeed::replication::pg
