// PgCheckpointStore: the CheckpointStore (replication/checkpoint_store.h) in
// PostgreSQL, by default in the stream's source database.
#ifndef WALFEED_REPLICATION_PG_CHECKPOINT_STORE_H_
#define WALFEED_REPLICATION_PG_CHECKPOINT_STORE_H_

#include <atomic>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "replication/checkpoint_store.h"
#include "replication/pg/pg_conn.h"

namespace walfeed::replication::pg {

// CheckpointStore in PostgreSQL. Tables, in `schema` (quoted, so the name is exact):
//   consumer_checkpoints(stream, consumer, commit_lsn pg_lsn, event_index, updated_at)
//   stream_checkpoints(stream, slot_name, slot_system_identifier, slot_database_oid,
//                      slot_plugin, confirmed_lsn pg_lsn, updated_at)
// LSNs are pg_lsn so they sort as numbers in SQL and read as X/Y. Open() creates
// them if missing; it only reads the catalog when they exist, so a role without
// CREATE privilege works against tables an administrator created (it then needs
// USAGE on the schema and SELECT, INSERT, UPDATE, DELETE on the tables).
//
// Durability: every write is a single statement (one implicit transaction) with
// synchronous_commit = on for the session, whatever the database default, so an OK
// means flushed (and, with synchronous replication configured, confirmed by the
// synchronous standbys).
//
// Reconnects: the store owns one SQL connection. A call that fails with a transient
// error (lost connection, server restarting) drops the connection, reconnects and
// tries once more; every operation is idempotent (cumulative acks, GREATEST on the
// confirmed LSN, set/delete by key), so a retry after an unknown outcome is safe.
//
// NOT thread-safe: the caller serializes all calls (GroupCommitter does).
class PgCheckpointStore : public CheckpointStore {
 public:
  struct Options {
    // libpq conninfo of the database holding the checkpoints: by default the
    // stream's source database.
    std::string conninfo;
    // 1-63 bytes, taken literally; never "pg_*" or a system schema.
    std::string schema = std::string(kDefaultCheckpointSchema);
  };

  // Connects and creates the schema and tables if missing. Concurrent openers (in
  // this or other processes) serialize on an advisory lock, and a duplicate-object
  // race with a foreign creator is retried. InvalidArgument for a bad schema name;
  // otherwise the connection's or server's status.
  static absl::StatusOr<std::unique_ptr<PgCheckpointStore>> Open(Options options);

  PgCheckpointStore(const PgCheckpointStore&) = delete;
  PgCheckpointStore& operator=(const PgCheckpointStore&) = delete;

  // The schema holding the tables, unquoted: the name the reader filters on.
  const std::string& schema() const { return options_.schema; }

  absl::StatusOr<StreamCheckpoint> Load(absl::string_view stream) override;
  absl::Status Commit(absl::string_view stream,
                      const std::vector<std::pair<std::string, EventId>>& acks,
                      std::optional<Lsn> confirmed_lsn) override;
  absl::Status RemoveConsumer(absl::string_view stream, absl::string_view consumer) override;
  absl::Status DetachConsumer(absl::string_view stream, absl::string_view consumer) override;
  absl::Status Ping() override;
  absl::Status BindSlot(absl::string_view stream, absl::string_view slot_name,
                        const SlotIdentity& identity, Lsn confirmed_lsn) override;
  absl::StatusOr<std::vector<std::string>> OtherStreamsOnSlot(
      absl::string_view stream, absl::string_view slot_name,
      uint64_t system_identifier) override;

  // Whether the backfill tables (replication/pg/backfill_records.cc, in the same
  // schema) existed at the last Load(): true until a Load() says otherwise.
  // Read from any thread. Without them there is no backfill to resume, and the
  // stream's backfill runner need not open a connection to find that out.
  bool backfill_tables() const { return backfill_tables_.load(); }

  // Connections made so far (1 after Open); for tests and metrics.
  uint64_t connects() const { return connects_; }

 private:
  explicit PgCheckpointStore(Options options);

  absl::Status EnsureConnected();
  absl::Status CreateSchema();
  // Runs `statement` with `params`, reconnecting and retrying once after a
  // transient error.
  absl::StatusOr<PgResultPtr> Run(const std::string& statement,
                                  const std::vector<std::optional<std::string>>& params);

  const Options options_;
  // Statements with the quoted schema filled in.
  const std::string load_sql_;
  const std::string commit_sql_;
  const std::string remove_sql_;
  const std::string detach_sql_;
  const std::string bind_sql_;
  const std::string on_slot_sql_;
  const std::string backfill_table_;  // Quoted: to_regclass's argument.
  std::atomic<bool> backfill_tables_{true};
  PgConnPtr conn_;  // Null after a transient error until the next call reconnects.
  uint64_t connects_ = 0;
};

}  // namespace walfeed::replication::pg

#endif  // WALFEED_REPLICATION_PG_CHECKPOINT_STORE_H_
