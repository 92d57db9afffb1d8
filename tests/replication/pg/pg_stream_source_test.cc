// PgStreamSource against a real PostgreSQL 15: the replication connection its
// start-up keeps for the reader (PreparedStream::walsender) is held only while
// this process is about to stream. An instance that loses the lead between
// preparing and running holds no WAL sender as a standby. Waits are on
// conditions with deadlines.
#include "replication/pg/pg_stream_source.h"

#include <memory>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/testing/pg_cluster.h"
#include "tests/testing/status_matchers.h"
#include "tests/testing/wait.h"

namespace walfeed::replication::pg {
namespace {

using ::walfeed::testing::IsOk;
using ::walfeed::testing::PgCluster;
using ::walfeed::testing::WaitUntil;

constexpr absl::Duration kDeadline = absl::Seconds(30);

class PgStreamSourceTest : public ::testing::Test {
 protected:
  void SetUp() override {
    PgCluster::Options options;
    options.settings["log_connections"] = "on";
    WALFEED_START_PG_OR_SKIP(pg_, options);
    // The slot exists before the first start: the start-up keeps the
    // connection it reads the slot over.
    ASSERT_THAT(pg_->Exec("CREATE TABLE t (id int PRIMARY KEY);"
                          "CREATE PUBLICATION pub FOR TABLE t"),
                IsOk());
    ASSERT_THAT(pg_->Exec("SELECT pg_create_logical_replication_slot('s', 'pgoutput')"),
                IsOk());
  }

  SourceOptions Options() {
    SourceOptions options;
    options.config.name = "orders";
    options.config.conninfo = pg_->ConnInfo();
    options.config.slot_name = "s";
    options.config.publication_names = {"pub"};
    options.config.tables = {"public.t"};
    options.instance_id = "test-instance";
    return options;
  }

  // Walsender backends connected (pg_stat_replication lists those that are
  // not streaming yet too).
  int WalSenders() {
    return std::stoi(
        pg_->QueryValue("SELECT count(*) FROM pg_stat_replication").value_or("-1"));
  }

  // Connections (of either kind) the server log records from byte `from` on.
  int ConnectionsSince(size_t from) {
    const std::string log = pg_->Log();
    const std::string what = "connection authorized:";
    int count = 0;
    for (size_t at = log.find(what, from); at != std::string::npos;
         at = log.find(what, at + what.size())) {
      ++count;
    }
    return count;
  }

  std::unique_ptr<PgCluster> pg_;
};

// A stream's start opens three connections, each a backend start (tens of
// milliseconds of a loaded server's CPU): the lead's, the checkpoint store's and
// the walsender it streams on. The table warnings are looked for on the
// walsender before it streams, and with no backfill tables in the schema the
// backfill runner's load opens none.
TEST_F(PgStreamSourceTest, AStartOpensOnlyTheLeadTheStoreAndTheWalsender) {
  ASSERT_THAT(pg_->Exec("CREATE TABLE nopk (a int); ALTER PUBLICATION pub ADD TABLE nopk"),
              IsOk());
  const size_t from = pg_->Log().size();
  {
    PgStreamSource source(Options());
    absl::StatusOr<bool> leads = source.TryLead();
    ASSERT_THAT(leads, IsOk());
    ASSERT_TRUE(*leads);
    absl::StatusOr<PreparedSource> prepared = source.Prepare();
    ASSERT_THAT(prepared, IsOk());
    EXPECT_THAT(prepared->warnings,
                ::testing::Contains(::testing::HasSubstr("table \"public\".\"nopk\"")))
        << "the table checks ran before the stream started";
    absl::StatusOr<std::vector<BackfillDatabase::Loaded>> backfills =
        source.NewBackfillDatabase()->Load("orders");
    ASSERT_THAT(backfills, IsOk());
    EXPECT_THAT(*backfills, ::testing::IsEmpty());
  }  // Waits for whatever the source still runs.
  EXPECT_EQ(ConnectionsSince(from), 3) << pg_->Log().substr(from);

  // Once the schema has backfill tables, a start loads from them.
  ASSERT_THAT(pg_->Exec("CREATE TABLE walfeed.backfill_chunks (backfill_id bigint)"), IsOk());
  PgStreamSource source(Options());
  absl::StatusOr<bool> leads = source.TryLead();
  ASSERT_THAT(leads, IsOk());
  ASSERT_TRUE(*leads);
  ASSERT_THAT(source.Prepare(), IsOk());
  EXPECT_THAT(source.NewBackfillDatabase()->Load("orders").status(),
              ::testing::Not(IsOk()))
      << "it looked for the backfills table, which this schema lacks";
}

TEST_F(PgStreamSourceTest, ALeadLostBeforeTheRunLeavesNoWalSenderHeld) {
  PgStreamSource source(Options());
  absl::StatusOr<bool> leads = source.TryLead();
  ASSERT_THAT(leads, IsOk());
  ASSERT_TRUE(*leads);
  ASSERT_THAT(source.Prepare(), IsOk());
  // Kept for the reader's first session.
  ASSERT_TRUE(WaitUntil([&] { return WalSenders() == 1; }, kDeadline));
  // The supervisor resigns when a lead check fails before it runs.
  source.Resign();
  EXPECT_TRUE(WaitUntil([&] { return WalSenders() == 0; }, kDeadline))
      << "a standby must not hold an idle WAL sender";
}

}  // namespace
}  // namespace walfeed::replication::pg
