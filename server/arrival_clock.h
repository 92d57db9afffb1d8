// ArrivalClock: when the stream's events arrived, sampled, so that a
// consumer's lag can be told in seconds ("the oldest event it has not acked
// arrived 42 s ago") without a timestamp per buffered event.
//
// A sample is taken for the first event appended at least interval() after
// the previous sample, and remembers the id appended just before it. So an
// event that is no sample arrived less than interval() after the last sample
// below it, and the first event after a quiet spell is always a sample.
// Samples are kept from the newest one at or below the stream's floor on; past
// kMaxSamples the interval doubles and the samples are thinned by the same
// rule, so memory stays bounded on a stream held back for days while the
// estimates coarsen (an event then arrived less than 2 × interval() after the
// last sample below it).
#ifndef WALFEED_SERVER_ARRIVAL_CLOCK_H_
#define WALFEED_SERVER_ARRIVAL_CLOCK_H_

#include <cstddef>
#include <deque>
#include <optional>

#include "absl/time/time.h"
#include "replication/event_id.h"

namespace walfeed::server {

using replication::EventId;

class ArrivalClock {
 public:
  static constexpr absl::Duration kInterval = absl::Milliseconds(250);
  static constexpr size_t kMaxSamples = 8192;

  explicit ArrivalClock(absl::Duration interval = kInterval, size_t max_samples = kMaxSamples)
      : interval_(interval), max_samples_(max_samples) {}

  // The reader appended `id` (ids only grow) at `now`.
  void Arrived(EventId id, absl::Time now);
  // The wall clock to the scheduler's tick (a few ms, never ahead of it): what
  // the reader stamps each append with. Samples are kInterval apart and lags
  // are told in seconds, so the tick costs nothing in precision, and the read
  // is a fraction of absl::Now()'s, which showed in a profile at one per event.
  static absl::Time CoarseNow();
  // Nobody will ask about events at or below `floor` any more.
  void TrimThrough(EventId floor);

  // When the first event after `after` arrived, given that `newest` is the
  // newest event appended: nullopt when there is none (nothing after `after`).
  // The time it was stamped with when that event is a sample (the registry
  // stamps with CoarseNow(): at most a tick early), otherwise less than
  // 2 × interval() early (a lag computed from it errs on the long side).
  std::optional<absl::Time> FirstArrivalAfter(EventId after, EventId newest) const;

  EventId newest() const { return last_; }  // EventId{} before any event.
  absl::Duration interval() const { return interval_; }
  size_t samples() const { return samples_.size(); }

 private:
  struct Sample {
    EventId id;
    EventId previous;  // The event appended just before it (EventId{}: none).
    absl::Time at;
  };
  void Thin();

  absl::Duration interval_;
  size_t max_samples_;
  EventId last_;                 // The newest event appended.
  std::deque<Sample> samples_;  // Ids and times ascending.
};

}  // namespace walfeed::server

#endif  // WALFEED_SERVER_ARRIVAL_CLOCK_H_
