// PlanStart / CheckResume: the fail-closed decisions of start_plan.h, as pure
// functions of the stored checkpoint and the slot as PostgreSQL shows it.
#include "replication/start_plan.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/testing/status_matchers.h"

namespace walfeed::replication {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;
using ::walfeed::testing::IsOk;
using ::walfeed::testing::StatusIs;

constexpr uint64_t kCluster = 7300000000000000001ull;
constexpr uint32_t kDatabase = 5;

Lsn L(const char* text) { return *Lsn::Parse(text); }

SlotState Slot(const char* confirmed, const char* wal_status = "reserved") {
  SlotState slot;
  slot.plugin = "pgoutput";
  slot.database_oid = kDatabase;
  slot.confirmed_flush = L(confirmed);
  slot.restart_lsn = L(confirmed);
  slot.wal_status = wal_status;
  return slot;
}

SlotCheck Check(std::optional<SlotState> slot) {
  return SlotCheck{"orders", "walfeed_orders", "walfeed", kCluster, std::move(slot)};
}

StreamCheckpoint Bound(const char* confirmed) {
  StreamCheckpoint stored;
  stored.confirmed_lsn = L(confirmed);
  stored.slot_name = "walfeed_orders";
  stored.slot_identity = SlotIdentity{kCluster, kDatabase, "pgoutput"};
  return stored;
}

TEST(PlanStartTest, NewStreamBindsTheSlotAtItsPosition) {
  absl::StatusOr<StartPlan> plan = PlanStart(Check(Slot("0/1500000")), StreamCheckpoint{});
  ASSERT_THAT(plan, IsOk());
  EXPECT_TRUE(plan->bind);
  EXPECT_EQ(plan->start, L("0/1500000"));
  EXPECT_EQ(plan->identity, (SlotIdentity{kCluster, kDatabase, "pgoutput"}));
  EXPECT_EQ(plan->deliver_after, EventId{});
  EXPECT_TRUE(plan->warnings.empty());
}

TEST(PlanStartTest, NewStreamWithoutSlotSaysHowToCreateIt) {
  EXPECT_THAT(PlanStart(Check(std::nullopt), StreamCheckpoint{}).status(),
              StatusIs(absl::StatusCode::kNotFound,
                       AllOf(HasSubstr("pg_create_logical_replication_slot('walfeed_orders'"),
                             HasSubstr("create_missing"))));
}

TEST(PlanStartTest, BoundStreamStartsFromTheStoredPosition) {
  StreamCheckpoint stored = Bound("0/1600000");
  stored.consumers["a"] = EventId{L("0/1580000"), 3};
  stored.consumers["b"] = EventId{L("0/1590000"), 0};
  absl::StatusOr<StartPlan> plan = PlanStart(Check(Slot("0/1600000")), stored);
  ASSERT_THAT(plan, IsOk());
  EXPECT_FALSE(plan->bind);
  EXPECT_EQ(plan->start, L("0/1600000"));
  EXPECT_EQ(plan->deliver_after, (EventId{L("0/1580000"), 3}));  // The slower consumer.
  EXPECT_EQ(plan->consumers.size(), 2u);
}

// A detached consumer holds nothing: it is planned apart and does not lower
// what is delivered.
TEST(PlanStartTest, DetachedConsumersDoNotLowerTheDeliveryFloor) {
  StreamCheckpoint stored = Bound("0/1600000");
  stored.consumers["slow"] = EventId{L("0/1400000"), 0};
  stored.consumers["fast"] = EventId{L("0/1590000"), 0};
  stored.detached.insert("slow");
  absl::StatusOr<StartPlan> plan = PlanStart(Check(Slot("0/1600000")), stored);
  ASSERT_THAT(plan, IsOk());
  EXPECT_EQ(plan->deliver_after, (EventId{L("0/1590000"), 0}));
  EXPECT_EQ(plan->consumers.size(), 1u);
  EXPECT_EQ(plan->detached.at("slow"), (EventId{L("0/1400000"), 0}));
}

// §4.4: after a PostgreSQL restart the slot may be behind what walfeed confirmed.
// The stored (higher) position is requested and wins.
TEST(PlanStartTest, RegressedSlotStartsFromTheHigherStoredPosition) {
  absl::StatusOr<StartPlan> plan = PlanStart(Check(Slot("0/1500000")), Bound("0/1600000"));
  ASSERT_THAT(plan, IsOk());
  EXPECT_EQ(plan->start, L("0/1600000"));
}

TEST(PlanStartTest, DroppedSlotIsDataLossWithTheRecovery) {
  StreamCheckpoint stored = Bound("0/1600000");
  stored.consumers["a"] = EventId{L("0/1580000"), 3};
  EXPECT_THAT(
      PlanStart(Check(std::nullopt), stored).status(),
      StatusIs(absl::StatusCode::kDataLoss,
               AllOf(HasSubstr("\"walfeed_orders\""), HasSubstr("no longer exists"),
                     HasSubstr("0/1600000"), HasSubstr("0/1580000:3"),
                     HasSubstr("DELETE FROM \"walfeed\".stream_checkpoints WHERE stream = "
                               "'orders'"))));
}

TEST(PlanStartTest, InvalidatedSlotIsDataLoss) {
  EXPECT_THAT(PlanStart(Check(Slot("0/1600000", "lost")), Bound("0/1600000")).status(),
              StatusIs(absl::StatusCode::kDataLoss,
                       AllOf(HasSubstr("wal_status = lost"),
                             HasSubstr("max_slot_wal_keep_size"))));
  // Also for a stream that was never bound.
  EXPECT_THAT(PlanStart(Check(Slot("0/1600000", "lost")), StreamCheckpoint{}).status(),
              StatusIs(absl::StatusCode::kDataLoss));
}

TEST(PlanStartTest, SlotAheadOfTheStoredPositionIsDataLoss) {
  EXPECT_THAT(PlanStart(Check(Slot("0/1700000")), Bound("0/1600000")).status(),
              StatusIs(absl::StatusCode::kDataLoss,
                       AllOf(HasSubstr("0/1700000"), HasSubstr("0/1600000"),
                             HasSubstr("recreated"))));
}

TEST(PlanStartTest, SlotOfAnotherClusterOrDatabaseIsDataLoss) {
  SlotCheck other_cluster = Check(Slot("0/1500000"));
  other_cluster.system_identifier = kCluster + 1;
  EXPECT_THAT(PlanStart(other_cluster, Bound("0/1600000")).status(),
              StatusIs(absl::StatusCode::kDataLoss,
                       AllOf(HasSubstr("recreated"), HasSubstr("consumer checkpoints"))));
  SlotState other_database = Slot("0/1500000");
  other_database.database_oid = kDatabase + 1;
  EXPECT_THAT(PlanStart(Check(other_database), Bound("0/1600000")).status(),
              StatusIs(absl::StatusCode::kDataLoss));
}

TEST(PlanStartTest, ConfiguredSlotNameDifferentFromTheBoundOneIsRefused) {
  SlotCheck check = Check(Slot("0/1600000"));
  check.slot_name = "renamed";
  EXPECT_THAT(PlanStart(check, Bound("0/1600000")).status(),
              StatusIs(absl::StatusCode::kFailedPrecondition,
                       AllOf(HasSubstr("\"renamed\""), HasSubstr("\"walfeed_orders\""))));
}

// An operator who accepted a loss deleted the stream row: the slot is bound as it
// is, and the consumers' old checkpoints are kept (with a warning).
TEST(PlanStartTest, UnboundStreamWithConsumersBindsAndWarns) {
  StreamCheckpoint stored;
  stored.consumers["a"] = EventId{L("0/1580000"), 3};
  absl::StatusOr<StartPlan> plan = PlanStart(Check(Slot("0/1900000")), stored);
  ASSERT_THAT(plan, IsOk());
  EXPECT_TRUE(plan->bind);
  EXPECT_EQ(plan->start, L("0/1900000"));
  ASSERT_EQ(plan->warnings.size(), 1u);
  EXPECT_THAT(plan->warnings[0], HasSubstr("a at 0/1580000:3"));
}

TEST(CheckResumeTest, SameSlotAtOrBehindTheDurablePositionResumes) {
  const SlotIdentity identity{kCluster, kDatabase, "pgoutput"};
  EXPECT_THAT(CheckResume(Check(Slot("0/1600000")), identity, L("0/1600000")), IsOk());
  EXPECT_THAT(CheckResume(Check(Slot("0/1500000")), identity, L("0/1600000")), IsOk());
}

TEST(CheckResumeTest, SlotRecreatedWhileDisconnectedIsDataLoss) {
  const SlotIdentity identity{kCluster, kDatabase, "pgoutput"};
  EXPECT_THAT(CheckResume(Check(Slot("0/1700000")), identity, L("0/1600000")),
              StatusIs(absl::StatusCode::kDataLoss));
  EXPECT_THAT(CheckResume(Check(std::nullopt), identity, L("0/1600000")),
              StatusIs(absl::StatusCode::kDataLoss));
  EXPECT_THAT(CheckResume(Check(Slot("0/1600000", "lost")), identity, L("0/1600000")),
              StatusIs(absl::StatusCode::kDataLoss));
}

// Only the slot's own refusals (checked against a real server in
// stream_start_test) are turned into DataLoss; anything else stays retryable.
TEST(ExplainStartFailureTest, OtherErrorsPassThrough) {
  const absl::Status unrelated = absl::UnavailableError("connection reset");
  EXPECT_EQ(ExplainStartFailure(unrelated, Check(std::nullopt), L("0/1600000")), unrelated);
}

}  // namespace
}  // namespace walfeed::replication
