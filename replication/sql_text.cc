#include "replication/sql_text.h"

#include "absl/strings/cord.h"

namespace walfeed::replication {
namespace {

constexpr char kSqlStatePayload[] = "walfeed/sqlstate";

std::string Quote(absl::string_view text, char quote) {
  std::string out(1, quote);
  for (char c : text) {
    if (c == quote) out += quote;
    out += c;
  }
  out += quote;
  return out;
}

}  // namespace

std::string QuoteIdentifier(absl::string_view identifier) { return Quote(identifier, '"'); }

std::string QuoteIdentifierList(const std::vector<std::string>& identifiers) {
  std::string out;
  for (const std::string& identifier : identifiers) {
    if (!out.empty()) out += ", ";
    out += QuoteIdentifier(identifier);
  }
  return out;
}

std::string QuoteLiteral(absl::string_view literal) { return Quote(literal, '\''); }

std::string ArrayLiteral(const std::vector<std::string>& elements) {
  std::string out = "{";
  for (size_t i = 0; i < elements.size(); ++i) {
    if (i > 0) out += ',';
    out += '"';
    for (char c : elements[i]) {
      if (c == '"' || c == '\\') out += '\\';
      out += c;
    }
    out += '"';
  }
  out += '}';
  return out;
}

void SetSqlState(absl::Status& status, absl::string_view sqlstate) {
  if (!sqlstate.empty()) status.SetPayload(kSqlStatePayload, absl::Cord(sqlstate));
}

std::string SqlStateOf(const absl::Status& status) {
  absl::optional<absl::Cord> payload = status.GetPayload(kSqlStatePayload);
  return payload.has_value() ? std::string(*payload) : "";
}

}  // namespace walfeed::replication
