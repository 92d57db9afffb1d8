// Converts the replication core's ChangeEvent into the public walfeed.v1.ChangeEvent.
//
// The conversion is pure and total: every event the TransactionAssembler emits has
// exactly one wire form, computed the same way on every delivery, so a redelivered
// event carries byte-identical values (the API promises that).
//
// Text and UTF-8. Column values arrive as text in the database's encoding. A proto3
// `string` must hold valid UTF-8: protobuf 3.21's C++ serializer only logs when it
// does not, but every parser (C++, Go, Java, ...) rejects the whole message, so one
// LATIN1 byte in one column would make a consumer's stream unreadable. A value that
// is not valid UTF-8 is therefore sent byte for byte in the `raw` bytes field as
// VALUE_KIND_RAW instead of VALUE_KIND_TEXT (architecture.md, "Values"): lossless,
// and the consumer can tell the two apart. The validator used for that decision is
// strict (no overlongs, surrogates, code points above U+10FFFF or truncated
// sequences), so anything it accepts is accepted by every protobuf implementation.
#ifndef WALFEED_SERVER_EVENT_CONVERT_H_
#define WALFEED_SERVER_EVENT_CONVERT_H_

#include <cstdint>
#include <string>

#include "absl/strings/string_view.h"
#include "google/protobuf/timestamp.pb.h"
#include "replication/transaction_assembler.h"
#include "walfeed/v1/change_stream.pb.h"

namespace walfeed::server {

// Fills `*out` (cleared first, so a message may be reused) from `in`:
//   id, commit_lsn, index, xid, commit_time, op, last_in_transaction and
//     transaction_event_count for every event;
//   INSERT/UPDATE/DELETE: schema, table, new_values from new_tuple and old_values
//     from old_tuple, each value with its column's name, type OID, type name,
//     key flag and type modifier (when it has one), and its text (VALUE_FORM_TEXT;
//     ApplyValueForm in value_forms.h adds the typed forms). For a key-only old tuple (OldTupleKind::kKey) only the key columns
//     are sent: PostgreSQL fills the others with 'n' placeholders that are not real
//     NULLs, and sending them would claim the old row had NULLs there.
//   TRUNCATE: truncate.tables, cascade and restart_identity; schema/table empty.
//   MESSAGE: message.prefix (see SanitizeUtf8), content and lsn; schema/table empty.
// Schema, table, column and type names are `string` fields without a `bytes`
// alternative; the rare name that is not UTF-8 (only a SQL_ASCII database allows one)
// goes through SanitizeUtf8, every other name is sent unchanged.
// The assembler guarantees that row events have a relation whose column count equals
// each tuple's. Should that ever not hold, no value is dropped: a value past the
// described columns is sent with an empty name and no type (and, being of no known
// key column, left out of a key-only old tuple).
void ToProto(const replication::ChangeEvent& in, walfeed::v1::ChangeEvent* out);

// Convenience form of the above.
walfeed::v1::ChangeEvent ToProto(const replication::ChangeEvent& in);

// The API's operation for a replication event's operation.
walfeed::v1::Operation ToProtoOp(replication::ChangeEvent::Op op);

// PostgreSQL-epoch microseconds (since 2000-01-01 00:00:00 UTC, as in Begin and
// Commit) as a Timestamp (since the Unix epoch). Exact for every int64 input: the
// seconds are split off before the epoch shift, so nothing overflows, and negative
// inputs round toward the past so that nanos stays in [0, 999999999] as Timestamp
// requires.
google::protobuf::Timestamp PostgresMicrosToTimestamp(int64_t postgres_micros);

// The same as seconds and nanos, without building a message (the row writer's
// per-event path).
struct UnixTime {
  int64_t seconds = 0;
  int32_t nanos = 0;  // [0, 999999999].
};
UnixTime PostgresMicrosToUnix(int64_t postgres_micros);

// True iff `bytes` is well-formed UTF-8 (Unicode 15, table 3-7): shortest form only,
// no UTF-16 surrogates (U+D800..U+DFFF), nothing above U+10FFFF, no truncated
// sequence. U+0000 is valid.
bool IsValidUtf8(absl::string_view bytes);

// `bytes` with every ill-formed part replaced by U+FFFD (one per maximal ill-formed
// subpart, the Unicode-recommended practice); valid input is returned unchanged.
//
// Used for the logical message prefix only. The prefix is a `string` field in the
// public API (it is an application's label, meant to be compared as text), and unlike
// column values it has no `bytes` alternative, so an invalid prefix must be made valid
// rather than break the consumer's parse. The replacement is deterministic, so
// redeliveries stay identical. The content, which may be any bytes, is a `bytes`
// field and is never touched.
std::string SanitizeUtf8(absl::string_view bytes);

}  // namespace walfeed::server

#endif  // WALFEED_SERVER_EVENT_CONVERT_H_
