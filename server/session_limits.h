// SessionLimits: the per-subscription knobs, defined once. The config's
// `defaults:` section holds the server's values, a SubscribeRequest may override
// each (0 = the server's), and the session framer enforces them.
#ifndef WALFEED_SERVER_SESSION_LIMITS_H_
#define WALFEED_SERVER_SESSION_LIMITS_H_

#include <cstdint>

#include "absl/time/time.h"

namespace walfeed::server {

// The range of each knob, for the config's defaults and for a request alike:
// far beyond any sensible setting, low enough that a typo (an extra digit or
// two) is caught, and within the proto's fields.
inline constexpr uint64_t kBatchEventsMax = 100'000;
inline constexpr uint64_t kBatchBytesMax = uint64_t{64} << 20;
inline constexpr uint64_t kUnackedEventsMax = 10'000'000;
inline constexpr uint64_t kUnackedBytesMax = uint64_t{64} << 30;
// Below 10 ms progress frames would be most of the traffic.
inline constexpr absl::Duration kProgressIntervalMin = absl::Milliseconds(10);
inline constexpr absl::Duration kProgressIntervalMax = absl::Hours(1);

struct SessionLimits {
  // Events and bytes per events frame at most (one event larger than the byte
  // bound is still sent, alone).
  uint32_t max_batch_events = 256;
  uint32_t max_batch_bytes = 1 << 20;
  // Delivered but not yet acked, at most: the flow-control window.
  uint32_t max_unacked_events = 10000;
  uint64_t max_unacked_bytes = uint64_t{64} << 20;
  // A progress frame is sent when nothing else was for this long.
  absl::Duration progress_interval = absl::Seconds(5);
};

}  // namespace walfeed::server

#endif  // WALFEED_SERVER_SESSION_LIMITS_H_
