// PrepareStream and the reader's per-session slot check against a real
// PostgreSQL 15: a new stream is provisioned and bound; a bound stream resumes from
// its stored position with its consumers' checkpoints; a slot that was dropped,
// recreated, advanced or invalidated behind walfeed's back is a definite DataLoss
// naming the recovery, at start-up and while streaming, never a retry loop and
// never a silently recreated slot. A partitioned table's changes arrive under the
// name the stream's publish_via_partition_root asks for. Waits are on conditions
// with deadlines.
#include "replication/pg/stream_start.h"
#include "replication/pg/checkpoint_store.h"

#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "replication/error_reason.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/testing/pg_cluster.h"
#include "tests/testing/reader_harness.h"
#include "tests/testing/status_matchers.h"
#include "tests/testing/wait.h"

namespace walfeed::replication::pg {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;
using ::walfeed::testing::CollectingSink;
using ::walfeed::testing::IsOk;
using ::walfeed::testing::PgCluster;
using ::walfeed::testing::RunningReader;
using ::walfeed::testing::StatusIs;
using ::walfeed::testing::WaitUntil;

constexpr absl::Duration kDeadline = absl::Seconds(60);
constexpr char kSchema[] = "walfeed";

class StreamStartTest : public ::testing::Test {
 protected:
  void SetUp() override { StartCluster({}); }

  void StartCluster(std::map<std::string, std::string> settings) {
    PgCluster::Options options;
    options.settings = std::move(settings);
    options.settings["wal_sender_timeout"] = "'5s'";
    WALFEED_START_PG_OR_SKIP(pg_, options);
    ASSERT_THAT(pg_->Exec("CREATE TABLE t (id int PRIMARY KEY, v text);"
                          "CREATE TABLE quiet (id serial PRIMARY KEY, v text)"),
                IsOk());
    absl::StatusOr<std::unique_ptr<PgCheckpointStore>> store =
        PgCheckpointStore::Open({pg_->ConnInfo(), kSchema});
    ASSERT_THAT(store, IsOk());
    store_ = std::move(*store);
    committer_ = std::make_unique<GroupCommitter>(store_.get());
  }

  StreamConfig Config() {
    StreamConfig config;
    config.name = "orders";
    config.conninfo = pg_->ConnInfo();
    config.slot_name = "s";
    config.publication_names = {"pub"};
    config.tables = {"public.t"};
    config.create_missing = true;
    return config;
  }

  absl::StatusOr<PreparedStream> Prepare(const StreamConfig& config) {
    return PrepareStream(config, committer_.get(), kSchema);
  }
  absl::StatusOr<PreparedStream> Prepare() { return Prepare(Config()); }

  ReaderOptions Options(const PreparedStream& prepared, const StreamConfig& config) {
    ReaderOptions options = ReaderOptionsFor(config, prepared, kSchema);
    options.max_feedback_interval = absl::Milliseconds(200);
    options.min_persist_interval = absl::ZeroDuration();
    return options;
  }
  ReaderOptions Options(const PreparedStream& prepared) { return Options(prepared, Config()); }

  std::string SlotColumn(const std::string& column) {
    return pg_->QueryValue("SELECT " + column +
                           " FROM pg_replication_slots WHERE slot_name = 's'")
        .value_or("<error>");
  }
  // The backend of the connection `prepared` keeps for the reader, which
  // stays kept ("" and a failure when none is kept).
  std::string KeptBackendPid(PreparedStream& prepared) {
    std::unique_ptr<PgReplicationConnection> kept =
        prepared.walsender ? prepared.walsender->Take() : nullptr;
    if (kept == nullptr) {
      ADD_FAILURE() << "the start-up kept no replication connection";
      return "";
    }
    const std::string pid = std::to_string(PQbackendPID(kept->pg()));
    prepared.walsender = std::make_shared<WalSenderHandoff>(std::move(kept));
    return pid;
  }
  int SlotCount() {
    return std::stoi(
        pg_->QueryValue("SELECT count(*) FROM pg_replication_slots").value_or("-1"));
  }

  std::unique_ptr<PgCluster> pg_;
  std::unique_ptr<PgCheckpointStore> store_;
  std::unique_ptr<GroupCommitter> committer_;
};

TEST_F(StreamStartTest, NewStreamIsProvisionedAndBoundAtTheSlotsPosition) {
  absl::StatusOr<PreparedStream> prepared = Prepare();
  ASSERT_THAT(prepared, IsOk());
  EXPECT_TRUE(prepared->provisioned.created_slot);
  EXPECT_TRUE(prepared->plan.bind);
  EXPECT_EQ(prepared->plan.start.ToString(), SlotColumn("confirmed_flush_lsn"));
  EXPECT_EQ(prepared->plan.identity.plugin, "pgoutput");
  EXPECT_EQ(std::to_string(prepared->plan.identity.system_identifier),
            *pg_->QueryValue("SELECT system_identifier FROM pg_control_system()"));
  absl::StatusOr<StreamCheckpoint> stored = committer_->Load("orders");
  ASSERT_THAT(stored, IsOk());
  EXPECT_EQ(stored->slot_name, "s");
  EXPECT_EQ(stored->slot_identity, prepared->plan.identity);
  EXPECT_EQ(stored->confirmed_lsn, prepared->plan.start);

  // Preparing again binds nothing new and starts from the stored position.
  absl::StatusOr<PreparedStream> again = Prepare();
  ASSERT_THAT(again, IsOk());
  EXPECT_FALSE(again->plan.bind);
  EXPECT_FALSE(again->provisioned.created_slot);
  EXPECT_EQ(again->plan.start, prepared->plan.start);
}

// The whole path: stream, ack durably, stop, prepare again. The restart starts
// from the stored position, knows the consumer's checkpoint, and the reader never
// hands the sink an event at or below it.
TEST_F(StreamStartTest, RestartResumesFromStoredPositionAndDropsAckedEvents) {
  Lsn t2_commit;
  {
    absl::StatusOr<PreparedStream> prepared = Prepare();
    ASSERT_THAT(prepared, IsOk());
    AckTracker tracker(prepared->plan.start);
    ASSERT_THAT(tracker.AddConsumer("c", EventId{}), IsOk());
    CollectingSink sink;
    CommittedConfirmedStore confirmed(committer_.get(), "orders");
    RunningReader reader(Options(*prepared), &tracker, &sink, &confirmed,
                         prepared->plan.start);
    ASSERT_THAT(pg_->Exec("INSERT INTO t VALUES (1, 'a')"), IsOk());
    ASSERT_THAT(pg_->Exec("INSERT INTO t VALUES (2, 'b'), (3, 'c')"), IsOk());
    ASSERT_TRUE(sink.WaitForCommits(2));
    t2_commit = sink.commits()[1].commit_lsn;
    const EventId ack{t2_commit, 0};
    ASSERT_THAT(committer_->AckDurably("orders", "c", ack), IsOk());
    ASSERT_THAT(tracker.Ack("c", ack), IsOk());
    ASSERT_TRUE(WaitUntil(
        [&] { return SlotColumn("confirmed_flush_lsn") == t2_commit.ToString(); }, kDeadline));
    EXPECT_THAT(reader.Stop(), IsOk());
  }
  absl::StatusOr<PreparedStream> prepared = Prepare();
  ASSERT_THAT(prepared, IsOk());
  EXPECT_EQ(prepared->plan.start, t2_commit);  // Confirming C re-sends T2 (§4.2).
  EXPECT_EQ(prepared->plan.deliver_after, (EventId{t2_commit, 0}));
  ASSERT_EQ(prepared->plan.consumers.count("c"), 1u);
  AckTracker tracker(prepared->plan.start);
  ASSERT_THAT(tracker.AddConsumer("c", prepared->plan.consumers["c"]), IsOk());
  CollectingSink sink;
  CommittedConfirmedStore confirmed(committer_.get(), "orders");
  RunningReader reader(Options(*prepared), &tracker, &sink, &confirmed, prepared->plan.start);
  ASSERT_THAT(pg_->Exec("INSERT INTO t VALUES (4, 'd')"), IsOk());
  ASSERT_TRUE(sink.WaitForCommits(2));
  const std::vector<ChangeEvent> events = sink.events();
  ASSERT_EQ(events.size(), 2u);
  EXPECT_EQ(events[0].id, (EventId{t2_commit, 1}));  // Same id; 2:0 was acked.
  EXPECT_EQ(events[0].new_tuple.columns[0].data, "3");
  EXPECT_EQ(events[1].new_tuple.columns[0].data, "4");
  EXPECT_EQ(reader.reader().stats().below_checkpoint, 1u);
  EXPECT_THAT(reader.Stop(), IsOk());
}

// A start on an existing slot keeps the replication connection it read the
// slot over, and the reader's first session streams on it: one backend start
// fewer between "prepared" and "streaming". A slot walfeed creates is created
// over a connection of its own, so nothing is kept then.
TEST_F(StreamStartTest, TheSlotReadsConnectionIsTheReadersFirst) {
  absl::StatusOr<PreparedStream> created = Prepare();
  ASSERT_THAT(created, IsOk());
  EXPECT_EQ(created->walsender, nullptr);
  absl::StatusOr<PreparedStream> prepared = Prepare();
  ASSERT_THAT(prepared, IsOk());
  ASSERT_NE(prepared->walsender, nullptr);
  // Its backend, to compare with the walsender that ends up on the slot.
  const std::string kept_pid = KeptBackendPid(*prepared);
  ASSERT_FALSE(kept_pid.empty());

  AckTracker tracker(prepared->plan.start);
  CollectingSink sink;
  CommittedConfirmedStore confirmed(committer_.get(), "orders");
  RunningReader reader(Options(*prepared), &tracker, &sink, &confirmed, prepared->plan.start);
  ASSERT_THAT(pg_->Exec("INSERT INTO t VALUES (1, 'a')"), IsOk());
  ASSERT_TRUE(sink.WaitForCommits(1));
  EXPECT_EQ(SlotColumn("active_pid"), kept_pid);
  EXPECT_EQ(reader.reader().stats().reconnects, 0u);
  // The kept connection carries the stream's name too (leader_lock.h).
  EXPECT_EQ(pg_->QueryValue("SELECT application_name FROM pg_stat_activity WHERE pid = " +
                            kept_pid)
                .value_or(""),
            StreamWalsenderName(kSchema, "orders"));
  EXPECT_THAT(reader.Stop(), IsOk());
}

// The kept connection can die while it waits (a server restart, an idle
// session ended): the first session then connects anew instead of failing.
TEST_F(StreamStartTest, AKeptConnectionThatDiedIsReplaced) {
  ASSERT_THAT(Prepare(), IsOk());
  absl::StatusOr<PreparedStream> prepared = Prepare();
  ASSERT_THAT(prepared, IsOk());
  ASSERT_NE(prepared->walsender, nullptr);
  const std::string kept_pid = KeptBackendPid(*prepared);
  ASSERT_FALSE(kept_pid.empty());
  ASSERT_THAT(pg_->Exec("SELECT pg_terminate_backend(" + kept_pid + ", 10000)"), IsOk());

  AckTracker tracker(prepared->plan.start);
  CollectingSink sink;
  CommittedConfirmedStore confirmed(committer_.get(), "orders");
  RunningReader reader(Options(*prepared), &tracker, &sink, &confirmed, prepared->plan.start);
  ASSERT_THAT(pg_->Exec("INSERT INTO t VALUES (1, 'a')"), IsOk());
  ASSERT_TRUE(sink.WaitForCommits(1));
  const std::string active = SlotColumn("active_pid");
  EXPECT_NE(active, kept_pid);
  EXPECT_NE(active, "");
  EXPECT_EQ(reader.reader().stats().reconnects, 0u);  // Replaced within the first open.
  EXPECT_THAT(reader.Stop(), IsOk());
}

TEST_F(StreamStartTest, DroppedSlotFailsClosedAndIsNotRecreated) {
  ASSERT_THAT(Prepare(), IsOk());
  ASSERT_THAT(pg_->Exec("SELECT pg_drop_replication_slot('s')"), IsOk());
  EXPECT_THAT(Prepare().status(),
              StatusIs(absl::StatusCode::kDataLoss,
                       AllOf(HasSubstr("\"s\""), HasSubstr("no longer exists"),
                             HasSubstr("DELETE FROM \"walfeed\".stream_checkpoints"))));
  EXPECT_EQ(SlotCount(), 0) << "create_missing must not hide a dropped slot";

  // The recovery the message names: forget the stream's position, start again.
  ASSERT_THAT(pg_->Exec("DELETE FROM \"walfeed\".stream_checkpoints WHERE stream = 'orders'"),
              IsOk());
  absl::StatusOr<PreparedStream> recovered = Prepare();
  ASSERT_THAT(recovered, IsOk());
  EXPECT_TRUE(recovered->provisioned.created_slot);
  EXPECT_TRUE(recovered->plan.bind);
}

TEST_F(StreamStartTest, ASlotBoundToAnotherStreamIsRefused) {
  ASSERT_THAT(Prepare(), IsOk());
  StreamConfig second = Config();
  second.name = "orders2";  // Another stream, the same slot.
  const absl::Status refused = Prepare(second).status();
  EXPECT_THAT(refused, StatusIs(absl::StatusCode::kFailedPrecondition,
                                AllOf(HasSubstr("slot \"s\" is already bound to stream \"orders\""),
                                      HasSubstr("a slot of its own"),
                                      HasSubstr("DELETE FROM \"walfeed\".stream_checkpoints "
                                                "WHERE stream = 'orders'"))));
  EXPECT_EQ(reason::ReasonOf(refused), reason::kSlotShared);
  EXPECT_THAT(Prepare(), IsOk()) << "the stream the slot is bound to starts as before";

  // The remedy for a stream that is gone for good: forget it.
  ASSERT_THAT(pg_->Exec("DELETE FROM \"walfeed\".consumer_checkpoints WHERE stream = 'orders';"
                        "DELETE FROM \"walfeed\".stream_checkpoints WHERE stream = 'orders'"),
              IsOk());
  absl::StatusOr<PreparedStream> moved = Prepare(second);
  ASSERT_THAT(moved, IsOk());
  EXPECT_TRUE(moved->plan.bind) << "binds the slot as it is now";
}

TEST_F(StreamStartTest, RecreatedSlotFailsClosed) {
  ASSERT_THAT(Prepare(), IsOk());
  ASSERT_THAT(pg_->Exec("INSERT INTO t VALUES (1, 'missed')"), IsOk());
  ASSERT_THAT(pg_->Exec("SELECT pg_drop_replication_slot('s')"), IsOk());
  ASSERT_THAT(pg_->Exec("SELECT pg_create_logical_replication_slot('s', 'pgoutput')"), IsOk());
  EXPECT_THAT(Prepare().status(),
              StatusIs(absl::StatusCode::kDataLoss,
                       AllOf(HasSubstr("past the position walfeed stored"),
                             HasSubstr("recreated"))));
}

TEST_F(StreamStartTest, SlotAdvancedByAnotherClientFailsClosed) {
  ASSERT_THAT(Prepare(), IsOk());
  ASSERT_THAT(pg_->Exec("INSERT INTO t VALUES (1, 'skipped')"), IsOk());
  ASSERT_THAT(pg_->Exec("SELECT pg_replication_slot_advance('s', pg_current_wal_lsn())"),
              IsOk());
  EXPECT_THAT(Prepare().status(),
              StatusIs(absl::StatusCode::kDataLoss, HasSubstr("advanced")));
}

// Dropped while streaming: the reader's reconnect finds the slot gone and stops
// with the definite error instead of retrying forever.
TEST_F(StreamStartTest, SlotDroppedWhileStreamingStopsTheReader) {
  absl::StatusOr<PreparedStream> prepared = Prepare();
  ASSERT_THAT(prepared, IsOk());
  AckTracker tracker(prepared->plan.start);
  CollectingSink sink;
  CommittedConfirmedStore confirmed(committer_.get(), "orders");
  ReaderOptions options = Options(*prepared);
  options.backoff_base = absl::Seconds(1);  // Leaves time to drop the released slot.
  RunningReader reader(options, &tracker, &sink, &confirmed, prepared->plan.start);
  ASSERT_TRUE(sink.WaitForConnections(1));
  // The walsender carries the stream's name: a new leader ends a walsender on
  // the slot only under that name (leader_lock.h).
  EXPECT_TRUE(WaitUntil(
      [&] {
        return pg_->QueryValue("SELECT a.application_name FROM pg_replication_slots s "
                               "JOIN pg_stat_activity a ON a.pid = s.active_pid "
                               "WHERE s.slot_name = 's'")
                   .value_or("") == StreamWalsenderName(kSchema, "orders");
      },
      kDeadline));
  // The walsender holds the slot; end it, then drop the slot once it is released.
  ASSERT_TRUE(WaitUntil(
      [&] {
        (void)pg_->Exec(
            "SELECT pg_terminate_backend(active_pid) FROM pg_replication_slots "
            "WHERE slot_name = 's' AND active_pid IS NOT NULL");
        return pg_->Exec("SELECT pg_drop_replication_slot('s')").ok();
      },
      kDeadline));
  ASSERT_TRUE(reader.WaitForExit());
  EXPECT_THAT(reader.result(),
              StatusIs(absl::StatusCode::kDataLoss,
                       AllOf(HasSubstr("no longer exists"), HasSubstr("DELETE FROM"))));
  // It may win the slot back a few times before the drop does (slower under load);
  // what matters is that it ends with DATA_LOSS instead of retrying forever.
  EXPECT_LE(reader.reader().stats().reconnects, 10u);
  EXPECT_EQ(SlotCount(), 0);
}

// A publication dropped while the slot still had changes to decode, even if
// created again: PostgreSQL fails at the same change on every reconnect. The
// reader stops with the error, the cause and the way out, and the way out works.
TEST_F(StreamStartTest, ADroppedPublicationStopsTheReaderNamingTheWayOut) {
  {
    absl::StatusOr<PreparedStream> prepared = Prepare();
    ASSERT_THAT(prepared, IsOk());
    AckTracker tracker(prepared->plan.start);
    CollectingSink sink;
    CommittedConfirmedStore confirmed(committer_.get(), "orders");
    RunningReader reader(Options(*prepared), &tracker, &sink, &confirmed, prepared->plan.start);
    ASSERT_TRUE(sink.WaitForConnections(1));
    ASSERT_THAT(pg_->Exec("DROP PUBLICATION pub"), IsOk());
    ASSERT_THAT(pg_->Exec("INSERT INTO t VALUES (1, 'lost')"), IsOk());
    ASSERT_THAT(pg_->Exec("CREATE PUBLICATION pub FOR TABLE t"), IsOk());
    ASSERT_THAT(pg_->Exec("INSERT INTO t VALUES (2, 'lost too')"), IsOk());
    ASSERT_TRUE(reader.WaitForExit());
    EXPECT_THAT(
        reader.result(),
        StatusIs(absl::StatusCode::kNotFound,
                 AllOf(HasSubstr("publication \"pub\" does not exist"),
                       HasSubstr("associated LSN"),
                       HasSubstr("SELECT pg_replication_slot_advance('s', pg_current_wal_lsn())"),
                       HasSubstr("DELETE FROM \"walfeed\".stream_checkpoints WHERE stream = "
                                 "'orders'"))));
    EXPECT_THAT(sink.events(), ::testing::IsEmpty());
  }
  // The way out the message names (the walsender lets go of the slot shortly).
  ASSERT_TRUE(WaitUntil(
      [&] { return pg_->Exec("SELECT pg_replication_slot_advance('s', pg_current_wal_lsn())").ok(); },
      kDeadline));
  ASSERT_THAT(pg_->Exec("DELETE FROM \"walfeed\".stream_checkpoints WHERE stream = 'orders'"),
              IsOk());
  absl::StatusOr<PreparedStream> prepared = Prepare();
  ASSERT_THAT(prepared, IsOk());
  AckTracker tracker(prepared->plan.start);
  CollectingSink sink;
  CommittedConfirmedStore confirmed(committer_.get(), "orders");
  RunningReader reader(Options(*prepared), &tracker, &sink, &confirmed, prepared->plan.start);
  ASSERT_THAT(pg_->Exec("INSERT INTO t VALUES (3, 'streamed')"), IsOk());
  ASSERT_TRUE(sink.WaitForEvents(1));
  EXPECT_EQ(sink.events()[0].new_tuple.columns[0].data, "3");
  EXPECT_THAT(reader.Stop(), IsOk());
}

class StartUpConnectionsTest : public StreamStartTest {
 protected:
  void SetUp() override { StartCluster({{"log_connections", "on"}}); }

  // How often the server log, from byte `from` on, says `what`.
  int LogCount(size_t from, const std::string& what) {
    const std::string log = pg_->Log();
    int count = 0;
    for (size_t at = log.find(what, from); at != std::string::npos;
         at = log.find(what, at + what.size())) {
      ++count;
    }
    return count;
  }
};

// When the stream's slot exists, the start-up's reads (the slot and the
// preflight) share one replication connection, which the reader then streams
// on: PrepareStream opens no other connection to the server (each costs a
// backend start: tens of milliseconds on a loaded server, and they queue).
TEST_F(StartUpConnectionsTest, AnExistingStreamStartsOnOneConnection) {
  ASSERT_THAT(Prepare(), IsOk());  // Creates the publication and the slot.
  const size_t from = pg_->Log().size();
  absl::StatusOr<PreparedStream> prepared = Prepare();
  ASSERT_THAT(prepared, IsOk());
  // "replication connection authorized" for a walsender, "connection
  // authorized" for either kind.
  EXPECT_EQ(LogCount(from, "replication connection authorized:"), 1)
      << pg_->Log().substr(from);
  EXPECT_EQ(LogCount(from, "connection authorized:"), 1) << pg_->Log().substr(from);
  EXPECT_FALSE(KeptBackendPid(*prepared).empty());
}

class InvalidatedSlotTest : public StreamStartTest {
 protected:
  void SetUp() override { StartCluster({{"max_slot_wal_keep_size", "'1MB'"}}); }
};

// A consumer that acks nothing holds the slot back; with max_slot_wal_keep_size
// PostgreSQL invalidates it at a checkpoint and ends the walsender. The reader's
// reconnect must end with the definite error, and so must a later start.
TEST_F(InvalidatedSlotTest, InvalidatedSlotStopsTheReaderAndTheNextStart) {
  absl::StatusOr<PreparedStream> prepared = Prepare();
  ASSERT_THAT(prepared, IsOk());
  AckTracker tracker(prepared->plan.start);
  ASSERT_THAT(tracker.AddConsumer("lagging", EventId{}), IsOk());
  CollectingSink sink;
  CommittedConfirmedStore confirmed(committer_.get(), "orders");
  RunningReader reader(Options(*prepared), &tracker, &sink, &confirmed, prepared->plan.start);
  ASSERT_TRUE(sink.WaitForConnections(1));
  ASSERT_THAT(pg_->Exec("INSERT INTO t VALUES (1, 'never acked')"), IsOk());
  // Push WAL past the limit, one segment at a time, until a checkpoint invalidates.
  ASSERT_TRUE(WaitUntil(
      [&] {
        (void)pg_->Exec("INSERT INTO quiet (v) SELECT 'x' FROM generate_series(1, 1000)");
        (void)pg_->Exec("SELECT pg_switch_wal()");
        (void)pg_->Exec("CHECKPOINT");
        return SlotColumn("wal_status") == "lost";
      },
      kDeadline));
  ASSERT_TRUE(reader.WaitForExit());
  EXPECT_THAT(reader.result(),
              StatusIs(absl::StatusCode::kDataLoss,
                       AllOf(HasSubstr("wal_status = lost"), HasSubstr("max_slot_wal_keep_size"),
                             HasSubstr("DELETE FROM"))));
  reader.Stop().IgnoreError();
  const absl::Status next = Prepare().status();
  ASSERT_THAT(next, StatusIs(absl::StatusCode::kDataLoss, HasSubstr("DELETE FROM")));

  // Follow the remedy literally: every SQL statement it names, in order, then
  // start again. The stream runs (on a new slot) and delivers new changes.
  const std::string remedy(next.message());
  std::vector<std::string> statements;
  for (const std::string prefix : {"SELECT pg_drop_replication_slot(", "DELETE FROM "}) {
    const size_t at = remedy.find(prefix);
    ASSERT_NE(at, std::string::npos) << "the remedy names " << prefix << ": " << remedy;
    // Statements end at the closing parenthesis that ends their mention.
    const size_t end = prefix[0] == 'S' ? remedy.find("))", at) + 1 : remedy.find(')', at);
    statements.emplace_back(remedy.substr(at, end - at));
  }
  for (const std::string& sql : statements) ASSERT_THAT(pg_->Exec(sql), IsOk()) << sql;
  absl::StatusOr<PreparedStream> again = Prepare();
  ASSERT_THAT(again, IsOk()) << "the remedy, followed as written, leads to a running stream";
  AckTracker fresh(again->plan.start);
  CollectingSink after;
  RunningReader running(Options(*again), &fresh, &after, &confirmed, again->plan.start);
  ASSERT_THAT(pg_->Exec("INSERT INTO t VALUES (2, 'after the recovery')"), IsOk());
  ASSERT_TRUE(after.WaitForEvents(1));
  EXPECT_THAT(running.Stop(), IsOk());
}

// Rows written to the partitions of a partitioned table arrive under the
// partitioned table's name when walfeed creates the publication with
// publish_via_partition_root (the default), and under each partition's name
// without it.
class PartitionNamingTest : public StreamStartTest, public ::testing::WithParamInterface<bool> {};

TEST_P(PartitionNamingTest, PartitionChangesArriveUnderTheConfiguredName) {
  const bool via_root = GetParam();
  ASSERT_THAT(pg_->Exec("CREATE TABLE m (id int, region text, v text, PRIMARY KEY (id, region)) "
                        "PARTITION BY LIST (region);"
                        "CREATE TABLE m_eu PARTITION OF m FOR VALUES IN ('eu');"
                        "CREATE TABLE m_us PARTITION OF m FOR VALUES IN ('us')"),
              IsOk());
  StreamConfig config = Config();
  config.tables = {"public.m"};
  config.publish_via_partition_root = via_root;
  absl::StatusOr<PreparedStream> prepared = Prepare(config);
  ASSERT_THAT(prepared, IsOk());
  EXPECT_EQ(pg_->QueryValue("SELECT pubviaroot FROM pg_publication WHERE pubname = 'pub'")
                .value_or("<error>"),
            via_root ? "t" : "f");
  AckTracker tracker(prepared->plan.start);
  CollectingSink sink;
  CommittedConfirmedStore confirmed(committer_.get(), "orders");
  RunningReader reader(Options(*prepared, config), &tracker, &sink, &confirmed,
                       prepared->plan.start);
  ASSERT_THAT(pg_->Exec("INSERT INTO m VALUES (1, 'eu', 'a'), (2, 'us', 'b')"), IsOk());
  ASSERT_TRUE(sink.WaitForCommits(1));
  std::vector<std::string> tables;
  for (const ChangeEvent& event : sink.events()) {
    ASSERT_NE(event.relation, nullptr);
    tables.push_back(absl::StrCat(event.relation->schema, ".", event.relation->table));
  }
  if (via_root) {
    EXPECT_THAT(tables, ::testing::ElementsAre("public.m", "public.m"));
  } else {
    EXPECT_THAT(tables, ::testing::ElementsAre("public.m_eu", "public.m_us"));
  }
  EXPECT_THAT(reader.Stop(), IsOk());
}

INSTANTIATE_TEST_SUITE_P(Publications, PartitionNamingTest, ::testing::Bool(),
                         [](const ::testing::TestParamInfo<bool>& info) {
                           return info.param ? std::string("ViaRoot") : std::string("PerPartition");
                         });

}  // namespace
}  // namespace walfeed::replication::pg
