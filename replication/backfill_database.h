// BackfillDatabase: what a backfill needs from PostgreSQL (replication/pg
// implements it; the server is written against this interface only).
//
//   Plan         which key, which columns, the publication's row filter
//   WriteLow     the low watermark, and the transactions still running then
//   ReadChunk    the next rows in key order, under a snapshot that sees every
//                transaction committed before the low watermark
//   WriteHigh    the high watermark
//   ReadExported an initial snapshot's rows, under the slot's exported snapshot
//   and the durable records: one per backfill, one per delivered chunk.
//
// Not thread-safe: one backfill thread per stream owns it.
#ifndef WALFEED_REPLICATION_BACKFILL_DATABASE_H_
#define WALFEED_REPLICATION_BACKFILL_DATABASE_H_

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "replication/backfill_window.h"
#include "replication/event_id.h"
#include "replication/relation_cache.h"
#include "replication/stream_config.h"

namespace walfeed::replication {

// A table ready to be read in chunks.
struct BackfillTable {
  TableName name;
  // Published columns in attribute order (what the stream's events carry),
  // key flags as the replica identity has them, type names as the stream
  // names them.
  std::shared_ptr<const RelationInfo> relation;
  // The key read in order of: the primary key, else a unique not-null key.
  std::vector<std::string> key_columns;
  std::vector<std::string> key_types;  // format_type of each key column (casts).
  std::string row_filter;              // The publication's, "" without one.
  int64_t estimated_rows = -1;         // pg_class.reltuples.
};

// Rows per chunk when a backfill asks for none (0).
inline constexpr uint32_t kDefaultChunkRows = 10000;

enum class BackfillState { kRunning, kDone, kCancelled, kFailed };
absl::string_view BackfillStateName(BackfillState state);  // "running", ...

// A backfill's durable record.
struct BackfillRecord {
  std::string id;  // Assigned by Create.
  std::string stream;
  std::string consumer;  // "" = every consumer of the stream.
  TableName table;
  std::string where;
  uint32_t chunk_rows = 0;
  BackfillState state = BackfillState::kRunning;
  std::string error;
  std::vector<std::string> key_columns;
  uint64_t rows = 0;
  uint64_t chunks = 0;
  uint64_t superseded_rows = 0;
  // Part of the stream's initial snapshot (StreamConfig::initial_snapshot).
  bool initial_snapshot = false;
  absl::Time created_at = absl::InfinitePast();
  absl::Time finished_at = absl::InfinitePast();
};

// A delivered chunk: its last READ event (or its high watermark's own event
// when every row was superseded) and the key of its last row read.
struct ChunkRecord {
  EventId boundary;
  std::vector<std::string> last_key;  // Empty: nothing read (an empty table).
  bool final = false;                 // It read fewer rows than asked: the end.
};

struct ChunkRows {
  std::vector<pgoutput::TupleData> rows;
  std::vector<std::string> last_key;  // The last row's key, text per column.
};

class BackfillDatabase {
 public:
  virtual ~BackfillDatabase() = default;

  // FailedPrecondition (with the statement that fixes it) for a table that is
  // not published by `publications` or has no usable key; InvalidArgument for
  // a predicate PostgreSQL refuses (its message quoted); NotFound for no such
  // table.
  virtual absl::StatusOr<BackfillTable> Plan(const std::vector<std::string>& publications,
                                             const TableName& table,
                                             const std::string& where) = 0;

  // Writes the low watermark (its own transaction) and returns the ids of the
  // transactions still running right after it committed: a chunk snapshot
  // must wait for them (ReadChunk).
  virtual absl::StatusOr<std::vector<std::string>> WriteLow(const std::string& token) = 0;
  virtual absl::Status WriteHigh(const std::string& token) = 0;

  // The next at most `limit` rows after `after` (empty: from the start) in key
  // order, where `where` and the row filter hold. Read under a snapshot taken
  // once none of `running` is in progress any more: a transaction whose commit
  // record precedes the low watermark may still be leaving the process array
  // when the watermark commits, and the chunk must see it. Waits at most
  // `wait`; DeadlineExceeded naming the transaction that did not end.
  virtual absl::StatusOr<ChunkRows> ReadChunk(const BackfillTable& table, const std::string& where,
                                              const std::vector<std::string>& after,
                                              uint32_t limit,
                                              const std::vector<std::string>& running,
                                              absl::Duration wait) = 0;

  // Initial snapshot: ReadChunk's rows, read under the snapshot the slot
  // exported when this process created it (no watermark, no wait: it sees
  // exactly what committed before the stream's start). FailedPrecondition when
  // that snapshot is not held (any more): read with watermarks instead.
  // Thread-safe, unlike the other calls: several tables are read at once, each
  // on a connection of the snapshot's own.
  virtual absl::StatusOr<ChunkRows> ReadExported(const BackfillTable& table,
                                                 const std::string& where,
                                                 const std::vector<std::string>& after,
                                                 uint32_t limit) {
    (void)table, (void)where, (void)after, (void)limit;
    return absl::FailedPreconditionError("no exported snapshot");
  }
  // The initial snapshot needs it no more: let it go (it holds back VACUUM).
  virtual void ReleaseExported() {}

  // Durable records (in the checkpoint store's database).
  virtual absl::StatusOr<BackfillRecord> Create(BackfillRecord record) = 0;
  virtual absl::Status SaveProgress(const BackfillRecord& record) = 0;  // Counters, state.
  virtual absl::Status AddChunk(const std::string& backfill_id, const ChunkRecord& chunk) = 0;
  // Drops the chunk records below `keep` (it supersedes them).
  virtual absl::Status PruneChunks(const std::string& backfill_id, EventId keep) = 0;
  // Drops the chunk records above `after` (never acked whole: read again).
  virtual absl::Status DropChunksAfter(const std::string& backfill_id, EventId after) = 0;
  // Every backfill of the stream, newest first, with its chunk records (oldest
  // first) for the running ones.
  struct Loaded {
    BackfillRecord record;
    std::vector<ChunkRecord> chunks;
  };
  virtual absl::StatusOr<std::vector<Loaded>> Load(const std::string& stream) = 0;
};

}  // namespace walfeed::replication

#endif  // WALFEED_REPLICATION_BACKFILL_DATABASE_H_
