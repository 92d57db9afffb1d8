// A single 1,000,000-row transaction through a real StreamReader against
// PostgreSQL 15, proving two things:
//   * walfeed's resident memory stays bounded (peak - baseline < 150 MiB) however
//     large the transaction is, and
//   * the replication connection stays alive throughout (no reconnect, no
//     disconnection), also when the sink stops taking events mid-transaction for
//     more than twice wal_sender_timeout.
//
// Why the ceiling matters: PostgreSQL sends a transaction only once it committed,
// and a bulk load or a backfill commits millions of rows at once. PostgreSQL itself
// spills such a transaction to disk past logical_decoding_work_mem (left at its
// default here, so it does); walfeed must not be the place where it ends up in
// memory instead. The reader is built to hold one event of a transaction
// (TransactionAssembler), one small record per transaction (AckTracker) and what
// libpq has buffered from the socket; if any of them grew with the transaction,
// 1,000,000 rows would cost hundreds of MiB and a larger one would kill the
// process. The sink here keeps only counts and the last event, so whatever grows
// is the reader's.
//
// Memory is read from /proc/self/status: VmRSS sampled from the test thread while
// it waits on the sink (a condition with a deadline, never a sleep), and VmHWM,
// the kernel's exact high-water mark, which catches spikes between samples. The
// high-water mark is reset to the current RSS at the baseline (clear_refs "5")
// so that it measures only the streaming; if the reset is refused, the
// high-water mark is still an upper bound of the streaming peak, only a more
// conservative one.
#include <algorithm>
#include <cstdint>
#include <fstream>
#include <functional>
#include <iostream>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/string_view.h"
#include "absl/strings/strip.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "replication/ack_tracker.h"
#include "replication/pg/stream_reader.h"
#include "tests/testing/pg_cluster.h"
#include "tests/testing/reader_harness.h"
#include "tests/testing/status_matchers.h"
#include "tests/testing/wait.h"

namespace walfeed::replication::pg {
namespace {

using ::walfeed::testing::CollectingSink;
using ::walfeed::testing::IsOk;
using ::walfeed::testing::MemoryConfirmedStore;
using ::walfeed::testing::PgCluster;
using ::walfeed::testing::RunningReader;

constexpr uint32_t kRows = 1000000;
constexpr int64_t kCeilingKib = 150 * 1024;  // 150 MiB.
// One statement, hence one transaction.
constexpr absl::string_view kInsert =
    "INSERT INTO big SELECT g, md5(g::text) FROM generate_series(1, 1000000) g";
constexpr absl::Duration kWalSenderTimeout = absl::Seconds(5);
constexpr absl::Duration kFeedbackInterval = absl::Seconds(1);
// Generous: insert plus streaming took about 9 s on an idle 2-core machine, and can
// take 30-90 s when it is loaded.
constexpr absl::Duration kStreamDeadline = absl::Minutes(5);
constexpr absl::Duration kSlotDeadline = absl::Seconds(60);
// For the Commit once every event arrived (it follows the last event at once).
constexpr absl::Duration kCommitDeadline = absl::Seconds(30);
// How long each wait on the sink lasts between two RSS samples.
constexpr absl::Duration kSampleEvery = absl::Milliseconds(100);

// The "<Key>:  <n> kB" line of /proc/self/status, in KiB; nullopt if absent.
std::optional<int64_t> ProcStatusKib(absl::string_view key) {
  std::ifstream status("/proc/self/status");
  std::string line;
  while (std::getline(status, line)) {
    std::pair<absl::string_view, absl::string_view> kv =
        absl::StrSplit(line, absl::MaxSplits(':', 1));
    if (kv.first != key) continue;
    absl::string_view value = absl::StripAsciiWhitespace(kv.second);
    absl::ConsumeSuffix(&value, "kB");
    int64_t kib = 0;
    if (absl::SimpleAtoi(absl::StripAsciiWhitespace(value), &kib)) return kib;
    return std::nullopt;
  }
  return std::nullopt;
}

int64_t RssKib() { return ProcStatusKib("VmRSS").value_or(-1); }
int64_t HwmKib() { return ProcStatusKib("VmHWM").value_or(-1); }

// Resets VmHWM to the current VmRSS (Linux >= 4.0). False if refused.
bool ResetHighWaterMark() {
  std::ofstream clear_refs("/proc/self/clear_refs");
  clear_refs << "5";
  clear_refs.flush();
  return clear_refs.good();
}

std::string Mib(int64_t kib) { return absl::StrCat(absl::SixDigits(kib / 1024.0), " MiB"); }

// Memory over one phase of a test, from the baseline taken at construction.
class MemoryWatch {
 public:
  MemoryWatch()
      : baseline_rss_(RssKib()), hwm_before_reset_(HwmKib()), hwm_reset_(ResetHighWaterMark()) {
    peak_sampled_ = baseline_rss_;
  }

  void Sample() {
    peak_sampled_ = std::max(peak_sampled_, RssKib());
    ++samples_;
  }

  // Calls `step` (a wait with a short deadline; true when done) and samples RSS after
  // each call, until `step` says done or `timeout` passes. Returns the last step's
  // answer.
  bool SampleUntil(const std::function<bool()>& step, absl::Duration timeout) {
    const absl::Time deadline = absl::Now() + timeout;
    for (;;) {
      const bool done = step();
      Sample();
      if (done) return true;
      if (absl::Now() >= deadline) return false;
    }
  }

  int64_t baseline() const { return baseline_rss_; }
  int64_t peak_sampled() const { return peak_sampled_; }
  // The process's high-water mark now. With the reset it is the exact peak since the
  // baseline; without it, an upper bound of that peak.
  int64_t peak_hwm() const { return HwmKib(); }
  // The streaming peak, the larger (safer) of the two measurements.
  int64_t peak() const { return std::max(peak_sampled_, peak_hwm()); }
  int64_t delta() const { return peak() - baseline_rss_; }

  // Prints the figures and records them as test properties (they land in the XML).
  void Report(absl::string_view phase) const {
    const int64_t hwm = peak_hwm();
    std::cout << "[memory] " << phase << ": baseline VmRSS " << Mib(baseline_rss_)
              << " (VmHWM before reset " << Mib(hwm_before_reset_) << ", reset "
              << (hwm_reset_ ? "done" : "refused") << "); peak sampled VmRSS " << Mib(peak_sampled_)
              << " over " << samples_ << " samples; VmHWM " << Mib(hwm) << "; peak - baseline "
              << Mib(delta()) << " (ceiling " << Mib(kCeilingKib) << ")" << std::endl;
    const std::string prefix(phase);
    ::testing::Test::RecordProperty(prefix + "_baseline_rss_kib", std::to_string(baseline_rss_));
    ::testing::Test::RecordProperty(prefix + "_peak_sampled_rss_kib",
                                    std::to_string(peak_sampled_));
    ::testing::Test::RecordProperty(prefix + "_vmhwm_kib", std::to_string(hwm));
    ::testing::Test::RecordProperty(prefix + "_delta_kib", std::to_string(delta()));
  }

 private:
  const int64_t baseline_rss_;
  const int64_t hwm_before_reset_;
  const bool hwm_reset_;
  int64_t peak_sampled_;
  int samples_ = 0;
};

// A counting sink that also checks, without keeping them, that every event belongs
// to one transaction and arrives in index order.
class CheckingSink : public CollectingSink {
 public:
  CheckingSink() : CollectingSink(/*retain=*/false) {}

  void OnEvent(ChangeEvent event) override ABSL_LOCKS_EXCLUDED(check_mu_) {
    {
      absl::MutexLock lock(&check_mu_);
      if (!first_commit_lsn_) first_commit_lsn_ = event.id.commit_lsn;
      if (event.id.commit_lsn != *first_commit_lsn_) ++other_commit_lsn_;
      if (event.id.index != next_index_) ++out_of_order_;
      next_index_ = event.id.index + 1;
    }
    CollectingSink::OnEvent(std::move(event));
  }

  Lsn first_commit_lsn() const ABSL_LOCKS_EXCLUDED(check_mu_) {
    absl::MutexLock lock(&check_mu_);
    return first_commit_lsn_.value_or(Lsn::kInvalid);
  }
  uint64_t other_commit_lsn() const ABSL_LOCKS_EXCLUDED(check_mu_) {
    absl::MutexLock lock(&check_mu_);
    return other_commit_lsn_;
  }
  uint64_t out_of_order() const ABSL_LOCKS_EXCLUDED(check_mu_) {
    absl::MutexLock lock(&check_mu_);
    return out_of_order_;
  }

 private:
  mutable absl::Mutex check_mu_;
  std::optional<Lsn> first_commit_lsn_ ABSL_GUARDED_BY(check_mu_);
  uint64_t other_commit_lsn_ ABSL_GUARDED_BY(check_mu_) = 0;
  uint64_t out_of_order_ ABSL_GUARDED_BY(check_mu_) = 0;
  uint32_t next_index_ ABSL_GUARDED_BY(check_mu_) = 0;
};

// Runs the big INSERT on its own thread so the test thread can measure meanwhile.
class BackgroundInsert {
 public:
  explicit BackgroundInsert(const PgCluster* pg)
      : thread_([this, pg] {
          absl::Status status = pg->Exec(kInsert);
          absl::MutexLock lock(&mu_);
          status_ = std::move(status);
        }) {}
  ~BackgroundInsert() { (void)Join(); }
  BackgroundInsert(const BackgroundInsert&) = delete;
  BackgroundInsert& operator=(const BackgroundInsert&) = delete;

  absl::Status Join() {
    if (thread_.joinable()) thread_.join();
    absl::MutexLock lock(&mu_);
    return status_;
  }

 private:
  absl::Mutex mu_;
  absl::Status status_ ABSL_GUARDED_BY(mu_);
  std::thread thread_;
};

class LargeTransactionTest : public ::testing::Test {
 protected:
  void SetUp() override {
    PgCluster::Options options;
    // Short enough that a status update held back by the stream would really end the
    // connection. logical_decoding_work_mem stays at its default (64MB), so the
    // walsender spills this transaction to disk.
    options.settings["wal_sender_timeout"] =
        absl::StrCat("'", absl::FormatDuration(kWalSenderTimeout), "'");
    WALFEED_START_PG_OR_SKIP(pg_, options);
    ASSERT_THAT(pg_->Exec("CREATE TABLE big (id int, v text);"
                          "CREATE PUBLICATION pub FOR TABLE big"),
                IsOk());
    // Its own statement: a slot cannot be created in a transaction that wrote.
    ASSERT_THAT(pg_->Exec("SELECT pg_create_logical_replication_slot('s', 'pgoutput')"), IsOk());
  }

  ReaderOptions Options() const {
    ReaderOptions options;
    options.stream_name = "large";
    options.conninfo = pg_->ConnInfo();
    options.slot_name = "s";
    options.publication_names = {"pub"};
    options.max_feedback_interval = kFeedbackInterval;
    options.min_persist_interval = absl::ZeroDuration();
    return options;
  }

  Lsn SlotConfirmed() const {
    return *Lsn::Parse(*pg_->QueryValue(
        "SELECT confirmed_flush_lsn FROM pg_replication_slots WHERE slot_name = 's'"));
  }

  // The pid of the walsender serving the slot; "<NULL>" when none is.
  std::string WalsenderPid() const {
    return pg_->QueryValue("SELECT active_pid FROM pg_replication_slots WHERE slot_name = 's'")
        .value_or("<error>");
  }

  // Transactions the walsender spilled to disk (PostgreSQL's side of the story).
  int64_t SpilledTransactions() const {
    absl::StatusOr<std::string> value =
        pg_->QueryValue("SELECT spill_txns FROM pg_stat_replication_slots WHERE slot_name = 's'");
    int64_t n = -1;
    if (value.ok()) (void)absl::SimpleAtoi(*value, &n);
    return n;
  }

  // The checks shared by both tests once every event arrived: one transaction of
  // kRows events, in order, delivered on one connection; then acking its last event
  // moves the slot past the commit.
  void ExpectWholeTransactionAndAck(CheckingSink& sink, RunningReader& reader,
                                    AckTracker& tracker) {
    EXPECT_EQ(sink.event_count(), kRows);
    EXPECT_EQ(sink.other_commit_lsn(), 0u);
    EXPECT_EQ(sink.out_of_order(), 0u);
    ASSERT_TRUE(sink.WaitForCommits(1, kCommitDeadline));
    const std::vector<TransactionCommitted> commits = sink.commits();
    ASSERT_EQ(commits.size(), 1u);
    const TransactionCommitted& commit = commits[0];
    EXPECT_EQ(commit.event_count, kRows);
    EXPECT_EQ(sink.first_commit_lsn(), commit.commit_lsn);

    const ChangeEvent last = sink.last_event();
    EXPECT_EQ(last.id, (EventId{commit.commit_lsn, kRows - 1}));
    EXPECT_TRUE(last.last_in_transaction);
    EXPECT_EQ(last.transaction_event_count, kRows);
    EXPECT_EQ(last.end_lsn, commit.end_lsn);
    EXPECT_EQ(last.op, ChangeEvent::Op::kInsert);
    ASSERT_EQ(last.new_tuple.columns.size(), 2u);
    EXPECT_EQ(last.new_tuple.columns[0].data, "1000000");
    // md5('1000000'), as the INSERT computed it.
    EXPECT_EQ(last.new_tuple.columns[1].data, "8155bc545f84d9652f1012ef2bdfb6eb");

    const StreamReader::Stats stats = reader.reader().stats();
    EXPECT_EQ(stats.events, kRows);
    EXPECT_EQ(stats.transactions, 1u);
    EXPECT_EQ(stats.reconnects, 0u);
    EXPECT_EQ(stats.redelivered_dropped, 0u);
    EXPECT_EQ(sink.connections(), 1u);
    EXPECT_EQ(sink.disconnections(), 0u);
    std::cout << "[stream] frames " << stats.frames << ", keepalives " << stats.keepalives
              << ", status updates " << stats.status_updates << ", reconnects " << stats.reconnects
              << "; commit " << commit.commit_lsn << " end " << commit.end_lsn << std::endl;

    ASSERT_THAT(tracker.Ack("c", last.id), IsOk());
    EXPECT_TRUE(::walfeed::testing::WaitUntil([&] { return SlotConfirmed() >= commit.end_lsn; },
                                              kSlotDeadline))
        << "slot stayed at " << SlotConfirmed() << ", commit ends at " << commit.end_lsn;
    EXPECT_EQ(reader.reader().stats().reconnects, 0u);
    EXPECT_EQ(sink.disconnections(), 0u);
    EXPECT_THAT(reader.Stop(), IsOk());
  }

  std::unique_ptr<PgCluster> pg_;
};

TEST_F(LargeTransactionTest, MillionRowTransactionStreamsInBoundedMemory) {
  const absl::Time started = absl::Now();
  AckTracker tracker(Lsn::kInvalid);
  ASSERT_THAT(tracker.AddConsumer("c", EventId{}), IsOk());
  CheckingSink sink;
  MemoryConfirmedStore store;
  RunningReader reader(Options(), &tracker, &sink, &store, Lsn::kInvalid);
  ASSERT_TRUE(sink.WaitForConnections(1));
  const std::string walsender = WalsenderPid();
  EXPECT_NE(walsender, "<NULL>");

  MemoryWatch memory;
  ASSERT_GT(memory.baseline(), 0) << "no VmRSS in /proc/self/status";
  ASSERT_GT(memory.peak_hwm(), 0) << "no VmHWM in /proc/self/status";
  const absl::Time insert_started = absl::Now();
  BackgroundInsert insert(pg_.get());
  const bool all_arrived =
      memory.SampleUntil([&] { return sink.WaitForEvents(kRows, kSampleEvery); }, kStreamDeadline);
  const absl::Duration streaming = absl::Now() - insert_started;
  ASSERT_THAT(insert.Join(), IsOk());
  memory.Report("million_rows");
  std::cout << "[time] insert + streaming " << streaming << ", test so far "
            << absl::Now() - started << std::endl;
  RecordProperty("streaming_ms", std::to_string(absl::ToInt64Milliseconds(streaming)));
  ASSERT_TRUE(all_arrived) << "only " << sink.event_count() << " of " << kRows << " events in "
                           << kStreamDeadline << "; reader " << reader.result();

  EXPECT_LT(memory.delta(), kCeilingKib)
      << "resident memory grew by " << Mib(memory.delta()) << " while streaming";
  EXPECT_EQ(WalsenderPid(), walsender);  // The same session served the whole transaction.
  // PostgreSQL held the transaction on disk, not walfeed in memory.
  EXPECT_TRUE(
      ::walfeed::testing::WaitUntil([&] { return SpilledTransactions() >= 1; }, kSlotDeadline))
      << "spill_txns " << SpilledTransactions();
  ExpectWholeTransactionAndAck(sink, reader, tracker);
  std::cout << "[time] whole test " << absl::Now() - started << std::endl;
}

// The sink stops taking events mid-transaction for more than twice
// wal_sender_timeout: the reader stops reading the socket (so the data backs up in
// TCP and the walsender, not here) but keeps sending status updates, so nothing
// reconnects and nothing piles up in this process.
TEST_F(LargeTransactionTest, StallMidTransactionKeepsTheConnectionAndMemoryBounded) {
  const absl::Time started = absl::Now();
  AckTracker tracker(Lsn::kInvalid);
  ASSERT_THAT(tracker.AddConsumer("c", EventId{}), IsOk());
  CheckingSink sink;
  MemoryConfirmedStore store;
  RunningReader reader(Options(), &tracker, &sink, &store, Lsn::kInvalid);
  ASSERT_TRUE(sink.WaitForConnections(1));

  MemoryWatch memory;
  ASSERT_GT(memory.baseline(), 0) << "no VmRSS in /proc/self/status";
  ASSERT_GT(memory.peak_hwm(), 0) << "no VmHWM in /proc/self/status";
  BackgroundInsert insert(pg_.get());
  const bool some_arrived = memory.SampleUntil(
      [&] { return sink.WaitForEvents(kRows / 10, kSampleEvery); }, kStreamDeadline);
  sink.SetRoom(false);
  ASSERT_THAT(insert.Join(), IsOk());
  ASSERT_TRUE(some_arrived) << "only " << sink.event_count() << " events; reader "
                            << reader.result();

  // Hold the stall for more than 2x wal_sender_timeout, counted in status updates
  // sent while no event was taken. The first update after SetRoom(false) marks the
  // start: from then on the loop is not reading.
  const uint64_t first_update = reader.reader().stats().status_updates + 1;
  ASSERT_TRUE(reader.reader().AwaitStats(
      [&](const StreamReader::Stats& s) { return s.status_updates >= first_update; },
      absl::Seconds(30)));
  const uint64_t events_at_stall = reader.reader().stats().events;
  const absl::Time stall_started = absl::Now();
  const std::string walsender = WalsenderPid();
  // Two updates more than 2x the timeout needs: this thread may notice the first
  // update late on a loaded machine, and the clock below starts when it does.
  const int64_t updates_needed =
      absl::Ceil(2 * kWalSenderTimeout, kFeedbackInterval) / kFeedbackInterval + 3;
  const uint64_t target = first_update + static_cast<uint64_t>(updates_needed);
  ASSERT_TRUE(memory.SampleUntil(
      [&] {
        return reader.reader().AwaitStats(
            [&](const StreamReader::Stats& s) { return s.status_updates >= target; }, kSampleEvery);
      },
      absl::Seconds(60)));
  const absl::Duration stalled = absl::Now() - stall_started;
  std::cout << "[stall] " << stalled << " (" << updates_needed << " status updates) at event "
            << events_at_stall << " of " << kRows << std::endl;
  RecordProperty("stall_ms", std::to_string(absl::ToInt64Milliseconds(stalled)));
  EXPECT_GT(stalled, 2 * kWalSenderTimeout);
  EXPECT_EQ(reader.reader().stats().events, events_at_stall);  // Nothing was taken.
  EXPECT_LT(events_at_stall, kRows);                           // Really mid-transaction.
  EXPECT_EQ(reader.reader().stats().reconnects, 0u);
  EXPECT_EQ(sink.disconnections(), 0u);
  EXPECT_NE(walsender, "<NULL>");
  EXPECT_EQ(WalsenderPid(), walsender);  // The server did not time the session out.

  sink.SetRoom(true);
  reader.reader().Wake();
  const bool all_arrived =
      memory.SampleUntil([&] { return sink.WaitForEvents(kRows, kSampleEvery); }, kStreamDeadline);
  memory.Report("stalled_million_rows");
  ASSERT_TRUE(all_arrived) << "only " << sink.event_count() << " of " << kRows << " events; reader "
                           << reader.result();
  EXPECT_LT(memory.delta(), kCeilingKib)
      << "resident memory grew by " << Mib(memory.delta()) << " while streaming";
  ExpectWholeTransactionAndAck(sink, reader, tracker);
  std::cout << "[time] whole test " << absl::Now() - started << std::endl;
}

}  // namespace
}  // namespace walfeed::replication::pg
