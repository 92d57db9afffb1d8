// The initial snapshot (`snapshot: initial`) end to end against a real
// PostgreSQL 15: the rows of every published table reach every consumer as READ
// events, read under the snapshot the new slot exported, so a row committed
// while the slot was being created arrives once (as READ) and a row committed
// after arrives once (as a change); a writer busy throughout does not keep the
// consumers from ending with the tables; and a kill -9 in the middle resumes
// with watermarks after the last chunk every consumer acked.
#include <cstdlib>
#include <fstream>
#include <map>
#include <optional>
#include <random>
#include <set>
#include <thread>

#include "absl/strings/str_replace.h"
#include "tests/server/backfill_harness.h"

namespace walfeed::server::e2e {
namespace {

class InitialSnapshotE2eTest : public BackfillE2eTest {
 protected:
  std::string WriteConfig() {
    std::string yaml = Yaml();
    absl::StrReplaceAll({{"create_missing: true\n", "create_missing: true\n    snapshot: initial\n"}},
                        &yaml);
    const std::string path = dir_ + "/walfeed.yaml";
    std::ofstream(path) << yaml;
    return path;
  }

  // The stream's initial-snapshot backfills, once the runner has them.
  std::vector<Backfill> InitialBackfills() {
    std::vector<Backfill> found;
    EXPECT_TRUE(WaitUntil(
        [&] {
          walfeed::v1::ListBackfillsRequest request;
          request.set_stream(kStream);
          walfeed::v1::ListBackfillsResponse response;
          grpc::ClientContext context;
          context.set_deadline(ChronoDeadline(kDeadline));
          if (!stub_->ListBackfills(&context, request, &response).ok()) return false;
          found.clear();
          for (const Backfill& backfill : response.backfills()) {
            if (backfill.initial_snapshot()) found.push_back(backfill);
          }
          return !found.empty();
        },
        kDeadline, absl::Milliseconds(20)));
    return found;
  }

  // Acks what each subscription got until every backfill in `ids` ended.
  std::vector<Backfill> AckUntilAllEnded(
      const std::vector<std::pair<const Subscription*, std::string>>& consumers,
      const std::vector<std::string>& ids, absl::Duration timeout = absl::Seconds(120)) {
    std::vector<EventId> acked(consumers.size());
    std::vector<Backfill> ended;
    const bool done = WaitUntil(
        [&] {
          for (size_t i = 0; i < consumers.size(); ++i) {
            AckAll(*consumers[i].first, consumers[i].second, &acked[i]);
          }
          ended.clear();
          for (const std::string& id : ids) {
            Backfill backfill = GetBackfill(id);
            if (backfill.state() == walfeed::v1::BACKFILL_STATE_RUNNING) return false;
            ended.push_back(backfill);
          }
          return true;
        },
        timeout, absl::Milliseconds(20));
    EXPECT_TRUE(done) << "the initial snapshot did not end";
    return ended;
  }

  static std::vector<std::string> Ids(const std::vector<Backfill>& backfills) {
    std::vector<std::string> ids;
    for (const Backfill& backfill : backfills) ids.push_back(backfill.id());
    return ids;
  }
};

TEST_F(InitialSnapshotE2eTest, TheSeamHasNoGapAndNoOverlapWhileAWriterChangesTheTable) {
  constexpr int kRows = 30000;
  ASSERT_THAT(pg_->Exec(absl::StrCat("INSERT INTO orders SELECT i, 'item ' || i, i, NULL "
                                     "FROM generate_series(1, ", kRows, ") i;"
                                     "INSERT INTO other VALUES (1, 'one'), (2, 'two')")),
              IsOk());
  // A transaction open when the slot is created: creation waits for it, and
  // its row commits before the slot's consistent point.
  PGconn* open = PQconnectdb(pg_->ConnInfo().c_str());
  ASSERT_EQ(PQstatus(open), CONNECTION_OK);
  PQclear(PQexec(open, "BEGIN; INSERT INTO orders VALUES (50000, 'seam', 1, NULL)"));

  ServerProcess process(WriteConfig(), dir_ + "/server.log");
  const int port = process.WaitForPort();
  ASSERT_GT(port, 0) << process.Log();
  ASSERT_TRUE(WaitUntil(
      [&] {
        absl::StatusOr<std::vector<std::string>> waiting = pg_->Query(
            "SELECT count(*) FROM pg_stat_activity WHERE query LIKE 'CREATE_REPLICATION_SLOT%' "
            "AND wait_event_type = 'Lock'");
        return waiting.ok() && !waiting->empty() && (*waiting)[0] == "1";
      },
      kDeadline, absl::Milliseconds(10)))
      << "the slot's creation never waited for the open transaction\n"
      << process.Log();
  PQclear(PQexec(open, "COMMIT"));
  PQfinish(open);

  Connect(port);
  std::unique_ptr<Subscription> a = Subscribe(Request("a"));
  std::unique_ptr<Subscription> b = Subscribe(Request("b"));
  // After the consistent point: a change, never a READ.
  ASSERT_THAT(pg_->Exec("INSERT INTO orders VALUES (60000, 'after', 1, NULL)"), IsOk());

  // A writer changes keys 100..20000 and inserts from 100001 on, throughout.
  std::atomic<bool> stop{false};
  std::set<int> touched;
  std::thread writer([&] {
    PGconn* conn = PQconnectdb(pg_->ConnInfo().c_str());
    std::mt19937 random(11);
    std::uniform_int_distribution<int> key(100, 20000);
    int next = 100001;
    while (!stop.load()) {
      const int k = key(random);
      touched.insert(k);
      std::string sql;
      switch (random() % 4) {
        case 0:
          sql = absl::StrCat("INSERT INTO orders VALUES (", next++, ", 'new', 1, NULL)");
          break;
        case 1:
          sql = absl::StrCat("UPDATE orders SET qty = qty + 1 WHERE id = ", k);
          break;
        case 2:
          touched.insert(next);
          sql = absl::StrCat("UPDATE orders SET id = ", next++, " WHERE id = ", k);
          break;
        default:
          sql = absl::StrCat("DELETE FROM orders WHERE id = ", k);
      }
      PQclear(PQexec(conn, sql.c_str()));
    }
    PQfinish(conn);
  });

  const std::vector<Backfill> initial = InitialBackfills();
  ASSERT_EQ(initial.size(), 4u) << "one per published table";
  const std::vector<Backfill> ended = AckUntilAllEnded({{a.get(), "a"}, {b.get(), "b"}},
                                                       Ids(initial));
  stop.store(true);
  writer.join();
  uint64_t superseded = 0;
  for (const Backfill& backfill : ended) {
    EXPECT_EQ(backfill.state(), walfeed::v1::BACKFILL_STATE_DONE) << backfill.ShortDebugString();
    EXPECT_EQ(backfill.consumer(), "") << "for every consumer";
    superseded += backfill.superseded_rows();
  }
  WaitForMarker(*a, "a", 1000);
  WaitForMarker(*b, "b", 1001);

  for (const Subscription* subscription : {a.get(), b.get()}) {
    Materialized orders({"id"});
    Materialized other({"id"});
    std::map<std::string, std::vector<walfeed::v1::Operation>> ops;  // Of orders, by id.
    for (const ChangeEvent& event : subscription->events()) {
      if (event.table() == "orders") {
        orders.Apply(event);
        const std::string id = event.op() == walfeed::v1::OPERATION_DELETE
                                   ? OldValue(event, "id")
                                   : NewValue(event, "id");
        ops[id].push_back(event.op());
      } else if (event.table() == "other") {
        other.Apply(event);
      }
    }
    EXPECT_EQ(orders.Rows(), ExpectedRows("orders", {"id", "item", "qty", "note"}));
    EXPECT_EQ(other.Rows(), ExpectedRows("other", {"id", "v"}));
    // Committed while the slot was created: in the snapshot, not the stream.
    EXPECT_THAT(ops["50000"], ElementsAre(walfeed::v1::OPERATION_READ));
    // Committed after: in the stream, not the snapshot.
    EXPECT_THAT(ops["60000"], ElementsAre(walfeed::v1::OPERATION_INSERT));
    // Every row nobody changed: exactly one event, its READ.
    int untouched = 0;
    for (int id = 1; id <= kRows; ++id) {
      if (touched.count(id)) continue;
      ++untouched;
      ASSERT_THAT(ops[absl::StrCat(id)], ElementsAre(walfeed::v1::OPERATION_READ)) << id;
    }
    EXPECT_GT(untouched, 10000);
  }
  // Its four tables were read at once, one imported connection each.
  EXPECT_THAT(process.Log(), HasSubstr("4 table(s) read under the slot's exported snapshot by "
                                       "4 connection(s)"));
  std::cout << "[ figures ] initial snapshot of " << kRows << " rows with " << touched.size()
            << " keys written meanwhile: " << superseded << " rows superseded by the stream"
            << std::endl;
  process.Signal(SIGTERM);
  EXPECT_TRUE(process.WaitForExit(kDeadline).has_value());
}

TEST_F(InitialSnapshotE2eTest, KilledDuringTheSnapshotResumesWithWatermarks) {
  constexpr int kRows = 50000;
  constexpr uint32_t kChunk = replication::kDefaultChunkRows;
  ASSERT_THAT(pg_->Exec(absl::StrCat("INSERT INTO orders SELECT i, 'item ' || i, i, NULL "
                                     "FROM generate_series(1, ", kRows, ") i")),
              IsOk());
  const std::string config = WriteConfig();
  auto process = std::make_unique<ServerProcess>(config, dir_ + "/server1.log");
  int port = process->WaitForPort();
  ASSERT_GT(port, 0) << process->Log();
  Connect(port);
  std::unique_ptr<Subscription> first = Subscribe(Request("a"));
  std::vector<Backfill> initial = InitialBackfills();
  std::string orders_id;
  for (const Backfill& backfill : initial) {
    if (backfill.table().table() == "orders") orders_id = backfill.id();
  }
  ASSERT_FALSE(orders_id.empty());
  EventId acked;
  ASSERT_TRUE(WaitUntil(
      [&] {
        AckAll(*first, "a", &acked);
        return GetBackfill(orders_id).rows() >= kRows / 3;
      },
      absl::Seconds(120), absl::Milliseconds(5)));
  // Then half of a chunk more (it arrives without further acks: four chunks
  // go out unacked), and the kill.
  std::optional<EventId> half;
  size_t scanned = 0;
  ASSERT_TRUE(WaitUntil(
      [&] {
        for (const ChangeEvent& event : first->events_from(scanned)) {
          ++scanned;
          if (event.op() == walfeed::v1::OPERATION_READ && event.index() == kChunk / 2 &&
              ParseId(event.id()) > acked) {
            half = ParseId(event.id());
            return true;
          }
        }
        return false;
      },
      kDeadline, absl::Milliseconds(5)));
  acked = *half;
  AckOk(*first, "a", acked.ToString());
  process->Signal(SIGKILL);
  ASSERT_TRUE(process->WaitForExit(kDeadline).has_value());
  ASSERT_TRUE(first->WaitForEnd());
  EXPECT_THAT(process->Log(), HasSubstr("read under the slot's exported snapshot"));

  Materialized table({"id"});
  const std::set<std::string> acked_reads = ApplyAcked(first->events(), acked, &table);
  ASSERT_FALSE(acked_reads.empty());
  // Changes while walfeed is down: streamed after the restart.
  ASSERT_THAT(pg_->Exec("UPDATE orders SET qty = -1 WHERE id % 997 = 0; "
                        "DELETE FROM orders WHERE id % 1009 = 0"),
              IsOk());

  process = std::make_unique<ServerProcess>(config, dir_ + "/server2.log");
  port = process->WaitForPort();
  ASSERT_GT(port, 0) << process->Log();
  Connect(port);
  std::unique_ptr<Subscription> second = Subscribe(Request("a"));
  EXPECT_EQ(second->started().checkpoint(), acked.ToString());
  initial = InitialBackfills();
  const std::vector<Backfill> ended = AckUntilAllEnded({{second.get(), "a"}}, Ids(initial));
  for (const Backfill& backfill : ended) {
    EXPECT_EQ(backfill.state(), walfeed::v1::BACKFILL_STATE_DONE) << backfill.ShortDebugString();
  }
  WaitForMarker(*second, "a", 1);

  size_t reread = 0;
  for (const ChangeEvent& event : second->events()) {
    if (event.table() != "orders") continue;
    table.Apply(event);
    if (event.op() == walfeed::v1::OPERATION_READ && acked_reads.count(NewValue(event, "id"))) {
      ++reread;
    }
  }
  EXPECT_EQ(table.Rows(), ExpectedRows("orders", {"id", "item", "qty", "note"}));
  EXPECT_LE(reread, kChunk) << "at most the chunk acked in part is read again";
  EXPECT_GT(reread, 0u) << "the kill came after half a chunk was acked";
  const std::string log = process->Log();
  // After the newest chunk acked whole, or from the start when the kill came
  // inside the first: either way with watermarks.
  EXPECT_THAT(log, HasSubstr("for every consumer resumes"));
  EXPECT_THAT(log, Not(HasSubstr("read under the slot's exported snapshot")));
  std::cout << "[ figures ] initial snapshot killed after " << acked_reads.size()
            << " acked rows; " << reread << " of them read again after the restart (chunk "
            << kChunk << ")" << std::endl;
  process->Signal(SIGTERM);
  EXPECT_TRUE(process->WaitForExit(kDeadline).has_value());
}

}  // namespace
}  // namespace walfeed::server::e2e
