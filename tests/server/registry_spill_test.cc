// ConsumerRegistry's disk tier with a real SpillLog: a stopped consumer's
// backlog moves to disk while a fast one keeps flowing, the stopped one catches
// up from disk in order, acks free the disk, a full budget holds the stream,
// and a damaged spill is reported, never served.
#include <filesystem>
#include <fstream>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "server/consumer_registry.h"
#include "tests/server/stream_events.h"
#include "tests/testing/status_matchers.h"

namespace walfeed::server {
namespace {

using ::walfeed::testing::Buffered;
using ::walfeed::testing::FrameIds;
using ::walfeed::testing::Id;
using ::walfeed::testing::IsOk;
using ::walfeed::testing::StatusIs;

class RegistrySpillTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char pattern[] = "/tmp/walfeed-registry-spill-XXXXXX";
    ASSERT_NE(::mkdtemp(pattern), nullptr);
    root_ = pattern;
    event_bytes_ = Buffered(Id(0x100, 0)).bytes;
  }
  void TearDown() override { std::filesystem::remove_all(root_); }

  // A registry keeping about ten events in memory and `retention` on disk.
  std::unique_ptr<ConsumerRegistry> Make(uint64_t retention) {
    absl::StatusOr<std::unique_ptr<spill::SpillLog>> log =
        spill::SpillLog::Open({root_ + "/stream-s", 4096});
    EXPECT_THAT(log.status(), IsOk());
    spill_ = std::move(*log);
    ConsumerRegistry::Options options{
        "s", "slot_s", 10 * event_bytes_,
        [] { return absl::UnavailableError("connecting"); },
        [] { return replication::Lsn(0x9000); },
        [this] { return absl::StrCat("session-", ++sessions_); },
        spill_.get(), retention, [this] { ++disk_wanted_; }, nullptr};
    auto registry = std::make_unique<ConsumerRegistry>(std::move(options));
    registry->Load(&tracker_, {}, EventId{});
    return registry;
  }
  // The reader thread's side: one single-event transaction per commit, asking
  // for room first and spilling when memory is full. False when it must wait.
  bool Feed(ConsumerRegistry& registry, uint64_t commit) {
    if (!registry.HasRoom()) {
      EXPECT_THAT(registry.SpillOverflow(), IsOk());
      if (!registry.HasRoom()) return false;
    }
    EXPECT_THAT(tracker_.OnBegin(replication::Lsn(commit)), IsOk());
    EXPECT_THAT(tracker_.OnEvent(Id(commit, 0)), IsOk());
    EXPECT_THAT(registry.Append(Buffered(Id(commit, 0))), IsOk());
    EXPECT_THAT(tracker_.OnCommit(replication::Lsn(commit), replication::Lsn(commit + 8), 1),
                IsOk());
    return true;
  }
  // What the session can be sent now, performing the disk reads it asks for
  // (the RetentionWorker's part). Returns the ids; `*damage` gets a failed read.
  std::vector<std::string> Drain(ConsumerRegistry& registry, const Session& session,
                                 absl::Status* damage = nullptr) {
    std::vector<std::string> ids;
    std::string frame;
    std::optional<absl::Status> end;
    for (;;) {
      if (registry.NextFrame(session, kNow, &frame, &end)) {
        for (std::string& id : FrameIds(frame)) ids.push_back(std::move(id));
        continue;
      }
      std::vector<ConsumerRegistry::DiskRequest> requests = registry.TakeDiskRequests();
      if (requests.empty()) return ids;
      for (const ConsumerRegistry::DiskRequest& request : requests) {
        SessionList wake;
        absl::Status served = registry.FinishDiskRead(
            request, spill_->ReadAfter(request.read_after, request.max_bytes), &wake);
        if (!served.ok()) {
          if (damage != nullptr) *damage = served;
          return ids;
        }
      }
    }
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
  // "fast" and "slow" subscribe, receive a first event and ack it: both have a
  // durable checkpoint, so nothing either has not acked is dropped.
  std::pair<OpenedSession, OpenedSession> FastAndSlow(ConsumerRegistry& registry) {
    absl::StatusOr<OpenedSession> fast = registry.Open("fast", std::nullopt, Unwindowed());
    absl::StatusOr<OpenedSession> slow = registry.Open("slow", std::nullopt, Unwindowed());
    EXPECT_THAT(fast.status(), IsOk());
    EXPECT_THAT(slow.status(), IsOk());
    EXPECT_TRUE(Feed(registry, 0x100));
    for (const OpenedSession* opened : {&*fast, &*slow}) {
      Drain(registry, *opened->session);
      EXPECT_THAT(Ack(registry, *opened, Id(0x100, 0)), IsOk());
    }
    return {*fast, *slow};
  }
  // Single-event transactions from `commit` on, `fast` receiving and acking as
  // they come, until the reader must wait. Returns how many were fed.
  uint64_t FeedUntilFull(ConsumerRegistry& registry, const OpenedSession& fast, uint64_t commit) {
    uint64_t fed = 0;
    while (fed < 1000 && Feed(registry, commit + 16 * fed)) {
      ++fed;
      std::vector<std::string> ids = Drain(registry, *fast.session);
      if (!ids.empty()) {
        EXPECT_THAT(Ack(registry, fast, *EventId::Parse(ids.back())), IsOk());
      }
    }
    EXPECT_LT(fed, 1000u) << "memory and disk never filled";
    return fed;
  }
  static SessionOptions Unwindowed() {
    SessionOptions options;
    options.limits.max_unacked_events = 1 << 20;
    options.limits.max_unacked_bytes = uint64_t{1} << 30;
    return options;
  }

  std::string root_;
  size_t event_bytes_ = 0;
  std::unique_ptr<spill::SpillLog> spill_;
  const absl::Time kNow = absl::Now();
  int sessions_ = 0;
  int disk_wanted_ = 0;
  replication::AckTracker tracker_{replication::Lsn(0x10)};
};

TEST_F(RegistrySpillTest, AStoppedConsumersBacklogSpillsWhileAFastOneFlows) {
  std::unique_ptr<ConsumerRegistry> registry = Make(uint64_t{1} << 30);
  absl::StatusOr<OpenedSession> fast = registry->Open("fast", std::nullopt, Unwindowed());
  absl::StatusOr<OpenedSession> slow = registry->Open("slow", std::nullopt, Unwindowed());
  ASSERT_THAT(fast.status(), IsOk());
  ASSERT_THAT(slow.status(), IsOk());
  // Both ack once, so each has a durable checkpoint (nothing is dropped before).
  ASSERT_TRUE(Feed(*registry, 0x100));
  ASSERT_EQ(Drain(*registry, *fast->session).size(), 1u);
  ASSERT_EQ(Drain(*registry, *slow->session).size(), 1u);
  ASSERT_THAT(Ack(*registry, *fast, Id(0x100, 0)), IsOk());
  ASSERT_THAT(Ack(*registry, *slow, Id(0x100, 0)), IsOk());

  size_t fast_received = 0;
  size_t peak_memory = 0;
  for (uint64_t i = 1; i <= 500; ++i) {
    ASSERT_TRUE(Feed(*registry, 0x100 + 16 * i)) << "the fast consumer must never wait, at " << i;
    std::vector<std::string> ids = Drain(*registry, *fast->session);
    fast_received += ids.size();
    if (!ids.empty()) {
      ASSERT_THAT(Ack(*registry, *fast, *EventId::Parse(ids.back())), IsOk());
    }
    peak_memory = std::max(peak_memory, registry->Snapshot().buffered_bytes);
  }
  EXPECT_EQ(fast_received, 500u);
  const RegistrySnapshot held = registry->Snapshot();
  EXPECT_LE(peak_memory, 11 * event_bytes_) << "memory stays within buffer_bytes (+1 event)";
  EXPECT_GT(held.spilled_bytes, 0u);
  absl::StatusOr<std::vector<BufferedEvent>> on_disk = spill_->ReadAfter(Id(0x100, 0), 1 << 30);
  ASSERT_THAT(on_disk.status(), IsOk());
  EXPECT_EQ(on_disk->size() + held.buffered_events, 500u) << "the backlog is on disk";
  EXPECT_TRUE(held.held_by.empty()) << "nothing holds the stream while the disk has room";
  EXPECT_EQ(disk_wanted_, 0) << "the fast consumer never needed the disk";

  // The stopped consumer catches up: from disk, then memory, in order, whole.
  std::vector<std::string> caught_up = Drain(*registry, *slow->session);
  ASSERT_EQ(caught_up.size(), 500u);
  for (uint64_t i = 1; i <= 500; ++i) {
    ASSERT_EQ(caught_up[i - 1], Id(0x100 + 16 * i, 0).ToString());
  }
  EXPECT_GT(disk_wanted_, 0);
  ASSERT_THAT(Ack(*registry, *slow, *EventId::Parse(caught_up.back())), IsOk());
  EXPECT_EQ(registry->Snapshot().spilled_bytes, 0u) << "acked by all: the disk is freed";
}

TEST_F(RegistrySpillTest, TheReaderWaitsForTheLeadingSessionRatherThanSpillAhead) {
  std::unique_ptr<ConsumerRegistry> registry = Make(uint64_t{1} << 30);
  absl::StatusOr<OpenedSession> reader = registry->Open("only", std::nullopt, Unwindowed());
  ASSERT_TRUE(Feed(*registry, 0x100));
  Drain(*registry, *reader->session);
  ASSERT_THAT(Ack(*registry, *reader, Id(0x100, 0)), IsOk());
  // The one session reads nothing while memory fills: spilling would only
  // make it read everything back from disk, so the reader waits.
  uint64_t fed = 0;
  while (Feed(*registry, 0x200 + 16 * fed)) ++fed;
  EXPECT_EQ(registry->Snapshot().spilled_bytes, 0u);
  EXPECT_TRUE(registry->Snapshot().held_by.empty()) << "waiting for a reader is not a hold";
  // Once the session has read past the oldest events (not acked yet), the
  // reader is woken and those spill.
  std::string frame;
  std::optional<absl::Status> end;
  bool wake = false;
  while (!wake && registry->NextFrame(*reader->session, kNow, &frame, &end, &wake)) {
  }
  EXPECT_TRUE(wake);
  ASSERT_THAT(registry->SpillOverflow(), IsOk());
  EXPECT_GT(registry->Snapshot().spilled_bytes, 0u);
  EXPECT_TRUE(Feed(*registry, 0x200 + 16 * fed)) << "and the reader has room again";
}

TEST_F(RegistrySpillTest, AFullBudgetHoldsTheStreamAndNamesTheLaggard) {
  std::unique_ptr<ConsumerRegistry> registry = Make(/*retention=*/20 * event_bytes_);
  const auto [fast, slow] = FastAndSlow(*registry);
  const uint64_t fed = FeedUntilFull(*registry, fast, 0x200);
  const RegistrySnapshot snapshot = registry->Snapshot();
  EXPECT_EQ(snapshot.held_by, "slow");
  EXPECT_LE(snapshot.spilled_bytes, 20 * event_bytes_);
  EXPECT_GE(fed, 25u) << "memory and disk both filled first";
  // The laggard acks what it has: the stream has room again.
  std::vector<std::string> ids = Drain(*registry, *slow.session);
  ASSERT_EQ(ids.size(), fed);
  ASSERT_THAT(Ack(*registry, slow, *EventId::Parse(ids.back())), IsOk());
  EXPECT_TRUE(Feed(*registry, 0x200 + 16 * fed));
}

TEST_F(RegistrySpillTest, DetachingTheLaggardFreesTheStreamUntilAResetReattachesIt) {
  std::unique_ptr<ConsumerRegistry> registry = Make(/*retention=*/20 * event_bytes_);
  const auto [fast, slow] = FastAndSlow(*registry);
  EXPECT_EQ(registry->LaggardToDetach(absl::Now()), std::nullopt) << "nothing is full yet";
  const uint64_t fed = FeedUntilFull(*registry, fast, 0x200);
  ASSERT_EQ(registry->LaggardToDetach(absl::Now()), "slow");

  SessionList ended;
  absl::StatusOr<bool> durable = registry->BeginDetach("slow", &ended);
  ASSERT_THAT(durable.status(), IsOk());
  EXPECT_TRUE(*durable) << "it has a checkpoint: the mark must be stored";
  ASSERT_EQ(ended.size(), 1u);
  std::string frame;
  std::optional<absl::Status> end;
  registry->NextFrame(*slow.session, kNow, &frame, &end);
  ASSERT_TRUE(end.has_value());
  EXPECT_THAT(*end, StatusIs(absl::StatusCode::kFailedPrecondition));
  SessionList wake;
  registry->FinishDetach("slow", &wake);
  EXPECT_TRUE(Feed(*registry, 0x200 + 16 * fed)) << "the stream has room again";
  EXPECT_EQ(registry->Snapshot().spilled_bytes, 0u) << "what only slow needed is dropped";

  absl::StatusOr<OpenedSession> refused = registry->Open("slow", std::nullopt, Unwindowed());
  EXPECT_THAT(refused.status(), StatusIs(absl::StatusCode::kFailedPrecondition));
  EXPECT_THAT(std::string(refused.status().message()),
              ::testing::AllOf(::testing::HasSubstr("0/100:0"),
                               ::testing::HasSubstr("walfeed reset-consumer --stream s "
                                                    "--consumer slow --to-head --yes")));
  const RegistrySnapshot snapshot = registry->Snapshot();
  ASSERT_EQ(snapshot.consumers.size(), 2u);
  EXPECT_TRUE(snapshot.consumers[1].detached);

  // A reset to the head re-attaches it, from BeginReset on: events that arrive
  // and that the fast consumer acks while the reset is being stored stay held
  // for it.
  absl::StatusOr<ConsumerRegistry::ResetTicket> reset = registry->BeginReset("slow", std::nullopt);
  ASSERT_THAT(reset.status(), IsOk());
  EXPECT_TRUE(reset->detached);
  EXPECT_GT(reset->target, reset->previous);
  EXPECT_FALSE(registry->Snapshot().consumers[1].detached);
  for (uint64_t i = 1; i <= 3; ++i) {
    ASSERT_TRUE(Feed(*registry, 0x9000 + 16 * i));
    std::vector<std::string> ids = Drain(*registry, *fast.session);
    ASSERT_FALSE(ids.empty());
    ASSERT_THAT(Ack(*registry, fast, *EventId::Parse(ids.back())), IsOk());
  }
  registry->FinishReset("slow", reset->target, &wake);
  absl::StatusOr<OpenedSession> back = registry->Open("slow", std::nullopt, Unwindowed());
  ASSERT_THAT(back.status(), IsOk());
  EXPECT_EQ(Drain(*registry, *back->session),
            (std::vector<std::string>{Id(0x9010, 0).ToString(), Id(0x9020, 0).ToString(),
                                      Id(0x9030, 0).ToString()}));
}

// A session that starts at a checkpoint while a newer ack of the same consumer
// is being stored: once that ack lands, the session's cursor is below what is
// held at all. It reads on from memory (no disk read for events nobody needs).
TEST_F(RegistrySpillTest, ASessionBelowTheFloorReadsOnFromMemory) {
  std::unique_ptr<ConsumerRegistry> registry = Make(uint64_t{1} << 30);
  absl::StatusOr<OpenedSession> first = registry->Open("c", std::nullopt, Unwindowed());
  for (uint64_t i = 0; i < 5; ++i) ASSERT_TRUE(Feed(*registry, 0x100 + 16 * i));
  ASSERT_EQ(Drain(*registry, *first->session).size(), 5u);
  ASSERT_THAT(Ack(*registry, *first, Id(0x100, 0)), IsOk());
  absl::StatusOr<ConsumerRegistry::AckTicket> ticket =
      registry->BeginAck("c", first->session->id(), Id(0x130, 0));
  ASSERT_THAT(ticket.status(), IsOk());
  absl::StatusOr<OpenedSession> second = registry->Open("c", std::nullopt, Unwindowed());
  ASSERT_THAT(second.status(), IsOk());
  EXPECT_EQ(second->start_after, Id(0x100, 0));
  ASSERT_THAT(tracker_.Ack("c", Id(0x130, 0)), IsOk());
  SessionList wake;
  registry->FinishAck("c", Id(0x130, 0), &wake);
  ASSERT_TRUE(Feed(*registry, 0x200));
  EXPECT_EQ(Drain(*registry, *second->session),
            (std::vector<std::string>{Id(0x140, 0).ToString(), Id(0x200, 0).ToString()}));
  EXPECT_TRUE(registry->TakeDiskRequests().empty());
  EXPECT_EQ(disk_wanted_, 0);
}

TEST_F(RegistrySpillTest, ADamagedSpillIsReportedNeverServed) {
  std::unique_ptr<ConsumerRegistry> registry = Make(uint64_t{1} << 30);
  const auto [fast, slow] = FastAndSlow(*registry);
  for (uint64_t i = 1; i <= 100; ++i) {
    ASSERT_TRUE(Feed(*registry, 0x100 + 16 * i));
    std::vector<std::string> ids = Drain(*registry, *fast.session);
    if (!ids.empty()) {
      ASSERT_THAT(Ack(*registry, fast, *EventId::Parse(ids.back())), IsOk());
    }
  }
  ASSERT_GT(spill_->bytes(), 0u);
  for (const auto& entry : std::filesystem::directory_iterator(root_ + "/stream-s")) {
    std::fstream file(entry.path(), std::ios::in | std::ios::out | std::ios::binary);
    file.seekp(40);
    file.put('\x7f');
  }
  absl::Status damage;
  std::vector<std::string> ids = Drain(*registry, *slow.session, &damage);
  EXPECT_THAT(damage, StatusIs(absl::StatusCode::kDataLoss));
  for (size_t i = 0; i < ids.size(); ++i) {
    EXPECT_EQ(ids[i], Id(0x100 + 16 * (i + 1), 0).ToString()) << "what was served is intact";
  }
  EXPECT_LT(ids.size(), 100u);
}

}  // namespace
}  // namespace walfeed::server
