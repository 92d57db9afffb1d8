#include "server/row_event_writer.h"

#include <cstdint>

#include "absl/strings/string_view.h"
#include "server/event_convert.h"
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

void AppendVarint(uint64_t value, std::string* out) {
  while (value >= 0x80) {
    out->push_back(static_cast<char>(value | 0x80));
    value >>= 7;
  }
  out->push_back(static_cast<char>(value));
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

  size_t Size() const {
    size_t size = kind != 0 ? 1 + VarintSize(kind) : 0;
    if (!data.empty()) size += 1 + VarintSize(data.size()) + data.size();
    return size;
  }

  void Append(std::string* out) const {
    AppendVarintField(5, kind, out);
    if (data_field != 0) AppendBytesField(data_field, data, out);
  }
};

// Field `field` (new_values or old_values): one ColumnValue per value, as
// AppendValues in event_convert.cc builds them, to `full`; and, when
// `compact` is set, the same values without fields 1-4 to it (each value is
// looked at once for both).
void AppendColumns(uint32_t field, const std::vector<std::string>& prefixes,
                   const TupleData& tuple, bool keys_only,
                   const replication::RelationInfo& relation, std::string* full,
                   std::string* compact) {
  for (size_t i = 0; i < tuple.columns.size(); ++i) {
    const bool described = i < prefixes.size();
    if (keys_only && (!described || !relation.columns[i].is_key)) continue;
    const ValuePart value(tuple.columns[i]);
    const size_t value_size = value.Size();
    const absl::string_view prefix = described ? absl::string_view(prefixes[i]) : "";
    full->push_back(Tag(field, kLengthDelimited));
    AppendVarint(prefix.size() + value_size, full);
    full->append(prefix.data(), prefix.size());
    value.Append(full);
    if (compact == nullptr) continue;
    compact->push_back(Tag(field, kLengthDelimited));
    AppendVarint(value_size, compact);
    value.Append(compact);
  }
}

}  // namespace

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
  for (const replication::ColumnInfo& column : info->columns) {
    std::string prefix;
    AppendBytesField(1, SanitizeUtf8(column.name), &prefix);
    AppendVarintField(2, column.type_oid, &prefix);
    AppendBytesField(3, SanitizeUtf8(column.type_name), &prefix);
    AppendVarintField(4, column.is_key ? 1 : 0, &prefix);
    relation.column_prefixes.push_back(std::move(prefix));
  }
  relation.ref = next_ref_++;
  walfeed::v1::RelationShape shape;
  shape.set_ref(relation.ref);
  shape.set_schema(relation.schema);
  shape.set_table(relation.table);
  for (const replication::ColumnInfo& column : info->columns) {
    walfeed::v1::ColumnShape* out = shape.add_columns();
    out->set_name(SanitizeUtf8(column.name));
    out->set_type_oid(column.type_oid);
    out->set_type_name(SanitizeUtf8(column.type_name));
    out->set_key(column.is_key);
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
  return WriteBoth(event, out, key, nullptr, nullptr, nullptr);
}

bool RowEventWriter::WriteBoth(const ChangeEvent& event, std::string* full, FilterKey* key,
                               std::string* compact, uint32_t* ref,
                               std::shared_ptr<const std::string>* shape) {
  if (!Covers(event)) return false;
  const Relation& relation = Get(event.relation);
  WriteForms(event, relation, full, compact);
  key->op = ToProtoOp(event.op);
  key->tables.clear();
  key->tables.emplace_back(relation.schema, relation.table);
  if (compact != nullptr) {
    *ref = relation.ref;
    *shape = relation.shape;
  }
  return true;
}

void RowEventWriter::WriteForms(const ChangeEvent& event, const Relation& relation,
                                std::string* out, std::string* compact) {
  const walfeed::v1::Operation op = ToProtoOp(event.op);
  out->clear();
  AppendBytesField(1, event.id.ToString(), out);
  AppendVarintField(2, event.id.commit_lsn.value(), out);
  AppendVarintField(3, event.id.index, out);
  AppendVarintField(4, event.xid, out);
  {  // commit_time is always set, so present even when both of its fields are 0.
    const UnixTime time = PostgresMicrosToUnix(event.commit_time);
    const uint64_t seconds = static_cast<uint64_t>(time.seconds);  // int64: two's complement.
    const uint64_t nanos = static_cast<uint64_t>(time.nanos);      // Never negative.
    const size_t size = (seconds != 0 ? 1 + VarintSize(seconds) : 0) +
                        (nanos != 0 ? 1 + VarintSize(nanos) : 0);
    out->push_back(Tag(5, kLengthDelimited));
    AppendVarint(size, out);
    AppendVarintField(1, seconds, out);
    AppendVarintField(2, nanos, out);
  }
  AppendVarintField(6, op, out);
  out->append(relation.schema_table_fields);
  if (compact != nullptr) *compact = *out;  // Fields 1-8 are the same in both forms.
  if (op != walfeed::v1::OPERATION_DELETE) {
    AppendColumns(9, relation.column_prefixes, event.new_tuple, /*keys_only=*/false,
                  *relation.info, out, compact);
  }
  std::string tail;  // Fields 11, 14 and 15: the same in both forms too.
  if (op != walfeed::v1::OPERATION_INSERT && op != walfeed::v1::OPERATION_READ &&
      (event.old_kind == OldTupleKind::kKey || event.old_kind == OldTupleKind::kFull)) {
    const bool keys_only = event.old_kind == OldTupleKind::kKey;
    AppendColumns(10, relation.column_prefixes, event.old_tuple, keys_only, *relation.info, out,
                  compact);
    AppendVarintField(11, keys_only ? walfeed::v1::OLD_VALUES_KEY : walfeed::v1::OLD_VALUES_FULL,
                      &tail);
  }
  AppendVarintField(14, event.last_in_transaction ? 1 : 0, &tail);
  AppendVarintField(15, event.transaction_event_count, &tail);
  out->append(tail);
  if (compact != nullptr) {
    compact->append(tail);
    // Field 16: its tag takes two bytes.
    AppendVarint((16 << 3) | kVarint, compact);
    AppendVarint(relation.ref, compact);
  }
}

}  // namespace walfeed::server
