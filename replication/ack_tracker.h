// AckTracker: which LSN walfeed may confirm to PostgreSQL.
//
// This is the seam that decides between "nothing lost" and "data lost": the slot's
// confirmed_flush_lsn tells PostgreSQL which transactions it will never send
// again. PostgreSQL skips, on restart, every transaction whose commit record
// starts below the confirmed LSN, and it accepts any value without checking it,
// so confirming one byte too far silently loses the next transaction, and never
// confirming pins WAL forever.
//
// Inputs, in the order the replication connection received them:
//   OnBegin(commit_lsn)                      a transaction starts (Begin.final_lsn)
//   OnEvent(id)                              its next event was delivered
//   OnCommit(commit_lsn, end_lsn, count)     its Commit arrived
//   OnKeepalive(wal_end)                     a primary keepalive
// and, from any thread, each consumer's cumulative, durably stored acks.
//
// Per consumer, the safe position is the largest of
//   * end_lsn of every transaction the consumer fully acked (its last event), since
//     confirming end_lsn(T) skips T and nothing after it;
//   * commit_lsn of a transaction it acked part of: PostgreSQL re-sends T whole,
//     and the acked prefix is dropped by id;
//   * walEnd of a keepalive, when every transaction received before that keepalive
//     is fully acked ("idle advance"): the walsender queues all output for commit
//     records below walEnd before sending the keepalive, and every transaction it
//     sends later has commit_lsn >= walEnd, so nothing unacked is skipped.
// The confirmable LSN is the minimum over consumers, never moves backwards, and
// never exceeds a position that was delivered (an end_lsn or a keepalive walEnd).
// With no consumer it stays where it started: nobody has processed anything.
//
// Thread-safe. Memory: one small record per transaction between the slowest
// consumer's ack and the newest delivered transaction; fully acked ones are
// released as Confirmable() advances.
#ifndef WALFEED_REPLICATION_ACK_TRACKER_H_
#define WALFEED_REPLICATION_ACK_TRACKER_H_

#include <cstdint>
#include <deque>
#include <optional>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "replication/event_id.h"
#include "replication/lsn.h"

namespace walfeed::replication {

class AckTracker {
 public:
  // `start` is the position the stream resumed from: the durably stored confirmed
  // LSN (or the slot's consistent point for a new slot). It is safe by definition.
  explicit AckTracker(Lsn start);

  AckTracker(const AckTracker&) = delete;
  AckTracker& operator=(const AckTracker&) = delete;

  // Registers a consumer whose durable checkpoint is `checkpoint` (everything up to
  // and including it is processed; EventId{} for a consumer that acked nothing).
  // AlreadyExists if the name is taken.
  absl::Status AddConsumer(absl::string_view consumer, EventId checkpoint)
      ABSL_LOCKS_EXCLUDED(mu_);
  // Forgets a consumer (it no longer holds the slot back). NotFound if unknown.
  absl::Status RemoveConsumer(absl::string_view consumer) ABSL_LOCKS_EXCLUDED(mu_);

  // Replication input. Errors mean the caller broke the connection's ordering
  // (FailedPrecondition); the tracker is unchanged then.
  absl::Status OnBegin(Lsn commit_lsn) ABSL_LOCKS_EXCLUDED(mu_);
  absl::Status OnEvent(EventId id) ABSL_LOCKS_EXCLUDED(mu_);
  absl::Status OnCommit(Lsn commit_lsn, Lsn end_lsn, uint32_t event_count)
      ABSL_LOCKS_EXCLUDED(mu_);
  void OnKeepalive(Lsn wal_end) ABSL_LOCKS_EXCLUDED(mu_);
  // `count` events that are not the stream's (a backfill's READ events) were
  // delivered right after the committed transaction `commit_lsn`, with the
  // indexes that follow its own: the transaction counts as fully acked only
  // once they are too. FailedPrecondition unless it is the newest transaction
  // and still tracked.
  absl::Status OnAppended(Lsn commit_lsn, uint32_t count) ABSL_LOCKS_EXCLUDED(mu_);

  // A consumer's cumulative ack, already durable. An id at or below the consumer's
  // current ack is a harmless no-op (OK). NotFound for an unknown consumer;
  // OutOfRange for an id that was never delivered.
  absl::Status Ack(absl::string_view consumer, EventId id) ABSL_LOCKS_EXCLUDED(mu_);

  // OK if `id` is an event delivered on this stream and not yet released (so a
  // durable write of an ack of it can be followed by Ack() without surprise);
  // OutOfRange otherwise. Ids at or below every consumer's ack may be released.
  absl::Status CheckDelivered(EventId id) const ABSL_LOCKS_EXCLUDED(mu_);

  // The LSN that may be sent as flush in the next standby status update.
  // Monotonic. Also releases records every consumer has fully acked.
  Lsn Confirmable() ABSL_LOCKS_EXCLUDED(mu_);

  // A consumer's current cumulative ack. NotFound if unknown.
  absl::StatusOr<EventId> AckedBy(absl::string_view consumer) const
      ABSL_LOCKS_EXCLUDED(mu_);

  // What every consumer has acked: the smallest cumulative ack; EventId{}
  // when there is no consumer (nobody has processed anything).
  EventId AckedByAll() const ABSL_LOCKS_EXCLUDED(mu_);

  // Transactions delivered and not yet released; for metrics and tests.
  size_t tracked_transactions() const ABSL_LOCKS_EXCLUDED(mu_);

  // The run it tracked is over and the stream is read again from its slot
  // under a new tracker: drops every transaction record (a buffer's worth or
  // more, which a tracker kept for acks still in flight would otherwise hold
  // for the life of the process). CheckDelivered and Ack of a new id then
  // fail UNAVAILABLE (reason STREAM_RESTARTING): the client subscribes again
  // and acks what it is sent then. Consumers' acks stay readable.
  void Retire() ABSL_LOCKS_EXCLUDED(mu_);

 private:
  struct Transaction {
    Lsn commit_lsn;
    Lsn end_lsn;                // Valid once committed.
    uint32_t delivered = 0;     // Events delivered so far (next index).
    bool committed = false;
    // Largest walEnd of the keepalives received after this transaction's Begin and
    // before the next one's: confirmable once this transaction is fully acked.
    Lsn keepalive_after;
  };

  // Whether `ack` covers all of `txn` (its last event, or it has none).
  static bool FullyAcked(const Transaction& txn, EventId ack);
  Lsn SafeFor(EventId ack) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::Status CheckDeliveredLocked(EventId id) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Pops the leading transactions that need no more acks: committed ones
  // without events, and, given `slowest` (every consumer's ack), those it
  // fully covers. What they proved safe moves to base_.
  void ReleaseLocked(std::optional<EventId> slowest) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  mutable absl::Mutex mu_;
  // Safe for every consumer: the start position, raised past released
  // transactions and past keepalives received while nothing was tracked.
  Lsn base_ ABSL_GUARDED_BY(mu_);
  // The last value Confirmable() returned; never decreases.
  Lsn confirmed_ ABSL_GUARDED_BY(mu_);
  // Delivered transactions in receive order; commit_lsn strictly increasing.
  // Only the last may be uncommitted.
  std::deque<Transaction> transactions_ ABSL_GUARDED_BY(mu_);
  bool retired_ ABSL_GUARDED_BY(mu_) = false;  // Retire() was called.
  // Commit LSN of the newest transaction ever begun (survives release), so
  // ordering is checked even when transactions_ is empty.
  Lsn last_commit_lsn_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_map<std::string, EventId> acks_ ABSL_GUARDED_BY(mu_);
};

}  // namespace walfeed::replication

#endif  // WALFEED_REPLICATION_ACK_TRACKER_H_
