#include "server/event_convert.h"

#include <cstdint>
#include <limits>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "replication/event_id.h"
#include "replication/lsn.h"
#include "replication/pgoutput.h"
#include "replication/relation_cache.h"
#include "replication/transaction_assembler.h"
#include "walfeed/v1/change_stream.pb.h"

namespace walfeed::server {
namespace {

using ::testing::IsEmpty;
using ::testing::SizeIs;
using replication::ChangeEvent;
using replication::ColumnInfo;
using replication::EventId;
using replication::Lsn;
using replication::RelationInfo;
using replication::pgoutput::OldTupleKind;
using replication::pgoutput::TupleData;
using replication::pgoutput::TupleValue;
using Kind = TupleValue::Kind;

constexpr uint64_t kCommitLsn = 0x1A2B3C8;
constexpr int64_t kUnixSecondsAtPostgresEpoch = 946684800;  // 2000-01-01T00:00:00Z.

// ---- Builders -------------------------------------------------------------------

ColumnInfo Column(std::string name, uint32_t type_oid, std::string type_name, bool key) {
  ColumnInfo column;
  column.name = std::move(name);
  column.type_oid = type_oid;
  column.type_name = std::move(type_name);
  column.is_key = key;
  return column;
}

std::shared_ptr<const RelationInfo> Relation(std::string schema, std::string table,
                                             std::vector<ColumnInfo> columns) {
  auto relation = std::make_shared<RelationInfo>();
  relation->relation_id = 16384;
  relation->schema = std::move(schema);
  relation->table = std::move(table);
  relation->columns = std::move(columns);
  return relation;
}

// public.orders(id int4 key, note text, total numeric).
std::shared_ptr<const RelationInfo> Orders() {
  return Relation("public", "orders",
                  {Column("id", 23, "int4", true), Column("note", 25, "text", false),
                   Column("total", 1700, "numeric", false)});
}

TupleValue Text(std::string data) { return TupleValue{Kind::kText, std::move(data)}; }
TupleValue Binary(std::string data) { return TupleValue{Kind::kBinary, std::move(data)}; }
TupleValue Null() { return TupleValue{Kind::kNull, ""}; }
TupleValue Toast() { return TupleValue{Kind::kUnchangedToast, ""}; }

TupleData Tuple(std::vector<TupleValue> values) { return TupleData{std::move(values)}; }

ChangeEvent Event(ChangeEvent::Op op, uint32_t index = 0) {
  ChangeEvent event;
  event.id = EventId{Lsn(kCommitLsn), index};
  event.xid = 700;
  event.commit_time = 0;
  event.op = op;
  return event;
}

// Every converted event must survive the consumer's parse: protobuf parsers reject a
// message whose `string` fields hold invalid UTF-8.
void ExpectParses(const walfeed::v1::ChangeEvent& event) {
  walfeed::v1::ChangeEvent parsed;
  ASSERT_TRUE(parsed.ParseFromString(event.SerializeAsString()));
  EXPECT_EQ(parsed.SerializeAsString(), event.SerializeAsString());
}

// ---- Common fields ----------------------------------------------------------------

TEST(EventConvertTest, InsertMapsEveryField) {
  ChangeEvent in = Event(ChangeEvent::Op::kInsert, 2);
  in.relation = Orders();
  in.new_tuple = Tuple({Text("7"), Text("hello"), Null()});

  const walfeed::v1::ChangeEvent out = ToProto(in);

  EXPECT_EQ(out.id(), "0/1A2B3C8:2");
  EXPECT_EQ(out.commit_lsn(), kCommitLsn);
  EXPECT_EQ(out.index(), 2u);
  EXPECT_EQ(out.xid(), 700u);
  EXPECT_EQ(out.commit_time().seconds(), kUnixSecondsAtPostgresEpoch);
  EXPECT_EQ(out.commit_time().nanos(), 0);
  EXPECT_EQ(out.op(), walfeed::v1::OPERATION_INSERT);
  EXPECT_EQ(out.schema(), "public");
  EXPECT_EQ(out.table(), "orders");
  ASSERT_THAT(out.new_values(), SizeIs(3));
  EXPECT_EQ(out.new_values(0).name(), "id");
  EXPECT_EQ(out.new_values(0).type_oid(), 23u);
  EXPECT_EQ(out.new_values(0).type_name(), "int4");
  EXPECT_TRUE(out.new_values(0).key());
  EXPECT_EQ(out.new_values(0).kind(), walfeed::v1::VALUE_KIND_TEXT);
  EXPECT_EQ(out.new_values(0).text(), "7");
  EXPECT_EQ(out.new_values(1).name(), "note");
  EXPECT_EQ(out.new_values(1).type_oid(), 25u);
  EXPECT_EQ(out.new_values(1).type_name(), "text");
  EXPECT_FALSE(out.new_values(1).key());
  EXPECT_EQ(out.new_values(1).text(), "hello");
  EXPECT_EQ(out.new_values(2).name(), "total");
  EXPECT_EQ(out.new_values(2).type_oid(), 1700u);
  EXPECT_EQ(out.new_values(2).kind(), walfeed::v1::VALUE_KIND_NULL);
  EXPECT_THAT(out.old_values(), IsEmpty());
  EXPECT_EQ(out.old_values_kind(), walfeed::v1::OLD_VALUES_UNSPECIFIED);
  EXPECT_FALSE(out.has_truncate());
  EXPECT_FALSE(out.has_message());
  EXPECT_FALSE(out.last_in_transaction());
  EXPECT_EQ(out.transaction_event_count(), 0u);
  ExpectParses(out);
}

TEST(EventConvertTest, LastEventCarriesTransactionCount) {
  ChangeEvent in = Event(ChangeEvent::Op::kInsert, 4);
  in.relation = Orders();
  in.new_tuple = Tuple({Text("1"), Null(), Null()});
  in.last_in_transaction = true;
  in.transaction_event_count = 5;
  in.end_lsn = Lsn(kCommitLsn + 0x30);

  const walfeed::v1::ChangeEvent out = ToProto(in);
  EXPECT_TRUE(out.last_in_transaction());
  EXPECT_EQ(out.transaction_event_count(), 5u);
  EXPECT_EQ(out.id(), "0/1A2B3C8:4");
}

TEST(EventConvertTest, CommitLsnIsTheFull64BitValue) {
  ChangeEvent in = Event(ChangeEvent::Op::kMessage);
  in.id = EventId{Lsn(0x16'0000'00A8), 0};
  const walfeed::v1::ChangeEvent out = ToProto(in);
  EXPECT_EQ(out.id(), "16/A8:0");
  EXPECT_EQ(out.commit_lsn(), uint64_t{0x16'0000'00A8});
}

TEST(EventConvertTest, OutputIsClearedBeforeFilling) {
  ChangeEvent truncate = Event(ChangeEvent::Op::kTruncate);
  truncate.truncated_relations = {Orders()};
  ChangeEvent insert = Event(ChangeEvent::Op::kInsert);
  insert.relation = Orders();
  insert.new_tuple = Tuple({Text("1"), Null(), Null()});

  walfeed::v1::ChangeEvent out;
  ToProto(truncate, &out);
  ASSERT_TRUE(out.has_truncate());
  ToProto(insert, &out);
  EXPECT_FALSE(out.has_truncate());
  EXPECT_EQ(out.SerializeAsString(), ToProto(insert).SerializeAsString());
}

// ---- commit_time ------------------------------------------------------------------

struct TimestampCase {
  int64_t postgres_micros;
  int64_t seconds;
  int32_t nanos;
};

TEST(EventConvertTest, PostgresMicrosToTimestamp) {
  const TimestampCase cases[] = {
      {0, kUnixSecondsAtPostgresEpoch, 0},
      {1, kUnixSecondsAtPostgresEpoch, 1000},
      {1'500'000, kUnixSecondsAtPostgresEpoch + 1, 500'000'000},
      // Before 2000: floor, so nanos stays non-negative.
      {-1, kUnixSecondsAtPostgresEpoch - 1, 999'999'000},
      {-1'000'000, kUnixSecondsAtPostgresEpoch - 1, 0},
      // The Unix epoch itself.
      {-kUnixSecondsAtPostgresEpoch * 1'000'000, 0, 0},
      // 2025-01-01-ish.
      {789'000'000'123, 947'473'800, 123'000},
      // The extremes convert exactly, without overflow.
      {std::numeric_limits<int64_t>::max(), 9'224'318'721'654, 775'807'000},
      {std::numeric_limits<int64_t>::min(), -9'222'425'352'055, 224'192'000},
  };
  for (const TimestampCase& c : cases) {
    const google::protobuf::Timestamp ts = PostgresMicrosToTimestamp(c.postgres_micros);
    EXPECT_EQ(ts.seconds(), c.seconds) << c.postgres_micros;
    EXPECT_EQ(ts.nanos(), c.nanos) << c.postgres_micros;
  }
}

TEST(EventConvertTest, CommitTimeIsConverted) {
  ChangeEvent in = Event(ChangeEvent::Op::kMessage);
  in.commit_time = 789'000'000'123;
  const walfeed::v1::ChangeEvent out = ToProto(in);
  EXPECT_EQ(out.commit_time().seconds(), 947'473'800);
  EXPECT_EQ(out.commit_time().nanos(), 123'000);
}

// ---- Values -----------------------------------------------------------------------

TEST(EventConvertTest, EveryValueKind) {
  ChangeEvent in = Event(ChangeEvent::Op::kInsert);
  in.relation = Relation("public", "kinds",
                         {Column("a", 25, "text", true), Column("b", 25, "text", false),
                          Column("c", 25, "text", false), Column("d", 25, "text", false),
                          Column("e", 17, "bytea", false), Column("f", 25, "text", false)});
  in.new_tuple = Tuple({Null(), Toast(), Text(""), Text("x y"),
                        Binary(std::string("\x00\x01\xFF", 3)), Text("caf\xE9")});

  const walfeed::v1::ChangeEvent out = ToProto(in);
  ASSERT_THAT(out.new_values(), SizeIs(6));

  EXPECT_EQ(out.new_values(0).kind(), walfeed::v1::VALUE_KIND_NULL);
  EXPECT_EQ(out.new_values(0).text(), "");
  EXPECT_EQ(out.new_values(0).raw(), "");

  EXPECT_EQ(out.new_values(1).kind(), walfeed::v1::VALUE_KIND_UNCHANGED_TOAST);
  EXPECT_EQ(out.new_values(1).text(), "");
  EXPECT_EQ(out.new_values(1).raw(), "");

  // The empty string is TEXT, distinct from NULL and unchanged TOAST.
  EXPECT_EQ(out.new_values(2).kind(), walfeed::v1::VALUE_KIND_TEXT);
  EXPECT_EQ(out.new_values(2).text(), "");

  EXPECT_EQ(out.new_values(3).kind(), walfeed::v1::VALUE_KIND_TEXT);
  EXPECT_EQ(out.new_values(3).text(), "x y");
  EXPECT_EQ(out.new_values(3).raw(), "");

  EXPECT_EQ(out.new_values(4).kind(), walfeed::v1::VALUE_KIND_RAW);
  EXPECT_EQ(out.new_values(4).raw(), std::string("\x00\x01\xFF", 3));
  EXPECT_EQ(out.new_values(4).text(), "");

  // LATIN1 "café": not UTF-8, so carried byte for byte.
  EXPECT_EQ(out.new_values(5).kind(), walfeed::v1::VALUE_KIND_RAW);
  EXPECT_EQ(out.new_values(5).raw(), "caf\xE9");
  EXPECT_EQ(out.new_values(5).text(), "");
  ExpectParses(out);
}

struct Utf8Case {
  const char* what;
  std::string bytes;
  bool valid;
};

std::vector<Utf8Case> Utf8Cases() {
  return {
      {"empty", "", true},
      {"ascii", "plain text 123", true},
      {"nul", std::string("a\0b", 3), true},
      {"2-byte", "caf\xC3\xA9", true},
      {"3-byte euro", "\xE2\x82\xAC", true},
      {"4-byte emoji", "\xF0\x9F\x98\x80", true},
      {"U+D7FF before surrogates", "\xED\x9F\xBF", true},
      {"U+E000 after surrogates", "\xEE\x80\x80", true},
      {"U+FFFF", "\xEF\xBF\xBF", true},
      {"U+10000", "\xF0\x90\x80\x80", true},
      {"U+10FFFF", "\xF4\x8F\xBF\xBF", true},
      {"overlong 2-byte slash", "\xC0\xAF", false},
      {"overlong C1", "\xC1\xBF", false},
      {"overlong 3-byte", "\xE0\x80\xAF", false},
      {"overlong 3-byte U+07FF", "\xE0\x9F\xBF", false},
      {"overlong 4-byte", "\xF0\x80\x80\xAF", false},
      {"overlong 4-byte U+FFFF", "\xF0\x8F\xBF\xBF", false},
      {"surrogate D800", "\xED\xA0\x80", false},
      {"surrogate DFFF", "\xED\xBF\xBF", false},
      {"surrogate pair (CESU-8)", "\xED\xA0\xBD\xED\xB8\x80", false},
      {"U+110000", "\xF4\x90\x80\x80", false},
      {"F5 lead", "\xF5\x80\x80\x80", false},
      {"FF byte", "\xFF", false},
      {"lone continuation", "\x80", false},
      {"truncated 2-byte at end", "ab\xC3", false},
      {"truncated 3-byte at end", "ab\xE2\x82", false},
      {"truncated 4-byte at end", "\xF0\x9F\x98", false},
      {"truncated 3-byte before ascii", "\xE2\x82z", false},
      {"latin1", "caf\xE9", false},
      {"valid then invalid", "\xF0\x9F\x98\x80\xC0", false},
  };
}

TEST(EventConvertTest, IsValidUtf8) {
  for (const Utf8Case& c : Utf8Cases()) {
    EXPECT_EQ(IsValidUtf8(c.bytes), c.valid) << c.what;
  }
}

// The same cases at every position relative to the eight-byte ASCII steps, and
// with ASCII after them.
TEST(EventConvertTest, IsValidUtf8AtEveryAlignment) {
  for (const Utf8Case& c : Utf8Cases()) {
    for (size_t before = 0; before <= 17; ++before) {
      for (size_t after : {0, 1, 7, 8, 9}) {
        const std::string bytes = std::string(before, 'a') + c.bytes + std::string(after, 'z');
        EXPECT_EQ(IsValidUtf8(bytes), c.valid) << c.what << " after " << before << " bytes";
      }
    }
  }
}

// What IsValidUtf8 accepts, protobuf's parser must accept too: otherwise a TEXT
// value would make the consumer's parse fail.
TEST(EventConvertTest, ValidUtf8IsAcceptedByProtobuf) {
  for (const Utf8Case& c : Utf8Cases()) {
    if (!c.valid) continue;
    walfeed::v1::ColumnValue value;
    value.set_text(c.bytes);
    walfeed::v1::ColumnValue parsed;
    EXPECT_TRUE(parsed.ParseFromString(value.SerializeAsString())) << c.what;
    EXPECT_EQ(parsed.text(), c.bytes) << c.what;
  }
}

TEST(EventConvertTest, TextValueIsRawExactlyWhenNotUtf8) {
  for (const Utf8Case& c : Utf8Cases()) {
    ChangeEvent in = Event(ChangeEvent::Op::kInsert);
    in.relation = Relation("public", "t", {Column("v", 25, "text", false)});
    in.new_tuple = Tuple({Text(c.bytes)});

    const walfeed::v1::ChangeEvent out = ToProto(in);
    ASSERT_THAT(out.new_values(), SizeIs(1)) << c.what;
    const walfeed::v1::ColumnValue& value = out.new_values(0);
    if (c.valid) {
      EXPECT_EQ(value.kind(), walfeed::v1::VALUE_KIND_TEXT) << c.what;
      EXPECT_EQ(value.text(), c.bytes) << c.what;
      EXPECT_EQ(value.raw(), "") << c.what;
    } else {
      EXPECT_EQ(value.kind(), walfeed::v1::VALUE_KIND_RAW) << c.what;
      EXPECT_EQ(value.raw(), c.bytes) << c.what;
      EXPECT_EQ(value.text(), "") << c.what;
    }
    ExpectParses(out);
  }
}

TEST(EventConvertTest, SanitizeUtf8ReplacesMaximalIllFormedSubparts) {
  const std::string kFffd = "\xEF\xBF\xBD";
  EXPECT_EQ(SanitizeUtf8(""), "");
  EXPECT_EQ(SanitizeUtf8("app/v1 \xF0\x9F\x98\x80"), "app/v1 \xF0\x9F\x98\x80");
  EXPECT_EQ(SanitizeUtf8("pre\xFF" "fix"), "pre" + kFffd + "fix");
  // C0 can start no sequence and AF is a stray continuation: two replacements.
  EXPECT_EQ(SanitizeUtf8("\xC0\xAF"), kFffd + kFffd);
  // ED A0 is not a prefix of any well-formed sequence: each byte is replaced.
  EXPECT_EQ(SanitizeUtf8("\xED\xA0\x80"), kFffd + kFffd + kFffd);
  EXPECT_EQ(SanitizeUtf8("\xF4\x90\x80\x80"), kFffd + kFffd + kFffd + kFffd);
  // A truncated sequence is one maximal subpart, one replacement.
  EXPECT_EQ(SanitizeUtf8("ab\xE2\x82"), "ab" + kFffd);
  EXPECT_EQ(SanitizeUtf8("\xE2\x82z"), kFffd + "z");
  EXPECT_EQ(SanitizeUtf8("\xF0\x9F\x98\xF0\x9F\x98\x80"), kFffd + "\xF0\x9F\x98\x80");
  for (const Utf8Case& c : Utf8Cases()) {
    EXPECT_TRUE(IsValidUtf8(SanitizeUtf8(c.bytes))) << c.what;
    if (c.valid) {
      EXPECT_EQ(SanitizeUtf8(c.bytes), c.bytes) << c.what;
    }
  }
}

// ---- Old rows ---------------------------------------------------------------------

TEST(EventConvertTest, UpdateWithKeyOldTupleSendsOnlyKeyColumns) {
  ChangeEvent in = Event(ChangeEvent::Op::kUpdate);
  in.relation = Orders();
  in.old_kind = OldTupleKind::kKey;
  // PostgreSQL's 'n' placeholders for the non-key columns: not real NULLs.
  in.old_tuple = Tuple({Text("7"), Null(), Null()});
  in.new_tuple = Tuple({Text("8"), Toast(), Text("9.50")});

  const walfeed::v1::ChangeEvent out = ToProto(in);
  EXPECT_EQ(out.op(), walfeed::v1::OPERATION_UPDATE);
  EXPECT_EQ(out.old_values_kind(), walfeed::v1::OLD_VALUES_KEY);
  ASSERT_THAT(out.old_values(), SizeIs(1));
  EXPECT_EQ(out.old_values(0).name(), "id");
  EXPECT_TRUE(out.old_values(0).key());
  EXPECT_EQ(out.old_values(0).kind(), walfeed::v1::VALUE_KIND_TEXT);
  EXPECT_EQ(out.old_values(0).text(), "7");
  ASSERT_THAT(out.new_values(), SizeIs(3));
  EXPECT_EQ(out.new_values(0).text(), "8");
  EXPECT_EQ(out.new_values(1).kind(), walfeed::v1::VALUE_KIND_UNCHANGED_TOAST);
  EXPECT_EQ(out.new_values(2).text(), "9.50");
  ExpectParses(out);
}

TEST(EventConvertTest, KeyOldTupleKeepsCompositeKeyInColumnOrder) {
  ChangeEvent in = Event(ChangeEvent::Op::kDelete);
  in.relation = Relation("app", "lines",
                         {Column("order_id", 20, "int8", true), Column("qty", 23, "int4", false),
                          Column("line_no", 23, "int4", true)});
  in.old_kind = OldTupleKind::kKey;
  in.old_tuple = Tuple({Text("100"), Null(), Text("3")});

  const walfeed::v1::ChangeEvent out = ToProto(in);
  EXPECT_EQ(out.op(), walfeed::v1::OPERATION_DELETE);
  EXPECT_EQ(out.schema(), "app");
  EXPECT_EQ(out.table(), "lines");
  EXPECT_EQ(out.old_values_kind(), walfeed::v1::OLD_VALUES_KEY);
  ASSERT_THAT(out.old_values(), SizeIs(2));
  EXPECT_EQ(out.old_values(0).name(), "order_id");
  EXPECT_EQ(out.old_values(0).type_name(), "int8");
  EXPECT_EQ(out.old_values(0).text(), "100");
  EXPECT_EQ(out.old_values(1).name(), "line_no");
  EXPECT_EQ(out.old_values(1).text(), "3");
  EXPECT_THAT(out.new_values(), IsEmpty());
}

TEST(EventConvertTest, UpdateWithoutOldTuple) {
  ChangeEvent in = Event(ChangeEvent::Op::kUpdate);
  in.relation = Orders();
  in.old_kind = OldTupleKind::kNone;
  in.new_tuple = Tuple({Text("7"), Text("n"), Null()});

  const walfeed::v1::ChangeEvent out = ToProto(in);
  EXPECT_EQ(out.old_values_kind(), walfeed::v1::OLD_VALUES_UNSPECIFIED);
  EXPECT_THAT(out.old_values(), IsEmpty());
  EXPECT_THAT(out.new_values(), SizeIs(3));
}

TEST(EventConvertTest, DeleteWithFullOldTupleSendsEveryColumn) {
  // Under REPLICA IDENTITY FULL every column is part of the identity.
  ChangeEvent in = Event(ChangeEvent::Op::kDelete);
  in.relation = Relation("public", "logs",
                         {Column("at", 1184, "timestamptz", true),
                          Column("line", 25, "text", true), Column("extra", 3802, "jsonb", true)});
  in.old_kind = OldTupleKind::kFull;
  in.old_tuple = Tuple({Text("2025-01-01 00:00:00+00"), Null(), Toast()});

  const walfeed::v1::ChangeEvent out = ToProto(in);
  EXPECT_EQ(out.op(), walfeed::v1::OPERATION_DELETE);
  EXPECT_EQ(out.old_values_kind(), walfeed::v1::OLD_VALUES_FULL);
  ASSERT_THAT(out.old_values(), SizeIs(3));
  EXPECT_EQ(out.old_values(0).name(), "at");
  EXPECT_EQ(out.old_values(0).text(), "2025-01-01 00:00:00+00");
  EXPECT_EQ(out.old_values(1).name(), "line");
  EXPECT_EQ(out.old_values(1).kind(), walfeed::v1::VALUE_KIND_NULL);  // A real NULL.
  EXPECT_EQ(out.old_values(2).name(), "extra");
  EXPECT_EQ(out.old_values(2).type_oid(), 3802u);
  EXPECT_EQ(out.old_values(2).kind(), walfeed::v1::VALUE_KIND_UNCHANGED_TOAST);
  EXPECT_THAT(out.new_values(), IsEmpty());
}

TEST(EventConvertTest, FullOldTupleOnUpdateKeepsNonKeyColumns) {
  // A FULL old tuple is sent whole even if a column is not flagged as key.
  ChangeEvent in = Event(ChangeEvent::Op::kUpdate);
  in.relation = Orders();
  in.old_kind = OldTupleKind::kFull;
  in.old_tuple = Tuple({Text("7"), Null(), Text("1.00")});
  in.new_tuple = Tuple({Text("7"), Text("x"), Text("2.00")});

  const walfeed::v1::ChangeEvent out = ToProto(in);
  EXPECT_EQ(out.old_values_kind(), walfeed::v1::OLD_VALUES_FULL);
  ASSERT_THAT(out.old_values(), SizeIs(3));
  EXPECT_EQ(out.old_values(1).name(), "note");
  EXPECT_FALSE(out.old_values(1).key());
  EXPECT_EQ(out.old_values(1).kind(), walfeed::v1::VALUE_KIND_NULL);
  EXPECT_EQ(out.old_values(2).text(), "1.00");
}

TEST(EventConvertTest, ValuesBeyondTheDescribedColumnsAreNotDropped) {
  // Cannot come from the assembler (it checks column counts); the conversion still
  // never loses a value.
  ChangeEvent in = Event(ChangeEvent::Op::kInsert);
  in.relation = Relation("public", "t", {Column("a", 23, "int4", true)});
  in.new_tuple = Tuple({Text("1"), Text("2")});

  const walfeed::v1::ChangeEvent out = ToProto(in);
  ASSERT_THAT(out.new_values(), SizeIs(2));
  EXPECT_EQ(out.new_values(1).name(), "");
  EXPECT_EQ(out.new_values(1).text(), "2");
}

TEST(EventConvertTest, NonUtf8NamesAreSanitized) {
  ChangeEvent in = Event(ChangeEvent::Op::kInsert);
  in.relation = Relation("s\xE9", "caf\xE9", {Column("gr\xF6\xDF" "e", 25, "t\xFF", false)});
  in.new_tuple = Tuple({Text("ok")});

  const walfeed::v1::ChangeEvent out = ToProto(in);
  EXPECT_EQ(out.schema(), "s\xEF\xBF\xBD");
  EXPECT_EQ(out.table(), "caf\xEF\xBF\xBD");
  ASSERT_THAT(out.new_values(), SizeIs(1));
  EXPECT_EQ(out.new_values(0).name(), "gr\xEF\xBF\xBD\xEF\xBF\xBD" "e");
  EXPECT_EQ(out.new_values(0).type_name(), "t\xEF\xBF\xBD");
  ExpectParses(out);
}

// ---- TRUNCATE ---------------------------------------------------------------------

TEST(EventConvertTest, TruncateListsTablesAndOptions) {
  ChangeEvent in = Event(ChangeEvent::Op::kTruncate, 1);
  in.truncated_relations = {Orders(), Relation("app", "lines", {})};
  in.truncate_options = replication::pgoutput::Truncate::kCascade |
                        replication::pgoutput::Truncate::kRestartIdentity;

  const walfeed::v1::ChangeEvent out = ToProto(in);
  EXPECT_EQ(out.op(), walfeed::v1::OPERATION_TRUNCATE);
  EXPECT_EQ(out.schema(), "");
  EXPECT_EQ(out.table(), "");
  EXPECT_THAT(out.new_values(), IsEmpty());
  EXPECT_THAT(out.old_values(), IsEmpty());
  EXPECT_FALSE(out.has_message());
  ASSERT_TRUE(out.has_truncate());
  ASSERT_THAT(out.truncate().tables(), SizeIs(2));
  EXPECT_EQ(out.truncate().tables(0).schema(), "public");
  EXPECT_EQ(out.truncate().tables(0).table(), "orders");
  EXPECT_EQ(out.truncate().tables(1).schema(), "app");
  EXPECT_EQ(out.truncate().tables(1).table(), "lines");
  EXPECT_TRUE(out.truncate().cascade());
  EXPECT_TRUE(out.truncate().restart_identity());
  ExpectParses(out);
}

TEST(EventConvertTest, TruncateOptionBitsAreIndependent) {
  struct Case {
    uint8_t options;
    bool cascade;
    bool restart_identity;
  };
  const Case cases[] = {
      {0, false, false},
      {replication::pgoutput::Truncate::kCascade, true, false},
      {replication::pgoutput::Truncate::kRestartIdentity, false, true},
      {3, true, true},
  };
  for (const Case& c : cases) {
    ChangeEvent in = Event(ChangeEvent::Op::kTruncate);
    in.truncated_relations = {Orders()};
    in.truncate_options = c.options;
    const walfeed::v1::ChangeEvent out = ToProto(in);
    ASSERT_TRUE(out.has_truncate());
    EXPECT_EQ(out.truncate().cascade(), c.cascade) << int{c.options};
    EXPECT_EQ(out.truncate().restart_identity(), c.restart_identity) << int{c.options};
  }
}

// ---- MESSAGE ----------------------------------------------------------------------

TEST(EventConvertTest, MessageKeepsBinaryContent) {
  ChangeEvent in = Event(ChangeEvent::Op::kMessage, 3);
  in.message_prefix = "app/audit";
  in.message_content = std::string("\x00\xFF\xC0\xAF text", 9);
  in.message_lsn = Lsn(0x1A2B390);

  const walfeed::v1::ChangeEvent out = ToProto(in);
  EXPECT_EQ(out.op(), walfeed::v1::OPERATION_MESSAGE);
  EXPECT_EQ(out.schema(), "");
  EXPECT_EQ(out.table(), "");
  EXPECT_FALSE(out.has_truncate());
  ASSERT_TRUE(out.has_message());
  EXPECT_EQ(out.message().prefix(), "app/audit");
  EXPECT_EQ(out.message().content(), std::string("\x00\xFF\xC0\xAF text", 9));
  EXPECT_EQ(out.message().lsn(), "0/1A2B390");
  ExpectParses(out);
}

TEST(EventConvertTest, MessageWithEmptyPrefixAndContent) {
  ChangeEvent in = Event(ChangeEvent::Op::kMessage);
  in.message_lsn = Lsn(0x10);
  const walfeed::v1::ChangeEvent out = ToProto(in);
  ASSERT_TRUE(out.has_message());  // Present even when every field is empty.
  EXPECT_EQ(out.message().prefix(), "");
  EXPECT_EQ(out.message().content(), "");
  EXPECT_EQ(out.message().lsn(), "0/10");
}

TEST(EventConvertTest, MessageInvalidPrefixIsSanitized) {
  ChangeEvent in = Event(ChangeEvent::Op::kMessage);
  in.message_prefix = "caf\xE9/v1";
  in.message_content = "caf\xE9";
  const walfeed::v1::ChangeEvent out = ToProto(in);
  EXPECT_EQ(out.message().prefix(), "caf\xEF\xBF\xBD/v1");
  EXPECT_EQ(out.message().content(), "caf\xE9");  // Bytes are never touched.
  ExpectParses(out);
}

TEST(EventConvertTest, ConversionIsDeterministic) {
  ChangeEvent in = Event(ChangeEvent::Op::kUpdate, 9);
  in.relation = Orders();
  in.old_kind = OldTupleKind::kKey;
  in.old_tuple = Tuple({Text("1"), Null(), Null()});
  in.new_tuple = Tuple({Text("2"), Text("caf\xE9"), Binary("\x01")});
  EXPECT_EQ(ToProto(in).SerializeAsString(), ToProto(in).SerializeAsString());
}

}  // namespace
}  // namespace walfeed::server
