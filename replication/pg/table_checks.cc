// The table checks (table_checks.h): catalog queries with parameters, one
// connection, no writes.
#include "replication/pg/table_checks.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "replication/sql_text.h"
#include "replication/status_macros.h"

namespace walfeed::replication::pg {
namespace {

constexpr char kPublicationQuery[] = "SELECT puballtables FROM pg_publication WHERE pubname = $1";

// Replica identity is enforced on the leaf table an UPDATE/DELETE touches, so
// each query below yields leaves: schema, table, relreplident, has a primary
// key, has its REPLICA IDENTITY USING INDEX index. WALFEED_LEAVES_OF_PC maps
// relation `pc` to its leaf partitions when it is partitioned and to itself
// otherwise (pg_partition_tree returns nothing for a plain table), and a
// partitioned table without partitions to one row of NULLs (no leaf), so that
// the published-tables query still names it.
// clang-format off
#define WALFEED_IDENTITY_COLUMNS                                                                 \
  "n.nspname, c.relname, c.relreplident, "                                                       \
  "EXISTS (SELECT 1 FROM pg_index i WHERE i.indrelid = c.oid AND i.indisprimary), "              \
  "EXISTS (SELECT 1 FROM pg_index i WHERE i.indrelid = c.oid AND i.indisreplident) "
#define WALFEED_LEAVES_OF_PC                                                                     \
  "LEFT JOIN LATERAL (SELECT t.relid FROM pg_partition_tree(pc.oid) t "                          \
  "WHERE t.isleaf AND pc.relkind = 'p' UNION ALL SELECT pc.oid WHERE pc.relkind <> 'p') "        \
  "leaf ON true LEFT JOIN pg_class c ON c.oid = leaf.relid "                                     \
  "LEFT JOIN pg_namespace n ON n.oid = c.relnamespace "

// What an existing publication publishes, one row per leaf: the published
// table's schema and name, whether the publication publishes UPDATE or DELETE,
// then the leaf's identity columns. One statement, joined by relid from
// pg_get_publication_tables: on a backend's first catalog reads (a stream's
// start) it took 11-13 ms where the tables and the identities from the view
// pg_publication_tables, joined by name, took 22-27 ms in two.
constexpr int kPublishedIdentityColumn = 3;
constexpr char kPublishedTablesQuery[] =
    "SELECT pn.nspname, pc.relname, p.pubupdate OR p.pubdelete, " WALFEED_IDENTITY_COLUMNS
    "FROM pg_publication p "
    "CROSS JOIN LATERAL pg_get_publication_tables(p.pubname) pt "
    "JOIN pg_class pc ON pc.oid = pt.relid "
    "JOIN pg_namespace pn ON pn.oid = pc.relnamespace "
    WALFEED_LEAVES_OF_PC "WHERE p.pubname = $1";

// One configured table (to be published FOR TABLE): its kind, then its leaves.
constexpr char kTableKindQuery[] =
    "SELECT c.relkind FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace "
    "WHERE n.nspname = $1 AND c.relname = $2";
constexpr char kTableIdentityQuery[] =
    "SELECT " WALFEED_IDENTITY_COLUMNS
    "FROM pg_class pc JOIN pg_namespace pn ON pn.oid = pc.relnamespace "
    WALFEED_LEAVES_OF_PC "WHERE pn.nspname = $1 AND pc.relname = $2";

// Every table FOR ALL TABLES would publish: permanent user tables outside the
// system schemas (16384 = FirstNormalObjectId).
constexpr char kAllTablesIdentityQuery[] =
    "SELECT " WALFEED_IDENTITY_COLUMNS
    "FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace "
    "WHERE c.relkind = 'r' AND c.relpersistence = 'p' AND c.oid >= 16384 "
    "AND n.nspname NOT IN ('pg_catalog', 'information_schema')";

// clang-format on
#undef WALFEED_IDENTITY_COLUMNS
#undef WALFEED_LEAVES_OF_PC

// Adds the leaf tables in `r` (rows of the identity columns, from column
// `first` on) that have no usable replica identity to `unusable`, with the
// reason. `checked` (a row number) says whether a row's leaf needs one.
template <typename Checked>
void CollectMissingIdentity(const PGresult* r, UnusableTables* unusable, int first,
                            Checked checked) {
  for (int row = 0; row < PQntuples(r); ++row) {
    if (PQgetisnull(r, row, first + 2) || !checked(row)) continue;  // No leaf.
    const std::string identity = TextValue(r, row, first + 2);
    const bool has_primary_key = BoolValue(r, row, first + 3);
    const bool has_identity_index = BoolValue(r, row, first + 4);
    std::string reason;
    if (identity == "n") {
      reason = "REPLICA IDENTITY NOTHING";
    } else if (identity == "d" && !has_primary_key) {
      reason = "REPLICA IDENTITY DEFAULT but no primary key";
    } else if (identity == "i" && !has_identity_index) {
      reason = "REPLICA IDENTITY USING INDEX but that index no longer exists";
    } else {
      continue;
    }
    unusable->emplace(TableName{TextValue(r, row, first), TextValue(r, row, first + 1)},
                      std::move(reason));
  }
}

void CollectMissingIdentity(const PGresult* r, UnusableTables* unusable) {
  CollectMissingIdentity(r, unusable, 0, [](int) { return true; });
}

std::string MissingIdentityWarning(const TableName& table, absl::string_view reason) {
  return absl::StrCat(
      "table ", table.Quoted(), " has no usable replica identity (", reason,
      "): while it is in a publication that publishes updates or deletes, every UPDATE "
      "and DELETE on it fails on the primary (\"does not have a replica identity and "
      "publishes updates\"); add a primary key or run ALTER TABLE ",
      table.Quoted(), " REPLICA IDENTITY FULL");
}

}  // namespace

std::vector<TableName> ConfigTables(const StreamConfig& config) {
  std::vector<TableName> tables;
  for (const std::string& entry : config.tables) {
    absl::StatusOr<TableName> table = ParseTableName(entry);
    if (table.ok()) tables.push_back(*std::move(table));
  }
  return tables;
}

absl::Status FindPublications(const SqlChannel& conn, const StreamConfig& config,
                              std::vector<std::string>* existing,
                              std::vector<std::string>* missing) {
  for (const std::string& publication : config.publication_names) {
    WALFEED_ASSIGN_OR_RETURN(PgResultPtr exists, Exec(conn, kPublicationQuery, {publication}));
    (PQntuples(exists.get()) == 0 ? *missing : *existing).push_back(publication);
  }
  return absl::OkStatus();
}

absl::Status CheckTablesToPublish(const SqlChannel& conn, const StreamConfig& config,
                                  UnusableTables* unusable) {
  const std::vector<TableName> tables = ConfigTables(config);
  if (tables.empty()) {
    WALFEED_ASSIGN_OR_RETURN(PgResultPtr all, Exec(conn, kAllTablesIdentityQuery));
    CollectMissingIdentity(all.get(), unusable);
    return absl::OkStatus();
  }
  for (const TableName& table : tables) {
    WALFEED_ASSIGN_OR_RETURN(PgResultPtr kind,
                             Exec(conn, kTableKindQuery, {table.schema, table.table}));
    if (PQntuples(kind.get()) == 0) {
      return absl::NotFoundError(absl::StrCat(
          "table ", table.Quoted(), " (listed in tables) does not exist, so publication(s) ",
          "cannot be created FOR TABLE it: create the table or fix the entry (names are "
          "case-sensitive)"));
    }
    const std::string relkind = TextValue(kind.get(), 0, 0);
    if (relkind != "r" && relkind != "p") {
      return absl::FailedPreconditionError(
          absl::StrCat(table.Quoted(), " (listed in tables) is not a table (relkind '", relkind,
                       "'); only tables can be published: remove it from tables"));
    }
    WALFEED_ASSIGN_OR_RETURN(PgResultPtr leaves,
                             Exec(conn, kTableIdentityQuery, {table.schema, table.table}));
    CollectMissingIdentity(leaves.get(), unusable);
  }
  return absl::OkStatus();
}

absl::Status ReadPublishedTables(const SqlChannel& conn,
                                 const std::vector<std::string>& publications,
                                 PublishedTables* published) {
  for (const std::string& publication : publications) {
    WALFEED_ASSIGN_OR_RETURN(PgResultPtr tables, Exec(conn, kPublishedTablesQuery, {publication}));
    const PGresult* r = tables.get();
    for (int row = 0; row < PQntuples(r); ++row) {
      published->tables.insert(TableName{TextValue(r, row, 0), TextValue(r, row, 1)});
    }
    // Replica identity matters only where UPDATE or DELETE is published.
    CollectMissingIdentity(r, &published->unusable, kPublishedIdentityColumn,
                           [r](int row) { return BoolValue(r, row, 2); });
  }
  return absl::OkStatus();
}

void AppendTableWarnings(const StreamConfig& config, const std::vector<std::string>& existing,
                         bool all_exist, const PublishedTables& published,
                         std::vector<std::string>* warnings) {
  if (all_exist) {
    for (const TableName& table : ConfigTables(config)) {
      if (published.tables.count(table) != 0) continue;
      warnings->push_back(absl::StrCat(
          "table ", table.Quoted(), " is listed in tables but not published by ",
          QuoteIdentifierList(existing),
          "; walfeed never alters an existing publication: to stream it run ALTER PUBLICATION ",
          QuoteIdentifier(existing.front()), " ADD TABLE ", table.Quoted(), " (and backfill it)"));
    }
  }
  for (const auto& [table, reason] : published.unusable) {
    warnings->push_back(MissingIdentityWarning(table, reason));
  }
}

absl::StatusOr<std::vector<std::string>> PublishedTableWarnings(const SqlChannel& conn,
                                                                const StreamConfig& config) {
  WALFEED_RETURN_IF_ERROR(config.Validate());
  // Bounded: pg_partition_tree waits for the lock of a partitioned table being
  // altered, and neither a stream's start nor a server shutdown should wait
  // that long.
  WALFEED_RETURN_IF_ERROR(Exec(conn,
                               "SELECT set_config('statement_timeout', '5s', false), "
                               "set_config('lock_timeout', '2s', false)")
                              .status());
  absl::StatusOr<std::vector<std::string>> warnings =
      [&]() -> absl::StatusOr<std::vector<std::string>> {
    std::vector<std::string> existing;
    std::vector<std::string> missing;  // Dropped since the preflight.
    WALFEED_RETURN_IF_ERROR(FindPublications(conn, config, &existing, &missing));
    PublishedTables published;
    WALFEED_RETURN_IF_ERROR(ReadPublishedTables(conn, existing, &published));
    std::vector<std::string> found;
    AppendTableWarnings(config, existing, missing.empty(), published, &found);
    return found;
  }();
  // What RESET would restore: the session's defaults (the server's, the
  // role's, the conninfo's options), whatever the checks did.
  absl::Status restored = Exec(conn,
                               "SELECT set_config(name, reset_val, false) FROM pg_settings "
                               "WHERE name IN ('statement_timeout', 'lock_timeout')")
                              .status();
  if (!warnings.ok()) return warnings.status();
  WALFEED_RETURN_IF_ERROR(restored);
  return warnings;
}

std::string TableChecksFailedWarning(const absl::Status& why) {
  return absl::StrCat(
      "could not check the published tables (coverage of the configured tables, replica "
      "identities): ",
      why.ToString());
}

absl::StatusOr<std::vector<std::string>> PublishedTableWarnings(const StreamConfig& config) {
  WALFEED_RETURN_IF_ERROR(config.Validate());
  WALFEED_ASSIGN_OR_RETURN(PgConnPtr conn, Connect(config.conninfo, ConnectionKind::kSql));
  return PublishedTableWarnings(conn.get(), config);
}

}  // namespace walfeed::replication::pg
