// StreamReader against a real PostgreSQL 15: ids, acks moving the slot, idle
// advance, restart semantics and backpressure. Waits are on conditions with
// deadlines; nothing sleeps.
#include "replication/pg/stream_reader.h"

#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/testing/pg_cluster.h"
#include "tests/testing/reader_harness.h"
#include "tests/testing/status_matchers.h"
#include "tests/testing/wait.h"

namespace walfeed::replication::pg {
namespace {

using ::walfeed::testing::IsOk;
using ::walfeed::testing::PgCluster;

constexpr absl::Duration kDeadline = absl::Seconds(30);

using ::walfeed::testing::CollectingSink;
using ::walfeed::testing::MemoryConfirmedStore;
using ::walfeed::testing::RunningReader;

class StreamReaderTest : public ::testing::Test {
 protected:
  void SetUp() override {
    PgCluster::Options options;
    // Short enough that BackpressureKeepsTheConnectionAlive outlasts it, long
    // enough that a loaded machine delaying the reader's 200 ms updates does not
    // end a session.
    options.settings["wal_sender_timeout"] = "'4s'";
    WALFEED_START_PG_OR_SKIP(pg_, options);
    ASSERT_THAT(pg_->Exec("CREATE TABLE t (id int PRIMARY KEY, v text);"
                          "CREATE TABLE quiet (id serial PRIMARY KEY, v text);"
                          "CREATE PUBLICATION pub FOR TABLE t"),
                IsOk());
    // Its own statement: a slot cannot be created in a transaction that wrote.
    ASSERT_THAT(pg_->Exec("SELECT pg_create_logical_replication_slot('s', 'pgoutput')"),
                IsOk());
  }

  ReaderOptions Options() {
    ReaderOptions options;
    options.stream_name = "test";
    options.conninfo = pg_->ConnInfo();
    options.slot_name = "s";
    options.publication_names = {"pub"};
    options.max_feedback_interval = absl::Milliseconds(200);
    options.min_persist_interval = absl::ZeroDuration();
    return options;
  }

  Lsn SlotConfirmed() {
    return *Lsn::Parse(*pg_->QueryValue(
        "SELECT confirmed_flush_lsn FROM pg_replication_slots WHERE slot_name = 's'"));
  }

  // Waits until the slot's confirmed_flush_lsn satisfies `pred`.
  bool WaitForSlot(const std::function<bool(Lsn)>& pred) {
    return ::walfeed::testing::WaitUntil([&] { return pred(SlotConfirmed()); }, kDeadline);
  }

  std::unique_ptr<PgCluster> pg_;
};

TEST_F(StreamReaderTest, DeliversEventsWithDeterministicIds) {
  AckTracker tracker(Lsn::kInvalid);
  CollectingSink sink;
  MemoryConfirmedStore store;
  RunningReader reader(Options(), &tracker, &sink, &store, Lsn::kInvalid);
  ASSERT_THAT(pg_->Exec("BEGIN; INSERT INTO t VALUES (1, 'a'), (2, 'b');"
                        "UPDATE t SET v = 'c' WHERE id = 1; COMMIT;"
                        "INSERT INTO quiet (v) VALUES ('unpublished');"
                        "INSERT INTO t VALUES (3, NULL)"),
              IsOk());
  ASSERT_TRUE(sink.WaitForCommits(2));
  std::vector<ChangeEvent> events = sink.events();
  ASSERT_EQ(events.size(), 4u);
  const Lsn first = events[0].id.commit_lsn;
  for (uint32_t i = 0; i < 3; ++i) {
    EXPECT_EQ(events[i].id, (EventId{first, i}));
    EXPECT_EQ(events[i].last_in_transaction, i == 2);
  }
  EXPECT_EQ(events[2].transaction_event_count, 3u);
  EXPECT_EQ(events[2].op, ChangeEvent::Op::kUpdate);
  EXPECT_EQ(events[2].new_tuple.columns[1].data, "c");
  EXPECT_GT(events[3].id.commit_lsn, first);
  EXPECT_EQ(events[3].id.index, 0u);
  EXPECT_EQ(events[3].new_tuple.columns[1].kind, pgoutput::TupleValue::Kind::kNull);
  EXPECT_THAT(reader.Stop(), IsOk());
}

// Whether the reader reads at once (0) or lets data accumulate between reads, a
// backlog of small transactions arrives whole, in commit order, with the ids and
// values each transaction gave it.
class ReadCoalesceTest : public StreamReaderTest,
                         public ::testing::WithParamInterface<absl::Duration> {};

TEST_P(ReadCoalesceTest, SmallTransactionsArriveWholeAndInOrder) {
  constexpr int kTransactions = 3000;
  AckTracker tracker(Lsn::kInvalid);
  CollectingSink sink;
  MemoryConfirmedStore store;
  ReaderOptions options = Options();
  options.read_coalesce = GetParam();
  RunningReader reader(options, &tracker, &sink, &store, Lsn::kInvalid);
  ASSERT_THAT(pg_->Exec(absl::StrCat("DO $$ BEGIN FOR i IN 1..", kTransactions,
                                     " LOOP INSERT INTO t VALUES (i, i::text); COMMIT; "
                                     "END LOOP; END $$")),
              IsOk());
  ASSERT_TRUE(sink.WaitForCommits(kTransactions));
  const std::vector<ChangeEvent> events = sink.events();
  ASSERT_EQ(events.size(), static_cast<size_t>(kTransactions));
  for (int i = 0; i < kTransactions; ++i) {
    ASSERT_EQ(events[i].id.index, 0u) << i;
    if (i > 0) {
      ASSERT_LT(events[i - 1].id.commit_lsn, events[i].id.commit_lsn) << i;
    }
    ASSERT_EQ(events[i].new_tuple.columns[1].data, std::to_string(i + 1)) << i;
  }
  EXPECT_EQ(reader.reader().stats().reconnects, 0u);
  EXPECT_THAT(reader.Stop(), IsOk());
}

INSTANTIATE_TEST_SUITE_P(Windows, ReadCoalesceTest,
                         ::testing::Values(absl::ZeroDuration(), absl::Milliseconds(1),
                                           absl::Milliseconds(20)),
                         [](const ::testing::TestParamInfo<absl::Duration>& info) {
                           return absl::StrCat(absl::ToInt64Milliseconds(info.param), "ms");
                         });

TEST_F(StreamReaderTest, OnlyAckedWorkMovesTheSlot) {
  AckTracker tracker(Lsn::kInvalid);
  ASSERT_THAT(tracker.AddConsumer("c", EventId{}), IsOk());
  CollectingSink sink;
  MemoryConfirmedStore store;
  RunningReader reader(Options(), &tracker, &sink, &store, Lsn::kInvalid);
  ASSERT_THAT(pg_->Exec("INSERT INTO t VALUES (1, 'a'), (2, 'b')"), IsOk());
  ASSERT_TRUE(sink.WaitForCommits(1));
  const TransactionCommitted commit = sink.commits()[0];
  const Lsn before = SlotConfirmed();
  EXPECT_LE(before, commit.commit_lsn);
  // Acking the first of two events confirms the commit LSN (re-sent whole)...
  ASSERT_THAT(tracker.Ack("c", EventId{commit.commit_lsn, 0}), IsOk());
  EXPECT_TRUE(WaitForSlot([&](Lsn l) { return l == commit.commit_lsn; }));
  // ...and never more while the second is unacked, even as unpublished WAL flows.
  ASSERT_THAT(pg_->Exec("INSERT INTO quiet (v) SELECT 'x' FROM generate_series(1, 100)"),
              IsOk());
  EXPECT_EQ(SlotConfirmed(), commit.commit_lsn);
  EXPECT_EQ(store.stored(), commit.commit_lsn);  // Stored before it was sent.
  // Acking the last event confirms end_lsn, then keepalives carry it further.
  ASSERT_THAT(tracker.Ack("c", EventId{commit.commit_lsn, 1}), IsOk());
  EXPECT_TRUE(WaitForSlot([&](Lsn l) { return l >= commit.end_lsn; }));
  EXPECT_THAT(reader.Stop(), IsOk());
}

TEST_F(StreamReaderTest, QuietPublicationAdvancesTheSlot) {
  AckTracker tracker(Lsn::kInvalid);
  ASSERT_THAT(tracker.AddConsumer("c", EventId{}), IsOk());
  CollectingSink sink;
  MemoryConfirmedStore store;
  RunningReader reader(Options(), &tracker, &sink, &store, Lsn::kInvalid);
  const Lsn start = SlotConfirmed();
  ASSERT_THAT(pg_->Exec("INSERT INTO quiet (v) SELECT 'x' FROM generate_series(1, 100)"),
              IsOk());
  const Lsn written = *Lsn::Parse(*pg_->QueryValue("SELECT pg_current_wal_lsn()"));
  EXPECT_TRUE(WaitForSlot([&](Lsn l) { return l >= written; }))
      << "slot stayed at " << SlotConfirmed() << ", started at " << start;
  EXPECT_TRUE(sink.events().empty());
  EXPECT_THAT(reader.Stop(), IsOk());
}

TEST_F(StreamReaderTest, RestartResumesExactlyAfterWhatWasConfirmed) {
  MemoryConfirmedStore store;
  Lsn resume;
  TransactionCommitted t1, t2;
  {
    AckTracker tracker(Lsn::kInvalid);
    ASSERT_THAT(tracker.AddConsumer("c", EventId{}), IsOk());
    CollectingSink sink;
    RunningReader reader(Options(), &tracker, &sink, &store, Lsn::kInvalid);
    ASSERT_THAT(pg_->Exec("INSERT INTO t VALUES (1, 'a')"), IsOk());
    ASSERT_THAT(pg_->Exec("INSERT INTO t VALUES (2, 'b'), (3, 'c')"), IsOk());
    ASSERT_THAT(pg_->Exec("INSERT INTO t VALUES (4, 'd')"), IsOk());
    ASSERT_TRUE(sink.WaitForCommits(3));
    t1 = sink.commits()[0];
    t2 = sink.commits()[1];
    // T1 fully acked, T2 acked in the middle: T2 must come back whole, T1 never.
    ASSERT_THAT(tracker.Ack("c", EventId{t2.commit_lsn, 0}), IsOk());
    EXPECT_TRUE(WaitForSlot([&](Lsn l) { return l == t2.commit_lsn; }));
    EXPECT_THAT(reader.Stop(), IsOk());
    resume = store.stored();
  }
  EXPECT_EQ(resume, t2.commit_lsn);
  AckTracker tracker(resume);
  CollectingSink sink;
  RunningReader reader(Options(), &tracker, &sink, &store, resume);
  ASSERT_TRUE(sink.WaitForCommits(2));
  std::vector<ChangeEvent> events = sink.events();
  ASSERT_EQ(events.size(), 3u);
  EXPECT_EQ(events[0].id, (EventId{t2.commit_lsn, 0}));  // Same id as before.
  EXPECT_EQ(events[0].new_tuple.columns[0].data, "2");
  EXPECT_EQ(events[1].id, (EventId{t2.commit_lsn, 1}));
  EXPECT_EQ(events[2].new_tuple.columns[0].data, "4");
  EXPECT_THAT(reader.Stop(), IsOk());
}

// Storing the confirmed position writes WAL that becomes the next idle advance; the
// store must not be written on every status update of an idle stream.
TEST_F(StreamReaderTest, IdleStreamStoresItsPositionAtMostOncePerInterval) {
  AckTracker tracker(Lsn::kInvalid);
  ASSERT_THAT(tracker.AddConsumer("c", EventId{}), IsOk());
  CollectingSink sink;
  class CountingStore : public ConfirmedLsnStore {
   public:
    explicit CountingStore(PgCluster* pg) : pg_(pg) {}
    absl::Status PersistConfirmed(Lsn) override {
      ++writes;
      return pg_->Exec("INSERT INTO quiet (v) VALUES ('checkpoint')");  // Writes WAL.
    }
    std::atomic<int> writes{0};
    PgCluster* pg_;
  } store(pg_.get());
  ReaderOptions options = Options();
  options.min_persist_interval = absl::Hours(1);
  RunningReader reader(options, &tracker, &sink, &store, Lsn::kInvalid);
  ASSERT_TRUE(reader.reader().AwaitStats(
      [](const StreamReader::Stats& s) { return s.status_updates >= 15; }, kDeadline));
  EXPECT_EQ(store.writes.load(), 1);
  EXPECT_THAT(reader.Stop(), IsOk());
}

TEST_F(StreamReaderTest, BackpressureKeepsTheConnectionAlive) {
  AckTracker tracker(Lsn::kInvalid);
  CollectingSink sink;
  sink.SetRoom(false);
  MemoryConfirmedStore store;
  RunningReader reader(Options(), &tracker, &sink, &store, Lsn::kInvalid);
  ASSERT_THAT(pg_->Exec("INSERT INTO t SELECT g, repeat('x', 100) "
                        "FROM generate_series(1, 20000) g"),
              IsOk());
  // Hold the sink full for well over wal_sender_timeout (4 s): 45 status updates
  // at 200 ms intervals is about 9 s.
  ASSERT_TRUE(reader.reader().AwaitStats(
      [](const StreamReader::Stats& s) { return s.status_updates >= 45; }, kDeadline));
  EXPECT_EQ(reader.reader().stats().events, 0u);
  EXPECT_EQ(reader.reader().stats().reconnects, 0u);
  sink.SetRoom(true);
  reader.reader().Wake();
  ASSERT_TRUE(sink.WaitForCommits(1));
  EXPECT_EQ(sink.events().size(), 20000u);
  EXPECT_EQ(reader.reader().stats().reconnects, 0u);
  EXPECT_THAT(reader.Stop(), IsOk());
}

}  // namespace
}  // namespace walfeed::replication::pg
