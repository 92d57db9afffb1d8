// SQL text that walfeed composes without a connection: identifier and literal
// quoting for commands that cannot take parameters (replication commands, DDL,
// the remedies printed in error messages), and the SQLSTATE a server error
// carries as a Status payload.
//
// Pure: the core decides remedies and classifies start failures from these, and
// replication/pg fills the payload when it turns a libpq result into a Status.
#ifndef WALFEED_REPLICATION_SQL_TEXT_H_
#define WALFEED_REPLICATION_SQL_TEXT_H_

#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace walfeed::replication {

// `"identifier"`, inner double quotes doubled. Names are always sent quoted, so
// case and special characters are kept.
std::string QuoteIdentifier(absl::string_view identifier);
// `"a", "b"`: each name quoted as above, for lists in remedies and warnings.
std::string QuoteIdentifierList(const std::vector<std::string>& identifiers);
// `'literal'`, inner single quotes doubled (standard_conforming_strings is on in
// every supported server, so backslashes are literal).
std::string QuoteLiteral(absl::string_view literal);

// `{"a","b"}`: a text[] literal for a parameter. Every element is
// double-quoted, so only `"` and `\` need escaping, and values such as NULL, {}
// or "a,b" stay literal.
std::string ArrayLiteral(const std::vector<std::string>& elements);

// `sql` with each parameter reference ($1, $2, ...) replaced by its value as an
// escape-string literal (E'...', with `\` and `'` doubled; nullopt: NULL), for
// connections that accept only the simple query protocol (a logical
// walsender). The literal is untyped, as a text parameter is, so the server
// infers the same type from the context. References inside '...' and "..."
// are left alone; `sql` is walfeed's own text, which has no comments or
// dollar quoting. InvalidArgument for a reference to a parameter not given
// and for a value containing a NUL byte (no literal can hold one).
absl::StatusOr<std::string> InlineParameters(
    absl::string_view sql, const std::vector<std::optional<std::string>>& params);

// Attaches `sqlstate` (five characters) to `status`.
void SetSqlState(absl::Status& status, absl::string_view sqlstate);
// The SQLSTATE of a server error (see SetSqlState), or "" when there is none. For
// callers that must tell apart errors sharing a canonical code, e.g. 42710
// duplicate_object.
std::string SqlStateOf(const absl::Status& status);

}  // namespace walfeed::replication

#endif  // WALFEED_REPLICATION_SQL_TEXT_H_
