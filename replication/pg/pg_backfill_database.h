// PgBackfillDatabase: BackfillDatabase (replication/backfill_database.h) on
// PostgreSQL. Two connections, opened on first use and again after a failure:
// one to the stream's source database (watermarks, catalog, chunk reads), one
// to the checkpoint store's database (the durable records, tables
// backfills and backfill_chunks in the checkpoint schema, which the stream
// reader leaves out of every stream like the checkpoints themselves).
//
// Chunk rows are read with the text protocol in the source database's own
// encoding (client_encoding is set to server_encoding), so a value reads
// byte for byte as pgoutput sends it, and keys compare with the stream's.
#ifndef WALFEED_REPLICATION_PG_PG_BACKFILL_DATABASE_H_
#define WALFEED_REPLICATION_PG_PG_BACKFILL_DATABASE_H_

#include <atomic>
#include <memory>
#include <string>
#include <vector>

#include "replication/backfill_database.h"
#include "replication/pg/exported_snapshot.h"
#include "replication/pg/pg_conn.h"

namespace walfeed::replication::pg {

class PgBackfillDatabase : public BackfillDatabase {
 public:
  // `store_conninfo` "" = the source database. `exported` (optional): the
  // slot's exported snapshot, when this process created the slot.
  // `tables_exist` (optional): false when the stream's last start found no
  // backfill tables (PgCheckpointStore::backfill_tables); Load() then returns
  // nothing without connecting.
  PgBackfillDatabase(std::string source_conninfo, std::string store_conninfo,
                     std::string schema, std::shared_ptr<ExportedSnapshot> exported = nullptr,
                     std::shared_ptr<const std::atomic<bool>> tables_exist = nullptr);

  absl::StatusOr<BackfillTable> Plan(const std::vector<std::string>& publications,
                                     const TableName& table, const std::string& where) override;
  // The tables `publications` publish, by name.
  absl::StatusOr<std::vector<TableName>> PublishedTables(
      const std::vector<std::string>& publications);
  absl::StatusOr<std::vector<std::string>> WriteLow(const std::string& token) override;
  absl::Status WriteHigh(const std::string& token) override;
  absl::StatusOr<ChunkRows> ReadChunk(const BackfillTable& table, const std::string& where,
                                      const std::vector<std::string>& after, uint32_t limit,
                                      const std::vector<std::string>& running,
                                      absl::Duration wait) override;
  absl::StatusOr<ChunkRows> ReadExported(const BackfillTable& table, const std::string& where,
                                         const std::vector<std::string>& after,
                                         uint32_t limit) override;
  void ReleaseExported() override;
  absl::StatusOr<BackfillRecord> Create(BackfillRecord record) override;
  absl::Status SaveProgress(const BackfillRecord& record) override;
  absl::Status AddChunk(const std::string& backfill_id, const ChunkRecord& chunk) override;
  absl::Status PruneChunks(const std::string& backfill_id, EventId keep) override;
  absl::Status DropChunksAfter(const std::string& backfill_id, EventId after) override;
  absl::StatusOr<std::vector<Loaded>> Load(const std::string& stream) override;

 private:
  absl::StatusOr<PGconn*> Source();
  absl::StatusOr<PGconn*> Store();
  // Runs on the source / store connection; a failed connection is dropped so the
  // next call reconnects.
  absl::StatusOr<PgResultPtr> OnSource(const std::string& sql,
                                       const std::vector<std::optional<std::string>>& params);
  absl::StatusOr<PgResultPtr> OnStore(const std::string& sql,
                                      const std::vector<std::optional<std::string>>& params);
  // The key columns' SQL and the chunk statement for `table`.
  std::string ChunkSql(const BackfillTable& table, const std::string& where, bool after,
                       uint32_t limit) const;

  const std::string source_conninfo_;
  const std::string store_conninfo_;
  const std::string schema_;  // Quoted.
  const std::shared_ptr<ExportedSnapshot> exported_;
  const std::shared_ptr<const std::atomic<bool>> tables_exist_;
  PgConnPtr source_;
  PgConnPtr store_;
};

}  // namespace walfeed::replication::pg

#endif  // WALFEED_REPLICATION_PG_PG_BACKFILL_DATABASE_H_
