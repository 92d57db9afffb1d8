// ExportedSnapshot: the snapshot a slot exported when walfeed created it, kept
// alive for the initial snapshot's chunk reads.
//
// CREATE_REPLICATION_SLOT ... (SNAPSHOT 'export') returns a snapshot that sees
// exactly the transactions committed before the slot's consistent point
// (postgres-replication.md §5.1): every later one is in the stream. It stays
// importable only while the replication connection that made it is idle, so
// Import() runs right there: a plain connection opens a REPEATABLE READ READ
// ONLY transaction with SET TRANSACTION SNAPSHOT, and keeps that transaction
// (and with it the snapshot) open until Release(). While it is open, VACUUM
// cannot remove rows the snapshot may still see: release it as soon as the
// initial snapshot is read.
//
// Lost with the process (or the connection): the rest of the initial snapshot
// is then read with watermarks, which needs no exported snapshot.
//
// Thread-safe; shared by the stream source (which imports) and the backfill
// databases (which read).
#ifndef WALFEED_REPLICATION_PG_EXPORTED_SNAPSHOT_H_
#define WALFEED_REPLICATION_PG_EXPORTED_SNAPSHOT_H_

#include <optional>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "replication/pg/pg_conn.h"

namespace walfeed::replication::pg {

class ExportedSnapshot {
 public:
  // Imports snapshot `name` on a new connection to `conninfo` (replacing any
  // held before). Must run before the exporting connection does anything else.
  absl::Status Import(const std::string& conninfo, const std::string& name)
      ABSL_LOCKS_EXCLUDED(mu_);
  // Runs `sql` inside the snapshot's transaction. FailedPrecondition when no
  // snapshot is held; any error ends it (the transaction is aborted).
  absl::StatusOr<PgResultPtr> Query(const std::string& sql,
                                    const std::vector<std::optional<std::string>>& params)
      ABSL_LOCKS_EXCLUDED(mu_);
  bool held() const ABSL_LOCKS_EXCLUDED(mu_);
  void Release() ABSL_LOCKS_EXCLUDED(mu_);

 private:
  mutable absl::Mutex mu_;
  PgConnPtr conn_ ABSL_GUARDED_BY(mu_);
};

}  // namespace walfeed::replication::pg

#endif  // WALFEED_REPLICATION_PG_EXPORTED_SNAPSHOT_H_
