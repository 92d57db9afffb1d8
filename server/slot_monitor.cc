#include "server/slot_monitor.h"

#include <utility>

#include "absl/time/clock.h"

namespace walfeed::server {

SlotMonitor::SlotMonitor(Reader read) : read_(std::move(read)) {
  thread_ = std::thread([this] { Loop(); });
}

SlotMonitor::~SlotMonitor() {
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
  }
  thread_.join();
}

bool SlotMonitor::RecentLocked(absl::Time asked) const {
  return last_.has_value() && last_started_ >= asked - kFresh;
}

void SlotMonitor::Want() {
  absl::MutexLock lock(&mu_);
  const absl::Time now = absl::Now();
  if (RecentLocked(now) || (running_ && running_since_ >= now - kFresh)) return;
  wanted_ = true;
}

SlotMonitor::View SlotMonitor::Get(absl::Time deadline) {
  const absl::Time asked = absl::Now();
  Want();
  absl::MutexLock lock(&mu_);
  auto recent = [this, asked]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return RecentLocked(asked) || stopping_;
  };
  mu_.AwaitWithDeadline(absl::Condition(&recent), deadline);
  View view;
  view.report = last_;
  view.read_at = last_started_;
  view.fresh = RecentLocked(asked);
  return view;
}

void SlotMonitor::Loop() {
  for (;;) {
    absl::Time started;
    {
      absl::MutexLock lock(&mu_);
      auto work = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return wanted_ || stopping_; };
      mu_.Await(absl::Condition(&work));
      if (stopping_) return;
      wanted_ = false;
      running_ = true;
      running_since_ = started = absl::Now();
    }
    absl::StatusOr<replication::SlotReport> report = read_();
    absl::MutexLock lock(&mu_);
    running_ = false;
    last_ = std::move(report);
    last_started_ = started;
  }
}

}  // namespace walfeed::server
