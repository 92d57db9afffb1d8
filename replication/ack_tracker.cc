#include "replication/ack_tracker.h"

#include <algorithm>
#include <cstdint>

#include "absl/strings/str_cat.h"
#include "replication/error_reason.h"
#include "replication/status_macros.h"

namespace walfeed::replication {

AckTracker::AckTracker(Lsn start) : base_(start), confirmed_(start) {}

absl::Status AckTracker::AddConsumer(absl::string_view consumer, EventId checkpoint) {
  absl::MutexLock lock(&mu_);
  if (!acks_.emplace(std::string(consumer), checkpoint).second) {
    return absl::AlreadyExistsError(
        absl::StrCat("consumer \"", consumer, "\" is already tracked"));
  }
  return absl::OkStatus();
}

absl::Status AckTracker::RemoveConsumer(absl::string_view consumer) {
  absl::MutexLock lock(&mu_);
  if (acks_.erase(consumer) == 0) {
    return absl::NotFoundError(absl::StrCat("consumer \"", consumer, "\" is not tracked"));
  }
  return absl::OkStatus();
}

absl::Status AckTracker::OnBegin(Lsn commit_lsn) {
  absl::MutexLock lock(&mu_);
  if (!transactions_.empty() && !transactions_.back().committed) {
    return absl::FailedPreconditionError(absl::StrCat(
        "Begin of ", commit_lsn.ToString(), " while transaction ",
        transactions_.back().commit_lsn.ToString(), " is still open"));
  }
  if (commit_lsn <= last_commit_lsn_) {
    return absl::FailedPreconditionError(absl::StrCat(
        "commit LSNs must increase: ", commit_lsn.ToString(), " follows ",
        last_commit_lsn_.ToString()));
  }
  // PostgreSQL never sends a transaction whose commit starts below a position we
  // already treat as safe; if it did, confirming that position could have
  // skipped it, so stop rather than continue on a broken assumption.
  if (commit_lsn < base_) {
    return absl::FailedPreconditionError(absl::StrCat(
        "transaction ", commit_lsn.ToString(), " commits below the safe position ",
        base_.ToString()));
  }
  transactions_.push_back(Transaction{commit_lsn, Lsn::kInvalid, 0, false, Lsn::kInvalid});
  last_commit_lsn_ = commit_lsn;
  return absl::OkStatus();
}

absl::Status AckTracker::OnEvent(EventId id) {
  absl::MutexLock lock(&mu_);
  if (transactions_.empty() || transactions_.back().committed ||
      transactions_.back().commit_lsn != id.commit_lsn) {
    return absl::FailedPreconditionError(
        absl::StrCat("event ", id.ToString(), " outside its open transaction"));
  }
  Transaction& txn = transactions_.back();
  if (id.index != txn.delivered) {
    return absl::FailedPreconditionError(absl::StrCat(
        "event ", id.ToString(), " out of order: expected index ", txn.delivered));
  }
  ++txn.delivered;
  return absl::OkStatus();
}

absl::Status AckTracker::OnCommit(Lsn commit_lsn, Lsn end_lsn, uint32_t event_count) {
  absl::MutexLock lock(&mu_);
  if (transactions_.empty() || transactions_.back().committed ||
      transactions_.back().commit_lsn != commit_lsn) {
    return absl::FailedPreconditionError(absl::StrCat(
        "Commit of ", commit_lsn.ToString(), " without a matching open transaction"));
  }
  Transaction& txn = transactions_.back();
  if (event_count != txn.delivered) {
    return absl::FailedPreconditionError(
        absl::StrCat("Commit of ", commit_lsn.ToString(), " reports ", event_count,
                     " events but ", txn.delivered, " were delivered"));
  }
  if (end_lsn <= commit_lsn) {
    return absl::FailedPreconditionError(
        absl::StrCat("Commit of ", commit_lsn.ToString(), " ends at ",
                     end_lsn.ToString(), ", not after its start"));
  }
  txn.end_lsn = end_lsn;
  txn.committed = true;
  return absl::OkStatus();
}

void AckTracker::OnKeepalive(Lsn wal_end) {
  absl::MutexLock lock(&mu_);
  if (transactions_.empty()) {
    // Everything received so far was released, i.e. fully acked by everyone.
    base_ = std::max(base_, wal_end);
  } else {
    Lsn& after = transactions_.back().keepalive_after;
    after = std::max(after, wal_end);
  }
}

absl::Status AckTracker::OnAppended(Lsn commit_lsn, uint32_t count) {
  absl::MutexLock lock(&mu_);
  if (transactions_.empty() || !transactions_.back().committed ||
      transactions_.back().commit_lsn != commit_lsn) {
    return absl::FailedPreconditionError(absl::StrCat(
        "events appended after ", commit_lsn.ToString(),
        ", which is not the newest committed transaction still tracked"));
  }
  Transaction& txn = transactions_.back();
  if (uint64_t{txn.delivered} + count > UINT32_MAX) {
    return absl::FailedPreconditionError(
        absl::StrCat("too many events appended after ", commit_lsn.ToString()));
  }
  txn.delivered += count;
  return absl::OkStatus();
}

absl::Status AckTracker::CheckDeliveredLocked(EventId id) const {
  if (retired_) {
    return reason::WithReason(
        absl::UnavailableError(absl::StrCat(
            "the stream is being re-read from its slot: subscribe again and ack ", id.ToString(),
            " (or what follows it) once it is delivered again")),
        reason::kStreamRestarting);
  }
  auto txn = std::lower_bound(
      transactions_.begin(), transactions_.end(), id.commit_lsn,
      [](const Transaction& t, Lsn lsn) { return t.commit_lsn < lsn; });
  if (txn == transactions_.end() || txn->commit_lsn != id.commit_lsn ||
      id.index >= txn->delivered) {
    return absl::OutOfRangeError(absl::StrCat(
        "event ", id.ToString(), " was never delivered on this stream"));
  }
  return absl::OkStatus();
}

absl::Status AckTracker::CheckDelivered(EventId id) const {
  absl::MutexLock lock(&mu_);
  return CheckDeliveredLocked(id);
}

absl::Status AckTracker::Ack(absl::string_view consumer, EventId id) {
  absl::MutexLock lock(&mu_);
  auto it = acks_.find(consumer);
  if (it == acks_.end()) {
    return absl::NotFoundError(absl::StrCat("consumer \"", consumer, "\" is not tracked"));
  }
  if (id <= it->second) return absl::OkStatus();  // Cumulative: already covered.
  WALFEED_RETURN_IF_ERROR(CheckDeliveredLocked(id));
  it->second = id;
  return absl::OkStatus();
}

bool AckTracker::FullyAcked(const Transaction& txn, EventId ack) {
  if (txn.commit_lsn < ack.commit_lsn) return true;
  return txn.commit_lsn == ack.commit_lsn && txn.committed &&
         uint64_t{ack.index} + 1 >= txn.delivered;
}

Lsn AckTracker::SafeFor(EventId ack) const {
  Lsn safe = base_;
  // Transactions [0, k) commit at or below the ack's transaction.
  auto k = std::upper_bound(
      transactions_.begin(), transactions_.end(), ack.commit_lsn,
      [](Lsn lsn, const Transaction& t) { return lsn < t.commit_lsn; });
  if (k != transactions_.begin()) {
    const Transaction& last = *(k - 1);
    if (!FullyAcked(last, ack)) {
      // Partly acked: confirming its commit LSN makes PostgreSQL re-send it whole.
      return std::max(safe, last.commit_lsn);
    }
    safe = std::max({safe, last.end_lsn, last.keepalive_after});
  }
  // A committed transaction without events needs no ack once all before it are.
  for (; k != transactions_.end() && k->committed && k->delivered == 0; ++k) {
    safe = std::max({safe, k->end_lsn, k->keepalive_after});
  }
  return safe;
}

Lsn AckTracker::Confirmable() {
  absl::MutexLock lock(&mu_);
  if (acks_.empty()) {
    // Nothing is confirmed without a consumer, but leading transactions without
    // events need no ack from anyone: released, or a stream waiting for its
    // first consumer would keep a record of each (other streams' checkpoint
    // writes, under a FOR ALL TABLES publication) for as long as it waits.
    ReleaseLocked(std::nullopt);
    return confirmed_;
  }
  Lsn safe = Lsn(UINT64_MAX);
  EventId slowest = acks_.begin()->second;
  for (const auto& [name, ack] : acks_) {
    safe = std::min(safe, SafeFor(ack));
    slowest = std::min(slowest, ack);
  }
  confirmed_ = std::max(confirmed_, safe);
  ReleaseLocked(slowest);
  return confirmed_;
}

void AckTracker::ReleaseLocked(std::optional<EventId> slowest) {
  while (!transactions_.empty()) {
    const Transaction& front = transactions_.front();
    // An open transaction is never released, even when every consumer's ack is past
    // it (PostgreSQL re-sends acked transactions after a restart from a stored
    // position that lags the acks): its remaining events and Commit still arrive.
    if (!front.committed) break;
    const bool empty_and_done = front.delivered == 0;
    if (!empty_and_done && !(slowest && FullyAcked(front, *slowest))) break;
    base_ = std::max({base_, front.end_lsn, front.keepalive_after});
    transactions_.pop_front();
  }
}

void AckTracker::Retire() {
  absl::MutexLock lock(&mu_);
  retired_ = true;
  std::deque<Transaction>().swap(transactions_);  // Frees the memory too.
}

absl::StatusOr<EventId> AckTracker::AckedBy(absl::string_view consumer) const {
  absl::MutexLock lock(&mu_);
  auto it = acks_.find(consumer);
  if (it == acks_.end()) {
    return absl::NotFoundError(absl::StrCat("consumer \"", consumer, "\" is not tracked"));
  }
  return it->second;
}

EventId AckTracker::AckedByAll() const {
  absl::MutexLock lock(&mu_);
  if (acks_.empty()) return EventId{};
  EventId least = acks_.begin()->second;
  for (const auto& [consumer, acked] : acks_) least = std::min(least, acked);
  return least;
}

size_t AckTracker::tracked_transactions() const {
  absl::MutexLock lock(&mu_);
  return transactions_.size();
}

}  // namespace walfeed::replication
