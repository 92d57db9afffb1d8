// Slot-loss scenarios, each on a PostgreSQL of its own (they destroy the slot):
//   dropped      the slot is dropped from outside while a consumer streams;
//   invalidated  max_slot_wal_keep_size lets PostgreSQL remove WAL the slot
//                still needs while walfeed-server is down.
// Each proves: live and new subscribers get DATA_LOSS whose message names the
// slot and the remedy, no event committed after the loss is ever delivered (the
// gap is never silently skipped over), and walfeed never recreates the slot.
#ifndef WALFEED_TESTS_CHAOS_SLOT_LOSS_H_
#define WALFEED_TESTS_CHAOS_SLOT_LOSS_H_

#include <cstdint>
#include <string>
#include <vector>

namespace walfeed::chaos {

// Runs both scenarios with logs under `dir`; returns the failures (empty: proven).
std::vector<std::string> RunSlotLossScenarios(uint64_t seed, const std::string& dir);

}  // namespace walfeed::chaos

#endif  // WALFEED_TESTS_CHAOS_SLOT_LOSS_H_
