#include "server/events_frame.h"

#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "walfeed/v1/change_stream.pb.h"

namespace walfeed::server {
namespace {

// A ChangeEvent whose serialized size grows with `columns` and `text_size`, so
// lengths cross the one-, two- and three-byte varint boundaries.
walfeed::v1::ChangeEvent MakeEvent(uint64_t lsn, uint32_t index, int columns, size_t text_size) {
  walfeed::v1::ChangeEvent event;
  event.set_id("0/" + std::to_string(lsn) + ":" + std::to_string(index));
  event.set_commit_lsn(lsn);
  event.set_index(index);
  event.set_op(walfeed::v1::OPERATION_UPDATE);
  event.set_schema("public");
  event.set_table("orders");
  for (int c = 0; c < columns; ++c) {
    walfeed::v1::ColumnValue* column = event.add_new_values();
    column->set_name("c" + std::to_string(c));
    column->set_kind(walfeed::v1::VALUE_KIND_TEXT);
    column->set_text(std::string(text_size, static_cast<char>('a' + c % 26)));
  }
  return event;
}

// What gRPC would send if the runtime held parsed events: the reference.
std::string Reference(const std::vector<walfeed::v1::ChangeEvent>& events,
                      const std::string& passed = "") {
  walfeed::v1::SubscribeResponse response;
  walfeed::v1::EventBatch* batch = response.mutable_events();
  for (const walfeed::v1::ChangeEvent& event : events) *batch->add_events() = event;
  batch->set_passed(passed);
  return response.SerializeAsString();
}

std::string Composed(const std::vector<walfeed::v1::ChangeEvent>& events,
                     const std::string& passed = "") {
  std::vector<std::string> serialized;
  for (const walfeed::v1::ChangeEvent& event : events) {
    serialized.push_back(event.SerializeAsString());
  }
  std::vector<const std::string*> pointers;
  for (const std::string& bytes : serialized) pointers.push_back(&bytes);
  std::string frame = "stale bytes that must be replaced";
  ComposeEventsFrame(pointers, &frame, passed);
  return frame;
}

TEST(EventsFrameTest, OneSmallEventIsWhatSerializingGives) {
  const std::vector<walfeed::v1::ChangeEvent> events = {MakeEvent(100, 0, 1, 3)};
  EXPECT_EQ(Composed(events), Reference(events));
}

TEST(EventsFrameTest, APassedPositionIsWhatSerializingGives) {
  const std::vector<walfeed::v1::ChangeEvent> events = {MakeEvent(100, 0, 2, 10),
                                                        MakeEvent(100, 1, 300, 1)};
  EXPECT_EQ(Composed(events, "0/64:7"), Reference(events, "0/64:7"));
  walfeed::v1::SubscribeResponse parsed;
  ASSERT_TRUE(parsed.ParseFromString(Composed(events, "0/64:7")));
  EXPECT_EQ(parsed.events().passed(), "0/64:7");
  EXPECT_EQ(parsed.events().events_size(), 2);
}

TEST(EventsFrameTest, AnEmptyEventIsStillAnElement) {
  const std::vector<walfeed::v1::ChangeEvent> events = {walfeed::v1::ChangeEvent(),
                                                        MakeEvent(1, 0, 0, 0)};
  const std::string frame = Composed(events);
  EXPECT_EQ(frame, Reference(events));
  walfeed::v1::SubscribeResponse parsed;
  ASSERT_TRUE(parsed.ParseFromString(frame));
  ASSERT_TRUE(parsed.has_events());
  EXPECT_EQ(parsed.events().events_size(), 2);
}

TEST(EventsFrameTest, LengthsAcrossVarintBoundaries) {
  // Event sizes around 127/128 and 16383/16384 bytes, batch sizes beyond 2 MiB.
  for (size_t text : {90, 100, 110, 120, 16300, 16350, 16400, 300000}) {
    for (int count : {1, 2, 9}) {
      std::vector<walfeed::v1::ChangeEvent> events;
      for (int i = 0; i < count; ++i) events.push_back(MakeEvent(7, i, 1, text + i));
      EXPECT_EQ(Composed(events), Reference(events)) << text << " x " << count;
    }
  }
}

TEST(EventsFrameTest, RandomBatchesParseBackToTheSameEvents) {
  std::mt19937 random(20261130);
  for (int round = 0; round < 200; ++round) {
    std::vector<walfeed::v1::ChangeEvent> events;
    const int count = std::uniform_int_distribution<int>(1, 40)(random);
    for (int i = 0; i < count; ++i) {
      events.push_back(MakeEvent(std::uniform_int_distribution<uint64_t>(1, 1ull << 40)(random), i,
                                 std::uniform_int_distribution<int>(0, 12)(random),
                                 std::uniform_int_distribution<size_t>(0, 700)(random)));
    }
    const std::string frame = Composed(events);
    ASSERT_EQ(frame, Reference(events)) << "round " << round;
    walfeed::v1::SubscribeResponse parsed;
    ASSERT_TRUE(parsed.ParseFromString(frame));
    ASSERT_EQ(parsed.events().events_size(), count);
    for (int i = 0; i < count; ++i) {
      EXPECT_EQ(parsed.events().events(i).SerializeAsString(), events[i].SerializeAsString());
    }
  }
}

}  // namespace
}  // namespace walfeed::server
