#include "walfeed/event_id.h"

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace walfeed {
namespace {

absl::Status Malformed(absl::string_view text, absl::string_view why) {
  return absl::InvalidArgumentError(
      absl::StrCat("invalid event id \"", absl::CHexEscape(text), "\": ", why,
                   "; expected <commit_lsn>:<index> like 0/1A2B3C8:0"));
}

// One LSN half: 1-8 hex digits, either case. False for anything else.
bool ParseHalf(absl::string_view digits, uint32_t* out) {
  if (digits.empty() || digits.size() > 8) return false;
  uint32_t value = 0;
  for (char c : digits) {
    uint32_t nibble = 0;
    if (c >= '0' && c <= '9') {
      nibble = static_cast<uint32_t>(c - '0');
    } else if (c >= 'A' && c <= 'F') {
      nibble = static_cast<uint32_t>(c - 'A' + 10);
    } else if (c >= 'a' && c <= 'f') {
      nibble = static_cast<uint32_t>(c - 'a' + 10);
    } else {
      return false;
    }
    value = (value << 4) | nibble;
  }
  *out = value;
  return true;
}

}  // namespace

absl::StatusOr<EventId> EventId::Parse(absl::string_view text) {
  // The index is after the last ':' (an LSN never contains one), the LSN halves
  // are split at the first '/'; a second '/' then fails as a non-hex digit.
  const size_t colon = text.rfind(':');
  if (colon == absl::string_view::npos) return Malformed(text, "missing ':'");
  const absl::string_view lsn = text.substr(0, colon);
  const size_t slash = lsn.find('/');
  uint32_t high = 0;
  uint32_t low = 0;
  if (slash == absl::string_view::npos || !ParseHalf(lsn.substr(0, slash), &high) ||
      !ParseHalf(lsn.substr(slash + 1), &low)) {
    return Malformed(text, "the part before ':' is not an LSN (X/Y, 1 to 8 hex digits each)");
  }
  const absl::string_view digits = text.substr(colon + 1);
  if (digits.empty() || digits.size() > 10) {
    return Malformed(text, "the index must be 1 to 10 decimal digits");
  }
  uint64_t index = 0;
  for (char c : digits) {
    if (c < '0' || c > '9') return Malformed(text, "the index must be decimal digits");
    index = index * 10 + static_cast<uint64_t>(c - '0');
  }
  if (index > UINT32_MAX) return Malformed(text, "the index does not fit in 32 bits");
  return EventId((static_cast<uint64_t>(high) << 32) | low, static_cast<uint32_t>(index));
}

std::string EventId::CommitLsnText() const {
  return absl::StrFormat("%X/%X", static_cast<uint32_t>(commit_lsn_ >> 32),
                         static_cast<uint32_t>(commit_lsn_));
}

std::string EventId::ToString() const { return absl::StrCat(CommitLsnText(), ":", index_); }

std::ostream& operator<<(std::ostream& os, const EventId& id) { return os << id.ToString(); }

}  // namespace walfeed
