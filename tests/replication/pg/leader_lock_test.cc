// LeaderLock against a real PostgreSQL 15: one holder at a time, standbys
// learn the holder's address, a holder that cannot renew its lease loses it
// before PostgreSQL frees the lock for another, and an instance ends its own
// stale session instead of waiting for the lease to run out.
#include "replication/pg/leader_lock.h"

#include "absl/strings/str_cat.h"
#include "replication/pg/pg_conn.h"
#include "absl/time/clock.h"
#include "gtest/gtest.h"
#include "tests/chaos/tcp_proxy.h"
#include "tests/testing/pg_cluster.h"
#include "tests/testing/status_matchers.h"
#include "tests/testing/wait.h"

namespace walfeed::replication::pg {
namespace {

using ::walfeed::testing::IsOk;
using ::walfeed::testing::PgCluster;
using ::walfeed::testing::WaitUntil;

class LeaderLockTest : public ::testing::Test {
 protected:
  void SetUp() override { WALFEED_START_PG_OR_SKIP(pg_, PgCluster::Options{}); }

  std::unique_ptr<LeaderLock> Lock(const std::string& instance, const std::string& advertise,
                                   const std::string& conninfo = "") {
    return std::make_unique<LeaderLock>(LeaderLock::Options{
        conninfo.empty() ? pg_->ConnInfo() : conninfo, "walfeed/orders", instance,
        [advertise] { return advertise; }, "walfeed_orders",
        StreamWalsenderName("walfeed", "orders")});
  }

  std::unique_ptr<PgCluster> pg_;
};

TEST_F(LeaderLockTest, OneHolderAtATimeAndStandbysLearnWhere) {
  std::unique_ptr<LeaderLock> a = Lock("aaaa0001", "10.0.0.1:50051");
  std::unique_ptr<LeaderLock> b = Lock("bbbb0002", "10.0.0.2:50051");
  ASSERT_EQ(a->TryAcquire().value_or(false), true);
  EXPECT_EQ(a->TryAcquire().value_or(false), true) << "already held: still true";
  EXPECT_EQ(b->TryAcquire().value_or(true), false);
  EXPECT_EQ(b->holder(), "10.0.0.1:50051");
  EXPECT_THAT(a->Check(), IsOk());
  // Another stream's lock is another lock.
  LeaderLock other(LeaderLock::Options{pg_->ConnInfo(), "walfeed/inventory", "bbbb0002",
                                       [] { return std::string("10.0.0.2:50051"); },
                                       "walfeed_inventory",
                                       StreamWalsenderName("walfeed", "inventory")});
  EXPECT_EQ(other.TryAcquire().value_or(false), true);

  a->Release();
  EXPECT_FALSE(a->held());
  EXPECT_TRUE(WaitUntil([&] { return b->TryAcquire().value_or(false); }, absl::Seconds(10)));
  EXPECT_EQ(a->TryAcquire().value_or(true), false);
  EXPECT_EQ(a->holder(), "10.0.0.2:50051");
}

TEST_F(LeaderLockTest, AHolderCutOffLosesItsLeaseBeforeAnotherCanTakeIt) {
  absl::StatusOr<std::unique_ptr<chaos::TcpProxy>> proxy = chaos::TcpProxy::Start();
  ASSERT_THAT(proxy, IsOk());
  (*proxy)->SetUpstream(pg_->port());
  std::unique_ptr<LeaderLock> a = Lock(
      "aaaa0001", "10.0.0.1:50051",
      absl::StrCat(pg_->ConnInfo(), " host=127.0.0.1 port=", (*proxy)->port()));
  std::unique_ptr<LeaderLock> b = Lock("bbbb0002", "10.0.0.2:50051");
  ASSERT_EQ(a->TryAcquire().value_or(false), true);
  ASSERT_THAT(a->Check(), IsOk());

  const absl::Time cut = absl::Now();
  (*proxy)->Stall(chaos::TcpProxy::kBoth, cut + absl::Seconds(60));
  // The holder checks as the supervisor does; a round trip already under way
  // in the proxy may still pass once.
  absl::Status lost;
  ASSERT_TRUE(WaitUntil(
      [&] {
        lost = a->Check();
        return !lost.ok();
      },
      absl::Seconds(10), absl::Milliseconds(500)));
  const absl::Duration a_lost = absl::Now() - cut;
  EXPECT_EQ(lost.code(), absl::StatusCode::kUnavailable) << lost;
  EXPECT_FALSE(a->held());
  EXPECT_LE(a_lost, absl::Milliseconds(500) + LeaderLock::kCheckTimeout + absl::Seconds(1));
  // PostgreSQL frees the lock only when the lease runs out.
  ASSERT_TRUE(WaitUntil([&] { return b->TryAcquire().value_or(false); }, absl::Seconds(30),
                        absl::Milliseconds(50)));
  const absl::Duration b_took = absl::Now() - cut;
  EXPECT_GT(b_took, a_lost);
  EXPECT_GE(b_took, LeaderLock::kServerTimeout - absl::Milliseconds(500))
      << "the lock was freed before the lease ran out";
  std::cout << "[leader] cut off: lost after " << absl::FormatDuration(a_lost)
            << ", taken over after " << absl::FormatDuration(b_took) << "\n";
}

TEST_F(LeaderLockTest, AnInstanceEndsItsOwnStaleSessionAtOnce) {
  absl::StatusOr<std::unique_ptr<chaos::TcpProxy>> proxy = chaos::TcpProxy::Start();
  ASSERT_THAT(proxy, IsOk());
  (*proxy)->SetUpstream(pg_->port());
  std::unique_ptr<LeaderLock> before = Lock(
      "aaaa0001", "10.0.0.1:50051",
      absl::StrCat(pg_->ConnInfo(), " host=127.0.0.1 port=", (*proxy)->port()));
  ASSERT_EQ(before->TryAcquire().value_or(false), true);
  (*proxy)->Stall(chaos::TcpProxy::kBoth, absl::Now() + absl::Seconds(60));
  // The same instance (same id) over another path: its old session still
  // holds the lock as far as PostgreSQL knows.
  std::unique_ptr<LeaderLock> after = Lock("aaaa0001", "10.0.0.1:50051");
  const absl::Time start = absl::Now();
  EXPECT_EQ(after->TryAcquire().value_or(false), true);
  EXPECT_LT(absl::Now() - start, LeaderLock::kServerTimeout / 2);
}

// A walsender still streaming the stream's slot under the stream's own name
// belongs to a deposed leader: taking the lock ends it, so the new leader need
// not wait for wal_sender_timeout. Another client streaming the slot is left
// alone, another walfeed stream's too (misconfigured onto the same slot: its
// start is refused as SLOT_SHARED, which must not cost the other a session).
TEST_F(LeaderLockTest, TakingTheLockEndsADeposedLeadersWalsenderOnly) {
  ASSERT_THAT(pg_->Exec("CREATE PUBLICATION p FOR ALL TABLES"), IsOk());
  ASSERT_THAT(pg_->Exec("SELECT pg_create_logical_replication_slot('walfeed_orders', 'pgoutput')"),
              IsOk());
  auto slot_holder = [&]() {
    return pg_->QueryValue("SELECT coalesce(active_pid::text, '') FROM pg_replication_slots "
                           "WHERE slot_name = 'walfeed_orders'")
        .value_or("?");
  };
  auto stream_as = [&](const std::string& application) -> PgConnPtr {
    absl::StatusOr<PgConnPtr> conn = Connect(
        absl::StrCat(pg_->ConnInfo(), " application_name='", application, "'"),
        ConnectionKind::kReplication);
    EXPECT_THAT(conn, IsOk());
    if (!conn.ok()) return nullptr;
    PgResultPtr started(PQexec(conn->get(),
                               "START_REPLICATION SLOT walfeed_orders LOGICAL 0/0 "
                               "(proto_version '1', publication_names 'p')"));
    EXPECT_EQ(PQresultStatus(started.get()), PGRES_COPY_BOTH) << PQerrorMessage(conn->get());
    return std::move(conn).value();
  };

  for (const std::string& other :
       {std::string("pg_recvlogical"), std::string(kDefaultApplicationName),
        StreamWalsenderName("walfeed", "inventory"), StreamWalsenderName("cdc", "orders")}) {
    PgConnPtr foreign = stream_as(other);
    ASSERT_NE(foreign, nullptr);
    ASSERT_TRUE(WaitUntil([&] { return !slot_holder().empty(); }, absl::Seconds(30)));
    const std::string foreign_pid = slot_holder();
    std::unique_ptr<LeaderLock> first = Lock("aaaa0001", "10.0.0.1:50051");
    ASSERT_EQ(first->TryAcquire().value_or(false), true);
    EXPECT_EQ(slot_holder(), foreign_pid) << "not this stream's (" << other << "): left alone";
    first->Release();
    foreign.reset();
    ASSERT_TRUE(WaitUntil([&] { return slot_holder().empty(); }, absl::Seconds(30)));
  }

  PgConnPtr deposed = stream_as(StreamWalsenderName("walfeed", "orders"));
  ASSERT_NE(deposed, nullptr);
  ASSERT_TRUE(WaitUntil([&] { return !slot_holder().empty(); }, absl::Seconds(30)));
  std::unique_ptr<LeaderLock> second = Lock("aaaa0002", "10.0.0.2:50051");
  ASSERT_EQ(second->TryAcquire().value_or(false), true);
  // pg_terminate_backend waited (up to 3 s) for it to be gone.
  EXPECT_EQ(slot_holder(), "") << "the deposed leader's walsender still holds the slot";
}

}  // namespace
}  // namespace walfeed::replication::pg
