// How much a stream keeps for slow consumers, and what happens when that is
// full: the config's retention_bytes and laggard_policy (docs/consumers.md).
#ifndef WALFEED_SERVER_RETENTION_OPTIONS_H_
#define WALFEED_SERVER_RETENTION_OPTIONS_H_

#include <cstdint>

namespace walfeed::server {

enum class LaggardPolicy {
  // The stream waits for the consumer that holds the oldest events: nothing is
  // lost, and every other consumer and the slot wait too.
  kHold,
  // That consumer stops holding the stream: it is detached (durably), and its
  // next Subscribe fails until an operator resets it.
  kDetach,
};

struct RetentionOptions {
  // Bytes of spilled events a stream may keep on disk (with a state_dir).
  uint64_t retention_bytes = uint64_t{1} << 30;
  LaggardPolicy laggard_policy = LaggardPolicy::kHold;
};

inline constexpr uint64_t kRetentionBytesMin = uint64_t{1} << 20;
inline constexpr uint64_t kRetentionBytesMax = uint64_t{1} << 44;  // 16 TiB.

}  // namespace walfeed::server

#endif  // WALFEED_SERVER_RETENTION_OPTIONS_H_
