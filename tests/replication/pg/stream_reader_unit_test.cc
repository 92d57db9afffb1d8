// StreamReader's decisions on recorded frames in simulated time: no database, no
// sleeps. The frames are the golden capture of a real PostgreSQL 15
// (tests/golden/pg15_text.hex); the walsender around them is FakeOpener.
// stream_reader_test.cc proves the same loop against a live server.
#include <algorithm>
#include <cstdint>
#include <functional>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "replication/copy_data.h"
#include "replication/pg/stream_reader.h"
#include "replication/pgoutput.h"
#include "replication/sql_text.h"
#include "replication/transaction_assembler.h"
#include "tests/testing/fake_replication.h"
#include "tests/testing/pgoutput_encoder.h"
#include "tests/testing/status_matchers.h"

namespace walfeed::replication::pg {
namespace {

using ::testing::AllOf;
using ::testing::ElementsAreArray;
using ::testing::Each;
using ::testing::Ge;
using ::testing::HasSubstr;
using ::testing::IsEmpty;
using ::testing::Not;
using ::testing::SizeIs;
using ::walfeed::testing::FakeClock;
using ::walfeed::testing::FakeLog;
using ::walfeed::testing::FakeOpener;
using ::walfeed::testing::IsOk;
using ::walfeed::testing::Script;
using ::walfeed::testing::SentUpdate;
using ::walfeed::testing::StatusIs;
using Frames = std::vector<std::vector<uint8_t>>;

const Frames& Golden() {
  static const Frames* frames = [] {
    absl::StatusOr<Frames> loaded =
        walfeed::testing::LoadGoldenFrames(WALFEED_GOLDEN_DIR "/pg15_text.hex");
    return new Frames(loaded.ok() ? *loaded : Frames{});
  }();
  return *frames;
}

// The pgoutput tag of an XLogData frame ('B', 'I', 'C', ...), or 'k'.
char Tag(const std::vector<uint8_t>& frame) {
  return frame[0] == 'w' ? static_cast<char>(frame[25]) : static_cast<char>(frame[0]);
}

// `frame` as the walsender would send it 1 ms after its transaction's commit:
// a Begin's send time (XLogData header, bytes 17-24) set to its commit time
// (payload bytes 9-16) plus 1 ms. The capture's own were sent later, as a
// walsender behind its writers sends them. Other frames are returned as they are.
std::vector<uint8_t> SentPromptly(std::vector<uint8_t> frame) {
  if (Tag(frame) != 'B' || frame.size() < 25 + 17) return frame;
  uint64_t commit = 0;
  for (int i = 0; i < 8; ++i) commit = (commit << 8) | frame[25 + 9 + i];
  uint64_t sent = commit + 1000;
  for (int i = 7; i >= 0; --i, sent >>= 8) frame[17 + i] = static_cast<uint8_t>(sent & 0xff);
  return frame;
}

// What one uninterrupted pass of the assembler makes of `frames`: the ids the
// reader must deliver, in order, and the number of transactions.
struct Expected {
  std::vector<EventId> ids;
  size_t transactions = 0;
};
Expected Assemble(const Frames& frames) {
  Expected expected;
  TransactionAssembler assembler;
  for (const auto& frame : frames) {
    absl::StatusOr<copy_data::ServerMessage> message = copy_data::Decode(frame);
    const auto* data = message.ok() ? absl::get_if<copy_data::XLogData>(&*message) : nullptr;
    if (data == nullptr) continue;
    absl::StatusOr<pgoutput::Message> decoded = pgoutput::Decode(data->payload, {});
    std::vector<TransactionAssembler::Output> out;
    if (!decoded.ok() || !assembler.Process(std::move(*decoded), &out).ok()) return {};
    for (const auto& output : out) {
      if (const auto* event = absl::get_if<ChangeEvent>(&output)) expected.ids.push_back(event->id);
      if (absl::holds_alternative<TransactionCommitted>(output)) ++expected.transactions;
    }
  }
  return expected;
}

// Records what the reader hands over and the simulated time it arrived at.
class RecordingSink : public StreamSink {
 public:
  explicit RecordingSink(const FakeClock* clock) : clock_(clock) {}
  bool HasRoom() override {
    absl::MutexLock lock(&mu_);
    return room_;
  }
  void OnEvent(ChangeEvent event) override {
    absl::MutexLock lock(&mu_);
    ids_.push_back(event.id);
    times_.push_back(clock_->Now());
  }
  void OnCommit(const TransactionCommitted& commit) override {
    absl::MutexLock lock(&mu_);
    commits_.push_back(commit);
  }
  void OnDisconnected(const absl::Status& why) override {
    absl::MutexLock lock(&mu_);
    disconnects_.push_back(std::string(why.message()));
  }
  void OnDrained() override {
    if (on_drained) on_drained();
  }
  // Called on the reader's thread at the end of each turn; set before Run.
  std::function<void()> on_drained;
  std::vector<std::string> disconnects() const {
    absl::MutexLock lock(&mu_);
    return disconnects_;
  }
  void SetRoom(bool room) {
    absl::MutexLock lock(&mu_);
    room_ = room;
  }
  std::vector<EventId> ids() const {
    absl::MutexLock lock(&mu_);
    return ids_;
  }
  std::vector<absl::Time> times() const {
    absl::MutexLock lock(&mu_);
    return times_;
  }
  std::vector<TransactionCommitted> commits() const {
    absl::MutexLock lock(&mu_);
    return commits_;
  }

 private:
  const FakeClock* const clock_;
  mutable absl::Mutex mu_;
  bool room_ ABSL_GUARDED_BY(mu_) = true;
  std::vector<std::string> disconnects_ ABSL_GUARDED_BY(mu_);
  std::vector<EventId> ids_ ABSL_GUARDED_BY(mu_);
  std::vector<absl::Time> times_ ABSL_GUARDED_BY(mu_);
  std::vector<TransactionCommitted> commits_ ABSL_GUARDED_BY(mu_);
};

class MemoryStore : public ConfirmedLsnStore {
 public:
  absl::Status PersistConfirmed(Lsn lsn) override {
    absl::MutexLock lock(&mu_);
    ++writes_;
    stored_ = std::max(stored_, lsn);
    return absl::OkStatus();
  }
  Lsn stored() const {
    absl::MutexLock lock(&mu_);
    return stored_;
  }
  int writes() const {
    absl::MutexLock lock(&mu_);
    return writes_;
  }
  absl::Status Ping() override {
    absl::MutexLock lock(&mu_);
    ++pings_;
    return ping_result_;
  }
  void SetPingResult(absl::Status result) {
    absl::MutexLock lock(&mu_);
    ping_result_ = std::move(result);
  }
  int pings() const {
    absl::MutexLock lock(&mu_);
    return pings_;
  }

 private:
  mutable absl::Mutex mu_;
  Lsn stored_ ABSL_GUARDED_BY(mu_);
  int writes_ ABSL_GUARDED_BY(mu_) = 0;
  int pings_ ABSL_GUARDED_BY(mu_) = 0;
  absl::Status ping_result_ ABSL_GUARDED_BY(mu_);
};

// A store error as libpq reports it: code, message and SQLSTATE.
absl::Status StoreError(absl::string_view sqlstate, absl::string_view message) {
  absl::Status status = absl::UnavailableError(message);
  SetSqlState(status, sqlstate);
  return status;
}

class StreamReaderUnitTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_FALSE(Golden().empty()) << "tests/golden/pg15_text.hex did not load";
    expected_ = Assemble(Golden());
    ASSERT_GT(expected_.ids.size(), 10u);
    options_.stream_name = "unit";
    options_.slot_name = "unit_slot";
    options_.min_persist_interval = absl::ZeroDuration();
    options_.backoff_base = absl::Milliseconds(1);
    options_.backoff_cap = absl::Milliseconds(1);
    options_.read_coalesce = absl::ZeroDuration();
  }

  // Runs a reader over `sessions` until `stop_when(update)` says so (checked after
  // every status update) or the script ends; returns Run's status.
  absl::Status Run(std::vector<Script> sessions,
                   std::function<bool(const SentUpdate&)> stop_when = nullptr) {
    log_ = std::make_shared<FakeLog>();
    reader_ = std::make_unique<StreamReader>(
        options_, std::make_unique<FakeOpener>(&clock_, std::move(sessions), log_), &clock_,
        &tracker_, &sink_, &store_);
    if (stop_when) {
      log_->on_update = [this, stop_when](const SentUpdate& update) {
        if (stop_when(update)) reader_->Stop();
      };
    }
    return reader_->Run(Lsn());
  }

  // Stops once every transaction of the capture reached the sink.
  std::function<bool(const SentUpdate&)> AllCommitted() {
    return [this](const SentUpdate&) { return sink_.commits().size() >= expected_.transactions; };
  }

  Expected expected_;
  ReaderOptions options_;
  FakeClock clock_;
  AckTracker tracker_{Lsn()};
  RecordingSink sink_{&clock_};
  MemoryStore store_;
  std::shared_ptr<FakeLog> log_;
  std::unique_ptr<StreamReader> reader_;
};

TEST_F(StreamReaderUnitTest, DeliversARecordedStreamWithTheAssemblersIds) {
  ASSERT_THAT(Run({Script().Frames(Golden())}, AllCommitted()), IsOk());
  EXPECT_THAT(sink_.ids(), ElementsAreArray(expected_.ids));
  EXPECT_EQ(reader_->stats().events, expected_.ids.size());
  EXPECT_EQ(reader_->stats().transactions, expected_.transactions);
  EXPECT_EQ(log_->finished(), 1) << "a stop ends the copy cleanly";
}

TEST_F(StreamReaderUnitTest, CountsArePublishedBeforeTheSinkWakesItsSessions) {
  // The reader counts a turn's frames without its lock and publishes them once
  // per turn; a session the sink wakes at the end of the turn must still read
  // counts and a server_wal_end that cover everything the sink holds.
  int turns = 0;
  sink_.on_drained = [&] {
    const ReaderStats stats = reader_->stats();
    const std::vector<TransactionCommitted> commits = sink_.commits();
    ++turns;
    EXPECT_EQ(stats.events, sink_.ids().size());
    EXPECT_EQ(stats.transactions, commits.size());
    if (!commits.empty()) {
      EXPECT_GE(stats.server_wal_end, commits.back().end_lsn);
    }
  };
  ASSERT_THAT(Run({Script().Frames(Golden())}, AllCommitted()), IsOk());
  EXPECT_GT(turns, 0);
  EXPECT_EQ(reader_->stats().events, expected_.ids.size());
}

TEST_F(StreamReaderUnitTest, ReconnectMidTransactionDeliversEveryEventOnce) {
  // Cut the first session right after the second change of a transaction with
  // at least three, as a broken connection would; PostgreSQL then re-sends
  // everything from the unconfirmed start.
  const Frames& all = Golden();
  size_t cut = 0;
  for (size_t begin = 0; begin < all.size() && cut == 0; ++begin) {
    if (Tag(all[begin]) != 'B') continue;
    int changes = 0;
    size_t second = 0;
    for (size_t i = begin + 1; i < all.size() && Tag(all[i]) != 'C'; ++i) {
      const char tag = Tag(all[i]);
      if (tag == 'I' || tag == 'U' || tag == 'D') {
        if (++changes == 2) second = i;
      }
    }
    if (changes >= 3) cut = second + 1;
  }
  ASSERT_GT(cut, 0u) << "the capture has a transaction with three changes";
  Script first;
  first.Frames(Frames(all.begin(), all.begin() + cut))
      .Fail(absl::UnavailableError("connection reset by peer"));
  ASSERT_THAT(Run({first, Script().Frames(all)}, AllCommitted()), IsOk());

  EXPECT_THAT(sink_.ids(), ElementsAreArray(expected_.ids)) << "none lost, none twice";
  EXPECT_EQ(reader_->stats().reconnects, 1u);
  EXPECT_GT(reader_->stats().redelivered_dropped, 0u);
  EXPECT_THAT(log_->starts(), ElementsAreArray({Lsn(), Lsn()}))
      << "nothing was confirmed, so the second session starts where the first did";
}

TEST_F(StreamReaderUnitTest, EventsAtOrBelowDeliverAfterAreTrackedButNotDelivered) {
  const size_t floor = expected_.ids.size() / 2;
  options_.deliver_after = expected_.ids[floor];
  ASSERT_THAT(Run({Script().Frames(Golden())}, AllCommitted()), IsOk());
  EXPECT_THAT(sink_.ids(), ElementsAreArray(expected_.ids.begin() + floor + 1, expected_.ids.end()));
  EXPECT_EQ(reader_->stats().below_checkpoint, floor + 1);
}

TEST_F(StreamReaderUnitTest, DefiniteErrorEndsRun) {
  EXPECT_THAT(Run({Script().Frames({Golden()[0]}).Fail(absl::DataLossError("slot invalidated"))}),
              StatusIs(absl::StatusCode::kDataLoss, HasSubstr("slot invalidated")));
  EXPECT_EQ(reader_->stats().reconnects, 0u);
}

TEST_F(StreamReaderUnitTest, StatusUpdatesEveryHalfTheSenderTimeoutWhenThatIsSooner) {
  options_.max_feedback_interval = absl::Seconds(10);
  int updates = 0;
  ASSERT_THAT(Run({Script().WalSenderTimeout(absl::Seconds(1))},
                  [&](const SentUpdate&) { return ++updates >= 12; }),
              IsOk());
  const std::vector<SentUpdate> sent = log_->updates();
  ASSERT_GE(sent.size(), 12u);
  for (size_t i = 1; i + 1 < sent.size(); ++i) {  // The last is the stop's own.
    EXPECT_EQ(sent[i].at - sent[i - 1].at, absl::Milliseconds(500)) << "update " << i;
  }
}

TEST_F(StreamReaderUnitTest, ReplyRequestIsAnsweredAtOnce) {
  const absl::Time start = clock_.Now();
  Script script;
  script.Frame(walfeed::testing::EncodeKeepalive(Lsn(0x5000), 0, /*reply_requested=*/true),
               absl::Milliseconds(300));
  ASSERT_THAT(Run({script}, [&](const SentUpdate& u) { return u.at - start > absl::Seconds(2); }),
              IsOk());
  std::vector<absl::Duration> at;
  for (const SentUpdate& u : log_->updates()) at.push_back(u.at - start);
  ASSERT_GE(at.size(), 3u);
  EXPECT_EQ(at[0], absl::ZeroDuration()) << "the first update goes out at connect";
  EXPECT_EQ(at[1], absl::Milliseconds(300)) << "the reply request, answered when it arrived";
  EXPECT_EQ(at[2], absl::Milliseconds(1300)) << "the cadence restarts from the reply";
}

// A black hole (network or host gone without a reset): nothing arrives and
// reply requests go unanswered. The session ends as transient once nothing was
// heard for wal_sender_timeout; the fake then has no session left, which ends Run.
TEST_F(StreamReaderUnitTest, SilenceForTheSenderTimeoutEndsTheSession) {
  const absl::Time start = clock_.Now();
  EXPECT_THAT(Run({Script().WalSenderTimeout(absl::Seconds(4)).Silent()}),
              StatusIs(absl::StatusCode::kFailedPrecondition));
  ASSERT_THAT(sink_.disconnects(), SizeIs(1));
  EXPECT_THAT(sink_.disconnects()[0], HasSubstr("no message from PostgreSQL for 4s"));
  EXPECT_THAT(sink_.disconnects()[0],
              HasSubstr("a second connection could not confirm its walsender"));
  const std::vector<SentUpdate> sent = log_->updates();
  ASSERT_GE(sent.size(), 4u);
  EXPECT_FALSE(sent[0].reply_requested) << "nothing was missed yet";
  for (size_t i = 1; i < 4; ++i) {
    EXPECT_EQ(sent[i].at - start, absl::Seconds(static_cast<int64_t>(i)));
    EXPECT_TRUE(sent[i].reply_requested) << "after a silent second, a probe: update " << i;
  }
  EXPECT_LE(sent.back().at - start, absl::Seconds(4));
  EXPECT_EQ(log_->starts().size(), 2u) << "it reconnected (transient), not gave up";
}

// A quiet but live walsender answers the probes: the session lives.
TEST_F(StreamReaderUnitTest, AQuietServerThatAnswersProbesKeepsTheSession) {
  const absl::Time start = clock_.Now();
  ASSERT_THAT(Run({Script().WalSenderTimeout(absl::Seconds(4))},
                  [&](const SentUpdate& u) { return u.at - start >= absl::Seconds(20); }),
              IsOk());
  EXPECT_THAT(sink_.disconnects(), SizeIs(0));
  EXPECT_EQ(log_->starts().size(), 1u);
  int probes = 0;
  for (const SentUpdate& u : log_->updates()) probes += u.reply_requested ? 1 : 0;
  EXPECT_GE(probes, 5) << "an idle stream is silent, so it was probed";
  EXPECT_THAT(log_->alive_checks(), SizeIs(0))
      << "every probe was answered: no check over a second connection (a backend start)";
}

// A walsender busy writing a large transaction to disk answers nothing, but a
// second connection sees it holding the slot: the session lives, probing on.
// The check is asked for once a probe has gone unanswered for half a status
// interval (0.5 s here: the interval is 1 s), never with the probe itself.
TEST_F(StreamReaderUnitTest, ASilentWalsenderThatStillHoldsTheSlotKeepsTheSession) {
  const absl::Time start = clock_.Now();
  ASSERT_THAT(Run({Script().WalSenderTimeout(absl::Seconds(4)).Busy()},
                  [&](const SentUpdate& u) { return u.at - start >= absl::Seconds(20); }),
              IsOk());
  EXPECT_THAT(sink_.disconnects(), SizeIs(0));
  EXPECT_EQ(log_->starts().size(), 1u);
  int probes = 0;
  for (const SentUpdate& u : log_->updates()) probes += u.reply_requested ? 1 : 0;
  EXPECT_GE(probes, 10) << "it kept asking the walsender itself too";
  const std::vector<absl::Time> checks = log_->alive_checks();
  ASSERT_GE(checks.size(), 5u);
  for (const absl::Time at : checks) {
    const std::vector<SentUpdate> updates = log_->updates();
    auto probe = std::find_if(updates.rbegin(), updates.rend(), [&](const SentUpdate& u) {
      return u.reply_requested && u.at <= at;
    });
    ASSERT_NE(probe, updates.rend());
    EXPECT_EQ(at - probe->at, absl::Milliseconds(500)) << "the check waits out the grace";
  }
}

// The check is never asked for so late that it cannot finish before the
// silence limit: with wal_sender_timeout 2 s the status interval is 1 s, and a
// silence that began just after a tick is probed only at the second tick,
// 1.9 s in; waiting out the grace there would pass the limit.
TEST_F(StreamReaderUnitTest, ABusyWalsenderIsCheckedBeforeTheSilenceLimitWhateverTheCadence) {
  const absl::Time start = clock_.Now();
  ASSERT_THAT(
      Run({Script()
               .WalSenderTimeout(absl::Seconds(2))
               .Busy()
               .Frame(walfeed::testing::EncodeKeepalive(Lsn(0x5000), 0, false),
                      absl::Milliseconds(100))},
          [&](const SentUpdate& u) { return u.at - start >= absl::Seconds(20); }),
      IsOk());
  EXPECT_THAT(sink_.disconnects(), SizeIs(0));
  EXPECT_EQ(log_->starts().size(), 1u);
  EXPECT_THAT(log_->alive_checks(), Not(IsEmpty()));
}

// While the sink is full the socket is not read, so silence says nothing.
TEST_F(StreamReaderUnitTest, SilenceIsNotJudgedWhileTheSinkIsFull) {
  const absl::Time start = clock_.Now();
  sink_.SetRoom(false);
  ASSERT_THAT(Run({Script().WalSenderTimeout(absl::Seconds(4)).Silent()},
                  [&](const SentUpdate& u) { return u.at - start >= absl::Seconds(20); }),
              IsOk());
  EXPECT_THAT(sink_.disconnects(), SizeIs(0));
  EXPECT_THAT(log_->alive_checks(), IsEmpty());
}

// A fast shutdown waits for the walsender's last data to be confirmed; a full
// reader does not read and cannot see that wait. The store's session can: a
// ping on the status cadence that meets SQLSTATE class 57 ends the session.
TEST_F(StreamReaderUnitTest, WhileFullAStoreThatSaysShuttingDownEndsTheSession) {
  sink_.SetRoom(false);
  store_.SetPingResult(StoreError("57P01", "terminating connection due to administrator command"));
  // The one scripted session ends; the reconnect then finds no more sessions.
  EXPECT_THAT(Run({Script().Frames(Golden())}),
              StatusIs(absl::StatusCode::kFailedPrecondition, HasSubstr("no more sessions")));
  ASSERT_THAT(sink_.disconnects(), SizeIs(1));
  EXPECT_THAT(sink_.disconnects()[0],
              AllOf(HasSubstr("PostgreSQL is shutting down"), HasSubstr("administrator command")));
  EXPECT_GE(store_.pings(), 1);
}

TEST_F(StreamReaderUnitTest, OtherStoreErrorsAndRoomMeanNoShutdown) {
  // Full, the store failing for another reason: logged, the session stays.
  sink_.SetRoom(false);
  // Class 57 too, but not a shutdown: a statement timeout on the store.
  store_.SetPingResult(StoreError("57014", "canceling statement due to statement timeout"));
  const absl::Time start = clock_.Now();
  ASSERT_THAT(Run({Script().Frames(Golden())},
                  [&](const SentUpdate& u) { return u.at - start >= absl::Seconds(10); }),
              IsOk());
  EXPECT_THAT(sink_.disconnects(), SizeIs(0));
  EXPECT_GE(store_.pings(), 5) << "pinged on the status cadence while full";
  // With room the socket itself tells: no pings at all.
  sink_.SetRoom(true);
  const int pings = store_.pings();
  ASSERT_THAT(Run({Script().Frames(Golden())}, AllCommitted()), IsOk());
  EXPECT_EQ(store_.pings(), pings);
}

TEST_F(StreamReaderUnitTest, BackpressureStopsReadingButStatusUpdatesGoOn) {
  sink_.SetRoom(false);
  int updates = 0;
  ASSERT_THAT(Run({Script().Frames(Golden())},
                  [&](const SentUpdate&) {
                    if (++updates == 30) {
                      EXPECT_THAT(sink_.ids(), SizeIs(0)) << "nothing read while full";
                      sink_.SetRoom(true);
                      reader_->Wake();
                    }
                    return sink_.commits().size() >= expected_.transactions;
                  }),
              IsOk());
  EXPECT_GE(updates, 30);
  EXPECT_THAT(sink_.ids(), ElementsAreArray(expected_.ids)) << "all of it once there is room";
  const std::vector<SentUpdate> sent = log_->updates();
  for (size_t i = 1; i < 30; ++i) {
    EXPECT_EQ(sent[i].at - sent[i - 1].at, absl::Seconds(1)) << "update " << i;
  }
}

TEST_F(StreamReaderUnitTest, ReadCoalesceWaitsAfterAReadAndNeverBeforeTheFirst) {
  options_.read_coalesce = absl::Milliseconds(20);
  const absl::Time start = clock_.Now();
  // A quiet second, then the capture's first transaction spread 5 ms apart.
  const Frames& all = Golden();
  size_t first_commit = 0;
  while (Tag(all[first_commit]) != 'C') ++first_commit;
  Script script;
  script.Frame(all[0], absl::Seconds(1));
  for (size_t i = 1; i <= first_commit; ++i) script.Frame(all[i], absl::Milliseconds(5));
  ASSERT_THAT(Run({script}, [&](const SentUpdate&) { return !sink_.commits().empty(); }), IsOk());
  const std::vector<absl::Time> times = sink_.times();
  ASSERT_FALSE(times.empty());
  // The first frame is read the moment it arrives (no window before it); the
  // assembler hands an event over one change later, so the first event comes
  // out on the first read after its successor arrived: a window later.
  EXPECT_THAT(log_->input_pauses(), Each(absl::Milliseconds(20)));
  EXPECT_THAT(log_->input_pauses(), SizeIs(Ge(1u)));
  for (absl::Time t : times) {
    const absl::Duration since = t - (start + absl::Seconds(1));
    EXPECT_EQ(since % absl::Milliseconds(20), absl::ZeroDuration())
        << "events are handed over only at the ends of read windows, got " << since;
  }
}

// The capture's first frame after a quiet second, then the rest of its first
// transaction trickling in one frame per read (each read small); the number of
// trickling frames goes to `trickled`.
Script FirstTransactionTrickling(size_t* trickled) {
  const Frames& all = Golden();
  size_t first_commit = 0;
  while (Tag(all[first_commit]) != 'C') ++first_commit;
  const Frames trickling(all.begin() + 1, all.begin() + first_commit + 1);
  *trickled = trickling.size();
  Script script;
  script.Frame(all[0], absl::Seconds(1)).Trickle(trickling);
  return script;
}

// With a read window each small read ends the turn and the next read waits the
// window, so that the socket fills between reads: reading again at once would
// take each message alone and have the kernel acknowledge it, and the
// walsender's sends would never coalesce.
TEST_F(StreamReaderUnitTest, WithAReadWindowASmallReadEndsTheTurn) {
  options_.read_coalesce = absl::Milliseconds(20);
  const absl::Time start = clock_.Now();
  size_t trickled = 0;
  const Script script = FirstTransactionTrickling(&trickled);
  ASSERT_GE(trickled, 2u);
  ASSERT_THAT(Run({script}, [&](const SentUpdate&) { return !sink_.commits().empty(); }),
              IsOk());
  // A window after the first frame's read and after each trickled one's but
  // the last (the commit, whose read ends the transaction).
  EXPECT_THAT(log_->input_pauses(), SizeIs(Ge(trickled)));
  EXPECT_THAT(log_->input_pauses(), Each(absl::Milliseconds(20)));
  ASSERT_FALSE(sink_.commits().empty());
  EXPECT_GE(sink_.times().back() - start,
            absl::Seconds(1) + absl::Milliseconds(20) * static_cast<int64_t>(trickled - 1));
}

// Without one they are read in one turn, as they come.
TEST_F(StreamReaderUnitTest, WithoutAReadWindowTricklingMessagesAreReadInOneTurn) {
  const absl::Time start = clock_.Now();
  size_t trickled = 0;
  const Script script = FirstTransactionTrickling(&trickled);
  ASSERT_THAT(Run({script}, [&](const SentUpdate&) { return !sink_.commits().empty(); }),
              IsOk());
  EXPECT_THAT(log_->input_pauses(), SizeIs(0));
  ASSERT_FALSE(sink_.commits().empty());
  for (absl::Time t : sink_.times()) EXPECT_EQ(t, start + absl::Seconds(1));
}

// Keepalives arriving `gap` apart, `count` of them: a busy stream's frames.
Script& Keepalives(Script& script, int count, absl::Duration gap) {
  for (int i = 0; i < count; ++i) {
    script.Frame(walfeed::testing::EncodeKeepalive(Lsn(0x1000), 0, false), gap);
  }
  return script;
}

// Unset, the window follows the transport (kTcpReadWindow over TCP,
// kUnixReadWindow over a Unix-domain socket) and is waited only while the
// stream is busy: 20,000 frames/s get it after each read, and a transaction
// sent promptly after its commit, trickling in after a quiet second, is read
// as it comes, every event handed over the moment its frame arrived.
class StreamReaderBusyTest : public StreamReaderUnitTest {
 protected:
  void ExpectTheWindowOnlyWhileBusy(bool unix_socket) {
    options_.read_coalesce.reset();
    const absl::Time start = clock_.Now();
    constexpr int kBusyFrames = 400;
    constexpr absl::Duration kGap = absl::Microseconds(50);  // 20,000 frames/s.
    ASSERT_GT(absl::Seconds(1) / kGap, kBusyFramesPerSecond);
    Script script;
    if (unix_socket) script.UnixSocket();
    Keepalives(script, kBusyFrames, kGap);
    size_t trickled = 0;
    const Script quiet = FirstTransactionTrickling(&trickled);
    for (const Script::Step& step : quiet.steps()) {
      if (step.trickles) {
        script.Trickle({SentPromptly(step.frame)});
      } else {
        script.Frame(SentPromptly(step.frame), step.after);
      }
    }
    ASSERT_THAT(Run({script}, [&](const SentUpdate&) { return !sink_.commits().empty(); }),
                IsOk());
    const std::vector<absl::Duration> pauses = log_->input_pauses();
    EXPECT_THAT(pauses, SizeIs(Ge(5u))) << "busy: a window after each read";
    EXPECT_THAT(pauses, Each(unix_socket ? kUnixReadWindow : kTcpReadWindow));
    ASSERT_FALSE(sink_.times().empty());
    EXPECT_THAT(sink_.times(), Each(start + kGap * kBusyFrames + absl::Seconds(1)))
        << "quiet: read as it comes";
  }
};

TEST_F(StreamReaderBusyTest, UnsetTheWindowIsWaitedOnlyWhileBusyOverTcp) {
  ExpectTheWindowOnlyWhileBusy(/*unix_socket=*/false);
}

TEST_F(StreamReaderBusyTest, UnsetTheWindowIsWaitedOnlyWhileBusyOverAUnixSocket) {
  ExpectTheWindowOnlyWhileBusy(/*unix_socket=*/true);
}

// Half the threshold, steadily (4,000 frames/s: about 1,300 single-row
// transactions/s), is not busy: never a window.
TEST_F(StreamReaderBusyTest, UnsetHalfTheBusyRateGetsNoWindow) {
  options_.read_coalesce.reset();
  constexpr absl::Duration kGap = absl::Microseconds(250);
  ASSERT_NEAR(absl::Seconds(1) / kGap, kBusyFramesPerSecond / 2, 1);
  Script script;
  Keepalives(script, 2000, kGap);
  script.Frame(walfeed::testing::EncodeKeepalive(Lsn(0x1000), 0, /*reply_requested=*/true), kGap);
  const absl::Time end = clock_.Now() + kGap * 2001;
  ASSERT_THAT(Run({script}, [&](const SentUpdate& u) { return u.at >= end; }), IsOk());
  EXPECT_THAT(log_->input_pauses(), SizeIs(0));
}

// A backlog as a walsender sends it over a Unix socket (bursts of 150 small
// messages, each burst what a blocked walsender sends when it is read), then,
// once it is read, single messages 5 ms apart, then a quiet 50 ms and one more
// burst. A last message 5 ms later asks for a reply: the update that answers
// it comes `*length` after the script's start.
Script BurstsThenTrickle(absl::Duration* length) {
  Script script;
  script.UnixSocket();
  *length = absl::Seconds(1);
  for (int burst = 0; burst < 20; ++burst) {
    for (int i = 0; i < 150; ++i) {
      const absl::Duration after =
          i > 0 ? absl::ZeroDuration() : burst == 0 ? absl::Seconds(1) : absl::Microseconds(250);
      script.Frame(walfeed::testing::EncodeKeepalive(Lsn(0x1000), 0, false), after);
      if (burst > 0 && i == 0) *length += after;
    }
  }
  for (int i = 0; i < 10; ++i) {
    script.Frame(walfeed::testing::EncodeKeepalive(Lsn(0x1000), 0, false), absl::Milliseconds(5));
    *length += absl::Milliseconds(5);
  }
  for (int i = 0; i < 150; ++i) {
    script.Frame(walfeed::testing::EncodeKeepalive(Lsn(0x1000), 0, false),
                 i == 0 ? absl::Milliseconds(50) : absl::ZeroDuration());
  }
  *length += absl::Milliseconds(50);
  script.Frame(walfeed::testing::EncodeKeepalive(Lsn(0x1000), 0, /*reply_requested=*/true),
               absl::Milliseconds(5));
  *length += absl::Milliseconds(5);
  return script;
}

class StreamReaderBacklogTest : public StreamReaderUnitTest {
 protected:
  // Runs a reader over BurstsThenTrickle() up to its last frame's answer.
  absl::Status RunBurstsThenTrickle() {
    absl::Duration length;
    Script script = BurstsThenTrickle(&length);
    const absl::Time end = clock_.Now() + length;
    return Run({script}, [&](const SentUpdate& u) { return u.at >= end; });
  }
};

TEST_F(StreamReaderBacklogTest, UnsetTheWindowShortensOverAUnixSocketAndIsWholeAfterAQuietSpell) {
  options_.read_coalesce.reset();
  ASSERT_THAT(RunBurstsThenTrickle(), IsOk());
  const std::vector<absl::Duration> pauses = log_->input_pauses();
  ASSERT_GE(pauses.size(), 12u);
  EXPECT_EQ(pauses.front(), kUnixReadWindow) << "the first window is the whole one";
  EXPECT_LT(*std::min_element(pauses.begin(), pauses.end()), kUnixReadWindow / 2)
      << "the turns after it brought half the walsender's send buffer";
  EXPECT_THAT(pauses, Each(Ge(kUnixMinReadWindow)));
  EXPECT_EQ(pauses.back(), kUnixReadWindow)
      << "after a quiet spell a burst gets the whole window again";
}

// Set, the window holds over a Unix socket too: neither shortened nor grown.
TEST_F(StreamReaderBacklogTest, ASetReadWindowHoldsOverAUnixSocket) {
  options_.read_coalesce = absl::Milliseconds(1);
  ASSERT_THAT(RunBurstsThenTrickle(), IsOk());
  EXPECT_THAT(log_->input_pauses(), SizeIs(Ge(12u)));
  EXPECT_THAT(log_->input_pauses(), Each(absl::Milliseconds(1)));
}

// Empty transactions, one frame every 20 ms (each read alone, then a
// window), each Begin sent by the walsender `lag` after its commit.
Script TransactionsSentAfterTheirCommit(const std::vector<absl::Duration>& lags) {
  constexpr int64_t kCommitTime = int64_t{800'000'000} * 1'000'000;  // 2025, PostgreSQL epoch.
  Script script;
  uint64_t lsn = 0x10000;
  for (const absl::Duration lag : lags) {
    const int64_t sent = kCommitTime + absl::ToInt64Microseconds(lag);
    pgoutput::Begin begin{Lsn(lsn + 0x100), kCommitTime, 700};
    pgoutput::Commit commit{0, Lsn(lsn + 0x100), Lsn(lsn + 0x130), kCommitTime};
    script.Frame(walfeed::testing::EncodeXLogData(Lsn(lsn), Lsn(lsn), sent,
                                                  walfeed::testing::EncodeBegin(begin)),
                 absl::Milliseconds(20));
    script.Frame(walfeed::testing::EncodeXLogData(Lsn(lsn + 0x100), Lsn(lsn + 0x100), sent,
                                                  walfeed::testing::EncodeCommit(commit)),
                 absl::Milliseconds(20));
    lsn += 0x1000;
  }
  return script;
}

// Unset over TCP, the window lengthens while the walsender sends transactions
// long after their commit (a backlog: a little more wait costs such changes
// little, and the walsender's sends gather into fewer segments) and shortens
// once it sends them promptly; a lag between the two thresholds changes
// nothing either way.
TEST_F(StreamReaderUnitTest, UnsetTheTcpWindowLengthensWhileABacklogIsRead) {
  options_.read_coalesce.reset();
  const std::vector<absl::Duration> lags = {absl::Seconds(5), (kBacklogLag + kCaughtUpLag) / 2,
                                            absl::Milliseconds(1), (kBacklogLag + kCaughtUpLag) / 2,
                                            kBacklogLag, kCaughtUpLag - absl::Microseconds(1)};
  ASSERT_THAT(Run({TransactionsSentAfterTheirCommit(lags)},
                  [&](const SentUpdate&) { return sink_.commits().size() >= lags.size(); }),
              IsOk());
  // Two frames per transaction, each read alone; the Begin's read decides. A
  // backlog gets a window after each read whatever the rate; the live window
  // is waited only while busy, which 50 frames/s are not.
  const absl::Duration backlog = kTcpBacklogReadWindow;
  EXPECT_THAT(log_->input_pauses(),
              ElementsAreArray({backlog, backlog, backlog, backlog, backlog, backlog}))
      << "the 5 s and the in-between lag, then the 1 s one: the in-between lag after a "
         "prompt one kept the live window";
}

// Set, it holds whatever the lag.
TEST_F(StreamReaderUnitTest, ASetReadWindowHoldsWhileABacklogIsRead) {
  options_.read_coalesce = absl::Milliseconds(2);
  const std::vector<absl::Duration> lags = {absl::Seconds(5), absl::Milliseconds(1)};
  ASSERT_THAT(Run({TransactionsSentAfterTheirCommit(lags)},
                  [&](const SentUpdate&) { return sink_.commits().size() >= lags.size(); }),
              IsOk());
  EXPECT_THAT(log_->input_pauses(), SizeIs(Ge(2 * lags.size())));
  EXPECT_THAT(log_->input_pauses(), Each(absl::Milliseconds(2)));
}

// The times are the walsender's, so untrusted: extremes neither overflow nor
// end the session.
TEST_F(StreamReaderUnitTest, ExtremeSendAndCommitTimesAreHarmless) {
  options_.read_coalesce.reset();
  Script script;
  pgoutput::Begin begin{Lsn(0x200), std::numeric_limits<int64_t>::min(), 700};
  pgoutput::Commit commit{0, Lsn(0x200), Lsn(0x230), 0};
  script.Frame(walfeed::testing::EncodeXLogData(Lsn(0x100), Lsn(0x100),
                                                std::numeric_limits<int64_t>::max(),
                                                walfeed::testing::EncodeBegin(begin)),
               absl::Milliseconds(20));
  script.Frame(walfeed::testing::EncodeXLogData(Lsn(0x200), Lsn(0x200), 0,
                                                walfeed::testing::EncodeCommit(commit)),
               absl::Milliseconds(20));
  ASSERT_THAT(Run({script}, [&](const SentUpdate&) { return !sink_.commits().empty(); }), IsOk());
  EXPECT_THAT(log_->input_pauses(), SizeIs(Ge(1u)));
  EXPECT_THAT(log_->input_pauses(), Each(kTcpBacklogReadWindow));
}

TEST_F(StreamReaderUnitTest, WithoutCoalescingEveryArrivalIsReadAtOnce) {
  const absl::Time start = clock_.Now();
  const Frames& all = Golden();
  size_t first_commit = 0;
  while (Tag(all[first_commit]) != 'C') ++first_commit;
  Script script;
  for (size_t i = 0; i <= first_commit; ++i) script.Frame(all[i], absl::Milliseconds(5));
  ASSERT_THAT(Run({script}, [&](const SentUpdate&) { return !sink_.commits().empty(); }), IsOk());
  EXPECT_THAT(log_->input_pauses(), SizeIs(0));
  for (absl::Time t : sink_.times()) {
    EXPECT_EQ((t - start) % absl::Milliseconds(5), absl::ZeroDuration());
  }
}

// The walsender of a stopping PostgreSQL asks for a reply right after each of
// ours; a timeout ping never comes that soon.
Script ReplyRequests(int count, absl::Duration spacing) {
  Script script;
  script.WalSenderTimeout(absl::Seconds(4));  // Pings come 2 s after our silence.
  for (int i = 0; i < count; ++i) {
    script.Frame(walfeed::testing::EncodeKeepalive(Lsn(0x9000), 0, true), spacing);
  }
  return script;
}

TEST_F(StreamReaderUnitTest, ChainOfEarlyReplyRequestsEndsTheSessionSoAShutdownCanFinish) {
  int sessions_seen = 0;
  ASSERT_THAT(Run({ReplyRequests(12, absl::Milliseconds(10)), Script()},
                  [&](const SentUpdate& u) {
                    sessions_seen = std::max(sessions_seen, u.session + 1);
                    return u.session == 1;
                  }),
              IsOk());
  EXPECT_EQ(reader_->stats().reconnects, 1u);
  EXPECT_EQ(sessions_seen, 2);
}

TEST_F(StreamReaderUnitTest, RequestsSpacedLikeTimeoutPingsDoNotEndTheSession) {
  // Each request 1.5 s after the last: later than wal_sender_timeout / 4 after
  // our reply, as a live walsender's pings are.
  ASSERT_THAT(Run({ReplyRequests(15, absl::Milliseconds(1500))},
                  [&](const SentUpdate&) { return reader_->stats().keepalives >= 15; }),
              IsOk());
  EXPECT_EQ(reader_->stats().reconnects, 0u);
}

TEST_F(StreamReaderUnitTest, ConfirmsOnlyWhatIsAckedAndStored) {
  ASSERT_THAT(tracker_.AddConsumer("c", EventId{}), IsOk());
  const EventId last = expected_.ids.back();
  bool acked = false;
  ASSERT_THAT(Run({Script().Frames(Golden())},
                  [&](const SentUpdate& update) {
                    EXPECT_LE(update.flush, store_.stored()) << "confirmed before stored";
                    if (sink_.commits().size() < expected_.transactions) return false;
                    if (!acked) {
                      // A keepalive before the first transaction may be confirmed
                      // (idle advance); no transaction may.
                      EXPECT_LE(update.flush, expected_.ids.front().commit_lsn)
                          << "nothing acked, no transaction confirmed";
                      acked = true;
                      EXPECT_THAT(tracker_.Ack("c", last), IsOk());
                      return false;
                    }
                    return update.flush > expected_.ids.back().commit_lsn;
                  }),
              IsOk());
  const Lsn end = sink_.commits().back().end_lsn;
  EXPECT_EQ(reader_->stats().confirmed_sent, end) << "the last transaction's end, acked";
  EXPECT_EQ(store_.stored(), end);
}

// A store whose writes above `hold_above` block until released: the loop must
// go on without it.
class HeldStore : public ConfirmedLsnStore {
 public:
  explicit HeldStore(Lsn hold_above) : hold_above_(hold_above) {}
  absl::Status PersistConfirmed(Lsn lsn) override {
    if (lsn > hold_above_) {
      if (!entered_.HasBeenNotified()) entered_.Notify();
      release_.WaitForNotification();
    }
    absl::MutexLock lock(&mu_);
    stored_ = lsn;
    return absl::OkStatus();
  }
  const Lsn hold_above_;
  absl::Notification entered_;
  absl::Notification release_;
  absl::Mutex mu_;
  Lsn stored_ ABSL_GUARDED_BY(mu_);
};

TEST_F(StreamReaderUnitTest, ASlowStoreNeverHoldsTheLoop) {
  HeldStore held(expected_.ids.back().commit_lsn);
  ASSERT_THAT(tracker_.AddConsumer("c", EventId{}), IsOk());
  log_ = std::make_shared<FakeLog>();
  Script script = ReplyRequests(5, absl::Seconds(3));
  script.Frames(Golden());
  reader_ = std::make_unique<StreamReader>(
      options_, std::make_unique<FakeOpener>(&clock_, std::vector<Script>{script}, log_),
      &clock_, &tracker_, &sink_, &held);
  int while_held = 0;
  log_->on_update = [&](const SentUpdate& update) {
    if (!held.entered_.HasBeenNotified()) {
      if (sink_.commits().size() >= expected_.transactions) {
        EXPECT_THAT(tracker_.Ack("c", expected_.ids.back()), IsOk());
      }
      return;
    }
    if (!held.release_.HasBeenNotified()) {
      EXPECT_LE(update.flush, expected_.ids.front().commit_lsn) << "not stored, not confirmed";
      if (++while_held == 5) held.release_.Notify();
      return;
    }
    if (update.flush > expected_.ids.back().commit_lsn) reader_->Stop();
  };
  ASSERT_THAT(reader_->Run(Lsn()), IsOk());
  EXPECT_EQ(while_held, 5) << "status updates went on while the store was held";
  EXPECT_EQ(reader_->stats().confirmed_sent, sink_.commits().back().end_lsn);
}

}  // namespace
}  // namespace walfeed::replication::pg
