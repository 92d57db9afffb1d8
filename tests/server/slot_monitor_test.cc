// SlotMonitor: one slot read at a time per stream, shared by the callers that
// want one, and callers that stop waiting at their deadline with the last
// figures and their age (a silent database must not hold a status call).
#include "server/slot_monitor.h"

#include <atomic>
#include <thread>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "gtest/gtest.h"
#include "tests/testing/wait.h"

namespace walfeed::server {
namespace {

using ::walfeed::testing::WaitUntil;

// A reader whose reads end only when the test lets them.
class GatedReader {
 public:
  absl::StatusOr<replication::SlotReport> Read() {
    const int n = ++started_;
    absl::MutexLock lock(&mu_);
    auto released = [this, n]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return released_ >= n; };
    mu_.Await(absl::Condition(&released));
    replication::SlotReport report;
    report.server_wal_lsn = replication::Lsn(static_cast<uint64_t>(n));
    return report;
  }
  // Lets reads up to number `n` finish.
  void Release(int n) {
    absl::MutexLock lock(&mu_);
    released_ = n;
  }
  int started() const { return started_.load(); }

 private:
  absl::Mutex mu_;
  int released_ ABSL_GUARDED_BY(mu_) = 0;
  std::atomic<int> started_{0};
};

TEST(SlotMonitorTest, ACallerStopsWaitingAtItsDeadlineWithTheLastFigures) {
  GatedReader reader;
  SlotMonitor monitor([&] { return reader.Read(); });
  // Nothing read yet, and PostgreSQL does not answer: no figures, not fresh.
  SlotMonitor::View view = monitor.Get(absl::Now(), absl::Now() + absl::Milliseconds(20));
  EXPECT_FALSE(view.report.has_value());
  EXPECT_FALSE(view.fresh);
  reader.Release(1);
  view = monitor.Get(absl::Now(), absl::Now() + absl::Seconds(30));
  ASSERT_TRUE(view.report.has_value());
  EXPECT_TRUE(view.fresh);
  EXPECT_EQ(view.report->server_wal_lsn, replication::Lsn(1));
  const absl::Time first_read = view.read_at;

  // Later, the database goes silent: the next caller gets read 1 back, marked
  // stale, at its deadline; the stuck read is not started twice.
  ASSERT_TRUE(WaitUntil([&] { return absl::Now() - first_read > SlotMonitor::kFresh; },
                        absl::Seconds(30)));
  view = monitor.Get(absl::Now(), absl::Now() + absl::Milliseconds(50));
  EXPECT_FALSE(view.fresh);
  ASSERT_TRUE(view.report.has_value());
  EXPECT_EQ(view.report->server_wal_lsn, replication::Lsn(1));
  EXPECT_EQ(view.read_at, first_read);
  monitor.Get(absl::Now(), absl::Now() + absl::Milliseconds(20));
  EXPECT_EQ(reader.started(), 2) << "one read at a time";
  reader.Release(2);
}

TEST(SlotMonitorTest, AFailedReadKeepsTheLastGoodFiguresAndSaysWhy) {
  int reads = 0;
  SlotMonitor monitor([&]() -> absl::StatusOr<replication::SlotReport> {
    if (++reads > 1) return absl::UnavailableError("connection refused");
    replication::SlotReport report;
    report.server_wal_lsn = replication::Lsn(7);
    return report;
  });
  SlotMonitor::View view = monitor.Get(absl::Now(), absl::Now() + absl::Seconds(30));
  ASSERT_TRUE(view.report.has_value());
  EXPECT_FALSE(view.error.has_value());
  const absl::Time good = view.read_at;
  ASSERT_TRUE(WaitUntil([&] { return absl::Now() - good > SlotMonitor::kFresh; },
                        absl::Seconds(30)));
  view = monitor.Get(absl::Now(), absl::Now() + absl::Seconds(30));
  EXPECT_TRUE(view.fresh) << "the failed read answered in time";
  ASSERT_TRUE(view.error.has_value());
  EXPECT_EQ(view.error->message(), "connection refused");
  ASSERT_TRUE(view.report.has_value()) << "the last good figures stay";
  EXPECT_EQ(view.report->server_wal_lsn, replication::Lsn(7));
  EXPECT_EQ(view.read_at, good);
}

TEST(SlotMonitorTest, StopAnswersWaitingCallersAtOnce) {
  GatedReader reader;
  SlotMonitor monitor([&] { return reader.Read(); });
  std::thread stopper([&] {
    WaitUntil([&] { return reader.started() == 1; }, absl::Seconds(30));
    monitor.Stop();
  });
  const absl::Time start = absl::Now();
  const SlotMonitor::View view = monitor.Get(start, start + absl::Seconds(30));
  EXPECT_LT(absl::Now() - start, absl::Seconds(10));
  EXPECT_FALSE(view.report.has_value());
  stopper.join();
  reader.Release(1);
}

TEST(SlotMonitorTest, CallersThatAskTogetherShareOneRead) {
  GatedReader reader;
  SlotMonitor monitor([&] { return reader.Read(); });
  std::vector<std::thread> callers;
  std::atomic<int> fresh{0};
  for (int i = 0; i < 8; ++i) {
    callers.emplace_back([&] {
      if (monitor.Get(absl::Now(), absl::Now() + absl::Seconds(30)).fresh) ++fresh;
    });
  }
  ASSERT_TRUE(WaitUntil([&] { return reader.started() == 1; }, absl::Seconds(30)));
  reader.Release(1);
  for (std::thread& t : callers) t.join();
  EXPECT_EQ(fresh.load(), 8);
  EXPECT_EQ(reader.started(), 1);
  reader.Release(100);
}

}  // namespace
}  // namespace walfeed::server
