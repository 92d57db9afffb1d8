// EventFilter: which change events a subscription receives, from SubscribeRequest's
// `tables` and `operations`.
//
// Tables. Each pattern is matched against the whole string "schema.table" (the exact,
// case-sensitive names PostgreSQL sent). `*` matches any run of characters, including
// none and including '.'; `?` matches exactly one character; every other character,
// '.' included, matches itself. Characters are UTF-8 characters, so `?` matches "é"
// whole. A pattern must contain a '.': without one it could only ever match by way
// of a `*`, and a bare table name ("orders") is almost certainly a mistake that would
// otherwise silently deliver nothing. More than one '.' is allowed, since quoted
// identifiers may contain dots. An empty list matches every table.
//
// Operations. An empty list matches every operation.
//
// An event passes when it passes both:
//   - a logical message (OPERATION_MESSAGE) belongs to no table, so only the
//     operation filter applies to it;
//   - a TRUNCATE passes the table filter if ANY of its tables matches. The event is
//     delivered whole, naming every table of the statement: splitting it would
//     misstate what the one TRUNCATE statement did (CASCADE, RESTART IDENTITY) and
//     would break the event's id, which is one per event.
//
// Matching uses the iterative two-pointer glob algorithm that backtracks only to the
// most recent `*`: at most O(pattern length * name length) steps per pattern, never
// exponential, whatever the client sends.
//
// Immutable after Create(), so one filter may be used from any number of threads.
#ifndef WALFEED_SERVER_FILTER_H_
#define WALFEED_SERVER_FILTER_H_

#include <cstddef>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "absl/container/inlined_vector.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "google/protobuf/repeated_field.h"
#include "replication/transaction_assembler.h"
#include "walfeed/v1/change_stream.pb.h"

namespace walfeed::server {

// What a filter looks at in a converted event, kept beside the serialized event in
// the server's buffer so that sessions filter without parsing it back.
struct FilterKey {
  walfeed::v1::Operation op = walfeed::v1::OPERATION_UNSPECIFIED;
  // (schema, table): the row event's table, every table of a TRUNCATE, none for a
  // logical message. One inline: a row event costs no extra allocation.
  absl::InlinedVector<std::pair<std::string, std::string>, 1> tables;
  // Who may receive it: "" every session (a change event); a consumer's name:
  // only that durable consumer's sessions (a backfill's READ events);
  // kNoAudience: no session (a backfill's watermarks). Sessions that may not
  // receive an event pass it like one their filters left out.
  std::string audience;

  static FilterKey Of(const walfeed::v1::ChangeEvent& event);
  // Whether a session of `consumer` (ephemeral or not) may receive it.
  bool ReachableBy(const std::string& consumer, bool ephemeral) const {
    return audience.empty() || (!ephemeral && audience == consumer);
  }
};

// The audience of an event no session receives. Consumer names never hold a NUL.
inline const std::string& NoAudience() {
  static const std::string* const kNoAudience = new std::string(1, '\0');
  return *kNoAudience;
}

class EventFilter {
 public:
  // A filter that matches every event (what empty lists give too).
  EventFilter() = default;

  // `tables` and `operations` as in SubscribeRequest (repeated enum fields are
  // RepeatedField<int> in C++). InvalidArgument naming the bad entry, e.g.
  // "tables[2]: ...", for an empty pattern, a pattern without '.',
  // OPERATION_UNSPECIFIED or a value that is not an Operation.
  // Bounds of a subscription's table patterns (INVALID_ARGUMENT beyond them).
  static constexpr int kMaxTablePatterns = 64;
  static constexpr size_t kMaxTablePatternBytes = 255;

  static absl::StatusOr<EventFilter> Create(
      const google::protobuf::RepeatedPtrField<std::string>& tables,
      const google::protobuf::RepeatedField<int>& operations);

  bool Matches(const replication::ChangeEvent& event) const;
  // The same decision on the converted event (what the server buffers). Names are
  // compared as converted, i.e. after UTF-8 sanitizing.
  bool Matches(const walfeed::v1::ChangeEvent& event) const { return Matches(FilterKey::Of(event)); }
  bool Matches(const FilterKey& key) const;

  // True if some table pattern matches schema.table (always, without patterns).
  bool MatchesTable(absl::string_view schema, absl::string_view table) const;

 private:
  std::vector<std::string> table_patterns_;  // Empty: every table.
  // Bit (1 << ChangeEvent::Op) for each accepted operation; 0: every operation.
  uint32_t operation_mask_ = 0;
};

// True if the glob `pattern` matches the string "<schema>.<table>" (see above).
// Exposed for tests; the string is never built.
bool GlobMatchesTable(absl::string_view pattern, absl::string_view schema,
                      absl::string_view table);

}  // namespace walfeed::server

#endif  // WALFEED_SERVER_FILTER_H_
