// ConfirmedPersister: the reader's stores happen on another thread, coalesce, and
// only what was stored is reported durable.
#include "replication/confirmed_persister.h"

#include <vector>

#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace walfeed::replication {
namespace {

using ::testing::ElementsAre;

// Each write waits until the test lets it finish, and can be told to fail.
class GatedStore : public ConfirmedLsnStore {
 public:
  absl::Status PersistConfirmed(Lsn lsn) override {
    absl::MutexLock lock(&mu_);
    writes_.push_back(lsn);
    auto open = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return gates_ > 0; };
    mu_.Await(absl::Condition(&open));
    --gates_;
    return fail_ ? absl::UnavailableError("server restarting") : absl::OkStatus();
  }
  void Open(int writes, bool fail = false) {
    absl::MutexLock lock(&mu_);
    gates_ += writes;
    fail_ = fail;
  }
  void AwaitWrites(size_t n) {
    absl::MutexLock lock(&mu_);
    auto enough = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return writes_.size() >= n; };
    mu_.Await(absl::Condition(&enough));
  }
  std::vector<Lsn> writes() {
    absl::MutexLock lock(&mu_);
    return writes_;
  }

 private:
  absl::Mutex mu_;
  int gates_ ABSL_GUARDED_BY(mu_) = 0;
  bool fail_ ABSL_GUARDED_BY(mu_) = false;
  std::vector<Lsn> writes_ ABSL_GUARDED_BY(mu_);
};

TEST(ConfirmedPersisterTest, RequestReturnsAtOnceAndDurableFollowsTheStore) {
  GatedStore store;
  ConfirmedPersister persister(&store, Lsn(0x10), nullptr);
  persister.Request(Lsn(0x20));  // The store holds it: Request must not wait.
  store.AwaitWrites(1);
  EXPECT_EQ(persister.durable(), Lsn(0x10)) << "not durable until the write returns";
  store.Open(1);
  ASSERT_TRUE(persister.AwaitIdle(absl::Seconds(30)));
  EXPECT_EQ(persister.durable(), Lsn(0x20));
}

TEST(ConfirmedPersisterTest, RequestsDuringAWriteCoalesceToTheNewest) {
  GatedStore store;
  ConfirmedPersister persister(&store, Lsn(0x10), nullptr);
  persister.Request(Lsn(0x20));
  store.AwaitWrites(1);
  persister.Request(Lsn(0x30));
  persister.Request(Lsn(0x40));
  persister.Request(Lsn(0x35));  // Lower than the one waiting: ignored.
  store.Open(2);
  ASSERT_TRUE(persister.AwaitIdle(absl::Seconds(30)));
  EXPECT_THAT(store.writes(), ElementsAre(Lsn(0x20), Lsn(0x40)));
  EXPECT_EQ(persister.durable(), Lsn(0x40));
}

TEST(ConfirmedPersisterTest, AFailedWriteKeepsTheOldPositionAndReportsOnce) {
  GatedStore store;
  absl::Mutex mu;
  int stored_calls = 0;  // Guarded by mu.
  ConfirmedPersister persister(&store, Lsn(0x10), [&] {
    absl::MutexLock lock(&mu);
    ++stored_calls;
  });
  store.Open(1, /*fail=*/true);
  persister.Request(Lsn(0x20));
  ASSERT_TRUE(persister.AwaitIdle(absl::Seconds(30)));
  EXPECT_EQ(persister.durable(), Lsn(0x10));
  std::optional<absl::Status> error = persister.TakeError();
  ASSERT_TRUE(error.has_value());
  EXPECT_TRUE(absl::IsUnavailable(*error));
  EXPECT_FALSE(persister.TakeError().has_value());
  // The next request tries again.
  store.Open(1);
  persister.Request(Lsn(0x20));
  ASSERT_TRUE(persister.AwaitIdle(absl::Seconds(30)));
  EXPECT_EQ(persister.durable(), Lsn(0x20));
  // The wake-up follows the write's completion (after AwaitIdle may return).
  absl::MutexLock lock(&mu);
  auto woken_twice = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) { return stored_calls == 2; };
  EXPECT_TRUE(mu.AwaitWithTimeout(absl::Condition(&woken_twice), absl::Seconds(30)))
      << "the reader is woken after every write";
}

TEST(ConfirmedPersisterTest, NothingAtOrBelowDurableIsWritten) {
  GatedStore store;
  ConfirmedPersister persister(&store, Lsn(0x10), nullptr);
  persister.Request(Lsn(0x10));
  persister.Request(Lsn(0x08));
  ASSERT_TRUE(persister.AwaitIdle(absl::Seconds(30)));
  EXPECT_TRUE(store.writes().empty());
}

}  // namespace
}  // namespace walfeed::replication
