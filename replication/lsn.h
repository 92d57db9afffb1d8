// Lsn: a PostgreSQL WAL position (XLogRecPtr) as a strong 64-bit type.
//
// PostgreSQL prints an LSN as two upper-case hex halves "%X/%X" (high and low 32
// bits, no leading zeros); PostgreSQL 19 zero-pads the low half ("%X/%08X").
// Parse accepts both, 1-8 hex digits per half, and nothing else: no whitespace,
// no sign, no "0x". LSNs are compared as integers, never as strings (the text
// form does not sort). 0/0 is PostgreSQL's InvalidXLogRecPtr.
#ifndef WALFEED_REPLICATION_LSN_H_
#define WALFEED_REPLICATION_LSN_H_

#include <cstddef>
#include <cstdint>
#include <ostream>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace walfeed::replication {

class Lsn {
 public:
  constexpr Lsn() = default;
  constexpr explicit Lsn(uint64_t value) : value_(value) {}

  static const Lsn kInvalid;  // 0/0

  // Parses "X/Y" (either half 1-8 hex digits, any case). Errors quote the input.
  static absl::StatusOr<Lsn> Parse(absl::string_view text);

  constexpr uint64_t value() const { return value_; }
  constexpr bool valid() const { return value_ != 0; }

  // Upper-case "X/Y" with no leading zeros, the form PostgreSQL <= 18 prints.
  std::string ToString() const;
  // The same text written at `out`, which has room for kMaxTextSize chars;
  // returns the end. (Every event's id is formatted: no allocation, no format
  // string parsing.)
  static constexpr size_t kMaxTextSize = 17;
  char* FormatTo(char* out) const;

  friend constexpr bool operator==(Lsn a, Lsn b) { return a.value_ == b.value_; }
  friend constexpr bool operator!=(Lsn a, Lsn b) { return a.value_ != b.value_; }
  friend constexpr bool operator<(Lsn a, Lsn b) { return a.value_ < b.value_; }
  friend constexpr bool operator<=(Lsn a, Lsn b) { return a.value_ <= b.value_; }
  friend constexpr bool operator>(Lsn a, Lsn b) { return a.value_ > b.value_; }
  friend constexpr bool operator>=(Lsn a, Lsn b) { return a.value_ >= b.value_; }

  template <typename H>
  friend H AbslHashValue(H h, Lsn lsn) {
    return H::combine(std::move(h), lsn.value_);
  }

 private:
  uint64_t value_ = 0;
};

inline constexpr Lsn Lsn::kInvalid{0};

std::ostream& operator<<(std::ostream& os, Lsn lsn);

}  // namespace walfeed::replication

#endif  // WALFEED_REPLICATION_LSN_H_
