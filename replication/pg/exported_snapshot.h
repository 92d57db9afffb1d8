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
// Several connections may import it (snapshot_connections), so that the
// initial snapshot reads several tables at once, each under the very same
// snapshot.
//
// Lost with the process (or the connection): the rest of the initial snapshot
// is then read with watermarks, which needs no exported snapshot.
//
// Thread-safe; shared by the stream source (which imports) and the backfill
// databases (which read, from several threads at once).
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
  // Imports snapshot `name` on up to `connections` new connections to
  // `conninfo` (replacing any held before). Must run before the exporting
  // connection does anything else. An error when not even one imported; when
  // some did, the others' failure is only logged (fewer tables at once).
  absl::Status Import(const std::string& conninfo, const std::string& name, int connections = 1)
      ABSL_LOCKS_EXCLUDED(mu_);
  // Runs `sql` inside the snapshot, on a connection no other query uses (waiting
  // for one while all are busy). FailedPrecondition when none is held; an error
  // ends the snapshot on that connection (its transaction is aborted).
  absl::StatusOr<PgResultPtr> Query(const std::string& sql,
                                    const std::vector<std::optional<std::string>>& params)
      ABSL_LOCKS_EXCLUDED(mu_);
  bool held() const ABSL_LOCKS_EXCLUDED(mu_);
  // How many connections still hold it.
  int connections() const ABSL_LOCKS_EXCLUDED(mu_);
  // Closes every connection (after the queries running on them finish).
  void Release() ABSL_LOCKS_EXCLUDED(mu_);

 private:
  struct Holder {
    PgConnPtr conn;  // Null once its snapshot is gone.
    bool busy = false;
  };
  bool AnyFreeOrNoneHeld() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  bool NoneBusy() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  mutable absl::Mutex mu_;
  std::vector<Holder> holders_ ABSL_GUARDED_BY(mu_);
};

}  // namespace walfeed::replication::pg

#endif  // WALFEED_REPLICATION_PG_EXPORTED_SNAPSHOT_H_
