#include "server/row_event_writer.h"

#include <cstdint>
#include <iterator>
#include <limits>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "replication/event_id.h"
#include "replication/lsn.h"
#include "replication/pgoutput.h"
#include "replication/relation_cache.h"
#include "replication/transaction_assembler.h"
#include "server/event_convert.h"
#include "server/event_forms.h"
#include "server/filter.h"
#include "server/value_forms.h"
#include "walfeed/v1/change_stream.pb.h"

namespace walfeed::server {
namespace {

using replication::ChangeEvent;
using replication::ColumnInfo;
using replication::EventId;
using replication::Lsn;
using replication::RelationInfo;
using replication::pgoutput::OldTupleKind;
using replication::pgoutput::TupleValue;

// Types with a typed form and texts of theirs: values, specials, values
// beyond the typed form's range, and texts that do not parse.
struct TypedSample {
  uint32_t oid;
  const char* name;
  const char* texts[3];
};
constexpr TypedSample kTypedSamples[] = {
    {23, "int4", {"42", "-2147483648", "4x"}},
    {16, "bool", {"t", "f", "maybe"}},
    {1184, "timestamptz", {"2024-03-10 10:34:56.789+00", "infinity", "10000-01-01 00:00:00+00"}},
    {1007, "_int4", {"{1,NULL,3}", "{{1,2},{3,4}}", "[0:1]={7,8}"}},
    {1700, "numeric", {"1.50", "NaN", "1e5"}},
    {17, "bytea", {"\\x00ff", "\\x", "\\xz"}},
    {1186, "interval", {"1 year 2 mons -3 days +04:05:06.5", "00:00:00", "P1Y"}},
    {1115, "_timestamp", {"{\"2024-01-01 00:00:00\",\"20000-01-01 00:00:00\"}", "{}", "{a}"}},
    {16385, "int8", {"9223372036854775807", "-1", ""}},  // A domain over int8.
};

// The reference: what the writer must reproduce byte for byte.
std::string Reference(const ChangeEvent& event) { return ToProto(event).SerializeAsString(); }

// Random events that reach every branch of the wire form: each op and old-row
// kind, every value kind, empty values, text that is not UTF-8, names that are
// not UTF-8 or empty, type OIDs of 0, tuples longer than the relation, ids and
// times at their extremes.
class EventMaker {
 public:
  explicit EventMaker(uint32_t seed) : rng_(seed) {}

  std::string Bytes(size_t max) {
    std::string out(Pick(max + 1), '\0');
    const bool binary = Pick(4) == 0;
    for (char& c : out) c = static_cast<char>(binary ? Pick(256) : 'a' + Pick(26));
    if (!out.empty() && Pick(8) == 0) out[Pick(out.size())] = '\xff';  // Not UTF-8.
    if (Pick(16) == 0) out += "\xc3\xa9\xe2\x82\xac";                    // Multi-byte UTF-8.
    return out;
  }

  std::shared_ptr<const RelationInfo> Relation() {
    auto relation = std::make_shared<RelationInfo>();
    relation->relation_id = static_cast<uint32_t>(Pick(100000));
    relation->schema = Pick(10) == 0 ? "sch\xfe" : "public";
    relation->table = Bytes(12);
    const size_t columns = Pick(6);
    for (size_t i = 0; i < columns; ++i) {
      ColumnInfo column;
      column.name = Bytes(10);
      if (Pick(2) == 0) {  // A type with a typed form, and texts for it below.
        const auto& typed = kTypedSamples[Pick(std::size(kTypedSamples))];
        column.type_oid = typed.oid;
        column.type_name = typed.name;
      } else {
        column.type_oid = Pick(3) == 0 ? 0 : static_cast<uint32_t>(Pick(1u << 31) + 1);
        column.type_name = Pick(5) == 0 ? "" : Bytes(8);
      }
      static constexpr int32_t kModifiers[] = {-1, -1, 0, 14, 655366, -5, 2147483647};
      column.type_modifier = kModifiers[Pick(std::size(kModifiers))];
      column.is_key = Pick(2) == 0;
      relation->columns.push_back(column);
    }
    return relation;
  }

  replication::pgoutput::TupleData Tuple(const RelationInfo& relation, size_t columns) {
    replication::pgoutput::TupleData tuple;
    for (size_t i = 0; i < columns; ++i) {
      TupleValue value;
      const int kind = static_cast<int>(Pick(4));
      value.kind = kind == 0   ? TupleValue::Kind::kNull
                   : kind == 1 ? TupleValue::Kind::kUnchangedToast
                   : kind == 2 ? TupleValue::Kind::kText
                               : TupleValue::Kind::kBinary;
      if (kind >= 2) value.data = Bytes(Pick(10) == 0 ? 300 : 20);
      for (const auto& typed : kTypedSamples) {  // Mostly texts the type prints.
        if (kind == 2 && i < relation.columns.size() && relation.columns[i].type_oid == typed.oid &&
            Pick(4) != 0) {
          value.data = typed.texts[Pick(std::size(typed.texts))];
        }
      }
      tuple.columns.push_back(value);
    }
    return tuple;
  }

  ChangeEvent Event(const std::shared_ptr<const RelationInfo>& relation) {
    static constexpr uint64_t kLsns[] = {0, 1, 0x1A2B3C8, 0xFFFFFFFFFFFFFFFFull};
    static constexpr int64_t kTimes[] = {0, 1, -1, 999999, -1000001, 849000000123456,
                                         std::numeric_limits<int64_t>::max(),
                                         std::numeric_limits<int64_t>::min()};
    ChangeEvent event;
    event.id = EventId{Lsn(kLsns[Pick(4)]),
                       static_cast<uint32_t>(Pick(3) == 0 ? 0 : Pick(1u << 20))};
    event.xid = Pick(4) == 0 ? 0 : static_cast<uint32_t>(Pick(1u << 31));
    event.commit_time = Pick(3) == 0 ? kTimes[Pick(8)] : static_cast<int64_t>(Pick(1ull << 50));
    event.op = static_cast<ChangeEvent::Op>(Pick(3));  // Insert, update, delete.
    event.relation = relation;
    // Usually as many values as columns; sometimes more (the writer must not
    // drop them) or fewer.
    const size_t columns = relation->columns.size() + (Pick(6) == 0 ? Pick(3) : 0);
    event.new_tuple = Tuple(*relation, columns);
    const int old_kind = static_cast<int>(Pick(3));
    event.old_kind = old_kind == 0   ? OldTupleKind::kNone
                     : old_kind == 1 ? OldTupleKind::kKey
                                     : OldTupleKind::kFull;
    if (event.old_kind != OldTupleKind::kNone) event.old_tuple = Tuple(*relation, columns);
    event.last_in_transaction = Pick(2) == 0;
    event.transaction_event_count =
        event.last_in_transaction ? static_cast<uint32_t>(Pick(5000)) : 0;
    return event;
  }

  uint64_t Pick(uint64_t n) { return std::uniform_int_distribution<uint64_t>(0, n - 1)(rng_); }

 private:
  std::mt19937_64 rng_;
};

TEST(RowEventWriterTest, WritesExactlyWhatToProtoSerializes) {
  for (uint32_t seed = 1; seed <= 20; ++seed) {
    EventMaker maker(seed);
    RowEventWriter writer;  // One per seed: relations are cached across events.
    std::vector<std::shared_ptr<const RelationInfo>> relations;
    for (int i = 0; i < 8; ++i) relations.push_back(maker.Relation());
    for (int i = 0; i < 2000; ++i) {
      const ChangeEvent event = maker.Event(relations[maker.Pick(relations.size())]);
      std::string bytes;
      FilterKey key;
      ASSERT_TRUE(writer.Write(event, &bytes, &key));
      const std::string expected = Reference(event);
      ASSERT_EQ(bytes, expected) << "seed " << seed << " event " << i;
      // The bytes are reserved from a bound on their size: never much more
      // than they hold (the buffer counts sizes, so spare capacity is memory it
      // does not see) and never outgrown (growth would double the capacity):
      // within the header's bound (89 bytes) and 3 bytes per column.
      const size_t columns = event.new_tuple.columns.size() + event.old_tuple.columns.size();
      EXPECT_LE(bytes.capacity(), bytes.size() + 89 + 3 * columns)
          << "seed " << seed << " event " << i;
      const FilterKey reference = FilterKey::Of(ToProto(event));
      EXPECT_EQ(key.op, reference.op);
      ASSERT_EQ(key.tables, reference.tables);
    }
  }
}

TEST(RowEventWriterTest, ANewVersionOfARelationIsNotServedFromTheCache) {
  EventMaker maker(7);
  RowEventWriter writer;
  std::string bytes;
  FilterKey key;
  auto first = std::make_shared<RelationInfo>();
  first->schema = "public";
  first->table = "t";
  first->columns = {ColumnInfo{"a", 23, -1, true, "int4"}};
  ChangeEvent event = maker.Event(first);
  ASSERT_TRUE(writer.Write(event, &bytes, &key));
  EXPECT_EQ(bytes, Reference(event));
  // ALTER TABLE: a new RelationInfo for the same table.
  auto second = std::make_shared<RelationInfo>(*first);
  second->columns[0].name = "renamed";
  second->columns.push_back(ColumnInfo{"b", 25, -1, false, "text"});
  event = maker.Event(second);
  event.op = ChangeEvent::Op::kInsert;  // So that the column names are in it.
  ASSERT_TRUE(writer.Write(event, &bytes, &key));
  EXPECT_EQ(bytes, Reference(event));
  EXPECT_NE(bytes.find("renamed"), std::string::npos);
}

// Every other form is the reference in that form: the full form with typed
// values as ApplyValueForm sets them; the compact forms without ColumnValue
// fields 1-4 and 9, naming a shape that holds exactly those fields, so that
// resolving each value against the shape (old key values against its key
// columns) gives the full form back. All forms come out of one pass, and the
// full text form is the same bytes as alone.
TEST(RowEventWriterTest, EveryFormIsTheReferenceInThatForm) {
  for (uint32_t seed = 1; seed <= 10; ++seed) {
    EventMaker maker(seed);
    RowEventWriter writer;
    std::vector<std::shared_ptr<const RelationInfo>> relations;
    for (int i = 0; i < 8; ++i) relations.push_back(maker.Relation());
    std::map<uint32_t, std::string> shapes;  // By ref: one shape per relation version.
    for (int i = 0; i < 1000; ++i) {
      const ChangeEvent event = maker.Event(relations[maker.Pick(relations.size())]);
      // Every form, or a random set of them.
      const FormMask wanted =
          maker.Pick(2) == 0 ? FormMask{0x3f} : static_cast<FormMask>(maker.Pick(64));
      std::string full_text;
      FilterKey key;
      EventForms forms;
      ASSERT_TRUE(writer.WriteForms(event, wanted, &full_text, &key, &forms));
      std::string alone;
      FilterKey alone_key;
      ASSERT_TRUE(writer.Write(event, &alone, &alone_key));
      ASSERT_EQ(full_text, Reference(event));
      ASSERT_EQ(full_text, alone);
      EXPECT_EQ(key.tables, alone_key.tables);
      const bool any_compact = (wanted & 0x38) != 0;
      walfeed::v1::RelationShape shape;
      if (any_compact) {
        ASSERT_NE(forms.shape_ref, 0u);
        ASSERT_NE(forms.shape, nullptr);
        if (!shapes.emplace(forms.shape_ref, *forms.shape).second) {
          ASSERT_EQ(shapes[forms.shape_ref], *forms.shape) << "a ref names one shape";
        }
        ASSERT_TRUE(shape.ParseFromString(*forms.shape));
        EXPECT_EQ(shape.ref(), forms.shape_ref);
      }
      for (int index = 1; index < EventForm::kCount; ++index) {
        const EventForm form = EventForm::At(index);
        if ((wanted & MaskOf(form)) == 0) {
          EXPECT_TRUE(forms.serialized[index].empty());
          continue;
        }
        walfeed::v1::ChangeEvent expected = ToProto(event);
        ApplyValueForm(form.values, &expected);
        if (form.compact) {
          for (auto* values : {expected.mutable_new_values(), expected.mutable_old_values()}) {
            for (walfeed::v1::ColumnValue& value : *values) {
              value.clear_name();
              value.clear_type_oid();
              value.clear_type_name();
              value.clear_key();
              value.clear_type_modifier();
            }
          }
          expected.set_relation_ref(forms.shape_ref);
        }
        ASSERT_EQ(forms.serialized[index], expected.SerializeAsString())
            << "seed " << seed << " event " << i << " form " << index;
      }
      if (!any_compact) continue;

      // Resolving against the shape restores the metadata.
      const walfeed::v1::ChangeEvent full = ToProto(event);
      EXPECT_EQ(shape.schema(), full.schema());
      EXPECT_EQ(shape.table(), full.table());
      std::vector<int> keys;
      for (int c = 0; c < shape.columns_size(); ++c) {
        if (shape.columns(c).key()) keys.push_back(c);
      }
      const auto expect_described = [&](const walfeed::v1::ColumnValue& value, int column) {
        const walfeed::v1::ColumnShape& described = shape.columns(column);
        EXPECT_EQ(value.name(), described.name());
        EXPECT_EQ(value.type_oid(), described.type_oid());
        EXPECT_EQ(value.type_name(), described.type_name());
        EXPECT_EQ(value.key(), described.key());
        EXPECT_EQ(value.has_type_modifier(), described.has_type_modifier());
        EXPECT_EQ(value.type_modifier(), described.type_modifier());
      };
      for (int c = 0; c < full.new_values_size() && c < shape.columns_size(); ++c) {
        expect_described(full.new_values(c), c);
      }
      if (full.old_values_kind() == walfeed::v1::OLD_VALUES_KEY) {
        ASSERT_LE(full.old_values_size(), static_cast<int>(keys.size()));
        for (int k = 0; k < full.old_values_size(); ++k) expect_described(full.old_values(k), keys[k]);
      } else {
        for (int c = 0; c < full.old_values_size() && c < shape.columns_size(); ++c) {
          expect_described(full.old_values(c), c);
        }
      }
    }
  }
}

// Typed values are really there: the random events above hit each outcome.
TEST(RowEventWriterTest, TypedFormsCarryTypedValuesAndKeepTextOnlyWhereNeeded) {
  auto relation = std::make_shared<RelationInfo>();
  relation->schema = "public";
  relation->table = "t";
  relation->columns = {ColumnInfo{"n", 23, -1, true, "int4"},
                       ColumnInfo{"at", 1184, 3, false, "timestamptz"},
                       ColumnInfo{"p", 600, -1, false, "point"}};
  ChangeEvent event;
  event.op = ChangeEvent::Op::kInsert;
  event.relation = relation;
  for (const char* text : {"7", "10000-01-01 00:00:00+00", "(1,2)"}) {
    TupleValue value;
    value.kind = TupleValue::Kind::kText;
    value.data = text;
    event.new_tuple.columns.push_back(value);
  }
  RowEventWriter writer;
  std::string full;
  FilterKey key;
  EventForms forms;
  ASSERT_TRUE(writer.WriteForms(event, 0x3f, &full, &key, &forms));
  walfeed::v1::ChangeEvent typed;
  ASSERT_TRUE(typed.ParseFromString(forms.serialized[EventForm{false, ValueForm::kTyped}.index()]));
  ASSERT_EQ(typed.new_values_size(), 3);
  EXPECT_EQ(typed.new_values(0).typed().int_value(), 7);
  EXPECT_EQ(typed.new_values(0).text(), "");
  EXPECT_EQ(typed.new_values(1).typed().special_value(), walfeed::v1::SPECIAL_VALUE_OUT_OF_RANGE);
  EXPECT_EQ(typed.new_values(1).text(), "10000-01-01 00:00:00+00");
  EXPECT_EQ(typed.new_values(1).type_modifier(), 3);
  EXPECT_FALSE(typed.new_values(2).has_typed());
  EXPECT_EQ(typed.new_values(2).text(), "(1,2)");
  walfeed::v1::ChangeEvent both;
  ASSERT_TRUE(both.ParseFromString(forms.serialized[EventForm{true, ValueForm::kBoth}.index()]));
  EXPECT_EQ(both.new_values(0).typed().int_value(), 7);
  EXPECT_EQ(both.new_values(0).text(), "7");
  EXPECT_EQ(both.new_values(0).name(), "");
  EXPECT_NE(both.relation_ref(), 0u);
}

TEST(RowEventWriterTest, TruncateAndMessageAreLeftToToProto) {
  RowEventWriter writer;
  std::string bytes = "untouched";
  FilterKey key;
  ChangeEvent event;
  event.op = ChangeEvent::Op::kTruncate;
  EXPECT_FALSE(writer.Write(event, &bytes, &key));
  event.op = ChangeEvent::Op::kMessage;
  EXPECT_FALSE(writer.Write(event, &bytes, &key));
  event.op = ChangeEvent::Op::kInsert;  // Without a relation.
  EXPECT_FALSE(writer.Write(event, &bytes, &key));
  EXPECT_EQ(bytes, "untouched");
}

}  // namespace
}  // namespace walfeed::server
