// End-to-end tests of walfeed-server against a throwaway PostgreSQL 15, through
// real gRPC clients. They prove, each exactly:
//   - events carry deterministic ids ("<commit_lsn>:<index>" matching the commit
//     record pg_walinspect shows), xid, commit time, op, table, column values,
//     kinds and key flags, transaction boundaries, and old rows per REPLICA
//     IDENTITY;
//   - acks are durable: a restarted server resumes exactly after the checkpoint,
//     mid-transaction or at a transaction's end, with identical ids and values;
//   - a newer Subscribe takes over and fences the older session's acks;
//   - every documented Ack and Subscribe error code, and the message details the
//     API promises;
//   - table and operation filters, and acking past filtered events;
//   - flow control: a consumer that never acks gets exactly max_unacked_events
//     while a 1,000,000-row transaction commits, the stream's buffer and the
//     process's memory stay bounded, and an ack opens the window again;
//   - progress frames on idle subscriptions; bearer-token authorization; health
//     per stream, including a slot dropped from outside (DATA_LOSS); reflection;
//     GetStatus;
//   - the walfeed-server binary: SIGTERM mid-stream ends subscriptions with
//     UNAVAILABLE, closes replication cleanly and exits 0; after a restart every
//     committed row is delivered exactly once after the acked checkpoint.
// Tests never sleep: every wait is on a condition with a deadline.
#include "tests/server/e2e_harness.h"

namespace walfeed::server {
namespace {

using namespace ::walfeed::server::e2e;  // NOLINT: the harness is this file's vocabulary.

// ---------------------------------------------------------------------------
// 1. Event contents.

// What PostgreSQL itself says about a committed transaction.
struct CommittedTxn {
  uint32_t xid = 0;
  uint64_t commit_lsn = 0;  // Start of the COMMIT record.
  int64_t commit_unix_micros = 0;
};

class EventContentsTest : public ServerE2eTest {
 protected:
  // `xid_query` selects the xmin of a row the transaction wrote.
  CommittedTxn Describe(const std::string& xid_query, const std::string& wal_from) {
    CommittedTxn txn;
    const std::string xid = Sql(xid_query);
    EXPECT_TRUE(absl::SimpleAtoi(xid, &txn.xid)) << xid;
    const std::string lsn = Sql(
        absl::StrCat("SELECT start_lsn FROM pg_get_wal_records_info('", wal_from,
                     "', pg_current_wal_flush_lsn()) WHERE resource_manager = 'Transaction' AND "
                     "record_type = 'COMMIT' AND xid = '",
                     xid, "'::xid"));
    absl::StatusOr<Lsn> parsed = Lsn::Parse(lsn);
    EXPECT_THAT(parsed, IsOk()) << lsn;
    txn.commit_lsn = parsed.value_or(Lsn()).value();
    const std::string micros =
        Sql(absl::StrCat("SELECT (extract(epoch FROM pg_xact_commit_timestamp('", xid,
                         "'::xid)) * 1000000)::bigint"));
    EXPECT_TRUE(absl::SimpleAtoi(micros, &txn.commit_unix_micros)) << micros;
    return txn;
  }

  static ChangeEvent Expected(const CommittedTxn& txn, uint32_t index, uint32_t count,
                              walfeed::v1::Operation op, const std::string& table) {
    ChangeEvent event;
    event.set_id(absl::StrCat(Lsn(txn.commit_lsn).ToString(), ":", index));
    event.set_commit_lsn(txn.commit_lsn);
    event.set_index(index);
    event.set_xid(txn.xid);
    event.mutable_commit_time()->set_seconds(txn.commit_unix_micros / 1000000);
    event.mutable_commit_time()->set_nanos(static_cast<int32_t>(txn.commit_unix_micros % 1000000) *
                                           1000);
    event.set_op(op);
    event.set_schema("public");
    event.set_table(table);
    if (index + 1 == count) {
      event.set_last_in_transaction(true);
      event.set_transaction_event_count(count);
    }
    return event;
  }
};

TEST_F(EventContentsTest, EventsCarryExactIdsValuesAndTransactionBoundaries) {
  ASSERT_THAT(pg_->Exec("CREATE EXTENSION pg_walinspect"), IsOk());
  StartServer(Yaml());
  std::unique_ptr<Subscription> sub = Subscribe(Request("c"));
  ASSERT_TRUE(sub->has_started());
  const Started started = sub->started();
  EXPECT_FALSE(started.session_id().empty());
  EXPECT_EQ(started.checkpoint(), "");
  EXPECT_EQ(started.start_after(), "");
  EXPECT_EQ(started.slot().name(), kSlot);
  EXPECT_EQ(started.slot().plugin(), "pgoutput");

  const std::string wal_from = Sql("SELECT pg_current_wal_insert_lsn()");
  // T1: two inserts. T2: one insert into the REPLICA IDENTITY FULL table.
  ASSERT_THAT(pg_->Exec("BEGIN; INSERT INTO orders VALUES (1, 'apple', 3, NULL);"
                        "INSERT INTO orders VALUES (2, 'pear', NULL, 'gift'); COMMIT"),
              IsOk());
  const CommittedTxn t1 = Describe("SELECT xmin FROM orders WHERE id = 2", wal_from);
  ASSERT_THAT(pg_->Exec("INSERT INTO full_rows VALUES (10, 'old', 12.50)"), IsOk());
  const CommittedTxn t2 = Describe("SELECT xmin FROM full_rows WHERE id = 10", wal_from);
  // T3: an UPDATE under FULL, a DELETE and a key-preserving UPDATE under DEFAULT.
  ASSERT_THAT(pg_->Exec("BEGIN; UPDATE full_rows SET v = 'new', amount = 13.75 WHERE id = 10;"
                        "DELETE FROM orders WHERE id = 2;"
                        "UPDATE orders SET qty = 4 WHERE id = 1; COMMIT"),
              IsOk());
  const CommittedTxn t3 = Describe("SELECT xmin FROM orders WHERE id = 1", wal_from);
  ASSERT_LT(t1.commit_lsn, t2.commit_lsn);
  ASSERT_LT(t2.commit_lsn, t3.commit_lsn);

  ASSERT_TRUE(sub->WaitForEvents(6));
  ASSERT_TRUE(sub->WaitForProgressAfter(6));
  const std::vector<ChangeEvent> events = sub->events();
  ASSERT_EQ(events.size(), 6u) << "nothing beyond the three transactions";

  std::vector<ChangeEvent> expected;
  {
    ChangeEvent e = Expected(t1, 0, 2, walfeed::v1::OPERATION_INSERT, "orders");
    *e.add_new_values() = Col("id", kInt4, "int4", true, "1");
    *e.add_new_values() = Col("item", kText, "text", false, "apple");
    *e.add_new_values() = Col("qty", kInt4, "int4", false, "3");
    *e.add_new_values() = Col("note", kText, "text", false, std::nullopt);
    expected.push_back(e);
  }
  {
    ChangeEvent e = Expected(t1, 1, 2, walfeed::v1::OPERATION_INSERT, "orders");
    *e.add_new_values() = Col("id", kInt4, "int4", true, "2");
    *e.add_new_values() = Col("item", kText, "text", false, "pear");
    *e.add_new_values() = Col("qty", kInt4, "int4", false, std::nullopt);
    *e.add_new_values() = Col("note", kText, "text", false, "gift");
    expected.push_back(e);
  }
  {
    // REPLICA IDENTITY FULL: PostgreSQL marks every column as part of the key.
    ChangeEvent e = Expected(t2, 0, 1, walfeed::v1::OPERATION_INSERT, "full_rows");
    *e.add_new_values() = Col("id", kInt4, "int4", true, "10");
    *e.add_new_values() = Col("v", kText, "text", true, "old");
    *e.add_new_values() = Col("amount", kNumeric, "numeric", true, "12.50");
    expected.push_back(e);
  }
  {
    ChangeEvent e = Expected(t3, 0, 3, walfeed::v1::OPERATION_UPDATE, "full_rows");
    *e.add_new_values() = Col("id", kInt4, "int4", true, "10");
    *e.add_new_values() = Col("v", kText, "text", true, "new");
    *e.add_new_values() = Col("amount", kNumeric, "numeric", true, "13.75");
    e.set_old_values_kind(walfeed::v1::OLD_VALUES_FULL);
    *e.add_old_values() = Col("id", kInt4, "int4", true, "10");
    *e.add_old_values() = Col("v", kText, "text", true, "old");
    *e.add_old_values() = Col("amount", kNumeric, "numeric", true, "12.50");
    expected.push_back(e);
  }
  {
    ChangeEvent e = Expected(t3, 1, 3, walfeed::v1::OPERATION_DELETE, "orders");
    e.set_old_values_kind(walfeed::v1::OLD_VALUES_KEY);
    *e.add_old_values() = Col("id", kInt4, "int4", true, "2");
    expected.push_back(e);
  }
  {
    // DEFAULT identity, key unchanged: no old row at all.
    ChangeEvent e = Expected(t3, 2, 3, walfeed::v1::OPERATION_UPDATE, "orders");
    *e.add_new_values() = Col("id", kInt4, "int4", true, "1");
    *e.add_new_values() = Col("item", kText, "text", false, "apple");
    *e.add_new_values() = Col("qty", kInt4, "int4", false, "4");
    *e.add_new_values() = Col("note", kText, "text", false, std::nullopt);
    expected.push_back(e);
  }
  for (size_t i = 0; i < expected.size(); ++i) {
    EXPECT_THAT(events[i], EqualsProto(expected[i])) << "event " << i;
    // The id's text and the numeric fields agree.
    const EventId id = ParseId(events[i].id());
    EXPECT_EQ(id.commit_lsn.value(), events[i].commit_lsn()) << events[i].id();
    EXPECT_EQ(id.index, events[i].index()) << events[i].id();
  }
  EXPECT_EQ(sub->protocol_errors(), 0);
}

// ---------------------------------------------------------------------------
// 2. Durable acks: a restarted server resumes exactly after the checkpoint.

class ResumeTest : public ServerE2eTest, public ::testing::WithParamInterface<bool> {};

TEST_P(ResumeTest, RestartedServerResumesExactlyAfterTheCheckpoint) {
  const bool at_transaction_end = GetParam();
  StartServer(Yaml());
  std::unique_ptr<Subscription> sub = Subscribe(Request("c"));
  // T1: events 0-2; T2: events 3-4.
  ASSERT_THAT(pg_->Exec("INSERT INTO orders SELECT g, 'a' || g, g, NULL "
                        "FROM generate_series(1, 3) g"),
              IsOk());
  ASSERT_THAT(pg_->Exec("INSERT INTO orders SELECT g, 'b' || g, g, 'x' "
                        "FROM generate_series(4, 5) g"),
              IsOk());
  ASSERT_TRUE(sub->WaitForEvents(5));
  const std::vector<ChangeEvent> before = sub->events();
  ASSERT_EQ(before.size(), 5u);
  ASSERT_EQ(before[0].commit_lsn(), before[2].commit_lsn());
  ASSERT_TRUE(before[2].last_in_transaction());
  ASSERT_NE(before[2].commit_lsn(), before[3].commit_lsn());

  // A mid-transaction ack, then the one the restart resumes after.
  const size_t acked = at_transaction_end ? 2 : 1;
  EXPECT_EQ(AckOk(*sub, "c", before[acked - 1].id()), before[acked - 1].id());
  EXPECT_EQ(AckOk(*sub, "c", before[acked].id()), before[acked].id());

  StopServer();
  ASSERT_TRUE(sub->WaitForEnd());
  EXPECT_THAT(*sub->status(), GrpcIs(grpc::StatusCode::UNAVAILABLE, HasSubstr("shutting down")));

  StartServer(Yaml());
  std::unique_ptr<Subscription> resumed = Subscribe(Request("c"));
  ASSERT_TRUE(resumed->has_started());
  EXPECT_EQ(resumed->started().checkpoint(), before[acked].id());
  EXPECT_EQ(resumed->started().start_after(), before[acked].id());
  const size_t expected = before.size() - acked - 1;
  ASSERT_TRUE(resumed->WaitForEvents(expected));
  ASSERT_TRUE(resumed->WaitForProgressAfter(expected));
  const std::vector<ChangeEvent> after = resumed->events();
  ASSERT_EQ(after.size(), expected) << "nothing at or below the checkpoint, nothing twice";
  for (size_t i = 0; i < expected; ++i) {
    EXPECT_THAT(after[i], EqualsProto(before[acked + 1 + i])) << "event " << i;
  }
  // The restarted server accepts acks of what it redelivered.
  EXPECT_EQ(AckOk(*resumed, "c", after.back().id()), after.back().id());

  // And the stream goes on from there.
  ASSERT_THAT(pg_->Exec("INSERT INTO orders VALUES (6, 'c6', 6, NULL)"), IsOk());
  ASSERT_TRUE(resumed->WaitForEvents(expected + 1));
  const ChangeEvent next = resumed->events().back();
  EXPECT_EQ(NewValue(next, "id"), "6");
  EXPECT_GT(next.commit_lsn(), before.back().commit_lsn());
  EXPECT_EQ(next.index(), 0u);
}

INSTANTIATE_TEST_SUITE_P(AckPosition, ResumeTest, ::testing::Values(false, true),
                         [](const ::testing::TestParamInfo<bool>& info) {
                           return info.param ? "AtTransactionEnd" : "MidTransaction";
                         });

// ---------------------------------------------------------------------------
// 3. Takeover and fencing.

TEST_F(ServerE2eTest, NewerSubscribeSupersedesAndFencesTheOlderSession) {
  StartServer(Yaml());
  std::unique_ptr<Subscription> first = Subscribe(Request("c"));
  ASSERT_THAT(pg_->Exec("INSERT INTO orders VALUES (1, 'a', 1, NULL)"), IsOk());
  ASSERT_TRUE(first->WaitForEvents(1));
  const std::string id = first->events()[0].id();

  std::unique_ptr<Subscription> second = Subscribe(Request("c"));
  ASSERT_TRUE(first->WaitForEnd());
  EXPECT_THAT(*first->status(),
              GrpcIs(grpc::StatusCode::ABORTED,
                     AllOf(HasSubstr("superseded"), HasSubstr(first->session_id()),
                           HasSubstr(second->session_id()))));
  EXPECT_THAT(*first->status(), HasReason("SESSION_SUPERSEDED", false));
  EXPECT_NE(first->session_id(), second->session_id());

  // Nothing was acked: the new session gets the event again.
  ASSERT_TRUE(second->WaitForEvents(1));
  EXPECT_THAT(second->events()[0], EqualsProto(first->events()[0]));

  EXPECT_THAT(Ack("c", first->session_id(), id),
              GrpcIs(grpc::StatusCode::ABORTED,
                     AllOf(HasSubstr(first->session_id()), HasSubstr(second->session_id()))));
  AckResponse response;
  EXPECT_THAT(Ack("c", second->session_id(), id, &response), GrpcOk());
  EXPECT_EQ(response.checkpoint(), id);
  // The old session stays fenced, even for an id the checkpoint already covers.
  EXPECT_THAT(Ack("c", first->session_id(), id),
              GrpcIs(grpc::StatusCode::ABORTED, HasSubstr("superseded")));
  EXPECT_THAT(Ack("c", "not-a-session", id),
              GrpcIs(grpc::StatusCode::ABORTED, HasSubstr("not the active")));
  EXPECT_THAT(Ack("c", "not-a-session", id), HasReason("SESSION_NOT_ACTIVE", false));
  // An empty session id is the client's mistake, not a superseded session.
  EXPECT_THAT(Ack("c", "", id), GrpcIs(grpc::StatusCode::INVALID_ARGUMENT, HasSubstr("session_id")));
  EXPECT_THAT(Ack("c", "", id), HasReason("INVALID_REQUEST", false));
  EXPECT_THAT(Ack("c", first->session_id(), "0/0:99999999999"),
              HasReason("INVALID_REQUEST", false));
}

// ---------------------------------------------------------------------------
// 4. Every documented error.

// A store that refuses an ack for good (here: a trigger raising the SQLSTATE of
// a missing grant) is not "retry forever": the client gets the database's code
// and a reason without RetryInfo; a transient one would have been UNAVAILABLE.
TEST_F(ServerE2eTest, AnAckTheCheckpointStoreRefusesForGoodIsNotRetryable) {
  StartServer(Yaml());
  std::unique_ptr<Subscription> sub = Subscribe(Request("c"));
  ASSERT_THAT(pg_->Exec("INSERT INTO orders VALUES (1, 'a', 1, NULL)"), IsOk());
  ASSERT_TRUE(sub->WaitForEvents(1));
  const std::string id = sub->events()[0].id();
  ASSERT_THAT(pg_->Exec(R"sql(
      CREATE FUNCTION walfeed.refuse() RETURNS trigger LANGUAGE plpgsql AS $$
      BEGIN RAISE EXCEPTION 'permission denied for table consumer_checkpoints'
            USING ERRCODE = 'insufficient_privilege'; END $$;
      CREATE TRIGGER refuse BEFORE INSERT OR UPDATE ON walfeed.consumer_checkpoints
        FOR EACH ROW EXECUTE FUNCTION walfeed.refuse();)sql"),
              IsOk());
  const grpc::Status refused = Ack("c", sub->session_id(), id);
  EXPECT_THAT(refused, GrpcIs(grpc::StatusCode::PERMISSION_DENIED,
                              AllOf(HasSubstr("could not store the ack"), HasSubstr("42501"),
                                    HasSubstr("an operator must fix this"))));
  EXPECT_THAT(refused, HasReason("CHECKPOINT_WRITE_REFUSED", false));

  // Fixed: the same Ack from the same session goes through.
  ASSERT_THAT(pg_->Exec("DROP TRIGGER refuse ON walfeed.consumer_checkpoints"), IsOk());
  AckResponse response;
  EXPECT_THAT(Ack("c", sub->session_id(), id, &response), GrpcOk());
  EXPECT_EQ(response.checkpoint(), id);
}

TEST_F(ServerE2eTest, AckAndSubscribeErrorsAreExact) {
  StartServer(Yaml());
  std::unique_ptr<Subscription> sub = Subscribe(Request("c"));
  ASSERT_THAT(pg_->Exec("INSERT INTO orders SELECT g, 'a', g, NULL FROM generate_series(1, 2) g"),
              IsOk());
  ASSERT_THAT(pg_->Exec("INSERT INTO orders SELECT g, 'b', g, NULL FROM generate_series(3, 4) g"),
              IsOk());
  ASSERT_TRUE(sub->WaitForEvents(4));
  const std::vector<ChangeEvent> e = sub->events();
  const std::string session = sub->session_id();
  const std::string t1 = Lsn(e[0].commit_lsn()).ToString();
  const std::string t2 = Lsn(e[2].commit_lsn()).ToString();

  // Ack.
  EXPECT_THAT(
      Ack("c", session, e[0].id(), nullptr, "nope"),
      GrpcIs(grpc::StatusCode::NOT_FOUND, AllOf(HasSubstr("\"nope\""), HasSubstr(kStream))));
  EXPECT_THAT(Ack("c", session, e[0].id(), nullptr, "nope"), HasReason("STREAM_NOT_FOUND", false));
  EXPECT_THAT(Ack("ghost", session, e[0].id()),
              GrpcIs(grpc::StatusCode::NOT_FOUND, HasSubstr("no consumer \"ghost\"")));
  EXPECT_THAT(Ack("ghost", session, e[0].id()), HasReason("CONSUMER_NOT_FOUND", false));
  EXPECT_THAT(Ack("c", "", e[0].id()),
              GrpcIs(grpc::StatusCode::INVALID_ARGUMENT, HasSubstr("session_id: empty")));
  EXPECT_THAT(Ack("c", session, e[0].id(), nullptr, ""),
              GrpcIs(grpc::StatusCode::INVALID_ARGUMENT, HasSubstr("stream:")));
  for (const std::string& bad : std::vector<std::string>{"zzz", "0/1", "0/1:x", "0/1:-1", ""}) {
    EXPECT_THAT(Ack("c", session, bad),
                GrpcIs(grpc::StatusCode::INVALID_ARGUMENT,
                       AllOf(HasSubstr("event_id"),
                             HasSubstr("expected <commit_lsn>:<index> like 0/1A2B3C8:0"))))
        << bad;
  }
  EXPECT_THAT(Ack("bad name!", session, e[0].id()),
              GrpcIs(grpc::StatusCode::INVALID_ARGUMENT, HasSubstr("consumer")));
  // Never delivered: a later index of the newest delivered transaction, a later
  // index of an earlier one (the session has passed it), a far-future LSN.
  EXPECT_THAT(Ack("c", session, absl::StrCat(t2, ":2")),
              GrpcIs(grpc::StatusCode::OUT_OF_RANGE, HasSubstr(absl::StrCat(t2, ":2"))));
  EXPECT_THAT(Ack("c", session, absl::StrCat(t1, ":7")),
              GrpcIs(grpc::StatusCode::OUT_OF_RANGE, HasSubstr(absl::StrCat(t1, ":7"))));
  EXPECT_THAT(Ack("c", session, "FFFFFFFF/0:0"),
              GrpcIs(grpc::StatusCode::OUT_OF_RANGE, HasSubstr("FFFFFFFF/0:0")));
  // None of the failures moved the checkpoint; then an ack at T1's end.
  GetStatusResponse status;
  ASSERT_THAT(Status(kStream, &status), GrpcOk());
  ASSERT_EQ(status.streams_size(), 1);
  ASSERT_EQ(status.streams(0).consumers_size(), 1);
  EXPECT_EQ(status.streams(0).consumers(0).checkpoint(), "");
  AckResponse response;
  ASSERT_THAT(Ack("c", session, e[1].id(), &response), GrpcOk());
  EXPECT_EQ(response.checkpoint(), e[1].id());
  // At or below the checkpoint: OK, nothing changes.
  for (const std::string& below : {e[1].id(), e[0].id(), std::string("0/1:0")}) {
    AckResponse same;
    EXPECT_THAT(Ack("c", session, below, &same), GrpcOk()) << below;
    EXPECT_EQ(same.checkpoint(), e[1].id()) << below;
  }
  status.Clear();
  ASSERT_THAT(Status(kStream, &status), GrpcOk());
  ASSERT_EQ(status.streams(0).consumers_size(), 1);
  EXPECT_EQ(status.streams(0).consumers(0).checkpoint(), e[1].id());

  // "c" was the only consumer, so its ack let the stream drop everything up to
  // e[1]: a new consumer may not start below that (it would silently miss e[1]),
  // and the refusal does not register it.
  {
    SubscribeRequest request = Request("late");
    request.set_start_after(e[0].id());
    EXPECT_THAT(SubscribeError(request),
                GrpcIs(grpc::StatusCode::OUT_OF_RANGE,
                       AllOf(HasSubstr(e[0].id()), HasSubstr("up to " + e[1].id()))));
    status.Clear();
    ASSERT_THAT(Status(kStream, &status), GrpcOk());
    EXPECT_EQ(status.streams(0).consumers_size(), 1);
  }
  {
    SubscribeRequest request = Request("late");
    request.set_start_after(e[1].id());
    std::unique_ptr<Subscription> late = Subscribe(request);
    EXPECT_EQ(late->started().start_after(), e[1].id());
    ASSERT_TRUE(late->WaitForEvents(2));
    ASSERT_TRUE(late->WaitForProgressAfter(2));
    EXPECT_THAT(Ids(late->events()), ElementsAre(e[2].id(), e[3].id()));
    // At the session's start, which a new consumer never acked: OK, nothing is
    // stored, and the answer says so ("", as GetStatus does).
    AckResponse nothing;
    EXPECT_THAT(Ack("late", late->session_id(), e[1].id(), &nothing), GrpcOk());
    EXPECT_EQ(nothing.checkpoint(), "");
  }

  // Subscribe.
  EXPECT_THAT(
      SubscribeError(Request("c", "nope")),
      GrpcIs(grpc::StatusCode::NOT_FOUND, AllOf(HasSubstr("\"nope\""), HasSubstr(kStream))));
  // An empty or malformed name is the client's mistake, not an unknown stream.
  for (const std::string& bad : std::vector<std::string>{"", "bad name!", std::string(64, 's')}) {
    EXPECT_THAT(SubscribeError(Request("c", bad)),
                GrpcIs(grpc::StatusCode::INVALID_ARGUMENT, HasSubstr("stream:")))
        << bad;
  }
  for (const std::string& bad :
       std::vector<std::string>{"", "bad name!", std::string(64, 'x'), "\xc3\xbc"}) {
    EXPECT_THAT(SubscribeError(Request(bad)),
                GrpcIs(grpc::StatusCode::INVALID_ARGUMENT, HasSubstr("consumer:")))
        << bad;
  }
  {
    SubscribeRequest request = Request("c");
    request.set_start_after("zzz");
    EXPECT_THAT(SubscribeError(request),
                GrpcIs(grpc::StatusCode::INVALID_ARGUMENT,
                       AllOf(HasSubstr("start_after"), HasSubstr("0/1A2B3C8:0"))));
  }
  {
    SubscribeRequest request = Request("c");
    request.set_start_after(e[0].id());
    EXPECT_THAT(SubscribeError(request),
                GrpcIs(grpc::StatusCode::OUT_OF_RANGE,
                       AllOf(HasSubstr(e[0].id()), HasSubstr("checkpoint " + e[1].id()))));
  }
  {
    SubscribeRequest request = Request("c");
    request.add_tables("orders");
    EXPECT_THAT(SubscribeError(request),
                GrpcIs(grpc::StatusCode::INVALID_ARGUMENT, HasSubstr("tables[0]")));
  }
  {
    SubscribeRequest request = Request("c");
    request.add_tables("public.orders");
    request.add_tables("");
    EXPECT_THAT(SubscribeError(request),
                GrpcIs(grpc::StatusCode::INVALID_ARGUMENT, HasSubstr("tables[1]")));
  }
  {
    SubscribeRequest request = Request("c");
    request.add_operations(walfeed::v1::OPERATION_UNSPECIFIED);
    EXPECT_THAT(SubscribeError(request),
                GrpcIs(grpc::StatusCode::INVALID_ARGUMENT, HasSubstr("operations[0]")));
  }
  // None of the failed Subscribes took the session over.
  EXPECT_FALSE(sub->status().has_value());
  EXPECT_THAT(Ack("c", session, e[1].id()), GrpcOk());

  // start_after at the checkpoint, and above it, is honoured.
  {
    SubscribeRequest request = Request("c");
    request.set_start_after(e[1].id());
    std::unique_ptr<Subscription> at = Subscribe(request);
    EXPECT_EQ(at->started().start_after(), e[1].id());
    EXPECT_EQ(at->started().checkpoint(), e[1].id());
    ASSERT_TRUE(at->WaitForEvents(2));
    ASSERT_TRUE(at->WaitForProgressAfter(2));
    EXPECT_THAT(Ids(at->events()), ElementsAre(e[2].id(), e[3].id()));
  }
  {
    SubscribeRequest request = Request("c");
    request.set_start_after(e[2].id());
    std::unique_ptr<Subscription> above = Subscribe(request);
    EXPECT_EQ(above->started().start_after(), e[2].id());
    EXPECT_EQ(above->started().checkpoint(), e[1].id());
    ASSERT_TRUE(above->WaitForEvents(1));
    ASSERT_TRUE(above->WaitForProgressAfter(1));
    EXPECT_THAT(Ids(above->events()), ElementsAre(e[3].id()));
    EXPECT_THAT(above->events()[0], EqualsProto(e[3]));
    EXPECT_EQ(AckOk(*above, "c", e[3].id()), e[3].id());
  }
}

// ---------------------------------------------------------------------------
// 5. Filters.

// A second server on a port already served fails to start instead of sharing the
// port (gRPC's default SO_REUSEPORT would let it, splitting clients between them).
TEST_F(ServerE2eTest, ASecondServerOnTheSamePortFailsToStart) {
  StartServer(Yaml());
  absl::StatusOr<ServerConfig> config = ParseConfig(Yaml(), "e2e.yaml");
  ASSERT_THAT(config, IsOk());
  config->listen = absl::StrCat("127.0.0.1:", server_->port());
  absl::StatusOr<std::unique_ptr<WalfeedServer>> second =
      WalfeedServer::Start(*config, replication::pg::MakePgStreamSource);
  EXPECT_THAT(second.status(), StatusIs(absl::StatusCode::kUnavailable,
                                        AllOf(HasSubstr(config->listen), HasSubstr("in use"))));
}

// Subscribe takes its request as bytes (the server parses it itself): bytes that
// are not a SubscribeRequest are refused with INVALID_ARGUMENT, and the server
// keeps serving.
TEST_F(ServerE2eTest, SubscribeBytesThatAreNotARequestAreInvalidArgument) {
  StartServer(Yaml());
  grpc::GenericStub stub(channel_);
  // Field 1 (stream), length-delimited, claiming 127 bytes where 3 follow.
  const std::string truncated("\x0a\x7f" "abc", 5);
  for (const std::string& bytes : {truncated, std::string("\xff\xff\xff\xff\xff\xff", 6)}) {
    grpc::ClientContext context;
    context.set_deadline(ChronoDeadline(absl::Seconds(30)));
    grpc::Slice slice(bytes);
    const grpc::ByteBuffer request(&slice, 1);
    grpc::ByteBuffer response;
    absl::Notification done;
    grpc::Status result;
    stub.UnaryCall(&context, "/walfeed.v1.ChangeStream/Subscribe", grpc::StubOptions(), &request,
                   &response, [&](grpc::Status status) {
                     result = std::move(status);
                     done.Notify();
                   });
    done.WaitForNotification();  // Bounded by the call's deadline.
    EXPECT_THAT(result, GrpcIs(grpc::StatusCode::INVALID_ARGUMENT,
                               HasSubstr("not a walfeed.v1.SubscribeRequest")));
  }
  std::unique_ptr<Subscription> sub = Subscribe(Request("after-garbage"));
  ASSERT_THAT(pg_->Exec("INSERT INTO orders VALUES (1, 'a', 1, NULL)"), IsOk());
  EXPECT_TRUE(sub->WaitForEvents(1));
}

TEST_F(ServerE2eTest, FiltersDeliverOnlyMatchingEventsAndAcksPassFilteredOnes) {
  StartServer(Yaml());
  SubscribeRequest filtered = Request("filtered");
  filtered.add_tables("public.ord*");  // orders and order_lines, not other.
  filtered.add_operations(walfeed::v1::OPERATION_INSERT);
  filtered.add_operations(walfeed::v1::OPERATION_UPDATE);
  std::unique_ptr<Subscription> sub = Subscribe(filtered);
  std::unique_ptr<Subscription> all = Subscribe(Request("all"));

  // T1: orders, other, order_lines inserts. T2: an orders update, an order_lines
  // delete. T3: only other. T4: an orders insert.
  ASSERT_THAT(pg_->Exec("BEGIN; INSERT INTO orders VALUES (1, 'a', 1, NULL);"
                        "INSERT INTO other VALUES (1, 'o');"
                        "INSERT INTO order_lines VALUES (1, 1, 'sku'); COMMIT"),
              IsOk());
  ASSERT_THAT(pg_->Exec("BEGIN; UPDATE orders SET qty = 2 WHERE id = 1;"
                        "DELETE FROM order_lines WHERE id = 1; COMMIT"),
              IsOk());
  ASSERT_THAT(pg_->Exec("INSERT INTO other VALUES (2, 'p')"), IsOk());
  ASSERT_THAT(pg_->Exec("INSERT INTO orders VALUES (2, 'b', 1, NULL)"), IsOk());

  ASSERT_TRUE(all->WaitForEvents(7));
  const std::vector<ChangeEvent> every = all->events();
  ASSERT_EQ(every.size(), 7u);
  ASSERT_TRUE(sub->WaitForEvents(4));
  ASSERT_TRUE(sub->WaitForProgressAfter(4));
  const std::vector<ChangeEvent> got = sub->events();
  // Matching events arrive unchanged, with their ids and transaction positions.
  ASSERT_EQ(got.size(), 4u);
  EXPECT_THAT(got[0], EqualsProto(every[0]));  // T1:0 orders insert.
  EXPECT_THAT(got[1], EqualsProto(every[2]));  // T1:2 order_lines insert.
  EXPECT_THAT(got[2], EqualsProto(every[3]));  // T2:0 orders update.
  EXPECT_THAT(got[3], EqualsProto(every[6]));  // T4:0 orders insert.
  EXPECT_EQ(got[1].index(), 2u);
  EXPECT_TRUE(got[1].last_in_transaction());
  EXPECT_FALSE(got[2].last_in_transaction()) << "T2's delete was filtered, not removed";
  EXPECT_EQ(every[5].table(), "other");

  // Acks past filtered events: the delete filtered out of T2, T3's only event.
  EXPECT_EQ(AckOk(*sub, "filtered", every[4].id()), every[4].id());
  EXPECT_EQ(AckOk(*sub, "filtered", every[5].id()), every[5].id());
  EXPECT_EQ(AckOk(*sub, "filtered", got[3].id()), got[3].id());
  // A progress frame reflects it (one sent before the acks may still be in flight).
  ASSERT_TRUE(WaitUntil(
      [&] {
        sub->WaitForProgressCount(sub->progress_count() + 1);
        return sub->last_progress().checkpoint() == got[3].id();
      },
      kDeadline));
  EXPECT_EQ(sub->last_progress().unacked_events(), 0u);
  EXPECT_EQ(sub->event_count(), 4u);
}

// ---------------------------------------------------------------------------
// 6. Flow control and memory.

TEST_F(ServerE2eTest, UnackedWindowStopsDeliveryAndMemoryStaysFlat) {
  constexpr uint64_t kBufferBytes = uint64_t{8} << 20;
  StartServer(Yaml(absl::StrCat("defaults:\n  buffer_bytes: ", kBufferBytes, "\n")));
  SubscribeRequest request = Request("slow");
  request.set_max_unacked_events(100);
  std::unique_ptr<Subscription> sub = Subscribe(request);
  // Settle the server and the client before the baseline.
  ASSERT_THAT(pg_->Exec("INSERT INTO other VALUES (0, 'warm-up')"), IsOk());
  ASSERT_TRUE(sub->WaitForEvents(1));
  ASSERT_EQ(AckOk(*sub, "slow", sub->events()[0].id()), sub->events()[0].id());
  const uint64_t baseline = VmRssBytes();

  const absl::Time insert_start = absl::Now();
  ASSERT_THAT(pg_->Exec("INSERT INTO orders SELECT g, 'item-' || g, g % 7, NULL "
                        "FROM generate_series(1, 1000000) g"),
              IsOk());
  const absl::Duration insert_time = absl::Now() - insert_start;
  ASSERT_TRUE(sub->WaitForEvents(101, absl::Seconds(60)));

  // The reader fills the stream's buffer and then stops reading.
  StreamRuntime* runtime = server_->stream(kStream);
  ASSERT_NE(runtime, nullptr);
  uint64_t peak = baseline;
  ASSERT_TRUE(WaitUntil(
      [&] {
        peak = std::max(peak, VmRssBytes());
        return runtime->Snapshot().buffered_bytes >= kBufferBytes;
      },
      absl::Seconds(60)));
  // Several progress frames later still exactly 100 unacked events, and the buffer
  // holds no more than one event beyond its bound.
  const size_t seen = sub->progress_count();
  for (size_t i = 1; i <= 5; ++i) {
    ASSERT_TRUE(sub->WaitForProgressCount(seen + i));
    peak = std::max(peak, VmRssBytes());
    const RuntimeSnapshot snapshot = runtime->Snapshot();
    EXPECT_LT(snapshot.buffered_bytes, kBufferBytes + 4096);
  }
  const std::vector<ChangeEvent> window = sub->events();
  ASSERT_EQ(window.size(), 101u) << "the warm-up event and exactly 100 more";
  const Progress progress = sub->last_progress();
  EXPECT_EQ(progress.unacked_events(), 100u);
  EXPECT_EQ(progress.last_delivered(), window.back().id());
  const uint64_t buffered_events = runtime->Snapshot().buffered_events;
  EXPECT_LT(buffered_events, 1000000u) << "PostgreSQL holds the rest";
  const uint64_t growth = peak > baseline ? peak - baseline : 0;
  std::cout << "flow control: INSERT of 1,000,000 rows took " << insert_time << "; VmRSS baseline "
            << (baseline >> 20) << " MiB, peak " << (peak >> 20) << " MiB, growth "
            << (growth >> 20) << " MiB; buffered " << buffered_events << " events; one event is "
            << window[50].ByteSizeLong() << " bytes serialized, " << window[50].SpaceUsedLong()
            << " bytes in memory\n";
  EXPECT_LT(growth, uint64_t{150} << 20);

  // The 100 are the transaction's first events, in order.
  const uint64_t commit_lsn = window[1].commit_lsn();
  for (uint32_t i = 0; i < 100; ++i) {
    EXPECT_EQ(window[1 + i].commit_lsn(), commit_lsn);
    EXPECT_EQ(window[1 + i].index(), i);
    EXPECT_EQ(NewValue(window[1 + i], "id"), absl::StrCat(i + 1));
    EXPECT_FALSE(window[1 + i].last_in_transaction());
  }

  // Acking the 100th opens the window for exactly 100 more.
  EXPECT_EQ(AckOk(*sub, "slow", window.back().id()), window.back().id());
  ASSERT_TRUE(sub->WaitForEvents(201));
  ASSERT_TRUE(sub->WaitForProgressAfter(201));
  const std::vector<ChangeEvent> more = sub->events();
  ASSERT_EQ(more.size(), 201u);
  EXPECT_EQ(more[101].index(), 100u);
  EXPECT_EQ(more[200].index(), 199u);
  EXPECT_EQ(NewValue(more[200], "id"), "200");
  sub.reset();
  const absl::Duration shutdown = StopServer();
  std::cout << "flow control: shutdown mid-transaction took " << shutdown << "\n";
}

// ---------------------------------------------------------------------------
// 7. Progress frames.

TEST_F(ServerE2eTest, IdleSubscriptionGetsProgressFrames) {
  StartServer(Yaml());  // Server default progress_interval: 5 s.
  std::unique_ptr<Subscription> sub = Subscribe(Request("idle"));  // Asks for 200 ms.
  const absl::Time start = absl::Now();
  // Three frames at the 5 s default would take at least 10 s; at 200 ms, well under
  // a second (the bound leaves room for a loaded machine).
  ASSERT_TRUE(sub->WaitForProgressCount(3, absl::Seconds(9)));
  EXPECT_LT(absl::Now() - start, absl::Seconds(9)) << "the request's 200 ms, not the 5 s default";
  const Progress first = sub->last_progress();
  EXPECT_FALSE(first.server_wal_lsn().empty());
  EXPECT_THAT(Lsn::Parse(first.server_wal_lsn()), IsOk());
  EXPECT_EQ(first.last_delivered(), "");
  EXPECT_EQ(first.checkpoint(), "");
  EXPECT_EQ(first.unacked_events(), 0u);

  // The server's position is known once PostgreSQL said anything.
  ASSERT_TRUE(WaitUntil(
      [&] {
        sub->WaitForProgressCount(sub->progress_count() + 1);
        return Lsn::Parse(sub->last_progress().server_wal_lsn()).value_or(Lsn()).valid();
      },
      kDeadline));

  ASSERT_THAT(pg_->Exec("INSERT INTO orders VALUES (1, 'a', 1, NULL)"), IsOk());
  ASSERT_TRUE(sub->WaitForEvents(1));
  const std::string id = sub->events()[0].id();
  Progress delivered;
  ASSERT_TRUE(sub->WaitForProgressAfter(1, &delivered));
  EXPECT_EQ(delivered.last_delivered(), id);
  EXPECT_EQ(delivered.unacked_events(), 1u);
  EXPECT_EQ(delivered.checkpoint(), "");
  const Lsn server_lsn = Lsn::Parse(delivered.server_wal_lsn()).value_or(Lsn());
  EXPECT_GE(server_lsn.value(), sub->events()[0].commit_lsn());

  EXPECT_EQ(AckOk(*sub, "idle", id), id);
  ASSERT_TRUE(WaitUntil(
      [&] {
        sub->WaitForProgressCount(sub->progress_count() + 1);
        return sub->last_progress().checkpoint() == id;
      },
      kDeadline));
  const Progress acked = sub->last_progress();
  EXPECT_EQ(acked.unacked_events(), 0u);
  EXPECT_EQ(acked.last_delivered(), "");
  const Lsn acked_server = Lsn::Parse(acked.server_wal_lsn()).value_or(Lsn());
  EXPECT_EQ(acked.lag_bytes(), acked_server.value() - sub->events()[0].commit_lsn());
  EXPECT_EQ(sub->event_count(), 1u);
}

TEST_F(ServerE2eTest, AShortProgressIntervalIsKeptNotRoundedUpToATick) {
  StartServer(Yaml());
  SubscribeRequest request = Request("fast-progress");
  request.set_progress_interval_ms(20);
  std::unique_ptr<Subscription> sub = Subscribe(request);
  ASSERT_TRUE(sub->WaitForProgressCount(1));
  // 25 more frames take 0.5 s at 20 ms; a server that only looked at idle
  // sessions every 250 ms would need over 6 s.
  const absl::Time start = absl::Now();
  ASSERT_TRUE(sub->WaitForProgressCount(26, absl::Seconds(4)));
  EXPECT_LT(absl::Now() - start, absl::Seconds(4));
  // The same after events: the frame after them comes 20 ms later, not on a tick.
  ASSERT_THAT(pg_->Exec("INSERT INTO orders VALUES (1, 'a', 1, NULL)"), IsOk());
  ASSERT_TRUE(sub->WaitForEvents(1));
  const size_t before = sub->progress_count();
  ASSERT_TRUE(sub->WaitForProgressCount(before + 25, absl::Seconds(4)));
}

// ---------------------------------------------------------------------------
// 8. Authorization.

TEST_F(ServerE2eTest, BearerTokensAuthenticateAndAuthorizePerStreamAndRight) {
  constexpr char kSubscriber[] = "orders-subscriber-token-0001";
  constexpr char kStatusOnly[] = "status-only-token-0000000002";
  constexpr char kInventory[] = "inventory-token-000000000003";
  const std::string tokens = dir_ + "/tokens";
  {
    std::ofstream out(tokens);
    out << "# e2e tokens\n"
        << kSubscriber << " subscribe orders\n"
        << kStatusOnly << "\tstatus *   # monitoring\n"
        << kInventory << " subscribe,status inventory\n";
  }
  StartServer(absl::StrCat(
      "listen: \"127.0.0.1:0\"\nplaintext: true\nshutdown_timeout: 5s\nauth:\n  tokens_file: ",
      tokens, "\nstreams:\n", StreamYaml(kStream, kSlot, "public.orders"),
      StreamYaml("inventory", "walfeed_inventory", "public.other")));

  // No token, or one that is not configured.
  EXPECT_THAT(SubscribeError(Request("c")),
              GrpcIs(grpc::StatusCode::UNAUTHENTICATED, HasSubstr("authorization")));
  const std::string wrong = "not-a-configured-token-00000";
  EXPECT_THAT(SubscribeError(Request("c"), wrong),
              GrpcIs(grpc::StatusCode::UNAUTHENTICATED, Not(HasSubstr(wrong))));
  GetStatusResponse status;
  EXPECT_THAT(Status("", &status), GrpcIs(grpc::StatusCode::UNAUTHENTICATED, ::testing::_));
  EXPECT_THAT(Ack("c", "s", "0/1:0"), GrpcIs(grpc::StatusCode::UNAUTHENTICATED, ::testing::_));

  // The status right only.
  EXPECT_THAT(
      SubscribeError(Request("c"), kStatusOnly),
      GrpcIs(grpc::StatusCode::PERMISSION_DENIED,
             AllOf(HasSubstr("subscribe"), HasSubstr(kStream), Not(HasSubstr(kStatusOnly)))));
  EXPECT_THAT(Ack("c", "s", "0/1:0", nullptr, kStream, kStatusOnly),
              GrpcIs(grpc::StatusCode::PERMISSION_DENIED, HasSubstr("subscribe")));
  // Removing a consumer takes the admin right, which no token here has.
  for (const char* token : {kSubscriber, kStatusOnly, kInventory}) {
    EXPECT_THAT(RemoveConsumer("c", nullptr, kStream, token),
                GrpcIs(grpc::StatusCode::PERMISSION_DENIED, HasSubstr("admin")))
        << token;
  }
  status.Clear();
  EXPECT_THAT(Status(kStream, &status, kStatusOnly), GrpcOk());
  ASSERT_EQ(status.streams_size(), 1);
  EXPECT_EQ(status.streams(0).name(), kStream);
  status.Clear();
  EXPECT_THAT(Status("", &status, kStatusOnly), GrpcOk());
  ASSERT_EQ(status.streams_size(), 2);
  EXPECT_EQ(status.streams(0).name(), "inventory");
  EXPECT_EQ(status.streams(1).name(), kStream);

  // A token for another stream.
  EXPECT_THAT(SubscribeError(Request("c"), kInventory),
              GrpcIs(grpc::StatusCode::PERMISSION_DENIED, HasSubstr(kStream)));
  EXPECT_THAT(Status(kStream, &status, kInventory),
              GrpcIs(grpc::StatusCode::PERMISSION_DENIED, HasSubstr(kStream)));
  status.Clear();
  EXPECT_THAT(Status("", &status, kInventory), GrpcOk());
  ASSERT_EQ(status.streams_size(), 1) << "only the streams the token may see";
  EXPECT_EQ(status.streams(0).name(), "inventory");
  {
    std::unique_ptr<Subscription> inventory = Subscribe(Request("c", "inventory"), kInventory);
    EXPECT_TRUE(inventory->has_started());
  }

  // The subscriber: Subscribe and Ack, but no status.
  std::unique_ptr<Subscription> sub = Subscribe(Request("c"), kSubscriber);
  ASSERT_THAT(pg_->Exec("INSERT INTO orders VALUES (1, 'a', 1, NULL)"), IsOk());
  ASSERT_TRUE(sub->WaitForEvents(1));
  const std::string id = sub->events()[0].id();
  EXPECT_THAT(Ack("c", sub->session_id(), id, nullptr, kStream, kInventory),
              GrpcIs(grpc::StatusCode::PERMISSION_DENIED, HasSubstr(kStream)));
  AckResponse response;
  EXPECT_THAT(Ack("c", sub->session_id(), id, &response, kStream, kSubscriber), GrpcOk());
  EXPECT_EQ(response.checkpoint(), id);
  EXPECT_THAT(Status(kStream, &status, kSubscriber),
              GrpcIs(grpc::StatusCode::PERMISSION_DENIED, HasSubstr("status")));
}

// ---------------------------------------------------------------------------
// 9. Health, and a slot dropped from outside.

TEST_F(ServerE2eTest, HealthFollowsTheStreamAndADroppedSlotIsDataLoss) {
  StartServer(Yaml());
  const std::string per_stream = absl::StrCat("walfeed.v1.ChangeStream/", kStream);
  std::unique_ptr<Subscription> sub = Subscribe(Request("c"));
  ASSERT_TRUE(
      WaitUntil([&] { return HealthOf(per_stream) == HealthCheckResponse::SERVING; }, kDeadline));
  EXPECT_EQ(HealthOf("walfeed.v1.ChangeStream"), HealthCheckResponse::SERVING);
  EXPECT_EQ(HealthOf(""), HealthCheckResponse::SERVING);
  HealthCheckResponse unknown;
  EXPECT_THAT(Health("walfeed.v1.ChangeStream/nope", &unknown),
              GrpcIs(grpc::StatusCode::NOT_FOUND, ::testing::_));

  // The walsender holds the slot; end it, then drop the slot once it is free.
  ASSERT_TRUE(WaitUntil(
      [&] {
        (void)pg_->Exec(
            absl::StrCat("SELECT pg_terminate_backend(active_pid) FROM pg_replication_slots "
                         "WHERE slot_name = '",
                         kSlot, "' AND active_pid IS NOT NULL"));
        return pg_->Exec(absl::StrCat("SELECT pg_drop_replication_slot('", kSlot, "')")).ok();
      },
      kDeadline, absl::Milliseconds(5)));
  ASSERT_TRUE(WaitUntil([&] { return HealthOf(per_stream) == HealthCheckResponse::NOT_SERVING; },
                        kDeadline));
  ASSERT_TRUE(WaitUntil(
      [&] {
        GetStatusResponse status;
        return Status(kStream, &status).ok() &&
               status.streams(0).state() == walfeed::v1::STREAM_STATE_FAILED;
      },
      kDeadline));
  EXPECT_EQ(HealthOf("walfeed.v1.ChangeStream"), HealthCheckResponse::NOT_SERVING);
  EXPECT_EQ(HealthOf(""), HealthCheckResponse::SERVING) << "the server itself still runs";

  // The live subscription ended with the failure; a new one gets it at once.
  ASSERT_TRUE(sub->WaitForEnd());
  EXPECT_THAT(*sub->status(), GrpcIs(grpc::StatusCode::DATA_LOSS, HasSubstr(kSlot)));
  EXPECT_THAT(
      SubscribeError(Request("c")),
      GrpcIs(grpc::StatusCode::DATA_LOSS,
             AllOf(HasSubstr(kSlot), HasSubstr("no longer exists"), HasSubstr("DELETE FROM"))));
  EXPECT_THAT(SubscribeError(Request("c")), HasReason("SLOT_LOST", false));
  GetStatusResponse status;
  ASSERT_THAT(Status(kStream, &status), GrpcOk());
  EXPECT_THAT(status.streams(0).error(), HasSubstr(kSlot));
  EXPECT_EQ(status.streams(0).slot().wal_status(), "missing");
  EXPECT_EQ(Sql("SELECT count(*) FROM pg_replication_slots"), "0") << "never recreated";
}

// ---------------------------------------------------------------------------
// 10. Reflection.

// Calls ServerReflectionInfo once with a hand-encoded ServerReflectionRequest and
// returns the response's bytes.
grpc::Status Reflect(const std::shared_ptr<grpc::Channel>& channel, const std::string& request,
                     std::string* response) {
  grpc::GenericStub stub(channel);
  grpc::ClientContext context;
  context.set_deadline(ChronoDeadline(absl::Seconds(10)));
  grpc::CompletionQueue cq;
  std::unique_ptr<grpc::GenericClientAsyncReaderWriter> call = stub.PrepareCall(
      &context, "/grpc.reflection.v1alpha.ServerReflection/ServerReflectionInfo", &cq);
  // Each step completes (ok or not) by the call's deadline.
  auto step = [&cq](intptr_t tag) {
    void* got = nullptr;
    bool ok = false;
    return cq.Next(&got, &ok) && reinterpret_cast<intptr_t>(got) == tag && ok;
  };
  grpc::Slice slice(request);
  grpc::ByteBuffer out(&slice, 1);
  grpc::ByteBuffer in;
  grpc::Status status;
  call->StartCall(reinterpret_cast<void*>(1));
  bool ok = step(1);
  if (ok) {
    call->Write(out, reinterpret_cast<void*>(2));
    ok = step(2);
  }
  if (ok) {
    call->WritesDone(reinterpret_cast<void*>(3));
    ok = step(3);
  }
  if (ok) {
    call->Read(&in, reinterpret_cast<void*>(4));
    ok = step(4);
  }
  call->Finish(&status, reinterpret_cast<void*>(5));
  void* got = nullptr;
  bool finished = false;
  while (cq.Next(&got, &finished) && reinterpret_cast<intptr_t>(got) != 5) {
  }
  cq.Shutdown();
  while (cq.Next(&got, &finished)) {
  }
  if (!ok && status.ok()) return grpc::Status(grpc::StatusCode::UNKNOWN, "no response");
  std::vector<grpc::Slice> slices;
  if (ok) (void)in.Dump(&slices);
  response->clear();
  for (const grpc::Slice& s : slices) {
    response->append(reinterpret_cast<const char*>(s.begin()), s.size());
  }
  return status;
}

TEST_F(ServerE2eTest, ReflectionListsTheServices) {
  StartServer(Yaml());
  // ServerReflectionRequest{list_services: "*"}: field 7, length-delimited.
  const std::string request = std::string("\x3a\x01*", 3);
  std::string response;
  ASSERT_THAT(Reflect(channel_, request, &response), GrpcOk());
  // ServerReflectionResponse.list_services_response (6) .service (1) .name (1).
  std::vector<std::string> names;
  google::protobuf::UnknownFieldSet top;
  ASSERT_TRUE(top.ParseFromString(response));
  for (int i = 0; i < top.field_count(); ++i) {
    if (top.field(i).number() != 6) continue;
    google::protobuf::UnknownFieldSet list;
    ASSERT_TRUE(list.ParseFromString(top.field(i).length_delimited()));
    for (int j = 0; j < list.field_count(); ++j) {
      google::protobuf::UnknownFieldSet service;
      ASSERT_TRUE(service.ParseFromString(list.field(j).length_delimited()));
      for (int k = 0; k < service.field_count(); ++k) {
        if (service.field(k).number() == 1) names.push_back(service.field(k).length_delimited());
      }
    }
  }
  EXPECT_THAT(names, UnorderedElementsAre("walfeed.v1.ChangeStream", "grpc.health.v1.Health",
                                          "grpc.reflection.v1alpha.ServerReflection"));
}

// ---------------------------------------------------------------------------
// 10b. RemoveConsumer.

// A consumer that is gone for good holds the slot at its checkpoint; removing it
// ends its session, deletes its checkpoint and lets the slot move on with the
// remaining consumers. The same name afterwards is a new consumer.
TEST_F(ServerE2eTest, RemoveConsumerReleasesTheSlotAndForgetsTheCheckpoint) {
  StartServer(Yaml());
  std::unique_ptr<Subscription> keeper = Subscribe(Request("keeper"));
  std::unique_ptr<Subscription> laggard = Subscribe(Request("laggard"));
  ASSERT_THAT(pg_->Exec("INSERT INTO orders SELECT g, 'a', g, NULL FROM generate_series(1, 3) g"),
              IsOk());
  ASSERT_TRUE(keeper->WaitForEvents(3));
  ASSERT_TRUE(laggard->WaitForEvents(3));
  const std::vector<ChangeEvent> t1 = keeper->events();
  EXPECT_EQ(AckOk(*keeper, "keeper", t1[2].id()), t1[2].id());
  EXPECT_EQ(AckOk(*laggard, "laggard", t1[0].id()), t1[0].id());  // Part of T1 only.
  const std::string slot_confirmed =
      absl::StrCat("SELECT confirmed_flush_lsn FROM pg_replication_slots WHERE slot_name = '",
                   kSlot, "'");
  const std::string laggard_rows =
      "SELECT count(*) FROM walfeed.consumer_checkpoints WHERE consumer = 'laggard'";
  EXPECT_EQ(Sql(laggard_rows), "1");
  // The laggard holds the slot inside T1 (acked part of it: T1 is re-sent whole).
  EXPECT_LE(Lsn::Parse(Sql(slot_confirmed)).value_or(Lsn()).value(), t1[0].commit_lsn());

  walfeed::v1::RemoveConsumerResponse removed;
  ASSERT_THAT(RemoveConsumer("laggard", &removed), GrpcOk());
  EXPECT_EQ(removed.checkpoint(), t1[0].id());
  ASSERT_TRUE(laggard->WaitForEnd());
  EXPECT_THAT(*laggard->status(),
              GrpcIs(grpc::StatusCode::ABORTED, AllOf(HasSubstr("laggard"), HasSubstr("removed"))));
  EXPECT_EQ(Sql(laggard_rows), "0");
  GetStatusResponse status;
  ASSERT_THAT(Status(kStream, &status), GrpcOk());
  ASSERT_EQ(status.streams(0).consumers_size(), 1);
  EXPECT_EQ(status.streams(0).consumers(0).name(), "keeper");
  // With only the keeper left, who acked all of T1, the slot moves past T1.
  EXPECT_TRUE(WaitUntil(
      [&] {
        return Lsn::Parse(Sql(slot_confirmed)).value_or(Lsn()).value() > t1[0].commit_lsn();
      },
      kDeadline));

  // Errors.
  EXPECT_THAT(RemoveConsumer("laggard"),
              GrpcIs(grpc::StatusCode::NOT_FOUND, HasSubstr("no consumer \"laggard\"")));
  EXPECT_THAT(RemoveConsumer("keeper", nullptr, "nope"),
              GrpcIs(grpc::StatusCode::NOT_FOUND, HasSubstr("\"nope\"")));
  EXPECT_THAT(RemoveConsumer("bad name!"),
              GrpcIs(grpc::StatusCode::INVALID_ARGUMENT, HasSubstr("consumer")));

  // The name again: a new consumer, with no checkpoint, from what the stream holds
  // now (T1 was acked by every remaining consumer).
  std::unique_ptr<Subscription> again = Subscribe(Request("laggard"));
  EXPECT_EQ(again->started().checkpoint(), "");
  ASSERT_THAT(pg_->Exec("INSERT INTO orders VALUES (4, 'b', 4, NULL)"), IsOk());
  ASSERT_TRUE(again->WaitForEvents(1));
  EXPECT_EQ(NewValue(again->events()[0], "id"), "4");
  EXPECT_GT(again->events()[0].commit_lsn(), t1[0].commit_lsn());
}

// A removal racing an ack: the ack passed its checks and waits for its durable
// write (held here by a row lock in PostgreSQL) when RemoveConsumer arrives. The
// session ends at once and the consumer cannot subscribe while the removal waits;
// once the lock is released the ack is stored first and the removal deletes after
// it, so the checkpoint row does not come back, and the removal reports the ack.
TEST_F(ServerE2eTest, RemoveConsumerWaitsForAnAckInFlight) {
  StartServer(Yaml());
  std::unique_ptr<Subscription> racer = Subscribe(Request("racer"));
  ASSERT_THAT(pg_->Exec("INSERT INTO orders SELECT g, 'a', g, NULL FROM generate_series(1, 3) g"),
              IsOk());
  ASSERT_TRUE(racer->WaitForEvents(3));
  const std::vector<ChangeEvent> e = racer->events();
  EXPECT_EQ(AckOk(*racer, "racer", e[0].id()), e[0].id());  // Its row exists now.
  const std::string row = "SELECT count(*) FROM walfeed.consumer_checkpoints WHERE consumer = 'racer'";
  ASSERT_EQ(Sql(row), "1");

  std::unique_ptr<PGconn, decltype(&PQfinish)> holder(PQconnectdb(pg_->ConnInfo().c_str()),
                                                      &PQfinish);
  ASSERT_EQ(PQstatus(holder.get()), CONNECTION_OK);
  auto exec = [&](const char* sql) {
    PGresult* result = PQexec(holder.get(), sql);
    const ExecStatusType status = PQresultStatus(result);
    PQclear(result);
    return status == PGRES_COMMAND_OK || status == PGRES_TUPLES_OK;
  };
  ASSERT_TRUE(exec("BEGIN"));
  ASSERT_TRUE(exec("SELECT 1 FROM walfeed.consumer_checkpoints WHERE consumer = 'racer' "
                   "FOR UPDATE"));

  grpc::Status ack_status;
  std::thread acker([&] { ack_status = Ack("racer", racer->session_id(), e[2].id()); });
  // The ack's durable write waits on the row lock.
  EXPECT_TRUE(WaitUntil(
      [&] {
        return Sql("SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' "
                   "AND query LIKE '%consumer_checkpoints%'") == "1";
      },
      kDeadline));
  walfeed::v1::RemoveConsumerResponse removed;
  grpc::Status remove_status;
  std::thread remover([&] { remove_status = RemoveConsumer("racer", &removed); });
  ASSERT_TRUE(racer->WaitForEnd());
  EXPECT_THAT(*racer->status(), GrpcIs(grpc::StatusCode::ABORTED, HasSubstr("removed")));
  EXPECT_THAT(SubscribeError(Request("racer")),
              GrpcIs(grpc::StatusCode::ABORTED, HasSubstr("being removed")));
  EXPECT_EQ(Sql(row), "1");  // Neither the ack nor the removal got through yet.

  EXPECT_TRUE(exec("COMMIT"));
  acker.join();
  remover.join();
  EXPECT_THAT(ack_status, GrpcOk());
  EXPECT_THAT(remove_status, GrpcOk());
  EXPECT_EQ(removed.checkpoint(), e[2].id());
  EXPECT_EQ(Sql(row), "0");
  GetStatusResponse status;
  ASSERT_THAT(Status(kStream, &status), GrpcOk());
  EXPECT_EQ(status.streams(0).consumers_size(), 0);
}

// Removing a stream's only consumer does not release what it never acked: a
// stream without consumers keeps everything for the next one, as before the
// first consumer ever subscribed.
TEST_F(ServerE2eTest, RemovingTheOnlyConsumerKeepsItsUnackedEventsForTheNext) {
  StartServer(Yaml());
  std::unique_ptr<Subscription> solo = Subscribe(Request("solo"));
  ASSERT_THAT(pg_->Exec("INSERT INTO orders SELECT g, 'a', g, NULL FROM generate_series(1, 3) g"),
              IsOk());
  ASSERT_TRUE(solo->WaitForEvents(3));
  const std::vector<ChangeEvent> t1 = solo->events();
  ASSERT_THAT(RemoveConsumer("solo"), GrpcOk());
  ASSERT_TRUE(solo->WaitForEnd());
  std::unique_ptr<Subscription> next = Subscribe(Request("next"));
  ASSERT_TRUE(next->WaitForEvents(3));
  for (size_t i = 0; i < 3; ++i) EXPECT_EQ(next->events()[i].id(), t1[i].id()) << i;
}

// ---------------------------------------------------------------------------
// 11. GetStatus.

TEST_F(ServerE2eTest, GetStatusReportsTheSlotAndConsumers) {
  StartServer(Yaml());
  std::unique_ptr<Subscription> live = Subscribe(Request("live"));
  std::unique_ptr<Subscription> gone = Subscribe(Request("gone"));
  ASSERT_THAT(pg_->Exec("INSERT INTO orders SELECT g, 'a', g, NULL FROM generate_series(1, 3) g"),
              IsOk());
  ASSERT_TRUE(live->WaitForEvents(3));
  const std::vector<ChangeEvent> events = live->events();
  EXPECT_EQ(AckOk(*live, "live", events[0].id()), events[0].id());
  // A consumer that acked and went away keeps its checkpoint.
  ASSERT_TRUE(gone->WaitForEvents(3));
  const std::string gone_checkpoint = AckOk(*gone, "gone", events[2].id());
  gone.reset();

  GetStatusResponse status;
  ASSERT_TRUE(WaitUntil(
      [&] {
        status.Clear();
        return Status("", &status).ok() && status.streams_size() == 1 &&
               status.streams(0).consumers_size() == 2 &&
               status.streams(0).consumers(0).session_id().empty() &&
               status.streams(0).slot().active() &&
               status.streams(0).slot().confirmed_flush_lsn() ==
                   Sql(absl::StrCat("SELECT confirmed_flush_lsn FROM pg_replication_slots "
                                    "WHERE slot_name = '",
                                    kSlot, "'"));
      },
      kDeadline));
  const walfeed::v1::StreamStatus& stream = status.streams(0);
  EXPECT_EQ(stream.name(), kStream);
  EXPECT_EQ(stream.state(), walfeed::v1::STREAM_STATE_STREAMING);
  EXPECT_EQ(stream.error(), "");
  EXPECT_EQ(stream.slot().name(), kSlot);
  EXPECT_EQ(stream.slot().plugin(), "pgoutput");
  EXPECT_TRUE(stream.slot().active());
  EXPECT_EQ(stream.slot().wal_status(), "reserved");
  EXPECT_THAT(Lsn::Parse(stream.slot().restart_lsn()), IsOk());
  const Lsn confirmed = Lsn::Parse(stream.slot().confirmed_flush_lsn()).value_or(Lsn());
  EXPECT_TRUE(confirmed.valid());
  // Only acked work moves the slot: "live" acked into the transaction only.
  EXPECT_LE(confirmed.value(), events[0].commit_lsn());
  const Lsn server = Lsn::Parse(stream.server_wal_lsn()).value_or(Lsn());
  EXPECT_GT(server.value(), events[0].commit_lsn());
  EXPECT_THAT(Lsn::Parse(stream.stored_confirmed_lsn()), IsOk());

  ASSERT_EQ(stream.consumers_size(), 2);
  const walfeed::v1::ConsumerStatus& gone_status = stream.consumers(0);
  EXPECT_EQ(gone_status.name(), "gone");
  EXPECT_EQ(gone_status.checkpoint(), events[2].id());
  EXPECT_EQ(gone_checkpoint, events[2].id());
  EXPECT_EQ(gone_status.session_id(), "");
  EXPECT_EQ(gone_status.unacked_events(), 0u);
  EXPECT_EQ(gone_status.lag_bytes(), server.value() - events[2].commit_lsn());
  const walfeed::v1::ConsumerStatus& live_status = stream.consumers(1);
  EXPECT_EQ(live_status.name(), "live");
  EXPECT_EQ(live_status.checkpoint(), events[0].id());
  EXPECT_EQ(live_status.session_id(), live->session_id());
  EXPECT_EQ(live_status.unacked_events(), 2u);
  EXPECT_EQ(live_status.lag_bytes(), server.value() - events[0].commit_lsn());

  GetStatusResponse unknown;
  EXPECT_THAT(Status("nope", &unknown), GrpcIs(grpc::StatusCode::NOT_FOUND, HasSubstr("nope")));
}

// ---------------------------------------------------------------------------
// 12. The walfeed-server process: SIGTERM mid-stream, restart, exactly once after
// the checkpoint.

TEST_F(ServerE2eTest, ProcessShutsDownCleanlyOnSigtermAndRestartLosesNothing) {
  const std::string config = dir_ + "/walfeed.yaml";
  {
    std::ofstream out(config);
    out << Yaml("", "2s");
  }
  constexpr absl::Duration kShutdownTimeout = absl::Seconds(2);  // As configured.
  // It exits within about shutdown_timeout here; the margin is for a loaded CI
  // machine, and still catches a shutdown that hangs.
  constexpr absl::Duration kMargin = absl::Seconds(20);
  const std::string log1 = dir_ + "/server1.log";
  auto process = std::make_unique<ServerProcess>(config, log1);
  const int port = process->WaitForPort();
  ASSERT_GT(port, 0) << process->Log();
  Connect(port);

  std::unique_ptr<Subscription> sub = Subscribe(Request("proc"));
  Writer writer(pg_.get());
  ASSERT_TRUE(sub->WaitForEvents(30));
  const std::string checkpoint = sub->events()[19].id();
  EXPECT_EQ(AckOk(*sub, "proc", checkpoint), checkpoint);
  ASSERT_TRUE(sub->WaitForEvents(60)) << "still streaming after the ack";

  const absl::Time term = absl::Now();
  process->Signal(SIGTERM);
  ASSERT_TRUE(sub->WaitForEnd());
  EXPECT_THAT(*sub->status(), GrpcIs(grpc::StatusCode::UNAVAILABLE, HasSubstr("shutting down")));
  const std::optional<int> exit_status = process->WaitForExit(kShutdownTimeout + kMargin);
  ASSERT_TRUE(exit_status.has_value()) << "no exit within shutdown_timeout + 20 s";
  const absl::Duration shutdown_time = absl::Now() - term;
  EXPECT_TRUE(WIFEXITED(*exit_status) && WEXITSTATUS(*exit_status) == 0)
      << "wait status " << *exit_status << "\n"
      << process->Log();
  EXPECT_THAT(process->Log(), HasSubstr("replication connection closed (clean)"));
  std::cout << "walfeed-server exited " << shutdown_time << " after SIGTERM\n";
  // Everything ended cleanly, well before the deadline: gRPC's drain does not
  // wait out shutdown_timeout for idle client connections.
  EXPECT_THAT(process->Log(), Not(HasSubstr("did not finish")));
  EXPECT_LT(shutdown_time, kShutdownTimeout) << process->Log();
  const std::vector<ChangeEvent> first_run = sub->events();

  // Rows keep committing while the server is down; then the writer stops.
  const size_t at_exit = writer.committed().size();
  ASSERT_TRUE(writer.WaitForRows(at_exit + 20));
  writer.Stop();
  EXPECT_THAT(writer.failures(), ::testing::IsEmpty());
  const std::set<int> committed = writer.committed();

  process = std::make_unique<ServerProcess>(config, dir_ + "/server2.log");
  const int port2 = process->WaitForPort();
  ASSERT_GT(port2, 0) << process->Log();
  Connect(port2);
  std::unique_ptr<Subscription> resumed = Subscribe(Request("proc"));
  EXPECT_EQ(resumed->started().checkpoint(), checkpoint);

  // Rows acked in the first run, and every row after the checkpoint.
  const EventId acked = ParseId(checkpoint);
  std::set<int> before_checkpoint;
  std::map<std::string, ChangeEvent> unacked_first;
  for (const ChangeEvent& event : first_run) {
    int id = 0;
    ASSERT_TRUE(absl::SimpleAtoi(NewValue(event, "id"), &id));
    if (ParseId(event.id()) <= acked) {
      EXPECT_TRUE(before_checkpoint.insert(id).second) << "row " << id << " twice";
    } else {
      unacked_first[event.id()] = event;
    }
  }
  const size_t expected = committed.size() - before_checkpoint.size();
  ASSERT_TRUE(resumed->WaitForEvents(expected, absl::Seconds(60)))
      << resumed->event_count() << " of " << expected;
  ASSERT_TRUE(resumed->WaitForProgressAfter(expected));
  const std::vector<ChangeEvent> second_run = resumed->events();
  ASSERT_EQ(second_run.size(), expected);

  std::set<int> delivered = before_checkpoint;
  EventId previous = acked;
  size_t redelivered = 0;
  for (const ChangeEvent& event : second_run) {
    const EventId id = ParseId(event.id());
    EXPECT_GT(id, previous) << "in order, after the checkpoint, once";
    previous = id;
    int row = 0;
    ASSERT_TRUE(absl::SimpleAtoi(NewValue(event, "id"), &row));
    EXPECT_TRUE(delivered.insert(row).second) << "row " << row << " delivered twice";
    auto first = unacked_first.find(event.id());
    if (first != unacked_first.end()) {
      ++redelivered;
      EXPECT_THAT(event, EqualsProto(first->second));
    }
  }
  EXPECT_EQ(redelivered, unacked_first.size()) << "every unacked event came back";
  EXPECT_EQ(delivered, committed) << "every committed row, exactly once";
  std::cout << "process restart: " << committed.size() << " rows committed, "
            << before_checkpoint.size() << " acked before SIGTERM, " << redelivered
            << " redelivered identically, " << second_run.size() << " delivered after restart\n";

  process->Signal(SIGTERM);
  const std::optional<int> second_exit = process->WaitForExit(kShutdownTimeout + kMargin);
  ASSERT_TRUE(second_exit.has_value());
  EXPECT_TRUE(WIFEXITED(*second_exit) && WEXITSTATUS(*second_exit) == 0) << process->Log();
}

}  // namespace
}  // namespace walfeed::server
