// BackfillWindows: which chunk rows survive the window between a chunk's low
// and high watermarks, driven with the events a stream delivers.
#include "replication/backfill_window.h"

#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace walfeed::replication {
namespace {

using ::testing::ElementsAre;
using ::testing::IsEmpty;
using Kind = pgoutput::TupleValue::Kind;

pgoutput::TupleData Row(const std::string& id, const std::string& v) {
  return {{{Kind::kText, id}, {Kind::kText, v}}};
}

std::shared_ptr<RelationInfo> Relation(uint32_t oid) {
  auto relation = std::make_shared<RelationInfo>();
  relation->relation_id = oid;
  relation->schema = "public";
  relation->table = "t";
  relation->columns = {{"id", 23, -1, true, "int4"}, {"v", 25, -1, false, "text"}};
  return relation;
}

ChangeEvent Message(const std::string& prefix, const std::string& content) {
  ChangeEvent event;
  event.op = ChangeEvent::Op::kMessage;
  event.message_prefix = prefix;
  event.message_content = content;
  return event;
}

ChangeEvent Mark(WatermarkKind kind, const std::string& token) {
  return Message(std::string(kWatermarkPrefix), WatermarkContent(kind, token));
}

ChangeEvent Change(ChangeEvent::Op op, std::shared_ptr<const RelationInfo> relation,
                   const std::string& id) {
  ChangeEvent event;
  event.op = op;
  event.relation = std::move(relation);
  if (op == ChangeEvent::Op::kDelete) {
    event.old_kind = pgoutput::OldTupleKind::kKey;
    event.old_tuple = {{{Kind::kText, id}, {Kind::kNull, ""}}};
  } else {
    event.new_tuple = Row(id, "changed");
  }
  return event;
}

std::vector<std::string> Ids(const std::vector<pgoutput::TupleData>& rows) {
  std::vector<std::string> ids;
  for (const pgoutput::TupleData& row : rows) ids.push_back(row.columns[0].data);
  return ids;
}

class BackfillWindowsTest : public ::testing::Test {
 protected:
  // Expects chunk "c1" of table 100 with rows 1..5 set.
  void ExpectChunk(const std::string& token = "c1") {
    auto chunk = std::make_shared<BackfillChunk>();
    chunk->token = token;
    chunk->consumer = "a";
    chunk->relation = table_;
    chunk->key_columns = {"id"};
    windows_.Expect(chunk);
    ASSERT_TRUE(windows_.SetRows(token, {Row("1", "a"), Row("2", "b"), Row("3", "c"),
                                         Row("4", "d"), Row("5", "e")}));
  }
  std::vector<CompletedChunk> High(const std::string& token = "c1") {
    EXPECT_TRUE(windows_.Observe(Mark(WatermarkKind::kHigh, token)));
    TransactionCommitted commit;
    commit.commit_lsn = Lsn(0x5000);
    commit.event_count = 1;
    return windows_.OnCommit(commit);
  }

  BackfillWindows windows_;
  std::shared_ptr<RelationInfo> table_ = Relation(100);
};

TEST(WatermarkTest, ContentRoundTripsAndOtherMessagesAreNotWatermarks) {
  std::optional<Watermark> low =
      ParseWatermark(kWatermarkPrefix, WatermarkContent(WatermarkKind::kLow, "x.1.2"));
  ASSERT_TRUE(low.has_value());
  EXPECT_EQ(low->kind, WatermarkKind::kLow);
  EXPECT_EQ(low->token, "x.1.2");
  std::optional<Watermark> high =
      ParseWatermark(kWatermarkPrefix, WatermarkContent(WatermarkKind::kHigh, "t"));
  ASSERT_TRUE(high.has_value());
  EXPECT_EQ(high->kind, WatermarkKind::kHigh);
  EXPECT_FALSE(ParseWatermark("app", "lw x").has_value());
  EXPECT_FALSE(ParseWatermark(kWatermarkPrefix, "something else").has_value());
}

TEST_F(BackfillWindowsTest, RowsChangedInsideTheWindowAreLeftOut) {
  ExpectChunk();
  // Before the low watermark: the chunk's snapshot saw it; it stays.
  EXPECT_FALSE(windows_.Observe(Change(ChangeEvent::Op::kUpdate, table_, "1")));
  EXPECT_TRUE(windows_.Observe(Mark(WatermarkKind::kLow, "c1")));
  EXPECT_FALSE(windows_.Observe(Change(ChangeEvent::Op::kUpdate, table_, "2")));
  EXPECT_FALSE(windows_.Observe(Change(ChangeEvent::Op::kDelete, table_, "4")));
  // Another table's change with the same key value does not count.
  EXPECT_FALSE(windows_.Observe(Change(ChangeEvent::Op::kInsert, Relation(200), "3")));
  std::vector<CompletedChunk> done = High();
  ASSERT_EQ(done.size(), 1u);
  EXPECT_EQ(done[0].outcome, CompletedChunk::Outcome::kDelivered);
  EXPECT_EQ(done[0].consumer, "a");
  EXPECT_THAT(Ids(done[0].survivors), ElementsAre("1", "3", "5"));
  EXPECT_EQ(done[0].superseded, 2u);
  EXPECT_EQ(windows_.open_windows(), 0u);
  // After the high watermark nothing is noted any more.
  EXPECT_FALSE(windows_.Observe(Change(ChangeEvent::Op::kDelete, table_, "5")));
}

TEST_F(BackfillWindowsTest, AKeyChangeDropsBothTheOldAndTheNewKey) {
  ExpectChunk();
  EXPECT_TRUE(windows_.Observe(Mark(WatermarkKind::kLow, "c1")));
  ChangeEvent moved = Change(ChangeEvent::Op::kUpdate, table_, "5");
  moved.old_kind = pgoutput::OldTupleKind::kKey;
  moved.old_tuple = {{{Kind::kText, "1"}, {Kind::kNull, ""}}};
  EXPECT_FALSE(windows_.Observe(moved));
  std::vector<CompletedChunk> done = High();
  ASSERT_EQ(done.size(), 1u);
  EXPECT_THAT(Ids(done[0].survivors), ElementsAre("2", "3", "4"));
}

TEST_F(BackfillWindowsTest, ATruncateInsideTheWindowDropsEveryRow) {
  ExpectChunk();
  EXPECT_TRUE(windows_.Observe(Mark(WatermarkKind::kLow, "c1")));
  ChangeEvent truncate;
  truncate.op = ChangeEvent::Op::kTruncate;
  truncate.truncated_relations = {Relation(300), table_};
  EXPECT_FALSE(windows_.Observe(truncate));
  std::vector<CompletedChunk> done = High();
  ASSERT_EQ(done.size(), 1u);
  EXPECT_EQ(done[0].outcome, CompletedChunk::Outcome::kDelivered);
  EXPECT_THAT(done[0].survivors, IsEmpty());
  EXPECT_EQ(done[0].superseded, 5u);
}

TEST_F(BackfillWindowsTest, AChangeWhoseKeyWasNotSentMakesTheChunkReadAgain) {
  ExpectChunk();
  EXPECT_TRUE(windows_.Observe(Mark(WatermarkKind::kLow, "c1")));
  ChangeEvent toasted = Change(ChangeEvent::Op::kUpdate, table_, "2");
  toasted.new_tuple.columns[0] = {Kind::kUnchangedToast, ""};
  EXPECT_FALSE(windows_.Observe(toasted));
  std::vector<CompletedChunk> done = High();
  ASSERT_EQ(done.size(), 1u);
  EXPECT_EQ(done[0].outcome, CompletedChunk::Outcome::kRetry);
  EXPECT_THAT(done[0].retry_reason, ::testing::HasSubstr("unchanged TOAST"));
}

TEST_F(BackfillWindowsTest, AnUpdateThatLeftAToastedValueUnsentMakesTheChunkReadAgain) {
  ExpectChunk();
  EXPECT_TRUE(windows_.Observe(Mark(WatermarkKind::kLow, "c1")));
  // Key sent, the other column not: the event cannot replace row 3.
  ChangeEvent partial = Change(ChangeEvent::Op::kUpdate, table_, "3");
  partial.new_tuple.columns[1] = {Kind::kUnchangedToast, ""};
  EXPECT_FALSE(windows_.Observe(partial));
  std::vector<CompletedChunk> done = High();
  ASSERT_EQ(done.size(), 1u);
  EXPECT_EQ(done[0].outcome, CompletedChunk::Outcome::kRetry);
  EXPECT_THAT(done[0].retry_reason, ::testing::HasSubstr("TOASTed value unsent"));
  EXPECT_THAT(done[0].survivors, IsEmpty());

  // The same kind of update of a key the chunk does not hold changes nothing.
  ExpectChunk("c2");
  EXPECT_TRUE(windows_.Observe(Mark(WatermarkKind::kLow, "c2")));
  ChangeEvent elsewhere = Change(ChangeEvent::Op::kUpdate, table_, "9");
  elsewhere.new_tuple.columns[1] = {Kind::kUnchangedToast, ""};
  EXPECT_FALSE(windows_.Observe(elsewhere));
  done = High("c2");
  ASSERT_EQ(done.size(), 1u);
  EXPECT_EQ(done[0].outcome, CompletedChunk::Outcome::kDelivered);
  EXPECT_THAT(Ids(done[0].survivors), ElementsAre("1", "2", "3", "4", "5"));
}

TEST_F(BackfillWindowsTest, WatermarksOfUnknownChunksAreHiddenAndIgnored) {
  // Another process's (or one replayed after a restart): hidden, no effect.
  EXPECT_TRUE(windows_.Observe(Mark(WatermarkKind::kLow, "elsewhere")));
  EXPECT_THAT(High("elsewhere"), IsEmpty());
  // An application's own message with the prefix but other content is not one.
  EXPECT_FALSE(windows_.Observe(Message(std::string(kWatermarkPrefix), "hello")));
  // A forgotten chunk completes nothing.
  ExpectChunk();
  EXPECT_TRUE(windows_.Observe(Mark(WatermarkKind::kLow, "c1")));
  windows_.Forget("c1");
  EXPECT_THAT(High(), IsEmpty());
}

TEST_F(BackfillWindowsTest, AHighWatermarkBeforeTheRowsMakesTheChunkReadAgain) {
  auto chunk = std::make_shared<BackfillChunk>();
  chunk->token = "c2";
  chunk->relation = table_;
  chunk->key_columns = {"id"};
  windows_.Expect(chunk);
  EXPECT_TRUE(windows_.Observe(Mark(WatermarkKind::kLow, "c2")));
  std::vector<CompletedChunk> done = High("c2");
  ASSERT_EQ(done.size(), 1u);
  EXPECT_EQ(done[0].outcome, CompletedChunk::Outcome::kRetry);
}

TEST_F(BackfillWindowsTest, AFromStartChunkDropsWhatChangedSinceTheStreamStarted) {
  // Opened before the stream's first event; the chunk is read much later.
  windows_.OpenFromStart("7", 100, {"id"});
  EXPECT_TRUE(windows_.FromStartOpen("7"));
  EXPECT_FALSE(windows_.Observe(Change(ChangeEvent::Op::kUpdate, table_, "2")));
  EXPECT_FALSE(windows_.Observe(Change(ChangeEvent::Op::kDelete, table_, "5")));
  EXPECT_FALSE(windows_.Observe(Change(ChangeEvent::Op::kInsert, Relation(200), "1")));
  auto chunk = std::make_shared<BackfillChunk>();
  chunk->token = "s1";
  chunk->consumer = "";
  chunk->relation = table_;
  chunk->key_columns = {"id"};
  chunk->from_start = "7";
  windows_.Expect(chunk);
  // No low watermark: changes between Expect and the rows count as well.
  EXPECT_FALSE(windows_.Observe(Change(ChangeEvent::Op::kUpdate, table_, "3")));
  ASSERT_TRUE(windows_.SetRows("s1", {Row("1", "a"), Row("2", "b"), Row("3", "c"),
                                      Row("4", "d"), Row("5", "e")}));
  std::vector<CompletedChunk> done = High("s1");
  ASSERT_EQ(done.size(), 1u);
  EXPECT_EQ(done[0].outcome, CompletedChunk::Outcome::kDelivered);
  EXPECT_THAT(Ids(done[0].survivors), ElementsAre("1", "4"));
  EXPECT_EQ(done[0].superseded, 3u);
  // The log outlives the chunk until it is closed.
  EXPECT_TRUE(windows_.FromStartOpen("7"));
  windows_.CloseFromStart("7");
  EXPECT_FALSE(windows_.FromStartOpen("7"));
}

TEST_F(BackfillWindowsTest, AFromStartLogPastItsBoundMakesTheChunksReadAgain) {
  windows_.OpenFromStart("7", 100, {"id"});
  for (size_t i = 0; i <= BackfillWindows::kMaxFromStartKeys; ++i) {
    windows_.Observe(Change(ChangeEvent::Op::kInsert, table_, absl::StrCat(1000 + i)));
  }
  EXPECT_FALSE(windows_.FromStartOpen("7"));
  auto chunk = std::make_shared<BackfillChunk>();
  chunk->token = "s1";
  chunk->relation = table_;
  chunk->key_columns = {"id"};
  chunk->from_start = "7";
  windows_.Expect(chunk);
  ASSERT_TRUE(windows_.SetRows("s1", {Row("1", "a")}));
  std::vector<CompletedChunk> done = High("s1");
  ASSERT_EQ(done.size(), 1u);
  EXPECT_EQ(done[0].outcome, CompletedChunk::Outcome::kRetry);
  EXPECT_THAT(done[0].retry_reason, ::testing::HasSubstr("read with watermarks"));
}

TEST(EncodeKeyTest, KindAndLengthKeepKeysApart) {
  const std::vector<int> both = {0, 1};
  // ("a", "bc") and ("ab", "c") join to the same text; their keys differ.
  EXPECT_NE(EncodeKey({{{Kind::kText, "a"}, {Kind::kText, "bc"}}}, both),
            EncodeKey({{{Kind::kText, "ab"}, {Kind::kText, "c"}}}, both));
  // NULL and the empty string differ.
  EXPECT_NE(EncodeKey({{{Kind::kNull, ""}}}, {0}), EncodeKey({{{Kind::kText, ""}}}, {0}));
  EXPECT_FALSE(EncodeKey({{{Kind::kUnchangedToast, ""}}}, {0}).has_value());
  EXPECT_FALSE(EncodeKey({{{Kind::kText, "1"}}}, {3}).has_value()) << "no such column";
}

}  // namespace
}  // namespace walfeed::replication
