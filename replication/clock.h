// Clock: where the stream loop reads the time, so that tests can drive the
// reader's deadlines (feedback cadence, read coalescing, the shutdown-request
// chain) in simulated time instead of waiting for them.
#ifndef WALFEED_REPLICATION_CLOCK_H_
#define WALFEED_REPLICATION_CLOCK_H_

#include "absl/time/time.h"

namespace walfeed::replication {

class Clock {
 public:
  virtual ~Clock() = default;
  virtual absl::Time Now() const = 0;

  // absl::Now(); lives for the whole process.
  static const Clock* Real();
};

}  // namespace walfeed::replication

#endif  // WALFEED_REPLICATION_CLOCK_H_
