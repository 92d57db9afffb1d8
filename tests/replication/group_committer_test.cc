// GroupCommitter against an in-memory fake store whose Commit can be held, so
// batches are built deterministically (no database; PgCheckpointStore's own tests
// are in tests/replication/pg/checkpoint_store_test.cc).
#include "replication/group_committer.h"

#include <algorithm>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/testing/status_matchers.h"

namespace walfeed::replication {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;
using ::testing::Not;
using ::testing::Pair;
using ::testing::SizeIs;
using ::testing::UnorderedElementsAre;
using ::walfeed::testing::IsOk;
using ::walfeed::testing::StatusIs;

EventId Id(uint64_t commit_lsn, uint32_t index) { return EventId{Lsn(commit_lsn), index}; }

struct CommitCall {
  std::string stream;
  absl::flat_hash_map<std::string, EventId> acks;
  std::optional<Lsn> confirmed;
};

// Keeps checkpoints in memory with the store's cumulative semantics. Commits can
// be held (the writer blocks inside Commit until released) and made to fail.
class FakeStore : public CheckpointStore {
 public:
  // Commits that start from now on block until ReleaseCommits().
  void HoldCommits() {
    absl::MutexLock lock(&mu_);
    hold_ = true;
  }
  void ReleaseCommits() {
    absl::MutexLock lock(&mu_);
    hold_ = false;
  }
  // Waits until a writer is blocked inside a held Commit.
  void AwaitHeldCommit() {
    absl::MutexLock lock(&mu_);
    mu_.Await(absl::Condition(&held_));
  }
  // The next Commit for `stream` that starts fails with `status` (and stores nothing).
  void FailNextCommit(absl::string_view stream, absl::Status status) {
    absl::MutexLock lock(&mu_);
    failures_[stream] = std::move(status);
  }

  std::vector<CommitCall> calls() const {
    absl::MutexLock lock(&mu_);
    return calls_;
  }
  int regressions() const {
    absl::MutexLock lock(&mu_);
    return regressions_;
  }
  StreamCheckpoint stored(absl::string_view stream) const {
    absl::MutexLock lock(&mu_);
    auto it = streams_.find(stream);
    return it == streams_.end() ? StreamCheckpoint{} : it->second;
  }

  absl::StatusOr<StreamCheckpoint> Load(absl::string_view stream) override {
    return stored(stream);
  }

  absl::Status Commit(absl::string_view stream,
                      const std::vector<std::pair<std::string, EventId>>& acks,
                      std::optional<Lsn> confirmed_lsn) override {
    absl::MutexLock lock(&mu_);
    EXPECT_FALSE(in_commit_) << "two writers at once";
    in_commit_ = true;
    CommitCall call{std::string(stream), {}, confirmed_lsn};
    for (const auto& [consumer, id] : acks) {
      EXPECT_TRUE(call.acks.emplace(consumer, id).second) << "consumer twice in a batch";
    }
    calls_.push_back(call);
    absl::Status result = absl::OkStatus();
    if (auto failure = failures_.find(stream); failure != failures_.end()) {
      result = failure->second;
      failures_.erase(failure);
    }
    if (hold_) {
      held_ = true;
      mu_.Await(absl::Condition(
          +[](bool* hold) { return !*hold; }, &hold_));
      held_ = false;
    }
    in_commit_ = false;
    if (!result.ok()) return result;
    StreamCheckpoint& checkpoint = streams_[stream];
    for (const auto& [consumer, id] : acks) {
      auto [it, inserted] = checkpoint.consumers.emplace(consumer, id);
      if (inserted) continue;
      if (id < it->second) ++regressions_;
      if (id > it->second) checkpoint.detached.erase(consumer);
      it->second = std::max(it->second, id);
    }
    if (confirmed_lsn.has_value()) {
      checkpoint.confirmed_lsn = std::max(checkpoint.confirmed_lsn, *confirmed_lsn);
    }
    return absl::OkStatus();
  }

  absl::Status RemoveConsumer(absl::string_view stream, absl::string_view consumer) override {
    absl::MutexLock lock(&mu_);
    EXPECT_FALSE(in_commit_) << "RemoveConsumer during a Commit";
    streams_[stream].consumers.erase(consumer);
    return absl::OkStatus();
  }
  absl::Status DetachConsumer(absl::string_view stream, absl::string_view consumer) override {
    absl::MutexLock lock(&mu_);
    if (streams_[stream].consumers.contains(consumer)) streams_[stream].detached.insert(std::string(consumer));
    return absl::OkStatus();
  }

  absl::Status BindSlot(absl::string_view stream, absl::string_view slot_name,
                        const SlotIdentity& identity, Lsn confirmed_lsn) override {
    absl::MutexLock lock(&mu_);
    StreamCheckpoint& checkpoint = streams_[stream];
    checkpoint.slot_name = std::string(slot_name);
    checkpoint.slot_identity = identity;
    checkpoint.confirmed_lsn = confirmed_lsn;
    return absl::OkStatus();
  }

 private:
  mutable absl::Mutex mu_;
  bool hold_ ABSL_GUARDED_BY(mu_) = false;
  bool held_ ABSL_GUARDED_BY(mu_) = false;
  bool in_commit_ ABSL_GUARDED_BY(mu_) = false;
  absl::flat_hash_map<std::string, absl::Status> failures_ ABSL_GUARDED_BY(mu_);
  std::vector<CommitCall> calls_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_map<std::string, StreamCheckpoint> streams_ ABSL_GUARDED_BY(mu_);
  int regressions_ ABSL_GUARDED_BY(mu_) = 0;
};

class GroupCommitterTest : public ::testing::Test {
 protected:
  // Starts a writer whose Commit blocks (acking `consumer` on `stream`), and returns
  // once it is inside the store: everything queued from now on waits for the next
  // write.
  void StartHeldWriter(absl::string_view stream = "s", absl::string_view consumer = "first") {
    store_.HoldCommits();
    threads_.emplace_back([this, stream = std::string(stream), consumer = std::string(consumer)] {
      EXPECT_THAT(committer_.AckDurably(stream, consumer, Id(0x100, 0)), IsOk());
    });
    store_.AwaitHeldCommit();
  }
  void ReleaseAndJoin() {
    store_.ReleaseCommits();
    for (std::thread& t : threads_) t.join();
    threads_.clear();
  }

  FakeStore store_;
  GroupCommitter committer_{&store_};
  std::vector<std::thread> threads_;
};

TEST_F(GroupCommitterTest, SingleAckIsOneCommit) {
  EXPECT_THAT(committer_.AckDurably("s", "c", Id(0x200, 3)), IsOk());
  ASSERT_THAT(store_.calls(), SizeIs(1));
  EXPECT_THAT(store_.calls()[0].acks, UnorderedElementsAre(Pair("c", Id(0x200, 3))));
  EXPECT_EQ(store_.calls()[0].confirmed, std::nullopt);
  EXPECT_EQ(committer_.stats().commits, 1u);
  EXPECT_EQ(committer_.stats().acks_committed, 1u);
}

// 64 threads ack while a write is in flight: the 63 that queue behind it share one
// Commit.
TEST_F(GroupCommitterTest, AcksArrivingDuringAWriteShareTheNextCommit) {
  StartHeldWriter();
  std::vector<absl::Status> results(63);
  for (int i = 0; i < 63; ++i) {
    threads_.emplace_back([this, i, &results] {
      results[i] = committer_.AckDurably("s", absl::StrCat("c", i), Id(0x300, i));
    });
  }
  committer_.AwaitQueuedForTest(63);
  ReleaseAndJoin();

  for (const absl::Status& status : results) EXPECT_THAT(status, IsOk());
  const std::vector<CommitCall> calls = store_.calls();
  ASSERT_THAT(calls, SizeIs(2));
  EXPECT_THAT(calls[1].acks, SizeIs(63));
  const GroupCommitter::Stats stats = committer_.stats();
  EXPECT_EQ(stats.commits, 2u);
  EXPECT_EQ(stats.acks_committed, 64u);
  EXPECT_EQ(stats.failed_commits, 0u);
  EXPECT_EQ(store_.stored("s").consumers.size(), 64u);
  EXPECT_EQ(store_.stored("s").consumers.at("c62"), Id(0x300, 62));
}

TEST_F(GroupCommitterTest, AcksOfOneConsumerCollapseToTheHighestInABatch) {
  StartHeldWriter();
  for (uint32_t index : {7u, 9u, 8u}) {
    threads_.emplace_back(
        [this, index] { EXPECT_THAT(committer_.AckDurably("s", "c", Id(0x400, index)), IsOk()); });
  }
  committer_.AwaitQueuedForTest(3);
  ReleaseAndJoin();

  const std::vector<CommitCall> calls = store_.calls();
  ASSERT_THAT(calls, SizeIs(2));
  EXPECT_THAT(calls[1].acks, UnorderedElementsAre(Pair("c", Id(0x400, 9))));
  EXPECT_EQ(committer_.stats().acks_committed, 4u);
}

TEST_F(GroupCommitterTest, FailedCommitFailsEveryWaiterOfThatBatchOnly) {
  StartHeldWriter();
  store_.FailNextCommit("s", absl::UnavailableError("connection lost"));
  std::vector<absl::Status> results(10);
  for (int i = 0; i < 10; ++i) {
    threads_.emplace_back([this, i, &results] {
      results[i] = committer_.AckDurably("s", absl::StrCat("c", i), Id(0x500, 0));
    });
  }
  committer_.AwaitQueuedForTest(10);
  ReleaseAndJoin();  // The held writer's own ack succeeded (checked in its thread).

  for (const absl::Status& status : results) {
    EXPECT_THAT(status, StatusIs(absl::StatusCode::kUnavailable, HasSubstr("connection lost")));
  }
  GroupCommitter::Stats stats = committer_.stats();
  EXPECT_EQ(stats.commits, 2u);
  EXPECT_EQ(stats.failed_commits, 1u);
  EXPECT_EQ(stats.acks_failed, 10u);
  EXPECT_EQ(stats.acks_committed, 1u);
  EXPECT_THAT(store_.stored("s").consumers, SizeIs(1));

  // Nothing failed is remembered as durable: the client's retry is written.
  EXPECT_THAT(committer_.AckDurably("s", "c3", Id(0x500, 0)), IsOk());
  EXPECT_EQ(store_.stored("s").consumers.at("c3"), Id(0x500, 0));
  EXPECT_EQ(committer_.stats().commits, 3u);
}

TEST_F(GroupCommitterTest, EachStreamGetsItsOwnCommitAndStatus) {
  StartHeldWriter("a");
  store_.FailNextCommit("b", absl::FailedPreconditionError("b is broken"));
  absl::Status a_status, b_status1, b_status2;
  threads_.emplace_back([&] { a_status = committer_.AckDurably("a", "c", Id(0x600, 0)); });
  threads_.emplace_back([&] { b_status1 = committer_.AckDurably("b", "c", Id(0x600, 0)); });
  threads_.emplace_back([&] { b_status2 = committer_.AckDurably("b", "d", Id(0x600, 1)); });
  committer_.AwaitQueuedForTest(3);
  ReleaseAndJoin();

  EXPECT_THAT(a_status, IsOk());
  EXPECT_THAT(b_status1, StatusIs(absl::StatusCode::kFailedPrecondition));
  EXPECT_THAT(b_status2, StatusIs(absl::StatusCode::kFailedPrecondition));
  EXPECT_EQ(committer_.stats().commits, 3u);  // The held one, then one per stream.
  EXPECT_EQ(store_.stored("a").consumers.at("c"), Id(0x600, 0));
  EXPECT_THAT(store_.stored("b").consumers, IsEmpty());
}

TEST_F(GroupCommitterTest, AckAtOrBelowTheDurableOneNeedsNoWrite) {
  EXPECT_THAT(committer_.AckDurably("s", "c", Id(0x700, 5)), IsOk());
  EXPECT_THAT(committer_.AckDurably("s", "c", Id(0x700, 5)), IsOk());
  EXPECT_THAT(committer_.AckDurably("s", "c", Id(0x700, 4)), IsOk());
  EXPECT_THAT(committer_.AckDurably("s", "c", Id(0x6FF, 9)), IsOk());
  EXPECT_EQ(committer_.stats().commits, 1u);
  EXPECT_EQ(committer_.stats().acks_already_durable, 3u);
  EXPECT_EQ(store_.stored("s").consumers.at("c"), Id(0x700, 5));
  EXPECT_THAT(committer_.AckDurably("s", "c", Id(0x700, 6)), IsOk());
  EXPECT_EQ(store_.stored("s").consumers.at("c"), Id(0x700, 6));
  EXPECT_EQ(store_.regressions(), 0);
}

TEST_F(GroupCommitterTest, LoadSeedsWhatIsKnownDurable) {
  ASSERT_THAT(store_.Commit("s", {{"c", Id(0x800, 2)}}, Lsn(0x800)), IsOk());
  absl::StatusOr<StreamCheckpoint> loaded = committer_.Load("s");
  ASSERT_THAT(loaded, IsOk());
  EXPECT_EQ(loaded->consumers.at("c"), Id(0x800, 2));
  EXPECT_THAT(committer_.AckDurably("s", "c", Id(0x800, 1)), IsOk());
  EXPECT_THAT(committer_.SetConfirmed("s", Lsn(0x7FF)), IsOk());
  EXPECT_THAT(store_.calls(), SizeIs(1));  // Only the direct Commit above.
}

TEST_F(GroupCommitterTest, LoadForgetsWhatAnotherInstanceChangedMeanwhile) {
  EXPECT_THAT(committer_.AckDurably("s", "c", Id(0x900, 5)), IsOk());
  EXPECT_THAT(committer_.SetConfirmed("s", Lsn(0x900)), IsOk());
  // Another instance, leading meanwhile, removes c and binds the slot anew.
  ASSERT_THAT(store_.RemoveConsumer("s", "c"), IsOk());
  ASSERT_THAT(store_.BindSlot("s", "slot", SlotIdentity{}, Lsn(0x400)), IsOk());
  ASSERT_THAT(committer_.Load("s"), IsOk());
  // c subscribes again, as a new consumer: its first ack is lower than the one
  // this committer wrote before, and must be written all the same.
  EXPECT_THAT(committer_.AckDurably("s", "c", Id(0x900, 1)), IsOk());
  EXPECT_EQ(store_.stored("s").consumers.at("c"), Id(0x900, 1));
  EXPECT_THAT(committer_.SetConfirmed("s", Lsn(0x500)), IsOk());
  EXPECT_EQ(store_.stored("s").confirmed_lsn, Lsn(0x500));
}

// Many threads ack increasing ids with no coordination: however the batches fall,
// every call succeeds, no stored value ever regresses, and each consumer ends at
// its highest ack.
TEST_F(GroupCommitterTest, ConcurrentAcksNeverRegress) {
  constexpr int kThreads = 64;
  constexpr int kAcksPerThread = 50;
  for (int t = 0; t < kThreads; ++t) {
    threads_.emplace_back([this, t] {
      const std::string consumer = absl::StrCat("c", t % 8);  // 8 threads per consumer.
      for (int i = 0; i < kAcksPerThread; ++i) {
        EXPECT_THAT(committer_.AckDurably("s", consumer, Id(0x1000 + i, t)), IsOk());
      }
    });
  }
  for (std::thread& t : threads_) t.join();
  threads_.clear();

  const GroupCommitter::Stats stats = committer_.stats();
  EXPECT_EQ(stats.acks_committed + stats.acks_already_durable, uint64_t{kThreads * kAcksPerThread});
  EXPECT_LE(stats.commits, stats.acks_committed);
  EXPECT_EQ(store_.regressions(), 0);
  for (int c = 0; c < 8; ++c) {
    // The highest id of consumer c: the last ack of its highest-numbered thread.
    EXPECT_EQ(store_.stored("s").consumers.at(absl::StrCat("c", c)),
              Id(0x1000 + kAcksPerThread - 1, 56 + c));
  }
}

TEST_F(GroupCommitterTest, SetConfirmedRidesWithQueuedAcks) {
  StartHeldWriter();
  threads_.emplace_back(
      [this] { EXPECT_THAT(committer_.AckDurably("s", "c", Id(0x900, 0)), IsOk()); });
  threads_.emplace_back([this] { EXPECT_THAT(committer_.SetConfirmed("s", Lsn(0x8F0)), IsOk()); });
  committer_.AwaitQueuedForTest(2);
  ReleaseAndJoin();

  const std::vector<CommitCall> calls = store_.calls();
  ASSERT_THAT(calls, SizeIs(2));
  EXPECT_THAT(calls[1].acks, UnorderedElementsAre(Pair("c", Id(0x900, 0))));
  EXPECT_EQ(calls[1].confirmed, Lsn(0x8F0));
  EXPECT_EQ(committer_.stats().acks_committed, 2u);  // SetConfirmed is not an ack.
}

TEST_F(GroupCommitterTest, SetConfirmedAloneIsWrittenAndNeverLowered) {
  EXPECT_THAT(committer_.SetConfirmed("s", Lsn(0xA00)), IsOk());
  EXPECT_THAT(committer_.SetConfirmed("s", Lsn(0x9FF)), IsOk());  // Already covered.
  const std::vector<CommitCall> calls = store_.calls();
  ASSERT_THAT(calls, SizeIs(1));
  EXPECT_THAT(calls[0].acks, IsEmpty());
  EXPECT_EQ(calls[0].confirmed, Lsn(0xA00));
  EXPECT_EQ(store_.stored("s").confirmed_lsn, Lsn(0xA00));
}

TEST_F(GroupCommitterTest, RemoveConsumerForgetsItsDurableAck) {
  EXPECT_THAT(committer_.AckDurably("s", "c", Id(0xB00, 5)), IsOk());
  EXPECT_THAT(committer_.RemoveConsumer("s", "c"), IsOk());
  EXPECT_THAT(store_.stored("s").consumers, IsEmpty());
  // A consumer that comes back starts afresh, so its lower ack must be written.
  EXPECT_THAT(committer_.AckDurably("s", "c", Id(0xB00, 1)), IsOk());
  EXPECT_EQ(store_.stored("s").consumers.at("c"), Id(0xB00, 1));
}

TEST_F(GroupCommitterTest, BindSlotReplacesTheDurableConfirmedLsn) {
  EXPECT_THAT(committer_.SetConfirmed("s", Lsn(0xC00)), IsOk());
  EXPECT_THAT(committer_.BindSlot("s", "slot", SlotIdentity{1, 5, "pgoutput"}, Lsn(0x500)), IsOk());
  EXPECT_EQ(store_.stored("s").confirmed_lsn, Lsn(0x500));
  // 0x600 is below the old confirmed LSN but above the new binding: written.
  EXPECT_THAT(committer_.SetConfirmed("s", Lsn(0x600)), IsOk());
  EXPECT_EQ(store_.stored("s").confirmed_lsn, Lsn(0x600));
}

// Pass-throughs take the writer's turn: a removal never overlaps (or is undone by)
// a Commit in flight.
TEST_F(GroupCommitterTest, PassThroughsWaitForTheWriterInFlight) {
  StartHeldWriter();
  absl::Status removed;
  threads_.emplace_back([&] { removed = committer_.RemoveConsumer("s", "first"); });
  ReleaseAndJoin();
  EXPECT_THAT(removed, IsOk());
  EXPECT_THAT(store_.stored("s").consumers, IsEmpty());  // Removed after the write.
}

}  // namespace
}  // namespace walfeed::replication
