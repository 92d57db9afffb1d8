// PgBackfillDatabase::Plan: which key a table is read in order of, which
// columns its READ events carry, and whether the stream publishes it at all.
#include <algorithm>
#include <utility>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "replication/pg/pg_backfill_database.h"
#include "replication/sql_text.h"
#include "replication/status_macros.h"

namespace walfeed::replication::pg {
namespace {

// pgoutput sends Type messages for OIDs from FirstGenObjectId on; below it only
// its built-in names are known (relation_cache.h).
constexpr uint32_t kFirstGenObjectId = 10000;

// An int2vector's text ("1 3") as its elements.
std::vector<std::string> SplitArray(absl::string_view text) {
  return absl::StrSplit(text, absl::ByAnyChar(" "), absl::SkipEmpty());
}

struct Column {
  int attnum = 0;
  ColumnInfo info;
  std::string type_sql;  // format_type, for casts of key values.
  bool not_null = false;
};

}  // namespace

absl::StatusOr<BackfillTable> PgBackfillDatabase::Plan(
    const std::vector<std::string>& publications, const TableName& table,
    const std::string& where) {
  WALFEED_ASSIGN_OR_RETURN(
      PgResultPtr relation,
      OnSource("SELECT c.oid, c.relreplident, c.reltuples::bigint, c.relkind FROM pg_class c "
               "JOIN pg_namespace n ON n.oid = c.relnamespace "
               "WHERE n.nspname = $1 AND c.relname = $2 AND c.relkind IN ('r', 'p')",
               {table.schema, table.table}));
  if (PQntuples(relation.get()) == 0) {
    return absl::NotFoundError(absl::StrCat("no table ", table.Quoted(), " in the database"));
  }
  BackfillTable plan;
  plan.name = table;
  auto info = std::make_shared<RelationInfo>();
  info->schema = table.schema;
  info->table = table.table;
  const std::string oid = PQgetvalue(relation.get(), 0, 0);
  (void)absl::SimpleAtoi(oid, &info->relation_id);
  info->replica_identity = PQgetvalue(relation.get(), 0, 1)[0];
  (void)absl::SimpleAtoi(PQgetvalue(relation.get(), 0, 2), &plan.estimated_rows);

  // Published? With which column list and row filter (PostgreSQL ORs the row
  // filters of several publications; one without a filter publishes every row).
  std::vector<std::string> quoted;
  for (const std::string& name : publications) quoted.push_back(QuoteIdentifier(name));
  WALFEED_ASSIGN_OR_RETURN(
      PgResultPtr published,
      OnSource("SELECT rowfilter FROM pg_publication_tables "
               "WHERE pubname = ANY($1::text[]) AND schemaname = $2 AND tablename = $3",
               {ArrayLiteral(publications), table.schema, table.table}));
  if (PQntuples(published.get()) == 0) {
    return absl::FailedPreconditionError(absl::StrCat(
        "table ", table.Quoted(), " is not in the stream's publications (",
        absl::StrJoin(publications, ", "), "): a backfill reads only what the stream publishes; "
        "add it with ALTER PUBLICATION ", quoted.empty() ? "<publication>" : quoted[0],
        " ADD TABLE ", table.Quoted()));
  }
  std::vector<std::string> filters;
  bool unfiltered = false;
  for (int row = 0; row < PQntuples(published.get()); ++row) {
    if (PQgetisnull(published.get(), row, 0)) {
      unfiltered = true;
    } else {
      filters.push_back(absl::StrCat("(", PQgetvalue(published.get(), row, 0), ")"));
    }
  }
  if (!unfiltered) plan.row_filter = absl::StrJoin(filters, " OR ");

  // Columns: live, not generated (pgoutput in 15 leaves those out), in the
  // publication's column list when it has one.
  WALFEED_ASSIGN_OR_RETURN(
      PgResultPtr columns,
      OnSource("SELECT a.attnum, a.attname, a.atttypid, a.atttypmod, "
               "format_type(a.atttypid, a.atttypmod), a.attnotnull FROM pg_attribute a "
               "WHERE a.attrelid = $1 AND a.attnum > 0 AND NOT a.attisdropped "
               "AND a.attgenerated = '' ORDER BY a.attnum",
               {oid}));
  // The published column names, one array element each (ArrayElements).
  WALFEED_ASSIGN_OR_RETURN(
      PgResultPtr names,
      OnSource("SELECT DISTINCT n FROM pg_publication_tables, unnest(attnames) AS n "
               "WHERE pubname = ANY($1::text[]) AND schemaname = $2 AND tablename = $3",
               {ArrayLiteral(publications), table.schema, table.table}));
  std::vector<std::string> listed;
  for (int row = 0; row < PQntuples(names.get()); ++row) {
    listed.push_back(PQgetvalue(names.get(), row, 0));
  }
  std::vector<Column> all;
  std::vector<uint32_t> type_oids;
  for (int row = 0; row < PQntuples(columns.get()); ++row) {
    Column column;
    (void)absl::SimpleAtoi(PQgetvalue(columns.get(), row, 0), &column.attnum);
    column.info.name = PQgetvalue(columns.get(), row, 1);
    (void)absl::SimpleAtoi(PQgetvalue(columns.get(), row, 2), &column.info.type_oid);
    (void)absl::SimpleAtoi(PQgetvalue(columns.get(), row, 3), &column.info.type_modifier);
    column.type_sql = PQgetvalue(columns.get(), row, 4);
    column.not_null = PQgetvalue(columns.get(), row, 5)[0] == 't';
    all.push_back(std::move(column));
  }
  std::vector<Column> published_columns;
  for (Column& column : all) {
    if (listed.empty() ||
        std::find(listed.begin(), listed.end(), column.info.name) != listed.end()) {
      published_columns.push_back(column);
    }
  }

  // Type names as the stream gives them: built-in ones from the fixed table, a
  // user type (and a domain, by its base type) as "schema.name".
  for (const Column& column : published_columns) type_oids.push_back(column.info.type_oid);
  WALFEED_ASSIGN_OR_RETURN(
      PgResultPtr types,
      OnSource("WITH RECURSIVE b(start, cur, depth) AS ("
               "  SELECT t.oid, t.oid, 0 FROM pg_type t WHERE t.oid = ANY($1::oid[]) "
               "  UNION ALL SELECT b.start, t.typbasetype, b.depth + 1 FROM b "
               "  JOIN pg_type t ON t.oid = b.cur WHERE t.typtype = 'd' AND b.depth < 64) "
               "SELECT DISTINCT ON (b.start) b.start, n.nspname, t.typname FROM b "
               "JOIN pg_type t ON t.oid = b.cur JOIN pg_namespace n ON n.oid = t.typnamespace "
               "ORDER BY b.start, b.depth DESC",
               {absl::StrCat("{", absl::StrJoin(type_oids, ","), "}")}));
  absl::flat_hash_map<uint32_t, std::string> type_names;
  for (int row = 0; row < PQntuples(types.get()); ++row) {
    uint32_t type_oid = 0;
    (void)absl::SimpleAtoi(PQgetvalue(types.get(), row, 0), &type_oid);
    const std::string schema = PQgetvalue(types.get(), row, 1);
    const std::string name = PQgetvalue(types.get(), row, 2);
    type_names[type_oid] = schema == "pg_catalog" ? name : absl::StrCat(schema, ".", name);
  }

  // Indexes that can be the key: the primary key, the replica identity index,
  // unique ones on plain not-null columns (no expression, no predicate).
  WALFEED_ASSIGN_OR_RETURN(
      PgResultPtr indexes,
      OnSource("SELECT i.indisprimary, i.indisreplident, i.indkey::text, ic.relname "
               "FROM pg_index i JOIN pg_class ic ON ic.oid = i.indexrelid "
               "WHERE i.indrelid = $1 AND i.indisunique AND i.indisvalid AND i.indimmediate "
               "AND i.indpred IS NULL AND i.indexprs IS NULL "
               "ORDER BY i.indisprimary DESC, i.indisreplident DESC, i.indnatts, ic.relname",
               {oid}));
  auto column_at = [&all](int attnum) -> const Column* {
    for (const Column& column : all) {
      if (column.attnum == attnum) return &column;
    }
    return nullptr;
  };
  std::vector<int> identity;    // Replica identity attnums ('d': the primary key).
  std::vector<int> primary_key;
  std::vector<int> unique_key;  // The first unique index on not-null columns.
  std::string unique_name;
  for (int row = 0; row < PQntuples(indexes.get()); ++row) {
    const bool primary = PQgetvalue(indexes.get(), row, 0)[0] == 't';
    const bool replident = PQgetvalue(indexes.get(), row, 1)[0] == 't';
    std::vector<int> attnums;
    bool not_null = true;
    for (const std::string& part : SplitArray(PQgetvalue(indexes.get(), row, 2))) {
      int attnum = 0;
      const Column* column = absl::SimpleAtoi(part, &attnum) ? column_at(attnum) : nullptr;
      if (column == nullptr || !column->not_null) not_null = false;
      attnums.push_back(attnum);
    }
    if (primary) primary_key = attnums;
    if ((primary && info->replica_identity == 'd') ||
        (replident && info->replica_identity == 'i')) {
      identity = attnums;
    }
    if (not_null && unique_key.empty()) {
      unique_key = attnums;
      unique_name = PQgetvalue(indexes.get(), row, 3);
    }
  }
  // The key must be in every change event of a row, the DELETE's old key
  // included: the replica identity's, or under FULL any unique not-null key.
  std::vector<int> key = identity;
  if (info->replica_identity == 'f') key = primary_key.empty() ? unique_key : primary_key;
  if (key.empty()) {
    std::string remedy =
        unique_key.empty()
            ? absl::StrCat("add one, e.g. ALTER TABLE ", table.Quoted(), " ADD PRIMARY KEY (id)")
            : absl::StrCat("make the unique index ", QuoteIdentifier(unique_name),
                           " its replica identity: ALTER TABLE ", table.Quoted(),
                           " REPLICA IDENTITY USING INDEX ", QuoteIdentifier(unique_name));
    return absl::FailedPreconditionError(absl::StrCat(
        "table ", table.Quoted(), " has no primary key or unique not-null key that its change "
        "events carry, so a backfill cannot tell which chunk rows the stream changed: ",
        remedy));
  }
  for (Column& column : published_columns) {
    const bool is_identity = info->replica_identity == 'f' ||
                             std::find(identity.begin(), identity.end(), column.attnum) !=
                                 identity.end();
    column.info.is_key = is_identity;
    if (column.info.type_oid < kFirstGenObjectId) {
      column.info.type_name = std::string(BuiltinTypeName(column.info.type_oid));
    } else {
      column.info.type_name = type_names[column.info.type_oid];
    }
    info->columns.push_back(column.info);
  }
  for (int attnum : key) {
    const Column* column = column_at(attnum);
    const bool published =
        std::any_of(published_columns.begin(), published_columns.end(),
                    [attnum](const Column& c) { return c.attnum == attnum; });
    if (!published) {
      return absl::FailedPreconditionError(absl::StrCat(
          "the key column ", QuoteIdentifier(column->info.name), " of ", table.Quoted(),
          " is not in the publication's column list: a backfill matches chunk rows with "
          "change events by key; publish the key columns"));
    }
    plan.key_columns.push_back(column->info.name);
    plan.key_types.push_back(column->type_sql);
  }
  plan.relation = std::move(info);

  // The predicate must run: EXPLAIN checks it without reading the table.
  if (!where.empty()) {
    absl::Status checked =
        OnSource(absl::StrCat("EXPLAIN ", ChunkSql(plan, where, false, 1)), {}).status();
    if (!checked.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat("the backfill predicate does not run on ", table.Quoted(), ": ",
                       checked.message()));
    }
  }
  return plan;
}

absl::StatusOr<std::vector<TableName>> PgBackfillDatabase::PublishedTables(
    const std::vector<std::string>& publications) {
  WALFEED_ASSIGN_OR_RETURN(
      PgResultPtr tables,
      OnSource("SELECT DISTINCT schemaname, tablename FROM pg_publication_tables "
               "WHERE pubname = ANY($1::text[]) ORDER BY 1, 2",
               {ArrayLiteral(publications)}));
  std::vector<TableName> names;
  for (int row = 0; row < PQntuples(tables.get()); ++row) {
    names.push_back(TableName{PQgetvalue(tables.get(), row, 0), PQgetvalue(tables.get(), row, 1)});
  }
  return names;
}

}  // namespace walfeed::replication::pg
