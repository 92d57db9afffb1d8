#include "client/cli/format.h"

#include <algorithm>
#include <cstdint>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/strip.h"
#include "absl/time/time.h"
#include "google/protobuf/util/json_util.h"

namespace walfeed::cli {
namespace {

using walfeed::v1::ChangeEvent;
using walfeed::v1::ColumnValue;

// Length of the well-formed UTF-8 sequence starting at bytes[i], or 0.
size_t Utf8SequenceLength(absl::string_view bytes, size_t i) {
  const auto byte = [&](size_t k) { return static_cast<unsigned char>(bytes[k]); };
  const unsigned char lead = byte(i);
  if (lead < 0x80) return 1;
  size_t length = 0;
  unsigned char low = 0x80;   // Bounds of the second byte (RFC 3629 table), which
  unsigned char high = 0xBF;  // rule out overlong forms, surrogates and > U+10FFFF.
  if (lead >= 0xC2 && lead <= 0xDF) {
    length = 2;
  } else if (lead >= 0xE0 && lead <= 0xEF) {
    length = 3;
    if (lead == 0xE0) low = 0xA0;
    if (lead == 0xED) high = 0x9F;
  } else if (lead >= 0xF0 && lead <= 0xF4) {
    length = 4;
    if (lead == 0xF0) low = 0x90;
    if (lead == 0xF4) high = 0x8F;
  } else {
    return 0;
  }
  if (i + length > bytes.size()) return 0;
  if (byte(i + 1) < low || byte(i + 1) > high) return 0;
  for (size_t k = 2; k < length; ++k) {
    if (byte(i + k) < 0x80 || byte(i + k) > 0xBF) return 0;
  }
  return length;
}

std::string LsnText(uint64_t lsn) {
  return absl::StrFormat("%X/%X", static_cast<uint32_t>(lsn >> 32), static_cast<uint32_t>(lsn));
}

const char* KindName(walfeed::v1::ValueKind kind) {
  switch (kind) {
    case walfeed::v1::VALUE_KIND_NULL:
      return "null";
    case walfeed::v1::VALUE_KIND_TEXT:
      return "text";
    case walfeed::v1::VALUE_KIND_UNCHANGED_TOAST:
      return "unchanged_toast";
    case walfeed::v1::VALUE_KIND_RAW:
      return "raw";
    default:
      return "unspecified";
  }
}

const char* OldKindName(walfeed::v1::OldValues kind) {
  switch (kind) {
    case walfeed::v1::OLD_VALUES_KEY:
      return "key";
    case walfeed::v1::OLD_VALUES_FULL:
      return "full";
    default:
      return "none";
  }
}

void AppendColumnJson(const ColumnValue& column, std::string* out) {
  absl::StrAppend(out, "{\"name\":", JsonString(column.name()),
                  ",\"type\":", JsonString(column.type_name()), ",\"type_oid\":", column.type_oid(),
                  ",\"key\":", column.key() ? "true" : "false",
                  ",\"kind\":", JsonString(KindName(column.kind())));
  switch (column.kind()) {
    case walfeed::v1::VALUE_KIND_TEXT:
      absl::StrAppend(out, ",\"value\":", JsonString(column.text()));
      break;
    case walfeed::v1::VALUE_KIND_NULL:
      absl::StrAppend(out, ",\"value\":null");
      break;
    case walfeed::v1::VALUE_KIND_RAW:
      absl::StrAppend(out, ",\"value_base64\":", JsonString(absl::Base64Escape(column.raw())));
      break;
    default:  // Unchanged TOAST: PostgreSQL did not send a value.
      break;
  }
  out->push_back('}');
}

void AppendColumnsJson(const google::protobuf::RepeatedPtrField<ColumnValue>& columns,
                       std::string* out) {
  out->push_back('[');
  bool first = true;
  for (const ColumnValue& column : columns) {
    if (!first) out->push_back(',');
    first = false;
    AppendColumnJson(column, out);
  }
  out->push_back(']');
}

// A value for humans: single-quoted, with ' \ and control characters escaped
// and UTF-8 left readable.
std::string Quoted(absl::string_view text) {
  std::string out = "'";
  for (unsigned char c : text) {
    switch (c) {
      case '\'':
        out += "\\'";
        break;
      case '\\':
        out += "\\\\";
        break;
      case '\n':
        out += "\\n";
        break;
      case '\r':
        out += "\\r";
        break;
      case '\t':
        out += "\\t";
        break;
      default:
        if (c < 0x20 || c == 0x7F) {
          absl::StrAppendFormat(&out, "\\x%02x", c);
        } else {
          out.push_back(static_cast<char>(c));
        }
    }
  }
  out += "'";
  return out;
}

std::string ValueText(const ColumnValue& column) {
  switch (column.kind()) {
    case walfeed::v1::VALUE_KIND_NULL:
      return "NULL";
    case walfeed::v1::VALUE_KIND_UNCHANGED_TOAST:
      return "<unchanged>";
    case walfeed::v1::VALUE_KIND_RAW:
      return "raw:" + absl::Base64Escape(column.raw());
    default:
      return Quoted(column.text());
  }
}

void AppendColumnsText(const google::protobuf::RepeatedPtrField<ColumnValue>& columns,
                       std::string* out) {
  for (const ColumnValue& column : columns) {
    absl::StrAppend(out, " ", column.name(), "=", ValueText(column));
  }
}

// Rows of cells as left-aligned columns two spaces apart, no trailing blanks.
std::string Table(const std::vector<std::vector<std::string>>& rows) {
  std::vector<size_t> widths;
  for (const auto& row : rows) {
    if (widths.size() < row.size()) widths.resize(row.size(), 0);
    for (size_t i = 0; i < row.size(); ++i) widths[i] = std::max(widths[i], row[i].size());
  }
  std::string out;
  for (const auto& row : rows) {
    std::string line;
    for (size_t i = 0; i < row.size(); ++i) {
      line += row[i];
      if (i + 1 < row.size()) line += std::string(widths[i] - row[i].size() + 2, ' ');
    }
    absl::StrAppend(&out, absl::StripTrailingAsciiWhitespace(line), "\n");
  }
  return out;
}

std::string OrDash(const std::string& text) { return text.empty() ? "-" : text; }

std::string StateName(walfeed::v1::StreamState state) {
  switch (state) {
    case walfeed::v1::STREAM_STATE_CONNECTING:
      return "connecting";
    case walfeed::v1::STREAM_STATE_STREAMING:
      return "streaming";
    case walfeed::v1::STREAM_STATE_FAILED:
      return "FAILED";
    case walfeed::v1::STREAM_STATE_STANDBY:
      return "standby";
    default:
      return "unknown";
  }
}

}  // namespace

bool IsValidUtf8(absl::string_view bytes) {
  for (size_t i = 0; i < bytes.size();) {
    const size_t length = Utf8SequenceLength(bytes, i);
    if (length == 0) return false;
    i += length;
  }
  return true;
}

std::string JsonString(absl::string_view text) {
  std::string out;
  out.reserve(text.size() + 2);
  out.push_back('"');
  for (size_t i = 0; i < text.size();) {
    const unsigned char c = static_cast<unsigned char>(text[i]);
    if (c >= 0x80) {
      const size_t length = Utf8SequenceLength(text, i);
      if (length == 0) {
        out += "\\ufffd";  // Not UTF-8: JSON cannot carry the byte itself.
        ++i;
        continue;
      }
      const absl::string_view sequence = text.substr(i, length);
      if (sequence == "\xE2\x80\xA8") {
        out += "\\u2028";
      } else if (sequence == "\xE2\x80\xA9") {
        out += "\\u2029";
      } else {
        out.append(sequence.data(), sequence.size());
      }
      i += length;
      continue;
    }
    switch (c) {
      case '"':
        out += "\\\"";
        break;
      case '\\':
        out += "\\\\";
        break;
      case '\b':
        out += "\\b";
        break;
      case '\f':
        out += "\\f";
        break;
      case '\n':
        out += "\\n";
        break;
      case '\r':
        out += "\\r";
        break;
      case '\t':
        out += "\\t";
        break;
      default:
        if (c < 0x20 || c == 0x7F) {
          absl::StrAppendFormat(&out, "\\u%04x", c);
        } else {
          out.push_back(static_cast<char>(c));
        }
    }
    ++i;
  }
  out.push_back('"');
  return out;
}

std::string OperationName(walfeed::v1::Operation op) {
  switch (op) {
    case walfeed::v1::OPERATION_INSERT:
      return "insert";
    case walfeed::v1::OPERATION_UPDATE:
      return "update";
    case walfeed::v1::OPERATION_DELETE:
      return "delete";
    case walfeed::v1::OPERATION_TRUNCATE:
      return "truncate";
    case walfeed::v1::OPERATION_MESSAGE:
      return "message";
    case walfeed::v1::OPERATION_READ:
      return "read";
    default:
      return "unspecified";
  }
}

absl::StatusOr<walfeed::v1::Operation> ParseOperation(absl::string_view name) {
  const std::string lower = absl::AsciiStrToLower(name);
  for (walfeed::v1::Operation op :
       {walfeed::v1::OPERATION_INSERT, walfeed::v1::OPERATION_UPDATE,
        walfeed::v1::OPERATION_DELETE, walfeed::v1::OPERATION_TRUNCATE,
        walfeed::v1::OPERATION_MESSAGE, walfeed::v1::OPERATION_READ}) {
    if (lower == OperationName(op)) return op;
  }
  return absl::InvalidArgumentError(absl::StrCat(
      "unknown operation \"", absl::CHexEscape(name),
      "\": expected insert, update, delete, truncate, message or read"));
}

std::string EventJson(const ChangeEvent& event) {
  std::string out;
  absl::StrAppend(&out, "{\"id\":", JsonString(event.id()),
                  ",\"commit_lsn\":", JsonString(LsnText(event.commit_lsn())),
                  ",\"index\":", event.index(), ",\"xid\":", event.xid());
  if (event.has_commit_time()) {
    const absl::Time time = absl::FromUnixSeconds(event.commit_time().seconds()) +
                            absl::Nanoseconds(event.commit_time().nanos());
    absl::StrAppend(&out, ",\"commit_time\":",
                    JsonString(absl::FormatTime("%Y-%m-%d%ET%H:%M:%E6SZ", time, absl::UTCTimeZone())));
  }
  absl::StrAppend(&out, ",\"op\":", JsonString(OperationName(event.op())),
                  ",\"schema\":", JsonString(event.schema()),
                  ",\"table\":", JsonString(event.table()), ",\"columns\":");
  AppendColumnsJson(event.new_values(), &out);
  absl::StrAppend(&out, ",\"old_kind\":", JsonString(OldKindName(event.old_values_kind())),
                  ",\"old\":");
  AppendColumnsJson(event.old_values(), &out);
  if (event.op() == walfeed::v1::OPERATION_TRUNCATE) {
    out += ",\"truncate\":{\"tables\":[";
    bool first = true;
    for (const walfeed::v1::TableName& table : event.truncate().tables()) {
      if (!first) out.push_back(',');
      first = false;
      absl::StrAppend(&out, "{\"schema\":", JsonString(table.schema()),
                      ",\"table\":", JsonString(table.table()), "}");
    }
    absl::StrAppend(&out, "],\"cascade\":", event.truncate().cascade() ? "true" : "false",
                    ",\"restart_identity\":", event.truncate().restart_identity() ? "true" : "false",
                    "}");
  }
  if (event.op() == walfeed::v1::OPERATION_MESSAGE) {
    const walfeed::v1::LogicalMessage& message = event.message();
    absl::StrAppend(&out, ",\"message\":{\"prefix\":", JsonString(message.prefix()));
    if (IsValidUtf8(message.content())) {
      absl::StrAppend(&out, ",\"content\":", JsonString(message.content()));
    }
    absl::StrAppend(&out, ",\"content_base64\":", JsonString(absl::Base64Escape(message.content())),
                    ",\"lsn\":", JsonString(message.lsn()), "}");
  }
  absl::StrAppend(&out, ",\"last_in_transaction\":", event.last_in_transaction() ? "true" : "false");
  if (event.last_in_transaction()) {
    absl::StrAppend(&out, ",\"transaction_event_count\":", event.transaction_event_count());
  }
  out.push_back('}');
  return out;
}

std::string EventText(const ChangeEvent& event) {
  std::string out = absl::StrCat(event.id(), " ", absl::AsciiStrToUpper(OperationName(event.op())));
  switch (event.op()) {
    case walfeed::v1::OPERATION_TRUNCATE: {
      std::vector<std::string> tables;
      for (const walfeed::v1::TableName& table : event.truncate().tables()) {
        tables.push_back(absl::StrCat(table.schema(), ".", table.table()));
      }
      absl::StrAppend(&out, " ", absl::StrJoin(tables, ", "),
                      event.truncate().cascade() ? " CASCADE" : "",
                      event.truncate().restart_identity() ? " RESTART IDENTITY" : "");
      break;
    }
    case walfeed::v1::OPERATION_MESSAGE:
      absl::StrAppend(&out, " prefix=", Quoted(event.message().prefix()), " content=",
                      IsValidUtf8(event.message().content())
                          ? Quoted(event.message().content())
                          : "raw:" + absl::Base64Escape(event.message().content()));
      break;
    case walfeed::v1::OPERATION_DELETE:
      absl::StrAppend(&out, " ", event.schema(), ".", event.table());
      AppendColumnsText(event.old_values(), &out);
      break;
    default:
      absl::StrAppend(&out, " ", event.schema(), ".", event.table());
      AppendColumnsText(event.new_values(), &out);
      if (event.old_values_size() > 0) {
        out += " (old:";
        AppendColumnsText(event.old_values(), &out);
        out += ")";
      }
  }
  return out;
}

std::string StatusTable(const walfeed::v1::GetStatusResponse& response) {
  if (response.streams_size() == 0) return "no streams\n";
  std::vector<std::vector<std::string>> streams = {
      {"STREAM", "STATE", "SLOT", "WAL_STATUS", "ACTIVE", "CONFIRMED_FLUSH", "SERVER_LSN",
       "RETAINED_BYTES", "BUFFER_BYTES", "SPILL_BYTES"}};
  std::vector<std::vector<std::string>> consumers = {
      {"STREAM", "CONSUMER", "CHECKPOINT", "SESSION", "UNACKED", "LAG_BYTES", "HELD_BYTES"}};
  std::string held;
  std::string errors;
  std::string standby;
  for (const walfeed::v1::StreamStatus& stream : response.streams()) {
    const walfeed::v1::SlotInfo& slot = stream.slot();
    streams.push_back({stream.name(), StateName(stream.state()), OrDash(slot.name()),
                       OrDash(slot.wal_status()), slot.active() ? "yes" : "no",
                       OrDash(slot.confirmed_flush_lsn()), OrDash(stream.server_wal_lsn()),
                       absl::StrCat(slot.retained_wal_bytes()),
                       absl::StrCat(stream.buffered_bytes()),
                       stream.retention_bytes() == 0
                           ? "-"
                           : absl::StrCat(stream.spilled_bytes(), "/", stream.retention_bytes())});
    for (const walfeed::v1::ConsumerStatus& consumer : stream.consumers()) {
      consumers.push_back({stream.name(), consumer.name(), OrDash(consumer.checkpoint()),
                           consumer.detached() ? "(detached)" : OrDash(consumer.session_id()), absl::StrCat(consumer.unacked_events()),
                           absl::StrCat(consumer.lag_bytes()),
                           absl::StrCat(consumer.held_bytes())});
    }
    if (!stream.held_by().empty()) {
      absl::StrAppend(&held, stream.name(), ": the buffer is full (", stream.buffered_bytes(),
                      " bytes in memory, ", stream.spilled_bytes(),
                      " on disk) and waits for consumer ", stream.held_by(), " since ",
                      absl::FormatTime("%Y-%m-%d %H:%M:%S UTC",
                                       absl::FromUnixSeconds(stream.held_since().seconds()),
                                       absl::UTCTimeZone()),
                      "\n");
    }
    if (!stream.error().empty()) {
      absl::StrAppend(&errors, stream.name(), ": ", stream.error(), "\n");
    }
    if (stream.state() == walfeed::v1::STREAM_STATE_STANDBY) {
      absl::StrAppend(&standby, stream.name(), ": streamed by ",
                      stream.active().empty() ? "another instance" : stream.active(),
                      "; this instance takes over if that one stops\n");
    }
  }
  std::string out = Table(streams);
  out += "\n";
  if (consumers.size() > 1) {
    out += Table(consumers);
  } else {
    out += "no consumers\n";
  }
  if (!held.empty()) absl::StrAppend(&out, "\nheld:\n", held);
  if (!standby.empty()) absl::StrAppend(&out, "\nstandby:\n", standby);
  if (!errors.empty()) absl::StrAppend(&out, "\nerrors:\n", errors);
  return out;
}

std::string StatusJson(const walfeed::v1::GetStatusResponse& response) {
  google::protobuf::util::JsonPrintOptions options;
  options.always_print_primitive_fields = true;
  options.always_print_enums_as_ints = false;
  std::string json;
  // Printing a generated message whose descriptor is compiled in cannot fail.
  (void)google::protobuf::util::MessageToJsonString(response, &json, options);
  return json + "\n";
}

}  // namespace walfeed::cli

namespace walfeed::cli {

std::string BackfillLine(const walfeed::v1::Backfill& backfill) {
  const std::string name = absl::AsciiStrToLower(walfeed::v1::BackfillState_Name(backfill.state()));
  const absl::string_view state = absl::StripPrefix(name, "backfill_state_");
  std::string out = absl::StrCat("backfill ", backfill.id(), " of ", backfill.table().schema(),
                                 ".", backfill.table().table(), " for ",
                                 backfill.consumer().empty()
                                     ? std::string("every consumer")
                                     : absl::StrCat("consumer ", backfill.consumer()),
                                 backfill.initial_snapshot() ? " (initial snapshot)" : "",
                                 ": ", state, ", ", backfill.rows(), " rows in ",
                                 backfill.chunks(), " chunks");
  if (backfill.superseded_rows() > 0) {
    absl::StrAppend(&out, " (", backfill.superseded_rows(), " superseded by the stream)");
  }
  if (backfill.state() == walfeed::v1::BACKFILL_STATE_RUNNING) {
    if (backfill.rows_per_second() > 0) {
      absl::StrAppend(&out, ", ", static_cast<uint64_t>(backfill.rows_per_second()), " rows/s");
    }
    if (backfill.eta_seconds() > 0) absl::StrAppend(&out, ", about ", backfill.eta_seconds(), " s left");
  }
  if (backfill.last_key_size() > 0) {
    absl::StrAppend(&out, ", last key (", absl::StrJoin(backfill.key_columns(), ", "), ") = (",
                    absl::StrJoin(backfill.last_key(), ", "), ")");
  }
  if (!backfill.where().empty()) absl::StrAppend(&out, ", where ", backfill.where());
  if (!backfill.error().empty()) absl::StrAppend(&out, ": ", backfill.error());
  return out;
}

std::string MessageJson(const google::protobuf::Message& message) {
  std::string json;
  google::protobuf::util::JsonPrintOptions options;
  options.always_print_primitive_fields = true;
  (void)google::protobuf::util::MessageToJsonString(message, &json, options);
  return json;
}

}  // namespace walfeed::cli
