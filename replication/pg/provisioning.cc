// Preflight and provisioning: reads the server's settings, the role, the slot
// and the publications with parameterized catalog queries, and creates missing
// publications and the slot with quoted identifiers. Facts relied on are those of
// the design notes on PostgreSQL logical replication (slot creation, settings,
// slot invalidation, replica identity, publications).
#include "replication/pg/provisioning.h"

#include <optional>
#include <utility>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "replication/pg/pg_conn.h"
#include "replication/pg/table_checks.h"
#include "replication/sql_text.h"
#include "replication/status_macros.h"

namespace walfeed::replication::pg {
namespace {

constexpr int kMinServerVersionNum = 150000;
constexpr char kDuplicateObject[] = "42710";
// Two sessions creating the same publication at once: the later one waits for
// the earlier to commit and then hits pg_publication's unique index.
constexpr char kUniqueViolation[] = "23505";

// Settings and the session role, in one round trip. session_user is the role
// that logged in, which is the one a replication connection is checked against.
constexpr char kServerQuery[] =
    "SELECT current_setting('server_version_num'), current_setting('server_version'), "
    "current_setting('wal_level'), current_setting('max_replication_slots'), "
    "current_setting('max_wal_senders'), r.rolname, r.rolsuper, r.rolreplication, "
    "current_database(), pg_backend_pid() "
    "FROM pg_roles r WHERE r.rolname = session_user";

constexpr char kSlotQuery[] =
    "SELECT slot_type, database, plugin, temporary, two_phase, active_pid, "
    "confirmed_flush_lsn, restart_lsn, wal_status "
    "FROM pg_replication_slots WHERE slot_name = $1";

// pg_stat_replication lists every walsender that holds one of the
// max_wal_senders slots, including connected ones that are not streaming yet.
constexpr char kCapacityQuery[] =
    "SELECT (SELECT count(*) FROM pg_replication_slots), "
    "(SELECT count(*) FROM pg_stat_replication)";


struct ServerState {
  int version_num = 0;
  std::string version;
  std::string wal_level;
  int64_t max_replication_slots = 0;
  int64_t max_wal_senders = 0;
  std::string role;
  bool superuser = false;
  bool replication = false;
  std::string database;
  std::string backend_pid;
};

int64_t Int(const PGresult* result, int row, int column) {
  int64_t value = 0;
  if (!absl::SimpleAtoi(TextValue(result, row, column), &value)) return 0;
  return value;
}

// An LSN column; NULL (or anything unparsable) is kInvalid.
Lsn LsnValue(const PGresult* result, int row, int column) {
  std::optional<std::string> text = Value(result, row, column);
  if (!text.has_value()) return Lsn::kInvalid;
  absl::StatusOr<Lsn> lsn = Lsn::Parse(*text);
  return lsn.ok() ? *lsn : Lsn::kInvalid;
}

std::string Quoted(absl::string_view text) { return QuoteIdentifier(text); }

absl::StatusOr<ServerState> ReadServerState(const SqlChannel& conn) {
  WALFEED_ASSIGN_OR_RETURN(PgResultPtr result, Exec(conn, kServerQuery));
  if (PQntuples(result.get()) != 1) {
    return absl::FailedPreconditionError(
        "cannot find the session role in pg_roles; is this a PostgreSQL server?");
  }
  const PGresult* r = result.get();
  ServerState state;
  state.version_num = static_cast<int>(Int(r, 0, 0));
  state.version = TextValue(r, 0, 1);
  state.wal_level = TextValue(r, 0, 2);
  state.max_replication_slots = Int(r, 0, 3);
  state.max_wal_senders = Int(r, 0, 4);
  state.role = TextValue(r, 0, 5);
  state.superuser = BoolValue(r, 0, 6);
  state.replication = BoolValue(r, 0, 7);
  state.database = TextValue(r, 0, 8);
  state.backend_pid = TextValue(r, 0, 9);
  return state;
}

absl::Status CheckServer(const ServerState& server) {
  if (server.version_num < kMinServerVersionNum) {
    return absl::FailedPreconditionError(absl::StrCat(
        "PostgreSQL ", server.version, " (server_version_num ", server.version_num,
        ") is not supported: walfeed needs PostgreSQL 15 or later; upgrade the server"));
  }
  if (server.wal_level != "logical") {
    return absl::FailedPreconditionError(
        absl::StrCat("wal_level is \"", server.wal_level,
                     "\" but logical decoding needs \"logical\": set wal_level = logical in "
                     "postgresql.conf and restart PostgreSQL"));
  }
  if (!server.superuser && !server.replication) {
    return absl::PermissionDeniedError(
        absl::StrCat("role ", Quoted(server.role),
                     " has neither the REPLICATION attribute nor SUPERUSER, so it cannot open a "
                     "replication connection: run ALTER ROLE ",
                     Quoted(server.role), " WITH REPLICATION"));
  }
  return absl::OkStatus();
}

// Checks an existing slot row; fills the report's slot fields when it is usable.
absl::Status CheckSlot(const PGresult* r, const StreamConfig& config, const ServerState& server,
                       PreflightReport* report) {
  const std::string slot = Quoted(config.slot_name);
  const std::string drop =
      absl::StrCat("SELECT pg_drop_replication_slot(", QuoteLiteral(config.slot_name), ")");
  const std::string type = TextValue(r, 0, 0);
  const std::string database = TextValue(r, 0, 1);
  const std::string plugin = TextValue(r, 0, 2);
  const std::optional<std::string> active_pid = Value(r, 0, 5);
  if (type != "logical") {
    return absl::FailedPreconditionError(
        absl::StrCat("replication slot ", slot, " is a ", type,
                     " slot but walfeed needs a logical pgoutput slot: set slot_name to "
                     "an unused name (walfeed can create it)"));
  }
  if (database != server.database) {
    return absl::FailedPreconditionError(
        absl::StrCat("replication slot ", slot, " belongs to database ", Quoted(database),
                     " but conninfo connects to ", Quoted(server.database),
                     "; a logical slot can only be read from its own database: fix the dbname in "
                     "conninfo or set slot_name to an unused name"));
  }
  if (plugin != "pgoutput") {
    return absl::FailedPreconditionError(absl::StrCat(
        "replication slot ", slot, " uses output plugin \"", plugin,
        "\" but walfeed needs \"pgoutput\": set slot_name to an unused name so walfeed "
        "creates a new slot, or drop this slot if nothing else reads it (",
        drop, ")"));
  }
  if (BoolValue(r, 0, 3)) {
    return absl::FailedPreconditionError(absl::StrCat(
        "replication slot ", slot, " is temporary (owned by process ", active_pid.value_or("?"),
        "; it vanishes when that session ends, and with it the stream position): set "
        "slot_name to an unused name so walfeed creates a permanent slot"));
  }
  if (BoolValue(r, 0, 4)) {
    return absl::FailedPreconditionError(absl::StrCat(
        "replication slot ", slot,
        " was created with two-phase decoding (two_phase = true), which walfeed does "
        "not support: set slot_name to an unused name so walfeed creates a new slot, or "
        "drop this slot if nothing else reads it (",
        drop, ")"));
  }
  const Lsn confirmed = LsnValue(r, 0, 6);
  const std::string wal_status = TextValue(r, 0, 8);
  if (wal_status == "lost") {
    return absl::DataLossError(absl::StrCat(
        "replication slot ", slot,
        " has been invalidated (wal_status = lost): the server removed WAL the slot "
        "still needed (see max_slot_wal_keep_size), so the changes committed since its "
        "confirmed_flush_lsn ",
        confirmed.ToString(), " are gone and the slot cannot be read. Drop the slot (", drop,
        "), let walfeed recreate it, and re-snapshot the published tables"));
  }
  if (active_pid.has_value() && *active_pid != server.backend_pid) {
    return absl::UnavailableError(
        absl::StrCat("replication slot ", slot, " is in use by process ", *active_pid,
                     "; a slot serves one consumer at a time: stop the other consumer (or run "
                     "SELECT pg_terminate_backend(",
                     *active_pid, ")); walfeed retries until the slot is free"));
  }
  report->slot_exists = true;
  report->confirmed_flush_lsn = confirmed;
  report->restart_lsn = LsnValue(r, 0, 7);
  report->wal_status = wal_status;
  return absl::OkStatus();
}

// pgoutput (PostgreSQL 15) errors on a change that precedes a publication it
// was asked for, so a slot created before its publications may not progress.
std::string SlotOlderThanPublicationsWarning(absl::string_view slot_name,
                                             const std::vector<std::string>& publications) {
  return absl::StrCat(
      "replication slot ", Quoted(slot_name), " existed before publication(s) ",
      QuoteIdentifierList(publications),
      ": PostgreSQL 15 cannot decode changes the slot holds from before a publication "
      "existed (error: publication ... does not exist); if streaming fails that way, drop "
      "and recreate the slot and re-snapshot");
}

// The checks behind Preflight() on an open connection. `check_capacity`
// says whether to check that a slot and a WAL sender are free; Provision()
// skips that after creating the slot, when its own walsender may still be
// exiting. `table_checks` kDeferred leaves out the table warnings' queries
// when every publication exists (report.table_checks_deferred). On a
// walsender (InspectForProvision's `walsender`) the caller holds the WAL sender
// it will stream on, counted among those in use: only a free slot is checked.
absl::StatusOr<PreflightReport> Inspect(const SqlChannel& conn, const StreamConfig& config,
                                        bool check_capacity, TableChecks table_checks) {
  const bool walsender_held = conn.kind == ConnectionKind::kReplication;
  WALFEED_ASSIGN_OR_RETURN(const ServerState server, ReadServerState(conn));
  WALFEED_RETURN_IF_ERROR(CheckServer(server));
  PreflightReport report;
  report.server_version_num = server.version_num;
  report.server_version = server.version;

  WALFEED_ASSIGN_OR_RETURN(PgResultPtr slot, Exec(conn, kSlotQuery, {config.slot_name}));
  if (PQntuples(slot.get()) == 1) {
    WALFEED_RETURN_IF_ERROR(CheckSlot(slot.get(), config, server, &report));
  }

  WALFEED_RETURN_IF_ERROR(FindPublications(conn, config, &report.existing_publications,
                                           &report.missing_publications));
  report.table_checks_deferred =
      table_checks == TableChecks::kDeferred && report.publications_exist();
  PublishedTables published;
  if (!report.table_checks_deferred) {
    WALFEED_RETURN_IF_ERROR(ReadPublishedTables(conn, report.existing_publications, &published));
  }

  if (!report.missing_publications.empty()) {
    if (!config.create_missing) {
      std::vector<std::string> commands;
      for (const std::string& publication : report.missing_publications) {
        commands.push_back(CreatePublicationSql(config, publication));
      }
      return absl::NotFoundError(absl::StrCat(
          report.missing_publications.size() == 1 ? "publication " : "publications ",
          QuoteIdentifierList(report.missing_publications), " not found in database ",
          Quoted(server.database), " and create_missing is false: create ",
          report.missing_publications.size() == 1 ? "it" : "them", " (before the slot) with: ",
          absl::StrJoin(commands, "; "), "; or set create_missing to true"));
    }
    WALFEED_RETURN_IF_ERROR(CheckTablesToPublish(conn, config, &published.unusable));
    if (report.slot_exists) {
      report.warnings.push_back(
          SlotOlderThanPublicationsWarning(config.slot_name, report.missing_publications));
    }
  }

  if (!report.slot_exists && !config.create_missing) {
    return absl::NotFoundError(
        absl::StrCat("replication slot ", Quoted(config.slot_name), " not found in database ",
                     Quoted(server.database),
                     " and create_missing is false: create it (after the publications) with: ",
                     CreateSlotSql(config.slot_name), "; or set create_missing to true"));
  }

  if (check_capacity) {
    WALFEED_ASSIGN_OR_RETURN(PgResultPtr capacity, Exec(conn, kCapacityQuery));
    const int64_t slots = Int(capacity.get(), 0, 0);
    const int64_t senders = Int(capacity.get(), 0, 1);
    if (!report.slot_exists && slots >= server.max_replication_slots) {
      return absl::ResourceExhaustedError(absl::StrCat(
          "cannot create replication slot ", Quoted(config.slot_name), ": ", slots,
          " slots exist and max_replication_slots = ", server.max_replication_slots,
          ": drop an unused slot (see pg_replication_slots) or raise max_replication_slots "
          "in postgresql.conf and restart PostgreSQL"));
    }
    // A held walsender covers streaming only when the slot exists: one about
    // to be created is created over a replication connection of its own.
    if (!(walsender_held && report.slot_exists) && senders >= server.max_wal_senders) {
      return absl::ResourceExhaustedError(absl::StrCat(
          "all WAL senders are in use (", senders,
          " replication connections, max_wal_senders = ", server.max_wal_senders,
          ") and streaming needs one: close an unused replication connection (see "
          "pg_stat_replication) or raise max_wal_senders in postgresql.conf and restart "
          "PostgreSQL"));
    }
  }

  if (!report.table_checks_deferred) {
    AppendTableWarnings(config, report.existing_publications, report.publications_exist(),
                        published, &report.warnings);
  }
  return report;
}

// Creates the slot on a replication connection; returns its consistent_point.
// With `snapshot`, the slot exports a snapshot, imported before the connection
// runs anything else (it is importable only until then).
absl::StatusOr<Lsn> CreateSlot(const StreamConfig& config, const SnapshotSteps* snapshot,
                               const std::string& walsender_name, ProvisionResult* result) {
  WALFEED_ASSIGN_OR_RETURN(
      PgConnPtr conn, Connect(config.conninfo, ConnectionKind::kReplication, walsender_name));
  // Never TEMPORARY (a reconnect would lose the position) and never TWO_PHASE
  // (permanent, and walfeed does not decode prepared transactions).
  WALFEED_ASSIGN_OR_RETURN(
      PgResultPtr created,
      ExecSimple(conn.get(), absl::StrCat("CREATE_REPLICATION_SLOT ", Quoted(config.slot_name),
                                          " LOGICAL pgoutput (SNAPSHOT '",
                                          snapshot != nullptr ? "export" : "nothing", "')")));
  std::optional<std::string> point = Value(created.get(), 0, 1);
  if (PQntuples(created.get()) != 1 || !point.has_value()) {
    return absl::InternalError(absl::StrCat(
        "CREATE_REPLICATION_SLOT for ", Quoted(config.slot_name), " returned no consistent_point"));
  }
  if (snapshot != nullptr) {
    std::optional<std::string> name = Value(created.get(), 0, 2);
    absl::Status imported = name ? snapshot->import(*name)
                                 : absl::InternalError("the slot exported no snapshot");
    result->imported_snapshot = imported.ok();
    if (!imported.ok()) result->snapshot_error = std::string(imported.message());
  }
  return Lsn::Parse(*point);
}

}  // namespace

std::string CreatePublicationSql(const StreamConfig& config, absl::string_view publication) {
  const std::vector<TableName> tables = ConfigTables(config);
  const std::string what =
      tables.empty() ? std::string("ALL TABLES")
                     : absl::StrCat("TABLE ", absl::StrJoin(tables, ", ",
                                                            [](std::string* out, const TableName& t) {
                                                              out->append(t.Quoted());
                                                            }));
  return absl::StrCat("CREATE PUBLICATION ", Quoted(publication), " FOR ", what,
                      config.publish_via_partition_root
                          ? " WITH (publish_via_partition_root = true)"
                          : "");
}

std::string CreateSlotSql(absl::string_view slot_name) {
  return absl::StrCat("SELECT pg_create_logical_replication_slot(", QuoteLiteral(slot_name),
                      ", 'pgoutput')");
}

absl::StatusOr<PreflightReport> Preflight(const StreamConfig& config) {
  WALFEED_RETURN_IF_ERROR(config.Validate());
  WALFEED_ASSIGN_OR_RETURN(PgConnPtr conn, Connect(config.conninfo, ConnectionKind::kSql));
  return Inspect(conn.get(), config, /*check_capacity=*/true, TableChecks::kNow);
}

absl::StatusOr<Inspected> InspectForProvision(const StreamConfig& config,
                                              TableChecks table_checks, PGconn* walsender) {
  WALFEED_RETURN_IF_ERROR(config.Validate());
  Inspected inspected;
  if (walsender != nullptr) {
    WALFEED_ASSIGN_OR_RETURN(inspected.report,
                             Inspect(SqlChannel(walsender, ConnectionKind::kReplication), config,
                                     /*check_capacity=*/true, table_checks));
    return inspected;
  }
  WALFEED_ASSIGN_OR_RETURN(inspected.conn, Connect(config.conninfo, ConnectionKind::kSql));
  WALFEED_ASSIGN_OR_RETURN(inspected.report, Inspect(inspected.conn.get(), config,
                                                     /*check_capacity=*/true, table_checks));
  return inspected;
}

absl::StatusOr<ProvisionResult> Provision(const StreamConfig& config,
                                          const SnapshotSteps* snapshot) {
  return provisioning_internal::Provision(config, provisioning_internal::Hooks{}, snapshot);
}

absl::StatusOr<ProvisionResult> Provision(const StreamConfig& config, Inspected inspected,
                                          const SnapshotSteps* snapshot) {
  return provisioning_internal::Provision(config, std::move(inspected),
                                          provisioning_internal::Hooks{}, snapshot);
}

namespace provisioning_internal {

absl::StatusOr<ProvisionResult> Provision(const StreamConfig& config, const Hooks& hooks,
                                          const SnapshotSteps* snapshot) {
  WALFEED_ASSIGN_OR_RETURN(Inspected inspected, InspectForProvision(config));
  return Provision(config, std::move(inspected), hooks, snapshot);
}

absl::StatusOr<ProvisionResult> Provision(const StreamConfig& config, Inspected inspected,
                                          const Hooks& hooks, const SnapshotSteps* snapshot) {
  PreflightReport& before = inspected.report;
  ProvisionResult result;
  if (!config.create_missing || (before.slot_exists && before.publications_exist())) {
    // Nothing to create (without create_missing, Inspect() has made sure of that).
    result.report = std::move(before);
    return result;
  }
  if (inspected.conn == nullptr) {  // Inspected on a walsender, which is kept for streaming.
    WALFEED_ASSIGN_OR_RETURN(inspected.conn, Connect(config.conninfo, ConnectionKind::kSql));
  }
  PGconn* const conn = inspected.conn.get();

  // Publications first: the slot must not hold changes older than them.
  if (!before.missing_publications.empty() && hooks.before_create_publications) {
    hooks.before_create_publications();
  }
  for (const std::string& publication : before.missing_publications) {
    absl::StatusOr<PgResultPtr> created =
        Exec(conn, CreatePublicationSql(config, publication));
    if (created.ok()) {
      result.created_publication = true;
    } else if (const std::string state = SqlStateOf(created.status());
               state != kDuplicateObject && state != kUniqueViolation) {
      return created.status();
    }
    // Otherwise someone else created it meanwhile; it is used as it is.
  }

  if (!before.slot_exists) {
    if (hooks.before_create_slot) hooks.before_create_slot();
    if (snapshot != nullptr) WALFEED_RETURN_IF_ERROR(snapshot->before_slot());
    absl::StatusOr<Lsn> point = CreateSlot(config, snapshot, inspected.walsender_name, &result);
    if (point.ok()) {
      result.created_slot = true;
      result.consistent_point = *point;
    } else if (SqlStateOf(point.status()) != kDuplicateObject) {
      return point.status();
    }
    // duplicate_object: created concurrently; the checks below judge that slot
    // (plugin, temporary, two-phase, in use) exactly as preflight would.
  }

  WALFEED_ASSIGN_OR_RETURN(result.report,
                           Inspect(conn, config, /*check_capacity=*/false, TableChecks::kNow));
  if (before.slot_exists && result.created_publication) {
    result.report.warnings.push_back(
        SlotOlderThanPublicationsWarning(config.slot_name, before.missing_publications));
  }
  return result;
}

}  // namespace provisioning_internal

}  // namespace walfeed::replication::pg
