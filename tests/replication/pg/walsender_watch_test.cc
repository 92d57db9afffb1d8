// WalSenderWatch against a real server: a streaming session's walsender is
// seen holding its slot, another pid is not, and a silent server costs the
// check's deadline, never a hang.
#include "replication/pg/walsender_watch.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <functional>
#include <memory>
#include <string>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "replication/pg/pg_conn.h"
#include "replication/pg/replication_connection.h"
#include "tests/testing/pg_cluster.h"
#include "tests/testing/status_matchers.h"
#include "tests/testing/wait.h"

namespace walfeed::replication::pg {
namespace {

using ::testing::HasSubstr;
using ::walfeed::testing::IsOk;
using ::walfeed::testing::PgCluster;
using ::walfeed::testing::StatusIs;

bool Eventually(const std::function<bool()>& condition) {
  return ::walfeed::testing::WaitUntil(condition, absl::Seconds(20));
}

// A TCP listener that never accepts: the kernel completes handshakes, nothing answers.
class SilentListener {
 public:
  SilentListener() : fd_(socket(AF_INET, SOCK_STREAM, 0)) {
    sockaddr_in address{};
    address.sin_family = AF_INET;
    address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    bound_ = fd_ >= 0 && bind(fd_, reinterpret_cast<sockaddr*>(&address), sizeof(address)) == 0 &&
             listen(fd_, 4) == 0;
    socklen_t length = sizeof(address);
    if (bound_ && getsockname(fd_, reinterpret_cast<sockaddr*>(&address), &length) == 0) {
      port_ = ntohs(address.sin_port);
    }
  }
  ~SilentListener() {
    if (fd_ >= 0) close(fd_);
  }
  bool ok() const { return bound_ && port_ != 0; }
  std::string ConnInfo() const {
    return absl::StrCat("host=127.0.0.1 port=", port_, " dbname=postgres user=postgres");
  }

 private:
  int fd_;
  bool bound_ = false;
  int port_ = 0;
};

class WalSenderWatchTest : public ::testing::Test {
 protected:
  void SetUp() override {
    WALFEED_START_PG_OR_SKIP(pg_, PgCluster::Options{});
    absl::StatusOr<PgConnPtr> sql = Connect(pg_->ConnInfo(), ConnectionKind::kSql);
    ASSERT_THAT(sql, IsOk());
    ASSERT_THAT(Exec(sql->get(), "CREATE PUBLICATION pub FOR ALL TABLES"), IsOk());
    ASSERT_THAT(Exec(sql->get(), "SELECT pg_create_logical_replication_slot('s', 'pgoutput')"),
                IsOk());
    absl::StatusOr<std::unique_ptr<PgReplicationConnection>> rc =
        PgReplicationConnection::Connect(pg_->ConnInfo());
    ASSERT_THAT(rc, IsOk());
    streaming_ = std::move(*rc);
    StartOptions start;
    start.slot_name = "s";
    start.publication_names = {"pub"};
    ASSERT_THAT(streaming_->Start(start), IsOk());
    pid_ = PQbackendPID(streaming_->pg());
  }

  std::unique_ptr<PgCluster> pg_;
  std::unique_ptr<PgReplicationConnection> streaming_;
  int pid_ = 0;
};

TEST_F(WalSenderWatchTest, TheStreamingWalsenderHoldsItsSlotAndNoOtherPidDoes) {
  const absl::Time deadline = absl::Now() + absl::Seconds(10);
  const auto holds = [&](int pid, const std::string& slot) {
    absl::StatusOr<bool> held = WalSenderWatch::HoldsSlot(pg_->ConnInfo(), slot, pid, deadline);
    EXPECT_THAT(held, IsOk());
    return held.ok() && *held;
  };
  EXPECT_TRUE(holds(pid_, "s"));
  EXPECT_FALSE(holds(pid_ + 1, "s"));
  EXPECT_FALSE(holds(pid_, "no_such_slot"));
}

// What the reader uses: a check asked for on the connection itself confirms.
TEST_F(WalSenderWatchTest, AStreamingConnectionConfirmsItsOwnWalsender) {
  EXPECT_EQ(streaming_->alive_confirmations(), 0u);
  streaming_->RequestAliveCheck();
  EXPECT_TRUE(Eventually([&] { return streaming_->alive_confirmations() >= 1; }));
  EXPECT_EQ(streaming_->alive_check_failure(), "");
}

TEST_F(WalSenderWatchTest, AWalsenderThatEndedIsReportedAsNotHoldingTheSlot) {
  WalSenderWatch watch(pg_->ConnInfo(), "s", pid_, absl::Seconds(10));
  absl::StatusOr<PgConnPtr> sql = Connect(pg_->ConnInfo(), ConnectionKind::kSql);
  ASSERT_THAT(sql, IsOk());
  ASSERT_THAT(Exec(sql->get(), "SELECT pg_terminate_backend($1::int)", {absl::StrCat(pid_)}),
              IsOk());
  // The slot is released when the walsender exits.
  ASSERT_TRUE(Eventually([&] {
    absl::StatusOr<PgResultPtr> active =
        Exec(sql->get(), "SELECT active FROM pg_replication_slots WHERE slot_name = 's'");
    return active.ok() && Value(active->get(), 0, 0) == "f";
  }));
  watch.Request();
  ASSERT_TRUE(Eventually([&] { return watch.failures() >= 1; }));
  EXPECT_EQ(watch.confirmations(), 0u);
  EXPECT_THAT(watch.last_failure(), HasSubstr("no longer holds slot s"));
}

// A black hole (the server accepts, never answers) costs the deadline.
TEST(WalSenderWatchSilentTest, ASilentServerCostsTheDeadlineNotAHang) {
  SilentListener silent;
  ASSERT_TRUE(silent.ok());
  const absl::Time start = absl::Now();
  EXPECT_THAT(WalSenderWatch::HoldsSlot(silent.ConnInfo(), "s", 1, start + absl::Seconds(1)),
              StatusIs(absl::StatusCode::kDeadlineExceeded, HasSubstr("no answer")));
  const absl::Duration took = absl::Now() - start;
  EXPECT_GE(took, absl::Seconds(1));
  EXPECT_LT(took, absl::Seconds(3));

  std::atomic<bool> stop{true};
  EXPECT_THAT(WalSenderWatch::HoldsSlot(silent.ConnInfo(), "s", 1,
                                        absl::Now() + absl::Seconds(30), &stop),
              StatusIs(absl::StatusCode::kCancelled));
}

// Destroying a watch whose check is stuck in a black hole returns promptly: a
// reader's session must end on time.
TEST(WalSenderWatchSilentTest, DestroyingAWatchStuckInACheckIsPrompt) {
  SilentListener silent;
  ASSERT_TRUE(silent.ok());
  auto watch = std::make_unique<WalSenderWatch>(silent.ConnInfo(), "s", 1, absl::Seconds(60));
  watch->Request();
  const absl::Time start = absl::Now();
  watch.reset();
  EXPECT_LT(absl::Now() - start, absl::Seconds(1));
}

}  // namespace
}  // namespace walfeed::replication::pg
