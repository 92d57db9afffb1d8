// StreamConfig validation: the naming rules PostgreSQL applies to slots,
// publications and tables, checked up front so errors name the config field.
#include "replication/stream_config.h"

#include <set>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "replication/sql_text.h"

namespace walfeed::replication {
namespace {

// Quotes `text` for an error message, escaping anything unprintable so that a
// stray control character in a config file is visible.
std::string Shown(absl::string_view text) {
  std::string out = "\"";
  for (unsigned char c : text) {
    if (c == '"' || c == '\\') {
      out += '\\';
      out += static_cast<char>(c);
    } else if (c < 0x20 || c == 0x7f) {
      absl::StrAppend(&out, "\\x", absl::Hex(c, absl::kZeroPad2));
    } else {
      out += static_cast<char>(c);
    }
  }
  out += '"';
  return out;
}

bool HasControlCharacter(absl::string_view text) {
  for (unsigned char c : text) {
    if (c < 0x20 || c == 0x7f) return true;
  }
  return false;
}

absl::Status CheckStreamName(absl::string_view name) {
  bool ok = !name.empty() && name.size() <= kMaxIdentifierBytes;
  for (char c : name) {
    if (!absl::ascii_isalnum(c) && c != '_' && c != '.' && c != '-') ok = false;
  }
  if (ok) return absl::OkStatus();
  return absl::InvalidArgumentError(
      absl::StrCat("name ", Shown(name), " is invalid: a stream name is 1-", kMaxIdentifierBytes,
                   " characters from A-Z, a-z, 0-9, '_', '.' and '-'"));
}

// PostgreSQL's own rule for slot names (ReplicationSlotValidateName in slot.c).
absl::Status CheckSlotName(absl::string_view slot) {
  const std::string rule = absl::StrCat(
      "PostgreSQL allows only lower-case letters, digits and underscores in a replication "
      "slot name, at most ",
      kMaxIdentifierBytes, " characters");
  if (slot.empty()) {
    return absl::InvalidArgumentError(absl::StrCat("slot_name is empty: ", rule));
  }
  if (slot.size() > kMaxIdentifierBytes) {
    return absl::InvalidArgumentError(absl::StrCat("slot_name ", Shown(slot), " is too long (",
                                                   slot.size(), " characters): ", rule));
  }
  for (char c : slot) {
    if (!absl::ascii_islower(c) && !absl::ascii_isdigit(c) && c != '_') {
      return absl::InvalidArgumentError(
          absl::StrCat("slot_name ", Shown(slot), " is invalid: ", rule));
    }
  }
  return absl::OkStatus();
}

// Publication and table names may contain anything once quoted, but not
// control characters (almost certainly a config mistake) and not more than
// NAMEDATALEN - 1 bytes (the server would truncate them silently).
absl::Status CheckIdentifier(absl::string_view what, absl::string_view name) {
  if (name.empty()) return absl::InvalidArgumentError(absl::StrCat(what, " name is empty"));
  if (name.size() > kMaxIdentifierBytes) {
    return absl::InvalidArgumentError(absl::StrCat(
        what, " name ", Shown(name), " is ", name.size(), " bytes; PostgreSQL names are at most ",
        kMaxIdentifierBytes, " bytes (longer ones are truncated)"));
  }
  if (HasControlCharacter(name)) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, " name ", Shown(name), " contains a control character"));
  }
  return absl::OkStatus();
}

}  // namespace

std::string TableName::Quoted() const {
  return absl::StrCat(QuoteIdentifier(schema), ".", QuoteIdentifier(table));
}

absl::StatusOr<TableName> ParseTableName(absl::string_view text) {
  const size_t dot = text.find('.');
  if (dot == absl::string_view::npos || text.find('.', dot + 1) != absl::string_view::npos) {
    return absl::InvalidArgumentError(
        absl::StrCat("table ", Shown(text),
                     " is not of the form schema.table (exactly one '.', names taken "
                     "literally, case-sensitive, without quotes)"));
  }
  TableName name{std::string(text.substr(0, dot)), std::string(text.substr(dot + 1))};
  for (const auto& [what, part] :
       {std::make_pair("schema", &name.schema), std::make_pair("table", &name.table)}) {
    if (absl::Status s = CheckIdentifier(what, *part); !s.ok()) {
      return absl::InvalidArgumentError(absl::StrCat("table ", Shown(text), ": ", s.message()));
    }
  }
  return name;
}

absl::Status StreamConfig::Validate() const {
  if (absl::Status s = CheckStreamName(name); !s.ok()) return s;
  if (absl::StripAsciiWhitespace(conninfo).empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat("stream ", Shown(name),
                     ": conninfo is empty; set a libpq connection string such as "
                     "\"host=db.example dbname=app user=walfeed\""));
  }
  const std::string where = absl::StrCat("stream ", Shown(name), ": ");
  if (absl::Status s = CheckSlotName(slot_name); !s.ok()) {
    return absl::InvalidArgumentError(absl::StrCat(where, s.message()));
  }
  if (publication_names.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat(where,
                     "publication_names is empty; pgoutput streams only published tables, so "
                     "name at least one publication"));
  }
  std::set<std::string> seen_publications;
  for (const std::string& publication : publication_names) {
    if (absl::Status s = CheckIdentifier("publication", publication); !s.ok()) {
      return absl::InvalidArgumentError(absl::StrCat(where, "publication_names: ", s.message()));
    }
    if (!seen_publications.insert(publication).second) {
      return absl::InvalidArgumentError(absl::StrCat(where, "publication_names lists publication ",
                                                     Shown(publication), " twice"));
    }
  }
  std::set<TableName> seen_tables;
  for (const std::string& entry : tables) {
    absl::StatusOr<TableName> table = ParseTableName(entry);
    if (!table.ok()) {
      return absl::InvalidArgumentError(absl::StrCat(where, "tables: ", table.status().message()));
    }
    if (!seen_tables.insert(*table).second) {
      return absl::InvalidArgumentError(
          absl::StrCat(where, "tables lists ", Shown(entry), " twice"));
    }
  }
  return absl::OkStatus();
}

absl::Status CheckCheckpointSchema(absl::string_view schema) {
  if (schema.empty() || schema.size() > kMaxIdentifierBytes || absl::StrContains(schema, '\0')) {
    return absl::InvalidArgumentError(absl::StrCat("checkpoint schema \"", absl::CHexEscape(schema),
                                                   "\" must be 1-", kMaxIdentifierBytes,
                                                   " bytes"));
  }
  if (absl::StartsWith(schema, "pg_") || schema == "information_schema" || schema == "public") {
    return absl::InvalidArgumentError(
        absl::StrCat("checkpoint schema \"", schema,
                     "\" is reserved or shared; walfeed needs a schema of its own, because "
                     "the stream reader drops every change to it"));
  }
  return absl::OkStatus();
}

}  // namespace walfeed::replication
