// Parsers for PostgreSQL's text output of its date and time types, as the
// walsender prints them with the default settings (DateStyle ISO,
// IntervalStyle postgres). Pure functions of the text: anything else
// (another DateStyle, a malformed value) is "not parsed", never a crash, and
// the caller keeps the text.
#ifndef WALFEED_SERVER_TYPED_PG_DATETIME_TEXT_H_
#define WALFEED_SERVER_TYPED_PG_DATETIME_TEXT_H_

#include <cstdint>
#include <optional>

#include "absl/strings/string_view.h"

namespace walfeed::server::typed {

// A proleptic Gregorian date; `year` is astronomical (1 BC is 0).
struct Civil {
  int64_t year = 0;
  int month = 0;
  int day = 0;
};

// What a date or timestamp text holds besides a finite value.
enum class Infinite { kNo, kPlus, kMinus };

struct DateText {
  Infinite infinite = Infinite::kNo;
  Civil date;
};

struct TimestampText {
  Infinite infinite = Infinite::kNo;
  // Microseconds since 1970-01-01 00:00:00 of the value as written, minus its
  // UTC offset when it has one: the instant for timestamptz, the wall clock
  // read as UTC for timestamp. Wide enough for every PostgreSQL timestamp.
  __int128 unix_micros = 0;
};

struct TimeTzText {
  int64_t micros = 0;            // Since midnight, as written.
  int32_t utc_offset_seconds = 0;  // East of UTC.
};

struct IntervalText {
  int32_t months = 0;
  int32_t days = 0;
  int64_t micros = 0;
};

// Days from 1970-01-01 to `date` (negative before).
int64_t DaysFromCivil(const Civil& date);

// "2024-02-29", "0001-01-01 BC", "infinity", "-infinity".
std::optional<DateText> ParseDate(absl::string_view text);
// "04:05:06", "24:00:00", "04:05:06.789".
std::optional<int64_t> ParseTime(absl::string_view text);
// "04:05:06.789+05:30".
std::optional<TimeTzText> ParseTimeTz(absl::string_view text);
// "2024-03-10 10:34:56.789" (with_zone false) or "2024-03-10 10:34:56.789+00",
// optionally followed by " BC"; "infinity", "-infinity".
std::optional<TimestampText> ParseTimestamp(absl::string_view text, bool with_zone);
// "1 year 2 mons -3 days +04:05:06.5", "00:00:00", "-1 days".
std::optional<IntervalText> ParseInterval(absl::string_view text);

}  // namespace walfeed::server::typed

#endif  // WALFEED_SERVER_TYPED_PG_DATETIME_TEXT_H_
