#include "replication/event_id.h"

#include <charconv>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"

namespace walfeed::replication {
namespace {

absl::Status Malformed(absl::string_view text, absl::string_view why) {
  return absl::InvalidArgumentError(
      absl::StrCat("invalid event id \"", absl::CHexEscape(text), "\": ", why,
                   "; expected <commit_lsn>:<index> like 0/1A2B3C8:0"));
}

}  // namespace

absl::StatusOr<EventId> EventId::Parse(absl::string_view text) {
  const size_t colon = text.rfind(':');
  if (colon == absl::string_view::npos) return Malformed(text, "missing ':'");
  absl::StatusOr<Lsn> lsn = Lsn::Parse(text.substr(0, colon));
  if (!lsn.ok()) return Malformed(text, "the part before ':' is not an LSN");
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
  return EventId{*lsn, static_cast<uint32_t>(index)};
}

char* EventId::FormatTo(char* out) const {
  char* end = commit_lsn.FormatTo(out);
  *end++ = ':';
  return std::to_chars(end, out + kMaxTextSize, index).ptr;  // At most 10 digits.
}

std::string EventId::ToString() const {
  char text[kMaxTextSize];
  return std::string(text, FormatTo(text));
}

std::ostream& operator<<(std::ostream& os, const EventId& id) {
  return os << id.ToString();
}

}  // namespace walfeed::replication
