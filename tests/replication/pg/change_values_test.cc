// What a consumer receives for real changes, end to end through a StreamReader
// against a throwaway PostgreSQL 15: every type's value exactly as PostgreSQL prints
// it, NULL vs empty vs unchanged TOAST, generated columns left out, old rows under
// each replica identity, TRUNCATE, logical messages, DDL between and inside
// transactions, multi-table and concurrent transactions. Each test ends with a
// marker transaction, so nothing unexpected can slip in unnoticed. Nothing sleeps;
// every wait has a deadline.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/string_view.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "replication/pg/pg_conn.h"
#include "replication/pg/stream_reader.h"
#include "tests/testing/pg_cluster.h"
#include "tests/testing/reader_harness.h"
#include "tests/testing/status_matchers.h"

namespace walfeed::replication::pg {
namespace {

using ::testing::ElementsAre;
using ::walfeed::testing::CollectingSink;
using ::walfeed::testing::IsOk;
using ::walfeed::testing::MemoryConfirmedStore;
using ::walfeed::testing::PgCluster;
using ::walfeed::testing::RunningReader;
using Kind = pgoutput::TupleValue::Kind;
using OldKind = pgoutput::OldTupleKind;
using Op = ChangeEvent::Op;

// A value rendered for comparison: the text itself, or one of these markers, which
// none of the test values can be mistaken for.
constexpr char kNull[] = "<null>";
constexpr char kToast[] = "<unchanged toast>";

std::string Show(const pgoutput::TupleValue& value) {
  switch (value.kind) {
    case Kind::kNull:
      return kNull;
    case Kind::kUnchangedToast:
      return kToast;
    case Kind::kText:
      return value.data;
    case Kind::kBinary:
      return absl::StrCat("<binary ", value.data.size(), " bytes>");
  }
  return "<bad kind>";
}

// A tuple as (column name, value) pairs, read through the relation snapshot the
// event carries: this is how a consumer attributes values to columns.
using Cells = std::vector<std::pair<std::string, std::string>>;

Cells Row(const RelationInfo& relation, const pgoutput::TupleData& tuple) {
  EXPECT_EQ(tuple.columns.size(), relation.columns.size())
      << "tuple and relation " << relation.table << " disagree on the column count";
  Cells cells;
  for (size_t i = 0; i < tuple.columns.size() && i < relation.columns.size(); ++i) {
    cells.emplace_back(relation.columns[i].name, Show(tuple.columns[i]));
  }
  return cells;
}

std::vector<std::string> ColumnNames(const RelationInfo& relation) {
  std::vector<std::string> names;
  for (const ColumnInfo& column : relation.columns) names.push_back(column.name);
  return names;
}

// "INSERT alpha", "TRUNCATE parent,other", "MESSAGE prefix": enough to check the
// order and kind of a transaction's events at a glance.
std::string Describe(const ChangeEvent& event) {
  switch (event.op) {
    case Op::kInsert:
    case Op::kUpdate:
    case Op::kDelete:
    case Op::kRead:
      return absl::StrCat(OpName(event.op), " ",
                          event.relation == nullptr ? "<no relation>" : event.relation->table);
    case Op::kTruncate: {
      std::vector<std::string> tables;
      for (const auto& relation : event.truncated_relations) tables.push_back(relation->table);
      return absl::StrCat("TRUNCATE ", absl::StrJoin(tables, ","));
    }
    case Op::kMessage:
      return absl::StrCat("MESSAGE ", event.message_prefix);
  }
  return "<bad op>";
}

std::vector<std::string> Describe(const std::vector<ChangeEvent>& events) {
  std::vector<std::string> out;
  for (const ChangeEvent& event : events) out.push_back(Describe(event));
  return out;
}

// Checks that events[first, first + count) are exactly the events of `commit`: ids
// "<commit_lsn>:0..count-1", its xid and commit time, and only the last one marked
// last, with the count and the commit's end LSN.
void ExpectOneTransaction(const std::vector<ChangeEvent>& events, size_t first, size_t count,
                          const TransactionCommitted& commit) {
  ASSERT_LE(first + count, events.size());
  EXPECT_EQ(commit.event_count, count);
  for (size_t i = 0; i < count; ++i) {
    const ChangeEvent& event = events[first + i];
    SCOPED_TRACE(absl::StrCat("event ", first + i, " (", Describe(event), ")"));
    EXPECT_EQ(event.id, (EventId{commit.commit_lsn, static_cast<uint32_t>(i)}));
    EXPECT_EQ(event.xid, commit.xid);
    EXPECT_EQ(event.commit_time, commit.commit_time);
    const bool last = i + 1 == count;
    EXPECT_EQ(event.last_in_transaction, last);
    EXPECT_EQ(event.transaction_event_count, last ? count : 0u);
    EXPECT_EQ(event.end_lsn, last ? commit.end_lsn : Lsn::kInvalid);
  }
}

class ChangeValuesTest : public ::testing::Test {
 protected:
  void SetUp() override {
    WALFEED_START_PG_OR_SKIP(pg_, PgCluster::Options{});
    // FOR ALL TABLES also publishes the tables each test creates afterwards.
    ASSERT_THAT(pg_->Exec("CREATE TABLE end_marker (id int);"
                          "CREATE PUBLICATION pub FOR ALL TABLES"),
                IsOk());
    // Its own statement: a slot cannot be created in a transaction that wrote.
    ASSERT_THAT(pg_->Exec("SELECT pg_create_logical_replication_slot('s', 'pgoutput')"), IsOk());
    ReaderOptions options;
    options.stream_name = "change_values";
    options.conninfo = pg_->ConnInfo();
    options.slot_name = "s";
    options.publication_names = {"pub"};
    options.max_feedback_interval = absl::Milliseconds(200);
    options.min_persist_interval = absl::ZeroDuration();
    reader_ = std::make_unique<RunningReader>(options, &tracker_, &sink_, &store_, Lsn::kInvalid);
  }

  void TearDown() override {
    if (reader_ == nullptr) return;
    if (!HasFailure()) {
      // The stream is in commit order, so if the marker transaction is exactly the
      // next thing after what the test consumed, nothing unexpected arrived (a DDL
      // transaction surfacing as an empty commit, say).
      std::vector<ChangeEvent> tail = Changes({"INSERT INTO end_marker VALUES (1)"}, 1);
      EXPECT_THAT(Describe(tail), ElementsAre("INSERT end_marker"));
      EXPECT_EQ(sink_.commits().size(), commits_awaited_);
    }
    EXPECT_THAT(reader_->Stop(), IsOk());
    // A reconnect would re-send and de-duplicate; these tests want one clean session.
    EXPECT_EQ(reader_->reader().stats().reconnects, 0u);
  }

  // Runs each of `transactions` in its own Exec (its own transaction, unless it holds
  // BEGIN/COMMIT itself), waits for `commits` more committed transactions and returns
  // the events that arrived since the last call.
  std::vector<ChangeEvent> Changes(const std::vector<std::string>& transactions, size_t commits) {
    for (const std::string& sql : transactions) {
      absl::Status status = pg_->Exec(sql);
      if (!status.ok()) {
        ADD_FAILURE() << status;
        return {};
      }
    }
    return AwaitCommits(commits);
  }

  // Waits for `commits` more committed transactions; returns the new events and
  // leaves the new commits in new_commits_.
  std::vector<ChangeEvent> AwaitCommits(size_t commits) {
    commits_awaited_ += commits;
    if (!sink_.WaitForCommits(commits_awaited_)) {
      ADD_FAILURE() << "only " << sink_.commits().size() << " of " << commits_awaited_
                    << " commits arrived";
      return {};
    }
    std::vector<TransactionCommitted> all_commits = sink_.commits();
    new_commits_.assign(all_commits.begin() + std::min(commits_taken_, all_commits.size()),
                        all_commits.end());
    commits_taken_ = all_commits.size();
    std::vector<ChangeEvent> all = sink_.events();
    std::vector<ChangeEvent> fresh(all.begin() + std::min(events_taken_, all.size()), all.end());
    events_taken_ = all.size();
    return fresh;
  }

  // The server's text for `sql`'s single value.
  std::string Value(absl::string_view sql) {
    absl::StatusOr<std::string> value = pg_->QueryValue(sql);
    EXPECT_THAT(value, IsOk());
    return value.ok() ? *value : "<query failed>";
  }

  // A separate SQL session, for transactions that must overlap.
  PgConnPtr Session() {
    absl::StatusOr<PgConnPtr> conn = Connect(pg_->ConnInfo(), ConnectionKind::kSql);
    EXPECT_THAT(conn, IsOk());
    return conn.ok() ? std::move(*conn) : nullptr;
  }

  // Runs one statement on `conn`; returns the first value of its first row, if any.
  static std::optional<std::string> On(PGconn* conn, absl::string_view sql) {
    absl::StatusOr<PgResultPtr> result = Exec(conn, sql);
    if (!result.ok()) {
      ADD_FAILURE() << sql << ": " << result.status();
      return std::nullopt;
    }
    if (PQntuples(result->get()) == 0) return std::nullopt;
    return pg::Value(result->get(), 0, 0);
  }

  // The xid an open transaction on `conn` was given, as pgoutput sends it: the low 32
  // bits of pg_current_xact_id() (the epoch is in the high bits).
  static uint32_t CurrentXid(PGconn* conn) {
    std::optional<std::string> full = On(conn, "SELECT pg_current_xact_id()");
    uint64_t xid = 0;
    EXPECT_TRUE(full.has_value() && absl::SimpleAtoi(*full, &xid));
    return static_cast<uint32_t>(xid);
  }

  std::unique_ptr<PgCluster> pg_;
  AckTracker tracker_{Lsn::kInvalid};
  CollectingSink sink_;
  MemoryConfirmedStore store_;
  std::vector<TransactionCommitted> new_commits_;  // From the last AwaitCommits.
  size_t commits_awaited_ = 0;
  size_t commits_taken_ = 0;
  size_t events_taken_ = 0;
  std::unique_ptr<RunningReader> reader_;  // Last: stopped before what it uses.
};

struct ValueCase {
  std::string sql;                  // An SQL expression assignable to the column.
  std::optional<std::string> text;  // What must arrive; nullopt means NULL.
};

struct TypeCase {
  std::string column_type;  // As written in CREATE TABLE.
  std::string type_name;    // The expected ColumnInfo::type_name.
  std::vector<ValueCase> values;
};

std::vector<TypeCase> TypeCases() {
  return {
      {"int2", "int2", {{"-32768", "-32768"}, {"32767", "32767"}, {"0", "0"}}},
      {"int4",
       "int4",
       {{"-2147483648", "-2147483648"}, {"2147483647", "2147483647"}, {"NULL", std::nullopt}}},
      {"int8",
       "int8",
       {{"-9223372036854775808", "-9223372036854775808"},
        {"9223372036854775807", "9223372036854775807"}}},
      {"numeric",
       "numeric",
       {{"'NaN'", "NaN"},
        {"'Infinity'", "Infinity"},
        {"'-Infinity'", "-Infinity"},
        {"1.50", "1.50"},     // The display scale travels with the value.
        {"-0.000", "0.000"},  // numeric has no negative zero.
        {"1e20", "100000000000000000000"},
        {"0.000001", "0.000001"},
        {"repeat('9', 1000)::numeric", std::string(1000, '9')}}},
      // A negative scale (PostgreSQL 15+) rounds to the left of the point.
      {"numeric(5,-2)", "numeric", {{"12345", "12300"}, {"150", "200"}, {"-49", "0"}}},
      {"float4",
       "float4",
       {{"'Infinity'", "Infinity"},
        {"'-Infinity'", "-Infinity"},
        {"'NaN'", "NaN"},
        {"'-0'", "-0"},
        {"3.14", "3.14"},
        {"'1e-5'", "1e-05"}}},
      {"float8",
       "float8",
       {{"'Infinity'", "Infinity"},
        {"'-Infinity'", "-Infinity"},
        {"'NaN'", "NaN"},
        {"'-0'", "-0"},
        {"0.1", "0.1"},
        {"1e300", "1e+300"},
        {"123456789012345678", "1.2345678901234568e+17"}}},
      {"bool", "bool", {{"true", "t"}, {"false", "f"}, {"NULL", std::nullopt}}},
      {"text",
       "text",
       {{"'héllo 世界 🐘'", "héllo 世界 🐘"},
        {"''", ""},
        {"NULL", std::nullopt},
        {R"(E'tab\there "quoted" back\\slash')", "tab\there \"quoted\" back\\slash"},
        {"'it''s'", "it's"}}},
      {"bytea",
       "bytea",
       {{R"('\x00ff41')", R"(\x00ff41)"}, {"''", R"(\x)"}, {"'abc'::bytea", R"(\x616263)"}}},
      // json keeps the input text; jsonb is normalised: keys sorted (shorter first),
      // the last duplicate wins, one space after ':' and ','. Numbers keep their scale.
      {"json",
       "json",
       {{R"('{"b" :  [1,2],   "a": 1, "a": 2}')", R"({"b" :  [1,2],   "a": 1, "a": 2})"}}},
      {"jsonb",
       "jsonb",
       {{R"('{"b" :  [1,2],   "aa": 1, "aa": 2, "c": 1.50}')",
         R"({"b": [1, 2], "c": 1.50, "aa": 2})"}}},
      {"uuid",
       "uuid",
       {{"'A0EEBC99-9C0B-4EF8-BB6D-6BB9BD380A11'", "a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11"},
        {"'{a0eebc999c0b4ef8bb6d6bb9bd380a12}'", "a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a12"}}},
      {"date",
       "date",
       {{"'2024-02-29'", "2024-02-29"},
        {"'infinity'", "infinity"},
        {"'0001-01-01 BC'", "0001-01-01 BC"}}},
      // Printed in the server's TimeZone (UTC), whatever offset was written.
      {"timestamptz",
       "timestamptz",
       {{"'2024-03-10 12:34:56.789+02'", "2024-03-10 10:34:56.789+00"},
        {"'2000-01-01 00:00:00 UTC'", "2000-01-01 00:00:00+00"},
        {"'-infinity'", "-infinity"}}},
      {"interval",
       "interval",
       {{"'1 year 2 months 3 days 04:05:06.5'", "1 year 2 mons 3 days 04:05:06.5"},
        {"'-1 day'", "-1 days"},
        {"'90 minutes'", "01:30:00"},
        {"'0'", "00:00:00"}}},
      {"int4[]",
       "_int4",
       {{"'{1,2,3}'", "{1,2,3}"},
        {"'{{1,2},{3,4}}'", "{{1,2},{3,4}}"},
        {"'[0:1]={7,8}'", "[0:1]={7,8}"},  // A lower bound other than 1 is printed.
        {"'{}'", "{}"},
        {"ARRAY[NULL, 1]", "{NULL,1}"}}},
      // Elements are quoted when empty, spelled NULL, or holding space, quote,
      // backslash or delimiter; a real NULL element is bare NULL.
      {"text[]",
       "_text",
       {{R"(ARRAY['a', NULL, 'b c', 'd"e', 'f\g', '', 'NULL', 'x,y', 'é'])",
         R"({a,NULL,"b c","d\"e","f\\g","","NULL","x,y",é})"}}},
      // User types are named by the Type message pgoutput sends: "schema.name".
      {"mood[]",
       "public._mood",
       {{R"('{sad,"very happy"}')", R"({sad,"very happy"})"}, {"ARRAY['ok']::mood[]", "{ok}"}}},
      {"mood", "public.mood", {{"'very happy'", "very happy"}, {"'sad'", "sad"}}},
      // For a domain pgoutput's Type message names the base type.
      {"posint", "int4", {{"42", "42"}, {"NULL", std::nullopt}}},
      {"pair",
       "public.pair",
       {{"ROW(1, 'x y')::pair", R"((1,"x y"))"},
        {"ROW(NULL, '')::pair", R"((,""))"},
        {R"(ROW(2, 'a"b')::pair)", R"((2,"a""b"))"},
        {"ROW(3, 'plain')::pair", "(3,plain)"}}},
  };
}

// One table per type ("typed_<n>", columns id and v), all rows inserted in one
// transaction; each value is compared with the literal text expected and with the
// server's own output for the stored row, and the column's description with the
// catalog.
TEST_F(ChangeValuesTest, TypesArriveAsPostgresPrintsThem) {
  const std::vector<TypeCase> cases = TypeCases();
  std::string ddl =
      "CREATE TYPE mood AS ENUM ('sad', 'ok', 'very happy');"
      "CREATE DOMAIN posint AS int CHECK (VALUE > 0);"
      "CREATE TYPE pair AS (a int, b text);";
  std::string inserts = "BEGIN;";
  size_t rows = 0;
  for (size_t t = 0; t < cases.size(); ++t) {
    absl::StrAppend(&ddl, "CREATE TABLE typed_", t, " (id int PRIMARY KEY, v ",
                    cases[t].column_type, ");");
    for (size_t r = 0; r < cases[t].values.size(); ++r, ++rows) {
      absl::StrAppend(&inserts, "INSERT INTO typed_", t, " VALUES (", r, ", ",
                      cases[t].values[r].sql, ");");
    }
  }
  absl::StrAppend(&inserts, "COMMIT");
  ASSERT_THAT(pg_->Exec(ddl), IsOk());

  std::vector<ChangeEvent> events = Changes({inserts}, 1);
  ASSERT_EQ(events.size(), rows);
  ExpectOneTransaction(events, 0, rows, new_commits_[0]);

  size_t next = 0;
  for (size_t t = 0; t < cases.size(); ++t) {
    const TypeCase& type = cases[t];
    SCOPED_TRACE(type.column_type);
    const std::string table = absl::StrCat("typed_", t);
    absl::StatusOr<std::vector<std::string>> server =
        pg_->Query(absl::StrCat("SELECT v FROM ", table, " ORDER BY id"));
    ASSERT_THAT(server, IsOk());
    ASSERT_EQ(server->size(), type.values.size());
    for (size_t r = 0; r < type.values.size(); ++r, ++next) {
      const ChangeEvent& event = events[next];
      SCOPED_TRACE(type.values[r].sql);
      ASSERT_EQ(event.op, Op::kInsert);
      ASSERT_EQ(event.relation->table, table);
      ASSERT_EQ(event.new_tuple.columns.size(), 2u);
      EXPECT_EQ(Show(event.new_tuple.columns[0]), absl::StrCat(r));
      const pgoutput::TupleValue& v = event.new_tuple.columns[1];
      if (type.values[r].text.has_value()) {
        EXPECT_EQ(v.kind, Kind::kText);
        EXPECT_EQ(v.data, *type.values[r].text);
        EXPECT_EQ(v.data, (*server)[r]);  // The output function, on both paths.
      } else {
        EXPECT_EQ(v.kind, Kind::kNull);
        EXPECT_EQ((*server)[r], "<NULL>");  // PgCluster::Query's NULL marker.
      }
    }
    // The frozen description of the table the last row arrived with.
    const RelationInfo& relation = *events[next - 1].relation;
    EXPECT_EQ(relation.schema, "public");
    EXPECT_EQ(relation.replica_identity, 'd');
    ASSERT_THAT(ColumnNames(relation), ElementsAre("id", "v"));
    EXPECT_TRUE(relation.columns[0].is_key);
    EXPECT_FALSE(relation.columns[1].is_key);
    EXPECT_EQ(relation.columns[0].type_oid, 23u);
    EXPECT_EQ(relation.columns[0].type_name, "int4");
    const ColumnInfo& v = relation.columns[1];
    EXPECT_EQ(v.type_name, type.type_name);
    // atttypid is the domain's own OID for posint, not int4's.
    EXPECT_EQ(absl::StrCat(v.type_oid),
              Value(absl::StrCat("SELECT atttypid FROM pg_attribute WHERE attrelid = '", table,
                                 "'::regclass AND attname = 'v'")));
    EXPECT_EQ(absl::StrCat(v.type_modifier),
              Value(absl::StrCat("SELECT atttypmod FROM pg_attribute WHERE attrelid = '", table,
                                 "'::regclass AND attname = 'v'")));
  }
  // Spot checks that do not lean on the catalog: fixed built-in OIDs and typmods.
  EXPECT_EQ(events.front().relation->columns[1].type_oid, 21u);  // int2
  const TypeCase& numeric_neg = cases[4];
  ASSERT_EQ(numeric_neg.column_type, "numeric(5,-2)");
  // numeric's typmod: ((precision << 16) | (scale & 0x7ff)) + 4.
  size_t first_neg = 0;
  for (size_t t = 0; t < 4; ++t) first_neg += cases[t].values.size();
  EXPECT_EQ(events[first_neg].relation->columns[1].type_oid, 1700u);
  EXPECT_EQ(events[first_neg].relation->columns[1].type_modifier, ((5 << 16) | 0x7fe) + 4);
}

// A large value stored out of line and not touched by an UPDATE is not re-sent: it
// arrives as 'u', which must never be confused with NULL ('n') or with the empty
// string. A STORED generated column is not published at all in PostgreSQL 15.
TEST_F(ChangeValuesTest, NullEmptyAndUnchangedToastAreDistinct) {
  ASSERT_THAT(pg_->Exec("CREATE TABLE docs (id int PRIMARY KEY, body text, note text,"
                        " body_len int GENERATED ALWAYS AS (length(body)) STORED)"),
              IsOk());
  // 200 md5 digests: 6400 hex characters that pglz cannot shrink by the 25% it
  // requires, so the value is stored uncompressed in the TOAST table.
  std::vector<ChangeEvent> inserted =
      Changes({"INSERT INTO docs (id, body, note) SELECT 1, string_agg(md5(g::text), ''), 'first'"
               " FROM generate_series(1, 200) g;"
               "INSERT INTO docs (id, body, note) VALUES (2, NULL, '')"},
              1);
  ASSERT_EQ(inserted.size(), 2u);
  const std::string body = Value("SELECT body FROM docs WHERE id = 1");
  ASSERT_EQ(body.size(), 6400u);
  EXPECT_EQ(Value("SELECT body_len FROM docs WHERE id = 1"), "6400");  // It exists...
  EXPECT_NE(Value("SELECT pg_relation_size(reltoastrelid) FROM pg_class"
                  " WHERE relname = 'docs'"),
            "0");  // ...and the body really is out of line.

  const RelationInfo& relation = *inserted[0].relation;
  EXPECT_THAT(ColumnNames(relation), ElementsAre("id", "body", "note"));  // No body_len.
  EXPECT_EQ(Row(relation, inserted[0].new_tuple),
            (Cells{{"id", "1"}, {"body", body}, {"note", "first"}}));
  EXPECT_EQ(Row(*inserted[1].relation, inserted[1].new_tuple),
            (Cells{{"id", "2"}, {"body", kNull}, {"note", ""}}));
  EXPECT_EQ(inserted[1].new_tuple.columns[2].kind, Kind::kText);  // '' is a value.

  std::vector<ChangeEvent> updated = Changes({"UPDATE docs SET note = NULL"}, 1);
  ASSERT_EQ(updated.size(), 2u);
  for (const ChangeEvent& event : updated) {
    EXPECT_EQ(event.op, Op::kUpdate);
    EXPECT_EQ(event.old_kind, OldKind::kNone);  // The key did not change.
    EXPECT_TRUE(event.old_tuple.columns.empty());
  }
  EXPECT_EQ(Row(*updated[0].relation, updated[0].new_tuple),
            (Cells{{"id", "1"}, {"body", kToast}, {"note", kNull}}));
  EXPECT_EQ(updated[0].new_tuple.columns[1].kind, Kind::kUnchangedToast);
  EXPECT_TRUE(updated[0].new_tuple.columns[1].data.empty());
  EXPECT_EQ(Row(*updated[1].relation, updated[1].new_tuple),
            (Cells{{"id", "2"}, {"body", kNull}, {"note", kNull}}));

  // Changing the large value itself sends it whole again.
  std::vector<ChangeEvent> rewritten =
      Changes({"UPDATE docs SET body = body || '!' WHERE id = 1"}, 1);
  ASSERT_EQ(rewritten.size(), 1u);
  EXPECT_EQ(Row(*rewritten[0].relation, rewritten[0].new_tuple),
            (Cells{{"id", "1"}, {"body", body + "!"}, {"note", kNull}}));
}

// REPLICA IDENTITY DEFAULT (the primary key): no old row unless the key changed, and
// then only the key; non-key columns of a key tuple are placeholders.
TEST_F(ChangeValuesTest, DefaultIdentitySendsTheOldKeyOnlyWhenItChanged) {
  ASSERT_THAT(pg_->Exec("CREATE TABLE rid (id int PRIMARY KEY, v text)"), IsOk());
  std::vector<ChangeEvent> events =
      Changes({"INSERT INTO rid VALUES (1, 'a')", "UPDATE rid SET v = 'b' WHERE id = 1",
               "UPDATE rid SET id = 10 WHERE id = 1", "DELETE FROM rid WHERE id = 10"},
              4);
  ASSERT_THAT(Describe(events),
              ElementsAre("INSERT rid", "UPDATE rid", "UPDATE rid", "DELETE rid"));
  const RelationInfo& relation = *events[0].relation;
  EXPECT_EQ(relation.replica_identity, 'd');
  ASSERT_EQ(relation.columns.size(), 2u);
  EXPECT_TRUE(relation.columns[0].is_key);
  EXPECT_FALSE(relation.columns[1].is_key);

  EXPECT_EQ(events[1].old_kind, OldKind::kNone);
  EXPECT_TRUE(events[1].old_tuple.columns.empty());
  EXPECT_EQ(Row(relation, events[1].new_tuple), (Cells{{"id", "1"}, {"v", "b"}}));

  EXPECT_EQ(events[2].old_kind, OldKind::kKey);
  EXPECT_EQ(Row(relation, events[2].old_tuple), (Cells{{"id", "1"}, {"v", kNull}}));
  EXPECT_EQ(Row(relation, events[2].new_tuple), (Cells{{"id", "10"}, {"v", "b"}}));

  EXPECT_EQ(events[3].old_kind, OldKind::kKey);
  EXPECT_EQ(Row(relation, events[3].old_tuple), (Cells{{"id", "10"}, {"v", kNull}}));
  EXPECT_TRUE(events[3].new_tuple.columns.empty());
}

// REPLICA IDENTITY FULL: every column is the key, and UPDATE and DELETE carry the
// whole old row, NULLs included, whether or not anything key-like changed.
TEST_F(ChangeValuesTest, FullIdentitySendsTheWholeOldRow) {
  ASSERT_THAT(pg_->Exec("CREATE TABLE rid (id int, v text, w int);"
                        "ALTER TABLE rid REPLICA IDENTITY FULL"),
              IsOk());
  std::vector<ChangeEvent> events = Changes(
      {"INSERT INTO rid VALUES (1, 'a', NULL)", "UPDATE rid SET v = 'b'", "DELETE FROM rid"}, 3);
  ASSERT_THAT(Describe(events), ElementsAre("INSERT rid", "UPDATE rid", "DELETE rid"));
  const RelationInfo& relation = *events[0].relation;
  EXPECT_EQ(relation.replica_identity, 'f');
  for (const ColumnInfo& column : relation.columns) EXPECT_TRUE(column.is_key) << column.name;

  EXPECT_EQ(events[1].old_kind, OldKind::kFull);
  EXPECT_EQ(Row(relation, events[1].old_tuple), (Cells{{"id", "1"}, {"v", "a"}, {"w", kNull}}));
  EXPECT_EQ(Row(relation, events[1].new_tuple), (Cells{{"id", "1"}, {"v", "b"}, {"w", kNull}}));

  EXPECT_EQ(events[2].old_kind, OldKind::kFull);
  EXPECT_EQ(Row(relation, events[2].old_tuple), (Cells{{"id", "1"}, {"v", "b"}, {"w", kNull}}));
}

// REPLICA IDENTITY USING INDEX: the unique index's columns are the key, not the
// primary key's.
TEST_F(ChangeValuesTest, IndexIdentitySendsTheIndexColumnsOnly) {
  ASSERT_THAT(pg_->Exec("CREATE TABLE rid (id int PRIMARY KEY, code text NOT NULL, v text);"
                        "CREATE UNIQUE INDEX rid_code ON rid (code);"
                        "ALTER TABLE rid REPLICA IDENTITY USING INDEX rid_code"),
              IsOk());
  std::vector<ChangeEvent> events =
      Changes({"INSERT INTO rid VALUES (1, 'k1', 'a')", "UPDATE rid SET v = 'b', id = 2",
               "UPDATE rid SET code = 'k2'", "DELETE FROM rid"},
              4);
  ASSERT_THAT(Describe(events),
              ElementsAre("INSERT rid", "UPDATE rid", "UPDATE rid", "DELETE rid"));
  const RelationInfo& relation = *events[0].relation;
  EXPECT_EQ(relation.replica_identity, 'i');
  ASSERT_THAT(ColumnNames(relation), ElementsAre("id", "code", "v"));
  EXPECT_FALSE(relation.columns[0].is_key);  // The primary key is not the identity.
  EXPECT_TRUE(relation.columns[1].is_key);
  EXPECT_FALSE(relation.columns[2].is_key);

  // Changing the primary key is not changing the identity.
  EXPECT_EQ(events[1].old_kind, OldKind::kNone);
  EXPECT_EQ(Row(relation, events[1].new_tuple), (Cells{{"id", "2"}, {"code", "k1"}, {"v", "b"}}));

  EXPECT_EQ(events[2].old_kind, OldKind::kKey);
  EXPECT_EQ(Row(relation, events[2].old_tuple),
            (Cells{{"id", kNull}, {"code", "k1"}, {"v", kNull}}));
  EXPECT_EQ(Row(relation, events[2].new_tuple), (Cells{{"id", "2"}, {"code", "k2"}, {"v", "b"}}));

  EXPECT_EQ(events[3].old_kind, OldKind::kKey);
  EXPECT_EQ(Row(relation, events[3].old_tuple),
            (Cells{{"id", kNull}, {"code", "k2"}, {"v", kNull}}));
}

// One TRUNCATE statement over several tables is one event naming all of them,
// including the table CASCADE reached through a foreign key, with both options.
TEST_F(ChangeValuesTest, TruncateIsOneEventForEveryTable) {
  ASSERT_THAT(pg_->Exec("CREATE TABLE parent (id serial PRIMARY KEY, v text);"
                        "CREATE TABLE child (id serial PRIMARY KEY,"
                        "                    parent_id int NOT NULL REFERENCES parent (id));"
                        "CREATE TABLE other (id serial PRIMARY KEY)"),
              IsOk());
  std::vector<ChangeEvent> filled = Changes({"INSERT INTO parent (v) VALUES ('p1'), ('p2');"
                                             "INSERT INTO child (parent_id) VALUES (1), (2);"
                                             "INSERT INTO other DEFAULT VALUES"},
                                            1);
  ASSERT_EQ(filled.size(), 5u);

  std::vector<ChangeEvent> truncated =
      Changes({"TRUNCATE parent, other RESTART IDENTITY CASCADE"}, 1);
  // The statement's tables in order, then what CASCADE added: the order in which
  // ExecuteTruncate collected them, which is the order of the WAL record.
  ASSERT_THAT(Describe(truncated), ElementsAre("TRUNCATE parent,other,child"));
  const ChangeEvent& truncate = truncated[0];
  EXPECT_EQ(truncate.truncate_options,
            pgoutput::Truncate::kCascade | pgoutput::Truncate::kRestartIdentity);
  EXPECT_EQ(truncate.relation, nullptr);
  EXPECT_TRUE(truncate.new_tuple.columns.empty());
  EXPECT_EQ(truncate.truncated_relations[2]->schema, "public");
  EXPECT_THAT(ColumnNames(*truncate.truncated_relations[2]), ElementsAre("id", "parent_id"));
  ExpectOneTransaction(truncated, 0, 1, new_commits_[0]);

  // RESTART IDENTITY reset parent's sequence; a plain TRUNCATE carries no options.
  std::vector<ChangeEvent> after =
      Changes({"BEGIN; INSERT INTO parent (v) VALUES ('again'); TRUNCATE other; COMMIT"}, 1);
  ASSERT_THAT(Describe(after), ElementsAre("INSERT parent", "TRUNCATE other"));
  EXPECT_EQ(Row(*after[0].relation, after[0].new_tuple), (Cells{{"id", "1"}, {"v", "again"}}));
  EXPECT_EQ(after[1].truncate_options, 0);
  ExpectOneTransaction(after, 0, 2, new_commits_[0]);
}

// A transactional logical message is an event at its place in the transaction; a
// non-transactional one belongs to no commit, so it is counted, not delivered, even
// when its transaction commits or rolls back around it.
TEST_F(ChangeValuesTest, TransactionalMessagesAreEventsOthersAreOnlyCounted) {
  ASSERT_THAT(pg_->Exec("CREATE TABLE t (id int PRIMARY KEY)"), IsOk());
  ASSERT_THAT(pg_->Exec("BEGIN; INSERT INTO t VALUES (1);"
                        "SELECT pg_logical_emit_message(true, 'walfeed.test', 'hello');"
                        "INSERT INTO t VALUES (2);"
                        "SELECT pg_logical_emit_message(true, 'bin', '\\x00ff0a'::bytea);"
                        "SELECT pg_logical_emit_message(false, 'nt', 'outside');"
                        "COMMIT"),
              IsOk());
  ASSERT_THAT(pg_->Exec("BEGIN; INSERT INTO t VALUES (3);"
                        "SELECT pg_logical_emit_message(false, 'nt', 'aborted');"
                        "ROLLBACK"),
              IsOk());
  // A transaction holding nothing but a message still is a transaction.
  std::vector<ChangeEvent> events =
      Changes({"SELECT pg_logical_emit_message(true, 'only', '')"}, 2);
  ASSERT_THAT(Describe(events), ElementsAre("INSERT t", "MESSAGE walfeed.test", "INSERT t",
                                            "MESSAGE bin", "MESSAGE only"));
  ASSERT_EQ(new_commits_.size(), 2u);
  ExpectOneTransaction(events, 0, 4, new_commits_[0]);
  ExpectOneTransaction(events, 4, 1, new_commits_[1]);

  const ChangeEvent& text = events[1];
  EXPECT_EQ(text.message_content, "hello");
  EXPECT_EQ(text.relation, nullptr);
  const ChangeEvent& binary = events[3];
  EXPECT_EQ(binary.message_content, std::string("\x00\xff\x0a", 3));
  // Each message's LSN is the end of its own record, inside its transaction.
  EXPECT_GT(text.message_lsn, Lsn::kInvalid);
  EXPECT_LT(text.message_lsn, binary.message_lsn);
  EXPECT_LT(binary.message_lsn, new_commits_[0].commit_lsn);
  EXPECT_EQ(events[4].message_prefix, "only");
  EXPECT_EQ(events[4].message_content, "");

  // Both non-transactional messages were decoded before the later commit arrived.
  EXPECT_EQ(reader_->reader().stats().non_transactional_messages, 2u);
  EXPECT_EQ(Value("SELECT count(*) FROM t"), "2");  // The rolled-back row is gone.
}

// DDL between transactions: each event carries the columns in effect when its
// change was made, so no value is ever read under another column's name.
TEST_F(ChangeValuesTest, AlterTableBetweenTransactionsKeepsEachEventsColumns) {
  ASSERT_THAT(pg_->Exec("CREATE TABLE evolving (id int PRIMARY KEY, a text, b text)"), IsOk());
  std::vector<ChangeEvent> events = Changes(
      {"INSERT INTO evolving VALUES (1, 'a1', 'b1')",
       "ALTER TABLE evolving ADD COLUMN c int DEFAULT 7",
       "INSERT INTO evolving VALUES (2, 'a2', 'b2', 3)", "ALTER TABLE evolving DROP COLUMN a",
       "INSERT INTO evolving VALUES (3, 'b3', 4)", "ALTER TABLE evolving RENAME COLUMN b TO bee",
       "INSERT INTO evolving VALUES (4, 'b4', 5)", "UPDATE evolving SET bee = 'b1x' WHERE id = 1",
       "DELETE FROM evolving WHERE id = 2",
       // A type change rewrites the table; the rewrite's rows are not changes.
       "ALTER TABLE evolving ALTER COLUMN c TYPE text USING c::text || '!'",
       "INSERT INTO evolving VALUES (5, 'b5', 'c5')"},
      7);
  ASSERT_THAT(Describe(events), ElementsAre("INSERT evolving", "INSERT evolving", "INSERT evolving",
                                            "INSERT evolving", "UPDATE evolving", "DELETE evolving",
                                            "INSERT evolving"));
  EXPECT_EQ(Row(*events[0].relation, events[0].new_tuple),
            (Cells{{"id", "1"}, {"a", "a1"}, {"b", "b1"}}));
  EXPECT_EQ(Row(*events[1].relation, events[1].new_tuple),
            (Cells{{"id", "2"}, {"a", "a2"}, {"b", "b2"}, {"c", "3"}}));
  EXPECT_EQ(Row(*events[2].relation, events[2].new_tuple),
            (Cells{{"id", "3"}, {"b", "b3"}, {"c", "4"}}));
  EXPECT_EQ(Row(*events[3].relation, events[3].new_tuple),
            (Cells{{"id", "4"}, {"bee", "b4"}, {"c", "5"}}));
  // Row 1 predates column c: its value is the ADD COLUMN default, filled in.
  EXPECT_EQ(Row(*events[4].relation, events[4].new_tuple),
            (Cells{{"id", "1"}, {"bee", "b1x"}, {"c", "7"}}));
  EXPECT_EQ(events[5].old_kind, OldKind::kKey);
  EXPECT_EQ(Row(*events[5].relation, events[5].old_tuple),
            (Cells{{"id", "2"}, {"bee", kNull}, {"c", kNull}}));
  EXPECT_EQ(Row(*events[6].relation, events[6].new_tuple),
            (Cells{{"id", "5"}, {"bee", "b5"}, {"c", "c5"}}));
  EXPECT_EQ(events[4].relation->columns[2].type_name, "int4");
  EXPECT_EQ(events[6].relation->columns[2].type_name, "text");
  for (const ChangeEvent& event : events) {
    EXPECT_EQ(event.relation->relation_id, events[0].relation->relation_id);
  }
}

// DDL inside one transaction: PostgreSQL re-describes the table mid-transaction, and
// each event keeps the description that was current for it.
TEST_F(ChangeValuesTest, AlterTableInsideOneTransactionKeepsEachEventsColumns) {
  ASSERT_THAT(pg_->Exec("CREATE TABLE evolving (id int PRIMARY KEY, a text)"), IsOk());
  std::vector<ChangeEvent> events = Changes({"BEGIN;"
                                             "INSERT INTO evolving VALUES (1, 'a1');"
                                             "ALTER TABLE evolving ADD COLUMN b int;"
                                             "INSERT INTO evolving VALUES (2, 'a2', 20);"
                                             "ALTER TABLE evolving RENAME COLUMN a TO aa;"
                                             "INSERT INTO evolving VALUES (3, 'a3', 30);"
                                             "ALTER TABLE evolving DROP COLUMN aa;"
                                             "INSERT INTO evolving VALUES (4, 40);"
                                             "UPDATE evolving SET b = 11 WHERE id = 1;"
                                             "COMMIT"},
                                            1);
  ASSERT_EQ(events.size(), 5u);
  ExpectOneTransaction(events, 0, 5, new_commits_[0]);
  EXPECT_EQ(Row(*events[0].relation, events[0].new_tuple), (Cells{{"id", "1"}, {"a", "a1"}}));
  EXPECT_EQ(Row(*events[1].relation, events[1].new_tuple),
            (Cells{{"id", "2"}, {"a", "a2"}, {"b", "20"}}));
  EXPECT_EQ(Row(*events[2].relation, events[2].new_tuple),
            (Cells{{"id", "3"}, {"aa", "a3"}, {"b", "30"}}));
  EXPECT_EQ(Row(*events[3].relation, events[3].new_tuple), (Cells{{"id", "4"}, {"b", "40"}}));
  EXPECT_EQ(events[4].op, Op::kUpdate);
  EXPECT_EQ(Row(*events[4].relation, events[4].new_tuple), (Cells{{"id", "1"}, {"b", "11"}}));
}

// Changes to several tables in one transaction keep statement order under one
// commit LSN; only the last event says it is last.
TEST_F(ChangeValuesTest, MultiTableTransactionKeepsStatementOrder) {
  ASSERT_THAT(pg_->Exec("CREATE TABLE alpha (id int PRIMARY KEY, v text);"
                        "CREATE TABLE beta (id int PRIMARY KEY, n int);"
                        "CREATE TABLE gamma (id int PRIMARY KEY)"),
              IsOk());
  ASSERT_EQ(Changes({"INSERT INTO gamma VALUES (1)"}, 1).size(), 1u);

  PgConnPtr session = Session();
  ASSERT_NE(session, nullptr);
  On(session.get(), "BEGIN");
  On(session.get(), "INSERT INTO alpha VALUES (1, 'x')");
  const uint32_t xid = CurrentXid(session.get());
  On(session.get(), "INSERT INTO beta VALUES (1, 10), (2, 20)");
  On(session.get(), "UPDATE alpha SET v = 'y'");
  On(session.get(), "DELETE FROM gamma WHERE id = 1");
  On(session.get(), "INSERT INTO gamma VALUES (2)");
  On(session.get(), "COMMIT");
  std::vector<ChangeEvent> events = AwaitCommits(1);
  ASSERT_THAT(Describe(events), ElementsAre("INSERT alpha", "INSERT beta", "INSERT beta",
                                            "UPDATE alpha", "DELETE gamma", "INSERT gamma"));
  ExpectOneTransaction(events, 0, 6, new_commits_[0]);
  EXPECT_EQ(new_commits_[0].xid, xid);
  EXPECT_EQ(Row(*events[2].relation, events[2].new_tuple), (Cells{{"id", "2"}, {"n", "20"}}));
  EXPECT_EQ(Row(*events[3].relation, events[3].new_tuple), (Cells{{"id", "1"}, {"v", "y"}}));
  EXPECT_EQ(Row(*events[4].relation, events[4].old_tuple), (Cells{{"id", "1"}}));
}

// Transactions whose statements interleave arrive whole, one after another, in
// commit order, not in the order their changes were made.
TEST_F(ChangeValuesTest, InterleavedTransactionsArriveWholeInCommitOrder) {
  ASSERT_THAT(pg_->Exec("CREATE TABLE acct (id int PRIMARY KEY, v text)"), IsOk());
  PgConnPtr a = Session();
  PgConnPtr b = Session();
  PgConnPtr c = Session();
  ASSERT_TRUE(a != nullptr && b != nullptr && c != nullptr);

  On(a.get(), "BEGIN");
  On(a.get(), "INSERT INTO acct VALUES (1, 'a1')");
  On(b.get(), "BEGIN");
  On(b.get(), "INSERT INTO acct VALUES (101, 'b1')");
  On(a.get(), "INSERT INTO acct VALUES (2, 'a2')");
  On(c.get(), "BEGIN");
  On(c.get(), "INSERT INTO acct VALUES (201, 'c1')");
  On(b.get(), "INSERT INTO acct VALUES (102, 'b2')");
  On(a.get(), "UPDATE acct SET v = 'a1x' WHERE id = 1");
  const uint32_t xid_a = CurrentXid(a.get());
  const uint32_t xid_b = CurrentXid(b.get());
  const uint32_t xid_c = CurrentXid(c.get());
  On(b.get(), "COMMIT");
  On(c.get(), "INSERT INTO acct VALUES (202, 'c2')");
  On(a.get(), "COMMIT");
  On(c.get(), "COMMIT");

  std::vector<ChangeEvent> events = AwaitCommits(3);
  ASSERT_EQ(events.size(), 7u);
  ASSERT_EQ(new_commits_.size(), 3u);
  EXPECT_EQ(new_commits_[0].xid, xid_b);
  EXPECT_EQ(new_commits_[1].xid, xid_a);
  EXPECT_EQ(new_commits_[2].xid, xid_c);
  EXPECT_LT(new_commits_[0].commit_lsn, new_commits_[1].commit_lsn);
  EXPECT_LT(new_commits_[1].commit_lsn, new_commits_[2].commit_lsn);
  ExpectOneTransaction(events, 0, 2, new_commits_[0]);
  ExpectOneTransaction(events, 2, 3, new_commits_[1]);
  ExpectOneTransaction(events, 5, 2, new_commits_[2]);

  std::vector<std::string> ids;
  for (const ChangeEvent& event : events) {
    ids.push_back(absl::StrCat(OpName(event.op), " ", Show(event.new_tuple.columns[0]), " ",
                               Show(event.new_tuple.columns[1])));
  }
  EXPECT_THAT(ids, ElementsAre("INSERT 101 b1", "INSERT 102 b2",              // B
                               "INSERT 1 a1", "INSERT 2 a2", "UPDATE 1 a1x",  // A
                               "INSERT 201 c1", "INSERT 202 c2"));            // C
}

}  // namespace
}  // namespace walfeed::replication::pg
