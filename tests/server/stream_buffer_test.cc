// StreamBuffer: id order, reads by cursor, trims by floor, counts bytes.
#include "server/stream_buffer.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/server/stream_events.h"
#include "tests/testing/status_matchers.h"

namespace walfeed::server {
namespace {

using ::walfeed::testing::Buffered;
using ::walfeed::testing::Id;
using ::walfeed::testing::IsOk;
using ::walfeed::testing::StatusIs;

TEST(StreamBufferTest, ReadsAfterACursorInIdOrder) {
  StreamBuffer buffer;
  for (EventId id : {Id(0x100, 0), Id(0x100, 1), Id(0x200, 0)}) {
    ASSERT_THAT(buffer.Append(Buffered(id)), IsOk());
  }
  EXPECT_EQ(buffer.After(EventId{})->id, Id(0x100, 0));
  EXPECT_EQ(buffer.After(Id(0x100, 0))->id, Id(0x100, 1));
  EXPECT_EQ(buffer.After(Id(0x100, 5))->id, Id(0x200, 0)) << "a cursor between events";
  EXPECT_EQ(buffer.After(Id(0x200, 0)), buffer.end());
  EXPECT_EQ(buffer.newest(), Id(0x200, 0));
}

TEST(StreamBufferTest, RefusesAnIdThatIsNotNewer) {
  StreamBuffer buffer(Id(0x100, 3));
  EXPECT_THAT(buffer.Append(Buffered(Id(0x100, 3))),
              StatusIs(absl::StatusCode::kFailedPrecondition));
  ASSERT_THAT(buffer.Append(Buffered(Id(0x100, 4))), IsOk());
  EXPECT_THAT(buffer.Append(Buffered(Id(0x100, 4))),
              StatusIs(absl::StatusCode::kFailedPrecondition));
  EXPECT_EQ(buffer.size(), 1u);
}

TEST(StreamBufferTest, TrimDropsEverythingAtOrBelowTheFloorAndCountsBytes) {
  StreamBuffer buffer;
  size_t total = 0;
  for (uint32_t i = 0; i < 5; ++i) {
    BufferedEvent event = Buffered(Id(0x100, i));
    total += event.bytes;
    ASSERT_THAT(buffer.Append(std::move(event)), IsOk());
  }
  EXPECT_EQ(buffer.bytes(), total);
  EXPECT_FALSE(buffer.HasRoom(total));
  EXPECT_TRUE(buffer.HasRoom(total + 1));
  buffer.TrimThrough(Id(0x100, 2));
  EXPECT_EQ(buffer.size(), 2u);
  EXPECT_EQ(buffer.trimmed(), Id(0x100, 2));
  EXPECT_EQ(buffer.After(EventId{})->id, Id(0x100, 3));
  buffer.TrimThrough(Id(0x900, 0));
  EXPECT_EQ(buffer.size(), 0u);
  EXPECT_EQ(buffer.bytes(), 0u);
  EXPECT_EQ(buffer.trimmed(), Id(0x100, 4)) << "the newest event dropped, not the floor";
}

}  // namespace
}  // namespace walfeed::server
