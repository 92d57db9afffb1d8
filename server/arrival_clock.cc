#include "server/arrival_clock.h"

#include <time.h>

#include <algorithm>
#include <iterator>

namespace walfeed::server {

absl::Time ArrivalClock::CoarseNow() {
  timespec now;
  if (clock_gettime(CLOCK_REALTIME_COARSE, &now) != 0) return absl::Now();
  return absl::TimeFromTimespec(now);
}

void ArrivalClock::Arrived(EventId id, absl::Time now) {
  const EventId previous = last_;
  last_ = id;
  if (!samples_.empty() && now - samples_.back().at < interval_) return;
  samples_.push_back({id, previous, now});
  if (samples_.size() > max_samples_) Thin();
}

void ArrivalClock::Thin() {
  // Keeping the first sample of every doubled interval keeps the rule (a
  // dropped sample lies less than the new interval after a kept one, and the
  // events after it less than the old interval after that).
  interval_ *= 2;
  std::deque<Sample> kept;
  for (const Sample& sample : samples_) {
    if (kept.empty() || sample.at - kept.back().at >= interval_) kept.push_back(sample);
  }
  samples_.swap(kept);
}

void ArrivalClock::TrimThrough(EventId floor) {
  // The newest sample at or below the floor stays: it dates the events just
  // above the floor.
  while (samples_.size() >= 2 && samples_[1].id <= floor) samples_.pop_front();
}

std::optional<absl::Time> ArrivalClock::FirstArrivalAfter(EventId after, EventId newest) const {
  if (newest <= after || samples_.empty()) return std::nullopt;
  auto above = std::upper_bound(samples_.begin(), samples_.end(), after,
                                [](EventId id, const Sample& sample) { return id < sample.id; });
  // The first event after `after` is the first sample above it, or an event
  // before that sample, which arrived shortly after the sample below it.
  if (above != samples_.end() && above->previous <= after) return above->at;
  if (above == samples_.begin()) return above->at;  // Nothing older is sampled.
  return std::prev(above)->at;
}

}  // namespace walfeed::server
