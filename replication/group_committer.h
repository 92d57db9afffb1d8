// GroupCommitter: many concurrent acks cost one durable write (checkpoint_store.h
// describes the store behind it).
#ifndef WALFEED_REPLICATION_GROUP_COMMITTER_H_
#define WALFEED_REPLICATION_GROUP_COMMITTER_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "replication/checkpoint_store.h"

namespace walfeed::replication {

// Group commit in front of a CheckpointStore: many threads call AckDurably, which
// blocks until its ack is durable. One caller at a time is the writer (leader); acks
// that arrive while it writes are collected and the next waiting caller writes them
// all, with one Commit per stream. In a batch, a consumer's acks collapse to the
// highest; an ack at or below what this committer already made durable returns OK
// at once without a write. Every waiter gets the status of the Commit that covered
// its ack (a failed Commit fails exactly the callers in that batch for that stream;
// nothing is retried behind their backs).
//
// All calls to the store go through the committer (Load, RemoveConsumer and
// BindSlot take the writer's turn too), which is what makes a non-thread-safe
// store safe to share. What it remembers as durable assumes it is the only writer of
// its streams' checkpoints (a process taking a stream over starts a new committer
// and Loads). Thread-safe. Callers must not be blocked in it when it is destroyed.
class GroupCommitter {
 public:
  struct Stats {
    uint64_t commits = 0;               // Store Commit calls, successful or not.
    uint64_t failed_commits = 0;        // Of which failed.
    uint64_t acks_committed = 0;        // AckDurably calls made durable by a Commit.
    uint64_t acks_failed = 0;           // AckDurably calls that got a failed Commit's status.
    uint64_t acks_already_durable = 0;  // At or below the durable ack: no write.
  };

  // `store` must outlive the committer.
  explicit GroupCommitter(CheckpointStore* store);

  GroupCommitter(const GroupCommitter&) = delete;
  GroupCommitter& operator=(const GroupCommitter&) = delete;

  // Records `consumer`'s cumulative ack of `id` and returns once it is durable, with
  // the status of the write that covered it.
  absl::Status AckDurably(absl::string_view stream, absl::string_view consumer, EventId id)
      ABSL_LOCKS_EXCLUDED(mu_);

  // Records the stream's confirmed LSN (never lowered) and returns once it is
  // durable; rides along with acks queued for the next write, or is written alone.
  absl::Status SetConfirmed(absl::string_view stream, Lsn lsn) ABSL_LOCKS_EXCLUDED(mu_);

  // Pass-throughs serialized with the writes. Load also seeds what the committer
  // knows to be durable.
  absl::StatusOr<StreamCheckpoint> Load(absl::string_view stream) ABSL_LOCKS_EXCLUDED(mu_);
  // The store's Ping, serialized with its writes.
  absl::Status Ping() ABSL_LOCKS_EXCLUDED(mu_);
  absl::Status RemoveConsumer(absl::string_view stream, absl::string_view consumer)
      ABSL_LOCKS_EXCLUDED(mu_);
  absl::Status DetachConsumer(absl::string_view stream, absl::string_view consumer)
      ABSL_LOCKS_EXCLUDED(mu_);
  absl::Status BindSlot(absl::string_view stream, absl::string_view slot_name,
                        const SlotIdentity& identity, Lsn confirmed_lsn) ABSL_LOCKS_EXCLUDED(mu_);
  absl::StatusOr<std::vector<std::string>> OtherStreamsOnSlot(absl::string_view stream,
                                                              absl::string_view slot_name,
                                                              uint64_t system_identifier)
      ABSL_LOCKS_EXCLUDED(mu_);

  Stats stats() const ABSL_LOCKS_EXCLUDED(mu_);

  // Blocks until at least `n` acks or confirmed LSNs are queued for the next write
  // (not counting one in flight). Lets tests build a batch without sleeping.
  void AwaitQueuedForTest(size_t n) const ABSL_LOCKS_EXCLUDED(mu_);

 private:
  struct PendingStream {
    absl::flat_hash_map<std::string, EventId> acks;  // Highest per consumer.
    std::optional<Lsn> confirmed;
  };
  // One round of writes. Waiters hold a reference, so they can read their result
  // after the writer has moved on to the next batch. Guarded by mu_ while it is
  // open_; then owned by the writer that took it until that writer sets `done`
  // under mu_, after which waiters read `results` under mu_.
  struct Batch {
    absl::flat_hash_map<std::string, PendingStream> streams;
    size_t queued = 0;  // Calls waiting on this batch.
    bool done = false;
    absl::flat_hash_map<std::string, absl::Status> results;  // Per stream, once done.
  };

  // Queues into the open batch, waits for it, leading the write if nobody else
  // does, and returns the stream's result. `is_ack` picks the counter.
  absl::Status Enqueue(absl::string_view stream, const std::function<void(PendingStream&)>& add,
                       bool is_ack) ABSL_LOCKS_EXCLUDED(mu_);
  // Drops from `batch` what a Commit that finished since it was queued already
  // made durable (a value enqueued before that Commit ended may be stale), so the
  // store is never sent a value below one this committer wrote.
  void PruneDurable(Batch& batch) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Writes `batch` (mu_ not held; the caller owns the writer's turn).
  void WriteBatch(Batch& batch);
  // Waits for and takes / gives back the writer's turn.
  void AcquireWriter() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void ReleaseWriter() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  CheckpointStore* const store_;

  mutable absl::Mutex mu_;
  // A thread is inside a store call. Only that thread touches the store.
  bool writing_ ABSL_GUARDED_BY(mu_) = false;
  // Collecting acks for the next write; replaced when a writer takes it.
  std::shared_ptr<Batch> open_ ABSL_GUARDED_BY(mu_);
  // Highest values this committer knows to be durable, per stream (and consumer).
  absl::flat_hash_map<std::string, absl::flat_hash_map<std::string, EventId>> durable_acks_
      ABSL_GUARDED_BY(mu_);
  absl::flat_hash_map<std::string, Lsn> durable_confirmed_ ABSL_GUARDED_BY(mu_);
  Stats stats_ ABSL_GUARDED_BY(mu_);
};

}  // namespace walfeed::replication

#endif  // WALFEED_REPLICATION_GROUP_COMMITTER_H_
