#include "frame_count.h"

#include <gtest/gtest.h>

#include <string>
#include <string_view>
#include <vector>

#include "walfeed/v1/change_stream.pb.h"

namespace walfeed::bench {
namespace {

std::string EventsFrame(int n) {
  v1::SubscribeResponse frame;
  for (int i = 0; i < n; ++i) {
    v1::ChangeEvent* event = frame.mutable_events()->add_events();
    event->set_id("0/16B3748:" + std::to_string(i));
    event->set_commit_lsn(0x16B3748);
    event->set_table("t");
    v1::ColumnValue* column = event->add_new_values();
    column->set_name("payload");
    column->set_text(std::string(300 * (i % 3), 'x'));  // Lengths of 1 and 2 bytes.
  }
  frame.mutable_events()->set_passed("0/16B3748:9");
  return frame.SerializeAsString();
}

// Splits `bytes` into pieces of `size` bytes (the last one shorter).
std::vector<std::string_view> Split(const std::string& bytes, size_t size) {
  std::vector<std::string_view> pieces;
  for (size_t at = 0; at < bytes.size(); at += size) {
    pieces.push_back(std::string_view(bytes).substr(at, size));
  }
  return pieces;
}

TEST(FrameCountTest, CountsTheEventsOfAFrameSplitAnywhere) {
  const std::string bytes = EventsFrame(7);
  for (size_t size : {size_t{1}, size_t{2}, size_t{5}, size_t{64}, bytes.size()}) {
    const FrameCount counted = CountFrameEvents(Split(bytes, size));
    EXPECT_TRUE(counted.valid) << size;
    EXPECT_TRUE(counted.events) << size;
    EXPECT_EQ(counted.count, 7u) << size;
    EXPECT_EQ(counted.last_id, "0/16B3748:6") << size;
  }
}

TEST(FrameCountTest, OtherFramesCountNothing) {
  v1::SubscribeResponse frame;
  frame.mutable_progress()->set_server_wal_lsn("0/16B3748");
  frame.mutable_progress()->set_unacked_events(3);
  const std::string bytes = frame.SerializeAsString();
  const FrameCount counted = CountFrameEvents({bytes});
  EXPECT_TRUE(counted.valid);
  EXPECT_FALSE(counted.events);
  EXPECT_EQ(counted.count, 0u);
}

TEST(FrameCountTest, ATruncatedFrameIsInvalidAtEveryCut) {
  const std::string bytes = EventsFrame(3);
  for (size_t cut = 1; cut < bytes.size(); ++cut) {
    EXPECT_FALSE(CountFrameEvents({std::string_view(bytes).substr(0, cut)}).valid) << cut;
  }
}

TEST(FrameCountTest, GarbageIsInvalidNotACrash) {
  const std::string ten_continuations(11, '\xff');
  EXPECT_FALSE(CountFrameEvents({ten_continuations}).valid);
  const std::string group_tag("\x13", 1);  // Field 2, wire type 3 (start group).
  EXPECT_FALSE(CountFrameEvents({group_tag}).valid);
}

}  // namespace
}  // namespace walfeed::bench
