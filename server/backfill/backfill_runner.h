// BackfillRunner: a stream's backfills, one thread, one chunk at a time.
//
//   StartBackfill RPC ─► Begin: plan the table (key, columns), store a record
//   runner thread, per running backfill, round robin:
//     ack check: chunks the consumer acked past are done (durable: the record
//                of the newest stays, older ones go); the final one ends it
//     next chunk, while fewer than max_outstanding are unacked and the
//     stream's buffer has room:
//       Expect ─► low watermark ─► read rows ─► SetRows ─► high watermark
//     (an initial snapshot's tables: Expect ─► read ─► SetRows ─► high
//     watermark, several tables at once, one exported-snapshot connection each)
//   reader thread: OnCompleted (StreamRuntime, at the high watermark's commit)
//     ─► the chunk's record (boundary id, last key) is stored by the runner
//
// Durable progress. Each delivered chunk is recorded with its boundary (its
// last READ event's id) and the key of its last row. After a restart the
// backfill resumes after the newest chunk at or below the consumer's durable
// checkpoint; chunks past it were not acked whole, their records are dropped
// and they are read again (at most the chunks that were outstanding, so at
// most max_outstanding chunks of rows the consumer had not acked yet, and
// never a row it acked except in the one chunk it acked part of).
//
// A backfill for every consumer ("" as its consumer: the stream's initial
// snapshot, or StartBackfill without one) is acked as far as every consumer
// has acked. The initial snapshot's chunks are read under the snapshot the
// slot exported, without watermarks (their window opened at the stream's
// start, BackfillWindows::OpenFromStart), while this process holds it; after
// a restart, or when that window is dropped, with watermarks like any other.
//
// Leader only: the runner works while its stream is prepared here (the
// generation hook changes whenever the stream is prepared again or lost) and
// reloads its backfills from the records each time.
#ifndef WALFEED_SERVER_BACKFILL_BACKFILL_RUNNER_H_
#define WALFEED_SERVER_BACKFILL_BACKFILL_RUNNER_H_

#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/btree_map.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "replication/backfill_database.h"
#include "replication/backfill_window.h"

namespace walfeed::server {

using replication::BackfillRecord;
using replication::EventId;

struct BackfillOptions {
  uint32_t default_chunk_rows = replication::kDefaultChunkRows;
  uint32_t max_chunk_rows = 1000000;
  // Chunks delivered and not yet acked whole: the runner waits beyond this.
  // Measured: 2 instead of 4 cost a quarter of the rate (the next chunk waited
  // for the consumer's ack round trip).
  size_t max_outstanding = 4;
  // How long a chunk waits for the transactions running at its low watermark
  // before it gives up and is tried again (with backoff, logged): short, so a
  // shutdown never waits on a transaction left open.
  absl::Duration snapshot_wait = absl::Seconds(2);
  // A high watermark not seen in the stream after this is given up (re-read).
  absl::Duration chunk_timeout = absl::Minutes(5);
  absl::Duration retry_base = absl::Milliseconds(200);
  absl::Duration retry_cap = absl::Seconds(30);
};

// "every consumer" for "", else "consumer NAME": whom a backfill is for, in
// messages.
std::string Audience(const std::string& consumer);

// A backfill as status shows it.
struct BackfillView {
  BackfillRecord record;
  std::vector<std::string> last_key;
  int64_t estimated_rows = -1;
  std::string retrying;  // While running: why its last chunk is being retried.
  double rows_per_second = 0;
  uint64_t eta_seconds = 0;
};

class BackfillRunner {
 public:
  // What the runner needs from its stream.
  struct Hooks {
    // Changes whenever the stream is prepared (or stops being led) here; 0
    // while it is not: the runner works only on a non-zero generation.
    std::function<uint64_t()> generation;
    // A consumer's durable checkpoint; NotFound for a consumer the stream does
    // not know. For "" (a backfill for every consumer): what all have acked.
    std::function<absl::StatusOr<EventId>(const std::string&)> checkpoint;
    std::function<bool()> has_room;  // The stream's buffer takes more.
  };
  using DatabaseFactory = std::function<std::unique_ptr<replication::BackfillDatabase>()>;

  BackfillRunner(std::string stream, std::vector<std::string> publications,
                 DatabaseFactory databases, replication::BackfillWindows* windows, Hooks hooks,
                 BackfillOptions options);
  ~BackfillRunner();
  BackfillRunner(const BackfillRunner&) = delete;
  BackfillRunner& operator=(const BackfillRunner&) = delete;

  void Start();
  void Stop() ABSL_LOCKS_EXCLUDED(mu_);

  // RPCs (block on the database). Errors as StartBackfill documents them.
  absl::StatusOr<BackfillView> Begin(const std::string& consumer,
                                     const replication::TableName& table,
                                     const std::string& where, uint32_t chunk_rows)
      ABSL_LOCKS_EXCLUDED(mu_, rpc_mu_);
  absl::StatusOr<BackfillView> Cancel(const std::string& id) ABSL_LOCKS_EXCLUDED(mu_, rpc_mu_);
  absl::StatusOr<BackfillView> Get(const std::string& id) const ABSL_LOCKS_EXCLUDED(mu_);
  std::vector<BackfillView> List(bool running_only) const ABSL_LOCKS_EXCLUDED(mu_);

  // Reader thread: a chunk's high watermark committed. `boundary` is its last
  // READ event's id, `delivered` how many READ events it appended (none: the
  // chunk is done with the one before it).
  void OnCompleted(const replication::CompletedChunk& chunk, EventId boundary, size_t delivered)
      ABSL_LOCKS_EXCLUDED(mu_);

 private:
  struct InFlight {
    std::string token;
    std::vector<std::string> last_key;
    bool final = false;
    absl::Time since;
  };
  struct Job {
    BackfillRecord record;
    std::optional<replication::BackfillTable> plan;
    std::vector<std::string> next_after;  // The next chunk starts after this key.
    std::vector<std::string> last_key;
    std::deque<replication::ChunkRecord> outstanding;  // Delivered, not acked whole.
    EventId last_boundary;  // Of the newest chunk; EventId{} before one.
    std::vector<replication::ChunkRecord> to_store;    // Completed, record not written.
    std::optional<InFlight> in_flight;
    bool final_delivered = false;
    bool dirty = false;  // Counters or state to store.
    absl::Time retry_at = absl::InfinitePast();
    int failures = 0;
    std::string retrying;  // Why the last chunk failed (transient), "" after a success.
    // An initial snapshot's backfill whose chunks are read under the slot's
    // exported snapshot (until that fails or is gone: then with watermarks).
    bool exported = false;
    std::deque<std::pair<absl::Time, uint64_t>> rate;  // (when, rows) samples.
  };

  void Run();
  // Loads the stream's backfills and resumes the running ones. False on a
  // database error (retried).
  bool Load(replication::BackfillDatabase& db) ABSL_LOCKS_EXCLUDED(mu_);
  // One pass over the running backfills; true if it did something.
  bool Step(replication::BackfillDatabase& db) ABSL_LOCKS_EXCLUDED(mu_);
  // A chunk being read: what BeginRead took from its job.
  struct PendingRead {
    uint64_t number = 0;
    std::string id;
    std::string token;
    std::optional<replication::BackfillTable> plan;
    BackfillRecord record;
    std::vector<std::string> after;
    bool exported = false;
  };
  // Reads the next chunk of each of `ids`: with watermarks one after another,
  // under the exported snapshot all at once.
  void ReadChunks(replication::BackfillDatabase& db, const std::vector<std::string>& ids)
      ABSL_LOCKS_EXCLUDED(mu_);
  // Plans the table if needed and opens the chunk's window; nullopt when the
  // backfill is gone or planning failed (recorded).
  std::optional<PendingRead> BeginRead(replication::BackfillDatabase& db, const std::string& id)
      ABSL_LOCKS_EXCLUDED(mu_);
  // Hands the rows to the window and writes the high watermark.
  void FinishRead(replication::BackfillDatabase& db, const PendingRead& pending,
                  absl::StatusOr<replication::ChunkRows> rows) ABSL_LOCKS_EXCLUDED(mu_);
  void FailRead(const PendingRead& pending, const absl::Status& why) ABSL_LOCKS_EXCLUDED(mu_);
  void Failed(Job& job, const absl::Status& why, bool definite) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  BackfillView ViewLocked(const Job& job) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // `job` reads with watermarks from now on.
  void StopExported(Job& job) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Lets the exported snapshot go once no running backfill reads under it.
  void ReleaseUnusedSnapshot(replication::BackfillDatabase& db) ABSL_LOCKS_EXCLUDED(mu_);

  const std::string stream_;
  const std::vector<std::string> publications_;
  const DatabaseFactory databases_;
  replication::BackfillWindows* const windows_;
  const Hooks hooks_;
  const BackfillOptions options_;
  const std::string instance_;  // Token prefix, unique per process.

  mutable absl::Mutex mu_;
  absl::CondVar wake_;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  uint64_t loaded_generation_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t tokens_ ABSL_GUARDED_BY(mu_) = 0;
  bool snapshot_released_ ABSL_GUARDED_BY(mu_) = false;
  // By id, numerically (ids are the store's serial numbers).
  absl::btree_map<uint64_t, Job> jobs_ ABSL_GUARDED_BY(mu_);

  absl::Mutex rpc_mu_ ABSL_ACQUIRED_BEFORE(mu_);  // Serializes the RPCs' database.
  std::unique_ptr<replication::BackfillDatabase> rpc_db_ ABSL_GUARDED_BY(rpc_mu_);
  std::thread thread_;
};

}  // namespace walfeed::server

#endif  // WALFEED_SERVER_BACKFILL_BACKFILL_RUNNER_H_
