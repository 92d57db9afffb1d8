#include "replication/lsn.h"

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"

namespace walfeed::replication {
namespace {

// Parses 1-8 hex digits (a full 32-bit half); anything else fails.
bool ParseHexHalf(absl::string_view digits, uint32_t* out) {
  if (digits.empty() || digits.size() > 8) return false;
  uint32_t value = 0;
  for (char c : digits) {
    uint32_t nibble;
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

absl::StatusOr<Lsn> Lsn::Parse(absl::string_view text) {
  const size_t slash = text.find('/');
  uint32_t high = 0;
  uint32_t low = 0;
  if (slash == absl::string_view::npos ||
      !ParseHexHalf(text.substr(0, slash), &high) ||
      !ParseHexHalf(text.substr(slash + 1), &low)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "invalid LSN \"", absl::CHexEscape(text),
        "\": expected two hexadecimal halves like 0/1A2B3C8 (1 to 8 digits each)"));
  }
  return Lsn((static_cast<uint64_t>(high) << 32) | low);
}

namespace {

// Upper-case hex of `v` without leading zeros ("0" for 0) at `out`; the end.
char* FormatHex32(uint32_t v, char* out) {
  static constexpr char kDigits[] = "0123456789ABCDEF";
  int shift = 28;
  while (shift > 0 && ((v >> shift) & 0xF) == 0) shift -= 4;
  for (; shift >= 0; shift -= 4) *out++ = kDigits[(v >> shift) & 0xF];
  return out;
}

}  // namespace

char* Lsn::FormatTo(char* out) const {
  out = FormatHex32(static_cast<uint32_t>(value_ >> 32), out);
  *out++ = '/';
  return FormatHex32(static_cast<uint32_t>(value_), out);
}

std::string Lsn::ToString() const {
  char text[kMaxTextSize];
  return std::string(text, FormatTo(text));
}

std::ostream& operator<<(std::ostream& os, Lsn lsn) { return os << lsn.ToString(); }

}  // namespace walfeed::replication
