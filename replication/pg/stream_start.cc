#include "replication/pg/stream_start.h"

#include <string>
#include <system_error>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "replication/error_reason.h"
#include "replication/pg/pg_conn.h"
#include "replication/pg/table_checks.h"
#include "replication/sql_text.h"
#include "replication/status_macros.h"

namespace walfeed::replication::pg {
namespace {

// The slot and the cluster it is in, read over `conn`, a replication
// connection (IDENTIFY_SYSTEM needs one).
absl::StatusOr<SlotCheck> ReadSlotCheck(PGconn* conn, const StreamConfig& config,
                                        absl::string_view checkpoint_schema) {
  SlotCheck check{config.name, config.slot_name, std::string(checkpoint_schema), 0, {}};
  WALFEED_ASSIGN_OR_RETURN(check.system_identifier, ReadSystemIdentifier(conn));
  WALFEED_ASSIGN_OR_RETURN(check.slot, ReadSlot(conn, config.slot_name));
  return check;
}

// The same over a short-lived connection, closed again so it holds no walsender.
absl::StatusOr<SlotCheck> ReadSlotCheck(const StreamConfig& config,
                                        absl::string_view checkpoint_schema) {
  WALFEED_ASSIGN_OR_RETURN(PgConnPtr conn, Connect(config.conninfo, ConnectionKind::kReplication));
  return ReadSlotCheck(conn.get(), config, checkpoint_schema);
}

// The table warnings the preflight deferred, looked for on its connection
// after it: a connection of their own, once streaming, would cost a backend
// start (tens of milliseconds of a loaded server's CPU, more than the checks),
// while here they overlap the lead and the checkpoint store's opening. They
// decide nothing, so a failure is one more warning, not a failed start.
void AddTableWarnings(const SqlChannel& conn, const StreamConfig& config,
                      PreflightReport* report) {
  absl::StatusOr<std::vector<std::string>> warnings = PublishedTableWarnings(conn, config);
  report->table_checks_deferred = false;
  if (!warnings.ok()) {
    report->warnings.push_back(TableChecksFailedWarning(warnings.status()));
    return;
  }
  report->warnings.insert(report->warnings.end(), warnings->begin(), warnings->end());
}

// Refuses a slot another stream of the checkpoint store is bound to: each
// stream confirms the slot for its own consumers, so two streams on one slot
// confirm each other's events away.
absl::Status CheckSlotNotShared(const StreamConfig& config, GroupCommitter* committer,
                                absl::string_view checkpoint_schema,
                                const SlotIdentity& identity) {
  WALFEED_ASSIGN_OR_RETURN(
      std::vector<std::string> others,
      committer->OtherStreamsOnSlot(config.name, config.slot_name, identity.system_identifier));
  if (others.empty()) return absl::OkStatus();
  const std::string schema = QuoteIdentifier(checkpoint_schema);
  const std::string other = QuoteLiteral(others.front());
  return reason::WithReason(
      absl::FailedPreconditionError(absl::StrCat(
          "slot \"", config.slot_name, "\" is already bound to stream \"", others.front(),
          "\" in checkpoint schema ", schema,
          ": two streams reading one slot would confirm each other's events away, so stream \"",
          config.name, "\" does not start. Give it a slot of its own (its slot setting); or, if "
          "stream \"", others.front(), "\" is gone for good (dropped, or renamed to \"",
          config.name, "\" and its consumers may start afresh), forget it: DELETE FROM ", schema,
          ".consumer_checkpoints WHERE stream = ", other, "; DELETE FROM ", schema,
          ".stream_checkpoints WHERE stream = ", other, ";")),
      reason::kSlotShared,
      {{"stream", config.name}, {"slot", config.slot_name}, {"other_stream", others.front()}});
}

}  // namespace

StartReads StartReads::Begin(const StreamConfig& config, std::string checkpoint_schema) {
  StartReads reads;
  if (!config.Validate().ok()) return reads;
  reads.abandoned_ = std::make_shared<std::atomic<bool>>(false);
  auto read = [config, schema = std::move(checkpoint_schema), abandoned = reads.abandoned_] {
    Results results{absl::UnknownError("not read"),
                    absl::CancelledError("not inspected: the slot could not be read"), nullptr};
    absl::StatusOr<std::unique_ptr<PgReplicationConnection>> conn =
        PgReplicationConnection::Connect(config.conninfo,
                                         StreamWalsenderName(schema, config.name));
    if (!conn.ok()) {
      results.slot = conn.status();
      return results;
    }
    results.slot = ReadSlotCheck((*conn)->pg(), config, schema);
    if (!results.slot.ok()) return results;
    if (abandoned->load()) {
      results.inspection = absl::CancelledError("not inspected: start-up was abandoned");
    } else if (results.slot->slot) {
      // Kept, and the preflight runs on it: no connection of its own.
      results.inspection = InspectForProvision(config, TableChecks::kDeferred, (*conn)->pg());
      if (results.inspection.ok() && results.inspection->report.table_checks_deferred &&
          !abandoned->load()) {
        AddTableWarnings(SqlChannel((*conn)->pg(), ConnectionKind::kReplication), config,
                         &results.inspection->report);
      }
      results.walsender = *std::move(conn);
    } else {
      conn->reset();  // Not kept: closed before the preflight counts the WAL senders.
      results.inspection = InspectForProvision(config, TableChecks::kDeferred);
    }
    return results;
  };
  try {
    reads.results_ = std::async(std::launch::async, read);  // A copy: `read` may run below.
  } catch (const std::system_error&) {
    // No thread to be had: the reads run in Take(), in sequence, as they did
    // before they overlapped anything.
    reads.results_ = std::async(std::launch::deferred, std::move(read));
  }
  return reads;
}

StartReads::~StartReads() {
  if (abandoned_) abandoned_->store(true);
}

absl::StatusOr<PreparedStream> PrepareStream(const StreamConfig& config,
                                             GroupCommitter* committer,
                                             absl::string_view checkpoint_schema,
                                             const SnapshotSteps* snapshot) {
  // An invalid config begins no reads; the overload reports it.
  return PrepareStream(config, committer, checkpoint_schema,
                       StartReads::Begin(config, std::string(checkpoint_schema)), snapshot);
}

absl::StatusOr<PreparedStream> PrepareStream(const StreamConfig& config,
                                             GroupCommitter* committer,
                                             absl::string_view checkpoint_schema,
                                             StartReads reads, const SnapshotSteps* snapshot) {
  WALFEED_RETURN_IF_ERROR(config.Validate());
  // Errors in the order of the sequence in stream_start.h, whichever read
  // finished first.
  WALFEED_ASSIGN_OR_RETURN(StreamCheckpoint stored, committer->Load(config.name));
  StartReads::Results read = reads.Take();
  WALFEED_ASSIGN_OR_RETURN(SlotCheck before, std::move(read.slot));
  if (!before.slot && (stored.slot_bound() || stored.confirmed_lsn.valid())) {
    // Fails with the dropped-slot error; Provision must not run first.
    WALFEED_RETURN_IF_ERROR(PlanStart(before, stored).status());
  }
  if (before.slot && before.slot->wal_status == "lost") {
    // The same: PlanStart's error names every recovery step (Provision's preflight
    // would only say to drop the slot, and the stored position would then fail the
    // next start as a dropped slot).
    WALFEED_RETURN_IF_ERROR(PlanStart(before, stored).status());
  }
  PreparedStream prepared;
  WALFEED_ASSIGN_OR_RETURN(Inspected inspected, std::move(read.inspection));
  inspected.walsender_name = StreamWalsenderName(checkpoint_schema, config.name);
  WALFEED_ASSIGN_OR_RETURN(prepared.provisioned,
                           Provision(config, std::move(inspected), snapshot));
  // Read the slot again only if Provision created it: otherwise `before` is what
  // a second read would say (a replication connection saved at every start). A
  // slot dropped or replaced after this read is still caught: the reader checks
  // the slot's identity when it starts streaming (ReaderOptions.expected_slot).
  if (prepared.provisioned.created_slot || !before.slot) {
    WALFEED_ASSIGN_OR_RETURN(before, ReadSlotCheck(config, checkpoint_schema));
  }
  WALFEED_ASSIGN_OR_RETURN(prepared.plan, PlanStart(before, stored));
  WALFEED_RETURN_IF_ERROR(
      CheckSlotNotShared(config, committer, checkpoint_schema, prepared.plan.identity));
  if (prepared.plan.bind) {
    WALFEED_RETURN_IF_ERROR(committer->BindSlot(config.name, config.slot_name,
                                                prepared.plan.identity, prepared.plan.start));
  }
  if (read.walsender != nullptr && !prepared.provisioned.created_slot) {
    prepared.walsender = std::make_shared<WalSenderHandoff>(std::move(read.walsender));
  }
  return prepared;
}

ReaderOptions ReaderOptionsFor(const StreamConfig& config, const PreparedStream& prepared,
                               absl::string_view checkpoint_schema) {
  ReaderOptions options;
  options.stream_name = config.name;
  options.conninfo = config.conninfo;
  options.walsender_name = StreamWalsenderName(checkpoint_schema, config.name);
  options.slot_name = config.slot_name;
  options.publication_names = config.publication_names;
  options.excluded_schema = std::string(checkpoint_schema);
  options.expected_slot = prepared.plan.identity;
  options.deliver_after = prepared.plan.deliver_after;
  options.first_connection = prepared.walsender;
  return options;
}

}  // namespace walfeed::replication::pg
