// SessionFramer: started first, batches bounded by count and bytes, the unacked
// window, filters moving the cursor, progress on its interval. Explicit times.
#include "server/session_framer.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/server/stream_events.h"
#include "tests/testing/status_matchers.h"

namespace walfeed::server {
namespace {

using ::testing::ElementsAre;
using ::testing::IsEmpty;
using ::walfeed::testing::Buffered;
using ::walfeed::testing::FrameIds;
using ::walfeed::testing::Id;
using ::walfeed::testing::IsOk;

const absl::Time kT0 = absl::FromUnixSeconds(1'800'000'000);

class SessionFramerTest : public ::testing::Test {
 protected:
  void Fill(uint64_t commit, uint32_t count, const std::string& table = "t") {
    for (uint32_t i = 0; i < count; ++i) {
      ASSERT_THAT(buffer_.Append(Buffered(Id(commit, i), table)), IsOk());
    }
  }
  walfeed::v1::SubscribeResponse Next(SessionFramer& framer, absl::Time now, bool* sent) {
    std::string frame;
    *sent = framer.Next(buffer_, context_, now, &frame);
    walfeed::v1::SubscribeResponse response;
    if (*sent) {
      EXPECT_TRUE(response.ParseFromString(frame));
    }
    return response;
  }
  std::vector<std::string> NextIds(SessionFramer& framer, absl::Time now = kT0) {
    std::string frame;
    if (!framer.Next(buffer_, context_, now, &frame)) return {};
    return FrameIds(frame);
  }

  void OnlyTable(const std::string& pattern) {
    google::protobuf::RepeatedPtrField<std::string> tables;
    tables.Add(std::string(pattern));
    absl::StatusOr<EventFilter> filter = EventFilter::Create(tables, {});
    ASSERT_THAT(filter.status(), IsOk());
    options_.filter = *filter;
  }

  StreamBuffer buffer_;
  SessionFramer::Context context_{"s-1", EventId{}, "slot_a",
                                  [] { return replication::Lsn(0x5000); }};
  SessionOptions options_;
};

TEST_F(SessionFramerTest, StartedComesFirstAndNamesTheStart) {
  Fill(0x100, 2);
  SessionFramer framer(options_, Id(0x100, 0), kT0);
  bool sent = false;
  walfeed::v1::SubscribeResponse first = Next(framer, kT0, &sent);
  ASSERT_TRUE(sent);
  ASSERT_TRUE(first.has_started());
  EXPECT_EQ(first.started().session_id(), "s-1");
  EXPECT_EQ(first.started().start_after(), Id(0x100, 0).ToString());
  EXPECT_EQ(first.started().slot().name(), "slot_a");
  EXPECT_THAT(NextIds(framer), ElementsAre(Id(0x100, 1).ToString()));
}

TEST_F(SessionFramerTest, BatchesAreBoundedByCountAndBytes) {
  Fill(0x100, 10);
  options_.limits.max_batch_events = 4;
  SessionFramer framer(options_, EventId{}, kT0);
  ASSERT_THAT(NextIds(framer), IsEmpty());  // started
  EXPECT_EQ(NextIds(framer).size(), 4u);
  options_.limits.max_batch_bytes = static_cast<uint32_t>(Buffered(Id(0x100, 9)).bytes * 2);
  EXPECT_EQ(NextIds(framer).size(), 2u) << "two events fill the byte bound";
  options_.limits.max_batch_bytes = 1;
  EXPECT_EQ(NextIds(framer).size(), 1u) << "one event larger than the bound still goes, alone";
}

TEST_F(SessionFramerTest, TheUnackedWindowStopsDeliveryUntilAcked) {
  Fill(0x100, 10);
  options_.limits.max_unacked_events = 3;
  SessionFramer framer(options_, EventId{}, kT0);
  ASSERT_THAT(NextIds(framer), IsEmpty());
  EXPECT_THAT(NextIds(framer), ElementsAre(Id(0x100, 0).ToString(), Id(0x100, 1).ToString(),
                                           Id(0x100, 2).ToString()));
  EXPECT_THAT(NextIds(framer), IsEmpty()) << "window full";
  EXPECT_EQ(framer.unacked_events(), 3u);
  framer.Acked(Id(0x100, 1));
  EXPECT_EQ(framer.unacked_events(), 1u);
  EXPECT_THAT(NextIds(framer), ElementsAre(Id(0x100, 3).ToString(), Id(0x100, 4).ToString()));
}

TEST_F(SessionFramerTest, FilteredEventsMoveTheCursorWithoutFillingTheWindow) {
  Fill(0x100, 3, "skipped");
  Fill(0x200, 2, "wanted");
  ASSERT_NO_FATAL_FAILURE(OnlyTable("public.wanted"));
  SessionFramer framer(options_, EventId{}, kT0);
  ASSERT_THAT(NextIds(framer), IsEmpty());
  EXPECT_THAT(NextIds(framer), ElementsAre(Id(0x200, 0).ToString(), Id(0x200, 1).ToString()));
  EXPECT_EQ(framer.cursor(), Id(0x200, 1));
  EXPECT_EQ(framer.unacked_events(), 2u);
}

TEST_F(SessionFramerTest, ABatchCutShortByTheFilterSaysHowFarItPassed) {
  Fill(0x100, 2, "wanted");
  Fill(0x200, 3, "skipped");
  ASSERT_NO_FATAL_FAILURE(OnlyTable("public.wanted"));
  SessionFramer framer(options_, EventId{}, kT0);
  bool sent = false;
  Next(framer, kT0, &sent);  // started
  walfeed::v1::SubscribeResponse batch = Next(framer, kT0, &sent);
  ASSERT_TRUE(sent);
  ASSERT_EQ(batch.events().events_size(), 2);
  EXPECT_EQ(batch.events().passed(), Id(0x200, 2).ToString()) << "past the filtered events";
  // Nothing matches after it: a progress frame carries the position.
  Fill(0x300, 2, "skipped");
  EXPECT_THAT(NextIds(framer, kT0 + absl::Seconds(1)), IsEmpty());
  walfeed::v1::SubscribeResponse progress = Next(framer, kT0 + absl::Seconds(10), &sent);
  ASSERT_TRUE(sent);
  EXPECT_EQ(progress.progress().passed(), Id(0x300, 1).ToString());
  EXPECT_EQ(framer.unacked_events(), 2u) << "filtered events are not in the window";
}

TEST_F(SessionFramerTest, AudienceBoundEventsReachOnlyTheirConsumer) {
  // A change for all, a watermark for none, a READ event for consumer "a".
  ASSERT_THAT(buffer_.Append(Buffered(Id(0x100, 0))), IsOk());
  BufferedEvent watermark = Buffered(Id(0x200, 0));
  watermark.key.audience = NoAudience();
  ASSERT_THAT(buffer_.Append(std::move(watermark)), IsOk());
  BufferedEvent read = Buffered(Id(0x200, 1));
  read.key.audience = "a";
  ASSERT_THAT(buffer_.Append(std::move(read)), IsOk());

  SessionFramer a(options_, EventId{}, kT0, "a");
  ASSERT_THAT(NextIds(a), IsEmpty());  // started
  EXPECT_THAT(NextIds(a), ElementsAre(Id(0x100, 0).ToString(), Id(0x200, 1).ToString()));

  SessionFramer b(options_, EventId{}, kT0, "b");
  bool sent = false;
  Next(b, kT0, &sent);  // started
  walfeed::v1::SubscribeResponse batch = Next(b, kT0, &sent);
  ASSERT_TRUE(sent);
  ASSERT_EQ(batch.events().events_size(), 1);
  EXPECT_EQ(batch.events().passed(), Id(0x200, 1).ToString()) << "b may ack past a's rows";
  EXPECT_EQ(b.unacked_events(), 1u);

  // An ephemeral session named "a" is not consumer a.
  options_.ephemeral = true;
  SessionFramer ephemeral(options_, EventId{}, kT0, "a");
  ASSERT_THAT(NextIds(ephemeral), IsEmpty());  // started
  EXPECT_THAT(NextIds(ephemeral), ElementsAre(Id(0x100, 0).ToString()));
}

// A compact session: the batch that first needs a shape carries it, later
// ones do not; an event converted before compact sessions existed goes out
// whole. A full-form session gets full events and no shapes.
TEST_F(SessionFramerTest, CompactSessionsGetEachShapeOnceAndFullSessionsNone) {
  auto relation = std::make_shared<replication::RelationInfo>();
  relation->schema = "public";
  relation->table = "t";
  relation->columns = {replication::ColumnInfo{"id", 23, -1, true, "int4"},
                       replication::ColumnInfo{"v", 25, -1, false, "text"}};
  EventEncoder encoder;
  const auto insert = [&](uint32_t index, FormMask forms) {
    replication::ChangeEvent event;
    event.id = Id(0x100, index);
    event.op = replication::ChangeEvent::Op::kInsert;
    event.relation = relation;
    for (const char* text : {"7", "seven"}) {
      event.new_tuple.columns.push_back(
          {replication::pgoutput::TupleValue::Kind::kText, std::string(text)});
    }
    ASSERT_THAT(buffer_.Append(encoder.Encode(event, forms)), IsOk());
  };
  const FormMask compact_forms = MaskOf(EventForm{true, ValueForm::kText});
  insert(0, 0);  // Converted before a compact session subscribed.
  insert(1, compact_forms);
  insert(2, compact_forms);

  options_.form.compact = true;
  options_.limits.max_batch_events = 2;
  SessionFramer compact(options_, EventId{}, kT0);
  bool sent = false;
  Next(compact, kT0, &sent);  // started
  walfeed::v1::SubscribeResponse first = Next(compact, kT0, &sent);
  ASSERT_EQ(first.events().events_size(), 2);
  EXPECT_EQ(first.events().events(0).relation_ref(), 0u);
  EXPECT_EQ(first.events().events(0).new_values(0).name(), "id");
  const walfeed::v1::ChangeEvent& small = first.events().events(1);
  ASSERT_NE(small.relation_ref(), 0u);
  ASSERT_EQ(small.new_values_size(), 2);
  EXPECT_EQ(small.new_values(0).name(), "");
  EXPECT_EQ(small.new_values(1).text(), "seven");
  ASSERT_EQ(first.events().relations_size(), 1);
  const walfeed::v1::RelationShape& shape = first.events().relations(0);
  EXPECT_EQ(shape.ref(), small.relation_ref());
  EXPECT_EQ(shape.table(), "t");
  ASSERT_EQ(shape.columns_size(), 2);
  EXPECT_EQ(shape.columns(1).name(), "v");
  EXPECT_TRUE(shape.columns(0).key());
  walfeed::v1::SubscribeResponse second = Next(compact, kT0, &sent);
  ASSERT_EQ(second.events().events_size(), 1);
  EXPECT_EQ(second.events().events(0).relation_ref(), small.relation_ref());
  EXPECT_EQ(second.events().relations_size(), 0) << "sent once per session";
  // The window counts what was sent: the compact events cost less.
  EXPECT_LT(compact.unacked_bytes(), 3 * buffer_.After(EventId{})->bytes);

  options_.form.compact = false;
  options_.limits.max_batch_events = 10;
  SessionFramer full(options_, EventId{}, kT0);
  Next(full, kT0, &sent);  // started
  walfeed::v1::SubscribeResponse all = Next(full, kT0, &sent);
  ASSERT_EQ(all.events().events_size(), 3);
  for (const walfeed::v1::ChangeEvent& event : all.events().events()) {
    EXPECT_EQ(event.relation_ref(), 0u);
    EXPECT_EQ(event.new_values(1).name(), "v");
  }
  EXPECT_EQ(all.events().relations_size(), 0);
}

// A typed session gets typed values in every row event: from the buffer when
// the event was converted to its form, converted for it otherwise. A compact
// shape held back by the byte limit comes with the batch that sends its event.
TEST_F(SessionFramerTest, TypedSessionsGetTypedValuesWhateverTheEventWasConvertedTo) {
  auto relation = std::make_shared<replication::RelationInfo>();
  relation->schema = "public";
  relation->table = "t";
  relation->columns = {replication::ColumnInfo{"id", 23, -1, true, "int4"},
                       replication::ColumnInfo{"on", 16, -1, false, "bool"}};
  EventEncoder encoder;
  const EventForm compact_typed{true, ValueForm::kTyped};
  for (uint32_t index = 0; index < 3; ++index) {
    replication::ChangeEvent event;
    event.id = Id(0x100, index);
    event.op = replication::ChangeEvent::Op::kInsert;
    event.relation = relation;
    for (const char* text : {"7", "t"}) {
      event.new_tuple.columns.push_back(
          {replication::pgoutput::TupleValue::Kind::kText, std::string(text)});
    }
    // The first event before any typed session, the others for it.
    ASSERT_THAT(buffer_.Append(encoder.Encode(event, index == 0 ? 0 : MaskOf(compact_typed))),
                IsOk());
  }
  options_.form = compact_typed;
  options_.limits.max_batch_bytes = 1;  // One event per batch.
  SessionFramer framer(options_, EventId{}, kT0);
  bool sent = false;
  Next(framer, kT0, &sent);  // started
  for (uint32_t index = 0; index < 3; ++index) {
    walfeed::v1::SubscribeResponse frame = Next(framer, kT0, &sent);
    ASSERT_EQ(frame.events().events_size(), 1);
    const walfeed::v1::ChangeEvent& event = frame.events().events(0);
    EXPECT_EQ(event.new_values(0).typed().int_value(), 7) << index;
    EXPECT_TRUE(event.new_values(1).typed().bool_value()) << index;
    EXPECT_EQ(event.new_values(0).text(), "") << index;
    // The unconverted event goes out in the full form, the others compact,
    // and the first compact one brings its shape.
    EXPECT_EQ(event.relation_ref() != 0, index > 0) << index;
    EXPECT_EQ(frame.events().relations_size(), index == 1 ? 1 : 0) << index;
  }
}

TEST_F(SessionFramerTest, ASessionThatPassedNothingReportsNoPassedPosition) {
  SessionFramer framer(options_, Id(0x80, 2), kT0);
  bool sent = false;
  Next(framer, kT0, &sent);  // started
  walfeed::v1::SubscribeResponse progress = Next(framer, kT0 + absl::Seconds(10), &sent);
  ASSERT_TRUE(progress.has_progress());
  EXPECT_EQ(progress.progress().passed(), "") << "its start is not something it passed";
}

TEST_F(SessionFramerTest, ABatchEndingAtItsLastEventCarriesNoPassedPosition) {
  Fill(0x100, 3);
  SessionFramer framer(options_, EventId{}, kT0);
  bool sent = false;
  Next(framer, kT0, &sent);
  EXPECT_EQ(Next(framer, kT0, &sent).events().passed(), "");
}

TEST_F(SessionFramerTest, AnEphemeralSessionHasNoWindow) {
  Fill(0x100, 20);
  options_.limits.max_unacked_events = 3;
  options_.ephemeral = true;
  SessionFramer framer(options_, EventId{}, kT0);
  ASSERT_THAT(NextIds(framer), IsEmpty());
  EXPECT_EQ(NextIds(framer).size(), 20u);
  EXPECT_EQ(framer.unacked_events(), 0u);
}

TEST_F(SessionFramerTest, ProgressIsDueOnlyAfterTheIntervalWithoutFrames) {
  options_.limits.progress_interval = absl::Seconds(5);
  Fill(0x100, 1);
  SessionFramer framer(options_, EventId{}, kT0);
  bool sent = false;
  Next(framer, kT0, &sent);  // started
  ASSERT_THAT(NextIds(framer, kT0 + absl::Seconds(1)), ElementsAre(Id(0x100, 0).ToString()));
  Next(framer, kT0 + absl::Seconds(5), &sent);
  EXPECT_FALSE(sent) << "an events frame 4 s ago";
  EXPECT_FALSE(framer.ProgressDue(kT0 + absl::Seconds(5)));
  EXPECT_TRUE(framer.ProgressDue(kT0 + absl::Seconds(6)));
  context_.checkpoint = Id(0x80, 0);
  walfeed::v1::SubscribeResponse progress = Next(framer, kT0 + absl::Seconds(6), &sent);
  ASSERT_TRUE(sent);
  ASSERT_TRUE(progress.has_progress());
  EXPECT_EQ(progress.progress().last_delivered(), Id(0x100, 0).ToString());
  EXPECT_EQ(progress.progress().unacked_events(), 1u);
  EXPECT_EQ(progress.progress().checkpoint(), Id(0x80, 0).ToString());
  EXPECT_EQ(progress.progress().server_wal_lsn(), "0/5000");
  EXPECT_EQ(progress.progress().lag_bytes(), 0x5000u - 0x80u);
}

}  // namespace
}  // namespace walfeed::server
