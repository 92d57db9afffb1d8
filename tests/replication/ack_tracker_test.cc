// Scenario tests for AckTracker: every row of the restart table in
// postgres-replication.md §4.2 and the idle-advance cases of §4.7, replayed as the
// sequences a replication connection delivers. LSNs are the ones observed on a
// PostgreSQL 15 server in the design notes' experiments (E6, E8, E21).
#include "replication/ack_tracker.h"

#include <cstdint>
#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "replication/error_reason.h"
#include "tests/testing/status_matchers.h"

namespace walfeed::replication {
namespace {

using ::testing::HasSubstr;
using ::walfeed::testing::IsOk;
using ::walfeed::testing::StatusIs;

Lsn L(const char* text) { return *Lsn::Parse(text); }
EventId Id(const char* lsn, uint32_t index) { return EventId{L(lsn), index}; }

// Delivers a whole transaction: Begin, `events` events, Commit.
void Deliver(AckTracker& t, const char* commit, const char* end, uint32_t events) {
  ASSERT_THAT(t.OnBegin(L(commit)), IsOk());
  for (uint32_t i = 0; i < events; ++i) ASSERT_THAT(t.OnEvent(Id(commit, i)), IsOk());
  ASSERT_THAT(t.OnCommit(L(commit), L(end), events), IsOk());
}

class AckTrackerTest : public ::testing::Test {
 protected:
  // The position the stream resumed from (a stored confirmed LSN).
  AckTracker tracker_{L("0/100000")};
};

TEST_F(AckTrackerTest, NothingAckedConfirmsOnlyTheStart) {
  ASSERT_THAT(tracker_.AddConsumer("c", EventId{}), IsOk());
  Deliver(tracker_, "0/159F328", "0/159F358", 2);
  EXPECT_EQ(tracker_.Confirmable(), L("0/100000"));
}

// §4.2 row 1 and the "fully acked → end_lsn" rule: confirming end_lsn(T) skips T
// and nothing after it.
TEST_F(AckTrackerTest, FullyAckedTransactionConfirmsItsEndLsn) {
  ASSERT_THAT(tracker_.AddConsumer("c", EventId{}), IsOk());
  Deliver(tracker_, "0/159F328", "0/159F358", 2);  // D
  Deliver(tracker_, "0/159F3F0", "0/159F420", 1);  // E
  ASSERT_THAT(tracker_.Ack("c", Id("0/159F328", 1)), IsOk());
  EXPECT_EQ(tracker_.Confirmable(), L("0/159F358"));
  ASSERT_THAT(tracker_.Ack("c", Id("0/159F3F0", 0)), IsOk());
  EXPECT_EQ(tracker_.Confirmable(), L("0/159F420"));
}

// §4.2: a partially acked transaction confirms its commit_lsn, so PostgreSQL
// re-sends it whole (never commit_lsn + 1, which would skip it).
TEST_F(AckTrackerTest, AckInTheMiddleConfirmsCommitLsn) {
  ASSERT_THAT(tracker_.AddConsumer("c", EventId{}), IsOk());
  Deliver(tracker_, "0/159F328", "0/159F358", 3);
  ASSERT_THAT(tracker_.Ack("c", Id("0/159F328", 1)), IsOk());
  EXPECT_EQ(tracker_.Confirmable(), L("0/159F328"));
}

TEST_F(AckTrackerTest, AckOfAnOpenTransactionConfirmsCommitLsnEvenIfAllEventsAcked) {
  ASSERT_THAT(tracker_.AddConsumer("c", EventId{}), IsOk());
  Deliver(tracker_, "0/159F328", "0/159F358", 1);
  ASSERT_THAT(tracker_.OnBegin(L("0/159F3F0")), IsOk());
  ASSERT_THAT(tracker_.OnEvent(Id("0/159F3F0", 0)), IsOk());
  ASSERT_THAT(tracker_.OnEvent(Id("0/159F3F0", 1)), IsOk());
  // Both delivered events acked, but without the Commit nobody knows they are
  // all of it.
  ASSERT_THAT(tracker_.Ack("c", Id("0/159F3F0", 1)), IsOk());
  EXPECT_EQ(tracker_.Confirmable(), L("0/159F3F0"));
  ASSERT_THAT(tracker_.OnCommit(L("0/159F3F0"), L("0/159F420"), 2), IsOk());
  EXPECT_EQ(tracker_.Confirmable(), L("0/159F420"));
}

// E21: end_lsn(T1) == commit_lsn(T2). Confirming T1's end re-sends T2 (safe);
// anything past it would skip T2, and the tracker never goes there.
TEST_F(AckTrackerTest, AdjacentTransactionsNeverConfirmPastTheNextCommit) {
  ASSERT_THAT(tracker_.AddConsumer("c", EventId{}), IsOk());
  Deliver(tracker_, "0/705B670", "0/705B6A0", 1);
  Deliver(tracker_, "0/705B6A0", "0/705B6D0", 2);
  ASSERT_THAT(tracker_.Ack("c", Id("0/705B670", 0)), IsOk());
  EXPECT_EQ(tracker_.Confirmable(), L("0/705B6A0"));
  ASSERT_THAT(tracker_.Ack("c", Id("0/705B6A0", 0)), IsOk());
  EXPECT_EQ(tracker_.Confirmable(), L("0/705B6A0"));  // T2 partial: its commit_lsn.
  ASSERT_THAT(tracker_.Ack("c", Id("0/705B6A0", 1)), IsOk());
  EXPECT_EQ(tracker_.Confirmable(), L("0/705B6D0"));
}

// §4.7: a keepalive received when everything before it is acked may be confirmed.
TEST_F(AckTrackerTest, IdleAdvanceOnAQuietPublication) {
  ASSERT_THAT(tracker_.AddConsumer("c", EventId{}), IsOk());
  tracker_.OnKeepalive(L("0/15A7700"));
  EXPECT_EQ(tracker_.Confirmable(), L("0/15A7700"));
}

TEST_F(AckTrackerTest, IdleAdvanceAfterEverythingIsAcked) {
  ASSERT_THAT(tracker_.AddConsumer("c", EventId{}), IsOk());
  Deliver(tracker_, "0/159F328", "0/159F358", 1);
  tracker_.OnKeepalive(L("0/15A0000"));
  EXPECT_EQ(tracker_.Confirmable(), L("0/100000"));  // Unacked before the keepalive.
  ASSERT_THAT(tracker_.Ack("c", Id("0/159F328", 0)), IsOk());
  EXPECT_EQ(tracker_.Confirmable(), L("0/15A0000"));
}

// §4.7 / E8: a keepalive that arrives while a transaction is open (Begin and some
// changes received, Commit not yet) must not be confirmed: the open transaction
// was received before it and is not acked.
TEST_F(AckTrackerTest, KeepaliveDuringAnOpenTransactionIsNotConfirmed) {
  ASSERT_THAT(tracker_.AddConsumer("c", EventId{}), IsOk());
  ASSERT_THAT(tracker_.OnBegin(L("0/15A7700")), IsOk());
  ASSERT_THAT(tracker_.OnEvent(Id("0/15A7700", 0)), IsOk());
  tracker_.OnKeepalive(L("0/15A7000"));
  EXPECT_EQ(tracker_.Confirmable(), L("0/100000"));
  ASSERT_THAT(tracker_.Ack("c", Id("0/15A7700", 0)), IsOk());
  EXPECT_EQ(tracker_.Confirmable(), L("0/15A7700"));  // Partial: commit_lsn only.
  ASSERT_THAT(tracker_.OnCommit(L("0/15A7700"), L("0/15A7730"), 1), IsOk());
  EXPECT_EQ(tracker_.Confirmable(), L("0/15A7730"));
}

TEST_F(AckTrackerTest, KeepaliveAfterAnUnackedTransactionWaitsForItsAck) {
  ASSERT_THAT(tracker_.AddConsumer("c", EventId{}), IsOk());
  Deliver(tracker_, "0/1000000", "0/1000030", 1);
  tracker_.OnKeepalive(L("0/1000100"));
  Deliver(tracker_, "0/1000200", "0/1000230", 1);
  tracker_.OnKeepalive(L("0/1000300"));
  ASSERT_THAT(tracker_.Ack("c", Id("0/1000000", 0)), IsOk());
  // T1 and the keepalive after it: safe. T2 unacked blocks the second keepalive.
  EXPECT_EQ(tracker_.Confirmable(), L("0/1000100"));
  ASSERT_THAT(tracker_.Ack("c", Id("0/1000200", 0)), IsOk());
  EXPECT_EQ(tracker_.Confirmable(), L("0/1000300"));
}

TEST_F(AckTrackerTest, TwoConsumersConfirmTheMinimum) {
  ASSERT_THAT(tracker_.AddConsumer("fast", EventId{}), IsOk());
  ASSERT_THAT(tracker_.AddConsumer("slow", EventId{}), IsOk());
  Deliver(tracker_, "0/1000000", "0/1000030", 2);
  Deliver(tracker_, "0/1000200", "0/1000230", 2);
  ASSERT_THAT(tracker_.Ack("fast", Id("0/1000200", 1)), IsOk());
  EXPECT_EQ(tracker_.Confirmable(), L("0/100000"));
  ASSERT_THAT(tracker_.Ack("slow", Id("0/1000000", 0)), IsOk());
  EXPECT_EQ(tracker_.Confirmable(), L("0/1000000"));
  ASSERT_THAT(tracker_.Ack("slow", Id("0/1000000", 1)), IsOk());
  EXPECT_EQ(tracker_.Confirmable(), L("0/1000030"));
  ASSERT_THAT(tracker_.Ack("slow", Id("0/1000200", 1)), IsOk());
  EXPECT_EQ(tracker_.Confirmable(), L("0/1000230"));
}

TEST_F(AckTrackerTest, KeepaliveWaitsForTheSlowestConsumer) {
  ASSERT_THAT(tracker_.AddConsumer("a", EventId{}), IsOk());
  ASSERT_THAT(tracker_.AddConsumer("b", EventId{}), IsOk());
  Deliver(tracker_, "0/1000000", "0/1000030", 1);
  tracker_.OnKeepalive(L("0/2000000"));
  ASSERT_THAT(tracker_.Ack("a", Id("0/1000000", 0)), IsOk());
  EXPECT_EQ(tracker_.Confirmable(), L("0/100000"));
  ASSERT_THAT(tracker_.Ack("b", Id("0/1000000", 0)), IsOk());
  EXPECT_EQ(tracker_.Confirmable(), L("0/2000000"));
}

TEST_F(AckTrackerTest, DuplicateAndOlderAcksAreHarmlessAndNeverMoveBackwards) {
  ASSERT_THAT(tracker_.AddConsumer("c", EventId{}), IsOk());
  Deliver(tracker_, "0/1000000", "0/1000030", 3);
  ASSERT_THAT(tracker_.Ack("c", Id("0/1000000", 2)), IsOk());
  EXPECT_EQ(tracker_.Confirmable(), L("0/1000030"));
  EXPECT_THAT(tracker_.Ack("c", Id("0/1000000", 2)), IsOk());
  EXPECT_THAT(tracker_.Ack("c", Id("0/1000000", 0)), IsOk());   // Out of order.
  EXPECT_THAT(tracker_.Ack("c", Id("0/FF000", 7)), IsOk());   // Long gone.
  EXPECT_EQ(*tracker_.AckedBy("c"), Id("0/1000000", 2));
  EXPECT_EQ(tracker_.Confirmable(), L("0/1000030"));
}

TEST_F(AckTrackerTest, ConfirmableIsMonotonicWhenAConsumerJoinsBehind) {
  ASSERT_THAT(tracker_.AddConsumer("a", EventId{}), IsOk());
  Deliver(tracker_, "0/1000000", "0/1000030", 1);
  ASSERT_THAT(tracker_.Ack("a", Id("0/1000000", 0)), IsOk());
  EXPECT_EQ(tracker_.Confirmable(), L("0/1000030"));
  ASSERT_THAT(tracker_.AddConsumer("late", EventId{}), IsOk());
  EXPECT_EQ(tracker_.Confirmable(), L("0/1000030"));
}

TEST_F(AckTrackerTest, RefusesAcksOfIdsNeverDelivered) {
  ASSERT_THAT(tracker_.AddConsumer("c", EventId{}), IsOk());
  Deliver(tracker_, "0/1000000", "0/1000030", 2);
  EXPECT_THAT(tracker_.Ack("c", Id("0/1000000", 2)),
              StatusIs(absl::StatusCode::kOutOfRange, HasSubstr("0/1000000:2")));
  EXPECT_THAT(tracker_.Ack("c", Id("0/1000010", 0)),
              StatusIs(absl::StatusCode::kOutOfRange, HasSubstr("never delivered")));
  EXPECT_THAT(tracker_.Ack("c", Id("FF/0", 0)), StatusIs(absl::StatusCode::kOutOfRange));
  EXPECT_EQ(*tracker_.AckedBy("c"), EventId{});
  EXPECT_EQ(tracker_.Confirmable(), L("0/100000"));
}

TEST_F(AckTrackerTest, UnknownConsumer) {
  EXPECT_THAT(tracker_.Ack("nobody", Id("0/1", 0)),
              StatusIs(absl::StatusCode::kNotFound, HasSubstr("nobody")));
  EXPECT_THAT(tracker_.AckedBy("nobody"), StatusIs(absl::StatusCode::kNotFound));
  EXPECT_THAT(tracker_.RemoveConsumer("nobody"), StatusIs(absl::StatusCode::kNotFound));
  ASSERT_THAT(tracker_.AddConsumer("c", EventId{}), IsOk());
  EXPECT_THAT(tracker_.AddConsumer("c", EventId{}),
              StatusIs(absl::StatusCode::kAlreadyExists));
}

TEST_F(AckTrackerTest, WithoutConsumersNothingIsConfirmed) {
  Deliver(tracker_, "0/1000000", "0/1000030", 1);
  tracker_.OnKeepalive(L("0/2000000"));
  EXPECT_EQ(tracker_.Confirmable(), L("0/100000"));
}

TEST_F(AckTrackerTest, WithoutConsumersLeadingTransactionsWithoutEventsAreReleased) {
  Deliver(tracker_, "0/1000000", "0/1000030", 0);
  Deliver(tracker_, "0/1000100", "0/1000130", 0);
  Deliver(tracker_, "0/1000200", "0/1000230", 1);
  Deliver(tracker_, "0/1000300", "0/1000330", 0);
  EXPECT_EQ(tracker_.Confirmable(), L("0/100000")) << "nothing is confirmed without a consumer";
  EXPECT_EQ(tracker_.tracked_transactions(), 2u)
      << "the two without events before the first event are released, nothing after it";
  ASSERT_THAT(tracker_.AddConsumer("c", EventId{}), IsOk());
  EXPECT_EQ(tracker_.Confirmable(), L("0/1000130")) << "up to the first event's transaction";
  ASSERT_THAT(tracker_.Ack("c", Id("0/1000200", 0)), IsOk());
  EXPECT_EQ(tracker_.Confirmable(), L("0/1000330"));
}

TEST_F(AckTrackerTest, ARetiredTrackerHoldsNoRecordsAndAsksForANewSubscribe) {
  ASSERT_THAT(tracker_.AddConsumer("c", EventId{}), IsOk());
  Deliver(tracker_, "0/1000000", "0/1000030", 2);
  Deliver(tracker_, "0/1000100", "0/1000130", 1);
  ASSERT_THAT(tracker_.Ack("c", Id("0/1000000", 0)), IsOk());
  tracker_.Retire();
  EXPECT_EQ(tracker_.tracked_transactions(), 0u);
  EXPECT_THAT(tracker_.CheckDelivered(Id("0/1000100", 0)),
              StatusIs(absl::StatusCode::kUnavailable, HasSubstr("subscribe again")));
  EXPECT_EQ(reason::ReasonOf(tracker_.CheckDelivered(Id("0/1000100", 0))),
            reason::kStreamRestarting);
  EXPECT_THAT(tracker_.Ack("c", Id("0/1000100", 0)), StatusIs(absl::StatusCode::kUnavailable));
  EXPECT_THAT(tracker_.Ack("c", Id("0/1000000", 0)), IsOk()) << "already covered: a no-op";
  EXPECT_EQ(*tracker_.AckedBy("c"), Id("0/1000000", 0));
}

TEST_F(AckTrackerTest, RemovingTheSlowConsumerReleasesTheSlot) {
  ASSERT_THAT(tracker_.AddConsumer("a", EventId{}), IsOk());
  ASSERT_THAT(tracker_.AddConsumer("b", EventId{}), IsOk());
  Deliver(tracker_, "0/1000000", "0/1000030", 1);
  ASSERT_THAT(tracker_.Ack("a", Id("0/1000000", 0)), IsOk());
  EXPECT_EQ(tracker_.Confirmable(), L("0/100000"));
  ASSERT_THAT(tracker_.RemoveConsumer("b"), IsOk());
  EXPECT_EQ(tracker_.Confirmable(), L("0/1000030"));
}

// A consumer restored from a durable checkpoint: transactions at or below it are
// acked already, even though this session re-delivers them.
TEST_F(AckTrackerTest, CheckpointFromAPreviousSessionCounts) {
  ASSERT_THAT(tracker_.AddConsumer("c", Id("0/1000000", 1)), IsOk());
  Deliver(tracker_, "0/1000000", "0/1000030", 3);
  EXPECT_EQ(tracker_.Confirmable(), L("0/1000000"));  // Re-sent whole; 2 unacked.
  ASSERT_THAT(tracker_.Ack("c", Id("0/1000000", 2)), IsOk());
  EXPECT_EQ(tracker_.Confirmable(), L("0/1000030"));
}

TEST_F(AckTrackerTest, TransactionWithoutEventsNeedsNoAck) {
  ASSERT_THAT(tracker_.AddConsumer("c", EventId{}), IsOk());
  Deliver(tracker_, "0/1000000", "0/1000030", 1);
  Deliver(tracker_, "0/1000100", "0/1000130", 0);
  tracker_.OnKeepalive(L("0/1000200"));
  EXPECT_EQ(tracker_.Confirmable(), L("0/100000"));
  ASSERT_THAT(tracker_.Ack("c", Id("0/1000000", 0)), IsOk());
  EXPECT_EQ(tracker_.Confirmable(), L("0/1000200"));
}

TEST_F(AckTrackerTest, ReleasesFullyAckedTransactions) {
  ASSERT_THAT(tracker_.AddConsumer("c", EventId{}), IsOk());
  for (uint64_t i = 1; i <= 100; ++i) {
    const Lsn commit(0x1000000 + i * 0x100);
    ASSERT_THAT(tracker_.OnBegin(commit), IsOk());
    ASSERT_THAT(tracker_.OnEvent(EventId{commit, 0}), IsOk());
    ASSERT_THAT(tracker_.OnCommit(commit, Lsn(commit.value() + 0x30), 1), IsOk());
  }
  EXPECT_EQ(tracker_.tracked_transactions(), 100u);
  ASSERT_THAT(tracker_.Ack("c", EventId{Lsn(0x1000000 + 60 * 0x100), 0}), IsOk());
  EXPECT_EQ(tracker_.Confirmable(), Lsn(0x1000000 + 60 * 0x100 + 0x30));
  EXPECT_EQ(tracker_.tracked_transactions(), 40u);
  // A keepalive now attaches to the newest transaction; once it is acked the
  // keepalive becomes confirmable and everything is released.
  tracker_.OnKeepalive(Lsn(0x2000000));
  ASSERT_THAT(tracker_.Ack("c", EventId{Lsn(0x1000000 + 100 * 0x100), 0}), IsOk());
  EXPECT_EQ(tracker_.Confirmable(), Lsn(0x2000000));
  EXPECT_EQ(tracker_.tracked_transactions(), 0u);
}

TEST_F(AckTrackerTest, RejectsBrokenReplicationOrder) {
  EXPECT_THAT(tracker_.OnEvent(Id("0/1000000", 0)),
              StatusIs(absl::StatusCode::kFailedPrecondition));
  EXPECT_THAT(tracker_.OnCommit(L("0/1000000"), L("0/1000030"), 0),
              StatusIs(absl::StatusCode::kFailedPrecondition));
  // Below the start position: confirming the start would have skipped it.
  EXPECT_THAT(tracker_.OnBegin(L("0/FFFFF")),
              StatusIs(absl::StatusCode::kFailedPrecondition, HasSubstr("0/100000")));
  ASSERT_THAT(tracker_.OnBegin(L("0/1000000")), IsOk());
  EXPECT_THAT(tracker_.OnBegin(L("0/1000100")),
              StatusIs(absl::StatusCode::kFailedPrecondition, HasSubstr("still open")));
  EXPECT_THAT(tracker_.OnEvent(Id("0/1000000", 1)),
              StatusIs(absl::StatusCode::kFailedPrecondition, HasSubstr("index 0")));
  ASSERT_THAT(tracker_.OnEvent(Id("0/1000000", 0)), IsOk());
  EXPECT_THAT(tracker_.OnCommit(L("0/1000000"), L("0/1000030"), 2),
              StatusIs(absl::StatusCode::kFailedPrecondition, HasSubstr("2 events")));
  EXPECT_THAT(tracker_.OnCommit(L("0/1000000"), L("0/1000000"), 1),
              StatusIs(absl::StatusCode::kFailedPrecondition));
  ASSERT_THAT(tracker_.OnCommit(L("0/1000000"), L("0/1000030"), 1), IsOk());
  EXPECT_THAT(tracker_.OnBegin(L("0/1000000")),
              StatusIs(absl::StatusCode::kFailedPrecondition, HasSubstr("increase")));
}

// A keepalive never lets the confirmed position pass an unacked later transaction.
TEST_F(AckTrackerTest, NeverPastTheOldestUnackedCommit) {
  ASSERT_THAT(tracker_.AddConsumer("c", EventId{}), IsOk());
  tracker_.OnKeepalive(L("0/1000000"));
  Deliver(tracker_, "0/1000000", "0/1000030", 1);
  tracker_.OnKeepalive(L("0/1000500"));
  EXPECT_EQ(tracker_.Confirmable(), L("0/1000000"));
}

}  // namespace
}  // namespace walfeed::replication

namespace walfeed::replication {
namespace {

TEST(AckTrackerCheckDeliveredTest, KnowsExactlyWhatWasDelivered) {
  AckTracker tracker(Lsn(0x100));
  const Lsn c(0x200);
  ASSERT_TRUE(tracker.OnBegin(c).ok());
  ASSERT_TRUE(tracker.OnEvent(EventId{c, 0}).ok());
  ASSERT_TRUE(tracker.OnEvent(EventId{c, 1}).ok());
  EXPECT_TRUE(tracker.CheckDelivered(EventId{c, 1}).ok());
  EXPECT_EQ(tracker.CheckDelivered(EventId{c, 2}).code(), absl::StatusCode::kOutOfRange);
  EXPECT_EQ(tracker.CheckDelivered(EventId{Lsn(0x300), 0}).code(),
            absl::StatusCode::kOutOfRange);
}

// A backfill's READ events follow its high watermark transaction with the
// indexes after its own: ackable, and the transaction is confirmed only once
// they are acked too.
TEST_F(AckTrackerTest, EventsAppendedAfterACommitAreAckableAndHoldTheTransaction) {
  ASSERT_THAT(tracker_.AddConsumer("reader", EventId{}), IsOk());
  ASSERT_THAT(tracker_.AddConsumer("other", EventId{}), IsOk());
  Deliver(tracker_, "0/2000000", "0/2000030", 1);  // The watermark's message, index 0.
  ASSERT_THAT(tracker_.OnAppended(L("0/2000000"), 3), IsOk());
  EXPECT_THAT(tracker_.CheckDelivered(Id("0/2000000", 3)), IsOk());
  EXPECT_THAT(tracker_.CheckDelivered(Id("0/2000000", 4)),
              StatusIs(absl::StatusCode::kOutOfRange));
  ASSERT_THAT(tracker_.Ack("reader", Id("0/2000000", 3)), IsOk());
  // "other" passed only the message: the transaction is held at its commit.
  ASSERT_THAT(tracker_.Ack("other", Id("0/2000000", 0)), IsOk());
  EXPECT_EQ(tracker_.Confirmable(), L("0/2000000"));
  ASSERT_THAT(tracker_.Ack("other", Id("0/2000000", 3)), IsOk());
  EXPECT_EQ(tracker_.Confirmable(), L("0/2000030"));
}

TEST_F(AckTrackerTest, AckedByAllIsTheSlowestConsumersAck) {
  EXPECT_EQ(tracker_.AckedByAll(), EventId{}) << "no consumer: nothing is processed";
  ASSERT_THAT(tracker_.AddConsumer("fast", EventId{}), IsOk());
  ASSERT_THAT(tracker_.AddConsumer("slow", EventId{}), IsOk());
  Deliver(tracker_, "0/2000000", "0/2000030", 3);
  ASSERT_THAT(tracker_.Ack("fast", Id("0/2000000", 2)), IsOk());
  EXPECT_EQ(tracker_.AckedByAll(), EventId{});
  ASSERT_THAT(tracker_.Ack("slow", Id("0/2000000", 1)), IsOk());
  EXPECT_EQ(tracker_.AckedByAll(), Id("0/2000000", 1));
  ASSERT_THAT(tracker_.RemoveConsumer("slow"), IsOk());
  EXPECT_EQ(tracker_.AckedByAll(), Id("0/2000000", 2));
}

TEST_F(AckTrackerTest, AppendingAfterAnyButTheNewestCommittedTransactionIsRefused) {
  ASSERT_THAT(tracker_.AddConsumer("c", EventId{}), IsOk());
  Deliver(tracker_, "0/2000000", "0/2000030", 1);
  Deliver(tracker_, "0/2000100", "0/2000130", 1);
  EXPECT_THAT(tracker_.OnAppended(L("0/2000000"), 2),
              StatusIs(absl::StatusCode::kFailedPrecondition));
  ASSERT_THAT(tracker_.OnBegin(L("0/2000200")), IsOk());
  EXPECT_THAT(tracker_.OnAppended(L("0/2000200"), 2),
              StatusIs(absl::StatusCode::kFailedPrecondition))
      << "not committed yet";
}

}  // namespace
}  // namespace walfeed::replication

namespace walfeed::replication {
namespace {

// After a restart from a stored position that lags the acks, PostgreSQL re-sends
// transactions every consumer already acked. A status update between such a
// transaction's Begin and its first event must not release it.
TEST(AckTrackerReleaseTest, AnOpenTransactionIsNeverReleased) {
  AckTracker tracker(Lsn(0x1000));
  ASSERT_TRUE(tracker.AddConsumer("c", EventId{Lsn(0x3000), 0}).ok());
  ASSERT_TRUE(tracker.OnBegin(Lsn(0x2000)).ok());
  (void)tracker.Confirmable();
  EXPECT_EQ(tracker.tracked_transactions(), 1u);
  ASSERT_TRUE(tracker.OnEvent(EventId{Lsn(0x2000), 0}).ok());
  (void)tracker.Confirmable();
  ASSERT_TRUE(tracker.OnCommit(Lsn(0x2000), Lsn(0x2030), 1).ok());
  EXPECT_GE(tracker.Confirmable(), Lsn(0x2030));  // Committed and acked: now released.
  EXPECT_EQ(tracker.tracked_transactions(), 0u);
}

}  // namespace
}  // namespace walfeed::replication
