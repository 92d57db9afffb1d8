// Checkpoint store tests. GroupCommitter runs against an in-memory fake whose
// Commit can be held open, so batches are built deterministically (no sleeps);
// PgCheckpointStore runs against a throwaway PostgreSQL 15 cluster.
#include "replication/pg/checkpoint_store.h"

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
#include "tests/testing/pg_cluster.h"
#include "tests/testing/status_matchers.h"

namespace walfeed::replication::pg {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;
using ::testing::Not;
using ::testing::Pair;
using ::testing::SizeIs;
using ::testing::UnorderedElementsAre;
using ::walfeed::testing::IsOk;
using ::walfeed::testing::PgCluster;
using ::walfeed::testing::StatusIs;

EventId Id(uint64_t commit_lsn, uint32_t index) { return EventId{Lsn(commit_lsn), index}; }

// ---------------------------------------------------------------------------------
// GroupCommitter against a fake store.

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

// ---------------------------------------------------------------------------------
// PgCheckpointStore against PostgreSQL.

TEST(PgCheckpointStoreOptionsTest, RejectsSchemasTheReaderCouldNotFilterSafely) {
  for (const std::string& schema : {std::string(), std::string(64, 'a'), std::string("pg_walfeed"),
                                    std::string("public"), std::string("information_schema")}) {
    PgCheckpointStore::Options options;
    options.conninfo = "host=/nonexistent";
    options.schema = schema;
    EXPECT_THAT(PgCheckpointStore::Open(options), StatusIs(absl::StatusCode::kInvalidArgument))
        << schema;
  }
}

class PgCheckpointStoreTest : public ::testing::Test {
 protected:
  void SetUp() override { WALFEED_START_PG_OR_SKIP(pg_, PgCluster::Options{}); }

  std::unique_ptr<PgCheckpointStore> OpenStore(std::string schema = "walfeed") {
    PgCheckpointStore::Options options;
    options.conninfo = pg_->ConnInfo();
    options.schema = std::move(schema);
    absl::StatusOr<std::unique_ptr<PgCheckpointStore>> store = PgCheckpointStore::Open(options);
    EXPECT_THAT(store, IsOk());
    return store.ok() ? std::move(store).value() : nullptr;
  }

  std::unique_ptr<PgCluster> pg_;
};

TEST_F(PgCheckpointStoreTest, LoadOfUnknownStreamIsEmpty) {
  auto store = OpenStore();
  ASSERT_NE(store, nullptr);
  absl::StatusOr<StreamCheckpoint> checkpoint = store->Load("never-written");
  ASSERT_THAT(checkpoint, IsOk());
  EXPECT_EQ(checkpoint->confirmed_lsn, Lsn::kInvalid);
  EXPECT_FALSE(checkpoint->slot_bound());
  EXPECT_THAT(checkpoint->consumers, IsEmpty());
}

TEST_F(PgCheckpointStoreTest, CommitThenLoadRoundTrips) {
  auto store = OpenStore();
  ASSERT_NE(store, nullptr);
  // Names that would break a naive array literal, and the extremes of an id.
  const std::vector<std::pair<std::string, EventId>> acks = {
      {"plain", Id(0x16B374D848, 0)},
      {"quote\"and\\backslash", Id(0x1, 4294967295u)},
      {"NULL", Id(0xFFFFFFFFFFFFFFFF, 7)},
      {"{braces},comma and space", Id(0xA0000000, 1)},
      {"ünïcødé", Id(0x9, 2)},
  };
  ASSERT_THAT(store->Commit("orders", acks, Lsn(0x16B374D848)), IsOk());

  absl::StatusOr<StreamCheckpoint> checkpoint = store->Load("orders");
  ASSERT_THAT(checkpoint, IsOk());
  EXPECT_EQ(checkpoint->confirmed_lsn, Lsn(0x16B374D848));
  EXPECT_FALSE(checkpoint->slot_bound());  // Confirming does not bind a slot.
  EXPECT_THAT(checkpoint->consumers, SizeIs(acks.size()));
  for (const auto& [consumer, id] : acks) EXPECT_EQ(checkpoint->consumers.at(consumer), id);

  // pg_lsn prints as X/Y and sorts as a number (0/9 < 0/A0000000 < 16/B374D848).
  EXPECT_EQ(*pg_->QueryValue("SELECT confirmed_lsn::text FROM walfeed.stream_checkpoints"),
            "16/B374D848");
  EXPECT_THAT(*pg_->Query("SELECT commit_lsn::text FROM walfeed.consumer_checkpoints "
                          "ORDER BY commit_lsn"),
              ElementsAre("0/1", "0/9", "0/A0000000", "16/B374D848", "FFFFFFFF/FFFFFFFF"));
}

TEST_F(PgCheckpointStoreTest, StoredValuesNeverMoveBackwards) {
  auto store = OpenStore();
  ASSERT_NE(store, nullptr);
  ASSERT_THAT(store->Commit("s", {{"c", Id(0x200, 5)}}, Lsn(0x300)), IsOk());
  // Lower index, lower LSN with a higher index, lower confirmed: all ignored.
  ASSERT_THAT(store->Commit("s", {{"c", Id(0x200, 4)}}, Lsn(0x2FF)), IsOk());
  ASSERT_THAT(store->Commit("s", {{"c", Id(0x1FF, 99)}}, std::nullopt), IsOk());
  absl::StatusOr<StreamCheckpoint> checkpoint = store->Load("s");
  ASSERT_THAT(checkpoint, IsOk());
  EXPECT_EQ(checkpoint->consumers.at("c"), Id(0x200, 5));
  EXPECT_EQ(checkpoint->confirmed_lsn, Lsn(0x300));

  // The same consumer twice in one Commit counts with its highest id.
  ASSERT_THAT(store->Commit("s", {{"c", Id(0x200, 9)}, {"c", Id(0x200, 6)}}, Lsn(0x400)), IsOk());
  checkpoint = store->Load("s");
  ASSERT_THAT(checkpoint, IsOk());
  EXPECT_EQ(checkpoint->consumers.at("c"), Id(0x200, 9));
  EXPECT_EQ(checkpoint->confirmed_lsn, Lsn(0x400));
}

TEST_F(PgCheckpointStoreTest, StreamsAreIsolated) {
  auto store = OpenStore();
  ASSERT_NE(store, nullptr);
  ASSERT_THAT(store->Commit("a", {{"c", Id(0x10, 1)}}, Lsn(0x10)), IsOk());
  ASSERT_THAT(store->Commit("b", {{"c", Id(0x20, 2)}, {"d", Id(0x20, 3)}}, Lsn(0x20)), IsOk());
  ASSERT_THAT(store->RemoveConsumer("a", "c"), IsOk());

  absl::StatusOr<StreamCheckpoint> a = store->Load("a");
  absl::StatusOr<StreamCheckpoint> b = store->Load("b");
  ASSERT_THAT(a, IsOk());
  ASSERT_THAT(b, IsOk());
  EXPECT_THAT(a->consumers, IsEmpty());
  EXPECT_EQ(a->confirmed_lsn, Lsn(0x10));
  EXPECT_THAT(b->consumers, UnorderedElementsAre(Pair("c", Id(0x20, 2)), Pair("d", Id(0x20, 3))));
  EXPECT_EQ(b->confirmed_lsn, Lsn(0x20));
}

TEST_F(PgCheckpointStoreTest, RemoveConsumer) {
  auto store = OpenStore();
  ASSERT_NE(store, nullptr);
  ASSERT_THAT(store->Commit("s", {{"gone", Id(0x10, 0)}, {"kept", Id(0x10, 1)}}, std::nullopt),
              IsOk());
  ASSERT_THAT(store->RemoveConsumer("s", "gone"), IsOk());
  EXPECT_THAT(store->RemoveConsumer("s", "gone"), IsOk());  // Idempotent.
  absl::StatusOr<StreamCheckpoint> checkpoint = store->Load("s");
  ASSERT_THAT(checkpoint, IsOk());
  EXPECT_THAT(checkpoint->consumers, UnorderedElementsAre(Pair("kept", Id(0x10, 1))));

  // A removed consumer that comes back starts from its new ack, however low.
  ASSERT_THAT(store->Commit("s", {{"gone", Id(0x1, 0)}}, std::nullopt), IsOk());
  checkpoint = store->Load("s");
  ASSERT_THAT(checkpoint, IsOk());
  EXPECT_EQ(checkpoint->consumers.at("gone"), Id(0x1, 0));
}

TEST_F(PgCheckpointStoreTest, BindSlotRecordsIdentityAndReplacesConfirmed) {
  auto store = OpenStore();
  ASSERT_NE(store, nullptr);
  ASSERT_THAT(store->Commit("s", {{"c", Id(0x50, 0)}}, Lsn(0x900)), IsOk());
  const SlotIdentity identity{18446744073709551615u, 4294967295u, "pgoutput"};
  ASSERT_THAT(store->BindSlot("s", "walfeed_s", identity, Lsn(0x800)), IsOk());

  absl::StatusOr<StreamCheckpoint> checkpoint = store->Load("s");
  ASSERT_THAT(checkpoint, IsOk());
  EXPECT_EQ(checkpoint->slot_name, "walfeed_s");
  EXPECT_EQ(checkpoint->slot_identity, identity);
  EXPECT_EQ(checkpoint->confirmed_lsn, Lsn(0x800));       // Replaced, although lower.
  EXPECT_EQ(checkpoint->consumers.at("c"), Id(0x50, 0));  // Kept.

  // Confirming keeps the binding and is cumulative again.
  ASSERT_THAT(store->Commit("s", {}, Lsn(0x850)), IsOk());
  checkpoint = store->Load("s");
  ASSERT_THAT(checkpoint, IsOk());
  EXPECT_EQ(checkpoint->slot_name, "walfeed_s");
  EXPECT_EQ(checkpoint->confirmed_lsn, Lsn(0x850));
}

TEST_F(PgCheckpointStoreTest, SchemaCreationIsIdempotentUnderConcurrentOpens) {
  constexpr int kOpeners = 4;
  std::vector<absl::StatusOr<std::unique_ptr<PgCheckpointStore>>> stores(kOpeners);
  std::vector<std::thread> threads;
  for (int i = 0; i < kOpeners; ++i) {
    threads.emplace_back([this, i, &stores] {
      PgCheckpointStore::Options options;
      options.conninfo = pg_->ConnInfo();
      options.schema = "Walfeed Concurrent";  // Quoted: exact case and a space.
      stores[i] = PgCheckpointStore::Open(options);
    });
  }
  for (std::thread& t : threads) t.join();
  for (int i = 0; i < kOpeners; ++i) {
    ASSERT_THAT(stores[i], IsOk());
    EXPECT_EQ((*stores[i])->schema(), "Walfeed Concurrent");
    EXPECT_THAT((*stores[i])->Commit("s", {{absl::StrCat("c", i), Id(0x10, i)}}, std::nullopt),
                IsOk());
  }
  absl::StatusOr<StreamCheckpoint> checkpoint = (*stores[0])->Load("s");
  ASSERT_THAT(checkpoint, IsOk());
  EXPECT_THAT(checkpoint->consumers, SizeIs(kOpeners));
  EXPECT_EQ(*pg_->QueryValue("SELECT count(*) FROM pg_tables "
                             "WHERE schemaname = 'Walfeed Concurrent'"),
            "2");
}

// A creator that is not walfeed (so does not take walfeed's advisory lock) commits
// the schema while Open is creating it: Open's insert into the catalog then fails
// with unique_violation, and Open retries instead of failing.
TEST_F(PgCheckpointStoreTest, OpenRetriesAfterLosingACreationRace) {
  absl::StatusOr<PgConnPtr> foreign = Connect(pg_->ConnInfo(), ConnectionKind::kSql);
  ASSERT_THAT(foreign, IsOk());
  ASSERT_THAT(Exec(foreign->get(), "BEGIN"), IsOk());
  ASSERT_THAT(Exec(foreign->get(), "CREATE SCHEMA walfeed_race"), IsOk());

  absl::StatusOr<std::unique_ptr<PgCheckpointStore>> store;
  std::thread opener([this, &store] {
    PgCheckpointStore::Options options;
    options.conninfo = pg_->ConnInfo();
    options.schema = "walfeed_race";
    store = PgCheckpointStore::Open(options);
  });
  // Wait (with a deadline) until Open is blocked behind the uncommitted schema.
  const absl::Time deadline = absl::Now() + absl::Seconds(30);
  bool blocked = false;
  while (!blocked && absl::Now() < deadline) {
    absl::StatusOr<std::string> waiting = pg_->QueryValue(
        "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' "
        "AND query LIKE 'CREATE SCHEMA IF NOT EXISTS%'");
    blocked = waiting.ok() && *waiting == "1";
  }
  EXPECT_TRUE(blocked) << "Open never blocked on the foreign CREATE SCHEMA";
  ASSERT_THAT(Exec(foreign->get(), "COMMIT"), IsOk());
  opener.join();

  ASSERT_THAT(store, IsOk());
  EXPECT_THAT((*store)->Commit("s", {{"c", Id(0x10, 0)}}, std::nullopt), IsOk());
}

TEST_F(PgCheckpointStoreTest, OpensWithAnExistingSchemaAndExistingTables) {
  ASSERT_THAT(pg_->Exec("CREATE SCHEMA walfeed"), IsOk());
  auto first = OpenStore();
  ASSERT_NE(first, nullptr);
  ASSERT_THAT(first->Commit("s", {{"c", Id(0x10, 0)}}, Lsn(0x10)), IsOk());
  auto second = OpenStore();  // Everything exists now.
  ASSERT_NE(second, nullptr);
  absl::StatusOr<StreamCheckpoint> checkpoint = second->Load("s");
  ASSERT_THAT(checkpoint, IsOk());
  EXPECT_EQ(checkpoint->consumers.at("c"), Id(0x10, 0));
}

// An administrator created the tables; walfeed's role may not create anything.
TEST_F(PgCheckpointStoreTest, RoleWithoutCreatePrivilegeUsesExistingTables) {
  ASSERT_NE(OpenStore(), nullptr);  // As the superuser.
  ASSERT_THAT(pg_->Exec("CREATE ROLE app LOGIN; "
                        "REVOKE CREATE ON DATABASE postgres FROM PUBLIC; "
                        "GRANT USAGE ON SCHEMA walfeed TO app; "
                        "GRANT SELECT, INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA walfeed "
                        "TO app"),
              IsOk());
  PgCheckpointStore::Options options;
  options.conninfo = pg_->ConnInfo() + " user=app";
  absl::StatusOr<std::unique_ptr<PgCheckpointStore>> store = PgCheckpointStore::Open(options);
  ASSERT_THAT(store, IsOk());
  EXPECT_THAT((*store)->Commit("s", {{"c", Id(0x10, 0)}}, Lsn(0x10)), IsOk());

  // Without the tables the same role gets a definite error that names the schema.
  options.schema = "walfeed_other";
  EXPECT_THAT(PgCheckpointStore::Open(options),
              StatusIs(absl::StatusCode::kPermissionDenied, HasSubstr("walfeed_other")));
}

TEST_F(PgCheckpointStoreTest, ErrorsNameTheOperationNotTheStatement) {
  auto store = OpenStore();
  ASSERT_NE(store, nullptr);
  ASSERT_THAT(pg_->Exec("DROP TABLE walfeed.consumer_checkpoints"), IsOk());
  absl::Status status = store->Commit("s", {{"c", Id(0x10, 0)}}, std::nullopt);
  EXPECT_THAT(status, StatusIs(absl::StatusCode::kNotFound,
                               HasSubstr("committing checkpoints of stream \"s\"")));
  EXPECT_THAT(std::string(status.message()), Not(HasSubstr("INSERT")));
  EXPECT_EQ(SqlStateOf(status), "42P01");
}

TEST_F(PgCheckpointStoreTest, SurvivesAnImmediateRestart) {
  auto store = OpenStore();
  ASSERT_NE(store, nullptr);
  ASSERT_THAT(store->Commit("s", {{"c", Id(0x10, 1)}}, Lsn(0x10)), IsOk());
  ASSERT_THAT(pg_->Restart("immediate"), IsOk());

  // The store's connection died with the server; the next call reconnects.
  EXPECT_THAT(store->Commit("s", {{"d", Id(0x20, 2)}}, Lsn(0x20)), IsOk());
  EXPECT_EQ(store->connects(), 2u);
  absl::StatusOr<StreamCheckpoint> checkpoint = store->Load("s");
  ASSERT_THAT(checkpoint, IsOk());
  EXPECT_THAT(checkpoint->consumers,
              UnorderedElementsAre(Pair("c", Id(0x10, 1)), Pair("d", Id(0x20, 2))));
  EXPECT_EQ(checkpoint->confirmed_lsn, Lsn(0x20));
}

// pgoutput does publish the store's own rows under FOR ALL TABLES; this is why the
// stream reader must drop changes to the store's schema (see the header).
TEST_F(PgCheckpointStoreTest, CheckpointWritesAreDecodedUnderForAllTables) {
  auto store = OpenStore();
  ASSERT_NE(store, nullptr);
  ASSERT_THAT(pg_->Exec("CREATE PUBLICATION everything FOR ALL TABLES"), IsOk());
  ASSERT_THAT(pg_->Exec("SELECT pg_create_logical_replication_slot('peek', 'pgoutput')"), IsOk());
  ASSERT_THAT(store->Commit("s", {{"c", Id(0x10, 0)}}, Lsn(0x10)), IsOk());

  // Relation messages ('R') naming the store's schema and table.
  EXPECT_EQ(*pg_->QueryValue(
                "SELECT count(*) FROM pg_logical_slot_peek_binary_changes('peek', NULL, NULL, "
                "'proto_version', '1', 'publication_names', 'everything') "
                "WHERE get_byte(data, 0) = ascii('R') "
                "AND position(convert_to('walfeed', 'UTF8') IN data) > 0 "
                "AND position(convert_to('consumer_checkpoints', 'UTF8') IN data) > 0"),
            "1");
  // And the changes themselves: Insert ('I') into both tables.
  EXPECT_EQ(*pg_->QueryValue(
                "SELECT count(*) FROM pg_logical_slot_peek_binary_changes('peek', NULL, NULL, "
                "'proto_version', '1', 'publication_names', 'everything') "
                "WHERE get_byte(data, 0) = ascii('I')"),
            "2");
}

// GroupCommitter over the real store: concurrent acks all become durable.
TEST_F(PgCheckpointStoreTest, GroupCommitterOverPostgres) {
  auto store = OpenStore();
  ASSERT_NE(store, nullptr);
  GroupCommitter committer(store.get());
  std::vector<std::thread> threads;
  for (int t = 0; t < 16; ++t) {
    threads.emplace_back([&committer, t] {
      for (uint32_t i = 0; i < 20; ++i) {
        EXPECT_THAT(committer.AckDurably("s", absl::StrCat("c", t), Id(0x100 + i, i)), IsOk());
      }
    });
  }
  for (std::thread& t : threads) t.join();
  EXPECT_THAT(committer.SetConfirmed("s", Lsn(0x113)), IsOk());

  absl::StatusOr<StreamCheckpoint> checkpoint = committer.Load("s");
  ASSERT_THAT(checkpoint, IsOk());
  ASSERT_THAT(checkpoint->consumers, SizeIs(16));
  for (const auto& [consumer, id] : checkpoint->consumers) EXPECT_EQ(id, Id(0x113, 19));
  EXPECT_EQ(checkpoint->confirmed_lsn, Lsn(0x113));
  EXPECT_EQ(committer.stats().acks_committed, 16u * 20u);
  EXPECT_EQ(committer.stats().failed_commits, 0u);
}

}  // namespace
}  // namespace walfeed::replication::pg
