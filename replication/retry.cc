#include "replication/retry.h"

#include <algorithm>

namespace walfeed::replication {

bool IsTransient(const absl::Status& status) {
  switch (status.code()) {
    case absl::StatusCode::kUnavailable:
    case absl::StatusCode::kAborted:
    case absl::StatusCode::kDeadlineExceeded:
    case absl::StatusCode::kResourceExhausted:
      return true;
    default:
      return false;
  }
}

Backoff::Backoff(absl::Duration base, absl::Duration cap, uint64_t seed)
    : base_(base), cap_(cap), previous_(base), state_(seed) {}

uint64_t Backoff::NextRandom() {
  uint64_t z = (state_ += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

absl::Duration Backoff::Next() {
  const int64_t low = absl::ToInt64Microseconds(base_);
  const int64_t high = std::max(low, absl::ToInt64Microseconds(previous_) * 3);
  const uint64_t span = static_cast<uint64_t>(high - low) + 1;
  const int64_t pick = low + static_cast<int64_t>(NextRandom() % span);
  previous_ = std::min(cap_, absl::Microseconds(pick));
  return previous_;
}

}  // namespace walfeed::replication
