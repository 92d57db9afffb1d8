// ConsumerRegistry: fencing, retention, the ack and removal protocols, and the
// reader's side of the buffer, without a database or gRPC.
#include "server/consumer_registry.h"

#include <thread>

#include "absl/synchronization/notification.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/server/stream_events.h"
#include "tests/testing/status_matchers.h"
#include "tests/testing/wait.h"

namespace walfeed::server {
namespace {

using ::testing::AllOf;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;
using ::testing::SizeIs;
using ::walfeed::testing::Buffered;
using ::walfeed::testing::FrameIds;
using ::walfeed::testing::Id;
using ::walfeed::testing::IsOk;
using ::walfeed::testing::StatusIs;

class ConsumerRegistryTest : public ::testing::Test {
 protected:
  ConsumerRegistry::Options Options(size_t buffer_bytes = 1 << 20) {
    return ConsumerRegistry::Options{
        "s", "slot_s", buffer_bytes,
        [] { return absl::UnavailableError("stream \"s\" is still connecting: no route"); },
        [] { return replication::Lsn(0x9000); },
        [this] { return absl::StrCat("session-", ++sessions_); }, nullptr, 0, nullptr, nullptr};
  }
  // Tracks and buffers one transaction of `count` events at `commit`.
  void Deliver(ConsumerRegistry& registry, uint64_t commit, uint32_t count) {
    ASSERT_THAT(tracker_.OnBegin(replication::Lsn(commit)), IsOk());
    for (uint32_t i = 0; i < count; ++i) {
      ASSERT_THAT(tracker_.OnEvent(Id(commit, i)), IsOk());
      ASSERT_THAT(registry.Append(Buffered(Id(commit, i))), IsOk());
    }
    ASSERT_THAT(tracker_.OnCommit(replication::Lsn(commit), replication::Lsn(commit + 0x28), count),
                IsOk());
  }
  // Every event frame the session has now, ids flattened (the started frame
  // contributes none).
  std::vector<std::string> Drain(ConsumerRegistry& registry, const Session& session) {
    std::vector<std::string> ids;
    std::string frame;
    std::optional<absl::Status> end;
    while (registry.NextFrame(session, kNow, &frame, &end)) {
      for (std::string& id : FrameIds(frame)) ids.push_back(std::move(id));
    }
    return ids;
  }
  absl::Status Ack(ConsumerRegistry& registry, const OpenedSession& opened, EventId id) {
    absl::StatusOr<ConsumerRegistry::AckTicket> ticket =
        registry.BeginAck(opened.session->consumer(), opened.session->id(), id);
    if (!ticket.ok()) return ticket.status();
    if (ticket->noop) return absl::OkStatus();
    if (absl::Status tracked = tracker_.Ack(opened.session->consumer(), id); !tracked.ok()) {
      return tracked;
    }
    SessionList wake;
    registry.FinishAck(opened.session->consumer(), id, &wake);
    return absl::OkStatus();
  }

  const absl::Time kNow = absl::Now();
  int sessions_ = 0;
  replication::AckTracker tracker_{replication::Lsn(0x10)};
};

TEST_F(ConsumerRegistryTest, BeforeLoadCallsAreUnavailableWithTheReason) {
  ConsumerRegistry registry(Options());
  EXPECT_THAT(registry.Open("a", std::nullopt, {}).status(),
              StatusIs(absl::StatusCode::kUnavailable, HasSubstr("no route")));
  EXPECT_THAT(registry.BeginRemove("a").status(), StatusIs(absl::StatusCode::kUnavailable));
  EXPECT_THAT(registry.BeginAck("a", "s", Id(0x100, 0)).status(),
              StatusIs(absl::StatusCode::kUnavailable, HasSubstr("no route")))
      << "not NOT_FOUND: the consumers are not loaded yet, and clients take NOT_FOUND as final";
  EXPECT_THAT(registry.BeginReset("a", std::nullopt).status(),
              StatusIs(absl::StatusCode::kUnavailable));
}

TEST_F(ConsumerRegistryTest, ANewConsumerGetsEverythingBufferedAndAcksMoveItsCheckpoint) {
  ConsumerRegistry registry(Options());
  registry.Load(&tracker_, {}, EventId{});
  Deliver(registry, 0x100, 3);
  absl::StatusOr<OpenedSession> a = registry.Open("a", std::nullopt, {});
  ASSERT_THAT(a.status(), IsOk());
  EXPECT_THAT(Drain(registry, *a->session), SizeIs(3));
  ASSERT_THAT(Ack(registry, *a, Id(0x100, 2)), IsOk());
  EXPECT_EQ(registry.Snapshot().consumers[0].checkpoint, Id(0x100, 2));
  EXPECT_EQ(registry.Snapshot().buffered_events, 0u) << "acked by every consumer: trimmed";
}

TEST_F(ConsumerRegistryTest, DetachSparesAConsumerThatWasSentEverythingUntilItStopsAcking) {
  // One event larger than the whole buffer: both tiers are full, yet no one lags.
  ConsumerRegistry registry(Options(/*buffer_bytes=*/16));
  registry.Load(&tracker_, {{"a", Id(0x50, 0)}, {"b", Id(0x50, 0)}}, Id(0x50, 0));
  absl::StatusOr<OpenedSession> a = registry.Open("a", std::nullopt, {});
  absl::StatusOr<OpenedSession> b = registry.Open("b", std::nullopt, {});
  ASSERT_THAT(a.status(), IsOk());
  ASSERT_THAT(b.status(), IsOk());
  Deliver(registry, 0x100, 1);
  ASSERT_FALSE(registry.HasRoom());
  EXPECT_THAT(Drain(registry, *a->session), SizeIs(1));
  EXPECT_THAT(Drain(registry, *b->session), SizeIs(1));
  ASSERT_THAT(Ack(registry, *b, Id(0x100, 0)), IsOk());
  const absl::Time now = absl::Now();
  EXPECT_EQ(registry.LaggardToDetach(now), std::nullopt)
      << "a holds the event, but was sent it and subscribed just now";
  const absl::Time later = now + ConsumerRegistry::kCaughtUpGrace + absl::Seconds(1);
  ASSERT_THAT(registry.BeginAck("a", a->session->id(), Id(0x100, 0)).status(), IsOk());
  EXPECT_EQ(registry.LaggardToDetach(later), std::nullopt)
      << "its ack is being stored: asked again once it lands";
  registry.AbandonAck("a");
  EXPECT_EQ(registry.LaggardToDetach(later), "a") << "no ack for the whole grace: it stopped";
}

TEST_F(ConsumerRegistryTest, StartAfterBeyondTheNewestWalIsRefused) {
  ConsumerRegistry registry(Options());  // PostgreSQL's WAL ends at 0/9000.
  registry.Load(&tracker_, {}, EventId{});
  for (bool ephemeral : {false, true}) {
    SCOPED_TRACE(ephemeral);
    SessionOptions options;
    options.ephemeral = ephemeral;
    EXPECT_THAT(registry.Open("a", Id(0xFFFF0000, 0), options).status(),
                StatusIs(absl::StatusCode::kInvalidArgument,
                         AllOf(HasSubstr("start_after 0/FFFF0000:0 is beyond the newest WAL "
                                         "position"),
                               HasSubstr("0/9000"))));
  }
  EXPECT_THAT(registry.Snapshot().consumers, IsEmpty()) << "a refusal registers nothing";
  EXPECT_THAT(registry.Open("a", Id(0x8000, 0), {}).status(), IsOk());
}

TEST_F(ConsumerRegistryTest, AnIdleSessionSaysWhenItsNextProgressFrameIsDue) {
  std::vector<absl::Time> due;
  ConsumerRegistry::Options options = Options();
  options.progress_due = [&](absl::Time at) { due.push_back(at); };
  ConsumerRegistry registry(options);
  registry.Load(&tracker_, {}, EventId{});
  SessionOptions session_options;
  session_options.limits.progress_interval = absl::Milliseconds(30);
  absl::StatusOr<OpenedSession> a = registry.Open("a", std::nullopt, session_options);
  ASSERT_THAT(a.status(), IsOk());
  Drain(registry, *a->session);  // The started frame at kNow, then nothing to send.
  ASSERT_THAT(due, ElementsAre(kNow + absl::Milliseconds(30)));
  std::optional<absl::Time> next;
  EXPECT_THAT(registry.DueForProgress(kNow + absl::Milliseconds(29), &next), IsEmpty());
  EXPECT_EQ(next, kNow + absl::Milliseconds(30))
      << "a tick before the session is due says when to come back";
  EXPECT_THAT(registry.DueForProgress(kNow + absl::Milliseconds(30), &next), SizeIs(1));
  EXPECT_EQ(next, std::nullopt) << "no idle session left";
}

TEST_F(ConsumerRegistryTest, AnEventStaysUntilEveryConsumerAckedIt) {
  ConsumerRegistry registry(Options());
  registry.Load(&tracker_, {{"b", EventId{}}}, EventId{});
  Deliver(registry, 0x100, 2);
  absl::StatusOr<OpenedSession> a = registry.Open("a", std::nullopt, {});
  ASSERT_THAT(a.status(), IsOk());
  Drain(registry, *a->session);
  ASSERT_THAT(Ack(registry, *a, Id(0x100, 1)), IsOk());
  EXPECT_EQ(registry.Snapshot().buffered_events, 2u) << "b (stored checkpoint) has not acked";
  absl::StatusOr<OpenedSession> b = registry.Open("b", std::nullopt, {});
  ASSERT_THAT(b.status(), IsOk());
  EXPECT_THAT(Drain(registry, *b->session), SizeIs(2)) << "b finds everything after its checkpoint";
}

TEST_F(ConsumerRegistryTest, ANewerSessionSupersedesAndFencesTheOlder) {
  ConsumerRegistry registry(Options());
  registry.Load(&tracker_, {}, EventId{});
  Deliver(registry, 0x100, 2);
  absl::StatusOr<OpenedSession> first = registry.Open("a", std::nullopt, {});
  ASSERT_THAT(first.status(), IsOk());
  Drain(registry, *first->session);
  absl::StatusOr<OpenedSession> second = registry.Open("a", std::nullopt, {});
  ASSERT_THAT(second.status(), IsOk());
  EXPECT_EQ(second->superseded, first->session);
  std::string frame;
  std::optional<absl::Status> end;
  EXPECT_FALSE(registry.NextFrame(*first->session, kNow, &frame, &end));
  ASSERT_TRUE(end.has_value());
  EXPECT_THAT(*end, StatusIs(absl::StatusCode::kAborted, HasSubstr("superseded")));
  EXPECT_THAT(Ack(registry, *first, Id(0x100, 0)),
              StatusIs(absl::StatusCode::kAborted, HasSubstr(second->session->id())));
  EXPECT_THAT(Ack(registry, *second, Id(0x100, 0)),
              StatusIs(absl::StatusCode::kOutOfRange, HasSubstr("not delivered")))
      << "the new session has not passed it yet";
}

TEST_F(ConsumerRegistryTest, StartAfterBelowWhatIsHeldIsRefusedAndRegistersNothing) {
  ConsumerRegistry registry(Options());
  registry.Load(&tracker_, {}, EventId{});
  Deliver(registry, 0x100, 3);
  absl::StatusOr<OpenedSession> a = registry.Open("a", std::nullopt, {});
  ASSERT_THAT(a.status(), IsOk());
  Drain(registry, *a->session);
  ASSERT_THAT(Ack(registry, *a, Id(0x100, 1)), IsOk());
  EXPECT_THAT(registry.Open("late", Id(0x100, 0), {}).status(),
              StatusIs(absl::StatusCode::kOutOfRange, HasSubstr("still holds")));
  EXPECT_THAT(registry.Snapshot().consumers, SizeIs(1));
  EXPECT_THAT(registry.Open("a", Id(0x100, 0), {}).status(),
              StatusIs(absl::StatusCode::kOutOfRange, HasSubstr("checkpoint")));
}

TEST_F(ConsumerRegistryTest, TheBufferBoundTellsTheReaderToWait) {
  const size_t one = Buffered(Id(0x100, 0)).bytes;
  ConsumerRegistry registry(Options(one * 3));
  registry.Load(&tracker_, {}, EventId{});
  Deliver(registry, 0x100, 3);
  EXPECT_FALSE(registry.HasRoom());
  absl::StatusOr<OpenedSession> a = registry.Open("a", std::nullopt, {});
  ASSERT_THAT(a.status(), IsOk());
  Drain(registry, *a->session);
  ASSERT_THAT(Ack(registry, *a, Id(0x100, 0)), IsOk());
  EXPECT_TRUE(registry.HasRoom());
}

// HasRoom answers from a flag while the buffer has room: every fill must
// still be seen, not only the first.
TEST_F(ConsumerRegistryTest, TheBufferBoundHoldsEachTimeTheBufferFillsAgain) {
  const size_t one = Buffered(Id(0x100, 0)).bytes;
  ConsumerRegistry registry(Options(one * 2));
  registry.Load(&tracker_, {}, EventId{});
  absl::StatusOr<OpenedSession> a = registry.Open("a", std::nullopt, {});
  ASSERT_THAT(a.status(), IsOk());
  for (uint64_t lsn = 0x100; lsn <= 0x400; lsn += 0x100) {
    SCOPED_TRACE(lsn);
    EXPECT_TRUE(registry.HasRoom());
    Deliver(registry, lsn, 1);
    EXPECT_TRUE(registry.HasRoom()) << "one event of two";
    Deliver(registry, lsn + 0x10, 1);
    EXPECT_FALSE(registry.HasRoom());
    EXPECT_FALSE(registry.HasRoom()) << "asked again";
    Drain(registry, *a->session);
    ASSERT_THAT(Ack(registry, *a, Id(lsn + 0x10, 0)), IsOk());
  }
  EXPECT_TRUE(registry.HasRoom());
}

TEST_F(ConsumerRegistryTest, WaitingSessionsAreWokenOnceByTheReader) {
  ConsumerRegistry registry(Options());
  registry.Load(&tracker_, {}, EventId{});
  absl::StatusOr<OpenedSession> a = registry.Open("a", std::nullopt, {});
  ASSERT_THAT(a.status(), IsOk());
  EXPECT_THAT(Drain(registry, *a->session), IsEmpty());  // started, then nothing: waiting
  Deliver(registry, 0x100, 1);
  EXPECT_THAT(registry.TakeWaiting(), ElementsAre(a->session));
  EXPECT_THAT(registry.TakeWaiting(), IsEmpty());
}

TEST_F(ConsumerRegistryTest, RemovalWaitsForAnAckInFlightAndThenReleasesTheBuffer) {
  ConsumerRegistry registry(Options());
  registry.Load(&tracker_, {}, EventId{});
  Deliver(registry, 0x100, 2);
  absl::StatusOr<OpenedSession> a = registry.Open("a", std::nullopt, {});
  absl::StatusOr<OpenedSession> b = registry.Open("b", std::nullopt, {});
  ASSERT_THAT(a.status(), IsOk());
  ASSERT_THAT(b.status(), IsOk());
  Drain(registry, *a->session);
  Drain(registry, *b->session);
  // An ack of b's passes its checks; its durable write is still going on.
  ASSERT_THAT(registry.BeginAck("b", b->session->id(), Id(0x100, 0)).status(), IsOk());
  absl::StatusOr<std::shared_ptr<Session>> ended = registry.BeginRemove("b");
  ASSERT_THAT(ended.status(), IsOk());
  EXPECT_EQ(*ended, b->session);
  EXPECT_THAT(registry.Open("b", std::nullopt, {}).status(),
              StatusIs(absl::StatusCode::kAborted, HasSubstr("being removed")));
  EXPECT_THAT(registry.BeginRemove("b").status(), StatusIs(absl::StatusCode::kAborted));
  absl::Notification landed;
  EventId checkpoint;
  std::thread remover([&] {
    checkpoint = registry.AwaitAcksLanded("b");
    landed.Notify();
  });
  EXPECT_FALSE(landed.WaitForNotificationWithTimeout(absl::Milliseconds(50)))
      << "the removal must wait for the ack in flight";
  ASSERT_THAT(tracker_.Ack("b", Id(0x100, 0)), IsOk());
  SessionList wake;
  registry.FinishAck("b", Id(0x100, 0), &wake);
  remover.join();
  EXPECT_EQ(checkpoint, Id(0x100, 0)) << "what the landed ack stored";
  ASSERT_THAT(Ack(registry, *a, Id(0x100, 1)), IsOk());
  EXPECT_EQ(registry.Snapshot().buffered_events, 1u) << "b still holds the second event";
  registry.FinishRemove("b", &wake);
  EXPECT_EQ(registry.Snapshot().buffered_events, 0u);
  EXPECT_THAT(registry.Snapshot().consumers, SizeIs(1));
}

TEST_F(ConsumerRegistryTest, AFailedRemovalKeepsTheConsumer) {
  ConsumerRegistry registry(Options());
  registry.Load(&tracker_, {{"a", Id(0x50, 0)}}, EventId{});
  ASSERT_THAT(registry.BeginRemove("a").status(), IsOk());
  registry.AbandonRemove("a");
  absl::StatusOr<OpenedSession> a = registry.Open("a", std::nullopt, {});
  ASSERT_THAT(a.status(), IsOk());
  EXPECT_EQ(a->checkpoint, Id(0x50, 0));
}

TEST_F(ConsumerRegistryTest, StopAndFailEndSessionsAndRefuseWhatFollows) {
  ConsumerRegistry registry(Options());
  registry.Load(&tracker_, {}, EventId{});
  absl::StatusOr<OpenedSession> a = registry.Open("a", std::nullopt, {});
  ASSERT_THAT(a.status(), IsOk());
  EXPECT_THAT(registry.Stop(absl::UnavailableError("shutting down")), ElementsAre(a->session));
  EXPECT_THAT(registry.Open("a", std::nullopt, {}).status(),
              StatusIs(absl::StatusCode::kUnavailable, HasSubstr("stopping")));
  registry.Fail(absl::DataLossError("slot dropped"));
  EXPECT_THAT(registry.Open("a", std::nullopt, {}).status(),
              StatusIs(absl::StatusCode::kDataLoss));
  EXPECT_THAT(Ack(registry, *a, Id(0x100, 0)), StatusIs(absl::StatusCode::kDataLoss));
}

TEST_F(ConsumerRegistryTest, AConsumerThatNeverAckedIsForgottenWithItsSession) {
  ConsumerRegistry registry(Options());
  registry.Load(&tracker_, {}, EventId{});
  absl::StatusOr<OpenedSession> a = registry.Open("a", std::nullopt, {});
  absl::StatusOr<OpenedSession> b = registry.Open("b", std::nullopt, {});
  ASSERT_THAT(a.status(), IsOk());
  ASSERT_THAT(b.status(), IsOk());
  Deliver(registry, 0x100, 2);
  Drain(registry, *a->session);
  Drain(registry, *b->session);
  ASSERT_THAT(Ack(registry, *a, Id(0x100, 1)), IsOk());
  EXPECT_EQ(registry.Snapshot().buffered_events, 2u) << "b, connected, holds them";
  EXPECT_TRUE(registry.Close(b->session)) << "b never acked: forgotten";
  EXPECT_EQ(registry.Snapshot().buffered_events, 0u);
  EXPECT_THAT(registry.Snapshot().consumers, SizeIs(1));
  EXPECT_FALSE(registry.Close(a->session)) << "a has a checkpoint: kept";
  EXPECT_THAT(registry.Snapshot().consumers, SizeIs(1));
}

TEST_F(ConsumerRegistryTest, AnEphemeralSessionStartsAtTheHeadAndIsNoConsumer) {
  ConsumerRegistry registry(Options());
  registry.Load(&tracker_, {}, EventId{});
  absl::StatusOr<OpenedSession> a = registry.Open("a", std::nullopt, {});
  ASSERT_THAT(a.status(), IsOk());
  Deliver(registry, 0x100, 2);
  SessionOptions ephemeral;
  ephemeral.ephemeral = true;
  absl::StatusOr<OpenedSession> e = registry.Open("", std::nullopt, ephemeral);
  ASSERT_THAT(e.status(), IsOk());
  EXPECT_EQ(e->start_after, Id(0x100, 1));
  Deliver(registry, 0x200, 1);
  EXPECT_THAT(Drain(registry, *e->session), ElementsAre(Id(0x200, 0).ToString()));
  const RegistrySnapshot snapshot = registry.Snapshot();
  EXPECT_THAT(snapshot.consumers, SizeIs(1));
  EXPECT_EQ(snapshot.ephemeral_sessions, 1u);
  EXPECT_THAT(registry.BeginAck("", e->session->id(), Id(0x200, 0)).status(),
              StatusIs(absl::StatusCode::kFailedPrecondition, HasSubstr("ephemeral")));
}

TEST_F(ConsumerRegistryTest, AnEphemeralSessionThatFallsBehindEndsSayingHowFar) {
  ConsumerRegistry registry(Options());
  registry.Load(&tracker_, {}, EventId{});
  absl::StatusOr<OpenedSession> a = registry.Open("a", std::nullopt, {});
  ASSERT_THAT(a.status(), IsOk());
  SessionOptions ephemeral;
  ephemeral.ephemeral = true;
  absl::StatusOr<OpenedSession> e = registry.Open("watch", std::nullopt, ephemeral);
  ASSERT_THAT(e.status(), IsOk());
  Deliver(registry, 0x100, 3);
  Drain(registry, *a->session);
  ASSERT_THAT(Ack(registry, *a, Id(0x100, 2)), IsOk());  // Trims what e never read.
  std::string frame;
  std::optional<absl::Status> end;
  while (registry.NextFrame(*e->session, kNow, &frame, &end)) {
  }
  ASSERT_TRUE(end.has_value());
  EXPECT_THAT(*end, StatusIs(absl::StatusCode::kOutOfRange,
                             AllOf(HasSubstr("fell behind"), HasSubstr(Id(0x100, 2).ToString()))));
  EXPECT_THAT(registry.Open("w2", Id(0x100, 0), ephemeral).status(),
              StatusIs(absl::StatusCode::kOutOfRange)) << "start_after no longer held";
}

TEST_F(ConsumerRegistryTest, ANewConsumerMayStartAfterTheNewestEvent) {
  ConsumerRegistry registry(Options());
  registry.Load(&tracker_, {}, EventId{});
  absl::StatusOr<OpenedSession> a = registry.Open("a", std::nullopt, {});
  ASSERT_THAT(a.status(), IsOk());
  Deliver(registry, 0x100, 2);
  SessionOptions latest;
  latest.start_latest = true;
  absl::StatusOr<OpenedSession> l = registry.Open("l", std::nullopt, latest);
  ASSERT_THAT(l.status(), IsOk());
  EXPECT_EQ(l->start_after, Id(0x100, 1));
  EXPECT_THAT(Drain(registry, *l->session), IsEmpty());
  Drain(registry, *a->session);
  ASSERT_THAT(Ack(registry, *a, Id(0x100, 1)), IsOk());
  EXPECT_EQ(registry.Snapshot().buffered_events, 0u)
      << "what came before l started is not l's to hold";
}

TEST_F(ConsumerRegistryTest, ResetResolvesItsTargetAndOnlyMovesForward) {
  ConsumerRegistry registry(Options());
  registry.Load(&tracker_, {}, EventId{});
  absl::StatusOr<OpenedSession> a = registry.Open("a", std::nullopt, {});
  ASSERT_THAT(a.status(), IsOk());
  Deliver(registry, 0x100, 2);
  Deliver(registry, 0x200, 2);
  Drain(registry, *a->session);
  ASSERT_THAT(Ack(registry, *a, Id(0x100, 0)), IsOk());
  EXPECT_THAT(registry.BeginReset("a", EventId{}).status(),
              StatusIs(absl::StatusCode::kFailedPrecondition));
  EXPECT_THAT(registry.BeginReset("a", Id(0x300, 0)).status(),
              StatusIs(absl::StatusCode::kOutOfRange));
  absl::StatusOr<ConsumerRegistry::ResetTicket> ticket = registry.BeginReset("a", Id(0x1FF, 9));
  ASSERT_THAT(ticket.status(), IsOk());
  EXPECT_EQ(ticket->previous, Id(0x100, 0));
  EXPECT_EQ(ticket->target, Id(0x100, 1)) << "the last event at or below the id";
  EXPECT_EQ(ticket->ended, a->session);
  EXPECT_THAT(registry.Open("a", std::nullopt, {}).status(),
              StatusIs(absl::StatusCode::kAborted, HasSubstr("reset")));
  SessionList wake;
  registry.FinishReset("a", ticket->target, &wake);
  absl::StatusOr<OpenedSession> again = registry.Open("a", std::nullopt, {});
  ASSERT_THAT(again.status(), IsOk());
  EXPECT_EQ(again->checkpoint, Id(0x100, 1));
  absl::StatusOr<ConsumerRegistry::ResetTicket> head = registry.BeginReset("a", std::nullopt);
  ASSERT_THAT(head.status(), IsOk());
  EXPECT_EQ(head->target, Id(0x200, 1));
  registry.AbandonReset("a");
  EXPECT_THAT(registry.Open("a", std::nullopt, {}).status(), IsOk()) << "an abandoned reset frees it";
}

TEST_F(ConsumerRegistryTest, HeldBytesNameWhoKeepsEventsBuffered) {
  ConsumerRegistry registry(Options());
  registry.Load(&tracker_, {{"slow", EventId{}}}, EventId{});
  absl::StatusOr<OpenedSession> fast = registry.Open("fast", std::nullopt, {});
  ASSERT_THAT(fast.status(), IsOk());
  Deliver(registry, 0x100, 4);
  Drain(registry, *fast->session);
  ASSERT_THAT(Ack(registry, *fast, Id(0x100, 3)), IsOk());
  const RegistrySnapshot snapshot = registry.Snapshot();
  ASSERT_THAT(snapshot.consumers, SizeIs(2));
  EXPECT_EQ(snapshot.consumers[0].name, "fast");
  EXPECT_EQ(snapshot.consumers[0].held_bytes, 0u);
  EXPECT_EQ(snapshot.consumers[1].held_bytes, snapshot.buffered_bytes);
  EXPECT_GT(snapshot.buffered_bytes, 0u);
}

TEST_F(ConsumerRegistryTest, AFullBufferNamesTheConsumerItWaitsForOnceEachWay) {
  const size_t one = Buffered(Id(0x100, 0)).bytes;
  ConsumerRegistry registry(Options(one * 2));
  registry.Load(&tracker_, {{"slow", Id(0x50, 0)}}, EventId{});
  absl::StatusOr<OpenedSession> fast = registry.Open("fast", std::nullopt, {});
  ASSERT_THAT(fast.status(), IsOk());
  std::optional<HoldChange> change;
  EXPECT_TRUE(registry.HasRoom(&change));
  EXPECT_FALSE(change.has_value());
  Deliver(registry, 0x100, 2);
  Drain(registry, *fast->session);
  ASSERT_THAT(Ack(registry, *fast, Id(0x100, 1)), IsOk());
  EXPECT_FALSE(registry.HasRoom(&change));
  ASSERT_TRUE(change.has_value());
  EXPECT_TRUE(change->started);
  EXPECT_EQ(change->holder, "slow");
  EXPECT_EQ(registry.Snapshot().held_by, "slow");
  change.reset();
  EXPECT_FALSE(registry.HasRoom(&change));
  EXPECT_FALSE(change.has_value()) << "said once";
  SessionList wake;
  ASSERT_THAT(registry.BeginRemove("slow").status(), IsOk());
  registry.FinishRemove("slow", &wake);
  EXPECT_TRUE(registry.HasRoom(&change));
  EXPECT_FALSE(change.has_value()) << "the episode ends once the buffer kept its room";
  EXPECT_EQ(registry.Snapshot().held_by, "") << "room again: the status says so at once";
  EXPECT_EQ(registry.Snapshot().hold_episode_by, "slow") << "the episode settles for 5 s";
  ASSERT_TRUE(walfeed::testing::WaitUntil(
      [&] {
        registry.HasRoom(&change);
        return change.has_value();
      },
      absl::Seconds(30)));
  EXPECT_FALSE(change->started);
  EXPECT_EQ(change->holder, "slow");
  EXPECT_GE(change->lasted, absl::Seconds(5));
  EXPECT_EQ(registry.Snapshot().held_by, "");
  EXPECT_EQ(registry.Snapshot().hold_episode_by, "");
}

TEST_F(ConsumerRegistryTest, NothingIsDroppedUntilSomeConsumerHasADurableCheckpoint) {
  ConsumerRegistry registry(Options());
  registry.Load(&tracker_, {}, EventId{});
  Deliver(registry, 0x100, 3);
  SessionOptions latest;
  latest.start_latest = true;
  absl::StatusOr<OpenedSession> l = registry.Open("l", std::nullopt, latest);
  ASSERT_THAT(l.status(), IsOk());
  Deliver(registry, 0x200, 1);
  EXPECT_EQ(registry.Snapshot().buffered_events, 4u)
      << "a consumer that never acked does not let events go that a later one is promised";
  EXPECT_TRUE(registry.Close(l->session));
  absl::StatusOr<OpenedSession> first = registry.Open("first", std::nullopt, {});
  ASSERT_THAT(first.status(), IsOk());
  EXPECT_THAT(Drain(registry, *first->session), SizeIs(4));
}

TEST_F(ConsumerRegistryTest, ANeverAckedConsumerResumesWhereItStartedAndAcksAtItsStartAreNoOps) {
  ConsumerRegistry registry(Options());
  registry.Load(&tracker_, {{"durable", Id(0x100, 0)}}, EventId{});
  Deliver(registry, 0x100, 2);
  SessionOptions latest;
  latest.start_latest = true;
  absl::StatusOr<OpenedSession> first = registry.Open("l", std::nullopt, latest);
  ASSERT_THAT(first.status(), IsOk());
  absl::StatusOr<ConsumerRegistry::AckTicket> at_start =
      registry.BeginAck("l", first->session->id(), Id(0x100, 1));
  ASSERT_THAT(at_start.status(), IsOk()) << "at its start: never OUT_OF_RANGE";
  EXPECT_TRUE(at_start->noop) << "nothing to store";
  absl::StatusOr<OpenedSession> second = registry.Open("l", std::nullopt, latest);
  ASSERT_THAT(second.status(), IsOk());
  EXPECT_EQ(second->start_after, Id(0x100, 1)) << "a takeover keeps its start, not EventId{}";
}

TEST_F(ConsumerRegistryTest, AnAbandonedAckOfAConsumerThatLeftForgetsIt) {
  ConsumerRegistry registry(Options());
  registry.Load(&tracker_, {{"durable", Id(0x50, 0)}}, EventId{});
  absl::StatusOr<OpenedSession> a = registry.Open("a", std::nullopt, {});
  ASSERT_THAT(a.status(), IsOk());
  Deliver(registry, 0x100, 1);
  Drain(registry, *a->session);
  ASSERT_THAT(registry.BeginAck("a", a->session->id(), Id(0x100, 0)).status(), IsOk());
  EXPECT_FALSE(registry.Close(a->session)) << "an ack is in flight";
  EXPECT_THAT(registry.Snapshot().consumers, SizeIs(2));
  registry.AbandonAck("a");  // Its durable write failed.
  EXPECT_THAT(registry.Snapshot().consumers, SizeIs(1)) << "not left behind holding the stream";
}

TEST_F(ConsumerRegistryTest, ANoOpAckStillShrinksTheWindowOfARedeliveringSession) {
  ConsumerRegistry registry(Options());
  registry.Load(&tracker_, {}, EventId{});
  SessionOptions small;
  small.limits.max_unacked_events = 1;
  absl::StatusOr<OpenedSession> first = registry.Open("a", std::nullopt, small);
  ASSERT_THAT(first.status(), IsOk());
  Deliver(registry, 0x100, 2);
  Drain(registry, *first->session);
  // The first session's ack is in flight when a second session takes over.
  ASSERT_THAT(registry.BeginAck("a", first->session->id(), Id(0x100, 0)).status(), IsOk());
  absl::StatusOr<OpenedSession> second = registry.Open("a", std::nullopt, small);
  ASSERT_THAT(second.status(), IsOk());
  EXPECT_THAT(Drain(registry, *second->session), ElementsAre(Id(0x100, 0).ToString()));
  ASSERT_THAT(tracker_.Ack("a", Id(0x100, 0)), IsOk());
  SessionList wake;
  registry.FinishAck("a", Id(0x100, 0), &wake);
  // The redelivered event is at the checkpoint now: its ack is a no-op, and it
  // must still leave the window, or the session would never get another event.
  absl::StatusOr<ConsumerRegistry::AckTicket> noop =
      registry.BeginAck("a", second->session->id(), Id(0x100, 0));
  ASSERT_THAT(noop.status(), IsOk());
  EXPECT_TRUE(noop->noop);
  EXPECT_THAT(Drain(registry, *second->session), ElementsAre(Id(0x100, 1).ToString()));
}

}  // namespace
}  // namespace walfeed::server
