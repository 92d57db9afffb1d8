// Output of the `walfeed` CLI, as pure functions of API messages (unit-tested).
//
// JSON (`walfeed tail --format json`, the default): one object per event on one
// line, fit for `jq`:
//
//   {"id":"0/1A2B3C8:0","commit_lsn":"0/1A2B3C8","index":0,"xid":735,
//    "commit_time":"2024-05-01T12:00:00.123456Z","op":"insert","schema":"public",
//    "table":"orders","columns":[{"name":"id","type":"int4","type_oid":23,
//    "key":true,"kind":"text","value":"1"}],"old_kind":"none","old":[],
//    "last_in_transaction":true,"transaction_event_count":1}
//
//   - commit_lsn is PostgreSQL's "X/Y" text (a JSON number would lose precision
//     in jq past 2^53; the text also pastes into SQL as a pg_lsn);
//   - op is insert, update, delete, truncate or message;
//   - a column's kind keeps NULL, unchanged TOAST and "" apart: "text" has a
//     string "value", "null" has "value":null, "unchanged_toast" has no value, and
//     "raw" (text that is not UTF-8 in the database's encoding) has
//     "value_base64" holding the exact bytes (RFC 4648 base64), never a mangled
//     string;
//   - old_kind is none, key or full, and old holds the old row's columns;
//   - TRUNCATE adds "truncate":{"tables":[{"schema","table"}],"cascade",
//     "restart_identity"}; MESSAGE adds "message":{"prefix","content_base64",
//     "lsn"} plus "content" when the content is valid UTF-8;
//   - transaction_event_count is on the last event of a transaction only.
// Strings are escaped per RFC 8259: `"` and `\`, control characters (as \n, \t,
// ... or \u00XX), DEL, and U+2028/U+2029 (for JavaScript consumers). Bytes that
// are not valid UTF-8 cannot be in a JSON string; should one reach JsonString it
// becomes U+FFFD (lossy, which is why byte values go out as base64 instead).
//
// Text (`--format text`): "<id> <OP> <schema>.<table> col='value' ...", the
// quickstart's shape; values in single quotes with \' \\ and control characters
// escaped, NULL, <unchanged> or raw:<base64>.
#ifndef WALFEED_CLIENT_CLI_FORMAT_H_
#define WALFEED_CLIENT_CLI_FORMAT_H_

#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "walfeed/v1/change_stream.pb.h"

namespace walfeed::cli {

// `text` as a JSON string literal, quotes included.
std::string JsonString(absl::string_view text);

// True when `bytes` is well-formed UTF-8 (no overlong forms, surrogates or code
// points past U+10FFFF).
bool IsValidUtf8(absl::string_view bytes);

// One event as one line of JSON (no trailing newline).
std::string EventJson(const walfeed::v1::ChangeEvent& event);

// One event as one line of text (no trailing newline).
std::string EventText(const walfeed::v1::ChangeEvent& event);

// "insert", "update", ... ("unspecified" for anything else).
std::string OperationName(walfeed::v1::Operation op);
// The reverse, case-insensitive; INVALID_ARGUMENT naming the choices.
absl::StatusOr<walfeed::v1::Operation> ParseOperation(absl::string_view name);

// `walfeed status`: a table of streams, then one of consumers, then any stream
// errors, as aligned text ending in a newline.
std::string StatusTable(const walfeed::v1::GetStatusResponse& response);
// `walfeed status --format json`: the response in proto3 JSON on one line, with
// a newline; every field present, defaults included, so scripts need no fallbacks.
std::string StatusJson(const walfeed::v1::GetStatusResponse& response);

// One backfill in a line: id, table, consumer, state, rows, chunks, rate, ETA,
// last key (and the error of a failed one).
std::string BackfillLine(const walfeed::v1::Backfill& backfill);
// Any response as one JSON object (proto3 JSON names).
std::string MessageJson(const google::protobuf::Message& message);

}  // namespace walfeed::cli

#endif  // WALFEED_CLIENT_CLI_FORMAT_H_
