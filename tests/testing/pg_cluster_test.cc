// The integration-test cluster itself: logical WAL, overridable settings, and
// restarts that keep the data.
#include "tests/testing/pg_cluster.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/testing/status_matchers.h"

namespace walfeed::testing {
namespace {

TEST(PgClusterTest, StartsWithLogicalWalAndOverrides) {
  std::unique_ptr<PgCluster> pg;
  PgCluster::Options options;
  options.settings["wal_sender_timeout"] = "'7s'";
  WALFEED_START_PG_OR_SKIP(pg, options);
  EXPECT_EQ(*pg->QueryValue("SHOW wal_level"), "logical");
  EXPECT_EQ(*pg->QueryValue("SHOW wal_sender_timeout"), "7s");
  EXPECT_EQ(*pg->QueryValue("SHOW TimeZone"), "UTC");
}

TEST(PgClusterTest, SurvivesImmediateRestart) {
  std::unique_ptr<PgCluster> pg;
  WALFEED_START_PG_OR_SKIP(pg, PgCluster::Options{});
  ASSERT_THAT(pg->Exec("CREATE TABLE t (id int); INSERT INTO t VALUES (1), (2)"), IsOk());
  ASSERT_THAT(pg->Restart("immediate"), IsOk()) << pg->Log();
  // Committed rows survive a crash (fsync is off for speed, but the OS keeps the
  // page cache; synchronous_commit stays on so commits reach the WAL).
  absl::StatusOr<std::string> count = pg->QueryValue("SELECT count(*) FROM t");
  ASSERT_THAT(count, IsOk());
  EXPECT_EQ(*count, "2");
}

}  // namespace
}  // namespace walfeed::testing
