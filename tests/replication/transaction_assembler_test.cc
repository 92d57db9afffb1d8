#include "replication/transaction_assembler.h"

#include <cstdint>
#include <initializer_list>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/testing/status_matchers.h"

namespace walfeed::replication {
namespace {

using ::testing::AllOf;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;
using ::walfeed::testing::IsOk;
using ::walfeed::testing::StatusIs;
using Output = TransactionAssembler::Output;
using Kind = pgoutput::TupleValue::Kind;

// ---- Message builders -----------------------------------------------------------

constexpr int64_t kCommitTime = 789'000'000'000;  // 2025-01-01-ish, PostgreSQL epoch.

pgoutput::Begin Begin(uint64_t final_lsn, uint32_t xid = 700) {
  return pgoutput::Begin{Lsn(final_lsn), kCommitTime, xid};
}

pgoutput::Commit Commit(uint64_t commit_lsn, uint64_t end_lsn) {
  return pgoutput::Commit{0, Lsn(commit_lsn), Lsn(end_lsn), kCommitTime};
}

pgoutput::Relation Relation(uint32_t id, std::string table,
                            std::initializer_list<const char*> columns) {
  pgoutput::Relation relation;
  relation.relation_id = id;
  relation.namespace_name = "public";
  relation.relation_name = std::move(table);
  bool first = true;
  for (const char* name : columns) {
    pgoutput::RelationColumn column;
    column.flags = first ? 1 : 0;  // The first column is the key.
    column.name = name;
    column.type_oid = first ? 23 : 25;
    relation.columns.push_back(std::move(column));
    first = false;
  }
  return relation;
}

pgoutput::Type Type(uint32_t oid, std::string name) {
  pgoutput::Type type;
  type.type_oid = oid;
  type.namespace_name = "public";
  type.type_name = std::move(name);
  return type;
}

pgoutput::Origin Origin() { return pgoutput::Origin{Lsn(0x5000), "node_b"}; }

// Text values; "\n" stands for NULL and "\t" for unchanged TOAST, to keep calls short.
pgoutput::TupleData Tuple(std::initializer_list<std::string> values) {
  pgoutput::TupleData tuple;
  for (const std::string& value : values) {
    if (value == "\n") {
      tuple.columns.push_back({Kind::kNull, ""});
    } else if (value == "\t") {
      tuple.columns.push_back({Kind::kUnchangedToast, ""});
    } else {
      tuple.columns.push_back({Kind::kText, value});
    }
  }
  return tuple;
}

pgoutput::Insert Insert(uint32_t relation_id, pgoutput::TupleData tuple) {
  pgoutput::Insert insert;
  insert.relation_id = relation_id;
  insert.new_tuple = std::move(tuple);
  return insert;
}

pgoutput::Update Update(uint32_t relation_id, pgoutput::OldTupleKind old_kind,
                        pgoutput::TupleData old_tuple, pgoutput::TupleData new_tuple) {
  pgoutput::Update update;
  update.relation_id = relation_id;
  update.old_kind = old_kind;
  update.old_tuple = std::move(old_tuple);
  update.new_tuple = std::move(new_tuple);
  return update;
}

pgoutput::Delete Delete(uint32_t relation_id, pgoutput::TupleData old_tuple,
                        pgoutput::OldTupleKind old_kind = pgoutput::OldTupleKind::kKey) {
  pgoutput::Delete del;
  del.relation_id = relation_id;
  del.old_kind = old_kind;
  del.old_tuple = std::move(old_tuple);
  return del;
}

pgoutput::Truncate Truncate(std::vector<uint32_t> relation_ids, uint8_t options = 0) {
  pgoutput::Truncate truncate;
  truncate.options = options;
  truncate.relation_ids = std::move(relation_ids);
  return truncate;
}

pgoutput::LogicalMessage Message(bool transactional, uint64_t lsn, std::string prefix,
                                 std::string content) {
  pgoutput::LogicalMessage message;
  message.flags = transactional ? pgoutput::LogicalMessage::kTransactional : 0;
  message.lsn = Lsn(lsn);
  message.prefix = std::move(prefix);
  message.content = std::move(content);
  return message;
}

// ---- Output helpers -------------------------------------------------------------

// One line per output, so whole sequences can be compared at a glance:
//   "begin 0/1000 xid 700"
//   "event 0/1000:0 INSERT public.t"           (" last of 2 end 0/1040" on the last)
//   "commit 0/1000 end 0/1040 events 2"
//   "message 0/900 hb"                          (non-transactional)
std::string Line(const Output& output) {
  if (const auto* b = absl::get_if<TransactionBegun>(&output)) {
    return absl::StrCat("begin ", b->commit_lsn.ToString(), " xid ", b->xid);
  }
  if (const auto* e = absl::get_if<ChangeEvent>(&output)) {
    std::string line = absl::StrCat("event ", e->id.ToString(), " ", OpName(e->op));
    if (e->relation) absl::StrAppend(&line, " ", e->relation->schema, ".", e->relation->table);
    if (e->op == ChangeEvent::Op::kMessage) absl::StrAppend(&line, " ", e->message_prefix);
    if (e->last_in_transaction) {
      absl::StrAppend(&line, " last of ", e->transaction_event_count, " end ",
                      e->end_lsn.ToString());
    }
    return line;
  }
  if (const auto* c = absl::get_if<TransactionCommitted>(&output)) {
    return absl::StrCat("commit ", c->commit_lsn.ToString(), " end ", c->end_lsn.ToString(),
                        " events ", c->event_count);
  }
  const auto& m = absl::get<NonTransactionalMessage>(output);
  return absl::StrCat("message ", m.lsn.ToString(), " ", m.prefix);
}

std::vector<std::string> Lines(const std::vector<Output>& outputs) {
  std::vector<std::string> lines;
  for (const Output& output : outputs) lines.push_back(Line(output));
  return lines;
}

std::vector<ChangeEvent> Events(const std::vector<Output>& outputs) {
  std::vector<ChangeEvent> events;
  for (const Output& output : outputs) {
    if (const auto* e = absl::get_if<ChangeEvent>(&output)) events.push_back(*e);
  }
  return events;
}

// Feeds `messages` in order, each of which must succeed; returns everything emitted.
std::vector<Output> Feed(TransactionAssembler& assembler, std::vector<pgoutput::Message> messages) {
  std::vector<Output> out;
  for (pgoutput::Message& message : messages) {
    absl::Status status = assembler.Process(std::move(message), &out);
    EXPECT_THAT(status, IsOk());
    if (!status.ok()) break;
  }
  return out;
}

// Feeds `setup` (which must succeed), then `bad`, whose status is returned; checks
// that the failing message appended nothing.
absl::Status RunUntilError(TransactionAssembler& assembler, std::vector<pgoutput::Message> setup,
                           pgoutput::Message bad) {
  Feed(assembler, std::move(setup));
  std::vector<Output> out;
  absl::Status status = assembler.Process(std::move(bad), &out);
  EXPECT_THAT(out, IsEmpty()) << "a failing message must emit nothing";
  return status;
}

// ---- Ids, indexes, last-in-transaction -------------------------------------------

TEST(TransactionAssemblerTest, IndexesOnlyChangesNotRelationTypeOrOrigin) {
  TransactionAssembler assembler;
  std::vector<Output> out = Feed(
      assembler,
      {Begin(0x1A2B3C8), Origin(), Type(16390, "mood"), Relation(16384, "a", {"id", "v"}),
       Insert(16384, Tuple({"1", "x"})), Insert(16384, Tuple({"2", "y"})),
       Relation(16385, "b", {"id"}), Update(16385, pgoutput::OldTupleKind::kNone, {}, Tuple({"9"})),
       Type(16391, "_mood"), Relation(16384, "a", {"id", "v"}),  // Re-sent: no index.
       Delete(16384, Tuple({"1", "\n"})), Truncate({16385}),
       Message(true, 0x1A2B300, "audit", "who=alice"), Commit(0x1A2B3C8, 0x1A2B3F8)});

  EXPECT_THAT(Lines(out),
              ElementsAre("begin 0/1A2B3C8 xid 700", "event 0/1A2B3C8:0 INSERT public.a",
                          "event 0/1A2B3C8:1 INSERT public.a", "event 0/1A2B3C8:2 UPDATE public.b",
                          "event 0/1A2B3C8:3 DELETE public.a", "event 0/1A2B3C8:4 TRUNCATE",
                          "event 0/1A2B3C8:5 MESSAGE audit last of 6 end 0/1A2B3F8",
                          "commit 0/1A2B3C8 end 0/1A2B3F8 events 6"));
  for (const ChangeEvent& event : Events(out)) {
    EXPECT_EQ(event.xid, 700u);
    EXPECT_EQ(event.commit_time, kCommitTime);
  }
  EXPECT_EQ(assembler.relations().relation_count(), 2u);
  EXPECT_EQ(assembler.relations().TypeName(16391), "public._mood");
}

TEST(TransactionAssemblerTest, LastFlagCountAndEndLsnOnlyOnTheLastEvent) {
  TransactionAssembler assembler;
  std::vector<ChangeEvent> events =
      Events(Feed(assembler, {Relation(16384, "t", {"id"}), Begin(0x3000),
                              Insert(16384, Tuple({"1"})), Insert(16384, Tuple({"2"})),
                              Insert(16384, Tuple({"3"})), Commit(0x3000, 0x3050)}));
  ASSERT_EQ(events.size(), 3u);
  for (int i = 0; i < 2; ++i) {
    EXPECT_FALSE(events[i].last_in_transaction) << i;
    EXPECT_EQ(events[i].transaction_event_count, 0u) << i;
    EXPECT_EQ(events[i].end_lsn, Lsn::kInvalid) << i;
  }
  EXPECT_TRUE(events[2].last_in_transaction);
  EXPECT_EQ(events[2].transaction_event_count, 3u);
  EXPECT_EQ(events[2].end_lsn, Lsn(0x3050));
  EXPECT_EQ(events[2].id, (EventId{Lsn(0x3000), 2}));
}

TEST(TransactionAssemblerTest, OneEventTransaction) {
  TransactionAssembler assembler;
  std::vector<Output> out =
      Feed(assembler, {Begin(0x2000), Relation(16384, "t", {"id", "v"}),
                       Insert(16384, Tuple({"1", "a"})), Commit(0x2000, 0x2030)});
  EXPECT_THAT(Lines(out), ElementsAre("begin 0/2000 xid 700",
                                      "event 0/2000:0 INSERT public.t last of 1 end 0/2030",
                                      "commit 0/2000 end 0/2030 events 1"));
  const ChangeEvent& event = absl::get<ChangeEvent>(out[1]);
  EXPECT_EQ(event.new_tuple, Tuple({"1", "a"}));
  EXPECT_EQ(event.relation->relation_id, 16384u);
}

TEST(TransactionAssemblerTest, ZeroEventTransaction) {
  // PostgreSQL 14 sends Begin/Commit even for transactions that publish nothing.
  TransactionAssembler assembler;
  std::vector<Output> out = Feed(assembler, {Begin(0x2000), Commit(0x2000, 0x2030)});
  EXPECT_THAT(Lines(out), ElementsAre("begin 0/2000 xid 700", "commit 0/2000 end 0/2030 events 0"));
  EXPECT_FALSE(assembler.in_transaction());
  EXPECT_EQ(assembler.last_commit_lsn(), Lsn(0x2000));
}

TEST(TransactionAssemblerTest, EventsFlowOutBeforeCommitHoldingExactlyOne) {
  TransactionAssembler assembler;
  std::vector<Output> out;
  ASSERT_THAT(assembler.Process(Relation(16384, "t", {"id"}), &out), IsOk());
  ASSERT_THAT(assembler.Process(Begin(0x4000), &out), IsOk());
  EXPECT_THAT(Lines(out), ElementsAre("begin 0/4000 xid 700"));
  EXPECT_TRUE(assembler.in_transaction());
  EXPECT_EQ(assembler.current_commit_lsn(), Lsn(0x4000));

  ASSERT_THAT(assembler.Process(Insert(16384, Tuple({"1"})), &out), IsOk());
  EXPECT_EQ(out.size(), 1u) << "the first event is held until the next one";
  EXPECT_EQ(assembler.current_event_count(), 1u);

  ASSERT_THAT(assembler.Process(Insert(16384, Tuple({"2"})), &out), IsOk());
  EXPECT_THAT(Lines(out), ElementsAre("begin 0/4000 xid 700", "event 0/4000:0 INSERT public.t"));

  // Non-indexed messages release nothing.
  ASSERT_THAT(assembler.Process(Relation(16384, "t", {"id"}), &out), IsOk());
  EXPECT_EQ(out.size(), 2u);

  ASSERT_THAT(assembler.Process(Insert(16384, Tuple({"3"})), &out), IsOk());
  EXPECT_EQ(out.size(), 3u);
  EXPECT_EQ(Line(out[2]), "event 0/4000:1 INSERT public.t");

  ASSERT_THAT(assembler.Process(Commit(0x4000, 0x4040), &out), IsOk());
  EXPECT_THAT(Lines(out), ElementsAre("begin 0/4000 xid 700", "event 0/4000:0 INSERT public.t",
                                      "event 0/4000:1 INSERT public.t",
                                      "event 0/4000:2 INSERT public.t last of 3 end 0/4040",
                                      "commit 0/4000 end 0/4040 events 3"));
  EXPECT_FALSE(assembler.in_transaction());
  EXPECT_EQ(assembler.current_commit_lsn(), Lsn::kInvalid);
  EXPECT_EQ(assembler.current_event_count(), 0u);
}

TEST(TransactionAssemblerTest, BackToBackTransactionsWhereEndEqualsNextCommit) {
  // Two sessions committing back to back: end_lsn(T1) == commit_lsn(T2).
  TransactionAssembler assembler;
  std::vector<Output> out = Feed(
      assembler, {Begin(0x159F710, 801), Relation(16384, "t", {"id"}), Insert(16384, Tuple({"1"})),
                  Commit(0x159F710, 0x159F740), Begin(0x159F740, 802), Insert(16384, Tuple({"2"})),
                  Commit(0x159F740, 0x159F770)});
  EXPECT_THAT(Lines(out),
              ElementsAre("begin 0/159F710 xid 801",
                          "event 0/159F710:0 INSERT public.t last of 1 end 0/159F740",
                          "commit 0/159F710 end 0/159F740 events 1", "begin 0/159F740 xid 802",
                          "event 0/159F740:0 INSERT public.t last of 1 end 0/159F770",
                          "commit 0/159F740 end 0/159F770 events 1"));
  EXPECT_EQ(assembler.last_commit_lsn(), Lsn(0x159F740));
}

TEST(TransactionAssemblerTest, IdsUseTheFull64BitLsn) {
  TransactionAssembler assembler;
  const uint64_t lsn = 0x16B374D848;  // 16/B374D848
  std::vector<Output> out = Feed(assembler, {Begin(lsn), Relation(16384, "t", {"id"}),
                                             Insert(16384, Tuple({"1"})), Commit(lsn, lsn + 0x30)});
  EXPECT_EQ(absl::get<ChangeEvent>(out[1]).id.ToString(), "16/B374D848:0");
}

// ---- Row data and schema ---------------------------------------------------------

TEST(TransactionAssemblerTest, CarriesOldAndNewTuplesUntouched) {
  TransactionAssembler assembler;
  pgoutput::TupleData binary;
  binary.columns = {{Kind::kBinary, std::string("\x00\x00\x00\x07", 4)},
                    {Kind::kText, ""},  // The empty string, not NULL.
                    {Kind::kUnchangedToast, ""}};
  std::vector<ChangeEvent> events = Events(Feed(
      assembler, {Begin(0x5000), Relation(16384, "t", {"id", "v", "big"}),
                  Update(16384, pgoutput::OldTupleKind::kFull, Tuple({"7", "old", "huge"}), binary),
                  Update(16384, pgoutput::OldTupleKind::kKey, Tuple({"7", "\n", "\n"}),
                         Tuple({"8", "new", "\t"})),
                  Delete(16384, Tuple({"8", "new", "huge"}), pgoutput::OldTupleKind::kFull),
                  Commit(0x5000, 0x5030)}));
  ASSERT_EQ(events.size(), 3u);
  EXPECT_EQ(events[0].old_kind, pgoutput::OldTupleKind::kFull);
  EXPECT_EQ(events[0].old_tuple, Tuple({"7", "old", "huge"}));
  EXPECT_EQ(events[0].new_tuple, binary);
  EXPECT_EQ(events[1].old_kind, pgoutput::OldTupleKind::kKey);
  EXPECT_EQ(events[1].old_tuple.columns[1].kind, Kind::kNull);  // A key placeholder.
  EXPECT_EQ(events[1].new_tuple.columns[2].kind, Kind::kUnchangedToast);
  EXPECT_EQ(events[2].op, ChangeEvent::Op::kDelete);
  EXPECT_EQ(events[2].old_kind, pgoutput::OldTupleKind::kFull);
  EXPECT_THAT(events[2].new_tuple.columns, IsEmpty());
}

TEST(TransactionAssemblerTest, UpdateWithoutOldTupleHasEmptyOldTuple) {
  TransactionAssembler assembler;
  std::vector<ChangeEvent> events =
      Events(Feed(assembler, {Begin(0x5000), Relation(16384, "t", {"id", "v"}),
                              Update(16384, pgoutput::OldTupleKind::kNone, {}, Tuple({"1", "b"})),
                              Commit(0x5000, 0x5030)}));
  ASSERT_EQ(events.size(), 1u);
  EXPECT_EQ(events[0].old_kind, pgoutput::OldTupleKind::kNone);
  EXPECT_THAT(events[0].old_tuple.columns, IsEmpty());
}

TEST(TransactionAssemblerTest, DdlMidStreamEachEventKeepsTheSchemaItWasDecodedWith) {
  // ALTER TABLE t ADD COLUMN d between two inserts of the same transaction.
  TransactionAssembler assembler;
  std::vector<Output> out;
  for (pgoutput::Message message : std::vector<pgoutput::Message>{
           Begin(0x6000), Relation(16384, "t", {"a", "b", "c"}),
           Insert(16384, Tuple({"1", "x", "y"})), Relation(16384, "t", {"a", "b", "c", "d"}),
           Insert(16384, Tuple({"2", "x", "y", "z"}))}) {
    ASSERT_THAT(assembler.Process(std::move(message), &out), IsOk());
  }
  // The first event was released when the second arrived, after the new Relation.
  std::vector<ChangeEvent> released = Events(out);
  ASSERT_EQ(released.size(), 1u);
  EXPECT_EQ(released[0].relation->columns.size(), 3u);

  // The table changes again before the commit; neither event is re-attributed.
  ASSERT_THAT(assembler.Process(Relation(16384, "t", {"a", "d"}), &out), IsOk());
  ASSERT_THAT(assembler.Process(Commit(0x6000, 0x6060), &out), IsOk());
  std::vector<ChangeEvent> events = Events(out);
  ASSERT_EQ(events.size(), 2u);
  ASSERT_EQ(events[0].relation->columns.size(), 3u);
  EXPECT_EQ(events[0].relation->columns[2].name, "c");
  EXPECT_EQ(events[0].new_tuple.columns.size(), 3u);
  ASSERT_EQ(events[1].relation->columns.size(), 4u);
  EXPECT_EQ(events[1].relation->columns[3].name, "d");
  EXPECT_EQ(events[1].new_tuple.columns[3].data, "z");
  EXPECT_EQ((*assembler.relations().Find(16384))->columns.size(), 2u);
}

TEST(TransactionAssemblerTest, TruncateOfSeveralRelationsWithOptions) {
  TransactionAssembler assembler;
  std::vector<ChangeEvent> events =
      Events(Feed(assembler, {Begin(0x7000), Relation(16384, "parent", {"id"}),
                              Relation(16390, "child", {"id", "p"}),
                              Truncate({16390, 16384}, pgoutput::Truncate::kCascade |
                                                           pgoutput::Truncate::kRestartIdentity),
                              Commit(0x7000, 0x7040)}));
  ASSERT_EQ(events.size(), 1u);
  const ChangeEvent& event = events[0];
  EXPECT_EQ(event.op, ChangeEvent::Op::kTruncate);
  EXPECT_EQ(event.id.ToString(), "0/7000:0");
  EXPECT_EQ(event.truncate_options, 3);
  ASSERT_EQ(event.truncated_relations.size(), 2u);
  EXPECT_EQ(event.truncated_relations[0]->table, "child");
  EXPECT_EQ(event.truncated_relations[1]->table, "parent");
  EXPECT_EQ(event.relation, nullptr);
  EXPECT_TRUE(event.last_in_transaction);
}

// ---- Logical messages ------------------------------------------------------------

TEST(TransactionAssemblerTest, TransactionalMessageIsIndexedNonTransactionalIsNot) {
  TransactionAssembler assembler;
  const std::string content("\x00\xff\x01 raw", 7);  // Arbitrary bytes survive.
  std::vector<Output> out =
      Feed(assembler, {Message(false, 0x8000, "heartbeat", "tick"), Begin(0x8100),
                       Relation(16384, "t", {"id"}), Insert(16384, Tuple({"1"})),
                       Message(true, 0x80F0, "watermark", content), Insert(16384, Tuple({"2"})),
                       Commit(0x8100, 0x8130),
                       // Its lsn may equal the next commit LSN; it takes no index anyway.
                       Message(false, 0x8200, "heartbeat", "tock")});
  EXPECT_THAT(Lines(out),
              ElementsAre("message 0/8000 heartbeat", "begin 0/8100 xid 700",
                          "event 0/8100:0 INSERT public.t", "event 0/8100:1 MESSAGE watermark",
                          "event 0/8100:2 INSERT public.t last of 3 end 0/8130",
                          "commit 0/8100 end 0/8130 events 3", "message 0/8200 heartbeat"));
  const ChangeEvent& message = absl::get<ChangeEvent>(out[3]);
  EXPECT_EQ(message.message_lsn, Lsn(0x80F0));
  EXPECT_EQ(message.message_content, content);
  EXPECT_EQ(message.relation, nullptr);
  EXPECT_EQ(absl::get<NonTransactionalMessage>(out[6]).content, "tock");
}

TEST(TransactionAssemblerTest, TransactionalMessageOutsideTransactionIsDataLoss) {
  TransactionAssembler assembler;
  EXPECT_THAT(RunUntilError(assembler, {}, Message(true, 0x8000, "wm", "x")),
              StatusIs(absl::StatusCode::kDataLoss,
                       AllOf(HasSubstr("transactional logical message \"wm\" (LSN 0/8000)"),
                             HasSubstr("outside a transaction"))));
}

TEST(TransactionAssemblerTest, NonTransactionalMessageInsideTransactionIsDataLoss) {
  TransactionAssembler assembler;
  EXPECT_THAT(RunUntilError(assembler, {Begin(0x8100)}, Message(false, 0x80F0, "hb", "")),
              StatusIs(absl::StatusCode::kDataLoss,
                       AllOf(HasSubstr("non-transactional logical message \"hb\""),
                             HasSubstr("inside the transaction committing at 0/8100"))));
}

// ---- Validation against the relation --------------------------------------------

TEST(TransactionAssemblerTest, TupleColumnCountMismatchIsDataLoss) {
  const std::vector<pgoutput::Message> setup = {Relation(16384, "t", {"a", "b", "c"}),
                                                Begin(0x9000)};
  {
    TransactionAssembler assembler;
    EXPECT_THAT(RunUntilError(assembler, setup, Insert(16384, Tuple({"1", "2"}))),
                StatusIs(absl::StatusCode::kDataLoss,
                         AllOf(HasSubstr("Insert into relation 16384 at 0/9000:0"),
                               HasSubstr("new tuple has 2 column(s) but the Relation message for "
                                         "public.t (16384) described 3"))));
  }
  {
    TransactionAssembler assembler;
    EXPECT_THAT(RunUntilError(assembler, setup,
                              Update(16384, pgoutput::OldTupleKind::kKey, Tuple({"1"}),
                                     Tuple({"1", "2", "3"}))),
                StatusIs(absl::StatusCode::kDataLoss, HasSubstr("old tuple has 1 column(s)")));
  }
  {
    TransactionAssembler assembler;
    EXPECT_THAT(RunUntilError(
                    assembler, setup,
                    Update(16384, pgoutput::OldTupleKind::kNone, {}, Tuple({"1", "2", "3", "4"}))),
                StatusIs(absl::StatusCode::kDataLoss, HasSubstr("new tuple has 4 column(s)")));
  }
  {
    TransactionAssembler assembler;
    EXPECT_THAT(
        RunUntilError(assembler, setup, Delete(16384, Tuple({}))),
        StatusIs(absl::StatusCode::kDataLoss, AllOf(HasSubstr("Delete from relation 16384"),
                                                    HasSubstr("old tuple has 0 column(s)"))));
  }
}

TEST(TransactionAssemblerTest, DeleteWithoutOldTupleIsDataLoss) {
  TransactionAssembler assembler;
  EXPECT_THAT(RunUntilError(assembler, {Relation(16384, "t", {"a"}), Begin(0x9000)},
                            Delete(16384, {}, pgoutput::OldTupleKind::kNone)),
              StatusIs(absl::StatusCode::kDataLoss, HasSubstr("carries no old tuple")));
}

TEST(TransactionAssemblerTest, UnknownRelationIsDataLoss) {
  {
    TransactionAssembler assembler;
    EXPECT_THAT(RunUntilError(assembler, {Begin(0x9000)}, Insert(16384, Tuple({"1"}))),
                StatusIs(absl::StatusCode::kDataLoss,
                         AllOf(HasSubstr("change for relation 16384 that was never "
                                         "described by a Relation message"),
                               HasSubstr("Insert into relation 16384 at 0/9000:0"))));
  }
  {
    TransactionAssembler assembler;
    EXPECT_THAT(RunUntilError(assembler, {Begin(0x9000), Relation(16384, "t", {"a"})},
                              Truncate({16384, 16399})),
                StatusIs(absl::StatusCode::kDataLoss, HasSubstr("relation 16399")));
  }
}

// The largest relation id names each row change in full (the name is formatted
// into a fixed buffer on every row).
TEST(TransactionAssemblerTest, NamesTheLargestRelationIdInFull) {
  const uint32_t id = 4294967295u;
  const std::vector<std::pair<pgoutput::Message, std::string>> cases = {
      {Insert(id, Tuple({"1"})), "Insert into relation 4294967295 at 0/9000:0"},
      {Update(id, pgoutput::OldTupleKind::kNone, {}, Tuple({"1"})),
       "Update of relation 4294967295 at 0/9000:0"},
      {Delete(id, Tuple({"1"}), pgoutput::OldTupleKind::kKey),
       "Delete from relation 4294967295 at 0/9000:0"},
  };
  for (const auto& [message, name] : cases) {
    TransactionAssembler assembler;
    EXPECT_THAT(RunUntilError(assembler, {Begin(0x9000)}, message),
                StatusIs(absl::StatusCode::kDataLoss, HasSubstr(name)));
  }
}

TEST(TransactionAssemblerTest, TruncateListingNoRelationIsDataLoss) {
  TransactionAssembler assembler;
  EXPECT_THAT(RunUntilError(assembler, {Begin(0x9000)}, Truncate({})),
              StatusIs(absl::StatusCode::kDataLoss, HasSubstr("listing no relation")));
}

TEST(TransactionAssemblerTest, InvalidRelationMessageIsDataLoss) {
  TransactionAssembler assembler;
  EXPECT_THAT(RunUntilError(assembler, {}, Relation(0, "t", {"a"})),
              StatusIs(absl::StatusCode::kDataLoss, HasSubstr("relation OID 0")));
}

// ---- Transaction boundary invariants ---------------------------------------------

TEST(TransactionAssemblerTest, CommitWithoutBeginIsDataLoss) {
  TransactionAssembler assembler;
  EXPECT_THAT(RunUntilError(assembler, {}, Commit(0x1000, 0x1030)),
              StatusIs(absl::StatusCode::kDataLoss,
                       HasSubstr("Commit at 0/1000 (end 0/1030) without a Begin")));
  TransactionAssembler after_one;
  EXPECT_THAT(
      RunUntilError(after_one, {Begin(0x1000), Commit(0x1000, 0x1030)}, Commit(0x1000, 0x1030)),
      StatusIs(absl::StatusCode::kDataLoss, HasSubstr("the last transaction committed at 0/1000")));
}

TEST(TransactionAssemblerTest, CommitLsnDifferentFromBeginIsDataLoss) {
  TransactionAssembler assembler;
  EXPECT_THAT(RunUntilError(assembler, {Begin(0x1000, 42)}, Commit(0x1008, 0x1030)),
              StatusIs(absl::StatusCode::kDataLoss,
                       HasSubstr("Commit LSN 0/1008 of transaction 42 differs from its Begin's "
                                 "final LSN 0/1000")));
}

TEST(TransactionAssemblerTest, CommitEndNotAfterStartIsDataLoss) {
  TransactionAssembler assembler;
  EXPECT_THAT(RunUntilError(assembler, {Begin(0x1000)}, Commit(0x1000, 0x1000)),
              StatusIs(absl::StatusCode::kDataLoss, HasSubstr("has end LSN 0/1000")));
}

TEST(TransactionAssemblerTest, BeginWhileTransactionOpenIsDataLoss) {
  TransactionAssembler assembler;
  EXPECT_THAT(RunUntilError(assembler, {Begin(0x1000, 41)}, Begin(0x2000, 42)),
              StatusIs(absl::StatusCode::kDataLoss,
                       HasSubstr("Begin of transaction 42 committing at 0/2000 while "
                                 "transaction 41 committing at 0/1000 has had no Commit")));
}

TEST(TransactionAssemblerTest, BeginNotAfterPreviousCommitIsDataLoss) {
  for (uint64_t next : {uint64_t{0x1000}, uint64_t{0xFFF}}) {
    TransactionAssembler assembler;
    EXPECT_THAT(RunUntilError(assembler, {Begin(0x1000), Commit(0x1000, 0x1030)}, Begin(next, 43)),
                StatusIs(absl::StatusCode::kDataLoss,
                         AllOf(HasSubstr(absl::StrCat("committing at ", Lsn(next).ToString())),
                               HasSubstr("not after the previous transaction's commit at "
                                         "0/1000"))));
  }
}

TEST(TransactionAssemblerTest, BeginWithInvalidLsnIsDataLoss) {
  TransactionAssembler assembler;
  EXPECT_THAT(RunUntilError(assembler, {}, Begin(0)),
              StatusIs(absl::StatusCode::kDataLoss, HasSubstr("final LSN 0/0")));
}

TEST(TransactionAssemblerTest, ChangesOutsideTransactionAreDataLoss) {
  const std::vector<pgoutput::Message> changes = {
      Insert(16384, Tuple({"1"})), Update(16384, pgoutput::OldTupleKind::kNone, {}, Tuple({"1"})),
      Delete(16384, Tuple({"1"})), Truncate({16384})};
  for (const pgoutput::Message& change : changes) {
    // Before any transaction.
    TransactionAssembler fresh;
    EXPECT_THAT(
        RunUntilError(fresh, {Relation(16384, "t", {"a"})}, change),
        StatusIs(absl::StatusCode::kDataLoss, AllOf(HasSubstr("outside a transaction"),
                                                    HasSubstr("since this session started"))))
        << "message alternative " << change.index();
    // Between two transactions.
    TransactionAssembler between;
    EXPECT_THAT(
        RunUntilError(between, {Relation(16384, "t", {"a"}), Begin(0x1000), Commit(0x1000, 0x1030)},
                      change),
        StatusIs(absl::StatusCode::kDataLoss,
                 HasSubstr("outside a transaction (no Begin since the commit at "
                           "0/1000)")));
  }
}

TEST(TransactionAssemblerTest, OriginOutsideTransactionIsDataLoss) {
  TransactionAssembler assembler;
  EXPECT_THAT(RunUntilError(assembler, {}, Origin()),
              StatusIs(absl::StatusCode::kDataLoss,
                       HasSubstr("Origin \"node_b\" (origin LSN 0/5000) outside")));
}

TEST(TransactionAssemblerTest, ErrorsAreStickyUntilReset) {
  TransactionAssembler assembler;
  std::vector<Output> out;
  ASSERT_THAT(assembler.Process(Commit(0x1000, 0x1030), &out),
              StatusIs(absl::StatusCode::kDataLoss));
  // Even a message that would be fine on its own is refused, with the first cause.
  EXPECT_THAT(assembler.Process(Begin(0x2000), &out),
              StatusIs(absl::StatusCode::kDataLoss,
                       AllOf(HasSubstr("must be restarted"), HasSubstr("without a Begin"))));
  EXPECT_THAT(out, IsEmpty());

  assembler.Reset(Lsn::kInvalid);
  EXPECT_THAT(assembler.Process(Begin(0x2000), &out), IsOk());
}

// ---- Streaming and two-phase -----------------------------------------------------

TEST(TransactionAssemblerTest, StreamingMessagesAreRejectedWithTheReason) {
  pgoutput::StreamCommit stream_commit;
  stream_commit.xid = 900;
  stream_commit.commit_lsn = Lsn(0x1000);
  stream_commit.end_lsn = Lsn(0x1030);
  pgoutput::StreamAbort stream_abort;
  stream_abort.xid = 900;
  stream_abort.subxid = 900;
  pgoutput::Insert streamed_insert = Insert(16384, Tuple({"1"}));
  streamed_insert.xid = 900;
  pgoutput::Relation streamed_relation = Relation(16384, "t", {"a"});
  streamed_relation.xid = 900;

  const std::vector<pgoutput::Message> messages = {pgoutput::StreamStart{900, true},
                                                   pgoutput::StreamStop{},
                                                   stream_commit,
                                                   stream_abort,
                                                   streamed_insert,
                                                   streamed_relation};
  for (const pgoutput::Message& message : messages) {
    TransactionAssembler assembler;
    EXPECT_THAT(
        RunUntilError(assembler, {Relation(16384, "t", {"a"})}, message),
        StatusIs(absl::StatusCode::kFailedPrecondition,
                 AllOf(HasSubstr("streaming an in-progress transaction"), HasSubstr("Remedy"))))
        << "message alternative " << message.index();
  }
}

TEST(TransactionAssemblerTest, TwoPhaseMessagesAreRejectedNamingTheRemedy) {
  pgoutput::BeginPrepare begin_prepare;
  begin_prepare.prepare_lsn = Lsn(0x1000);
  begin_prepare.xid = 901;
  begin_prepare.gid = "tx-1";
  pgoutput::Prepare prepare;
  prepare.prepare_lsn = Lsn(0x1000);
  prepare.xid = 901;
  prepare.gid = "tx-1";
  pgoutput::StreamPrepare stream_prepare;
  stream_prepare.prepare_lsn = Lsn(0x1000);
  stream_prepare.xid = 901;
  stream_prepare.gid = "tx-1";
  pgoutput::CommitPrepared commit_prepared;
  commit_prepared.commit_lsn = Lsn(0x2000);
  commit_prepared.xid = 901;
  commit_prepared.gid = "tx-1";
  pgoutput::RollbackPrepared rollback_prepared;
  rollback_prepared.rollback_end_lsn = Lsn(0x2000);
  rollback_prepared.xid = 901;
  rollback_prepared.gid = "tx-1";

  const std::vector<pgoutput::Message> messages = {begin_prepare, prepare, stream_prepare,
                                                   commit_prepared, rollback_prepared};
  for (const pgoutput::Message& message : messages) {
    TransactionAssembler assembler;
    EXPECT_THAT(RunUntilError(assembler, {}, message),
                StatusIs(absl::StatusCode::kFailedPrecondition,
                         AllOf(HasSubstr("(xid 901, gid \"tx-1\")"), HasSubstr("two-phase"),
                               HasSubstr("create a new slot without TWO_PHASE"))))
        << "message alternative " << message.index();
  }
}

// ---- Reset (reconnect) -------------------------------------------------------------

TEST(TransactionAssemblerTest, ResetDropsOpenTransactionHeldEventAndRelations) {
  TransactionAssembler assembler;
  std::vector<Output> first_session =
      Feed(assembler, {Begin(0xA000), Relation(16384, "t", {"id"}), Insert(16384, Tuple({"1"})),
                       Insert(16384, Tuple({"2"}))});
  EXPECT_THAT(Lines(first_session),
              ElementsAre("begin 0/A000 xid 700", "event 0/A000:0 INSERT public.t"));

  assembler.Reset(Lsn::kInvalid);
  EXPECT_FALSE(assembler.in_transaction());
  EXPECT_EQ(assembler.relations().relation_count(), 0u);
  EXPECT_EQ(assembler.last_commit_lsn(), Lsn::kInvalid);

  // The relation must be described again in the new session.
  std::vector<Output> out;
  EXPECT_THAT(assembler.Process(Insert(16384, Tuple({"1"})), &out),
              StatusIs(absl::StatusCode::kDataLoss));
  assembler.Reset(Lsn::kInvalid);

  // The same transaction comes back whole, with the same ids; the held event of the
  // first session never leaked out.
  std::vector<Output> second_session =
      Feed(assembler, {Begin(0xA000), Relation(16384, "t", {"id"}), Insert(16384, Tuple({"1"})),
                       Insert(16384, Tuple({"2"})), Commit(0xA000, 0xA040)});
  EXPECT_THAT(Lines(second_session),
              ElementsAre("begin 0/A000 xid 700", "event 0/A000:0 INSERT public.t",
                          "event 0/A000:1 INSERT public.t last of 2 end 0/A040",
                          "commit 0/A000 end 0/A040 events 2"));
}

TEST(TransactionAssemblerTest, ResetAcceptsRedeliveryOfCommittedTransactions) {
  // The process saw T1 and T2; only T1's commit LSN was acked, so the new session
  // starts at 0/B000 and PostgreSQL re-sends T1 (confirming commit_lsn re-delivers).
  TransactionAssembler assembler;
  Feed(assembler, {Relation(16384, "t", {"id"}), Begin(0xB000), Insert(16384, Tuple({"1"})),
                   Commit(0xB000, 0xB030), Begin(0xC000), Insert(16384, Tuple({"2"})),
                   Commit(0xC000, 0xC030)});
  assembler.Reset(Lsn(0xB000));
  std::vector<ChangeEvent> events =
      Events(Feed(assembler, {Begin(0xB000), Relation(16384, "t", {"id"}),
                              Insert(16384, Tuple({"1"})), Commit(0xB000, 0xB030), Begin(0xC000),
                              Insert(16384, Tuple({"2"})), Commit(0xC000, 0xC030)}));
  ASSERT_EQ(events.size(), 2u);
  EXPECT_EQ(events[0].id.ToString(), "0/B000:0");
  EXPECT_EQ(events[1].id.ToString(), "0/C000:0");
}

TEST(TransactionAssemblerTest, TransactionBeforeStartPositionIsDataLoss) {
  TransactionAssembler assembler(Lsn(0xB030));
  EXPECT_THAT(RunUntilError(assembler, {}, Begin(0xB000, 55)),
              StatusIs(absl::StatusCode::kDataLoss,
                       AllOf(HasSubstr("Begin of transaction 55 committing at 0/B000, "
                                       "before 0/B030"),
                             HasSubstr("skips every transaction"))));
  // The bound is inclusive: a transaction committing exactly at the start position is
  // delivered (adjacent transactions: end_lsn(T1) == commit_lsn(T2)).
  assembler.Reset(Lsn(0xB030));
  EXPECT_THAT(Lines(Feed(assembler, {Begin(0xB030), Commit(0xB030, 0xB060)})),
              ElementsAre("begin 0/B030 xid 700", "commit 0/B030 end 0/B060 events 0"));
}

// The checkpoint store's schema: its writes never take an index or reach a consumer,
// and a TRUNCATE keeps only the other relations.
TEST(TransactionAssemblerTest, ExcludedSchemaChangesTakeNoIndex) {
  TransactionAssembler assembler;
  assembler.set_excluded_schema("walfeed");
  pgoutput::Relation store = Relation(2, "consumer_checkpoints", {"stream", "consumer"});
  store.namespace_name = "walfeed";
  const std::vector<Output> out =
      Feed(assembler, {Begin(0x1000), Relation(1, "t", {"id"}), store,
                       Insert(2, Tuple({"s", "c"})), Insert(1, Tuple({"1"})),
                       Update(2, pgoutput::OldTupleKind::kNone, {}, Tuple({"s", "d"})),
                       Delete(2, Tuple({"s", "\n"})), Truncate({2, 1}, 1), Truncate({2}),
                       Commit(0x1000, 0x1040), Begin(0x2000), Insert(2, Tuple({"s", "e"})),
                       Commit(0x2000, 0x2040)});
  EXPECT_THAT(Lines(out), ElementsAre("begin 0/1000 xid 700", "event 0/1000:0 INSERT public.t",
                                      "event 0/1000:1 TRUNCATE last of 2 end 0/1040",
                                      "commit 0/1000 end 0/1040 events 2",
                                      "begin 0/2000 xid 700", "commit 0/2000 end 0/2040 events 0"));
  const std::vector<ChangeEvent> events = Events(out);
  ASSERT_EQ(events.size(), 2u);
  ASSERT_EQ(events[1].truncated_relations.size(), 1u);
  EXPECT_EQ(events[1].truncated_relations[0]->table, "t");
}

}  // namespace
}  // namespace walfeed::replication
