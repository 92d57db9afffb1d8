// ConsumerRegistry across a re-read of the stream (Unload, then Load with the
// checkpoints the next run's Prepare read): work that was in flight at the
// Unload, and stored after Prepare read the store, must not be undone by those
// older checkpoints, and no consumer may resume past events it never received.
#include "server/consumer_registry.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/server/stream_events.h"
#include "tests/testing/status_matchers.h"

namespace walfeed::server {
namespace {

using ::testing::ElementsAre;
using ::testing::SizeIs;
using ::walfeed::testing::Buffered;
using ::walfeed::testing::FrameIds;
using ::walfeed::testing::Id;
using ::walfeed::testing::IsOk;

class RegistryReloadTest : public ::testing::Test {
 protected:
  ConsumerRegistry::Options Options() {
    return ConsumerRegistry::Options{
        "s", "slot_s", 1 << 20, [] { return absl::UnavailableError("stream \"s\" is connecting"); },
        [] { return replication::Lsn(0x9000); },
        [this] { return absl::StrCat("session-", ++sessions_); }, nullptr, 0, nullptr, nullptr};
  }
  // What the reader hands over for one single-event transaction at `commit`,
  // tracked in `tracker`; as the delivery gate does, nothing at or below `floor`.
  void Deliver(ConsumerRegistry& registry, replication::AckTracker& tracker, uint64_t commit,
               EventId floor) {
    ASSERT_THAT(tracker.OnBegin(replication::Lsn(commit)), IsOk());
    ASSERT_THAT(tracker.OnEvent(Id(commit, 0)), IsOk());
    if (Id(commit, 0) > floor) {
      ASSERT_THAT(registry.Append(Buffered(Id(commit, 0))), IsOk());
    }
    ASSERT_THAT(tracker.OnCommit(replication::Lsn(commit), replication::Lsn(commit + 0x28), 1),
                IsOk());
  }
  std::vector<std::string> Drain(ConsumerRegistry& registry, const Session& session) {
    std::vector<std::string> ids;
    std::string frame;
    std::optional<absl::Status> end;
    while (registry.NextFrame(session, absl::Now(), &frame, &end)) {
      for (std::string& id : FrameIds(frame)) ids.push_back(std::move(id));
    }
    return ids;
  }
  // An ack all the way (checks, durable write, tracker, registry).
  void Ack(ConsumerRegistry& registry, replication::AckTracker& tracker,
           const OpenedSession& opened, EventId id) {
    const std::string& consumer = opened.session->consumer();
    ASSERT_THAT(registry.BeginAck(consumer, opened.session->id(), id).status(), IsOk());
    ASSERT_THAT(tracker.Ack(consumer, id), IsOk());
    SessionList wake;
    registry.FinishAck(consumer, id, &wake);
  }
  SessionList Unload(ConsumerRegistry& registry) {
    return registry.Unload(absl::UnavailableError("re-read from the slot"));
  }

  int sessions_ = 0;
  // The first run's tracker and the next run's (both from the slot's start).
  replication::AckTracker first_{replication::Lsn(0x10)};
  replication::AckTracker next_{replication::Lsn(0x10)};
};

TEST_F(RegistryReloadTest, AFirstAckStoredAfterTheReloadReadTheStoreLowersTheFloor) {
  ConsumerRegistry registry(Options());
  registry.Load(&first_, {}, EventId{});
  for (uint64_t commit : {0x100, 0x200, 0x300}) Deliver(registry, first_, commit, EventId{});
  absl::StatusOr<OpenedSession> a = registry.Open("a", std::nullopt, {});
  absl::StatusOr<OpenedSession> b = registry.Open("b", std::nullopt, {});
  ASSERT_THAT(a.status(), IsOk());
  ASSERT_THAT(b.status(), IsOk());
  Drain(registry, *a->session);
  Drain(registry, *b->session);
  Ack(registry, first_, *a, Id(0x300, 0));
  // b's first ack passed its checks; its durable write is still going on when
  // the stream is re-read, and lands after the next run read the store (which
  // therefore knows only a: every stored consumer acked up to 0x300).
  ASSERT_THAT(registry.BeginAck("b", b->session->id(), Id(0x100, 0)).status(), IsOk());
  Unload(registry);
  const EventId floor = registry.Load(&next_, {{"a", Id(0x300, 0)}}, Id(0x300, 0));
  EXPECT_EQ(floor, EventId{}) << "b holds the stream from where it stood: it had acked nothing";
  SessionList wake;
  registry.FinishAck("b", Id(0x100, 0), &wake);
  for (uint64_t commit : {0x100, 0x200, 0x300, 0x400}) Deliver(registry, next_, commit, floor);

  absl::StatusOr<OpenedSession> b_again = registry.Open("b", std::nullopt, {});
  ASSERT_THAT(b_again.status(), IsOk());
  EXPECT_EQ(b_again->checkpoint, Id(0x100, 0));
  EXPECT_THAT(Drain(registry, *b_again->session), ElementsAre("0/200:0", "0/300:0", "0/400:0"))
      << "b resumes after its ack, not after a's";
  absl::StatusOr<OpenedSession> a_again = registry.Open("a", std::nullopt, {});
  ASSERT_THAT(a_again.status(), IsOk());
  EXPECT_THAT(Drain(registry, *a_again->session), ElementsAre("0/400:0"));
}

TEST_F(RegistryReloadTest, WithoutWorkInFlightTheStoredFloorHolds) {
  ConsumerRegistry registry(Options());
  registry.Load(&first_, {}, EventId{});
  Deliver(registry, first_, 0x100, EventId{});
  absl::StatusOr<OpenedSession> a = registry.Open("a", std::nullopt, {});
  ASSERT_THAT(a.status(), IsOk());
  Drain(registry, *a->session);
  Ack(registry, first_, *a, Id(0x100, 0));
  Unload(registry);
  EXPECT_EQ(registry.Load(&next_, {{"a", Id(0x100, 0)}}, Id(0x100, 0)), Id(0x100, 0));
}

TEST_F(RegistryReloadTest, ARemovalStoredWhileUnloadedIsNotUndoneByAnOlderRead) {
  ConsumerRegistry registry(Options());
  registry.Load(&first_, {{"a", Id(0x100, 0)}, {"b", Id(0x100, 0)}}, Id(0x100, 0));
  ASSERT_THAT(registry.BeginRemove("a").status(), IsOk());
  EXPECT_EQ(registry.AwaitAcksLanded("a"), Id(0x100, 0));
  Unload(registry);
  SessionList wake;
  registry.FinishRemove("a", &wake);  // The delete is durable now...
  // ...but the next run read the store before it.
  registry.Load(&next_, {{"a", Id(0x100, 0)}, {"b", Id(0x100, 0)}}, Id(0x100, 0));
  const RegistrySnapshot snapshot = registry.Snapshot();
  ASSERT_THAT(snapshot.consumers, SizeIs(1));
  EXPECT_EQ(snapshot.consumers[0].name, "b");
  absl::StatusOr<OpenedSession> a = registry.Open("a", std::nullopt, {});
  ASSERT_THAT(a.status(), IsOk());
  EXPECT_EQ(a->checkpoint, EventId{}) << "a subscribes again as a new consumer";

  // The next reload reads the store as it is, without a: nothing is remembered.
  ASSERT_THAT(registry.Close(a->session), true);
  Unload(registry);
  replication::AckTracker third(replication::Lsn(0x10));
  registry.Load(&third, {{"a", Id(0x100, 0)}}, Id(0x100, 0));
  EXPECT_THAT(registry.Snapshot().consumers, SizeIs(1))
      << "a stored checkpoint read after the removal (another instance's) counts again";
}

TEST_F(RegistryReloadTest, AReattachStoredWhileUnloadedIsNotUndoneByAnOlderRead) {
  ConsumerRegistry registry(Options());
  registry.Load(&first_, {{"b", Id(0x100, 0)}}, Id(0x100, 0), {{"a", Id(0x100, 0)}});
  Deliver(registry, first_, 0x200, Id(0x100, 0));
  absl::StatusOr<ConsumerRegistry::ResetTicket> reset = registry.BeginReset("a", std::nullopt);
  ASSERT_THAT(reset.status(), IsOk());
  EXPECT_TRUE(reset->detached);
  Unload(registry);
  SessionList wake;
  registry.FinishReset("a", reset->target, &wake);  // Stored: attached at the target...
  // ...after the next run read a as detached.
  registry.Load(&next_, {{"b", Id(0x100, 0)}}, Id(0x100, 0), {{"a", Id(0x100, 0)}});
  const RegistrySnapshot snapshot = registry.Snapshot();
  ASSERT_THAT(snapshot.consumers, SizeIs(2));
  EXPECT_EQ(snapshot.consumers[0].name, "a");
  EXPECT_FALSE(snapshot.consumers[0].detached);
  EXPECT_EQ(snapshot.consumers[0].checkpoint, reset->target);
  EXPECT_THAT(registry.Open("a", std::nullopt, {}).status(), IsOk());
}

TEST_F(RegistryReloadTest, AReattachInFlightAtTheReloadKeepsItsTargetHeld) {
  ConsumerRegistry registry(Options());
  registry.Load(&first_, {{"b", Id(0x300, 0)}}, Id(0x300, 0), {{"a", Id(0x100, 0)}});
  Deliver(registry, first_, 0x400, Id(0x300, 0));
  Deliver(registry, first_, 0x500, Id(0x300, 0));
  absl::StatusOr<ConsumerRegistry::ResetTicket> reset = registry.BeginReset("a", Id(0x400, 0));
  ASSERT_THAT(reset.status(), IsOk());
  ASSERT_EQ(reset->target, Id(0x400, 0));
  Unload(registry);
  // Read before the reset's write: a still detached, and b at 0x500.
  const EventId floor =
      registry.Load(&next_, {{"b", Id(0x500, 0)}}, Id(0x500, 0), {{"a", Id(0x100, 0)}});
  EXPECT_EQ(floor, Id(0x400, 0)) << "a holds the stream from its target on";
  SessionList wake;
  registry.FinishReset("a", reset->target, &wake);
  for (uint64_t commit : {0x400, 0x500}) Deliver(registry, next_, commit, floor);
  absl::StatusOr<OpenedSession> a = registry.Open("a", std::nullopt, {});
  ASSERT_THAT(a.status(), IsOk()) << "re-attached, not detached again by the older read";
  EXPECT_EQ(a->checkpoint, Id(0x400, 0));
  EXPECT_THAT(Drain(registry, *a->session), ElementsAre("0/500:0"));
  EXPECT_FALSE(registry.Snapshot().consumers[0].detached);
}

}  // namespace
}  // namespace walfeed::server
