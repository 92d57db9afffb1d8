// StreamConfig validation (no server) and, against throwaway PostgreSQL 15
// clusters, every preflight failure, the replica identity warnings, and
// provisioning: publications before the slot, idempotence, FOR TABLE lists,
// existing publications left untouched, and objects created concurrently.
#include "replication/pg/provisioning.h"

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "replication/pg/pg_conn.h"
#include "replication/pg/replication_connection.h"
#include "replication/pg/table_checks.h"
#include "replication/stream_config.h"
#include "replication/retry.h"
#include "replication/sql_text.h"
#include "tests/testing/pg_cluster.h"
#include "tests/testing/status_matchers.h"

namespace walfeed::replication::pg {
namespace {

using ::testing::AllOf;
using ::testing::Contains;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;
using ::testing::SizeIs;
using ::walfeed::testing::IsOk;
using ::walfeed::testing::PgCluster;
using ::walfeed::testing::StatusIs;

constexpr char kSlot[] = "walfeed_slot";
constexpr char kPublication[] = "walfeed_pub";

StreamConfig ValidConfig() {
  StreamConfig config;
  config.name = "orders";
  config.conninfo = "host=127.0.0.1 dbname=app";
  config.slot_name = kSlot;
  config.publication_names = {kPublication};
  return config;
}

// ---------------------------------------------------------------------------
// Validation and command text (no server).

TEST(StreamConfigTest, AcceptsValidConfig) {
  StreamConfig config = ValidConfig();
  config.tables = {"public.orders", "Sales.Line Items"};
  EXPECT_THAT(config.Validate(), IsOk());
}

TEST(StreamConfigTest, RejectsSlotNamesPostgresRefuses) {
  for (const std::string& slot : std::vector<std::string>{"", "Upper", "with-dash", "with space",
                                                          std::string(64, 'a'), "caf\xc3\xa9"}) {
    StreamConfig config = ValidConfig();
    config.slot_name = slot;
    EXPECT_THAT(config.Validate(),
                StatusIs(absl::StatusCode::kInvalidArgument,
                         AllOf(HasSubstr("slot_name"),
                               HasSubstr("only lower-case letters, digits and underscores"),
                               HasSubstr("at most 63"))))
        << slot;
  }
  StreamConfig config = ValidConfig();
  config.slot_name = std::string(63, 'a');
  EXPECT_THAT(config.Validate(), IsOk());
}

TEST(StreamConfigTest, RejectsBadPublicationNames) {
  StreamConfig config = ValidConfig();
  config.publication_names = {};
  EXPECT_THAT(config.Validate(), StatusIs(absl::StatusCode::kInvalidArgument,
                                          HasSubstr("publication_names is empty")));
  config.publication_names = {""};
  EXPECT_THAT(config.Validate(), StatusIs(absl::StatusCode::kInvalidArgument,
                                          HasSubstr("publication_names: publication name")));
  config.publication_names = {std::string(64, 'p')};
  EXPECT_THAT(config.Validate(),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       AllOf(HasSubstr("publication_names"), HasSubstr("at most 63 bytes"))));
  config.publication_names = {"a", "a"};
  EXPECT_THAT(config.Validate(), StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("twice")));
  config.publication_names = {"Mixed Case \"pub\"", std::string(63, 'p')};
  EXPECT_THAT(config.Validate(), IsOk());
}

TEST(StreamConfigTest, RejectsTablesNotOfTheFormSchemaDotTable) {
  for (const char* table : {"orders", "a.b.c", ".orders", "public.", "pub\nlic.t"}) {
    StreamConfig config = ValidConfig();
    config.tables = {table};
    EXPECT_THAT(config.Validate(),
                StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("tables: table")))
        << table;
  }
  StreamConfig config = ValidConfig();
  config.tables = {"public.t", "public.t"};
  EXPECT_THAT(config.Validate(),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("tables lists")));
}

TEST(StreamConfigTest, RejectsBadStreamNameAndEmptyConninfo) {
  StreamConfig config = ValidConfig();
  config.name = "no spaces";
  EXPECT_THAT(config.Validate(),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("name \"no spaces\"")));
  config = ValidConfig();
  config.conninfo = "  ";
  EXPECT_THAT(config.Validate(),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("conninfo is empty")));
}

TEST(StreamConfigTest, ParsesTableNamesLiterally) {
  absl::StatusOr<TableName> table = ParseTableName("Sales.Line\"Items");
  ASSERT_THAT(table, IsOk());
  EXPECT_EQ(table->schema, "Sales");
  EXPECT_EQ(table->table, "Line\"Items");
  EXPECT_EQ(table->Quoted(), "\"Sales\".\"Line\"\"Items\"");
}

TEST(StreamConfigTest, CommandTextQuotesIdentifiers) {
  StreamConfig config = ValidConfig();
  EXPECT_EQ(CreatePublicationSql(config, "p\"x"),
            "CREATE PUBLICATION \"p\"\"x\" FOR ALL TABLES WITH (publish_via_partition_root = true)");
  config.tables = {"public.Orders", "we\"ird.t"};
  EXPECT_EQ(CreatePublicationSql(config, "p"),
            "CREATE PUBLICATION \"p\" FOR TABLE \"public\".\"Orders\", \"we\"\"ird\".\"t\" "
            "WITH (publish_via_partition_root = true)");
  config.publish_via_partition_root = false;
  EXPECT_EQ(CreatePublicationSql(config, "p"),
            "CREATE PUBLICATION \"p\" FOR TABLE \"public\".\"Orders\", \"we\"\"ird\".\"t\"");
  EXPECT_EQ(CreateSlotSql("s_1"), "SELECT pg_create_logical_replication_slot('s_1', 'pgoutput')");
}

TEST(StreamConfigTest, PreflightAndProvisionValidateFirst) {
  StreamConfig config = ValidConfig();
  config.slot_name = "Bad";
  config.conninfo = "host=192.0.2.1 connect_timeout=1";  // Never contacted.
  EXPECT_THAT(Preflight(config), StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(Provision(config), StatusIs(absl::StatusCode::kInvalidArgument));
}

// ---------------------------------------------------------------------------
// Against a real server.

// Polls `condition` until it holds or `timeout` passes. Each poll is a server
// round trip or WAL-generating work, so there is no sleep.
bool WaitFor(const std::function<bool()>& condition, absl::Duration timeout) {
  const absl::Time deadline = absl::Now() + timeout;
  while (absl::Now() < deadline) {
    if (condition()) return true;
  }
  return condition();
}

class ProvisioningTest : public ::testing::Test {
 protected:
  void SetUp() override { WALFEED_START_PG_OR_SKIP(pg_, PgCluster::Options{}); }

  StreamConfig Config(bool create_missing = false) const {
    StreamConfig config = ValidConfig();
    config.conninfo = pg_->ConnInfo();
    config.create_missing = create_missing;
    return config;
  }

  void Sql(const std::string& sql) { ASSERT_THAT(pg_->Exec(sql), IsOk()) << sql; }

  std::vector<std::string> Rows(const std::string& sql) {
    absl::StatusOr<std::vector<std::string>> rows = pg_->Query(sql);
    EXPECT_THAT(rows, IsOk()) << sql;
    return rows.ok() ? *rows : std::vector<std::string>{};
  }

  std::string One(const std::string& sql) {
    absl::StatusOr<std::string> value = pg_->QueryValue(sql);
    EXPECT_THAT(value, IsOk()) << sql;
    return value.ok() ? *value : "";
  }

  std::vector<std::string> PublishedTables(const std::string& publication) {
    return Rows(
        absl::StrCat("SELECT schemaname || '.' || tablename FROM pg_publication_tables "
                     "WHERE pubname = '",
                     publication, "' ORDER BY 1"));
  }

  // A pgoutput slot and a publication of one table with a primary key.
  void CreateSlotAndPublication() {
    Sql("CREATE TABLE items (id int PRIMARY KEY, v text)");
    Sql(absl::StrCat("CREATE PUBLICATION ", kPublication, " FOR TABLE items"));
    Sql(absl::StrCat("SELECT pg_create_logical_replication_slot('", kSlot, "', 'pgoutput')"));
  }

  // Another process streaming from the slot over `holder` (publication
  // `publication`); returns its backend pid once the slot shows it active.
  std::string StreamFromSlot(PGconn* holder, const std::string& publication) {
    absl::StatusOr<PgResultPtr> pid_result = ExecSimple(holder, "SELECT pg_backend_pid()");
    EXPECT_THAT(pid_result, IsOk());
    if (!pid_result.ok()) return "";
    const std::string pid = Value(pid_result->get(), 0, 0).value_or("?");
    StartOptions start;
    start.slot_name = kSlot;
    start.publication_names = {publication};
    EXPECT_THAT(ExecSimple(holder, StartReplicationCommand(start)), IsOk());
    EXPECT_TRUE(WaitFor(
        [&] {
          return pg_->QueryValue(absl::StrCat("SELECT active_pid FROM pg_replication_slots "
                                              "WHERE slot_name = '",
                                              kSlot, "'"))
                     .value_or("") == pid;
        },
        absl::Seconds(30)));
    return pid;
  }

  std::unique_ptr<PgCluster> pg_;
};

TEST_F(ProvisioningTest, PreflightReportsExistingSlotAndPublication) {
  CreateSlotAndPublication();
  absl::StatusOr<PreflightReport> report = Preflight(Config());
  ASSERT_THAT(report, IsOk());
  EXPECT_GE(report->server_version_num, 150000);
  EXPECT_THAT(report->server_version, HasSubstr("15."));
  EXPECT_TRUE(report->slot_exists);
  EXPECT_EQ(report->confirmed_flush_lsn.ToString(),
            One(absl::StrCat("SELECT confirmed_flush_lsn FROM pg_replication_slots "
                             "WHERE slot_name = '",
                             kSlot, "'")));
  EXPECT_TRUE(report->restart_lsn.valid());
  EXPECT_EQ(report->wal_status, "reserved");
  EXPECT_THAT(report->existing_publications, ElementsAre(kPublication));
  EXPECT_TRUE(report->publications_exist());
  EXPECT_THAT(report->warnings, IsEmpty());
}

TEST_F(ProvisioningTest, MissingPublicationWithoutCreateMissingSaysHowToCreateIt) {
  StreamConfig config = Config();
  config.publication_names = {kPublication, "Other Pub"};
  config.tables = {"public.items"};
  Sql(absl::StrCat("CREATE PUBLICATION ", kPublication));
  EXPECT_THAT(Preflight(config), StatusIs(absl::StatusCode::kNotFound,
                                          HasSubstr("CREATE PUBLICATION \"Other Pub\" FOR TABLE "
                                                    "\"public\".\"items\"")));
  config.tables.clear();
  EXPECT_THAT(Preflight(config),
              StatusIs(absl::StatusCode::kNotFound,
                       HasSubstr("CREATE PUBLICATION \"Other Pub\" FOR ALL TABLES")));
}

TEST_F(ProvisioningTest, MissingSlotWithoutCreateMissingSaysHowToCreateIt) {
  Sql(absl::StrCat("CREATE PUBLICATION ", kPublication));
  const absl::StatusOr<PreflightReport> report = Preflight(Config());
  EXPECT_THAT(report, StatusIs(absl::StatusCode::kNotFound,
                               HasSubstr("SELECT pg_create_logical_replication_slot("
                                         "'walfeed_slot', 'pgoutput')")));
  // Provision without create_missing is just as strict and creates nothing.
  EXPECT_THAT(Provision(Config()), StatusIs(absl::StatusCode::kNotFound));
  EXPECT_EQ(One("SELECT count(*) FROM pg_replication_slots"), "0");
}

TEST_F(ProvisioningTest, RoleWithoutReplicationIsTold) {
  CreateSlotAndPublication();
  Sql("CREATE ROLE plain LOGIN");
  StreamConfig config = Config();
  config.conninfo = pg_->ConnInfo() + " user=plain";
  EXPECT_THAT(Preflight(config), StatusIs(absl::StatusCode::kPermissionDenied,
                                          HasSubstr("ALTER ROLE \"plain\" WITH REPLICATION")));
  Sql("ALTER ROLE plain WITH REPLICATION");
  EXPECT_THAT(Preflight(config), IsOk());
}

TEST_F(ProvisioningTest, SlotWithAnotherPluginIsRejected) {
  Sql(absl::StrCat("CREATE PUBLICATION ", kPublication));
  Sql(absl::StrCat("SELECT pg_create_logical_replication_slot('", kSlot, "', 'test_decoding')"));
  EXPECT_THAT(Preflight(Config(/*create_missing=*/true)),
              StatusIs(absl::StatusCode::kFailedPrecondition,
                       AllOf(HasSubstr("\"test_decoding\""), HasSubstr("needs \"pgoutput\""),
                             HasSubstr("set slot_name to an unused name"),
                             HasSubstr("pg_drop_replication_slot('walfeed_slot')"))));
}

TEST_F(ProvisioningTest, TemporarySlotIsRejected) {
  Sql(absl::StrCat("CREATE PUBLICATION ", kPublication));
  // A temporary slot lives as long as the session that created it.
  absl::StatusOr<PgConnPtr> holder = Connect(pg_->ConnInfo(), ConnectionKind::kReplication);
  ASSERT_THAT(holder, IsOk());
  ASSERT_THAT(ExecSimple(holder->get(), absl::StrCat("CREATE_REPLICATION_SLOT ", kSlot,
                                                     " TEMPORARY LOGICAL pgoutput "
                                                     "(SNAPSHOT 'nothing')")),
              IsOk());
  EXPECT_THAT(
      Preflight(Config(/*create_missing=*/true)),
      StatusIs(absl::StatusCode::kFailedPrecondition,
               AllOf(HasSubstr("is temporary"), HasSubstr("set slot_name to an unused name"))));
}

TEST_F(ProvisioningTest, TwoPhaseSlotIsRejected) {
  Sql(absl::StrCat("CREATE PUBLICATION ", kPublication));
  Sql(absl::StrCat("SELECT pg_create_logical_replication_slot('", kSlot,
                   "', 'pgoutput', false, true)"));
  EXPECT_THAT(Preflight(Config()),
              StatusIs(absl::StatusCode::kFailedPrecondition,
                       AllOf(HasSubstr("two_phase = true"),
                             HasSubstr("pg_drop_replication_slot('walfeed_slot')"))));
}

TEST_F(ProvisioningTest, PhysicalSlotAndSlotOfAnotherDatabaseAreRejected) {
  Sql(absl::StrCat("CREATE PUBLICATION ", kPublication));
  Sql(absl::StrCat("SELECT pg_create_physical_replication_slot('", kSlot, "')"));
  EXPECT_THAT(Preflight(Config()),
              StatusIs(absl::StatusCode::kFailedPrecondition, HasSubstr("is a physical slot")));
  Sql(absl::StrCat("SELECT pg_drop_replication_slot('", kSlot, "')"));
  Sql("CREATE DATABASE other");
  ASSERT_THAT(pg_->Exec(absl::StrCat("SELECT pg_create_logical_replication_slot('", kSlot,
                                     "', 'pgoutput')"),
                        "other"),
              IsOk());
  EXPECT_THAT(Preflight(Config()), StatusIs(absl::StatusCode::kFailedPrecondition,
                                            AllOf(HasSubstr("belongs to database \"other\""),
                                                  HasSubstr("fix the dbname in conninfo"))));
}

TEST_F(ProvisioningTest, SlotActiveInAnotherProcessIsTransient) {
  CreateSlotAndPublication();
  absl::StatusOr<PgConnPtr> holder = Connect(pg_->ConnInfo(), ConnectionKind::kReplication);
  ASSERT_THAT(holder, IsOk());
  const std::string pid = StreamFromSlot(holder->get(), kPublication);
  ASSERT_FALSE(::testing::Test::HasFailure());

  const absl::StatusOr<PreflightReport> report = Preflight(Config());
  EXPECT_THAT(report, StatusIs(absl::StatusCode::kUnavailable,
                               AllOf(HasSubstr("in use by process " + pid),
                                     HasSubstr("stop the other consumer"))));
  EXPECT_TRUE(IsTransient(report.status()));

  holder->reset();  // The walsender exits and releases the slot.
  ASSERT_TRUE(WaitFor(
      [&] {
        return pg_->QueryValue(absl::StrCat("SELECT active FROM pg_replication_slots "
                                            "WHERE slot_name = '",
                                            kSlot, "'"))
                   .value_or("") == "f";
      },
      absl::Seconds(30)));
  EXPECT_THAT(Preflight(Config()), IsOk());
}

TEST_F(ProvisioningTest, WarnsAboutPublishedTablesWithoutReplicaIdentity) {
  CreateSlotAndPublication();
  Sql("CREATE TABLE nopk (a int)");
  Sql("CREATE TABLE nothing (id int PRIMARY KEY); "
      "ALTER TABLE nothing REPLICA IDENTITY NOTHING");
  Sql("CREATE TABLE full_identity (a int); ALTER TABLE full_identity REPLICA IDENTITY FULL");
  Sql("CREATE TABLE dropped_index (a int NOT NULL); "
      "CREATE UNIQUE INDEX dropped_index_a ON dropped_index (a); "
      "ALTER TABLE dropped_index REPLICA IDENTITY USING INDEX dropped_index_a; "
      "DROP INDEX dropped_index_a");
  Sql("CREATE TABLE insert_only (a int)");
  Sql("CREATE TABLE parted (a int) PARTITION BY LIST (a); "
      "CREATE TABLE parted_1 PARTITION OF parted FOR VALUES IN (1)");
  Sql(absl::StrCat("ALTER PUBLICATION ", kPublication,
                   " ADD TABLE nopk, nothing, full_identity, dropped_index"));
  Sql("CREATE PUBLICATION inserts FOR TABLE insert_only WITH (publish = 'insert')");
  Sql("CREATE PUBLICATION by_root FOR TABLE parted WITH (publish_via_partition_root = true)");
  // The failure the warning predicts (E24).
  EXPECT_THAT(pg_->Exec("INSERT INTO nopk VALUES (1); UPDATE nopk SET a = 2"),
              StatusIs(absl::StatusCode::kInternal, HasSubstr("does not have a replica identity")));

  StreamConfig config = Config();
  config.publication_names = {kPublication, "inserts", "by_root"};
  absl::StatusOr<PreflightReport> report = Preflight(config);
  ASSERT_THAT(report, IsOk());
  ASSERT_THAT(report->warnings, SizeIs(4)) << ::testing::PrintToString(report->warnings);
  // Sorted by table; a partitioned table is judged by its leaves.
  EXPECT_THAT(report->warnings[0], AllOf(HasSubstr("table \"public\".\"dropped_index\""),
                                         HasSubstr("that index no longer exists")));
  EXPECT_THAT(report->warnings[1],
              AllOf(HasSubstr("table \"public\".\"nopk\""),
                    HasSubstr("REPLICA IDENTITY DEFAULT but no primary key"),
                    HasSubstr("ALTER TABLE \"public\".\"nopk\" REPLICA IDENTITY FULL")));
  EXPECT_THAT(report->warnings[2], AllOf(HasSubstr("table \"public\".\"nothing\""),
                                         HasSubstr("REPLICA IDENTITY NOTHING")));
  EXPECT_THAT(report->warnings[3], HasSubstr("table \"public\".\"parted_1\""));
}

// A partitioned table has no leaf to judge until its first partition, but it
// is published all the same: listed in tables, it draws no warning, before or
// after a partition without a replica identity comes (judged by its leaves).
TEST_F(ProvisioningTest, APartitionedTableWithoutPartitionsIsPublished) {
  CreateSlotAndPublication();
  Sql("CREATE TABLE parted (a int) PARTITION BY LIST (a)");
  Sql("CREATE PUBLICATION roots FOR TABLE parted WITH (publish_via_partition_root = true)");
  StreamConfig config = Config();
  config.publication_names = {"roots"};
  config.tables = {"public.parted"};
  absl::StatusOr<PreflightReport> report = Preflight(config);
  ASSERT_THAT(report, IsOk());
  EXPECT_THAT(report->warnings, IsEmpty()) << ::testing::PrintToString(report->warnings);

  Sql("CREATE TABLE parted_1 PARTITION OF parted FOR VALUES IN (1)");
  report = Preflight(config);
  ASSERT_THAT(report, IsOk());
  ASSERT_THAT(report->warnings, SizeIs(1)) << ::testing::PrintToString(report->warnings);
  EXPECT_THAT(report->warnings[0], AllOf(HasSubstr("table \"public\".\"parted_1\""),
                                         HasSubstr("no usable replica identity")));
}

// A stream's start-up defers the table warnings' queries (TableChecks) when
// every publication exists; PublishedTableWarnings() then finds exactly what
// Preflight() reports. With a publication missing nothing is deferred.
TEST_F(ProvisioningTest, DeferredTableChecksFindWhatPreflightFinds) {
  CreateSlotAndPublication();
  Sql("CREATE TABLE nopk (a int)");
  Sql("CREATE TABLE listed (id int PRIMARY KEY)");
  Sql(absl::StrCat("ALTER PUBLICATION ", kPublication, " ADD TABLE nopk"));
  StreamConfig config = Config();
  config.tables = {"public.nopk", "public.listed"};  // "listed" is not published.

  absl::StatusOr<PreflightReport> full = Preflight(config);
  ASSERT_THAT(full, IsOk());
  ASSERT_THAT(full->warnings, SizeIs(2)) << ::testing::PrintToString(full->warnings);
  EXPECT_THAT(full->warnings[0], HasSubstr("\"public\".\"listed\" is listed in tables"));
  EXPECT_THAT(full->warnings[1], HasSubstr("table \"public\".\"nopk\""));
  EXPECT_FALSE(full->table_checks_deferred);

  absl::StatusOr<Inspected> deferred = InspectForProvision(config, TableChecks::kDeferred);
  ASSERT_THAT(deferred, IsOk());
  EXPECT_TRUE(deferred->report.table_checks_deferred);
  EXPECT_THAT(deferred->report.warnings, IsEmpty());
  absl::StatusOr<std::vector<std::string>> later = PublishedTableWarnings(config);
  ASSERT_THAT(later, IsOk());
  EXPECT_EQ(*later, full->warnings);

  // On the walsender a stream's start-up streams on next (StartReads): the
  // same warnings, and the session's own timeouts are back afterwards.
  absl::StatusOr<PgConnPtr> walsender =
      Connect(absl::StrCat(pg_->ConnInfo(), " options='-c statement_timeout=7s'"),
              ConnectionKind::kReplication);
  ASSERT_THAT(walsender, IsOk());
  const SqlChannel channel(walsender->get(), ConnectionKind::kReplication);
  later = PublishedTableWarnings(channel, config);
  ASSERT_THAT(later, IsOk());
  EXPECT_EQ(*later, full->warnings);
  absl::StatusOr<PgResultPtr> timeouts =
      Exec(channel, "SELECT current_setting('statement_timeout'), current_setting('lock_timeout')");
  ASSERT_THAT(timeouts, IsOk());
  EXPECT_EQ(TextValue(timeouts->get(), 0, 0), "7s");
  EXPECT_EQ(TextValue(timeouts->get(), 0, 1), "0");

  config.publication_names = {kPublication, "not_yet"};
  config.create_missing = true;
  deferred = InspectForProvision(config, TableChecks::kDeferred);
  ASSERT_THAT(deferred, IsOk());
  EXPECT_FALSE(deferred->report.table_checks_deferred) << "a publication is to be created";
  EXPECT_THAT(deferred->report.warnings, Contains(HasSubstr("table \"public\".\"nopk\"")));
}

// A stream's start-up runs the preflight on the walsender it will stream on
// (simple query protocol, parameters inlined as literals): the report, the
// warnings and the errors are those of an ordinary SQL connection, for names
// that need quoting and escaping too.
TEST_F(ProvisioningTest, InspectionOnTheStreamsWalsenderFindsWhatAnSqlConnectionFinds) {
  const std::string publication = "it's a \\ \"pub\" $1";
  Sql("CREATE TABLE items (id int PRIMARY KEY, v text); CREATE TABLE nopk (a int)");
  Sql(absl::StrCat("CREATE PUBLICATION ", QuoteIdentifier(publication), " FOR TABLE items, nopk"));
  Sql(absl::StrCat("SELECT pg_create_logical_replication_slot('", kSlot, "', 'pgoutput')"));
  StreamConfig config = Config();
  config.publication_names = {publication};
  config.tables = {"public.items", "public.nopk", "public.unlisted"};
  absl::StatusOr<PgConnPtr> walsender = Connect(pg_->ConnInfo(), ConnectionKind::kReplication);
  ASSERT_THAT(walsender, IsOk());

  absl::StatusOr<Inspected> over_sql = InspectForProvision(config, TableChecks::kNow);
  absl::StatusOr<Inspected> over_walsender =
      InspectForProvision(config, TableChecks::kNow, walsender->get());
  ASSERT_THAT(over_sql, IsOk());
  ASSERT_THAT(over_walsender, IsOk());
  EXPECT_EQ(over_walsender->conn, nullptr) << "no connection of its own";
  const PreflightReport& want = over_sql->report;
  const PreflightReport& got = over_walsender->report;
  EXPECT_TRUE(got.slot_exists);
  EXPECT_EQ(got.server_version_num, want.server_version_num);
  EXPECT_EQ(got.confirmed_flush_lsn, want.confirmed_flush_lsn);
  EXPECT_EQ(got.restart_lsn, want.restart_lsn);
  EXPECT_EQ(got.wal_status, want.wal_status);
  EXPECT_THAT(got.existing_publications, ElementsAre(publication));
  EXPECT_THAT(got.missing_publications, IsEmpty());
  ASSERT_THAT(want.warnings, SizeIs(2)) << ::testing::PrintToString(want.warnings);
  EXPECT_EQ(got.warnings, want.warnings);

  // Errors: the same codes and messages.
  config.publication_names = {publication, "Other \\ Pub's"};
  const absl::Status missing_sql = InspectForProvision(config).status();
  EXPECT_THAT(missing_sql, StatusIs(absl::StatusCode::kNotFound,
                                    HasSubstr("CREATE PUBLICATION \"Other \\ Pub's\"")));
  EXPECT_EQ(InspectForProvision(config, TableChecks::kNow, walsender->get()).status(),
            missing_sql);
  config.publication_names = {publication};
  absl::StatusOr<PgConnPtr> holder = Connect(pg_->ConnInfo(), ConnectionKind::kReplication);
  ASSERT_THAT(holder, IsOk());
  StreamFromSlot(holder->get(), publication);
  ASSERT_FALSE(::testing::Test::HasFailure());
  const absl::Status in_use_sql = InspectForProvision(config).status();
  EXPECT_THAT(in_use_sql, StatusIs(absl::StatusCode::kUnavailable, HasSubstr("in use by process")));
  EXPECT_EQ(InspectForProvision(config, TableChecks::kNow, walsender->get()).status(),
            in_use_sql);
}

// An inspection on a walsender leaves no SQL connection behind; a publication
// still to be created is created over one Provision opens.
TEST_F(ProvisioningTest, ProvisionAfterAnInspectionOnAWalsenderCreatesThePublication) {
  Sql(absl::StrCat("SELECT pg_create_logical_replication_slot('", kSlot, "', 'pgoutput')"));
  absl::StatusOr<PgConnPtr> walsender = Connect(pg_->ConnInfo(), ConnectionKind::kReplication);
  ASSERT_THAT(walsender, IsOk());
  const StreamConfig config = Config(/*create_missing=*/true);
  absl::StatusOr<Inspected> inspected =
      InspectForProvision(config, TableChecks::kDeferred, walsender->get());
  ASSERT_THAT(inspected, IsOk());
  EXPECT_EQ(inspected->conn, nullptr);
  EXPECT_THAT(inspected->report.missing_publications, ElementsAre(kPublication));
  absl::StatusOr<ProvisionResult> result = Provision(config, *std::move(inspected));
  ASSERT_THAT(result, IsOk());
  EXPECT_TRUE(result->created_publication);
  EXPECT_FALSE(result->created_slot);
  EXPECT_THAT(result->report.warnings, Contains(HasSubstr("drop and recreate the slot")));
  EXPECT_EQ(One(absl::StrCat("SELECT count(*) FROM pg_publication WHERE pubname = '",
                             kPublication, "'")),
            "1");
}

TEST_F(ProvisioningTest, WarnsBeforeCreatingAPublication) {
  Sql("CREATE TABLE items (id int PRIMARY KEY)");
  Sql("CREATE TABLE nopk (a int)");
  Sql("CREATE TABLE parted (a int) PARTITION BY LIST (a); "
      "CREATE TABLE parted_1 PARTITION OF parted FOR VALUES IN (1)");
  // FOR ALL TABLES: every table, partitions included.
  StreamConfig config = Config(/*create_missing=*/true);
  absl::StatusOr<PreflightReport> report = Preflight(config);
  ASSERT_THAT(report, IsOk());
  EXPECT_FALSE(report->slot_exists);
  EXPECT_THAT(report->missing_publications, ElementsAre(kPublication));
  ASSERT_THAT(report->warnings, SizeIs(2));
  EXPECT_THAT(report->warnings[0], HasSubstr("table \"public\".\"nopk\""));
  EXPECT_THAT(report->warnings[1], HasSubstr("table \"public\".\"parted_1\""));
  // FOR TABLE: only the listed ones; a partitioned table by its leaves.
  config.tables = {"public.items", "public.parted"};
  report = Preflight(config);
  ASSERT_THAT(report, IsOk());
  ASSERT_THAT(report->warnings, SizeIs(1));
  EXPECT_THAT(report->warnings[0], HasSubstr("table \"public\".\"parted_1\""));
}

TEST_F(ProvisioningTest, TableToPublishMustExist) {
  StreamConfig config = Config(/*create_missing=*/true);
  config.tables = {"public.Items"};
  Sql("CREATE TABLE items (id int PRIMARY KEY)");  // Not "Items": names are exact.
  EXPECT_THAT(Preflight(config), StatusIs(absl::StatusCode::kNotFound,
                                          HasSubstr("\"public\".\"Items\" (listed in tables) "
                                                    "does not exist")));
  Sql("CREATE VIEW \"Items\" AS SELECT 1 AS one");
  EXPECT_THAT(Preflight(config),
              StatusIs(absl::StatusCode::kFailedPrecondition, HasSubstr("is not a table")));
}

TEST_F(ProvisioningTest, ProvisionCreatesPublicationThenSlot) {
  Sql("CREATE TABLE items (id int PRIMARY KEY); CREATE TABLE unlisted (id int PRIMARY KEY)");
  Sql("CREATE SCHEMA \"Sales\"; CREATE TABLE \"Sales\".\"Line Items\" (id int PRIMARY KEY)");
  StreamConfig config = Config(/*create_missing=*/true);
  config.tables = {"public.items", "Sales.Line Items"};
  absl::StatusOr<ProvisionResult> result = Provision(config);
  ASSERT_THAT(result, IsOk());
  EXPECT_TRUE(result->created_publication);
  EXPECT_TRUE(result->created_slot);
  EXPECT_TRUE(result->consistent_point.valid());
  EXPECT_TRUE(result->report.slot_exists);
  EXPECT_TRUE(result->report.publications_exist());
  EXPECT_THAT(result->report.warnings, IsEmpty());

  EXPECT_THAT(PublishedTables(kPublication), ElementsAre("Sales.Line Items", "public.items"));
  EXPECT_EQ(One(absl::StrCat("SELECT plugin || ' ' || slot_type || ' ' || temporary || ' ' || "
                             "two_phase || ' ' || confirmed_flush_lsn FROM pg_replication_slots "
                             "WHERE slot_name = '",
                             kSlot, "'")),
            absl::StrCat("pgoutput logical false false ", result->consistent_point.ToString()));
  // The publication committed before the slot began decoding: its creating
  // transaction is older than every transaction the slot decodes.
  EXPECT_EQ(One(absl::StrCat("SELECT (SELECT xmin::text::bigint FROM pg_publication WHERE "
                             "pubname = '",
                             kPublication,
                             "') < (SELECT catalog_xmin::text::bigint "
                             "FROM pg_replication_slots WHERE slot_name = '",
                             kSlot, "')")),
            "t");
}

TEST_F(ProvisioningTest, ProvisionIsIdempotent) {
  ASSERT_THAT(Provision(Config(/*create_missing=*/true)), IsOk());
  const std::string slot_before = One(absl::StrCat(
      "SELECT confirmed_flush_lsn FROM pg_replication_slots WHERE slot_name = '", kSlot, "'"));
  absl::StatusOr<ProvisionResult> again = Provision(Config(/*create_missing=*/true));
  ASSERT_THAT(again, IsOk());
  EXPECT_FALSE(again->created_publication);
  EXPECT_FALSE(again->created_slot);
  EXPECT_FALSE(again->consistent_point.valid());
  EXPECT_EQ(again->report.confirmed_flush_lsn.ToString(), slot_before);
  EXPECT_EQ(One("SELECT count(*) FROM pg_replication_slots"), "1");
  EXPECT_EQ(One("SELECT count(*) FROM pg_publication"), "1");
}

TEST_F(ProvisioningTest, ProvisionWithoutTablesPublishesAllTables) {
  ASSERT_THAT(Provision(Config(/*create_missing=*/true)), IsOk());
  EXPECT_EQ(One(absl::StrCat("SELECT puballtables FROM pg_publication WHERE pubname = '",
                             kPublication, "'")),
            "t");
}

TEST_F(ProvisioningTest, ProvisionNeverAltersAnExistingPublication) {
  Sql("CREATE TABLE items (id int PRIMARY KEY); CREATE TABLE other (id int PRIMARY KEY)");
  Sql(absl::StrCat("CREATE PUBLICATION ", kPublication, " FOR TABLE other"));
  StreamConfig config = Config(/*create_missing=*/true);
  config.tables = {"public.items"};
  absl::StatusOr<ProvisionResult> result = Provision(config);
  ASSERT_THAT(result, IsOk());
  EXPECT_FALSE(result->created_publication);
  EXPECT_TRUE(result->created_slot);
  EXPECT_THAT(PublishedTables(kPublication), ElementsAre("public.other"));
  ASSERT_THAT(result->report.warnings, SizeIs(1));
  EXPECT_THAT(result->report.warnings[0],
              AllOf(HasSubstr("\"public\".\"items\" is listed in tables but not published"),
                    HasSubstr("ALTER PUBLICATION \"walfeed_pub\" ADD TABLE")));
}

TEST_F(ProvisioningTest, ProvisionAcceptsASlotCreatedConcurrently) {
  provisioning_internal::Hooks hooks;
  hooks.before_create_slot = [&] {
    Sql(absl::StrCat("SELECT pg_create_logical_replication_slot('", kSlot, "', 'pgoutput')"));
  };
  absl::StatusOr<ProvisionResult> result =
      provisioning_internal::Provision(Config(/*create_missing=*/true), hooks);
  ASSERT_THAT(result, IsOk());
  EXPECT_TRUE(result->created_publication);
  EXPECT_FALSE(result->created_slot);
  EXPECT_TRUE(result->report.slot_exists);
}

TEST_F(ProvisioningTest, ProvisionRechecksAnIncompatibleSlotCreatedConcurrently) {
  provisioning_internal::Hooks hooks;
  hooks.before_create_slot = [&] {
    Sql(absl::StrCat("SELECT pg_create_logical_replication_slot('", kSlot, "', 'test_decoding')"));
  };
  EXPECT_THAT(provisioning_internal::Provision(Config(/*create_missing=*/true), hooks),
              StatusIs(absl::StatusCode::kFailedPrecondition, HasSubstr("test_decoding")));
}

TEST_F(ProvisioningTest, ProvisionAcceptsAPublicationCreatedConcurrently) {
  Sql("CREATE TABLE items (id int PRIMARY KEY); CREATE TABLE other (id int PRIMARY KEY)");
  StreamConfig config = Config(/*create_missing=*/true);
  config.tables = {"public.items"};
  provisioning_internal::Hooks hooks;
  hooks.before_create_publications = [&] {
    Sql(absl::StrCat("CREATE PUBLICATION ", kPublication, " FOR TABLE other"));
  };
  absl::StatusOr<ProvisionResult> result = provisioning_internal::Provision(config, hooks);
  ASSERT_THAT(result, IsOk());
  EXPECT_FALSE(result->created_publication);
  EXPECT_TRUE(result->created_slot);
  EXPECT_THAT(PublishedTables(kPublication), ElementsAre("public.other"));
}

TEST_F(ProvisioningTest, ProvisionWarnsWhenTheSlotIsOlderThanItsPublication) {
  Sql(absl::StrCat("SELECT pg_create_logical_replication_slot('", kSlot, "', 'pgoutput')"));
  absl::StatusOr<ProvisionResult> result = Provision(Config(/*create_missing=*/true));
  ASSERT_THAT(result, IsOk());
  EXPECT_TRUE(result->created_publication);
  EXPECT_FALSE(result->created_slot);
  ASSERT_THAT(result->report.warnings, SizeIs(1));
  EXPECT_THAT(result->report.warnings[0], HasSubstr("drop and recreate the slot"));
}

// ---------------------------------------------------------------------------
// Clusters with particular settings.

TEST(ProvisioningSettingsTest, WalLevelReplicaIsRejected) {
  std::unique_ptr<PgCluster> pg;
  WALFEED_START_PG_OR_SKIP(pg, (PgCluster::Options{{{"wal_level", "replica"}}}));
  StreamConfig config = ValidConfig();
  config.conninfo = pg->ConnInfo();
  config.create_missing = true;
  EXPECT_THAT(Preflight(config),
              StatusIs(absl::StatusCode::kFailedPrecondition,
                       HasSubstr("set wal_level = logical in postgresql.conf and restart "
                                 "PostgreSQL")));
}

TEST(ProvisioningSettingsTest, NoFreeReplicationSlot) {
  std::unique_ptr<PgCluster> pg;
  WALFEED_START_PG_OR_SKIP(pg, (PgCluster::Options{{{"max_replication_slots", "1"}}}));
  ASSERT_THAT(pg->Exec("SELECT pg_create_logical_replication_slot('someone_else', 'pgoutput')"),
              IsOk());
  StreamConfig config = ValidConfig();
  config.conninfo = pg->ConnInfo();
  config.create_missing = true;
  EXPECT_THAT(Preflight(config), StatusIs(absl::StatusCode::kResourceExhausted,
                                          HasSubstr("max_replication_slots = 1")));
  EXPECT_THAT(Provision(config), StatusIs(absl::StatusCode::kResourceExhausted));
  EXPECT_EQ(pg->QueryValue("SELECT count(*) FROM pg_publication").value_or(""), "0");
}

TEST(ProvisioningSettingsTest, NoFreeWalSender) {
  std::unique_ptr<PgCluster> pg;
  WALFEED_START_PG_OR_SKIP(pg, (PgCluster::Options{{{"max_wal_senders", "1"}}}));
  // Checked as a non-superuser, who sees other roles' walsenders only partly.
  ASSERT_THAT(pg->Exec("CREATE ROLE streamer LOGIN REPLICATION"), IsOk());
  StreamConfig config = ValidConfig();
  config.conninfo = pg->ConnInfo() + " user=streamer";
  config.create_missing = true;
  ASSERT_THAT(Preflight(config), IsOk());
  // An idle replication connection of another role already holds a WAL sender.
  absl::StatusOr<PgConnPtr> holder = Connect(pg->ConnInfo(), ConnectionKind::kReplication);
  ASSERT_THAT(holder, IsOk());
  EXPECT_THAT(Preflight(config),
              StatusIs(absl::StatusCode::kResourceExhausted, HasSubstr("max_wal_senders = 1")));

  // Once the slot exists, the stream's own walsender, inspected on, is the
  // one it needs: counted, not refused.
  // (Walsenders exit after their connection closes: wait until none is left.)
  const auto no_walsender = [&] {
    return pg->QueryValue("SELECT count(*) FROM pg_stat_replication").value_or("") == "0";
  };
  holder->reset();
  ASSERT_TRUE(WaitFor(no_walsender, absl::Seconds(30)));
  // (FOR ALL TABLES takes a superuser: created for the streamer, who creates the slot.)
  ASSERT_THAT(pg->Exec(absl::StrCat("CREATE PUBLICATION ", kPublication, " FOR ALL TABLES")),
              IsOk());
  ASSERT_THAT(Provision(config), IsOk());
  ASSERT_TRUE(WaitFor(no_walsender, absl::Seconds(30)));
  absl::StatusOr<PgConnPtr> own = Connect(config.conninfo, ConnectionKind::kReplication);
  ASSERT_THAT(own, IsOk());
  EXPECT_THAT(InspectForProvision(config, TableChecks::kNow, own->get()), IsOk());
  EXPECT_THAT(InspectForProvision(config), StatusIs(absl::StatusCode::kResourceExhausted));
}

TEST(ProvisioningSettingsTest, LostSlotIsDataLoss) {
  std::unique_ptr<PgCluster> pg;
  WALFEED_START_PG_OR_SKIP(pg, (PgCluster::Options{{{"max_slot_wal_keep_size", "'1MB'"}}}));
  StreamConfig config = ValidConfig();
  config.conninfo = pg->ConnInfo();
  config.create_missing = true;
  absl::StatusOr<ProvisionResult> provisioned = Provision(config);
  ASSERT_THAT(provisioned, IsOk());
  ASSERT_THAT(pg->Exec("CREATE TABLE filler (x int)"), IsOk());
  const std::string wal_status_sql =
      absl::StrCat("SELECT wal_status FROM pg_replication_slots WHERE slot_name = '", kSlot, "'");
  // Each round writes WAL, moves to a new segment and checkpoints, which is when
  // the server invalidates slots beyond max_slot_wal_keep_size.
  ASSERT_TRUE(WaitFor(
      [&] {
        return pg->Exec(
                     "INSERT INTO filler SELECT generate_series(1, 1000); "
                     "SELECT pg_switch_wal(); CHECKPOINT")
                   .ok() &&
               pg->QueryValue(wal_status_sql).value_or("") == "lost";
      },
      absl::Seconds(120)))
      << pg->QueryValue(wal_status_sql).value_or("?");
  const std::string confirmed = provisioned->consistent_point.ToString();
  EXPECT_THAT(Preflight(config),
              StatusIs(absl::StatusCode::kDataLoss,
                       AllOf(HasSubstr("replication slot \"walfeed_slot\""),
                             HasSubstr("changes committed since its confirmed_flush_lsn " +
                                       confirmed + " are gone"),
                             HasSubstr("Drop the slot"), HasSubstr("re-snapshot"))));
}

}  // namespace
}  // namespace walfeed::replication::pg
