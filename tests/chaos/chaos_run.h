// RunChaos: one randomized pass. A throwaway PostgreSQL, the real walfeed-server
// behind a fault-injecting TCP proxy (and reaching PostgreSQL through another,
// for the db faults: db_faults.h), a writer, three consumer children ("fast"
// acks often, "slow" acks late and lags, "lazy" acks every few seconds with a
// large window, so its backlog spills to disk), then `points` faults drawn from a PRNG
// seeded with `seed`: the same seed draws the same faults, moments, outages and
// ack cadences. After each fault the run waits (with a deadline) until every
// consumer has caught up with a fresh marker, so a fault that leaves the stream
// stuck is a failure, not a hang. At the end everything drains and Verify proves
// the delivery properties.
#ifndef WALFEED_TESTS_CHAOS_CHAOS_RUN_H_
#define WALFEED_TESTS_CHAOS_CHAOS_RUN_H_

#include <cstdint>
#include <string>
#include <vector>

#include "tests/chaos/fault_kind.h"

namespace walfeed::chaos {

struct RunOptions {
  int points = 30;
  uint64_t seed = 0;
  std::vector<FaultKind> faults;  // Empty: all.
  bool slot_loss = true;          // Also run the slot-loss scenarios.
  std::string workdir;            // Empty: a fresh directory under $TMPDIR or /tmp.
  bool keep = false;              // Keep the workdir (logs) even when proven.
};

// Prints progress and the report; returns 0 when every check held.
int RunChaos(const RunOptions& options);

}  // namespace walfeed::chaos

#endif  // WALFEED_TESTS_CHAOS_CHAOS_RUN_H_
