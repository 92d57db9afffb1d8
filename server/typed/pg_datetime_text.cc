#include "server/typed/pg_datetime_text.h"

#include <cstddef>
#include <limits>

namespace walfeed::server::typed {
namespace {

constexpr int64_t kMicrosPerSecond = 1000000;
constexpr int64_t kMicrosPerDay = 86400 * kMicrosPerSecond;

// Reads `text` left to right; every method consumes only on success.
class Cursor {
 public:
  explicit Cursor(absl::string_view text) : text_(text) {}

  bool AtEnd() const { return pos_ == text_.size(); }
  bool Peek(char c) const { return pos_ < text_.size() && text_[pos_] == c; }
  bool Take(char c) {
    if (!Peek(c)) return false;
    ++pos_;
    return true;
  }
  bool Take(absl::string_view word) {
    if (text_.substr(pos_, word.size()) != word) return false;
    pos_ += word.size();
    return true;
  }
  // `min` to `max` decimal digits (at most 18, so no overflow).
  bool Digits(size_t min, size_t max, int64_t* value) {
    size_t n = 0;
    int64_t v = 0;
    while (n < max && pos_ + n < text_.size() && text_[pos_ + n] >= '0' &&
           text_[pos_ + n] <= '9') {
      v = v * 10 + (text_[pos_ + n] - '0');
      ++n;
    }
    if (n < min) return false;
    pos_ += n;
    *value = v;
    return true;
  }
  // ".123" after seconds: 1 to 6 digits, as microseconds; 0 when absent.
  bool Fraction(int64_t* micros) {
    *micros = 0;
    if (!Take('.')) return true;
    int64_t digits = 0;
    const size_t start = pos_;
    if (!Digits(1, 6, &digits)) return false;
    for (size_t n = pos_ - start; n < 6; ++n) digits *= 10;
    *micros = digits;
    return true;
  }

 private:
  absl::string_view text_;
  size_t pos_ = 0;
};

bool LeapYear(int64_t year) { return (year % 4 == 0 && year % 100 != 0) || year % 400 == 0; }

int DaysInMonth(int64_t year, int month) {
  static constexpr int kDays[] = {31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31};
  return month == 2 && LeapYear(year) ? 29 : kDays[month - 1];
}

// "YYYY-MM-DD" (the year as written, before any " BC").
bool ReadCivil(Cursor* in, Civil* date) {
  int64_t month = 0;
  int64_t day = 0;
  if (!in->Digits(4, 9, &date->year) || !in->Take('-') || !in->Digits(2, 2, &month) ||
      !in->Take('-') || !in->Digits(2, 2, &day)) {
    return false;
  }
  date->month = static_cast<int>(month);
  date->day = static_cast<int>(day);
  return date->year >= 1 && month >= 1 && month <= 12 && day >= 1;
}

// " BC" turns the written year into the astronomical one; then the day must exist.
bool FinishCivil(Cursor* in, Civil* date) {
  if (in->Take(" BC")) date->year = 1 - date->year;
  return date->day <= DaysInMonth(date->year, date->month);
}

// "HH:MM:SS[.ffffff]", at most 24:00:00.
bool ReadTime(Cursor* in, int64_t* micros) {
  int64_t hours = 0;
  int64_t minutes = 0;
  int64_t seconds = 0;
  int64_t fraction = 0;
  if (!in->Digits(2, 2, &hours) || !in->Take(':') || !in->Digits(2, 2, &minutes) ||
      !in->Take(':') || !in->Digits(2, 2, &seconds) || !in->Fraction(&fraction)) {
    return false;
  }
  if (minutes > 59 || seconds > 59) return false;
  *micros = ((hours * 60 + minutes) * 60 + seconds) * kMicrosPerSecond + fraction;
  return *micros <= kMicrosPerDay;
}

// "+HH[:MM[:SS]]" or "-...": seconds east of UTC.
bool ReadOffset(Cursor* in, int32_t* seconds) {
  const bool negative = in->Peek('-');
  if (!in->Take('+') && !in->Take('-')) return false;
  int64_t hours = 0;
  int64_t minutes = 0;
  int64_t secs = 0;
  if (!in->Digits(2, 2, &hours)) return false;
  if (in->Take(':') && !in->Digits(2, 2, &minutes)) return false;
  if (in->Take(':') && !in->Digits(2, 2, &secs)) return false;
  if (hours > 15 || minutes > 59 || secs > 59) return false;  // PostgreSQL allows ±15:59:59.
  const int64_t total = (hours * 60 + minutes) * 60 + secs;
  *seconds = static_cast<int32_t>(negative ? -total : total);
  return true;
}

Infinite InfiniteWord(absl::string_view text) {
  if (text == "infinity") return Infinite::kPlus;
  if (text == "-infinity") return Infinite::kMinus;
  return Infinite::kNo;
}

// An optionally signed integer of up to 18 digits.
bool SignedInteger(Cursor* in, int64_t* value) {
  const bool negative = in->Peek('-');
  if (!in->Take('-')) in->Take('+');
  if (!in->Digits(1, 18, value)) return false;
  if (negative) *value = -*value;
  return true;
}

}  // namespace

int64_t DaysFromCivil(const Civil& date) {
  // Days from 0000-03-01 in 400-year eras (146,097 days each), then shifted to
  // the Unix epoch: the leap day falls last in such a year, so months are
  // counted from March.
  const int64_t year = date.year - (date.month <= 2 ? 1 : 0);
  const int64_t era = (year >= 0 ? year : year - 399) / 400;
  const int64_t year_of_era = year - era * 400;
  const int64_t month_from_march = (date.month + 9) % 12;
  const int64_t day_of_year = (153 * month_from_march + 2) / 5 + date.day - 1;
  const int64_t day_of_era =
      year_of_era * 365 + year_of_era / 4 - year_of_era / 100 + day_of_year;
  return era * 146097 + day_of_era - 719468;
}

std::optional<DateText> ParseDate(absl::string_view text) {
  DateText out;
  out.infinite = InfiniteWord(text);
  if (out.infinite != Infinite::kNo) return out;
  Cursor in(text);
  if (!ReadCivil(&in, &out.date) || !FinishCivil(&in, &out.date) || !in.AtEnd()) {
    return std::nullopt;
  }
  return out;
}

std::optional<int64_t> ParseTime(absl::string_view text) {
  Cursor in(text);
  int64_t micros = 0;
  if (!ReadTime(&in, &micros) || !in.AtEnd()) return std::nullopt;
  return micros;
}

std::optional<TimeTzText> ParseTimeTz(absl::string_view text) {
  Cursor in(text);
  TimeTzText out;
  if (!ReadTime(&in, &out.micros) || !ReadOffset(&in, &out.utc_offset_seconds) || !in.AtEnd()) {
    return std::nullopt;
  }
  return out;
}

std::optional<TimestampText> ParseTimestamp(absl::string_view text, bool with_zone) {
  TimestampText out;
  out.infinite = InfiniteWord(text);
  if (out.infinite != Infinite::kNo) return out;
  Cursor in(text);
  Civil date;
  int64_t micros = 0;
  int32_t offset = 0;
  if (!ReadCivil(&in, &date) || !in.Take(' ') || !ReadTime(&in, &micros) ||
      (with_zone && !ReadOffset(&in, &offset)) || !FinishCivil(&in, &date) || !in.AtEnd()) {
    return std::nullopt;
  }
  out.unix_micros = static_cast<__int128>(DaysFromCivil(date)) * kMicrosPerDay + micros -
                    static_cast<__int128>(offset) * kMicrosPerSecond;
  return out;
}

std::optional<IntervalText> ParseInterval(absl::string_view text) {
  Cursor in(text);
  __int128 months = 0;
  __int128 days = 0;
  __int128 micros = 0;
  bool time_seen = false;
  bool any = false;
  while (!in.AtEnd()) {
    if (any && !in.Take(' ')) return std::nullopt;
    any = true;
    const bool negative = in.Peek('-');
    int64_t number = 0;
    if (!SignedInteger(&in, &number)) return std::nullopt;
    if (in.Take(':')) {  // The time part: [+-]H+:MM:SS[.ffffff], last.
      if (time_seen) return std::nullopt;
      time_seen = true;
      int64_t minutes = 0;
      int64_t seconds = 0;
      int64_t fraction = 0;
      if (!in.Digits(2, 2, &minutes) || !in.Take(':') || !in.Digits(2, 2, &seconds) ||
          !in.Fraction(&fraction) || minutes > 59 || seconds > 59) {
        return std::nullopt;
      }
      const __int128 hours = negative ? -static_cast<__int128>(number) : number;
      __int128 magnitude = (hours * 60 + minutes) * 60 + seconds;
      magnitude = magnitude * kMicrosPerSecond + fraction;
      micros += negative ? -magnitude : magnitude;
      continue;
    }
    if (time_seen || !in.Take(' ')) return std::nullopt;
    if (in.Take("years") || in.Take("year")) {
      months += static_cast<__int128>(number) * 12;
    } else if (in.Take("mons") || in.Take("mon")) {
      months += number;
    } else if (in.Take("days") || in.Take("day")) {
      days += number;
    } else {
      return std::nullopt;
    }
  }
  if (!any) return std::nullopt;
  constexpr int64_t kInt32Max = std::numeric_limits<int32_t>::max();
  constexpr int64_t kInt32Min = std::numeric_limits<int32_t>::min();
  if (months > kInt32Max || months < kInt32Min || days > kInt32Max || days < kInt32Min ||
      micros > std::numeric_limits<int64_t>::max() ||
      micros < std::numeric_limits<int64_t>::min()) {
    return std::nullopt;
  }
  return IntervalText{static_cast<int32_t>(months), static_cast<int32_t>(days),
                      static_cast<int64_t>(micros)};
}

}  // namespace walfeed::server::typed
