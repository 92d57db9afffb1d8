// Reads what GetStatus shows about a stream's slot (SlotReport, start_plan.h) over a
// short SQL connection (status is rare; holding a connection per stream for it is not
// worth it).
#ifndef WALFEED_REPLICATION_PG_SLOT_REPORT_H_
#define WALFEED_REPLICATION_PG_SLOT_REPORT_H_

#include <optional>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "replication/lsn.h"
#include "replication/pg/slot_guard.h"

namespace walfeed::replication::pg {

absl::StatusOr<SlotReport> ReadSlotReport(absl::string_view conninfo,
                                          absl::string_view slot_name);

}  // namespace walfeed::replication::pg

#endif  // WALFEED_REPLICATION_PG_SLOT_REPORT_H_
