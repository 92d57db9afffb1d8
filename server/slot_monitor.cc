#include "server/slot_monitor.h"

#include <utility>

#include "absl/time/clock.h"

namespace walfeed::server {

SlotMonitor::SlotMonitor(Reader read) : read_(std::move(read)) {
  thread_ = std::thread([this] { Loop(); });
}

SlotMonitor::~SlotMonitor() {
  Stop();
  thread_.join();
}

void SlotMonitor::Stop() {
  absl::MutexLock lock(&mu_);
  stopping_ = true;
}

bool SlotMonitor::RecentLocked(absl::Time asked) const {
  return read_once_ && last_started_ >= asked - kFresh;
}

void SlotMonitor::Want() {
  absl::MutexLock lock(&mu_);
  if (stopping_) return;
  const absl::Time now = absl::Now();
  if (RecentLocked(now) || (running_ && running_since_ >= now - kFresh)) return;
  wanted_ = true;
}

SlotMonitor::View SlotMonitor::Get(absl::Time asked, absl::Time deadline) {
  Want();
  absl::MutexLock lock(&mu_);
  auto recent = [this, asked]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return RecentLocked(asked) || stopping_;
  };
  mu_.AwaitWithDeadline(absl::Condition(&recent), deadline);
  View view;
  view.report = good_;
  view.read_at = good_started_;
  view.error = error_;
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
    read_once_ = true;
    last_started_ = started;
    if (report.ok()) {
      good_ = *std::move(report);
      good_started_ = started;
      error_.reset();
    } else {
      error_ = report.status();
    }
  }
}

}  // namespace walfeed::server
