#include "replication/event_id.h"

#include <algorithm>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/testing/status_matchers.h"

namespace walfeed::replication {
namespace {

using ::testing::HasSubstr;
using ::walfeed::testing::IsOk;
using ::walfeed::testing::StatusIs;

TEST(EventIdTest, ParsesAndFormats) {
  absl::StatusOr<EventId> id = EventId::Parse("0/1A2B3C8:0");
  ASSERT_THAT(id, IsOk());
  EXPECT_EQ(id->commit_lsn.value(), 0x1A2B3C8u);
  EXPECT_EQ(id->index, 0u);
  EXPECT_EQ(id->ToString(), "0/1A2B3C8:0");
  EXPECT_EQ(EventId::Parse("16/b374d848:4294967295")->ToString(), "16/B374D848:4294967295");
  EXPECT_EQ(EventId::Parse("0/01A2B3C8:7")->ToString(), "0/1A2B3C8:7");
}

TEST(EventIdTest, NoEventIsEmptyTextOnlyWhereAsked) {
  EXPECT_EQ(EventId{}.ToStringOrEmpty(), "");
  EXPECT_EQ(EventId{}.ToString(), "0/0:0");
  EXPECT_EQ((EventId{Lsn(0), 1}).ToStringOrEmpty(), "0/0:1");
  EXPECT_EQ((EventId{Lsn(0x1A2B3C8), 0}).ToStringOrEmpty(), "0/1A2B3C8:0");
}

TEST(EventIdTest, FormatsEveryIndexWidthAsDecimal) {
  for (uint32_t index : {0u, 9u, 10u, 99u, 100u, 65535u, 1000000000u, 4294967295u}) {
    const EventId id{Lsn(0xFFFFFFFF00000001u), index};
    EXPECT_EQ(id.ToString(), "FFFFFFFF/1:" + std::to_string(index));
    EXPECT_EQ(*EventId::Parse(id.ToString()), id);
  }
}

TEST(EventIdTest, FormatToWritesTheLongestIdWithinItsBound) {
  const EventId longest{Lsn(0xFFFFFFFFFFFFFFFFu), 4294967295u};
  char text[EventId::kMaxTextSize];
  char* end = longest.FormatTo(text);
  EXPECT_EQ(std::string(text, end), "FFFFFFFF/FFFFFFFF:4294967295");
  EXPECT_EQ(static_cast<size_t>(end - text), EventId::kMaxTextSize);
  const EventId shortest{Lsn(0), 0};
  EXPECT_EQ(std::string(text, shortest.FormatTo(text)), shortest.ToString());
}

TEST(EventIdTest, RejectsMalformedInputWithTheExpectedForm) {
  for (const char* bad :
       {"", ":", "0/1A2B3C8", "0/1A2B3C8:", ":0", "0/1A2B3C8:-1", "0/1A2B3C8:+1",
        "0/1A2B3C8: 1", "0/1A2B3C8:1 ", "0/1A2B3C8:1x", "0/1A2B3C8:0x1", "x/1:0",
        "0/1A2B3C8:1:2", "0/1A2B3C8:4294967296", "0/1A2B3C8:99999999999",
        "0/1A2B3C8:00000000001"}) {
    EXPECT_THAT(EventId::Parse(bad),
                StatusIs(absl::StatusCode::kInvalidArgument,
                         HasSubstr("expected <commit_lsn>:<index> like 0/1A2B3C8:0")))
        << bad;
  }
}

TEST(EventIdTest, OrdersByCommitLsnThenIndex) {
  std::vector<EventId> ids = {*EventId::Parse("1/0:0"), *EventId::Parse("0/10:2"),
                              *EventId::Parse("0/9:5"), *EventId::Parse("0/10:10"),
                              *EventId::Parse("0/10:9")};
  std::sort(ids.begin(), ids.end());
  std::vector<std::string> text;
  for (const EventId& id : ids) text.push_back(id.ToString());
  EXPECT_THAT(text, ::testing::ElementsAre("0/9:5", "0/10:2", "0/10:9", "0/10:10", "1/0:0"));
  EXPECT_EQ(*EventId::Parse("0/10:1"), *EventId::Parse("0/00000010:1"));
  EXPECT_LE(*EventId::Parse("0/10:1"), *EventId::Parse("0/10:1"));
  EXPECT_NE(*EventId::Parse("0/10:1"), *EventId::Parse("0/10:2"));
}

TEST(EventIdTest, QuotesNonPrintableInput) {
  EXPECT_THAT(EventId::Parse(std::string("0/1:\n", 5)),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("\\n")));
}

}  // namespace
}  // namespace walfeed::replication
