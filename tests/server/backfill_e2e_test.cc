// Backfills end to end against a real PostgreSQL 15: the rows reach only the
// consumer that asked, a consumer that applies READ and change events by key
// ends with the table (also while a writer changes it), the errors a user
// meets, and cancel.
#include <cstdlib>
#include <map>
#include <random>
#include <set>

#include "absl/strings/str_join.h"
#include "tests/server/backfill_harness.h"

namespace walfeed::server::e2e {
namespace {

TEST_F(BackfillE2eTest, OnlyTheAskingConsumerGetsTheRowsAndTheyRebuildTheTable) {
  ASSERT_THAT(pg_->Exec("INSERT INTO orders SELECT i, 'item ' || i, i % 7, "
                        "CASE WHEN i % 3 = 0 THEN NULL ELSE 'n' || i END "
                        "FROM generate_series(1, 1000) i"),
              IsOk());
  StartServer(Yaml());
  std::unique_ptr<Subscription> a = Subscribe(Request("a"));
  std::unique_ptr<Subscription> b = Subscribe(Request("b"));
  // A streamed change first, to compare the READ events' column metadata with.
  InsertTransactions(5001, 1);
  ASSERT_TRUE(a->WaitForEvents(1));
  ASSERT_TRUE(b->WaitForEvents(1));

  Backfill started;
  ASSERT_THAT(StartBackfill("a", "public.orders", &started, 64), GrpcOk());
  EXPECT_EQ(started.state(), walfeed::v1::BACKFILL_STATE_RUNNING);
  EXPECT_THAT(started.key_columns(), ElementsAre("id"));
  EXPECT_EQ(started.chunk_rows(), 64u);
  // Running backfills show in GetStatus.
  walfeed::v1::StreamStatus status = StreamStatusNow();
  ASSERT_EQ(status.backfills_size(), 1);
  EXPECT_EQ(status.backfills(0).id(), started.id());

  const Backfill done = AckUntilEnded(*a, "a", started.id());
  EXPECT_EQ(done.state(), walfeed::v1::BACKFILL_STATE_DONE) << done.error();
  EXPECT_EQ(done.rows(), 1001u);
  EXPECT_EQ(done.chunks(), 16u);  // 15 full chunks and one of 41.
  EXPECT_TRUE(done.has_finished_at());
  EXPECT_EQ(StreamStatusNow().backfills_size(), 0);

  // a: the streamed insert, then every row as READ, chunk by chunk.
  const std::vector<ChangeEvent> events = a->events();
  Materialized table({"id"});
  size_t reads = 0;
  const ChangeEvent& streamed = events.front();
  ASSERT_EQ(streamed.op(), walfeed::v1::OPERATION_INSERT);
  EventId previous;
  for (const ChangeEvent& event : events) {
    const EventId id = ParseId(event.id());
    EXPECT_LT(previous, id) << "ids must increase";
    previous = id;
    table.Apply(event);
    if (event.op() != walfeed::v1::OPERATION_READ) continue;
    ++reads;
    EXPECT_EQ(event.xid(), 0u);
    EXPECT_GE(event.index(), 1u) << "index 0 is the high watermark's own message";
    EXPECT_EQ(event.schema(), "public");
    EXPECT_EQ(event.table(), "orders");
    EXPECT_EQ(event.old_values_size(), 0);
    ASSERT_EQ(event.new_values_size(), streamed.new_values_size());
    for (int c = 0; c < event.new_values_size(); ++c) {
      EXPECT_EQ(event.new_values(c).name(), streamed.new_values(c).name());
      EXPECT_EQ(event.new_values(c).type_oid(), streamed.new_values(c).type_oid());
      EXPECT_EQ(event.new_values(c).type_name(), streamed.new_values(c).type_name());
      EXPECT_EQ(event.new_values(c).key(), streamed.new_values(c).key());
      EXPECT_NE(event.new_values(c).kind(), walfeed::v1::VALUE_KIND_UNCHANGED_TOAST);
    }
    if (event.last_in_transaction()) {
      EXPECT_EQ(event.transaction_event_count(), event.index());
    }
  }
  EXPECT_EQ(reads, 1001u);
  EXPECT_EQ(table.Rows(), ExpectedRows("orders", {"id", "item", "qty", "note"}));

  // b saw the streamed change and nothing of the backfill: no READ, no
  // watermark message.
  WaitForMarker(*b, "b", 1);
  for (const ChangeEvent& event : b->events()) {
    EXPECT_NE(event.op(), walfeed::v1::OPERATION_READ);
    EXPECT_NE(event.op(), walfeed::v1::OPERATION_MESSAGE);
  }
  EXPECT_EQ(b->events().size(), 2u);

  // ListBackfills keeps ended ones.
  walfeed::v1::ListBackfillsRequest list;
  list.set_stream(kStream);
  walfeed::v1::ListBackfillsResponse listed;
  grpc::ClientContext context;
  ASSERT_THAT(stub_->ListBackfills(&context, list, &listed), GrpcOk());
  ASSERT_EQ(listed.backfills_size(), 1);
  EXPECT_EQ(listed.backfills(0).state(), walfeed::v1::BACKFILL_STATE_DONE);
}

TEST_F(BackfillE2eTest, ConvergesToTheTableWhileAWriterChangesIt) {
  // WALFEED_BACKFILL_ROWS=1000000 for the full-size run (a command, not CI).
  int rows = 20000;
  if (const char* env = std::getenv("WALFEED_BACKFILL_ROWS")) (void)absl::SimpleAtoi(env, &rows);
  ASSERT_THAT(pg_->Exec(absl::StrCat("INSERT INTO full_rows SELECT i, 'v' || i, i * 1.5 "
                                     "FROM generate_series(1, ",
                                     rows, ") i")),
              IsOk());
  StartServer(Yaml());
  std::unique_ptr<Subscription> a = Subscribe(Request("a"));
  Backfill started;
  ASSERT_THAT(StartBackfill("a", "public.full_rows", &started, 1000), GrpcOk());

  // Inserts past the end, updates (value and key), deletes, all over the key
  // range, in small transactions, while the chunks are read.
  std::atomic<bool> stop{false};
  std::atomic<int> writes{0};
  std::thread writer([&] {
    PGconn* conn = PQconnectdb(pg_->ConnInfo().c_str());
    std::mt19937 random(7);
    std::uniform_int_distribution<int> key(1, rows);
    int next = rows + 1;
    while (!stop.load()) {
      const int k = key(random);
      std::string sql;
      switch (random() % 4) {
        case 0:
          sql = absl::StrCat("INSERT INTO full_rows VALUES (", next++, ", 'new', 1)");
          break;
        case 1:
          sql = absl::StrCat("UPDATE full_rows SET v = v || 'u', amount = amount + 1 WHERE id = ",
                             k);
          break;
        case 2:
          sql = absl::StrCat("UPDATE full_rows SET id = ", next++, " WHERE id = ", k);
          break;
        default:
          sql = absl::StrCat("DELETE FROM full_rows WHERE id = ", k);
      }
      PQclear(PQexec(conn, sql.c_str()));
      writes.fetch_add(1);
    }
    PQfinish(conn);
  });
  const Backfill done =
      AckUntilEnded(*a, "a", started.id(), std::max(absl::Seconds(120), absl::Seconds(rows / 2000)));
  stop.store(true);
  writer.join();
  EXPECT_EQ(done.state(), walfeed::v1::BACKFILL_STATE_DONE) << done.error();
  EXPECT_GT(writes.load(), 0);
  WaitForMarker(*a, "a", 1);

  Materialized table({"id"});
  for (const ChangeEvent& event : a->events()) {
    if (event.table() == "full_rows" || event.op() == walfeed::v1::OPERATION_TRUNCATE) {
      table.Apply(event);
    }
  }
  EXPECT_EQ(table.Rows(), ExpectedRows("full_rows", {"id", "v", "amount"}));
  std::cout << "[ figures ] " << rows << " rows backfilled with " << writes.load()
            << " concurrent writes: " << done.rows() << " READ events, " << done.superseded_rows()
            << " superseded by the stream, " << done.chunks() << " chunks" << std::endl;
}

TEST_F(BackfillE2eTest, RefusesWhatItCannotReadAndSaysHowToFixIt) {
  ASSERT_THAT(pg_->Exec("CREATE TABLE nokey (a int, b text);"
                        "CREATE TABLE uniq (a int NOT NULL, b text);"
                        "CREATE UNIQUE INDEX uniq_a ON uniq (a)"),
              IsOk());
  const std::string yaml = absl::StrCat(
      "listen: \"127.0.0.1:0\"\nplaintext: true\nstreams:\n",
      StreamYaml(kStream, kSlot, "public.orders, public.other, public.nokey, public.uniq"));
  StartServer(yaml);
  std::unique_ptr<Subscription> a = Subscribe(Request("a"));
  Backfill ignored;
  EXPECT_THAT(StartBackfill("a", "public.nokey", &ignored),
              GrpcIs(grpc::StatusCode::FAILED_PRECONDITION, HasSubstr("ADD PRIMARY KEY")));
  EXPECT_THAT(StartBackfill("a", "public.uniq", &ignored),
              GrpcIs(grpc::StatusCode::FAILED_PRECONDITION,
                     HasSubstr("REPLICA IDENTITY USING INDEX \"uniq_a\"")));
  EXPECT_THAT(StartBackfill("a", "public.unpublished", &ignored),
              GrpcIs(grpc::StatusCode::FAILED_PRECONDITION, HasSubstr("ALTER PUBLICATION")));
  EXPECT_THAT(StartBackfill("a", "public.missing", &ignored),
              GrpcIs(grpc::StatusCode::NOT_FOUND, HasSubstr("no table")));
  EXPECT_THAT(StartBackfill("nobody", "public.orders", &ignored),
              GrpcIs(grpc::StatusCode::NOT_FOUND, HasSubstr("subscribe once")));
  EXPECT_THAT(StartBackfill("a", "orders", &ignored),
              GrpcIs(grpc::StatusCode::INVALID_ARGUMENT, HasSubstr("schema.table")));
  EXPECT_THAT(StartBackfill("a", "public.orders", &ignored, 0, "no_such_column > 1"),
              GrpcIs(grpc::StatusCode::INVALID_ARGUMENT, HasSubstr("no_such_column")));
  EXPECT_THAT(StartBackfill("a", "public.orders", &ignored, 2000000),
              GrpcIs(grpc::StatusCode::INVALID_ARGUMENT, HasSubstr("chunk_rows")));
  // One running backfill per table and consumer.
  ASSERT_THAT(pg_->Exec("INSERT INTO orders SELECT i, 'x', 1, NULL FROM generate_series(1, 50) i"),
              IsOk());
  Backfill first;
  ASSERT_THAT(StartBackfill("a", "public.orders", &first, 1), GrpcOk());
  EXPECT_THAT(StartBackfill("a", "public.orders", &ignored),
              GrpcIs(grpc::StatusCode::ALREADY_EXISTS, HasSubstr(first.id())));
  // Cancel: it stops (nothing acked, so it cannot have finished), and stays
  // cancelled.
  walfeed::v1::CancelBackfillRequest cancel;
  cancel.set_stream(kStream);
  cancel.set_id(first.id());
  walfeed::v1::CancelBackfillResponse cancelled;
  grpc::ClientContext context;
  ASSERT_THAT(stub_->CancelBackfill(&context, cancel, &cancelled), GrpcOk());
  EXPECT_EQ(cancelled.backfill().state(), walfeed::v1::BACKFILL_STATE_CANCELLED);
  EXPECT_LE(GetBackfill(first.id()).rows(), 4u) << "at most four one-row chunks go unacked";
  EXPECT_EQ(GetBackfill(first.id()).state(), walfeed::v1::BACKFILL_STATE_CANCELLED);
  walfeed::v1::GetBackfillRequest missing;
  missing.set_stream(kStream);
  missing.set_id("999999");
  grpc::ClientContext missing_context;
  walfeed::v1::GetBackfillResponse none;
  EXPECT_THAT(stub_->GetBackfill(&missing_context, missing, &none),
              GrpcIs(grpc::StatusCode::NOT_FOUND, HasSubstr("999999")));
}

TEST_F(BackfillE2eTest, AChunkWaitsForATransactionRunningAtItsLowWatermark) {
  ASSERT_THAT(pg_->Exec("INSERT INTO orders SELECT i, 'x', 1, NULL FROM generate_series(1, 20) i"),
              IsOk());
  StartServer(Yaml());
  std::unique_ptr<Subscription> a = Subscribe(Request("a"));
  // A transaction with an xid, left open: a chunk snapshot taken before it
  // ends might not see a commit that precedes the low watermark in the WAL.
  PGconn* open = PQconnectdb(pg_->ConnInfo().c_str());
  PQclear(PQexec(open, "BEGIN; INSERT INTO other VALUES (42, 'open')"));
  Backfill started;
  ASSERT_THAT(StartBackfill("a", "public.orders", &started), GrpcOk());
  Backfill waiting;
  ASSERT_TRUE(WaitUntil(
      [&] {
        waiting = GetBackfill(started.id());
        return absl::StrContains(waiting.error(), "was running when the chunk's low watermark");
      },
      kDeadline, absl::Milliseconds(50)));
  EXPECT_EQ(waiting.state(), walfeed::v1::BACKFILL_STATE_RUNNING);
  EXPECT_EQ(waiting.rows(), 0u) << "no chunk is read while it runs";
  PQclear(PQexec(open, "COMMIT"));
  PQfinish(open);
  const Backfill done = AckUntilEnded(*a, "a", started.id(), absl::Seconds(60));
  EXPECT_EQ(done.state(), walfeed::v1::BACKFILL_STATE_DONE) << done.error();
  EXPECT_EQ(done.rows(), 20u);
  EXPECT_EQ(done.error(), "");
}

TEST_F(BackfillE2eTest, CompositeTextKeyWithAPredicate) {
  ASSERT_THAT(
      pg_->Exec("CREATE TYPE mood AS ENUM ('sad', 'ok', 'happy');"
                "CREATE TABLE people (country text, name text, id uuid, m mood, "
                "score numeric, PRIMARY KEY (country, name));"
                "INSERT INTO people SELECT c, 'name ' || i || ' ' || c, "
                "md5(c || i)::uuid, (ARRAY['sad','ok','happy'])[1 + i % 3]::mood, i / 7.0 "
                "FROM generate_series(1, 300) i, unnest(ARRAY['de', 'fr', 'Ελλάδα', 'us']) c"),
      IsOk());
  const std::string yaml =
      absl::StrCat("listen: \"127.0.0.1:0\"\nplaintext: true\nstreams:\n",
                   StreamYaml(kStream, kSlot, "public.people, public.other"));
  StartServer(yaml);
  std::unique_ptr<Subscription> a = Subscribe(Request("a"));
  Backfill started;
  ASSERT_THAT(StartBackfill("a", "public.people", &started, 37, "m <> 'sad'"), GrpcOk());
  EXPECT_THAT(started.key_columns(), ElementsAre("country", "name"));
  const Backfill done = AckUntilEnded(*a, "a", started.id());
  EXPECT_EQ(done.state(), walfeed::v1::BACKFILL_STATE_DONE) << done.error();
  Materialized table({"country", "name"});
  for (const ChangeEvent& event : a->events()) table.Apply(event);
  EXPECT_EQ(table.Rows(), ExpectedRows("people WHERE m <> 'sad'",
                                       {"country", "name", "id", "m", "score"}));
  EXPECT_EQ(done.rows(), 800u);
}

TEST_F(BackfillE2eTest, KilledServerResumesAtTheNextChunk) {
  constexpr int kRows = 30000;
  constexpr uint32_t kChunk = 500;
  ASSERT_THAT(pg_->Exec(absl::StrCat("INSERT INTO orders SELECT i, 'item ' || i, i, NULL "
                                     "FROM generate_series(1, ",
                                     kRows, ") i")),
              IsOk());
  const std::string config = dir_ + "/walfeed.yaml";
  {
    std::ofstream out(config);
    out << Yaml();
  }
  auto process = std::make_unique<ServerProcess>(config, dir_ + "/server1.log");
  int port = process->WaitForPort();
  ASSERT_GT(port, 0) << process->Log();
  Connect(port);
  std::unique_ptr<Subscription> first = Subscribe(Request("a"));
  Backfill started;
  ASSERT_THAT(StartBackfill("a", "public.orders", &started, kChunk), GrpcOk());
  // Ack as rows arrive; kill -9 once a third of the table went through.
  EventId acked;
  ASSERT_TRUE(WaitUntil(
      [&] {
        AckAll(*first, "a", &acked);
        return GetBackfill(started.id()).rows() >= kRows / 3;
      },
      absl::Seconds(120), absl::Milliseconds(5)));
  // Then part of a chunk more: the rest of it is what a restart reads again.
  ASSERT_TRUE(WaitUntil([&] { return ParseId(first->events().back().id()) > acked; }, kDeadline,
                        absl::Milliseconds(5)));
  const std::vector<ChangeEvent> delivered = first->events();
  for (size_t i = delivered.size(); i-- > 0;) {
    if (ParseId(delivered[i].id()) <= acked) break;
    if (delivered[i].op() == walfeed::v1::OPERATION_READ && delivered[i].index() == kChunk / 2) {
      acked = ParseId(delivered[i].id());
      AckOk(*first, "a", acked.ToString());
      break;
    }
  }
  process->Signal(SIGKILL);
  ASSERT_TRUE(process->WaitForExit(kDeadline).has_value());
  ASSERT_TRUE(first->WaitForEnd());

  Materialized table({"id"});
  const std::set<std::string> acked_reads = ApplyAcked(first->events(), acked, &table);
  ASSERT_FALSE(acked_reads.empty());

  process = std::make_unique<ServerProcess>(config, dir_ + "/server2.log");
  port = process->WaitForPort();
  ASSERT_GT(port, 0) << process->Log();
  Connect(port);
  std::unique_ptr<Subscription> second = Subscribe(Request("a"));
  EXPECT_EQ(second->started().checkpoint(), acked.ToString());
  // The runner loads the backfill once the stream is prepared.
  walfeed::v1::GetBackfillResponse resumed;
  ASSERT_TRUE(WaitUntil([&] {
    walfeed::v1::GetBackfillRequest request;
    request.set_stream(kStream);
    request.set_id(started.id());
    grpc::ClientContext context;
    context.set_deadline(ChronoDeadline(kDeadline));
    return stub_->GetBackfill(&context, request, &resumed).ok();
  }, kDeadline, absl::Milliseconds(20)));
  const Backfill done = AckUntilEnded(*second, "a", started.id());
  EXPECT_EQ(done.state(), walfeed::v1::BACKFILL_STATE_DONE) << done.error();

  size_t reread = 0;
  for (const ChangeEvent& event : second->events()) {
    table.Apply(event);
    if (event.op() == walfeed::v1::OPERATION_READ && acked_reads.count(NewValue(event, "id"))) {
      ++reread;
    }
  }
  EXPECT_EQ(table.Rows(), ExpectedRows("orders", {"id", "item", "qty", "note"}));
  // Only the chunk the consumer had acked part of is read again.
  EXPECT_LE(reread, kChunk);
  EXPECT_GT(reread, 0u) << "the kill came after half a chunk was acked";
  EXPECT_THAT(process->Log(), HasSubstr("resumes after chunk ending at"));
  std::cout << "[ figures ] killed after " << acked_reads.size() << " acked rows; " << reread
            << " of them read again after the restart (chunk " << kChunk << ")" << std::endl;
  process->Signal(SIGTERM);
  EXPECT_TRUE(process->WaitForExit(kDeadline).has_value());
}

}  // namespace
}  // namespace walfeed::server::e2e
