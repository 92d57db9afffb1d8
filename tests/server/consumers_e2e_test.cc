// Consumers that never hold each other hostage, against a real PostgreSQL 15 and
// the in-process server:
//   - a consumer that never acked holds nothing once it disconnects: another
//     consumer streams 20,000 transactions through a 256 KiB buffer;
//   - a filter that matches nothing: the client acks the positions the server
//     passed, its checkpoint keeps up and the slot is not pinned;
//   - ephemeral subscriptions start at the head, are not listed, hold nothing
//     and are not acked;
//   - a new consumer can start at the latest event; ResetConsumer moves a
//     checkpoint forward and ends the session;
//   - GetStatus names what each consumer holds, and a never-acked one's lag.
#include "tests/server/e2e_harness.h"
#include "walfeed/subscriber.h"

namespace walfeed::server {
namespace {

using namespace ::walfeed::server::e2e;  // NOLINT: the harness is this file's vocabulary.

class ConsumersE2eTest : public ServerE2eTest {};

TEST_F(ConsumersE2eTest, AConsumerThatNeverAckedHoldsNothingOnceItLeaves) {
  StartServer(Yaml("defaults:\n  buffer_bytes: 262144\n"));
  {
    // B subscribes, receives, never acks, goes away.
    std::unique_ptr<Subscription> b = Subscribe(Request("b"));
    ASSERT_THAT(pg_->Exec("INSERT INTO orders VALUES (0, 'warm-up', 1, NULL)"), IsOk());
    ASSERT_TRUE(b->WaitForEvents(1));
  }
  ASSERT_TRUE(WaitUntil(
      [&] {
        const walfeed::v1::StreamStatus status = StreamStatusNow();
        for (const auto& c : status.consumers()) {
          if (c.name() == "b") return false;
        }
        return true;
      },
      kDeadline))
      << "b is forgotten with its session";

  std::unique_ptr<Subscription> a = Subscribe(Request("a"));
  constexpr int kTransactions = 20000;
  std::thread writer([&] { InsertTransactions(1, kTransactions); });
  // A acks what it has, as it goes; the whole run fits the buffer 256 KiB at a
  // time only because nobody else holds it.
  size_t acked = 0;
  const bool all = WaitUntil(
      [&] {
        AckArrived(*a, "a", &acked);
        return acked >= kTransactions + 1;  // And the warm-up row.
      },
      absl::Seconds(120), absl::Milliseconds(5));
  writer.join();
  EXPECT_TRUE(all) << "a received " << acked << " of " << kTransactions + 1;
  EXPECT_LE(StreamStatusNow().buffered_bytes(), uint64_t{262144} + 4096);
}

TEST_F(ConsumersE2eTest, AFilterThatMatchesNothingStillMovesItsCheckpointAndTheSlot) {
  StartServer(Yaml());
  SubscriberOptions options;
  options.server = absl::StrCat("127.0.0.1:", server_->port());
  options.stream = kStream;
  options.consumer = "filtered";
  options.tables = {"public.nothing_matches_*"};
  options.progress_interval = absl::Milliseconds(200);
  absl::Notification started;
  options.on_started = [&started](const SessionInfo&) {
    if (!started.HasBeenNotified()) started.Notify();
  };
  Subscriber subscriber(options);
  std::atomic<int> handled{0};
  std::thread run([&] {
    EXPECT_THAT(subscriber.Run([&](const Batch& batch) {
      handled += batch.size();
      return absl::OkStatus();
    }),
                IsOk());
  });
  ASSERT_TRUE(started.WaitForNotificationWithTimeout(kDeadline));
  InsertTransactions(1, 300);
  const std::string last_lsn = Sql("SELECT pg_current_wal_lsn()");
  // The checkpoint passes the last write although nothing was delivered, and the
  // slot follows it (the only consumer's acks of passed positions).
  const std::string slot_past_last_write =
      absl::StrCat("SELECT confirmed_flush_lsn >= '", last_lsn,
                   "'::pg_lsn FROM pg_replication_slots WHERE slot_name = '", kSlot, "'");
  const bool caught_up = WaitUntil(
      [&] {
        const walfeed::v1::StreamStatus status = StreamStatusNow();
        return status.consumers_size() == 1 && !status.consumers(0).checkpoint().empty() &&
               Sql(slot_past_last_write) == "t";
      },
      absl::Seconds(90));
  subscriber.Stop();
  run.join();
  EXPECT_TRUE(caught_up) << "slot: "
                         << Sql(absl::StrCat("SELECT confirmed_flush_lsn FROM pg_replication_slots "
                                             "WHERE slot_name = '", kSlot, "'"))
                         << ", last write before " << last_lsn;
  EXPECT_EQ(handled.load(), 0);
}

TEST_F(ConsumersE2eTest, AnEphemeralSubscriptionStartsAtTheHeadAndHoldsNothing) {
  StartServer(Yaml());
  std::unique_ptr<Subscription> durable = Subscribe(Request("durable"));
  InsertTransactions(1, 5);
  ASSERT_TRUE(durable->WaitForEvents(5));
  SubscribeRequest request = Request("watcher");  // Only a label for an ephemeral one.
  request.set_ephemeral(true);
  std::unique_ptr<Subscription> tail = Subscribe(request);
  EXPECT_EQ(tail->started().start_after(), durable->events().back().id())
      << "starts after the newest event held";
  InsertTransactions(6, 3);
  ASSERT_TRUE(tail->WaitForEvents(3));
  EXPECT_EQ(NewValue(tail->events()[0], "id"), "6");
  EXPECT_EQ(tail->events().size(), 3u);

  walfeed::v1::StreamStatus status = StreamStatusNow();
  ASSERT_EQ(status.consumers_size(), 1) << "only the durable consumer is listed";
  EXPECT_EQ(status.consumers(0).name(), "durable");
  EXPECT_EQ(status.ephemeral_sessions(), 1u);
  EXPECT_THAT(Ack("watcher", tail->session_id(), tail->events()[0].id()),
              GrpcIs(grpc::StatusCode::FAILED_PRECONDITION, HasSubstr("ephemeral")));
  // The durable consumer's acks alone decide what is kept.
  ASSERT_TRUE(durable->WaitForEvents(8));
  AckOk(*durable, "durable", durable->events().back().id());
  EXPECT_EQ(StreamStatusNow().buffered_events(), 0u);
}

TEST_F(ConsumersE2eTest, ANewConsumerMayStartAtTheLatestEvent) {
  StartServer(Yaml());
  std::unique_ptr<Subscription> holder = Subscribe(Request("holder"));
  InsertTransactions(1, 4);
  ASSERT_TRUE(holder->WaitForEvents(4));
  SubscribeRequest latest = Request("latest");
  latest.set_start(walfeed::v1::START_POSITION_LATEST);
  std::unique_ptr<Subscription> sub = Subscribe(latest);
  std::unique_ptr<Subscription> earliest = Subscribe(Request("earliest"));
  InsertTransactions(5, 1);
  ASSERT_TRUE(sub->WaitForEvents(1));
  ASSERT_TRUE(earliest->WaitForEvents(5));
  EXPECT_EQ(NewValue(sub->events()[0], "id"), "5") << "nothing from before it subscribed";
  EXPECT_EQ(NewValue(earliest->events()[0], "id"), "1") << "the default is the oldest held";
  latest.set_start(static_cast<walfeed::v1::StartPosition>(7));
  EXPECT_THAT(SubscribeError(latest), GrpcIs(grpc::StatusCode::INVALID_ARGUMENT,
                                             HasSubstr("StartPosition")));
}

TEST_F(ConsumersE2eTest, ResetMovesACheckpointForwardDurablyAndEndsTheSession) {
  StartServer(Yaml());
  std::unique_ptr<Subscription> poisoned = Subscribe(Request("poisoned"));
  InsertTransactions(1, 3);
  ASSERT_TRUE(poisoned->WaitForEvents(3));
  const std::vector<ChangeEvent> seen = poisoned->events();
  AckOk(*poisoned, "poisoned", seen[0].id());

  EXPECT_THAT(Reset("poisoned", "", false), GrpcIs(grpc::StatusCode::INVALID_ARGUMENT, HasSubstr("exactly one")));
  EXPECT_THAT(Reset("nobody", "", true), GrpcIs(grpc::StatusCode::NOT_FOUND, HasSubstr("nobody")));
  EXPECT_THAT(Reset("nobody", "", true), HasReason("CONSUMER_NOT_FOUND", false));
  EXPECT_THAT(Reset("poisoned", "0/1:0", false),
              GrpcIs(grpc::StatusCode::FAILED_PRECONDITION, HasSubstr("only move forward")));
  EXPECT_THAT(Reset("poisoned", "0/1:0", false), HasReason("RESET_TARGET_INVALID", false));
  EXPECT_THAT(Reset("poisoned", "FF/0:0", false),
              GrpcIs(grpc::StatusCode::OUT_OF_RANGE, HasSubstr("newest event")));
  ASSERT_TRUE(poisoned->status() == std::nullopt) << "refused resets leave the session alone";

  // Skip the second event: the checkpoint moves to it, the session ends.
  walfeed::v1::ResetConsumerResponse response;
  ASSERT_THAT(Reset("poisoned", seen[1].id(), false, &response), GrpcOk());
  EXPECT_EQ(response.previous_checkpoint(), seen[0].id());
  EXPECT_EQ(response.checkpoint(), seen[1].id());
  ASSERT_TRUE(poisoned->WaitForEnd());
  EXPECT_THAT(*poisoned->status(), GrpcIs(grpc::StatusCode::ABORTED, HasSubstr("reset")));
  EXPECT_THAT(*poisoned->status(), HasReason("CONSUMER_RESET", true)) << "resubscribe at once";
  EXPECT_EQ(Sql("SELECT commit_lsn || ':' || event_index FROM walfeed.consumer_checkpoints "
                "WHERE consumer = 'poisoned'"),
            seen[1].id())
      << "stored before it took effect";
  std::unique_ptr<Subscription> resumed = Subscribe(Request("poisoned"));
  ASSERT_TRUE(resumed->WaitForEvents(1));
  EXPECT_EQ(resumed->events()[0].id(), seen[2].id()) << "resumes right after the new checkpoint";

  // To the head: nothing of what is held comes again.
  ASSERT_THAT(Reset("poisoned", "", true, &response), GrpcOk());
  EXPECT_EQ(response.checkpoint(), seen[2].id());
}

TEST_F(ConsumersE2eTest, StatusNamesWhatEachConsumerHoldsAndANeverAckedOnesLag) {
  StartServer(Yaml());
  std::unique_ptr<Subscription> fast = Subscribe(Request("fast"));
  std::unique_ptr<Subscription> idle = Subscribe(Request("idle"));
  InsertTransactions(1, 50);
  ASSERT_TRUE(fast->WaitForEvents(50));
  ASSERT_TRUE(idle->WaitForEvents(50));
  AckOk(*fast, "fast", fast->events().back().id());
  const walfeed::v1::StreamStatus status = StreamStatusNow();
  ASSERT_EQ(status.consumers_size(), 2);
  const walfeed::v1::ConsumerStatus& f = status.consumers(0);
  const walfeed::v1::ConsumerStatus& i = status.consumers(1);
  ASSERT_EQ(f.name(), "fast");
  ASSERT_EQ(i.name(), "idle");
  EXPECT_EQ(f.held_bytes(), 0u);
  EXPECT_GT(i.held_bytes(), 50u * 100) << "idle alone keeps the 50 events";
  EXPECT_EQ(i.held_bytes(), status.buffered_bytes());
  EXPECT_TRUE(i.checkpoint().empty());
  EXPECT_GT(i.lag_bytes(), 0u) << "a consumer that never acked lags from where it started";
  EXPECT_GT(i.lag_bytes(), f.lag_bytes());
}

TEST_F(ConsumersE2eTest, AStoppedConsumerThatHoldsTheStreamIsNamedUntilItIsRemoved) {
  StartServer(Yaml("defaults:\n  buffer_bytes: 65536\n"));
  std::unique_ptr<Subscription> stuck = Subscribe(Request("stuck"));
  std::unique_ptr<Subscription> fast = Subscribe(Request("fast"));
  InsertTransactions(1, 1);
  ASSERT_TRUE(stuck->WaitForEvents(1));
  AckOk(*stuck, "stuck", stuck->events()[0].id());
  stuck.reset();  // Stopped for good, with a checkpoint: it holds the stream.
  std::thread writer([&] { InsertTransactions(2, 2000); });
  size_t acked = 0;
  walfeed::v1::StreamStatus held;
  ASSERT_TRUE(WaitUntil(
      [&] {
        AckArrived(*fast, "fast", &acked);
        // Until fast's first ack lands, fast itself (with nothing acked) may be
        // the one the full buffer waits for; then it is stuck, and it holds
        // bytes alone once fast's acks pass its checkpoint.
        held = StreamStatusNow();
        return held.held_by() == "stuck" && held.consumers_size() == 2 &&
               held.consumers(1).held_bytes() > 0;
      },
      kDeadline, absl::Milliseconds(5)));
  EXPECT_EQ(held.held_by(), "stuck");
  EXPECT_GT(held.held_since().seconds(), 0);
  ASSERT_EQ(held.consumers_size(), 2);
  EXPECT_EQ(held.consumers(1).name(), "stuck");
  EXPECT_GT(held.consumers(1).held_bytes(), 0u);
  EXPECT_LT(acked, 2001u) << "the stream waits for stuck";

  // Forgetting stuck releases the stream: fast gets everything.
  ASSERT_THAT(RemoveConsumer("stuck"), GrpcOk());
  const bool all = WaitUntil(
      [&] {
        AckArrived(*fast, "fast", &acked);
        return acked >= 2001;
      },
      absl::Seconds(60), absl::Milliseconds(5));
  writer.join();
  EXPECT_TRUE(all) << "fast received " << acked;
  EXPECT_TRUE(WaitUntil([&] { return StreamStatusNow().held_by().empty(); }, kDeadline))
      << "the hold ends once the buffer has kept room for a while";
}

TEST_F(ConsumersE2eTest, SessionIdsAreShownOnlyToAdminsAndResetNeedsTheAdminRight) {
  constexpr char kSubscriber[] = "orders-subscriber-token-0001";
  constexpr char kStatusOnly[] = "status-only-token-0000000002";
  constexpr char kAdmin[] = "admin-and-status-token-00003";
  const std::string tokens = dir_ + "/tokens";
  {
    std::ofstream out(tokens);
    out << kSubscriber << " subscribe orders\n"
        << kStatusOnly << " status *\n"
        << kAdmin << " admin,status orders\n";
  }
  StartServer(absl::StrCat(
      "listen: \"127.0.0.1:0\"\nplaintext: true\nshutdown_timeout: 5s\nauth:\n  tokens_file: ",
      tokens, "\nstreams:\n", StreamYaml(kStream, kSlot, "public.orders")));
  std::unique_ptr<Subscription> sub = Subscribe(Request("c"), kSubscriber);
  ASSERT_TRUE(sub->has_started());
  GetStatusResponse status;
  ASSERT_THAT(Status(kStream, &status, kStatusOnly), GrpcOk());
  ASSERT_EQ(status.streams(0).consumers_size(), 1);
  EXPECT_EQ(status.streams(0).consumers(0).session_id(), "")
      << "a session id is what an Ack names: not for a status-only caller";
  status.Clear();
  ASSERT_THAT(Status(kStream, &status, kAdmin), GrpcOk());
  EXPECT_EQ(status.streams(0).consumers(0).session_id(), sub->session_id());

  walfeed::v1::ResetConsumerRequest request;
  request.set_stream(kStream);
  request.set_consumer("c");
  request.set_to_head(true);
  for (const char* token : {kSubscriber, kStatusOnly}) {
    grpc::ClientContext context;
    context.AddMetadata("authorization", absl::StrCat("Bearer ", token));
    walfeed::v1::ResetConsumerResponse response;
    EXPECT_THAT(stub_->ResetConsumer(&context, request, &response),
                GrpcIs(grpc::StatusCode::PERMISSION_DENIED, HasSubstr("admin")))
        << token;
  }
  grpc::ClientContext context;
  context.AddMetadata("authorization", absl::StrCat("Bearer ", kAdmin));
  walfeed::v1::ResetConsumerResponse response;
  EXPECT_THAT(stub_->ResetConsumer(&context, request, &response), GrpcOk());
}

}  // namespace
}  // namespace walfeed::server
