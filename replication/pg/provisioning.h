// Preflight checks and provisioning of the slot and publications a stream needs.
//
// Preflight() inspects the server over an ordinary SQL connection (or the
// caller's walsender, see InspectForProvision) and turns every condition that
// would make streaming fail, or fail later in a confusing way, into one
// definite Status whose message names the fix: wal_level, the role's
// REPLICATION attribute, a slot that is unusable (wrong plugin, temporary,
// two-phase, in another database, invalidated), a slot held by another process
// (transient), missing objects, and exhausted max_replication_slots /
// max_wal_senders. What is merely risky (tables whose UPDATE/DELETE will fail on
// the primary for lack of a replica identity, config tables an existing
// publication does not cover) becomes a warning in the report.
//
// Provision() creates what is missing when the config allows it: publications
// first, then the slot, because pgoutput looks publications up as of each
// decoded change and cannot decode changes that precede them. It never alters,
// drops or recreates an existing publication or slot, and it tolerates another
// process creating the same objects concurrently. Neither function logs; the
// caller logs the report and the error.
#ifndef WALFEED_REPLICATION_PG_PROVISIONING_H_
#define WALFEED_REPLICATION_PG_PROVISIONING_H_

#include <functional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "replication/lsn.h"
#include "replication/pg/pg_conn.h"
#include "replication/stream_config.h"

namespace walfeed::replication::pg {

struct PreflightReport {
  int server_version_num = 0;  // e.g. 150020
  std::string server_version;  // server_version as the server prints it

  bool slot_exists = false;
  // The existing slot's positions (kInvalid when the slot is missing or the
  // server shows NULL) and wal_status ("reserved", "extended", "unreserved";
  // empty when missing or NULL). A "lost" slot is an error, never reported here.
  Lsn confirmed_flush_lsn;
  Lsn restart_lsn;
  std::string wal_status;

  // The configured publications split by whether they exist, in config order.
  std::vector<std::string> existing_publications;
  std::vector<std::string> missing_publications;
  bool publications_exist() const { return missing_publications.empty(); }

  // Conditions that do not stop streaming but that an operator should fix.
  std::vector<std::string> warnings;
  // The table warnings (tables listed but not published, tables whose UPDATE or
  // DELETE would fail for want of a replica identity) were not looked for: see
  // TableChecks. PublishedTableWarnings() (table_checks.h) finds them.
  bool table_checks_deferred = false;
};

// Whether InspectForProvision() runs the queries behind the table warnings.
// They decide nothing (every publication exists, so nothing is created) and on
// a new backend they are the slowest part of the preflight (a cold catalog
// cache: about 8 of its 13 ms on a local server), so a stream's start-up runs
// them apart (kDeferred): after the preflight on its walsender, beside the
// lead and the checkpoint store (StartReads), or where that connection is not
// kept, on one of their own after streaming has begun. With a publication
// missing they always run.
enum class TableChecks { kNow, kDeferred };

// Validates `config`, connects with config.conninfo and checks the server.
// Errors (each message names the remedy):
//   InvalidArgument      config.Validate() failed
//   FailedPrecondition   server older than PostgreSQL 15; wal_level != logical; the
//                        slot is physical, in another database, not pgoutput,
//                        temporary, or two-phase
//   PermissionDenied     the role has neither REPLICATION nor SUPERUSER
//   DataLoss             the slot was invalidated (wal_status = lost)
//   Unavailable          the slot is active in another process (retry later);
//                        connection failures
//   NotFound             a publication or the slot is missing and
//                        create_missing is false (the message has the command
//                        to run); a table listed for a publication to be created
//                        does not exist
//   ResourceExhausted    the slot must be created but max_replication_slots are
//                        all used; max_wal_senders are all used
absl::StatusOr<PreflightReport> Preflight(const StreamConfig& config);

struct ProvisionResult {
  bool created_publication = false;  // At least one publication was created.
  bool created_slot = false;
  // The new slot's consistent_point (its first confirmed_flush_lsn); kInvalid
  // when the slot already existed.
  Lsn consistent_point;
  // With SnapshotSteps: the created slot's snapshot was imported; otherwise
  // why not (snapshot_error).
  bool imported_snapshot = false;
  std::string snapshot_error;
  // The state after provisioning, including warnings.
  PreflightReport report;
};

// What Provision does around creating the slot for an initial snapshot.
struct SnapshotSteps {
  // Before the slot is created: record durably what the snapshot will read,
  // so that after a crash right after the slot exists it is still read (with
  // watermarks). An error stops Provision before the slot is created.
  std::function<absl::Status()> before_slot;
  // While the new slot's exported snapshot can be imported: import it. An
  // error is reported (ProvisionResult::snapshot_error), not returned: the
  // slot exists, and the snapshot's tables are read with watermarks instead.
  std::function<absl::Status(const std::string& snapshot_name)> import;
};

// Runs Preflight(); when config.create_missing, creates each missing publication
// (FOR TABLE config.tables, or FOR ALL TABLES), then the slot with
// CREATE_REPLICATION_SLOT ... LOGICAL pgoutput on a replication connection:
// (SNAPSHOT 'export') with `snapshot` (its steps run as described above),
// (SNAPSHOT 'nothing') without. Creating the slot waits until transactions
// already running on the server have finished. Calling it again creates
// nothing. Errors are Preflight()'s plus the server's refusals (e.g.
// PermissionDenied when the role may not create the publication).
absl::StatusOr<ProvisionResult> Provision(const StreamConfig& config,
                                          const SnapshotSteps* snapshot = nullptr);

// Provision() in two steps, so that its read-only half can run while other
// start-up work is in flight (PrepareStream): InspectForProvision() validates
// `config`, connects and runs Preflight()'s checks (no writes); Provision() on
// its result creates what is missing over the same connection. Errors are
// Preflight()'s and Provision()'s respectively.
struct Inspected {
  PgConnPtr conn;  // Null when inspected on the caller's walsender.
  PreflightReport report;
  // The application_name the slot's creation runs as: the slot is active on
  // that walsender while it waits for a consistent point, and a new leader
  // ends a walsender on its slot only under the stream's name
  // (StreamWalsenderName, which the stream's start sets).
  std::string walsender_name = kDefaultApplicationName;
};
// `walsender`: a logical replication connection (replication=database) that the
// caller holds and will stream on, for a slot that exists. The checks then run
// on it, sparing a connection (a backend start) of their own, and count it
// among the WAL senders in use, so no further one is needed. It stays the
// caller's; Provision() connects anew if it must create a publication.
absl::StatusOr<Inspected> InspectForProvision(const StreamConfig& config,
                                              TableChecks table_checks = TableChecks::kNow,
                                              PGconn* walsender = nullptr);
absl::StatusOr<ProvisionResult> Provision(const StreamConfig& config, Inspected inspected,
                                          const SnapshotSteps* snapshot = nullptr);

// The statement that creates `publication` as walfeed would (FOR TABLE the
// config's tables, or FOR ALL TABLES), identifiers quoted. `config` must be valid.
std::string CreatePublicationSql(const StreamConfig& config, absl::string_view publication);
// The SQL statement an operator can run to create the slot as walfeed would.
std::string CreateSlotSql(absl::string_view slot_name);

namespace provisioning_internal {

// Test seams for races: each hook, when set, runs just before the corresponding
// CREATE so a test can create the object first, as a concurrent process would.
struct Hooks {
  std::function<void()> before_create_publications;
  std::function<void()> before_create_slot;
};
absl::StatusOr<ProvisionResult> Provision(const StreamConfig& config, const Hooks& hooks,
                                          const SnapshotSteps* snapshot = nullptr);
absl::StatusOr<ProvisionResult> Provision(const StreamConfig& config, Inspected inspected,
                                          const Hooks& hooks,
                                          const SnapshotSteps* snapshot = nullptr);

}  // namespace provisioning_internal

}  // namespace walfeed::replication::pg

#endif  // WALFEED_REPLICATION_PG_PROVISIONING_H_
