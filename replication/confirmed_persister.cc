#include "replication/confirmed_persister.h"

#include <utility>

namespace walfeed::replication {

ConfirmedPersister::ConfirmedPersister(ConfirmedLsnStore* store, Lsn durable,
                                       std::function<void()> on_stored)
    : store_(store), on_stored_(std::move(on_stored)), durable_(durable), thread_([this] {
        Loop();
      }) {}

ConfirmedPersister::~ConfirmedPersister() {
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
  }
  thread_.join();
}

void ConfirmedPersister::Request(Lsn lsn) {
  absl::MutexLock lock(&mu_);
  if (lsn <= durable_ || (requested_ && lsn <= *requested_)) return;
  requested_ = lsn;
}

void ConfirmedPersister::RequestPing() {
  absl::MutexLock lock(&mu_);
  ping_ = true;
}

Lsn ConfirmedPersister::durable() const {
  absl::MutexLock lock(&mu_);
  return durable_;
}

std::optional<absl::Status> ConfirmedPersister::TakeError() {
  absl::MutexLock lock(&mu_);
  return std::exchange(error_, std::nullopt);
}

bool ConfirmedPersister::AwaitIdle(absl::Duration timeout) const {
  absl::MutexLock lock(&mu_);
  auto idle = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return !requested_ && !writing_; };
  return mu_.AwaitWithTimeout(absl::Condition(&idle), timeout);
}

void ConfirmedPersister::Loop() {
  for (;;) {
    std::optional<Lsn> lsn;
    {
      absl::MutexLock lock(&mu_);
      auto work = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
        return stopping_ || requested_.has_value() || ping_;
      };
      mu_.Await(absl::Condition(&work));
      if (stopping_) return;
      // A write is a round trip too: it answers a ping as well.
      ping_ = false;
      lsn = std::exchange(requested_, std::nullopt);
      writing_ = true;
    }
    const absl::Status stored = lsn ? store_->PersistConfirmed(*lsn) : store_->Ping();
    {
      absl::MutexLock lock(&mu_);
      writing_ = false;
      if (stored.ok()) {
        if (lsn && *lsn > durable_) durable_ = *lsn;
      } else {
        error_ = stored;
      }
    }
    if (on_stored_) on_stored_();
  }
}

}  // namespace walfeed::replication
