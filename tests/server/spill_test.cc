// The spill: records round-trip and every damaged byte is caught; the log
// appends, reads after a cursor across segments, trims by floor, survives a
// failed read, and deletes what an earlier process left.
#include <fcntl.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "server/spill/spill_log.h"
#include "server/spill/spill_record.h"
#include "tests/server/stream_events.h"
#include "tests/testing/status_matchers.h"

namespace walfeed::server::spill {
namespace {

using ::walfeed::testing::Buffered;
using ::walfeed::testing::Id;
using ::walfeed::testing::IsOk;
using ::walfeed::testing::StatusIs;

std::vector<EventId> IdsOf(const std::vector<BufferedEvent>& events) {
  std::vector<EventId> ids;
  for (const BufferedEvent& e : events) ids.push_back(e.id);
  return ids;
}

TEST(SpillRecordTest, RoundTripsIdKeyAndBytes) {
  BufferedEvent event = Buffered(Id(0x1A2B3C8, 7), "orders");
  event.key.tables.emplace_back("other", "t2");  // A TRUNCATE names several.
  event.bytes = BufferedBytes(event);
  std::string record;
  ASSERT_THAT(EncodeRecord(event, &record), IsOk());
  BufferedEvent decoded;
  ASSERT_THAT(DecodeRecord(record, &decoded), IsOk());
  EXPECT_EQ(decoded.id, event.id);
  EXPECT_EQ(decoded.serialized, event.serialized);
  EXPECT_EQ(decoded.key.op, event.key.op);
  EXPECT_EQ(decoded.key.tables, event.key.tables);
  EXPECT_EQ(decoded.bytes, event.bytes) << "windows count a spilled event as an encoded one";
}

TEST(SpillRecordTest, RoundTripsTheAudience) {
  for (const std::string& audience : {std::string("consumer-a"), NoAudience()}) {
    BufferedEvent event = Buffered(Id(0x1A2B3C8, 7), "orders");
    event.key.audience = audience;
    event.bytes = BufferedBytes(event);
    std::string record;
    ASSERT_THAT(EncodeRecord(event, &record), IsOk());
    BufferedEvent decoded;
    ASSERT_THAT(DecodeRecord(record, &decoded), IsOk());
    EXPECT_EQ(decoded.key.audience, audience);
    EXPECT_EQ(decoded.key.op, event.key.op);
    EXPECT_EQ(decoded.key.tables, event.key.tables);
    EXPECT_EQ(decoded.serialized, event.serialized);
    EXPECT_EQ(decoded.bytes, event.bytes);
  }
}

TEST(SpillRecordTest, EveryFlippedBitAndEveryCutIsDataLoss) {
  std::string record;
  ASSERT_THAT(EncodeRecord(Buffered(Id(0x100, 1)), &record), IsOk());
  for (size_t byte = 0; byte < record.size(); ++byte) {
    for (int bit = 0; bit < 8; ++bit) {
      std::string damaged = record;
      damaged[byte] = static_cast<char>(damaged[byte] ^ (1 << bit));
      BufferedEvent out;
      EXPECT_THAT(DecodeRecord(damaged, &out), StatusIs(absl::StatusCode::kDataLoss))
          << "byte " << byte << " bit " << bit;
    }
  }
  for (size_t cut = 0; cut < record.size(); ++cut) {
    BufferedEvent out;
    EXPECT_THAT(DecodeRecord(record.substr(0, cut), &out),
                StatusIs(absl::StatusCode::kDataLoss))
        << "cut at " << cut;
  }
}

TEST(SpillRecordTest, Crc32cMatchesTheStandardCheckValue) {
  EXPECT_EQ(Crc32c("123456789"), 0xE3069283u);  // RFC 3720's CRC32C check value.
  EXPECT_EQ(Crc32c("6789", Crc32c("12345")), 0xE3069283u) << "continues across calls";
  EXPECT_EQ(Crc32cPortable("123456789"), 0xE3069283u);
  // The instruction and the table agree on every length and alignment.
  std::string data;
  for (int i = 0; i < 300; ++i) data.push_back(static_cast<char>(i * 131 + 7));
  for (size_t from = 0; from < 9; ++from) {
    for (size_t n = 0; n + from <= data.size(); n += 7) {
      const absl::string_view piece = absl::string_view(data).substr(from, n);
      ASSERT_EQ(Crc32c(piece, 0x1234u), Crc32cPortable(piece, 0x1234u)) << from << " " << n;
    }
  }
}

class SpillLogTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char pattern[] = "/tmp/walfeed-spill-XXXXXX";
    ASSERT_NE(::mkdtemp(pattern), nullptr);
    root_ = pattern;
  }
  void TearDown() override { std::filesystem::remove_all(root_); }

  std::unique_ptr<SpillLog> OpenLog(uint64_t segment_bytes) {
    absl::StatusOr<std::unique_ptr<SpillLog>> log =
        SpillLog::Open({root_ + "/stream-s", segment_bytes});
    EXPECT_THAT(log.status(), IsOk());
    return log.ok() ? std::move(*log) : nullptr;
  }
  static void AppendRange(SpillLog& log, uint32_t from, uint32_t to) {
    std::vector<BufferedEvent> events;
    for (uint32_t i = from; i < to; ++i) events.push_back(Buffered(Id(0x100, i)));
    std::vector<const BufferedEvent*> pointers;
    for (const BufferedEvent& e : events) pointers.push_back(&e);
    ASSERT_THAT(log.Append(pointers), IsOk());
  }
  size_t SegmentFiles() const {
    size_t n = 0;
    for (const auto& entry : std::filesystem::directory_iterator(root_ + "/stream-s")) {
      n += entry.path().extension() == ".spill";
    }
    return n;
  }

  std::string root_;
};

TEST_F(SpillLogTest, ReadsAfterAnyCursorAcrossSegmentsInOrder) {
  std::unique_ptr<SpillLog> log = OpenLog(/*segment_bytes=*/4096);
  for (uint32_t i = 0; i < 2000; i += 50) AppendRange(*log, i, i + 50);
  EXPECT_GT(SegmentFiles(), 10u);
  EXPECT_EQ(log->newest(), Id(0x100, 1999));
  for (uint32_t cursor : {0u, 1u, 499u, 1000u, 1998u}) {
    absl::StatusOr<std::vector<BufferedEvent>> read = log->ReadAfter(Id(0x100, cursor), 1 << 30);
    ASSERT_THAT(read.status(), IsOk());
    ASSERT_EQ(read->size(), 1999 - cursor);
    EXPECT_EQ(read->front().id, Id(0x100, cursor + 1));
    EXPECT_EQ(read->back().id, Id(0x100, 1999));
  }
  // Reads in bounded steps, the way a session catches up.
  EventId cursor;
  size_t total = 0;
  while (true) {
    absl::StatusOr<std::vector<BufferedEvent>> read = log->ReadAfter(cursor, 3000);
    ASSERT_THAT(read.status(), IsOk());
    if (read->empty()) break;
    EXPECT_EQ(read->front().id, Id(0x100, static_cast<uint32_t>(total)));
    total += read->size();
    cursor = read->back().id;
  }
  EXPECT_EQ(total, 2000u);
}

TEST_F(SpillLogTest, TrimDropsWholeSegmentsAtOrBelowTheFloorAndReapDeletesThem) {
  std::unique_ptr<SpillLog> log = OpenLog(4096);
  for (uint32_t i = 0; i < 1000; i += 50) AppendRange(*log, i, i + 50);
  const size_t files = SegmentFiles();
  const uint64_t bytes = log->bytes();
  log->TrimThrough(Id(0x100, 500));
  EXPECT_LT(log->bytes(), bytes);
  EXPECT_EQ(SegmentFiles(), files) << "files go only when reaped";
  log->Reap();
  EXPECT_LT(SegmentFiles(), files);
  absl::StatusOr<std::vector<BufferedEvent>> read = log->ReadAfter(Id(0x100, 500), 1 << 30);
  ASSERT_THAT(read.status(), IsOk());
  EXPECT_EQ(read->front().id, Id(0x100, 501)) << "what is above the floor stays readable";
  log->TrimThrough(Id(0x100, 999));
  log->Reap();
  EXPECT_EQ(log->bytes(), 0u);
  EXPECT_EQ(SegmentFiles(), 0u) << "the segment being written goes too when idle";
  AppendRange(*log, 1000, 1010);  // And appending starts a new one.
  ASSERT_THAT(log->ReadAfter(Id(0x100, 999), 1 << 30).status(), IsOk());
  EXPECT_EQ(IdsOf(*log->ReadAfter(Id(0x100, 999), 1 << 30)).size(), 10u);
}

TEST_F(SpillLogTest, ADamagedSegmentIsDataLossNeverServed) {
  std::unique_ptr<SpillLog> log = OpenLog(1 << 20);
  AppendRange(*log, 0, 100);
  std::string path;
  for (const auto& entry : std::filesystem::directory_iterator(root_ + "/stream-s")) {
    path = entry.path();
  }
  {
    std::fstream file(path, std::ios::in | std::ios::out | std::ios::binary);
    file.seekp(static_cast<std::streamoff>(log->bytes() / 2));
    file.put('\x5a');
    file.put('\xa5');
  }
  absl::StatusOr<std::vector<BufferedEvent>> read = log->ReadAfter(EventId{}, 1 << 30);
  EXPECT_THAT(read.status(), StatusIs(absl::StatusCode::kDataLoss));
  EXPECT_THAT(std::string(read.status().message()), ::testing::HasSubstr(path));
  // A truncated file (another process, a full disk) is caught as well.
  ASSERT_EQ(::truncate(path.c_str(), static_cast<off_t>(log->bytes() - 3)), 0);
  EXPECT_THAT(log->ReadAfter(Id(0x100, 98), 1 << 30).status(),
              StatusIs(absl::StatusCode::kDataLoss));
  log->Clear();
  log->Reap();
  EXPECT_EQ(SegmentFiles(), 0u);
  AppendRange(*log, 100, 110);
  ASSERT_THAT(log->ReadAfter(EventId{}, 1 << 30).status(), IsOk());
}

TEST_F(SpillLogTest, OpenDeletesWhatAnEarlierProcessLeft) {
  {
    std::unique_ptr<SpillLog> log = OpenLog(4096);
    AppendRange(*log, 0, 200);
    ASSERT_GT(SegmentFiles(), 0u);
    // Simulate a crash: the files stay behind.
    std::filesystem::copy(root_ + "/stream-s", root_ + "/kept");
  }
  std::filesystem::remove_all(root_ + "/stream-s");
  std::filesystem::rename(root_ + "/kept", root_ + "/stream-s");
  std::ofstream(root_ + "/stream-s/notes.txt") << "not ours";
  ASSERT_GT(SegmentFiles(), 0u);
  std::unique_ptr<SpillLog> log = OpenLog(4096);
  EXPECT_EQ(SegmentFiles(), 0u);
  EXPECT_TRUE(std::filesystem::exists(root_ + "/stream-s/notes.txt")) << "only segments go";
  EXPECT_EQ(log->bytes(), 0u);
}

TEST_F(SpillLogTest, OpenExplainsADirectoryItCannotUse) {
  std::ofstream(root_ + "/file") << "x";
  absl::StatusOr<std::unique_ptr<SpillLog>> log = SpillLog::Open({root_ + "/file", 4096});
  EXPECT_THAT(log.status(), StatusIs(absl::StatusCode::kFailedPrecondition));
  EXPECT_THAT(std::string(log.status().message()), ::testing::HasSubstr("not a directory"));
}

}  // namespace
}  // namespace walfeed::server::spill
