#include "server/filter.h"

#include "server/event_convert.h"

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "replication/relation_cache.h"
#include "replication/transaction_assembler.h"
#include "server/event_convert.h"
#include "tests/testing/status_matchers.h"
#include "walfeed/v1/change_stream.pb.h"

namespace walfeed::server {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;
using ::walfeed::testing::IsOk;
using ::walfeed::testing::StatusIs;
using replication::ChangeEvent;
using replication::RelationInfo;
using Op = ChangeEvent::Op;

std::shared_ptr<const RelationInfo> Table(std::string schema, std::string table) {
  auto relation = std::make_shared<RelationInfo>();
  relation->relation_id = 16384;
  relation->schema = std::move(schema);
  relation->table = std::move(table);
  return relation;
}

ChangeEvent RowEvent(Op op, std::string schema, std::string table) {
  ChangeEvent event;
  event.op = op;
  event.relation = Table(std::move(schema), std::move(table));
  return event;
}

ChangeEvent TruncateEvent(std::vector<std::shared_ptr<const RelationInfo>> relations) {
  ChangeEvent event;
  event.op = Op::kTruncate;
  event.truncated_relations = std::move(relations);
  return event;
}

ChangeEvent MessageEvent() {
  ChangeEvent event;
  event.op = Op::kMessage;
  event.message_prefix = "app";
  return event;
}

// Builds the filter the way the server does, from a SubscribeRequest. `operations`
// are ints so that tests can send values outside the enum.
absl::StatusOr<EventFilter> Make(const std::vector<std::string>& tables,
                                 const std::vector<int>& operations = {}) {
  walfeed::v1::SubscribeRequest request;
  for (const std::string& table : tables) request.add_tables(table);
  for (int op : operations) request.mutable_operations()->Add(op);
  return EventFilter::Create(request.tables(), request.operations());
}

EventFilter MakeOk(const std::vector<std::string>& tables,
                   const std::vector<int>& operations = {}) {
  absl::StatusOr<EventFilter> filter = Make(tables, operations);
  EXPECT_THAT(filter, IsOk());
  return filter.ok() ? *std::move(filter) : EventFilter();
}

// ---- Glob matching ----------------------------------------------------------------

struct GlobCase {
  const char* pattern;
  const char* schema;
  const char* table;
  bool matches;
};

TEST(GlobMatchesTableTest, Cases) {
  const GlobCase cases[] = {
      // Literals.
      {"public.orders", "public", "orders", true},
      {"public.orders", "public", "orders2", false},
      {"public.orders", "public", "order", false},
      {"public.orders", "app", "orders", false},
      {"Public.orders", "public", "orders", false},  // Case-sensitive, like PostgreSQL.
      // `*`: any run, including none and including '.'.
      {"public.*", "public", "orders", true},
      {"public.*", "public", "", true},
      {"public.*", "app", "orders", false},
      {"*.orders", "app", "orders", true},
      {"*.orders", "app", "old_orders", false},
      {"*.*", "a", "b", true},
      {"*", "a", "b", true},
      {"*orders", "public", "orders", true},
      {"public.*_archive", "public", "orders_archive", true},
      {"public.*_archive", "public", "orders_archive_old", false},
      {"*_archive*.*", "x", "y", false},
      {"*_archive*.*", "old_archive_2024", "t", true},
      {"p*.o*s", "public", "orders", true},
      {"p*.o*s", "public", "order", false},
      {"**.**", "public", "orders", true},
      {"a*b*c.d", "aXbYc", "d", true},
      {"a*b*c.d", "aXcYb", "d", false},
      // Star backtracking: the first candidate for the run is wrong.
      {"*ab.t", "aab", "t", true},
      {"*a.*a", "ba", "aba", true},
      // `?`: exactly one character.
      {"public.order?", "public", "orders", true},
      {"public.order?", "public", "order", false},
      {"public.order?", "public", "orders1", false},
      {"p?blic.orders", "public", "orders", true},
      {"??.t", "ab", "t", true},
      {"??.t", "a", "t", false},
      {"?.?", "a", "b", true},
      {"*?.t", "", "t", false},
      // The '.' is a literal, not "any character".
      {"pub.ic.*", "public", "orders", false},
      {"public.orders", "publicXorders", "", false},
      {"a.b", "a", "b", true},
      {"a.b", "aXb", "", false},
      // Names may contain dots themselves (quoted identifiers).
      {"my.schema.t", "my.schema", "t", true},
      {"*.t", "my.schema", "t", true},
      {"my.*", "my.schema", "t", true},
      // `?` and `*` step over whole UTF-8 characters.
      {"caf?.t", "caf\xC3\xA9", "t", true},
      {"caf??.t", "caf\xC3\xA9", "t", false},
      {"*?.t", "\xC3\xA9", "t", true},
      {"*??.t", "\xC3\xA9", "t", false},
      {"?.t", "\xF0\x9F\x98\x80", "t", true},
      {"caf\xC3\xA9.*", "caf\xC3\xA9", "t", true},
      // A non-UTF-8 byte is a character of its own.
      {"caf?.t", "caf\xE9", "t", true},
  };
  for (const GlobCase& c : cases) {
    EXPECT_EQ(GlobMatchesTable(c.pattern, c.schema, c.table), c.matches)
        << "pattern \"" << c.pattern << "\" name \"" << c.schema << "." << c.table << "\"";
  }
}

TEST(GlobMatchesTableTest, ManyStarsOnALongNameFinish) {
  // An exponential backtracking matcher would never return here.
  const std::string name(10'000, 'a');
  EXPECT_FALSE(GlobMatchesTable("*a*a*a*a*a*a*a*a*a*a*a*a*a*a*a*a*b.t", name, "t"));
  EXPECT_TRUE(GlobMatchesTable("*a*a*a*a*a*a*a*a*a*a*a*a*a*a*a*a*a.t", name, "t"));
  EXPECT_FALSE(GlobMatchesTable(std::string(5'000, '*') + "b.*", name, "t"));
}

// ---- Tables -----------------------------------------------------------------------

TEST(EventFilterTest, DefaultAndEmptyListsMatchEverything) {
  const EventFilter filters[] = {EventFilter(), MakeOk({}, {})};
  for (const EventFilter& filter : filters) {
    EXPECT_TRUE(filter.Matches(RowEvent(Op::kInsert, "public", "orders")));
    EXPECT_TRUE(filter.Matches(RowEvent(Op::kUpdate, "app", "x")));
    EXPECT_TRUE(filter.Matches(RowEvent(Op::kDelete, "app", "x")));
    EXPECT_TRUE(filter.Matches(TruncateEvent({Table("a", "b")})));
    EXPECT_TRUE(filter.Matches(MessageEvent()));
    EXPECT_TRUE(filter.MatchesTable("any", "thing"));
  }
}

TEST(EventFilterTest, RowEventsMatchAnyPattern) {
  const EventFilter filter = MakeOk({"public.orders", "app.*"});
  EXPECT_TRUE(filter.Matches(RowEvent(Op::kInsert, "public", "orders")));
  EXPECT_TRUE(filter.Matches(RowEvent(Op::kUpdate, "app", "lines")));
  EXPECT_TRUE(filter.Matches(RowEvent(Op::kDelete, "app", "users")));
  EXPECT_FALSE(filter.Matches(RowEvent(Op::kInsert, "public", "users")));
  EXPECT_FALSE(filter.Matches(RowEvent(Op::kInsert, "application", "lines")));
}

TEST(EventFilterTest, TruncateMatchesIfAnyTableMatches) {
  const EventFilter filter = MakeOk({"public.orders"});
  EXPECT_TRUE(filter.Matches(TruncateEvent({Table("public", "items"), Table("public", "orders")})));
  EXPECT_TRUE(filter.Matches(TruncateEvent({Table("public", "orders")})));
  EXPECT_FALSE(filter.Matches(TruncateEvent({Table("public", "items")})));
  EXPECT_FALSE(filter.Matches(TruncateEvent({})));
}

TEST(EventFilterTest, MessagesPassTableFilters) {
  const EventFilter filter = MakeOk({"public.orders"});
  EXPECT_TRUE(filter.Matches(MessageEvent()));
}

// ---- Operations -------------------------------------------------------------------

TEST(EventFilterTest, OperationsFilter) {
  const EventFilter filter =
      MakeOk({}, {walfeed::v1::OPERATION_INSERT, walfeed::v1::OPERATION_DELETE});
  EXPECT_TRUE(filter.Matches(RowEvent(Op::kInsert, "public", "orders")));
  EXPECT_FALSE(filter.Matches(RowEvent(Op::kUpdate, "public", "orders")));
  EXPECT_TRUE(filter.Matches(RowEvent(Op::kDelete, "public", "orders")));
  EXPECT_FALSE(filter.Matches(TruncateEvent({Table("public", "orders")})));
  EXPECT_FALSE(filter.Matches(MessageEvent()));
}

TEST(EventFilterTest, EachOperationMapsToItsOwnEvents) {
  struct Case {
    walfeed::v1::Operation proto;
    ChangeEvent event;
  };
  const Case cases[] = {
      {walfeed::v1::OPERATION_INSERT, RowEvent(Op::kInsert, "s", "t")},
      {walfeed::v1::OPERATION_UPDATE, RowEvent(Op::kUpdate, "s", "t")},
      {walfeed::v1::OPERATION_DELETE, RowEvent(Op::kDelete, "s", "t")},
      {walfeed::v1::OPERATION_TRUNCATE, TruncateEvent({Table("s", "t")})},
      {walfeed::v1::OPERATION_MESSAGE, MessageEvent()},
  };
  for (const Case& selected : cases) {
    const EventFilter filter = MakeOk({}, {selected.proto});
    for (const Case& other : cases) {
      EXPECT_EQ(filter.Matches(other.event), selected.proto == other.proto)
          << walfeed::v1::Operation_Name(selected.proto) << " vs "
          << walfeed::v1::Operation_Name(other.proto);
    }
  }
}

TEST(EventFilterTest, DuplicateOperationsAreHarmless) {
  const EventFilter filter =
      MakeOk({}, {walfeed::v1::OPERATION_UPDATE, walfeed::v1::OPERATION_UPDATE});
  EXPECT_TRUE(filter.Matches(RowEvent(Op::kUpdate, "s", "t")));
  EXPECT_FALSE(filter.Matches(RowEvent(Op::kInsert, "s", "t")));
}

TEST(EventFilterTest, TablesAndOperationsMustBothMatch) {
  const EventFilter filter =
      MakeOk({"public.orders"}, {walfeed::v1::OPERATION_INSERT, walfeed::v1::OPERATION_MESSAGE});
  EXPECT_TRUE(filter.Matches(RowEvent(Op::kInsert, "public", "orders")));
  EXPECT_FALSE(filter.Matches(RowEvent(Op::kUpdate, "public", "orders")));
  EXPECT_FALSE(filter.Matches(RowEvent(Op::kInsert, "public", "items")));
  EXPECT_TRUE(filter.Matches(MessageEvent()));

  const EventFilter no_messages = MakeOk({"public.orders"}, {walfeed::v1::OPERATION_INSERT});
  EXPECT_FALSE(no_messages.Matches(MessageEvent()));
}

// The key the server keeps beside each buffered event holds what the filter reads.
TEST(EventFilterTest, KeyHoldsTheOperationAndEveryTable) {
  using Tables = std::vector<std::pair<std::string, std::string>>;
  auto tables = [](const FilterKey& key) { return Tables(key.tables.begin(), key.tables.end()); };
  const FilterKey row = FilterKey::Of(ToProto(RowEvent(Op::kUpdate, "app", "users")));
  EXPECT_EQ(row.op, walfeed::v1::OPERATION_UPDATE);
  EXPECT_EQ(tables(row), (Tables{{"app", "users"}}));
  const FilterKey truncate = FilterKey::Of(
      ToProto(TruncateEvent({Table("public", "other"), Table("public", "orders")})));
  EXPECT_EQ(truncate.op, walfeed::v1::OPERATION_TRUNCATE);
  EXPECT_EQ(tables(truncate), (Tables{{"public", "other"}, {"public", "orders"}}));
  const FilterKey message = FilterKey::Of(ToProto(MessageEvent()));
  EXPECT_EQ(message.op, walfeed::v1::OPERATION_MESSAGE);
  EXPECT_THAT(tables(message), ::testing::IsEmpty());
}

// ---- Invalid requests -------------------------------------------------------------

// The server filters the converted events it buffers: the decision must be the
// same as on the replication event for every kind of event and filter.
TEST(EventFilterTest, ConvertedEventsGetTheSameDecision) {
  const std::vector<ChangeEvent> events = {
      RowEvent(Op::kInsert, "public", "orders"), RowEvent(Op::kUpdate, "app", "users"),
      RowEvent(Op::kDelete, "public", "other"),
      TruncateEvent({Table("public", "other"), Table("public", "orders")}),
      TruncateEvent({Table("public", "other")}), MessageEvent()};
  const EventFilter filters[] = {
      EventFilter(), MakeOk({"public.orders"}), MakeOk({"app.*"}, {walfeed::v1::OPERATION_UPDATE}),
      MakeOk({}, {walfeed::v1::OPERATION_TRUNCATE, walfeed::v1::OPERATION_MESSAGE}),
      MakeOk({"public.o*"}, {walfeed::v1::OPERATION_INSERT, walfeed::v1::OPERATION_TRUNCATE})};
  for (const EventFilter& filter : filters) {
    for (const ChangeEvent& event : events) {
      EXPECT_EQ(filter.Matches(ToProto(event)), filter.Matches(event)) << OpName(event.op);
    }
  }
}

TEST(EventFilterTest, EmptyPatternIsRejected) {
  EXPECT_THAT(Make({"public.orders", ""}),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       AllOf(HasSubstr("tables[1]"), HasSubstr("empty"))));
}

TEST(EventFilterTest, PatternWithoutDotIsRejected) {
  EXPECT_THAT(Make({"orders"}),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       AllOf(HasSubstr("tables[0]"), HasSubstr("\"orders\""),
                             HasSubstr("schema.table"))));
  EXPECT_THAT(Make({"public.*", "*"}),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("tables[1]")));
}

// Every buffered event meets every pattern under the stream's lock: a request
// cannot bring an unbounded list (measured before the bound: 60,000 patterns
// cost 184 ms per event).
TEST(EventFilterTest, PatternListsAreBounded) {
  std::vector<std::string> many(EventFilter::kMaxTablePatterns, "public.t*");
  EXPECT_THAT(Make(many), IsOk());
  many.push_back("public.t*");
  EXPECT_THAT(Make(many), StatusIs(absl::StatusCode::kInvalidArgument,
                                   AllOf(HasSubstr("tables: 65 patterns"), HasSubstr("64"))));
  const std::string longest = "public." + std::string(EventFilter::kMaxTablePatternBytes - 7, '*');
  EXPECT_THAT(Make({longest}), IsOk());
  EXPECT_THAT(Make({longest + "*"}),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       AllOf(HasSubstr("tables[0]: 256 bytes"), HasSubstr("at most 255"))));
}

TEST(EventFilterTest, UnspecifiedOperationIsRejected) {
  EXPECT_THAT(Make({}, {walfeed::v1::OPERATION_INSERT, walfeed::v1::OPERATION_UNSPECIFIED}),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       AllOf(HasSubstr("operations[1]"), HasSubstr("OPERATION_UNSPECIFIED"))));
}

TEST(EventFilterTest, UnknownOperationIsRejected) {
  EXPECT_THAT(Make({}, {99}), StatusIs(absl::StatusCode::kInvalidArgument,
                                       AllOf(HasSubstr("operations[0]"), HasSubstr("99"))));
  EXPECT_THAT(Make({}, {-1}), StatusIs(absl::StatusCode::kInvalidArgument,
                                       AllOf(HasSubstr("operations[0]"), HasSubstr("-1"))));
  EXPECT_THAT(Make({}, {7}), StatusIs(absl::StatusCode::kInvalidArgument,
                                      AllOf(HasSubstr("operations[0]"), HasSubstr("7"))));
}

}  // namespace
}  // namespace walfeed::server
