// DeliveryGate: the one owner of "which of the assembler's output reaches the
// stream", per stream, across reconnects of its replication connection.
//
//   TransactionAssembler output ──Admit──► Verdict{track, deliver}
//        track:   the AckTracker observes it (TrackOutput)
//        deliver: the stream buffer gets it (events) / sees the commit
//
// Three reasons not to deliver, all decided here:
// * Redelivery after a reconnect. PostgreSQL resumes at the confirmed position and
//   re-sends every transaction committing at or after it, including ones this
//   process already delivered. A transaction delivered whole (its commit LSN at or
//   below the last one committed) is skipped entirely, Begin to Commit; one that was
//   partly delivered when the connection broke resumes: its first `delivered`
//   events are dropped by index (ids are deterministic), the rest are new.
// * Already acked before this process started: events at or below `deliver_after`
//   (every stored consumer's checkpoint is at least that far) are tracked, so the
//   ack tracker's view of the transaction stays whole, but never delivered.
// * A non-transactional logical message has no commit LSN to anchor an id and may
//   belong to a transaction that later aborts: counted, neither tracked nor
//   delivered.
// A transaction that was partly delivered and then not re-sent first is DataLoss:
// something skipped what consumers were promised.
//
// Pure and single-threaded: it belongs to the reader thread.
#ifndef WALFEED_REPLICATION_DELIVERY_GATE_H_
#define WALFEED_REPLICATION_DELIVERY_GATE_H_

#include <cstdint>
#include <optional>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "replication/ack_tracker.h"
#include "replication/event_id.h"
#include "replication/lsn.h"
#include "replication/transaction_assembler.h"

namespace walfeed::replication {

class DeliveryGate {
 public:
  struct Verdict {
    bool track = false;    // The ack tracker must observe this output.
    bool deliver = false;  // The sink gets it (a ChangeEvent or TransactionCommitted).
  };
  struct Counts {
    uint64_t redelivered_dropped = 0;  // Events re-sent after a reconnect.
    uint64_t below_checkpoint = 0;     // Events at or below deliver_after.
    uint64_t non_transactional_messages = 0;
  };

  explicit DeliveryGate(EventId deliver_after = EventId{}) : deliver_after_(deliver_after) {}

  // A new walsender session starts: what follows may repeat what was delivered.
  void OnReconnect() { skipping_ = false; }

  // Decides one output, in the order the assembler produced it. DataLoss when the
  // sequence breaks what was already delivered.
  absl::StatusOr<Verdict> Admit(const TransactionAssembler::Output& output);

  const Counts& counts() const { return counts_; }
  // Commit LSN of the newest transaction delivered whole; 0/0 before one.
  Lsn last_committed() const { return last_committed_; }

 private:
  struct OpenTransaction {
    Lsn commit_lsn;
    uint32_t passed = 0;  // Events admitted so far (the next new index).
  };

  const EventId deliver_after_;
  Lsn last_committed_;
  std::optional<OpenTransaction> open_;  // Begun and partly admitted.
  bool skipping_ = false;                // Inside a transaction delivered whole before.
  Counts counts_;
};

// Feeds `output` to `tracker` (Begin, event, Commit); a verdict's `track` says
// when. Errors are the tracker's ordering checks.
absl::Status TrackOutput(AckTracker& tracker, const TransactionAssembler::Output& output);

}  // namespace walfeed::replication

#endif  // WALFEED_REPLICATION_DELIVERY_GATE_H_
