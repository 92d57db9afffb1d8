#include "replication/backfill_database.h"

namespace walfeed::replication {

absl::string_view BackfillStateName(BackfillState state) {
  switch (state) {
    case BackfillState::kRunning:
      return "running";
    case BackfillState::kDone:
      return "done";
    case BackfillState::kCancelled:
      return "cancelled";
    case BackfillState::kFailed:
      return "failed";
  }
  return "running";
}

}  // namespace walfeed::replication
