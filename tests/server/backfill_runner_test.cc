// BackfillRunner without a database: where a backfill resumes after a restart,
// how far it runs ahead of a consumer that does not ack, and what ends it.
// The fake database completes each chunk at its high watermark, as the stream
// would, with the chunk's rows as READ events numbered after a fake commit.
#include "server/backfill/backfill_runner.h"

#include <atomic>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/testing/wait.h"

namespace walfeed::server {
namespace {

using ::testing::ElementsAre;
using ::walfeed::testing::WaitUntil;
using replication::BackfillDatabase;
using replication::BackfillState;
using replication::ChunkRecord;
using replication::Lsn;

// Shared by the fake handles the runner opens: a table of `rows` integer keys.
struct FakeDb {
  absl::Mutex mu;
  int rows = 0;
  std::vector<BackfillDatabase::Loaded> stored;         // What Load returns.
  std::vector<std::vector<std::string>> reads_after;     // `after` of each ReadChunk.
  std::vector<std::pair<std::string, EventId>> dropped;  // DropChunksAfter calls.
  std::vector<BackfillRecord> saved;                     // SaveProgress calls.
  uint64_t next_commit = 0x1000000;
  bool hold_high = false;  // High watermarks never reach the "stream".
  BackfillRunner* runner = nullptr;
};

class FakeHandle : public BackfillDatabase {
 public:
  explicit FakeHandle(FakeDb* db) : db_(db) {}
  absl::StatusOr<replication::BackfillTable> Plan(const std::vector<std::string>&,
                                                  const replication::TableName& table,
                                                  const std::string&) override {
    replication::BackfillTable plan;
    plan.name = table;
    plan.relation = std::make_shared<replication::RelationInfo>();
    plan.key_columns = {"id"};
    plan.key_types = {"integer"};
    return plan;
  }
  absl::StatusOr<std::vector<std::string>> WriteLow(const std::string&) override {
    return std::vector<std::string>{};
  }
  absl::StatusOr<replication::ChunkRows> ReadChunk(const replication::BackfillTable&,
                                                   const std::string&,
                                                   const std::vector<std::string>& after,
                                                   uint32_t limit,
                                                   const std::vector<std::string>&,
                                                   absl::Duration) override {
    absl::MutexLock lock(&db_->mu);
    db_->reads_after.push_back(after);
    int first = 1;
    if (!after.empty()) first = std::stoi(after[0]) + 1;
    replication::ChunkRows chunk;
    for (int k = first; k <= db_->rows && chunk.rows.size() < limit; ++k) {
      chunk.rows.push_back({{{replication::pgoutput::TupleValue::Kind::kText, std::to_string(k)}}});
      chunk.last_key = {std::to_string(k)};
    }
    return chunk;
  }
  absl::Status WriteHigh(const std::string& token) override {
    {
      absl::MutexLock lock(&db_->mu);
      if (db_->hold_high) return absl::OkStatus();
    }
    // The stream delivers the chunk at its high watermark.
    replication::CompletedChunk chunk;
    chunk.token = token;
    size_t rows = 0;
    {
      absl::MutexLock lock(&db_->mu);
      const std::vector<std::string>& after = db_->reads_after.back();
      const int first = after.empty() ? 1 : std::stoi(after[0]) + 1;
      rows = static_cast<size_t>(std::max(0, std::min(db_->rows - first + 1, 10)));
      chunk.high_watermark.commit_lsn = Lsn(db_->next_commit += 0x100);
      chunk.high_watermark.event_count = 1;
    }
    const EventId boundary{chunk.high_watermark.commit_lsn, static_cast<uint32_t>(rows)};
    db_->runner->OnCompleted(chunk, boundary, rows);
    return absl::OkStatus();
  }
  absl::StatusOr<BackfillRecord> Create(BackfillRecord record) override {
    record.id = "1";
    return record;
  }
  absl::Status SaveProgress(const BackfillRecord& record) override {
    absl::MutexLock lock(&db_->mu);
    db_->saved.push_back(record);
    return absl::OkStatus();
  }
  absl::Status AddChunk(const std::string&, const ChunkRecord&) override {
    return absl::OkStatus();
  }
  absl::Status PruneChunks(const std::string&, EventId) override { return absl::OkStatus(); }
  absl::Status DropChunksAfter(const std::string& id, EventId after) override {
    absl::MutexLock lock(&db_->mu);
    db_->dropped.emplace_back(id, after);
    return absl::OkStatus();
  }
  absl::StatusOr<std::vector<Loaded>> Load(const std::string&) override {
    absl::MutexLock lock(&db_->mu);
    return db_->stored;
  }

 private:
  FakeDb* db_;
};

class BackfillRunnerTest : public ::testing::Test {
 protected:
  void Start() {
    runner_ = std::make_unique<BackfillRunner>(
        "s", std::vector<std::string>{"p"},
        [this] { return std::make_unique<FakeHandle>(&db_); }, &windows_,
        BackfillRunner::Hooks{[this] { return generation_.load(); },
                              [this](const std::string&) -> absl::StatusOr<EventId> {
                                if (removed_.load()) return absl::NotFoundError("removed");
                                absl::MutexLock lock(&checkpoint_mu_);
                                return checkpoint_;
                              },
                              [] { return true; }},
        options_);
    db_.runner = runner_.get();
    runner_->Start();
  }
  void TearDown() override {
    if (runner_) runner_->Stop();
  }
  // A running backfill stored with chunks ending at keys 10, 20 and 30.
  void StoreRunning(bool last_final = false) {
    BackfillDatabase::Loaded loaded;
    loaded.record.id = "7";
    loaded.record.stream = "s";
    loaded.record.consumer = "c";
    loaded.record.table = {"public", "t"};
    loaded.record.chunk_rows = 10;
    for (int i = 1; i <= 3; ++i) {
      loaded.chunks.push_back(ChunkRecord{EventId{Lsn(0x100 * i), 10}, {std::to_string(10 * i)},
                                          last_final && i == 3});
    }
    db_.stored.push_back(loaded);
  }
  size_t Reads() {
    absl::MutexLock lock(&db_.mu);
    return db_.reads_after.size();
  }
  void SetCheckpoint(EventId id) {
    absl::MutexLock lock(&checkpoint_mu_);
    checkpoint_ = id;
  }

  FakeDb db_;
  replication::BackfillWindows windows_;
  BackfillOptions options_;
  absl::Mutex checkpoint_mu_;
  EventId checkpoint_;
  std::atomic<bool> removed_{false};
  std::atomic<uint64_t> generation_{1};
  std::unique_ptr<BackfillRunner> runner_;
};

TEST_F(BackfillRunnerTest, ResumesAfterTheNewestChunkTheConsumerAckedWhole) {
  db_.rows = 45;
  StoreRunning();
  SetCheckpoint(EventId{Lsn(0x200), 15});  // Past chunk 2, before chunk 3.
  Start();
  ASSERT_TRUE(WaitUntil([&] { return Reads() >= 1; }, absl::Seconds(10), absl::Milliseconds(1)));
  absl::MutexLock lock(&db_.mu);
  EXPECT_THAT(db_.reads_after[0], ElementsAre("20")) << "chunk 3 is read again";
  ASSERT_EQ(db_.dropped.size(), 1u);
  EXPECT_EQ(db_.dropped[0].second, (EventId{Lsn(0x200), 15})) << "its record goes";
}

TEST_F(BackfillRunnerTest, AFinalChunkAckedBeforeTheRestartIsDone) {
  StoreRunning(/*last_final=*/true);
  SetCheckpoint(EventId{Lsn(0x300), 10});
  Start();
  ASSERT_TRUE(WaitUntil(
      [&] {
        absl::StatusOr<BackfillView> view = runner_->Get("7");
        return view.ok() && view->record.state == BackfillState::kDone;
      },
      absl::Seconds(10), absl::Milliseconds(1)));
  EXPECT_EQ(Reads(), 0u);
}

TEST_F(BackfillRunnerTest, RunsAtMostMaxOutstandingChunksAheadOfTheAcks) {
  db_.rows = 1000;
  Start();
  ASSERT_TRUE(runner_->Begin("c", {"public", "t"}, "", 10).ok());
  ASSERT_TRUE(WaitUntil([&] { return Reads() >= options_.max_outstanding; }, absl::Seconds(10),
                        absl::Milliseconds(1)));
  // Nothing acked: it waits. (The check is bounded by what a second more would
  // have read: hundreds of chunks.)
  EXPECT_FALSE(WaitUntil([&] { return Reads() > options_.max_outstanding; },
                         absl::Milliseconds(300), absl::Milliseconds(5)));
  // Acking everything lets it finish.
  ASSERT_TRUE(WaitUntil(
      [&] {
        SetCheckpoint(EventId{Lsn(0xFFFFFFFFFF), 0});
        absl::StatusOr<BackfillView> view = runner_->Get("1");
        return view.ok() && view->record.state == BackfillState::kDone;
      },
      absl::Seconds(20), absl::Milliseconds(1)));
  absl::StatusOr<BackfillView> view = runner_->Get("1");
  EXPECT_EQ(view->record.rows, 1000u);
  EXPECT_EQ(view->record.chunks, 101u) << "100 full chunks and an empty last one";
}

// Prepared again (a reconnect, a new leader term): the backfills are reloaded
// from their records, and a chunk still waiting for its high watermark is
// forgotten rather than left to hold its window (and rows) forever.
TEST_F(BackfillRunnerTest, AReloadForgetsTheChunkWaitingForItsHighWatermark) {
  db_.rows = 1000;
  db_.hold_high = true;
  StoreRunning();
  Start();
  ASSERT_TRUE(WaitUntil([&] { return Reads() == 1; }, absl::Seconds(10), absl::Milliseconds(1)));
  EXPECT_EQ(windows_.open_windows(), 1u);
  generation_.store(2);
  ASSERT_TRUE(WaitUntil([&] { return Reads() == 2; }, absl::Seconds(10), absl::Milliseconds(1)));
  EXPECT_EQ(windows_.open_windows(), 1u) << "only the reloaded job's chunk";
}

TEST_F(BackfillRunnerTest, ARemovedConsumerCancelsItsBackfill) {
  db_.rows = 1000;
  Start();
  ASSERT_TRUE(runner_->Begin("c", {"public", "t"}, "", 10).ok());
  removed_.store(true);
  ASSERT_TRUE(WaitUntil(
      [&] {
        absl::StatusOr<BackfillView> view = runner_->Get("1");
        return view.ok() && view->record.state == BackfillState::kCancelled;
      },
      absl::Seconds(10), absl::Milliseconds(1)));
  EXPECT_THAT(runner_->Get("1")->record.error, ::testing::HasSubstr("removed"));
}

}  // namespace
}  // namespace walfeed::server
