#include "server/row_event_writer.h"

#include <array>
#include <cstdint>
#include <optional>

#include "absl/strings/string_view.h"
#include "server/event_convert.h"
#include "server/typed/typed_value.h"
#include "server/wire_out.h"
#include "walfeed/v1/change_stream.pb.h"

namespace walfeed::server {
namespace {

using replication::ChangeEvent;
using replication::pgoutput::OldTupleKind;
using replication::pgoutput::TupleData;
using replication::pgoutput::TupleValue;

// Protobuf wire types.
constexpr uint32_t kVarint = 0;
constexpr uint32_t kLengthDelimited = 2;
// At most the bytes of a row event's fields other than its columns and table
// names, with tags and lengths: id text 2 + 28, commit_lsn 1 + 10, index 1 + 5,
// xid 1 + 5, commit_time 2 + 22, op 2, fields 11, 14 and 15: 2 + 2 + 6.
constexpr size_t kHeaderBound = 89;

// Every field number here is below 16, so every tag is one byte.
char Tag(uint32_t field, uint32_t wire_type) { return static_cast<char>((field << 3) | wire_type); }

size_t VarintSize(uint64_t value) {
  size_t size = 1;
  while (value >= 0x80) {
    value >>= 7;
    ++size;
  }
  return size;
}

// What VarintField and BytesField write at most, beyond a bytes field's data.
constexpr size_t kFieldBound = 1 + WireOut::kMaxVarint;

// A scalar field, left out at its default (0) as proto3 does.
void VarintField(uint32_t field, uint64_t value, WireOut* out) {
  if (value == 0) return;
  out->Byte(Tag(field, kVarint));
  out->Varint(value);
}

// A string or bytes field, left out when empty as proto3 does.
void BytesField(uint32_t field, absl::string_view bytes, WireOut* out) {
  if (bytes.empty()) return;
  out->Byte(Tag(field, kLengthDelimited));
  out->Varint(bytes.size());
  out->Bytes(bytes);
}

// ColumnValue fields 5-7 for one value, as SetValue in event_convert.cc sets them.
struct ValuePart {
  walfeed::v1::ValueKind kind = walfeed::v1::VALUE_KIND_UNSPECIFIED;
  uint32_t data_field = 0;  // 6 (text) or 7 (raw); 0: no data.
  absl::string_view data;

  explicit ValuePart(const TupleValue& value) {
    switch (value.kind) {
      case TupleValue::Kind::kNull:
        kind = walfeed::v1::VALUE_KIND_NULL;
        return;
      case TupleValue::Kind::kUnchangedToast:
        kind = walfeed::v1::VALUE_KIND_UNCHANGED_TOAST;
        return;
      case TupleValue::Kind::kText:
        if (IsValidUtf8(value.data)) {
          kind = walfeed::v1::VALUE_KIND_TEXT;
          data_field = 6;
        } else {
          kind = walfeed::v1::VALUE_KIND_RAW;
          data_field = 7;
        }
        data = value.data;
        return;
      case TupleValue::Kind::kBinary:
        kind = walfeed::v1::VALUE_KIND_RAW;
        data_field = 7;
        data = value.data;
        return;
    }
  }

  size_t KindSize() const { return kind != 0 ? 1 + VarintSize(kind) : 0; }
  size_t DataSize() const { return data.empty() ? 0 : 1 + VarintSize(data.size()) + data.size(); }
};

}  // namespace

// At most what AppendColumns writes for `tuple` in the full text form, within
// a few bytes per column: the column's tag and length, its described prefix
// and suffix, the kind field (2 bytes: every kind is below 128) and the data
// field. Near-exact, because the capacity beyond an event's size is memory the
// buffer's accounting (which counts sizes) does not see.
size_t RowEventWriter::ColumnsBound(const Relation& relation, const TupleData& tuple,
                                    bool keys_only) {
  size_t size = 0;
  for (size_t i = 0; i < tuple.columns.size(); ++i) {
    const bool described = i < relation.column_prefixes.size();
    if (keys_only && (!described || !relation.info->columns[i].is_key)) continue;
    const size_t data = tuple.columns[i].data.size();
    size_t column = 2 + 1 + VarintSize(data) + data;
    if (described) {
      column += relation.column_prefixes[i].size() + relation.column_suffixes[i].size();
    }
    size += 1 + VarintSize(column) + column;
  }
  return size;
}

void RowEventWriter::AppendColumns(uint32_t field, const Relation& relation,
                                   const TupleData& tuple, bool keys_only,
                                   const Outputs& outputs, bool typed) {
  for (size_t i = 0; i < tuple.columns.size(); ++i) {
    const bool described = i < relation.column_prefixes.size();
    if (keys_only && (!described || !relation.info->columns[i].is_key)) continue;
    const ValuePart value(tuple.columns[i]);
    // The typed form, converted once for every output that carries it.
    typed::Conversion conversion = typed::Conversion::kNone;
    if (typed && described && value.kind == walfeed::v1::VALUE_KIND_TEXT &&
        relation.typed_oids[i] != 0) {
      conversion = typed::ToTypedValue(relation.typed_oids[i], value.data, &typed_);
      if (conversion != typed::Conversion::kNone) typed_.SerializeToString(&typed_bytes_);
    }
    const absl::string_view prefix =
        described ? absl::string_view(relation.column_prefixes[i]) : "";
    const absl::string_view suffix =
        described ? absl::string_view(relation.column_suffixes[i]) : "";
    for (int index = 0; index < EventForm::kCount; ++index) {
      WireOut* out = outputs[index];
      if (out == nullptr) continue;
      const EventForm form = EventForm::At(index);
      const bool with_typed =
          form.values != ValueForm::kText && conversion != typed::Conversion::kNone;
      // VALUE_FORM_TYPED drops the text only where `typed` carries the value.
      const bool with_text = !with_typed || form.values == ValueForm::kBoth ||
                             conversion == typed::Conversion::kOutOfRange;
      size_t size = value.KindSize() + (with_text ? value.DataSize() : 0);
      if (with_typed) size += 1 + VarintSize(typed_bytes_.size()) + typed_bytes_.size();
      if (!form.compact) size += prefix.size() + suffix.size();
      out->Reserve(1 + VarintSize(size) + size);  // `size` counts every byte after the length.
      out->Byte(Tag(field, kLengthDelimited));
      out->Varint(size);
      if (!form.compact) out->Bytes(prefix);
      VarintField(5, value.kind, out);
      if (with_text && value.data_field != 0) BytesField(value.data_field, value.data, out);
      if (with_typed) {  // Written even when empty: `size` counts its tag and length.
        out->Byte(Tag(8, kLengthDelimited));
        out->Varint(typed_bytes_.size());
        out->Bytes(typed_bytes_);
      }
      if (!form.compact) out->Bytes(suffix);
    }
  }
}


const RowEventWriter::Relation& RowEventWriter::Get(
    const std::shared_ptr<const replication::RelationInfo>& info) {
  auto it = relations_.find(info.get());
  if (it != relations_.end()) return it->second;
  // Old versions are never asked for again once replaced; a bound keeps a
  // stream with endless schema changes from growing this without end.
  if (relations_.size() >= 4096) relations_.clear();
  Relation relation;
  relation.info = info;
  relation.schema = SanitizeUtf8(info->schema);
  relation.table = SanitizeUtf8(info->table);
  {
    WireOut out(&relation.schema_table_fields);
    out.Reserve(2 * kFieldBound + relation.schema.size() + relation.table.size());
    BytesField(7, relation.schema, &out);
    BytesField(8, relation.table, &out);
  }
  relation.ref = next_ref_++;
  walfeed::v1::RelationShape shape;  // The compact forms' description of the same columns.
  shape.set_ref(relation.ref);
  shape.set_schema(relation.schema);
  shape.set_table(relation.table);
  for (const replication::ColumnInfo& column : info->columns) {
    const std::string name = SanitizeUtf8(column.name);
    const std::string type_name = SanitizeUtf8(column.type_name);
    std::string prefix;
    {
      WireOut out(&prefix);
      out.Reserve(4 * kFieldBound + name.size() + type_name.size());
      BytesField(1, name, &out);
      VarintField(2, column.type_oid, &out);
      BytesField(3, type_name, &out);
      VarintField(4, column.is_key ? 1 : 0, &out);
    }
    relation.column_prefixes.push_back(std::move(prefix));
    std::string suffix;  // Optional, so present even when 0 (timestamp(0)).
    if (column.type_modifier != -1) {
      WireOut out(&suffix);
      out.Reserve(kFieldBound);
      out.Byte(Tag(9, kVarint));
      // int32 on the wire: a negative value is sign-extended to 64 bits.
      out.Varint(static_cast<uint64_t>(static_cast<int64_t>(column.type_modifier)));
    }
    relation.column_suffixes.push_back(std::move(suffix));
    relation.typed_oids.push_back(typed::TypedOid(column.type_oid, column.type_name));
    walfeed::v1::ColumnShape* described = shape.add_columns();
    described->set_name(name);
    described->set_type_oid(column.type_oid);
    described->set_type_name(type_name);
    described->set_key(column.is_key);
    if (column.type_modifier != -1) described->set_type_modifier(column.type_modifier);
  }
  relation.shape = std::make_shared<const std::string>(shape.SerializeAsString());
  return relations_.emplace(info.get(), std::move(relation)).first->second;
}

bool RowEventWriter::Covers(const ChangeEvent& event) {
  const bool row = event.op == ChangeEvent::Op::kInsert || event.op == ChangeEvent::Op::kUpdate ||
                   event.op == ChangeEvent::Op::kDelete || event.op == ChangeEvent::Op::kRead;
  return row && event.relation != nullptr;
}

bool RowEventWriter::Write(const ChangeEvent& event, std::string* out, FilterKey* key) {
  return WriteForms(event, 0, out, key, nullptr);
}

bool RowEventWriter::WriteForms(const ChangeEvent& event, FormMask wanted, std::string* full,
                                FilterKey* key, EventForms* forms) {
  if (!Covers(event)) return false;
  const Relation& relation = Get(event.relation);
  // The full text form, and each other form wanted (null: not wanted).
  std::array<std::string*, EventForm::kCount> strings{};
  strings[0] = full;
  bool typed = false;
  bool compact = false;
  for (int index = 1; index < EventForm::kCount; ++index) {
    if (forms == nullptr || (wanted & MaskOf(EventForm::At(index))) == 0) continue;
    strings[index] = &forms->serialized[index];
    typed = typed || EventForm::At(index).values != ValueForm::kText;
    compact = compact || EventForm::At(index).compact;
  }
  const walfeed::v1::Operation op = ToProtoOp(event.op);
  const bool with_new = op != walfeed::v1::OPERATION_DELETE;
  const bool with_old = op != walfeed::v1::OPERATION_INSERT &&
                        op != walfeed::v1::OPERATION_READ &&
                        (event.old_kind == OldTupleKind::kKey ||
                         event.old_kind == OldTupleKind::kFull);
  const bool old_keys_only = event.old_kind == OldTupleKind::kKey;
  full->clear();
  // Each cuts its string to what was written when it goes out of scope.
  std::array<std::optional<WireOut>, EventForm::kCount> writers;
  Outputs outputs{};
  outputs[0] = &writers[0].emplace(full);
  // Allocated once: appending to an empty string grew it five or six times for
  // a row of a few hundred bytes, each growth a copy. Every piece below
  // reserves no more than its share of this bound, so the full form never
  // grows again.
  outputs[0]->Reserve(kHeaderBound + relation.schema_table_fields.size() +
                      (with_new ? ColumnsBound(relation, event.new_tuple, false) : 0) +
                      (with_old ? ColumnsBound(relation, event.old_tuple, old_keys_only) : 0));
  WireOut* out = outputs[0];
  {
    char id[replication::EventId::kMaxTextSize];
    BytesField(1, absl::string_view(id, event.id.FormatTo(id) - id), out);
  }
  VarintField(2, event.id.commit_lsn.value(), out);
  VarintField(3, event.id.index, out);
  VarintField(4, event.xid, out);
  {  // commit_time is always set, so present even when both of its fields are 0.
    const UnixTime time = PostgresMicrosToUnix(event.commit_time);
    const uint64_t seconds = static_cast<uint64_t>(time.seconds);  // int64: two's complement.
    const uint64_t nanos = static_cast<uint64_t>(time.nanos);      // Never negative.
    const size_t size = (seconds != 0 ? 1 + VarintSize(seconds) : 0) +
                        (nanos != 0 ? 1 + VarintSize(nanos) : 0);
    out->Byte(Tag(5, kLengthDelimited));
    out->Varint(size);
    VarintField(1, seconds, out);
    VarintField(2, nanos, out);
  }
  VarintField(6, op, out);
  out->Bytes(relation.schema_table_fields);
  // Fields 1-8 are the same in every form.
  // The other forms are not reserved: the full form's bound would overstate
  // a compact one (no column descriptions) several times.
  const absl::string_view header(full->data(), out->size());
  for (int index = 1; index < EventForm::kCount; ++index) {
    if (strings[index] == nullptr) continue;
    strings[index]->assign(header.data(), header.size());
    outputs[index] = &writers[index].emplace(strings[index]);
  }
  if (with_new) {
    AppendColumns(9, relation, event.new_tuple, /*keys_only=*/false, outputs, typed);
  }
  if (with_old) {
    AppendColumns(10, relation, event.old_tuple, old_keys_only, outputs, typed);
  }
  std::string tail;  // Fields 11, 14 and 15: the same in every form too.
  {
    WireOut tail_out(&tail);
    // Exact, so the tail stays within the string's inline bytes (no allocation):
    // fields 11 and 14 take two bytes each.
    tail_out.Reserve(4 + 1 + VarintSize(event.transaction_event_count));
    if (with_old) {
      VarintField(11, old_keys_only ? walfeed::v1::OLD_VALUES_KEY : walfeed::v1::OLD_VALUES_FULL,
                  &tail_out);
    }
    VarintField(14, event.last_in_transaction ? 1 : 0, &tail_out);
    VarintField(15, event.transaction_event_count, &tail_out);
  }
  for (int index = 0; index < EventForm::kCount; ++index) {
    WireOut* form_out = outputs[index];
    if (form_out == nullptr) continue;
    const bool with_ref = EventForm::At(index).compact;
    // Field 16's tag takes two bytes.
    form_out->Reserve(tail.size() + (with_ref ? 2 + VarintSize(relation.ref) : 0));
    form_out->Bytes(tail);
    if (!with_ref) continue;
    form_out->Varint((16 << 3) | kVarint);
    form_out->Varint(relation.ref);
  }
  if (compact) {
    forms->shape_ref = relation.ref;
    forms->shape = relation.shape;
  }
  key->op = op;
  key->tables.clear();
  key->tables.emplace_back(relation.schema, relation.table);
  return true;
}

}  // namespace walfeed::server
