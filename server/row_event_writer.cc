#include "server/row_event_writer.h"

#include <cstdint>

#include "absl/strings/string_view.h"
#include "server/event_convert.h"
#include "server/typed/typed_value.h"
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

// One byte (most lengths and kinds) is pushed; longer ones are written into
// a local buffer and appended once, not pushed byte by byte (a capacity check
// and a terminator each), which showed in the reader's profile.
void AppendVarint(uint64_t value, std::string* out) {
  if (value < 0x80) {
    out->push_back(static_cast<char>(value));
    return;
  }
  char bytes[10];  // A 64-bit varint takes at most 10.
  size_t n = 0;
  while (value >= 0x80) {
    bytes[n++] = static_cast<char>(value | 0x80);
    value >>= 7;
  }
  bytes[n++] = static_cast<char>(value);
  out->append(bytes, n);
}

// A scalar field, left out at its default (0) as proto3 does.
void AppendVarintField(uint32_t field, uint64_t value, std::string* out) {
  if (value == 0) return;
  out->push_back(Tag(field, kVarint));
  AppendVarint(value, out);
}

// A string or bytes field, left out when empty as proto3 does.
void AppendBytesField(uint32_t field, absl::string_view bytes, std::string* out) {
  if (bytes.empty()) return;
  out->push_back(Tag(field, kLengthDelimited));
  AppendVarint(bytes.size(), out);
  out->append(bytes.data(), bytes.size());
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
      std::string* out = outputs[index];
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
      out->push_back(Tag(field, kLengthDelimited));
      AppendVarint(size, out);
      if (!form.compact) out->append(prefix.data(), prefix.size());
      AppendVarintField(5, value.kind, out);
      if (with_text && value.data_field != 0) AppendBytesField(value.data_field, value.data, out);
      if (with_typed) {
        out->push_back(Tag(8, kLengthDelimited));
        AppendVarint(typed_bytes_.size(), out);
        out->append(typed_bytes_);
      }
      if (!form.compact) out->append(suffix.data(), suffix.size());
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
  AppendBytesField(7, relation.schema, &relation.schema_table_fields);
  AppendBytesField(8, relation.table, &relation.schema_table_fields);
  relation.ref = next_ref_++;
  walfeed::v1::RelationShape shape;  // The compact forms' description of the same columns.
  shape.set_ref(relation.ref);
  shape.set_schema(relation.schema);
  shape.set_table(relation.table);
  for (const replication::ColumnInfo& column : info->columns) {
    const std::string name = SanitizeUtf8(column.name);
    const std::string type_name = SanitizeUtf8(column.type_name);
    std::string prefix;
    AppendBytesField(1, name, &prefix);
    AppendVarintField(2, column.type_oid, &prefix);
    AppendBytesField(3, type_name, &prefix);
    AppendVarintField(4, column.is_key ? 1 : 0, &prefix);
    relation.column_prefixes.push_back(std::move(prefix));
    std::string suffix;  // Optional, so present even when 0 (timestamp(0)).
    if (column.type_modifier != -1) {
      suffix.push_back(Tag(9, kVarint));
      // int32 on the wire: a negative value is sign-extended to 64 bits.
      AppendVarint(static_cast<uint64_t>(static_cast<int64_t>(column.type_modifier)), &suffix);
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
  Outputs outputs{};
  outputs[0] = full;
  bool typed = false;
  bool compact = false;
  for (int index = 1; index < EventForm::kCount; ++index) {
    if (forms == nullptr || (wanted & MaskOf(EventForm::At(index))) == 0) continue;
    outputs[index] = &forms->serialized[index];
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
  // Allocated once: appending to an empty string grew it five or six times for
  // a row of a few hundred bytes, each growth a copy.
  full->reserve(kHeaderBound + relation.schema_table_fields.size() +
                (with_new ? ColumnsBound(relation, event.new_tuple, false) : 0) +
                (with_old ? ColumnsBound(relation, event.old_tuple, old_keys_only) : 0));
  AppendBytesField(1, event.id.ToString(), full);
  AppendVarintField(2, event.id.commit_lsn.value(), full);
  AppendVarintField(3, event.id.index, full);
  AppendVarintField(4, event.xid, full);
  {  // commit_time is always set, so present even when both of its fields are 0.
    const UnixTime time = PostgresMicrosToUnix(event.commit_time);
    const uint64_t seconds = static_cast<uint64_t>(time.seconds);  // int64: two's complement.
    const uint64_t nanos = static_cast<uint64_t>(time.nanos);      // Never negative.
    const size_t size = (seconds != 0 ? 1 + VarintSize(seconds) : 0) +
                        (nanos != 0 ? 1 + VarintSize(nanos) : 0);
    full->push_back(Tag(5, kLengthDelimited));
    AppendVarint(size, full);
    AppendVarintField(1, seconds, full);
    AppendVarintField(2, nanos, full);
  }
  AppendVarintField(6, op, full);
  full->append(relation.schema_table_fields);
  // Fields 1-8 are the same in every form.
  // The other forms are not reserved: the full form's bound would overstate
  // a compact one (no column descriptions) several times.
  for (int index = 1; index < EventForm::kCount; ++index) {
    if (outputs[index] != nullptr) *outputs[index] = *full;
  }
  if (with_new) {
    AppendColumns(9, relation, event.new_tuple, /*keys_only=*/false, outputs, typed);
  }
  std::string tail;  // Fields 11, 14 and 15: the same in every form too.
  if (with_old) {
    AppendColumns(10, relation, event.old_tuple, old_keys_only, outputs, typed);
    AppendVarintField(11,
                      old_keys_only ? walfeed::v1::OLD_VALUES_KEY : walfeed::v1::OLD_VALUES_FULL,
                      &tail);
  }
  AppendVarintField(14, event.last_in_transaction ? 1 : 0, &tail);
  AppendVarintField(15, event.transaction_event_count, &tail);
  for (int index = 0; index < EventForm::kCount; ++index) {
    std::string* out = outputs[index];
    if (out == nullptr) continue;
    out->append(tail);
    if (!EventForm::At(index).compact) continue;
    // Field 16: its tag takes two bytes.
    AppendVarint((16 << 3) | kVarint, out);
    AppendVarint(relation.ref, out);
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
