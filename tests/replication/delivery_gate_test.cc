// DeliveryGate: track / deliver / drop, decided from the assembler's output alone.
#include "replication/delivery_gate.h"

#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/testing/status_matchers.h"

namespace walfeed::replication {
namespace {

using ::testing::HasSubstr;
using ::walfeed::testing::IsOk;
using ::walfeed::testing::StatusIs;
using Output = TransactionAssembler::Output;
using Verdict = DeliveryGate::Verdict;

Output Begin(uint64_t commit) { return TransactionBegun{Lsn(commit), 7, 0}; }
Output Event(uint64_t commit, uint32_t index) {
  ChangeEvent event;
  event.id = EventId{Lsn(commit), index};
  return event;
}
Output Commit(uint64_t commit, uint32_t count) {
  return TransactionCommitted{Lsn(commit), Lsn(commit + 0x30), 0, 7, count};
}

// "D" delivered, "T" tracked only, "-" neither, "!" error.
std::string Verdicts(DeliveryGate& gate, const std::vector<Output>& outputs) {
  std::string verdicts;
  for (const Output& output : outputs) {
    absl::StatusOr<Verdict> v = gate.Admit(output);
    if (!v.ok()) return verdicts + "!";
    verdicts += v->deliver ? (v->track ? "D" : "?") : (v->track ? "T" : "-");
  }
  return verdicts;
}

TEST(DeliveryGateTest, AFreshStreamTracksEverythingAndDeliversEventsAndCommits) {
  DeliveryGate gate;
  EXPECT_EQ(Verdicts(gate, {Begin(0x100), Event(0x100, 0), Event(0x100, 1), Commit(0x100, 2)}), "TDDD");
  EXPECT_EQ(gate.last_committed(), Lsn(0x100));
}

TEST(DeliveryGateTest, TransactionDeliveredWholeBeforeAReconnectIsSkippedEntirely) {
  DeliveryGate gate;
  ASSERT_EQ(Verdicts(gate, {Begin(0x100), Event(0x100, 0), Commit(0x100, 1)}), "TDD");
  gate.OnReconnect();
  EXPECT_EQ(Verdicts(gate, {Begin(0x100), Event(0x100, 0), Commit(0x100, 1), Begin(0x200),
                       Event(0x200, 0), Commit(0x200, 1)}),
            "---TDD");
  EXPECT_EQ(gate.counts().redelivered_dropped, 1u);
}

TEST(DeliveryGateTest, PartlyDeliveredTransactionResumesAfterWhatWasDelivered) {
  DeliveryGate gate;
  ASSERT_EQ(Verdicts(gate, {Begin(0x100), Event(0x100, 0), Event(0x100, 1)}), "TDD");
  gate.OnReconnect();
  EXPECT_EQ(Verdicts(gate, {Begin(0x100), Event(0x100, 0), Event(0x100, 1), Event(0x100, 2),
                       Commit(0x100, 3)}),
            "---DD")
      << "the Begin is not tracked twice; events 0 and 1 are repeats";
  EXPECT_EQ(gate.counts().redelivered_dropped, 2u);
}

TEST(DeliveryGateTest, ADifferentTransactionInsteadOfTheResumedOneIsDataLoss) {
  DeliveryGate gate;
  ASSERT_EQ(Verdicts(gate, {Begin(0x100), Event(0x100, 0)}), "TD");
  gate.OnReconnect();
  absl::StatusOr<Verdict> v = gate.Admit(Begin(0x200));
  EXPECT_THAT(v.status(), StatusIs(absl::StatusCode::kDataLoss, HasSubstr("partly delivered")));
}

TEST(DeliveryGateTest, EventsAtOrBelowDeliverAfterAreTrackedNotDelivered) {
  DeliveryGate gate(EventId{Lsn(0x100), 1});
  EXPECT_EQ(Verdicts(gate, {Begin(0x100), Event(0x100, 0), Event(0x100, 1), Event(0x100, 2),
                       Commit(0x100, 3), Begin(0x200), Event(0x200, 0), Commit(0x200, 1)}),
            "TTTDDTDD");
  EXPECT_EQ(gate.counts().below_checkpoint, 2u);
}

TEST(DeliveryGateTest, NonTransactionalMessagesAreCountedOnly) {
  DeliveryGate gate;
  EXPECT_EQ(Verdicts(gate, {NonTransactionalMessage{Lsn(0x50), "p", "c"}}), "-");
  EXPECT_EQ(gate.counts().non_transactional_messages, 1u);
}

TEST(DeliveryGateTest, EventOutsideItsTransactionIsDataLoss) {
  DeliveryGate gate;
  ASSERT_EQ(Verdicts(gate, {Begin(0x100)}), "T");
  EXPECT_THAT(gate.Admit(Event(0x200, 0)).status(),
              StatusIs(absl::StatusCode::kDataLoss, HasSubstr("outside its transaction")));
}

TEST(DeliveryGateTest, TrackOutputFeedsTheTrackerWhatTheGateAdmits) {
  AckTracker tracker(Lsn(0x10));
  ASSERT_THAT(tracker.AddConsumer("c", EventId{}), IsOk());
  DeliveryGate gate;
  for (const Output& output : {Begin(0x100), Event(0x100, 0), Commit(0x100, 1)}) {
    absl::StatusOr<Verdict> v = gate.Admit(output);
    ASSERT_THAT(v.status(), IsOk());
    if (v->track) {
      ASSERT_THAT(TrackOutput(tracker, output), IsOk());
    }
  }
  EXPECT_THAT(tracker.CheckDelivered(EventId{Lsn(0x100), 0}), IsOk());
  ASSERT_THAT(tracker.Ack("c", EventId{Lsn(0x100), 0}), IsOk());
  EXPECT_EQ(tracker.Confirmable(), Lsn(0x130)) << "the acked transaction's end";
}

}  // namespace
}  // namespace walfeed::replication
