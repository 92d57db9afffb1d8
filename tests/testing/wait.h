// WaitUntil: waits for a condition that has no notifier of its own (a catalog
// value in PostgreSQL, say) by re-checking it until a deadline. Tests use this or
// absl::Mutex::AwaitWithTimeout, never a fixed sleep: a fixed sleep is either too
// short on a loaded machine or wastes time on an idle one.
#ifndef WALFEED_TESTS_TESTING_WAIT_H_
#define WALFEED_TESTS_TESTING_WAIT_H_

#include <functional>

#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"

namespace walfeed::testing {

// True as soon as `condition()` holds; false if it still does not at `timeout`.
inline bool WaitUntil(const std::function<bool()>& condition, absl::Duration timeout,
                      absl::Duration recheck = absl::Milliseconds(20)) {
  const absl::Time deadline = absl::Now() + timeout;
  absl::Notification never;  // Only its timed wait is used, as a pause between checks.
  for (;;) {
    if (condition()) return true;
    if (absl::Now() >= deadline) return false;
    never.WaitForNotificationWithTimeout(recheck);
  }
}

}  // namespace walfeed::testing

#endif  // WALFEED_TESTS_TESTING_WAIT_H_
