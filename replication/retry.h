// Error classes and retry delays shared by everything that talks to PostgreSQL.
//
// Errors are classified once, where they are produced, into canonical codes:
//   transient  Unavailable, Aborted, DeadlineExceeded, ResourceExhausted: the
//              connection dropped, the server is restarting, the slot is briefly in
//              use by a process that is going away. Retried with backoff.
//   definite   everything else (slot missing or lost, publication missing, bad
//              configuration, protocol violations): retrying cannot help, so the
//              stream stops with a message that names the remedy.
// "Transient unless proven definite" is the rule for unknown server errors, and
// the libpq adapter maps SQLSTATEs accordingly.
#ifndef WALFEED_REPLICATION_RETRY_H_
#define WALFEED_REPLICATION_RETRY_H_

#include <cstdint>

#include "absl/status/status.h"
#include "absl/time/time.h"

namespace walfeed::replication {

bool IsTransient(const absl::Status& status);

// Capped exponential backoff with "decorrelated jitter": each delay is uniform in
// [base, 3 * previous], capped. Spreads reconnect storms without synchronizing
// clients. The random source is injected so tests are deterministic.
class Backoff {
 public:
  Backoff(absl::Duration base, absl::Duration cap, uint64_t seed);

  absl::Duration Next();
  void Reset() { previous_ = base_; }

 private:
  uint64_t NextRandom();  // splitmix64: small, seedable, good enough for jitter.

  absl::Duration base_;
  absl::Duration cap_;
  absl::Duration previous_;
  uint64_t state_;
};

}  // namespace walfeed::replication

#endif  // WALFEED_REPLICATION_RETRY_H_
