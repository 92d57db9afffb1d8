// Verify: the end-of-run proof over the writer's ledger and every consumer
// process's delivery log.
//
// For each consumer name (all its processes together):
//   lost        every committed change was delivered (by signature);
//   phantom     nothing was delivered that was not committed;
//   identical   a redelivered id has the first delivery's payload hash, and one
//               id is one change for every consumer (ids are deterministic);
//   order       within a session ids strictly increase and all lie after the
//               session's start_after (its Started frame's "events start after");
//   acked-once  a session's start_after covers every ack the server confirmed
//               before that session was asked for (ack records of any process of
//               the consumer older than the session's process start or retry), so
//               redelivery is only ever of events not yet acked at the fault;
//   window      the redelivered events of one session are at most the
//               consumer's unacked window;
//   ends        each process ended OK (stopped), ABORTED (taken over) or was
//               killed by the verifier.
// Across the ledger: the writer's commit order is the ids' order.
#ifndef WALFEED_TESTS_CHAOS_VERIFIER_H_
#define WALFEED_TESTS_CHAOS_VERIFIER_H_

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "tests/chaos/change_writer.h"

namespace walfeed::chaos {

struct ConsumerLogs {
  std::string name;
  uint32_t window = 0;             // max_unacked_events of its sessions.
  std::vector<std::string> paths;  // One per process, in start order.
  std::vector<bool> killed;        // Per path: the verifier SIGKILLed it.
};

struct ConsumerFigures {
  uint64_t delivered = 0;   // E records.
  uint64_t distinct = 0;    // Distinct ids.
  uint64_t duplicates = 0;  // Deliveries of an id delivered before.
  uint64_t largest_window = 0;
  uint64_t sessions = 0;
  uint64_t lost = 0;
  uint64_t acks = 0;
  // Sessions whose Started frame reported a checkpoint past their start_after.
  // Not a violation: an ack of the superseded session landed between the new
  // Subscribe (which fixed the start) and its Started frame (which reports the
  // checkpoint of that moment). The events between were unacked when the
  // session was asked for, so they come again.
  uint64_t started_below_checkpoint = 0;
  // Per session: when it started (mono ns) and how many events it redelivered,
  // so the runner can attribute redelivery to the fault before it.
  std::vector<std::pair<int64_t, uint64_t>> session_duplicates;
};

struct Verdict {
  uint64_t committed_changes = 0;
  std::map<std::string, ConsumerFigures> consumers;
  std::vector<std::string> violations;  // Empty: proven.
};

Verdict Verify(const std::vector<CommittedTxn>& ledger, const std::vector<ConsumerLogs>& logs);

}  // namespace walfeed::chaos

#endif  // WALFEED_TESTS_CHAOS_VERIFIER_H_
