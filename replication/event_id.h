// EventId: the deterministic id of one change event, "<commit_lsn>:<index>".
//
// commit_lsn is the start of the transaction's commit record (Begin.final_lsn);
// index counts, from 0, the Insert/Update/Delete/Truncate/transactional-Message
// events of that transaction in the order PostgreSQL sends them. Relation, Type and
// Origin messages never take an index: PostgreSQL re-sends them after every
// reconnect, so counting them would change ids on redelivery. Ids are totally
// ordered by (commit_lsn as an integer, index), which is delivery order.
#ifndef WALFEED_REPLICATION_EVENT_ID_H_
#define WALFEED_REPLICATION_EVENT_ID_H_

#include <cstdint>
#include <ostream>
#include <string>
#include <tuple>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "replication/lsn.h"

namespace walfeed::replication {

struct EventId {
  Lsn commit_lsn;
  uint32_t index = 0;

  // Parses "X/Y:N" with N a decimal uint32 (no sign, no leading '+', at most
  // 10 digits, no overflow) and nothing after it. Errors quote the input and
  // show the expected form.
  static absl::StatusOr<EventId> Parse(absl::string_view text);

  // "0/1A2B3C8:0".
  std::string ToString() const;
  // ToString(), or "" for EventId{} (no event: how the API shows an absent
  // checkpoint or position).
  std::string ToStringOrEmpty() const { return *this == EventId{} ? "" : ToString(); }
  // The same text written at `out`, which has room for kMaxTextSize chars;
  // returns the end. (The row writer writes every event's id: no allocation.)
  static constexpr size_t kMaxTextSize = Lsn::kMaxTextSize + 1 + 10;
  char* FormatTo(char* out) const;

  friend bool operator==(const EventId& a, const EventId& b) {
    return a.commit_lsn == b.commit_lsn && a.index == b.index;
  }
  friend bool operator!=(const EventId& a, const EventId& b) { return !(a == b); }
  friend bool operator<(const EventId& a, const EventId& b) {
    return std::make_tuple(a.commit_lsn, a.index) <
           std::make_tuple(b.commit_lsn, b.index);
  }
  friend bool operator>(const EventId& a, const EventId& b) { return b < a; }
  friend bool operator<=(const EventId& a, const EventId& b) { return !(b < a); }
  friend bool operator>=(const EventId& a, const EventId& b) { return !(a < b); }

  template <typename H>
  friend H AbslHashValue(H h, const EventId& id) {
    return H::combine(std::move(h), id.commit_lsn, id.index);
  }
};

std::ostream& operator<<(std::ostream& os, const EventId& id);

}  // namespace walfeed::replication

#endif  // WALFEED_REPLICATION_EVENT_ID_H_
