#include "replication/group_committer.h"

#include <algorithm>

namespace walfeed::replication {

// Batch fields are guarded by mu_ while the batch is open_. Once a writer takes it
// (replacing open_), only that writer touches `streams` and `results` until it sets
// `done` under mu_; waiters read `results` only after seeing `done`.

GroupCommitter::GroupCommitter(CheckpointStore* store)
    : store_(store), open_(std::make_shared<Batch>()) {}

absl::Status GroupCommitter::AckDurably(absl::string_view stream, absl::string_view consumer,
                                        EventId id) {
  {
    absl::MutexLock lock(&mu_);
    auto s = durable_acks_.find(stream);
    if (s != durable_acks_.end()) {
      auto c = s->second.find(consumer);
      if (c != s->second.end() && id <= c->second) {
        ++stats_.acks_already_durable;
        return absl::OkStatus();
      }
    }
  }
  return Enqueue(
      stream,
      [&](PendingStream& pending) {
        auto [it, inserted] = pending.acks.emplace(std::string(consumer), id);
        if (!inserted) it->second = std::max(it->second, id);
      },
      /*is_ack=*/true);
}

absl::Status GroupCommitter::SetConfirmed(absl::string_view stream, Lsn lsn) {
  {
    absl::MutexLock lock(&mu_);
    auto it = durable_confirmed_.find(stream);
    if (it != durable_confirmed_.end() && lsn <= it->second) return absl::OkStatus();
  }
  return Enqueue(
      stream,
      [&](PendingStream& pending) {
        pending.confirmed = std::max(pending.confirmed.value_or(lsn), lsn);
      },
      /*is_ack=*/false);
}

absl::Status GroupCommitter::Enqueue(absl::string_view stream,
                                     const std::function<void(PendingStream&)>& add, bool is_ack) {
  mu_.Lock();
  std::shared_ptr<Batch> batch = open_;
  add(batch->streams[stream]);
  ++batch->queued;
  // Done, or nobody is writing and this batch is next: then this caller writes it.
  auto ready = [this, &batch]() {
    mu_.AssertHeld();
    return batch->done || (!writing_ && open_ == batch);
  };
  mu_.Await(absl::Condition(&ready));
  if (!batch->done) {
    writing_ = true;
    open_ = std::make_shared<Batch>();
    PruneDurable(*batch);
    mu_.Unlock();
    WriteBatch(*batch);
    mu_.Lock();
    for (const auto& [name, pending] : batch->streams) {
      const absl::Status& result = batch->results[name];
      if (pending.acks.empty() && !pending.confirmed.has_value()) continue;  // No write.
      ++stats_.commits;
      if (!result.ok()) {
        ++stats_.failed_commits;
        continue;
      }
      auto& durable = durable_acks_[name];
      for (const auto& [consumer, id] : pending.acks) {
        auto [it, inserted] = durable.emplace(consumer, id);
        if (!inserted) it->second = std::max(it->second, id);
      }
      if (pending.confirmed.has_value()) {
        auto [it, inserted] = durable_confirmed_.emplace(name, *pending.confirmed);
        if (!inserted) it->second = std::max(it->second, *pending.confirmed);
      }
    }
    batch->done = true;
    ReleaseWriter();
  }
  absl::Status status = batch->results[stream];
  if (is_ack) ++(status.ok() ? stats_.acks_committed : stats_.acks_failed);
  mu_.Unlock();
  return status;
}

void GroupCommitter::PruneDurable(Batch& batch) {
  for (auto& [stream, pending] : batch.streams) {
    auto durable = durable_acks_.find(stream);
    if (durable != durable_acks_.end()) {
      absl::erase_if(pending.acks, [&durable](const auto& ack) {
        auto it = durable->second.find(ack.first);
        return it != durable->second.end() && ack.second <= it->second;
      });
    }
    auto confirmed = durable_confirmed_.find(stream);
    if (confirmed != durable_confirmed_.end() && pending.confirmed.has_value() &&
        *pending.confirmed <= confirmed->second) {
      pending.confirmed.reset();
    }
  }
}

void GroupCommitter::WriteBatch(Batch& batch) {
  for (const auto& [stream, pending] : batch.streams) {
    if (pending.acks.empty() && !pending.confirmed.has_value()) {
      batch.results[stream] = absl::OkStatus();  // Everything was already durable.
      continue;
    }
    std::vector<std::pair<std::string, EventId>> acks(pending.acks.begin(), pending.acks.end());
    batch.results[stream] = store_->Commit(stream, acks, pending.confirmed);
  }
}

void GroupCommitter::AcquireWriter() {
  mu_.Await(absl::Condition(
      +[](bool* writing) { return !*writing; }, &writing_));
  writing_ = true;
}

void GroupCommitter::ReleaseWriter() { writing_ = false; }

absl::StatusOr<StreamCheckpoint> GroupCommitter::Load(absl::string_view stream) {
  {
    absl::MutexLock lock(&mu_);
    AcquireWriter();
  }
  absl::StatusOr<StreamCheckpoint> checkpoint = store_->Load(stream);
  absl::MutexLock lock(&mu_);
  if (checkpoint.ok()) {
    // What is stored replaces what this committer remembers: it holds the writer's
    // turn, so every write of its own is in the store already, and what differs
    // was changed by another instance while this one did not lead (a consumer
    // removed, a slot bound anew). A remembered ack kept over a removal would
    // let the same consumer's next, lower ack pass as durable without a write.
    durable_acks_[stream] = checkpoint->consumers;
    durable_confirmed_[stream] = checkpoint->confirmed_lsn;
  }
  ReleaseWriter();
  return checkpoint;
}

absl::Status GroupCommitter::Ping() {
  {
    absl::MutexLock lock(&mu_);
    AcquireWriter();
  }
  absl::Status status = store_->Ping();
  absl::MutexLock lock(&mu_);
  ReleaseWriter();
  return status;
}

absl::Status GroupCommitter::RemoveConsumer(absl::string_view stream, absl::string_view consumer) {
  {
    absl::MutexLock lock(&mu_);
    AcquireWriter();
  }
  absl::Status status = store_->RemoveConsumer(stream, consumer);
  absl::MutexLock lock(&mu_);
  // Forget the durable ack even on failure: the row may or may not be gone, and a
  // forgotten value only costs a write.
  auto it = durable_acks_.find(stream);
  if (it != durable_acks_.end()) it->second.erase(consumer);
  ReleaseWriter();
  return status;
}

absl::Status GroupCommitter::DetachConsumer(absl::string_view stream, absl::string_view consumer) {
  {
    absl::MutexLock lock(&mu_);
    AcquireWriter();
  }
  absl::Status status = store_->DetachConsumer(stream, consumer);
  absl::MutexLock lock(&mu_);
  ReleaseWriter();
  return status;
}

absl::Status GroupCommitter::BindSlot(absl::string_view stream, absl::string_view slot_name,
                                      const SlotIdentity& identity, Lsn confirmed_lsn) {
  {
    absl::MutexLock lock(&mu_);
    AcquireWriter();
  }
  absl::Status status = store_->BindSlot(stream, slot_name, identity, confirmed_lsn);
  absl::MutexLock lock(&mu_);
  // Binding replaces the confirmed LSN, possibly with a lower one.
  if (status.ok()) {
    durable_confirmed_[stream] = confirmed_lsn;
  } else {
    durable_confirmed_.erase(stream);
  }
  ReleaseWriter();
  return status;
}

absl::StatusOr<std::vector<std::string>> GroupCommitter::OtherStreamsOnSlot(
    absl::string_view stream, absl::string_view slot_name, uint64_t system_identifier) {
  {
    absl::MutexLock lock(&mu_);
    AcquireWriter();
  }
  absl::StatusOr<std::vector<std::string>> streams =
      store_->OtherStreamsOnSlot(stream, slot_name, system_identifier);
  absl::MutexLock lock(&mu_);
  ReleaseWriter();
  return streams;
}

GroupCommitter::Stats GroupCommitter::stats() const {
  absl::MutexLock lock(&mu_);
  return stats_;
}

void GroupCommitter::AwaitQueuedForTest(size_t n) const {
  absl::MutexLock lock(&mu_);
  auto queued = [this, n]() {
    mu_.AssertHeld();
    return open_->queued >= n;
  };
  mu_.Await(absl::Condition(&queued));
}

}  // namespace walfeed::replication
