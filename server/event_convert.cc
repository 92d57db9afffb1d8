#include "server/event_convert.h"

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>
#include <string>

#include "replication/copy_data.h"
#include "replication/pgoutput.h"
#include "replication/relation_cache.h"

namespace walfeed::server {
namespace {

namespace pgoutput = replication::pgoutput;
using replication::ChangeEvent;
using replication::ColumnInfo;
using replication::RelationInfo;

// One step of UTF-8 decoding: the well-formed sequence at the start of the input, or
// the maximal ill-formed subpart there (the longest prefix of some well-formed
// sequence, at least one byte), which is what one U+FFFD replaces.
struct Utf8Step {
  size_t length;
  bool valid;
};

// `s` must not be empty. The accepted byte ranges are exactly Unicode's table 3-7;
// narrowing the second byte's range per lead byte is what rules out overlongs (E0, F0),
// surrogates (ED) and code points above U+10FFFF (F4), and C0, C1 and F5..FF can
// start no well-formed sequence at all.
Utf8Step NextUtf8Step(absl::string_view s) {
  const auto lead = static_cast<unsigned char>(s[0]);
  if (lead < 0x80) return {1, true};
  size_t length;
  unsigned char low = 0x80;   // Smallest allowed second byte.
  unsigned char high = 0xBF;  // Largest allowed second byte.
  if (lead >= 0xC2 && lead <= 0xDF) {
    length = 2;
  } else if (lead == 0xE0) {
    length = 3;
    low = 0xA0;  // E0 80..9F would encode U+0000..U+07FF again: overlong.
  } else if ((lead >= 0xE1 && lead <= 0xEC) || lead == 0xEE || lead == 0xEF) {
    length = 3;
  } else if (lead == 0xED) {
    length = 3;
    high = 0x9F;  // ED A0..BF would be U+D800..U+DFFF: UTF-16 surrogates.
  } else if (lead == 0xF0) {
    length = 4;
    low = 0x90;  // F0 80..8F would be overlong.
  } else if (lead >= 0xF1 && lead <= 0xF3) {
    length = 4;
  } else if (lead == 0xF4) {
    length = 4;
    high = 0x8F;  // F4 90.. would be above U+10FFFF.
  } else {
    return {1, false};  // A stray continuation byte, C0/C1 or F5..FF.
  }
  for (size_t i = 1; i < length; ++i) {
    if (i >= s.size()) return {i, false};  // Truncated by the end of the input.
    const auto byte = static_cast<unsigned char>(s[i]);
    if (byte < low || byte > high) return {i, false};
    low = 0x80;  // Only the second byte has a narrowed range.
    high = 0xBF;
  }
  return {length, true};
}

// Names come from the catalog in the database's encoding. A SQL_ASCII database can
// name a table or column with bytes that are not UTF-8, and these are `string`
// fields with no `bytes` alternative, so they get the same treatment as the message
// prefix: valid names (all of them in a UTF-8 database) pass unchanged.
std::string Name(absl::string_view name) { return SanitizeUtf8(name); }

void SetValue(const pgoutput::TupleValue& value, walfeed::v1::ColumnValue* out) {
  switch (value.kind) {
    case pgoutput::TupleValue::Kind::kNull:
      out->set_kind(walfeed::v1::VALUE_KIND_NULL);
      return;
    case pgoutput::TupleValue::Kind::kUnchangedToast:
      out->set_kind(walfeed::v1::VALUE_KIND_UNCHANGED_TOAST);
      return;
    case pgoutput::TupleValue::Kind::kText:
      // Text that is not UTF-8 (SQL_ASCII/LATIN1 data) would make the consumer's
      // parser reject the whole batch; `raw` carries it losslessly instead.
      if (IsValidUtf8(value.data)) {
        out->set_kind(walfeed::v1::VALUE_KIND_TEXT);
        out->set_text(value.data);
      } else {
        out->set_kind(walfeed::v1::VALUE_KIND_RAW);
        out->set_raw(value.data);
      }
      return;
    case pgoutput::TupleValue::Kind::kBinary:
      // A send function's bytes are not text in any encoding.
      out->set_kind(walfeed::v1::VALUE_KIND_RAW);
      out->set_raw(value.data);
      return;
  }
  // The decoder produces no other kind; an unknown one stays VALUE_KIND_UNSPECIFIED.
}

// Appends `tuple`'s values, described by `relation`'s columns (which may be null or
// too short only if the assembler's guarantees broke; see ToProto). With `keys_only`,
// only the replica identity key columns are appended.
void AppendValues(const RelationInfo* relation, const pgoutput::TupleData& tuple,
                  bool keys_only,
                  google::protobuf::RepeatedPtrField<walfeed::v1::ColumnValue>* out) {
  const size_t described = relation != nullptr ? relation->columns.size() : 0;
  out->Reserve(static_cast<int>(tuple.columns.size()));
  for (size_t i = 0; i < tuple.columns.size(); ++i) {
    const ColumnInfo* column = i < described ? &relation->columns[i] : nullptr;
    if (keys_only && (column == nullptr || !column->is_key)) continue;
    walfeed::v1::ColumnValue* value = out->Add();
    if (column != nullptr) {
      value->set_name(Name(column->name));
      value->set_type_oid(column->type_oid);
      value->set_type_name(Name(column->type_name));
      value->set_key(column->is_key);
      if (column->type_modifier != -1) value->set_type_modifier(column->type_modifier);
    }
    SetValue(tuple.columns[i], value);
  }
}

void SetOldValues(const ChangeEvent& in, walfeed::v1::ChangeEvent* out) {
  switch (in.old_kind) {
    case pgoutput::OldTupleKind::kNone:
      return;  // old_values stays empty, old_values_kind UNSPECIFIED.
    case pgoutput::OldTupleKind::kKey:
      out->set_old_values_kind(walfeed::v1::OLD_VALUES_KEY);
      AppendValues(in.relation.get(), in.old_tuple, /*keys_only=*/true,
                   out->mutable_old_values());
      return;
    case pgoutput::OldTupleKind::kFull:
      out->set_old_values_kind(walfeed::v1::OLD_VALUES_FULL);
      AppendValues(in.relation.get(), in.old_tuple, /*keys_only=*/false,
                   out->mutable_old_values());
      return;
  }
}

}  // namespace

walfeed::v1::Operation ToProtoOp(ChangeEvent::Op op) {
  switch (op) {
    case ChangeEvent::Op::kInsert:
      return walfeed::v1::OPERATION_INSERT;
    case ChangeEvent::Op::kUpdate:
      return walfeed::v1::OPERATION_UPDATE;
    case ChangeEvent::Op::kDelete:
      return walfeed::v1::OPERATION_DELETE;
    case ChangeEvent::Op::kTruncate:
      return walfeed::v1::OPERATION_TRUNCATE;
    case ChangeEvent::Op::kMessage:
      return walfeed::v1::OPERATION_MESSAGE;
    case ChangeEvent::Op::kRead:
      return walfeed::v1::OPERATION_READ;
  }
  return walfeed::v1::OPERATION_UNSPECIFIED;  // Unreachable: the switch is exhaustive.
}

bool IsValidUtf8(absl::string_view bytes) {
  while (!bytes.empty()) {
    // ASCII is by far the common case and needs no table: eight bytes at a
    // time while no byte has its high bit set (every text value of every
    // event is checked), then one at a time.
    while (bytes.size() >= 8) {
      uint64_t word;
      std::memcpy(&word, bytes.data(), sizeof(word));
      if ((word & 0x8080808080808080u) != 0) break;
      bytes.remove_prefix(8);
    }
    if (bytes.empty()) break;
    if (static_cast<unsigned char>(bytes[0]) < 0x80) {
      bytes.remove_prefix(1);
      continue;
    }
    const Utf8Step step = NextUtf8Step(bytes);
    if (!step.valid) return false;
    bytes.remove_prefix(step.length);
  }
  return true;
}

std::string SanitizeUtf8(absl::string_view bytes) {
  if (IsValidUtf8(bytes)) return std::string(bytes);
  static constexpr absl::string_view kReplacement = "\xEF\xBF\xBD";  // U+FFFD.
  std::string out;
  out.reserve(bytes.size() + kReplacement.size());
  while (!bytes.empty()) {
    const Utf8Step step = NextUtf8Step(bytes);
    if (step.valid) {
      out.append(bytes.data(), step.length);
    } else {
      out.append(kReplacement.data(), kReplacement.size());
    }
    bytes.remove_prefix(step.length);
  }
  return out;
}

UnixTime PostgresMicrosToUnix(int64_t postgres_micros) {
  constexpr int64_t kMicrosPerSecond = 1'000'000;
  constexpr int64_t kPostgresEpochUnixSeconds =
      replication::copy_data::kPostgresEpochUnixMicros / kMicrosPerSecond;
  // Split before shifting: adding the epoch in microseconds could overflow near
  // INT64_MAX, seconds never can.
  int64_t seconds = postgres_micros / kMicrosPerSecond;
  int64_t micros = postgres_micros % kMicrosPerSecond;
  if (micros < 0) {  // C++ division truncates toward zero; Timestamp wants floor.
    --seconds;
    micros += kMicrosPerSecond;
  }
  return {seconds + kPostgresEpochUnixSeconds, static_cast<int32_t>(micros * 1000)};
}

google::protobuf::Timestamp PostgresMicrosToTimestamp(int64_t postgres_micros) {
  const UnixTime time = PostgresMicrosToUnix(postgres_micros);
  google::protobuf::Timestamp timestamp;
  timestamp.set_seconds(time.seconds);
  timestamp.set_nanos(time.nanos);
  return timestamp;
}

void ToProto(const replication::ChangeEvent& in, walfeed::v1::ChangeEvent* out) {
  out->Clear();
  out->set_id(in.id.ToString());
  out->set_commit_lsn(in.id.commit_lsn.value());
  out->set_index(in.id.index);
  out->set_xid(in.xid);
  *out->mutable_commit_time() = PostgresMicrosToTimestamp(in.commit_time);
  out->set_op(ToProtoOp(in.op));
  out->set_last_in_transaction(in.last_in_transaction);
  out->set_transaction_event_count(in.transaction_event_count);

  switch (in.op) {
    case ChangeEvent::Op::kInsert:
    case ChangeEvent::Op::kUpdate:
    case ChangeEvent::Op::kDelete:
    case ChangeEvent::Op::kRead:
      if (in.relation != nullptr) {
        out->set_schema(Name(in.relation->schema));
        out->set_table(Name(in.relation->table));
      }
      // A DELETE has no new row; an INSERT no old one (whatever the fields hold).
      if (in.op != ChangeEvent::Op::kDelete) {
        AppendValues(in.relation.get(), in.new_tuple, /*keys_only=*/false,
                     out->mutable_new_values());
      }
      if (in.op != ChangeEvent::Op::kInsert && in.op != ChangeEvent::Op::kRead) {
        SetOldValues(in, out);
      }
      break;
    case ChangeEvent::Op::kTruncate: {
      walfeed::v1::Truncate* truncate = out->mutable_truncate();
      for (const std::shared_ptr<const RelationInfo>& relation : in.truncated_relations) {
        if (relation == nullptr) continue;  // The assembler never stores one.
        walfeed::v1::TableName* table = truncate->add_tables();
        table->set_schema(Name(relation->schema));
        table->set_table(Name(relation->table));
      }
      truncate->set_cascade((in.truncate_options & pgoutput::Truncate::kCascade) != 0);
      truncate->set_restart_identity(
          (in.truncate_options & pgoutput::Truncate::kRestartIdentity) != 0);
      break;
    }
    case ChangeEvent::Op::kMessage: {
      walfeed::v1::LogicalMessage* message = out->mutable_message();
      message->set_prefix(SanitizeUtf8(in.message_prefix));
      message->set_content(in.message_content);
      message->set_lsn(in.message_lsn.ToString());
      break;
    }
  }
}

walfeed::v1::ChangeEvent ToProto(const replication::ChangeEvent& in) {
  walfeed::v1::ChangeEvent out;
  ToProto(in, &out);
  return out;
}

}  // namespace walfeed::server
