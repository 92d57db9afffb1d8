// StreamRuntime assembled over a scripted StreamSource and an in-memory
// checkpoint store: start-up states, the ack and removal protocols end to end
// through the group committer, backpressure and failure, with no database.
#include "replication/error_reason.h"
#include "server/stream_runtime.h"

#include <algorithm>
#include <cctype>
#include <deque>
#include <set>

#include "absl/synchronization/mutex.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/server/stream_events.h"
#include "tests/testing/status_matchers.h"
#include "tests/testing/wait.h"

namespace walfeed::server {
namespace {

using ::testing::AllOf;
using ::testing::Contains;
using ::testing::HasSubstr;
using ::testing::SizeIs;
using ::walfeed::testing::FrameIds;
using ::walfeed::testing::Id;
using ::walfeed::testing::InsertInto;
using ::walfeed::testing::IsOk;
using ::walfeed::testing::StatusIs;
using replication::Lsn;

constexpr absl::Duration kDeadline = absl::Seconds(30);

class MemoryCheckpointStore : public replication::CheckpointStore {
 public:
  absl::StatusOr<replication::StreamCheckpoint> Load(absl::string_view) override {
    absl::MutexLock lock(&mu_);
    return stored_;
  }
  absl::Status Commit(absl::string_view, const std::vector<std::pair<std::string, EventId>>& acks,
                      std::optional<Lsn> confirmed) override {
    absl::MutexLock lock(&mu_);
    for (const auto& [consumer, id] : acks) {
      if (id > stored_.consumers[consumer]) stored_.detached.erase(consumer);
      stored_.consumers[consumer] = std::max(stored_.consumers[consumer], id);
    }
    if (confirmed) stored_.confirmed_lsn = std::max(stored_.confirmed_lsn, *confirmed);
    return absl::OkStatus();
  }
  absl::Status RemoveConsumer(absl::string_view, absl::string_view consumer) override {
    absl::MutexLock lock(&mu_);
    stored_.consumers.erase(consumer);
    stored_.detached.erase(consumer);
    return absl::OkStatus();
  }
  absl::Status DetachConsumer(absl::string_view, absl::string_view consumer) override {
    absl::MutexLock lock(&mu_);
    if (stored_.consumers.contains(consumer)) stored_.detached.insert(std::string(consumer));
    return absl::OkStatus();
  }
  absl::Status BindSlot(absl::string_view, absl::string_view, const replication::SlotIdentity&,
                        Lsn) override {
    return absl::OkStatus();
  }
  absl::flat_hash_map<std::string, EventId> consumers() {
    absl::MutexLock lock(&mu_);
    return stored_.consumers;
  }

 private:
  absl::Mutex mu_;
  replication::StreamCheckpoint stored_ ABSL_GUARDED_BY(mu_);
};

// A source whose Prepare fails until allowed and whose reader delivers what the
// test pushes, one transaction at a time, waiting while the sink is full.
class ScriptedSource : public replication::StreamSource {
 public:
  explicit ScriptedSource(MemoryCheckpointStore* store) : committer_(store) {}

  absl::StatusOr<replication::PreparedSource> Prepare() override {
    absl::MutexLock lock(&mu_);
    ++prepares_;
    if (!prepare_error_.ok()) return prepare_error_;
    absl::StatusOr<replication::StreamCheckpoint> stored = committer_.Load("s");
    if (!stored.ok()) return stored.status();
    replication::PreparedSource prepared;
    prepared.plan.start = Lsn(0x10);
    prepared.plan.consumers = stored->consumers;
    return prepared;
  }
  replication::GroupCommitter* committer() override { return &committer_; }

  absl::Status Run(const replication::StartPlan& plan, replication::AckTracker* tracker,
                   replication::StreamSink* sink) override {
    sink->OnConnected(plan.start);
    for (;;) {
      std::pair<uint64_t, uint32_t> txn;
      {
        absl::MutexLock lock(&mu_);
        auto ready = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
          return stopped_ || interrupted_ || !run_error_.ok() || !pending_.empty();
        };
        mu_.Await(absl::Condition(&ready));
        if (stopped_) return absl::OkStatus();
        if (interrupted_) {
          interrupted_ = false;
          return absl::OkStatus();
        }
        if (!run_error_.ok()) return run_error_;
        txn = pending_.front();
        pending_.pop_front();
      }
      const auto [commit, count] = txn;
      (void)tracker->OnBegin(Lsn(commit));
      for (uint32_t i = 0; i < count; ++i) {
        if (!AwaitRoom(sink)) return absl::OkStatus();
        (void)tracker->OnEvent(Id(commit, i));
        sink->OnEvent(InsertInto(Id(commit, i), "t"));
        sink->OnDrained();
      }
      (void)tracker->OnCommit(Lsn(commit), Lsn(commit + 0x28), count);
      replication::TransactionCommitted committed{Lsn(commit), Lsn(commit + 0x28), 0, 1, count};
      sink->OnCommit(committed);
      absl::MutexLock lock(&mu_);
      ++committed_;
      stats_.server_wal_end = Lsn(commit + 0x28);
    }
  }
  void Stop() override {
    absl::MutexLock lock(&mu_);
    stopped_ = true;
  }
  void Interrupt() override {
    absl::MutexLock lock(&mu_);
    interrupted_ = true;
  }
  void Wake() override {
    absl::MutexLock lock(&mu_);
    ++wakes_;
  }
  replication::ReaderStats stats() const override {
    absl::MutexLock lock(&mu_);
    return stats_;
  }
  absl::StatusOr<replication::SlotReport> ReadSlot() override { return replication::SlotReport{}; }
  absl::StatusOr<bool> TryLead() override {
    absl::MutexLock lock(&mu_);
    return leadable_;
  }
  absl::Status CheckLead() override {
    absl::MutexLock lock(&mu_);
    return lead_check_;
  }
  void Resign() override {
    absl::MutexLock lock(&mu_);
    ++resigns_;
  }
  std::string Leader() override {
    absl::MutexLock lock(&mu_);
    return leader_;
  }

  // Whether TryLead succeeds, and the leader it names when not.
  void SetLeadable(bool leadable, std::string leader = "") {
    absl::MutexLock lock(&mu_);
    leadable_ = leadable;
    leader_ = std::move(leader);
  }
  void SetLeadCheck(absl::Status status) {
    absl::MutexLock lock(&mu_);
    lead_check_ = std::move(status);
  }
  int resigns() {
    absl::MutexLock lock(&mu_);
    return resigns_;
  }
  int prepares() {
    absl::MutexLock lock(&mu_);
    return prepares_;
  }

  void SetPrepareError(absl::Status status) {
    absl::MutexLock lock(&mu_);
    prepare_error_ = std::move(status);
  }
  void FailRun(absl::Status status) {
    absl::MutexLock lock(&mu_);
    run_error_ = std::move(status);
  }
  void Push(uint64_t commit, uint32_t count) {
    absl::MutexLock lock(&mu_);
    pending_.emplace_back(commit, count);
  }
  bool AwaitCommitted(int n) {
    absl::MutexLock lock(&mu_);
    auto done = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return committed_ >= n; };
    return mu_.AwaitWithTimeout(absl::Condition(&done), kDeadline);
  }
  bool AwaitPrepares(int n) {
    absl::MutexLock lock(&mu_);
    auto done = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return prepares_ >= n; };
    return mu_.AwaitWithTimeout(absl::Condition(&done), kDeadline);
  }
  int committed() {
    absl::MutexLock lock(&mu_);
    return committed_;
  }

 private:
  // Waits (woken by Wake) until the sink has room; false when stopped.
  bool AwaitRoom(replication::StreamSink* sink) {
    for (;;) {
      // The wakes counted before the check: a Wake() between the check and the
      // wait must end the wait (counted after the check, it was lost, and the
      // source waited for a wake that had come; seen once in CI).
      int seen = 0;
      {
        absl::MutexLock lock(&mu_);
        seen = wakes_;
      }
      if (sink->HasRoom()) return true;
      absl::MutexLock lock(&mu_);
      auto woken = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
        return stopped_ || interrupted_ || wakes_ > seen;
      };
      mu_.Await(absl::Condition(&woken));
      if (stopped_) return false;
      if (interrupted_) {
        interrupted_ = false;
        return false;
      }
    }
  }

  replication::GroupCommitter committer_;
  mutable absl::Mutex mu_;
  absl::Status prepare_error_ ABSL_GUARDED_BY(mu_);
  absl::Status run_error_ ABSL_GUARDED_BY(mu_);
  std::deque<std::pair<uint64_t, uint32_t>> pending_ ABSL_GUARDED_BY(mu_);
  bool stopped_ ABSL_GUARDED_BY(mu_) = false;
  bool interrupted_ ABSL_GUARDED_BY(mu_) = false;
  int wakes_ ABSL_GUARDED_BY(mu_) = 0;
  int prepares_ ABSL_GUARDED_BY(mu_) = 0;
  int committed_ ABSL_GUARDED_BY(mu_) = 0;
  replication::ReaderStats stats_ ABSL_GUARDED_BY(mu_);
  bool leadable_ ABSL_GUARDED_BY(mu_) = true;
  std::string leader_ ABSL_GUARDED_BY(mu_);
  absl::Status lead_check_ ABSL_GUARDED_BY(mu_);
  int resigns_ ABSL_GUARDED_BY(mu_) = 0;
};

class StreamRuntimeTest : public ::testing::Test {
 protected:
  void Start(size_t buffer_bytes = 1 << 20) {
    auto source = std::make_unique<ScriptedSource>(&store_);
    source_ = source.get();
    start_hook_(*source_);
    RuntimeOptions options;
    options.source.config.name = "s";
    options.source.config.slot_name = "slot_s";
    options.buffer_bytes = buffer_bytes;
    options.retry_base = absl::Milliseconds(1);
    options.retry_cap = absl::Milliseconds(5);
    options.lead_poll = absl::Milliseconds(5);
    options.lead_check = absl::Milliseconds(5);
    runtime_ = std::make_unique<StreamRuntime>(std::move(options), std::move(source),
                                               [this](walfeed::v1::StreamState state) {
                                                 absl::MutexLock lock(&mu_);
                                                 states_.push_back(state);
                                               });
    runtime_->Start();
  }
  bool AwaitState(walfeed::v1::StreamState state) {
    absl::MutexLock lock(&mu_);
    auto seen = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
      return !states_.empty() && states_.back() == state;
    };
    return mu_.AwaitWithTimeout(absl::Condition(&seen), kDeadline);
  }
  std::vector<std::string> Frames(const Session& session) {
    std::vector<std::string> ids;
    std::string frame;
    std::optional<absl::Status> end;
    while (runtime_->NextFrame(session, &frame, &end)) {
      for (std::string& id : FrameIds(frame)) ids.push_back(std::move(id));
    }
    return ids;
  }

  std::function<void(ScriptedSource&)> start_hook_ = [](ScriptedSource&) {};
  MemoryCheckpointStore store_;
  ScriptedSource* source_ = nullptr;
  std::unique_ptr<StreamRuntime> runtime_;
  absl::Mutex mu_;
  std::vector<walfeed::v1::StreamState> states_ ABSL_GUARDED_BY(mu_);
};

TEST_F(StreamRuntimeTest, WhileTheSourceCannotStartSubscribeSaysWhyAndStreamingFollows) {
  start_hook_ = [](ScriptedSource& source) {
    source.SetPrepareError(absl::UnavailableError("connection refused"));
  };
  Start();
  ASSERT_TRUE(source_->AwaitPrepares(2));
  EXPECT_THAT(runtime_->Open("a", std::nullopt, {}).status(),
              StatusIs(absl::StatusCode::kUnavailable, HasSubstr("connection refused")));
  EXPECT_EQ(runtime_->Snapshot().state, walfeed::v1::STREAM_STATE_CONNECTING);
  EXPECT_THAT(runtime_->Snapshot().error, HasSubstr("connection refused"));
  EXPECT_THAT(runtime_->Ack("a", "session", Id(0x100, 0)).status(),
              StatusIs(absl::StatusCode::kUnavailable, HasSubstr("connection refused")))
      << "an Ack racing a restart is retryable, never NOT_FOUND";
  source_->SetPrepareError(absl::OkStatus());
  ASSERT_TRUE(AwaitState(walfeed::v1::STREAM_STATE_STREAMING));
  EXPECT_THAT(runtime_->Open("a", std::nullopt, {}).status(), IsOk());
}

TEST_F(StreamRuntimeTest, AStandbyNamesTheActiveInstanceAndStreamsOnceItLeads) {
  start_hook_ = [](ScriptedSource& source) { source.SetLeadable(false, "10.0.0.5:50051"); };
  Start();
  ASSERT_TRUE(AwaitState(walfeed::v1::STREAM_STATE_STANDBY));
  const absl::Status standby = runtime_->Open("a", std::nullopt, {}).status();
  EXPECT_THAT(standby, StatusIs(absl::StatusCode::kUnavailable,
                                AllOf(HasSubstr("standby for stream \"s\""),
                                      HasSubstr("the active instance is 10.0.0.5:50051"))));
  EXPECT_EQ(replication::reason::ReasonOf(standby), "STANDBY");
  EXPECT_THAT(replication::reason::ReasonMetadataOf(standby),
              Contains(::testing::Pair("active", "10.0.0.5:50051")));
  EXPECT_THAT(runtime_->Ack("a", "x", Id(0x100, 0)).status(),
              StatusIs(absl::StatusCode::kUnavailable, HasSubstr("standby")));
  RuntimeSnapshot snapshot = runtime_->Snapshot();
  EXPECT_FALSE(snapshot.leading);
  EXPECT_EQ(snapshot.active, "10.0.0.5:50051");
  EXPECT_EQ(source_->prepares(), 0) << "a standby does not touch the slot";

  source_->SetLeadable(true);
  ASSERT_TRUE(AwaitState(walfeed::v1::STREAM_STATE_STREAMING));
  EXPECT_THAT(runtime_->Open("a", std::nullopt, {}).status(), IsOk());
  snapshot = runtime_->Snapshot();
  EXPECT_TRUE(snapshot.leading);
  EXPECT_EQ(snapshot.active, "");
}

TEST_F(StreamRuntimeTest, LosingTheLeadEndsEverySessionAndDropsWhatWasRead) {
  Start();
  ASSERT_TRUE(AwaitState(walfeed::v1::STREAM_STATE_STREAMING));
  absl::StatusOr<OpenedSession> a = runtime_->Open("a", std::nullopt, {});
  ASSERT_THAT(a.status(), IsOk());
  source_->Push(0x100, 3);
  ASSERT_TRUE(source_->AwaitCommitted(1));
  EXPECT_THAT(Frames(*a->session), SizeIs(3));

  source_->SetLeadable(false, "other:50051");
  source_->SetLeadCheck(absl::UnavailableError("PostgreSQL did not answer within 1.5s"));
  ASSERT_TRUE(AwaitState(walfeed::v1::STREAM_STATE_STANDBY)) << "another instance leads now";
  std::string frame;
  std::optional<absl::Status> end;
  EXPECT_FALSE(runtime_->NextFrame(*a->session, &frame, &end));
  ASSERT_TRUE(end.has_value());
  EXPECT_THAT(*end, StatusIs(absl::StatusCode::kUnavailable,
                             AllOf(HasSubstr("stopped streaming stream \"s\""),
                                   HasSubstr("did not answer"))));
  EXPECT_EQ(replication::reason::ReasonOf(*end), "STREAM_NOT_READY");
  ASSERT_TRUE(walfeed::testing::WaitUntil([&] { return source_->resigns() >= 1; }, kDeadline));
  EXPECT_EQ(runtime_->Snapshot().buffered_events, 0u) << "nothing read is served any more";
  EXPECT_THAT(runtime_->Open("a", std::nullopt, {}).status(),
              StatusIs(absl::StatusCode::kUnavailable, HasSubstr("standby")));

  // Leading again: prepared afresh, from the stored position.
  source_->SetLeadCheck(absl::OkStatus());
  source_->SetLeadable(true);
  ASSERT_TRUE(AwaitState(walfeed::v1::STREAM_STATE_STREAMING));
  EXPECT_EQ(source_->prepares(), 2);
  EXPECT_THAT(runtime_->Open("a", std::nullopt, {}).status(), IsOk());
}

TEST_F(StreamRuntimeTest, ALeadLostWhilePreparingLeavesTheNextRunStreaming) {
  start_hook_ = [](ScriptedSource& source) {
    source.SetPrepareError(absl::UnavailableError("connection refused"));
  };
  Start();
  ASSERT_TRUE(source_->AwaitPrepares(2));
  source_->SetLeadCheck(absl::UnavailableError("lost"));
  ASSERT_TRUE(walfeed::testing::WaitUntil([&] { return source_->resigns() >= 1; }, kDeadline));
  source_->SetLeadCheck(absl::OkStatus());
  source_->SetPrepareError(absl::OkStatus());
  ASSERT_TRUE(AwaitState(walfeed::v1::STREAM_STATE_STREAMING));
  // The run streams: no interrupt meant for an earlier lead ended it.
  absl::StatusOr<OpenedSession> a = runtime_->Open("a", std::nullopt, {});
  ASSERT_THAT(a.status(), IsOk());
  source_->Push(0x100, 2);
  ASSERT_TRUE(source_->AwaitCommitted(1));
  EXPECT_THAT(Frames(*a->session), SizeIs(2));
  EXPECT_EQ(runtime_->Snapshot().state, walfeed::v1::STREAM_STATE_STREAMING);
}

TEST_F(StreamRuntimeTest, AnAckIsStoredBeforeItMovesTheCheckpoint) {
  Start();
  ASSERT_TRUE(AwaitState(walfeed::v1::STREAM_STATE_STREAMING));
  absl::StatusOr<OpenedSession> a = runtime_->Open("a", std::nullopt, {});
  ASSERT_THAT(a.status(), IsOk());
  source_->Push(0x100, 3);
  ASSERT_TRUE(source_->AwaitCommitted(1));
  EXPECT_THAT(Frames(*a->session), SizeIs(3));
  absl::StatusOr<AckOutcome> acked = runtime_->Ack("a", a->session->id(), Id(0x100, 1));
  ASSERT_THAT(acked.status(), IsOk());
  EXPECT_EQ(acked->checkpoint, Id(0x100, 1));
  EXPECT_EQ(store_.consumers().at("a"), Id(0x100, 1));
  EXPECT_THAT(runtime_->Ack("a", a->session->id(), Id(0x200, 0)).status(),
              StatusIs(absl::StatusCode::kOutOfRange));
  EXPECT_THAT(runtime_->Ack("nobody", "x", Id(0x100, 0)).status(),
              StatusIs(absl::StatusCode::kNotFound));
}

TEST_F(StreamRuntimeTest, AFullBufferHoldsTheSourceUntilAnAckMakesRoom) {
  const size_t one = walfeed::testing::Buffered(Id(0x100, 0)).bytes;
  Start(one * 2);
  ASSERT_TRUE(AwaitState(walfeed::v1::STREAM_STATE_STREAMING));
  absl::StatusOr<OpenedSession> a = runtime_->Open("a", std::nullopt, {});
  ASSERT_THAT(a.status(), IsOk());
  source_->Push(0x100, 4);
  std::vector<std::string> seen;
  for (int round = 0; round < 10 && seen.size() < 4; ++round) {
    // Each round: take what is buffered, ack it, which wakes the source.
    ASSERT_TRUE(walfeed::testing::WaitUntil(
        [&] { return runtime_->Snapshot().buffered_events > 0; }, kDeadline));
    for (std::string& id : Frames(*a->session)) seen.push_back(std::move(id));
    // The source checks for room before each event: at most one beyond the bound.
    EXPECT_LT(runtime_->Snapshot().buffered_bytes, one * 3);
    ASSERT_THAT(runtime_->Ack("a", a->session->id(), *EventId::Parse(seen.back())).status(),
                IsOk());
  }
  EXPECT_THAT(seen, SizeIs(4));
  ASSERT_TRUE(source_->AwaitCommitted(1));
}

TEST_F(StreamRuntimeTest, RemovalDeletesTheCheckpointDurablyThenReleasesTheBuffer) {
  Start();
  ASSERT_TRUE(AwaitState(walfeed::v1::STREAM_STATE_STREAMING));
  absl::StatusOr<OpenedSession> a = runtime_->Open("a", std::nullopt, {});
  absl::StatusOr<OpenedSession> b = runtime_->Open("b", std::nullopt, {});
  ASSERT_THAT(a.status(), IsOk());
  ASSERT_THAT(b.status(), IsOk());
  source_->Push(0x100, 2);
  ASSERT_TRUE(source_->AwaitCommitted(1));
  Frames(*a->session);
  Frames(*b->session);
  ASSERT_THAT(runtime_->Ack("a", a->session->id(), Id(0x100, 1)).status(), IsOk());
  ASSERT_THAT(runtime_->Ack("b", b->session->id(), Id(0x100, 0)).status(), IsOk());
  EXPECT_EQ(runtime_->Snapshot().buffered_events, 1u) << "b holds 0x100:1";
  absl::StatusOr<EventId> removed = runtime_->RemoveConsumer("b");
  ASSERT_THAT(removed.status(), IsOk());
  EXPECT_EQ(*removed, Id(0x100, 0));
  EXPECT_FALSE(store_.consumers().contains("b"));
  EXPECT_EQ(runtime_->Snapshot().buffered_events, 0u);
  std::string frame;
  std::optional<absl::Status> end;
  EXPECT_FALSE(runtime_->NextFrame(*b->session, &frame, &end));
  ASSERT_TRUE(end.has_value());
  EXPECT_THAT(*end, StatusIs(absl::StatusCode::kAborted, HasSubstr("removed")));
}

TEST_F(StreamRuntimeTest, ADefiniteSourceErrorFailsTheStreamForEveryone) {
  Start();
  ASSERT_TRUE(AwaitState(walfeed::v1::STREAM_STATE_STREAMING));
  absl::StatusOr<OpenedSession> a = runtime_->Open("a", std::nullopt, {});
  ASSERT_THAT(a.status(), IsOk());
  source_->FailRun(absl::DataLossError("slot was dropped"));
  ASSERT_TRUE(AwaitState(walfeed::v1::STREAM_STATE_FAILED));
  std::string frame;
  std::optional<absl::Status> end;
  while (runtime_->NextFrame(*a->session, &frame, &end)) {
  }
  ASSERT_TRUE(end.has_value());
  EXPECT_THAT(*end, StatusIs(absl::StatusCode::kDataLoss, HasSubstr("slot was dropped")));
  EXPECT_THAT(runtime_->Open("b", std::nullopt, {}).status(),
              StatusIs(absl::StatusCode::kDataLoss));
  EXPECT_THAT(runtime_->Snapshot().error, HasSubstr("slot was dropped"));
}

TEST_F(StreamRuntimeTest, StoredConsumersAreLoadedAtStart) {
  ASSERT_THAT(store_.Commit("s", {{"old", Id(0x80, 2)}}, std::nullopt), IsOk());
  Start();
  ASSERT_TRUE(AwaitState(walfeed::v1::STREAM_STATE_STREAMING));
  const RuntimeSnapshot snapshot = runtime_->Snapshot();
  ASSERT_THAT(snapshot.consumers, SizeIs(1));
  EXPECT_EQ(snapshot.consumers[0].name, "old");
  EXPECT_EQ(snapshot.consumers[0].checkpoint, Id(0x80, 2));
}

TEST_F(StreamRuntimeTest, SessionIdsAre128RandomBits) {
  Start();
  ASSERT_TRUE(AwaitState(walfeed::v1::STREAM_STATE_STREAMING));
  std::set<std::string> ids;
  std::vector<std::shared_ptr<Session>> sessions;
  for (int i = 0; i < 200; ++i) {
    absl::StatusOr<OpenedSession> opened = runtime_->Open("a", std::nullopt, {});
    ASSERT_THAT(opened.status(), IsOk());
    const std::string& id = opened->session->id();
    ASSERT_EQ(id.size(), 32u) << id;
    ASSERT_TRUE(std::all_of(id.begin(), id.end(),
                            [](char c) { return std::isxdigit(static_cast<unsigned char>(c)); }))
        << id;
    ids.insert(id);
    sessions.push_back(opened->session);
  }
  EXPECT_EQ(ids.size(), 200u);
  // Consecutive ids share no common prefix beyond chance (a clock or a counter would).
  EXPECT_NE(sessions[0]->id().substr(0, 8), sessions[1]->id().substr(0, 8));
  for (const auto& session : sessions) runtime_->Close(session);
}

}  // namespace
}  // namespace walfeed::server
