#include "replication/sql_text.h"

#include "absl/strings/ascii.h"
#include "absl/strings/cord.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"

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

absl::StatusOr<std::string> InlineParameters(
    absl::string_view sql, const std::vector<std::optional<std::string>>& params) {
  std::string out;
  out.reserve(sql.size());
  char quote = 0;  // The quote character of the literal or identifier we are in.
  for (size_t i = 0; i < sql.size();) {
    const char c = sql[i];
    if (quote != 0) {
      // A doubled quote inside stays inside: it closes and reopens.
      if (c == quote) quote = 0;
      out += c;
      ++i;
      continue;
    }
    if (c == '\'' || c == '"') {
      quote = c;
      out += c;
      ++i;
      continue;
    }
    size_t end = i + 1;  // Past the reference's digits, if `c` begins one.
    if (c == '$') {
      while (end < sql.size() && absl::ascii_isdigit(static_cast<unsigned char>(sql[end]))) ++end;
    }
    if (end == i + 1) {
      out += c;
      ++i;
      continue;
    }
    const absl::string_view digits = sql.substr(i + 1, end - i - 1);
    size_t number = 0;
    if (!absl::SimpleAtoi(digits, &number) || number == 0 || number > params.size()) {
      return absl::InvalidArgumentError(absl::StrCat("statement refers to $", digits, " but ",
                                                     params.size(), " parameter(s) were given"));
    }
    const std::optional<std::string>& value = params[number - 1];
    if (!value.has_value()) {
      out += "NULL";
    } else if (value->find('\0') != std::string::npos) {
      return absl::InvalidArgumentError(
          absl::StrCat("parameter $", number, " contains a NUL byte, which PostgreSQL text "
                       "cannot hold"));
    } else {
      out += "E'";
      for (char v : *value) {
        if (v == '\\' || v == '\'') out += v;
        out += v;
      }
      out += '\'';
    }
    i = end;
  }
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
