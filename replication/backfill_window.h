// BackfillWindows: the stream side of a backfill chunk (watermark windows).
//
// A chunk of a table is read between two watermarks that the stream itself
// carries, each a transactional logical message in a transaction of its own:
//
//   backfill thread:  Expect(chunk) ─► write LW ─► SELECT the chunk ─► SetRows ─► write HW
//   reader thread:    ... LW ... changes ... HW ...      (Observe every event, in order)
//
// Between LW and HW the reader notes the key of every change to the chunk's
// table. At HW's commit the chunk is complete: its rows minus those whose key
// changed inside the window (the change event, delivered before or after,
// carries that row's newer state) are what the consumer gets, right there in
// the stream. A transaction that committed before LW is visible to the chunk's
// SELECT (the reading side guarantees it, see BackfillDatabase::ReadChunk) and
// was delivered before, so a surviving row states the same or a newer state;
// one that commits after HW comes after it. Applying READ and change events by
// key in delivery order therefore converges to the table's rows.
//
// A change whose key cannot be read (an unchanged-TOAST key column) makes the
// chunk kRetry: dropping "its" row is impossible and keeping every row could
// keep a stale one. So does an UPDATE of a chunk row that left a TOASTed value
// unsent: the change event cannot stand in for the row (it lacks the value)
// and the row may be older than it. A TRUNCATE of the table inside the window
// drops every row.
//
// Thread-safe: the backfill thread registers chunks, the reader observes.
#ifndef WALFEED_REPLICATION_BACKFILL_WINDOW_H_
#define WALFEED_REPLICATION_BACKFILL_WINDOW_H_

#include <atomic>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "replication/pgoutput.h"
#include "replication/relation_cache.h"
#include "replication/transaction_assembler.h"

namespace walfeed::replication {

// The logical message prefix of every watermark. Consumers never receive them.
inline constexpr absl::string_view kWatermarkPrefix = "walfeed.backfill";

enum class WatermarkKind { kLow, kHigh };

// A watermark message's content: "lw <token>" or "hw <token>".
std::string WatermarkContent(WatermarkKind kind, absl::string_view token);
// The kind and token of a watermark message (prefix kWatermarkPrefix), or
// nullopt for anything else.
struct Watermark {
  WatermarkKind kind;
  std::string token;
};
std::optional<Watermark> ParseWatermark(absl::string_view prefix, absl::string_view content);

// One chunk as the backfill reads it.
struct BackfillChunk {
  std::string token;  // Unique per chunk (never reused, also across restarts).
  std::string consumer;  // Who receives its READ events.
  // The table as its READ events describe it: published columns in attribute
  // order, key flags as the replica identity has them.
  std::shared_ptr<const RelationInfo> relation;
  // The backfill key's column names, in key order (matched by name in the
  // stream's own description of the table).
  std::vector<std::string> key_columns;
  std::vector<pgoutput::TupleData> rows;  // Set by SetRows, in key order.
  // Non-empty: read under the snapshot the slot exported at its creation (an
  // initial snapshot), so its window has no low watermark: it opened at the
  // stream's start and is the log OpenFromStart(from_start) keeps.
  std::string from_start;
};

// A chunk whose high watermark committed.
struct CompletedChunk {
  enum class Outcome { kDelivered, kRetry };
  Outcome outcome = Outcome::kDelivered;
  std::string token;
  std::string consumer;
  std::shared_ptr<const RelationInfo> relation;
  std::vector<pgoutput::TupleData> survivors;  // kDelivered: in key order.
  uint64_t superseded = 0;  // Rows left out: their key changed in the window.
  std::string retry_reason;  // kRetry: why.
  TransactionCommitted high_watermark;  // The HW transaction's commit.
};

class BackfillWindows {
 public:
  // Backfill thread, before it writes the chunk's low watermark.
  void Expect(std::shared_ptr<BackfillChunk> chunk) ABSL_LOCKS_EXCLUDED(mu_);
  // Backfill thread, once the rows are read and before the high watermark.
  // False if the chunk is not expected (forgotten).
  bool SetRows(absl::string_view token, std::vector<pgoutput::TupleData> rows)
      ABSL_LOCKS_EXCLUDED(mu_);
  // Backfill thread: the chunk will not complete (its reader gave up).
  void Forget(absl::string_view token) ABSL_LOCKS_EXCLUDED(mu_);

  // Reader thread: every event delivered, in order. True when the event is a
  // watermark (of any backfill, this process's or not): no consumer gets it.
  bool Observe(const ChangeEvent& event) ABSL_LOCKS_EXCLUDED(mu_);
  // Reader thread: every commit delivered. The chunks whose high watermark this
  // transaction carried, complete.
  std::vector<CompletedChunk> OnCommit(const TransactionCommitted& commit)
      ABSL_LOCKS_EXCLUDED(mu_);

  // Initial snapshot: notes the keys of table `relation_id` changed from now
  // on, for the chunks of backfill `backfill_id` read under the exported
  // snapshot. Call before the stream delivers its first event. Past
  // kMaxFromStartKeys keys the log is dropped (memory stays bounded) and the
  // backfill's chunks come back kRetry: read them with watermarks instead.
  void OpenFromStart(const std::string& backfill_id, uint32_t relation_id,
                     std::vector<std::string> key_columns) ABSL_LOCKS_EXCLUDED(mu_);
  void CloseFromStart(const std::string& backfill_id) ABSL_LOCKS_EXCLUDED(mu_);
  // The log is kept (not closed, not dropped).
  bool FromStartOpen(const std::string& backfill_id) const ABSL_LOCKS_EXCLUDED(mu_);
  static constexpr size_t kMaxFromStartKeys = size_t{1} << 20;

  size_t open_windows() const ABSL_LOCKS_EXCLUDED(mu_);

 private:
  // The changes to one table's keys over a stretch of the stream.
  struct KeyLog {
    uint32_t relation_id = 0;
    std::vector<std::string> key_columns;
    bool truncated = false;
    std::string unknown_key;  // Non-empty: a change whose key could not be read.
    absl::flat_hash_set<std::string> changed;  // Encoded keys changed.
    // Of those, keys an UPDATE sent with an unchanged-TOAST value.
    absl::flat_hash_set<std::string> partial;
    // Per stream description of the table: where the key columns are.
    std::shared_ptr<const RelationInfo> positions_for;
    std::vector<int> positions;
  };
  struct Window {
    std::shared_ptr<BackfillChunk> chunk;
    bool rows_set = false;
    bool open = false;  // Between LW and HW in the stream.
    KeyLog log;         // Unused for a from-start chunk (its log is shared).
  };
  // Notes the keys `event` changes in `log`, if it is a change to its table.
  static void NoteChange(KeyLog& log, const ChangeEvent& event);
  // The chunk's outcome against the changes `log` noted.
  static void Judge(const KeyLog& log, Window& window, CompletedChunk& chunk);
  void CountLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  mutable absl::Mutex mu_;
  // windows_.size() + from_start_.size() and !high_in_transaction_.empty(),
  // readable without the lock: most events pass while no chunk is expected.
  std::atomic<size_t> expected_{0};
  std::atomic<bool> high_pending_{false};
  absl::flat_hash_map<std::string, Window> windows_ ABSL_GUARDED_BY(mu_);  // By token.
  // Initial snapshot logs by backfill id; nullopt once dropped (too many keys).
  absl::flat_hash_map<std::string, std::optional<KeyLog>> from_start_ ABSL_GUARDED_BY(mu_);
  // HW messages seen in the open transaction, completed at its commit.
  std::vector<std::string> high_in_transaction_ ABSL_GUARDED_BY(mu_);
};

// The key of `tuple` as one string (length-prefixed values, kind included), for
// the positions given; nullopt when a key value was not sent (unchanged TOAST).
std::optional<std::string> EncodeKey(const pgoutput::TupleData& tuple,
                                     const std::vector<int>& positions);

}  // namespace walfeed::replication

#endif  // WALFEED_REPLICATION_BACKFILL_WINDOW_H_
