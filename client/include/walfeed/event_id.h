// walfeed::EventId: the id of one change event, "<commit_lsn>:<index>", for
// applications that compare ids (is this event at or below my checkpoint? which
// of two ids comes first?).
//
// commit_lsn is the transaction's commit LSN in PostgreSQL's "X/Y" form (two
// hexadecimal 32-bit halves); index is the event's position inside the
// transaction, from 0. Ids are totally ordered by (commit_lsn as a 64-bit number,
// index) -- never compare them as strings: "0/A:0" sorts after "0/10:0" as text
// but comes first.
//
// Parse accepts exactly what walfeed-server accepts, so "at or below my
// checkpoint" means the same in every program: each LSN half is 1-8 hex digits in
// either case (PostgreSQL 19 zero-pads the low half, older versions do not); the
// index is 1-10 decimal digits that fit in 32 bits; nothing else (no whitespace,
// sign, "0x" or trailing text). ToString() prints the canonical form the server
// sends: upper-case hex without leading zeros ("0/1A2B3C8:0").
#ifndef WALFEED_CLIENT_INCLUDE_WALFEED_EVENT_ID_H_
#define WALFEED_CLIENT_INCLUDE_WALFEED_EVENT_ID_H_

#include <cstdint>
#include <ostream>
#include <string>
#include <utility>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace walfeed {

class EventId {
 public:
  // 0/0:0, which sorts before every id PostgreSQL can produce.
  constexpr EventId() = default;
  constexpr EventId(uint64_t commit_lsn, uint32_t index)
      : commit_lsn_(commit_lsn), index_(index) {}

  // Parses "X/Y:N". Errors are InvalidArgument, quote the input (escaped) and
  // show the expected form.
  static absl::StatusOr<EventId> Parse(absl::string_view text);

  // "0/1A2B3C8:0".
  std::string ToString() const;
  // The commit LSN alone, "0/1A2B3C8" (a value PostgreSQL's pg_lsn type accepts).
  std::string CommitLsnText() const;

  constexpr uint64_t commit_lsn() const { return commit_lsn_; }
  constexpr uint32_t index() const { return index_; }

  friend constexpr bool operator==(const EventId& a, const EventId& b) {
    return a.commit_lsn_ == b.commit_lsn_ && a.index_ == b.index_;
  }
  friend constexpr bool operator!=(const EventId& a, const EventId& b) { return !(a == b); }
  friend constexpr bool operator<(const EventId& a, const EventId& b) {
    return a.commit_lsn_ != b.commit_lsn_ ? a.commit_lsn_ < b.commit_lsn_ : a.index_ < b.index_;
  }
  friend constexpr bool operator>(const EventId& a, const EventId& b) { return b < a; }
  friend constexpr bool operator<=(const EventId& a, const EventId& b) { return !(b < a); }
  friend constexpr bool operator>=(const EventId& a, const EventId& b) { return !(a < b); }

  template <typename H>
  friend H AbslHashValue(H h, const EventId& id) {
    return H::combine(std::move(h), id.commit_lsn_, id.index_);
  }

 private:
  uint64_t commit_lsn_ = 0;
  uint32_t index_ = 0;
};

std::ostream& operator<<(std::ostream& os, const EventId& id);

}  // namespace walfeed

#endif  // WALFEED_CLIENT_INCLUDE_WALFEED_EVENT_ID_H_
