#include "replication/delivery_gate.h"

#include "absl/strings/str_cat.h"

namespace walfeed::replication {

absl::StatusOr<DeliveryGate::Verdict> DeliveryGate::Admit(
    const TransactionAssembler::Output& output) {
  if (const auto* begun = absl::get_if<TransactionBegun>(&output)) {
    if (begun->commit_lsn <= last_committed_) {
      skipping_ = true;  // Delivered whole before a reconnect: PostgreSQL re-sent it.
      return Verdict{};
    }
    if (open_) {
      if (open_->commit_lsn == begun->commit_lsn) return Verdict{};  // Resumed.
      return absl::DataLossError(absl::StrCat(
          "transaction ", open_->commit_lsn.ToString(),
          " was partly delivered before a reconnect but PostgreSQL sent ",
          begun->commit_lsn.ToString(), " instead of re-sending it"));
    }
    open_ = OpenTransaction{begun->commit_lsn, 0};
    return Verdict{/*track=*/true, /*deliver=*/false};
  }
  if (const auto* event = absl::get_if<ChangeEvent>(&output)) {
    if (skipping_ || (open_ && event->id.index < open_->passed)) {
      ++counts_.redelivered_dropped;
      return Verdict{};
    }
    if (!open_ || open_->commit_lsn != event->id.commit_lsn) {
      return absl::DataLossError(
          absl::StrCat("event ", event->id.ToString(), " outside its transaction"));
    }
    ++open_->passed;
    if (event->id <= deliver_after_) {
      ++counts_.below_checkpoint;
      return Verdict{/*track=*/true, /*deliver=*/false};
    }
    return Verdict{/*track=*/true, /*deliver=*/true};
  }
  if (const auto* committed = absl::get_if<TransactionCommitted>(&output)) {
    if (skipping_) {
      skipping_ = false;
      return Verdict{};
    }
    if (!open_ || open_->commit_lsn != committed->commit_lsn) {
      return absl::DataLossError(absl::StrCat("commit ", committed->commit_lsn.ToString(),
                                              " of a transaction that never began"));
    }
    last_committed_ = committed->commit_lsn;
    open_.reset();
    return Verdict{/*track=*/true, /*deliver=*/true};
  }
  ++counts_.non_transactional_messages;
  return Verdict{};
}

absl::Status TrackOutput(AckTracker& tracker, const TransactionAssembler::Output& output) {
  if (const auto* begun = absl::get_if<TransactionBegun>(&output)) {
    return tracker.OnBegin(begun->commit_lsn);
  }
  if (const auto* event = absl::get_if<ChangeEvent>(&output)) return tracker.OnEvent(event->id);
  if (const auto* committed = absl::get_if<TransactionCommitted>(&output)) {
    return tracker.OnCommit(committed->commit_lsn, committed->end_lsn, committed->event_count);
  }
  return absl::OkStatus();
}

}  // namespace walfeed::replication
