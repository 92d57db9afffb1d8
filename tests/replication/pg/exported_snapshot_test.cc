// ExportedSnapshot against a real server: several connections import one
// snapshot, each query gets a connection of its own, and all of them see the
// same rows however the table changes meanwhile.
#include "replication/pg/exported_snapshot.h"

#include <string>
#include <thread>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "replication/pg/pg_conn.h"
#include "tests/testing/pg_cluster.h"
#include "tests/testing/status_matchers.h"
#include "tests/testing/wait.h"

namespace walfeed::replication::pg {
namespace {

using ::walfeed::testing::IsOk;
using ::walfeed::testing::PgCluster;
using ::walfeed::testing::StatusIs;

class ExportedSnapshotTest : public ::testing::Test {
 protected:
  void SetUp() override {
    WALFEED_START_PG_OR_SKIP(pg_, PgCluster::Options{});
    absl::StatusOr<PgConnPtr> writer = Connect(pg_->ConnInfo(), ConnectionKind::kSql);
    ASSERT_THAT(writer, IsOk());
    writer_ = std::move(*writer);
    ASSERT_THAT(Exec(writer_.get(), "CREATE TABLE t AS SELECT generate_series(1, 100) AS id"),
                IsOk());
    // A snapshot exported by an open transaction imports like the one
    // CREATE_REPLICATION_SLOT exports.
    absl::StatusOr<PgConnPtr> exporter = Connect(pg_->ConnInfo(), ConnectionKind::kSql);
    ASSERT_THAT(exporter, IsOk());
    exporter_ = std::move(*exporter);
    ASSERT_THAT(Exec(exporter_.get(), "BEGIN ISOLATION LEVEL REPEATABLE READ"), IsOk());
    absl::StatusOr<PgResultPtr> name = Exec(exporter_.get(), "SELECT pg_export_snapshot()");
    ASSERT_THAT(name, IsOk());
    name_ = *Value(name->get(), 0, 0);
  }

  std::string Count(ExportedSnapshot& snapshot) {
    absl::StatusOr<PgResultPtr> count = snapshot.Query("SELECT count(*) FROM t", {});
    EXPECT_THAT(count, IsOk());
    return count.ok() ? Value(count->get(), 0, 0).value_or("NULL") : "error";
  }

  std::unique_ptr<PgCluster> pg_;
  PgConnPtr writer_;
  PgConnPtr exporter_;
  std::string name_;
};

TEST_F(ExportedSnapshotTest, EveryConnectionSeesTheSnapshotNotLaterCommits) {
  ExportedSnapshot snapshot;
  ASSERT_THAT(snapshot.Import(pg_->ConnInfo(), name_, 3), IsOk());
  EXPECT_EQ(snapshot.connections(), 3);
  ASSERT_THAT(Exec(writer_.get(), "INSERT INTO t SELECT generate_series(101, 150)"), IsOk());
  // Three queries at once land on three connections; each sees 100 rows.
  std::string counts[3];
  std::thread others[2] = {std::thread([&] { counts[1] = Count(snapshot); }),
                           std::thread([&] { counts[2] = Count(snapshot); })};
  counts[0] = Count(snapshot);
  for (std::thread& other : others) other.join();
  for (const std::string& count : counts) EXPECT_EQ(count, "100");
}

// A query that blocks holds its connection; another query takes the next one
// instead of waiting behind it.
TEST_F(ExportedSnapshotTest, AQueryDoesNotWaitBehindABusyConnection) {
  ExportedSnapshot snapshot;
  ASSERT_THAT(snapshot.Import(pg_->ConnInfo(), name_, 2), IsOk());
  ASSERT_THAT(Exec(writer_.get(), "SELECT pg_advisory_lock(42)"), IsOk());
  std::thread blocked([&] {
    EXPECT_THAT(snapshot.Query("SELECT pg_advisory_xact_lock_shared(42)", {}), IsOk());
  });
  // The blocked query is waiting for the lock inside PostgreSQL.
  ASSERT_TRUE(::walfeed::testing::WaitUntil(
      [&] {
        absl::StatusOr<PgResultPtr> waiting =
            Exec(writer_.get(),
                 "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND NOT granted");
        return waiting.ok() && Value(waiting->get(), 0, 0) == "1";
      },
      absl::Seconds(20)));
  EXPECT_EQ(Count(snapshot), "100");  // Would hang on a single connection.
  ASSERT_THAT(Exec(writer_.get(), "SELECT pg_advisory_unlock(42)"), IsOk());
  blocked.join();
}

// A failed query ends the snapshot on its connection only; Release ends all.
TEST_F(ExportedSnapshotTest, AnErrorCostsOneConnectionAndReleaseEndsAll) {
  ExportedSnapshot snapshot;
  ASSERT_THAT(snapshot.Import(pg_->ConnInfo(), name_, 2), IsOk());
  EXPECT_FALSE(snapshot.Query("SELECT * FROM no_such_table", {}).ok());
  EXPECT_EQ(snapshot.connections(), 1);
  EXPECT_EQ(Count(snapshot), "100");
  snapshot.Release();
  EXPECT_FALSE(snapshot.held());
  EXPECT_THAT(snapshot.Query("SELECT 1", {}), StatusIs(absl::StatusCode::kFailedPrecondition));
}

TEST_F(ExportedSnapshotTest, ASnapshotThatIsGoneIsAnError) {
  ASSERT_THAT(Exec(exporter_.get(), "COMMIT"), IsOk());  // The export ends with it.
  ExportedSnapshot snapshot;
  EXPECT_FALSE(snapshot.Import(pg_->ConnInfo(), name_, 2).ok());
  EXPECT_FALSE(snapshot.held());
}

}  // namespace
}  // namespace walfeed::replication::pg
