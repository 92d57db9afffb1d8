// Disk-backed retention and the laggard policy, against a real PostgreSQL 15
// and the in-process server:
//   - a stopped consumer's backlog spills to disk: a fast consumer keeps
//     flowing (nothing holds the stream), memory stays within buffer_bytes, and
//     the stopped one later receives every event, in order;
//   - laggard_policy detach: the laggard stops holding the stream and the slot
//     (confirmed_flush_lsn passes its checkpoint), survives a restart as
//     detached, gets FAILED_PRECONDITION naming the reset, and a reset
//     re-attaches it;
//   - a damaged spill segment is detected, never served: the stream is re-read
//     from the slot and the consumer receives every event after its checkpoint;
//   - a PostgreSQL fast shutdown finishes while a stopped consumer fills the
//     buffer (the reader, not reading, learns of it from the store's session).
#include <filesystem>
#include <fstream>

#include "tests/server/e2e_harness.h"

namespace walfeed::server {
namespace {

using namespace ::walfeed::server::e2e;  // NOLINT: the harness is this file's vocabulary.

class RetentionE2eTest : public ServerE2eTest {
 protected:
  std::string RetentionYaml(const std::string& retention_bytes, const std::string& policy) {
    return Yaml(absl::StrCat("state_dir: ", dir_, "/state\ndefaults:\n  buffer_bytes: 65536\n",
                             "  retention_bytes: ", retention_bytes, "\n  laggard_policy: ",
                             policy, "\n"));
  }
  const walfeed::v1::ConsumerStatus* Find(const walfeed::v1::StreamStatus& status,
                                          const std::string& name) {
    for (const auto& c : status.consumers()) {
      if (c.name() == name) return &c;
    }
    return nullptr;
  }
  // Acks what `sub` received as it goes, until it has `n` events.
  bool ReceiveAndAck(Subscription& sub, const std::string& consumer, size_t n,
                     absl::Duration timeout = absl::Seconds(120)) {
    size_t acked = 0;
    return WaitUntil(
        [&] {
          const size_t count = sub.event_count();
          if (count > acked) {
            AckOk(sub, consumer, sub.events().back().id());
            acked = count;
          }
          return acked >= n;
        },
        timeout, absl::Milliseconds(5));
  }
  // A consumer with a checkpoint at the first row, then stopped: it holds
  // everything after it.
  std::string StopAfterOneAck(const std::string& consumer) {
    std::unique_ptr<Subscription> sub = Subscribe(Request(consumer));
    EXPECT_TRUE(sub->WaitForEvents(1));
    const std::string id = sub->events()[0].id();
    AckOk(*sub, consumer, id);
    return id;
  }
  // The ids of orders rows in `events`, which must follow each other from
  // `first` (every event of the run, in order, no gap, no repeat).
  static void ExpectRowsInOrder(const std::vector<ChangeEvent>& events, int first, int n) {
    ASSERT_EQ(events.size(), static_cast<size_t>(n));
    for (int i = 0; i < n; ++i) {
      ASSERT_EQ(NewValue(events[i], "id"), absl::StrCat(first + i)) << "event " << i;
      if (i > 0) {
        ASSERT_LT(ParseId(events[i - 1].id()), ParseId(events[i].id()));
      }
    }
  }
  std::vector<std::string> SpillFiles() const {
    std::vector<std::string> files;
    std::error_code ignored;
    for (const auto& entry : std::filesystem::recursive_directory_iterator(dir_ + "/state", ignored)) {
      if (entry.path().extension() == ".spill") files.push_back(entry.path());
    }
    return files;
  }
};

TEST_F(RetentionE2eTest, AStoppedConsumersBacklogSpillsWhileTheFastOneFlows) {
  StartServer(RetentionYaml("67108864", "hold"));
  std::unique_ptr<Subscription> fast = Subscribe(Request("fast"));
  InsertTransactions(1, 1);
  StopAfterOneAck("stuck");
  ASSERT_TRUE(ReceiveAndAck(*fast, "fast", 1));

  constexpr int kRows = 5000;
  std::thread writer([&] { InsertTransactions(2, kRows); });
  uint64_t peak_memory = 0;
  const bool all = WaitUntil(
      [&] {
        peak_memory = std::max<uint64_t>(peak_memory, StreamStatusNow().buffered_bytes());
        return ReceiveAndAck(*fast, "fast", kRows + 1, absl::Milliseconds(200));
      },
      absl::Seconds(120), absl::Milliseconds(1));
  writer.join();
  ASSERT_TRUE(all) << "fast received " << fast->event_count() << " of " << kRows + 1;
  const walfeed::v1::StreamStatus status = StreamStatusNow();
  EXPECT_TRUE(status.held_by().empty()) << "nothing holds the stream while the disk has room";
  EXPECT_GT(status.spilled_bytes(), 0u);
  EXPECT_EQ(status.retention_bytes(), 67108864u);
  EXPECT_LE(peak_memory, 65536u + 4096u) << "memory stays within buffer_bytes";
  ASSERT_NE(Find(status, "stuck"), nullptr);
  EXPECT_GT(Find(status, "stuck")->held_bytes(), 0u);
  EXPECT_FALSE(SpillFiles().empty());

  // The stopped consumer comes back: everything after its checkpoint, in order,
  // most of it from disk.
  std::unique_ptr<Subscription> back = Subscribe(Request("stuck"));
  ASSERT_TRUE(back->WaitForEvents(kRows, absl::Seconds(120))) << back->event_count();
  ExpectRowsInOrder(back->events(), 2, kRows);
  AckOk(*back, "stuck", back->events().back().id());
  EXPECT_TRUE(WaitUntil([&] { return StreamStatusNow().spilled_bytes() == 0; }, kDeadline))
      << "acked by everyone: the disk is freed";
  EXPECT_TRUE(WaitUntil([&] { return SpillFiles().empty(); }, kDeadline));
}

// A fast shutdown waits for each walsender to hear that all it sent is flushed.
// With the buffer full the reader does not read its connection, so it cannot see
// that wait; the store's session, ended by the shutdown (SQLSTATE 57P01), tells
// it on the next status tick, and it lets go. Nothing is lost: the stream
// resumes from the slot once PostgreSQL is back.
TEST_F(RetentionE2eTest, AFastPostgresShutdownFinishesWhileTheBufferIsFull) {
  StartServer(Yaml("defaults:\n  buffer_bytes: 65536\n"));
  {
    std::unique_ptr<Subscription> first = Subscribe(Request("stuck"));
    InsertTransactions(1, 1);
    ASSERT_TRUE(first->WaitForEvents(1));
    AckOk(*first, "stuck", first->events()[0].id());
  }  // Stopped: it holds everything after row 1.
  constexpr int kRows = 2000;  // Far more than 64 KiB of events.
  InsertTransactions(2, kRows);
  ASSERT_TRUE(WaitUntil([&] { return !StreamStatusNow().held_by().empty(); }, kDeadline))
      << "the buffer never filled";

  const absl::Time stop = absl::Now();
  ASSERT_THAT(pg_->Stop("fast"), IsOk()) << "pg_ctl gave up waiting (60 s)";
  const absl::Duration took = absl::Now() - stop;
  std::cout << "fast shutdown with walfeed's buffer full took " << absl::FormatDuration(took)
            << "\n";
  EXPECT_LT(took, absl::Seconds(30));
  ASSERT_THAT(pg_->StartAgain(), IsOk());

  std::unique_ptr<Subscription> back = Subscribe(Request("stuck"));
  ASSERT_TRUE(ReceiveAndAck(*back, "stuck", kRows)) << back->event_count();
  ExpectRowsInOrder(back->events(), 2, kRows);
}

TEST_F(RetentionE2eTest, DetachReleasesTheSlotAndTheLaggardIsToldHowToResume) {
  StartServer(RetentionYaml("1048576", "detach"));
  std::unique_ptr<Subscription> fast = Subscribe(Request("fast"));
  InsertTransactions(1, 1);
  const std::string stuck_checkpoint = StopAfterOneAck("stuck");
  ASSERT_TRUE(ReceiveAndAck(*fast, "fast", 1));

  // About 4 MiB of events: more than memory and disk together.
  constexpr int kRows = 20000;
  std::thread writer([&] { InsertTransactions(2, kRows); });
  const bool all = ReceiveAndAck(*fast, "fast", kRows + 1);
  writer.join();
  ASSERT_TRUE(all) << "fast received " << fast->event_count() << " of " << kRows + 1;
  const walfeed::v1::StreamStatus status = StreamStatusNow();
  ASSERT_NE(Find(status, "stuck"), nullptr);
  EXPECT_TRUE(Find(status, "stuck")->detached());
  EXPECT_EQ(Find(status, "stuck")->held_bytes(), 0u);
  EXPECT_TRUE(WaitUntil([&] { return StreamStatusNow().held_by().empty(); }, kDeadline))
      << "the hold ends (after it settles) once the laggard is detached";
  // The slot moved past the laggard's checkpoint.
  const std::string stuck_lsn = stuck_checkpoint.substr(0, stuck_checkpoint.find(':'));
  EXPECT_TRUE(WaitUntil(
      [&] {
        return Sql(absl::StrCat("SELECT confirmed_flush_lsn > '", stuck_lsn,
                                "'::pg_lsn FROM pg_replication_slots WHERE slot_name = '",
                                kSlot, "'")) == "t";
      },
      kDeadline))
      << "slot at " << Sql(absl::StrCat("SELECT confirmed_flush_lsn FROM pg_replication_slots"))
      << ", stuck at " << stuck_lsn;

  // Detached survives a restart; its Subscribe says what happened and what to run.
  StopServer();
  StartServer(RetentionYaml("1048576", "detach"));
  SubscribeRequest request = Request("stuck");
  grpc::Status refused;
  ASSERT_TRUE(WaitUntil(
      [&] {
        refused = SubscribeError(request);
        return refused.error_code() != grpc::StatusCode::UNAVAILABLE;
      },
      kDeadline, absl::Milliseconds(50)));
  EXPECT_EQ(refused.error_code(), grpc::StatusCode::FAILED_PRECONDITION);
  EXPECT_THAT(refused.error_message(), HasSubstr("detached"));
  EXPECT_THAT(refused.error_message(), HasSubstr(stuck_checkpoint));
  EXPECT_THAT(refused.error_message(), HasSubstr("walfeed reset-consumer --stream orders "
                                                 "--consumer stuck --to-head --yes"));

  // The reset re-attaches it at the head: new rows arrive again.
  ASSERT_THAT(Reset("stuck", "", /*to_head=*/true), GrpcOk());
  EXPECT_FALSE(Find(StreamStatusNow(), "stuck")->detached());
  std::unique_ptr<Subscription> back = Subscribe(Request("stuck"));
  InsertTransactions(kRows + 2, 1);
  ASSERT_TRUE(back->WaitForEvents(1));
  EXPECT_EQ(NewValue(back->events().back(), "id"), absl::StrCat(kRows + 2));
}

TEST_F(RetentionE2eTest, ADamagedSpillIsNeverServedAndTheStreamIsReReadFromTheSlot) {
  StartServer(RetentionYaml("67108864", "hold"));
  std::unique_ptr<Subscription> fast = Subscribe(Request("fast"));
  InsertTransactions(1, 1);
  StopAfterOneAck("stuck");
  ASSERT_TRUE(ReceiveAndAck(*fast, "fast", 1));
  constexpr int kRows = 3000;
  InsertTransactions(2, kRows);
  ASSERT_TRUE(ReceiveAndAck(*fast, "fast", kRows + 1));
  const std::vector<std::string> files = SpillFiles();
  ASSERT_FALSE(files.empty());
  for (const std::string& path : files) {
    std::fstream file(path, std::ios::in | std::ios::out | std::ios::binary);
    file.seekp(static_cast<std::streamoff>(std::filesystem::file_size(path) / 2));
    file.put('\x5a');
    file.put('\xa5');
  }
  // Its first session ends when the damage is found (it may have received the
  // records before it); nothing damaged is delivered.
  std::unique_ptr<Subscription> first = Subscribe(Request("stuck"));
  ASSERT_TRUE(first->WaitForEnd(kDeadline));
  EXPECT_EQ(first->status()->error_code(), grpc::StatusCode::UNAVAILABLE);
  EXPECT_THAT(first->status()->error_message(), HasSubstr("re-read from its slot"));
  const std::vector<ChangeEvent> before = first->events();
  for (size_t i = 0; i < before.size(); ++i) {
    ASSERT_EQ(NewValue(before[i], "id"), absl::StrCat(2 + i));
  }
  EXPECT_LT(before.size(), static_cast<size_t>(kRows));
  // Re-read from the slot: every event after its checkpoint, in order.
  std::unique_ptr<Subscription> again = Subscribe(Request("stuck"));
  ASSERT_TRUE(again->WaitForEvents(kRows, absl::Seconds(120))) << again->event_count();
  ExpectRowsInOrder(again->events(), 2, kRows);
  // And the fast consumer carries on after resubscribing.
  std::unique_ptr<Subscription> fast_again = Subscribe(Request("fast"));
  InsertTransactions(kRows + 2, 1);
  ASSERT_TRUE(fast_again->WaitForEvents(1));
  EXPECT_EQ(NewValue(fast_again->events().back(), "id"), absl::StrCat(kRows + 2));
}

}  // namespace
}  // namespace walfeed::server
