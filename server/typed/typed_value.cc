#include "server/typed/typed_value.h"

#include <charconv>
#include <cmath>
#include <cstddef>
#include <limits>
#include <optional>
#include <string>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "server/typed/pg_array_text.h"
#include "server/typed/pg_datetime_text.h"

namespace walfeed::server::typed {
namespace {

using walfeed::v1::TypedValue;

enum class Kind {
  kInt, kFloat, kBool, kNumeric, kString, kBytea, kUuid, kDate, kTime, kTimeTz,
  kTimestamp, kTimestampTz, kInterval, kJson, kArray,
};

struct TypedType {
  uint32_t oid;
  const char* name;  // pg_type.typname.
  Kind kind;
  uint32_t element = 0;  // kArray: the element type.
};

// The built-in types with a typed form, and their arrays (OIDs from
// PostgreSQL's pg_type.dat, fixed across clusters and versions).
constexpr TypedType kTypes[] = {
    {16, "bool", Kind::kBool},
    {17, "bytea", Kind::kBytea},
    {18, "char", Kind::kString},
    {19, "name", Kind::kString},
    {20, "int8", Kind::kInt},
    {21, "int2", Kind::kInt},
    {23, "int4", Kind::kInt},
    {25, "text", Kind::kString},
    {26, "oid", Kind::kInt},
    {114, "json", Kind::kJson},
    {700, "float4", Kind::kFloat},
    {701, "float8", Kind::kFloat},
    {1042, "bpchar", Kind::kString},
    {1043, "varchar", Kind::kString},
    {1082, "date", Kind::kDate},
    {1083, "time", Kind::kTime},
    {1114, "timestamp", Kind::kTimestamp},
    {1184, "timestamptz", Kind::kTimestampTz},
    {1186, "interval", Kind::kInterval},
    {1266, "timetz", Kind::kTimeTz},
    {1700, "numeric", Kind::kNumeric},
    {2950, "uuid", Kind::kUuid},
    {3802, "jsonb", Kind::kJson},
    {1000, "_bool", Kind::kArray, 16},
    {1001, "_bytea", Kind::kArray, 17},
    {1002, "_char", Kind::kArray, 18},
    {1003, "_name", Kind::kArray, 19},
    {1016, "_int8", Kind::kArray, 20},
    {1005, "_int2", Kind::kArray, 21},
    {1007, "_int4", Kind::kArray, 23},
    {1009, "_text", Kind::kArray, 25},
    {1028, "_oid", Kind::kArray, 26},
    {199, "_json", Kind::kArray, 114},
    {1021, "_float4", Kind::kArray, 700},
    {1022, "_float8", Kind::kArray, 701},
    {1014, "_bpchar", Kind::kArray, 1042},
    {1015, "_varchar", Kind::kArray, 1043},
    {1182, "_date", Kind::kArray, 1082},
    {1183, "_time", Kind::kArray, 1083},
    {1115, "_timestamp", Kind::kArray, 1114},
    {1185, "_timestamptz", Kind::kArray, 1184},
    {1187, "_interval", Kind::kArray, 1186},
    {1270, "_timetz", Kind::kArray, 1266},
    {1231, "_numeric", Kind::kArray, 1700},
    {2951, "_uuid", Kind::kArray, 2950},
    {3807, "_jsonb", Kind::kArray, 3802},
};

const TypedType* Find(uint32_t oid) {
  for (const TypedType& type : kTypes) {
    if (type.oid == oid) return &type;
  }
  return nullptr;
}

// google.protobuf.Timestamp's range: 0001-01-01T00:00:00Z to 9999-12-31T23:59:59Z.
constexpr int64_t kMinTimestampSeconds = -62135596800;
constexpr int64_t kMaxTimestampSeconds = 253402300799;

bool ParseFloat(absl::string_view text, double* out) {
  if (text == "NaN") {
    *out = std::numeric_limits<double>::quiet_NaN();
  } else if (text == "Infinity") {
    *out = std::numeric_limits<double>::infinity();
  } else if (text == "-Infinity") {
    *out = -std::numeric_limits<double>::infinity();
  } else {
    const char* end = text.data() + text.size();
    const auto [ptr, error] = std::from_chars(text.data(), end, *out);
    // float8out spells the specials out (above): "inf" or "nan" is not its text.
    return error == std::errc() && ptr == end && std::isfinite(*out);
  }
  return true;
}

// int8out and its kin: an optional '-', then digits without leading zeros.
// (absl::SimpleAtoi alone would also take "+1", " 1" or "1\n".)
bool IsIntegerText(absl::string_view text) {
  const bool negative = !text.empty() && text.front() == '-';
  if (negative) text.remove_prefix(1);
  if (text.empty() || (text.front() == '0' && (text.size() > 1 || negative))) return false;
  for (char c : text) {
    if (!absl::ascii_isdigit(static_cast<unsigned char>(c))) return false;
  }
  return true;
}

// numeric_out: an optional '-', digits, optionally '.' and digits; or a special.
bool IsNumericText(absl::string_view text) {
  if (text == "NaN" || text == "Infinity" || text == "-Infinity") return true;
  if (!text.empty() && text.front() == '-') text.remove_prefix(1);
  const size_t dot = text.find('.');
  const absl::string_view whole = text.substr(0, dot);
  const absl::string_view fraction =
      dot == absl::string_view::npos ? absl::string_view("0") : text.substr(dot + 1);
  auto digits = [](absl::string_view part) {
    if (part.empty()) return false;
    for (char c : part) {
      if (!absl::ascii_isdigit(static_cast<unsigned char>(c))) return false;
    }
    return true;
  };
  return digits(whole) && digits(fraction);
}

int HexDigit(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

bool AppendHex(absl::string_view hex, std::string* out) {
  if (hex.size() % 2 != 0) return false;
  for (size_t i = 0; i < hex.size(); i += 2) {
    const int high = HexDigit(hex[i]);
    const int low = HexDigit(hex[i + 1]);
    if (high < 0 || low < 0) return false;
    out->push_back(static_cast<char>(high * 16 + low));
  }
  return true;
}

// bytea_output 'hex' ("\x0aff") or 'escape' ("a\\b\001").
bool ParseBytea(absl::string_view text, std::string* out) {
  out->clear();
  if (text.substr(0, 2) == "\\x") return AppendHex(text.substr(2), out);
  for (size_t i = 0; i < text.size();) {
    if (text[i] != '\\') {
      out->push_back(text[i++]);
    } else if (text.substr(i, 2) == "\\\\") {
      out->push_back('\\');
      i += 2;
    } else if (i + 3 < text.size() && text[i + 1] >= '0' && text[i + 1] <= '3' &&
               text[i + 2] >= '0' && text[i + 2] <= '7' && text[i + 3] >= '0' &&
               text[i + 3] <= '7') {
      out->push_back(static_cast<char>((text[i + 1] - '0') * 64 + (text[i + 2] - '0') * 8 +
                                       (text[i + 3] - '0')));
      i += 4;
    } else {
      return false;
    }
  }
  return true;
}

// "a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11".
bool ParseUuid(absl::string_view text, std::string* out) {
  if (text.size() != 36 || text[8] != '-' || text[13] != '-' || text[18] != '-' ||
      text[23] != '-') {
    return false;
  }
  out->clear();
  return AppendHex(text.substr(0, 8), out) && AppendHex(text.substr(9, 4), out) &&
         AppendHex(text.substr(14, 4), out) && AppendHex(text.substr(19, 4), out) &&
         AppendHex(text.substr(24, 12), out);
}

Conversion Special(walfeed::v1::SpecialValue special, TypedValue* out) {
  out->set_special_value(special);
  return special == walfeed::v1::SPECIAL_VALUE_OUT_OF_RANGE ? Conversion::kOutOfRange
                                                            : Conversion::kValue;
}

Conversion Infinity(Infinite infinite, TypedValue* out) {
  return Special(infinite == Infinite::kPlus ? walfeed::v1::SPECIAL_VALUE_INFINITY
                                             : walfeed::v1::SPECIAL_VALUE_MINUS_INFINITY,
                 out);
}

Conversion Date(absl::string_view text, TypedValue* out) {
  const std::optional<DateText> date = ParseDate(text);
  if (!date) return Conversion::kNone;
  if (date->infinite != Infinite::kNo) return Infinity(date->infinite, out);
  // PostgreSQL's dates (4713 BC to 5874897 AD) all fit an int32 year.
  walfeed::v1::CivilDate* civil = out->mutable_date_value();
  civil->set_year(static_cast<int32_t>(date->date.year));
  civil->set_month(static_cast<uint32_t>(date->date.month));
  civil->set_day(static_cast<uint32_t>(date->date.day));
  return Conversion::kValue;
}

Conversion Timestamp(absl::string_view text, bool with_zone, TypedValue* out) {
  const std::optional<TimestampText> stamp = ParseTimestamp(text, with_zone);
  if (!stamp) return Conversion::kNone;
  if (stamp->infinite != Infinite::kNo) return Infinity(stamp->infinite, out);
  __int128 seconds = stamp->unix_micros / 1000000;
  __int128 micros = stamp->unix_micros % 1000000;
  if (micros < 0) {  // Timestamp's nanos are never negative.
    micros += 1000000;
    seconds -= 1;
  }
  if (seconds < kMinTimestampSeconds || seconds > kMaxTimestampSeconds) {
    return Special(walfeed::v1::SPECIAL_VALUE_OUT_OF_RANGE, out);
  }
  out->mutable_timestamp_value()->set_seconds(static_cast<int64_t>(seconds));
  out->mutable_timestamp_value()->set_nanos(static_cast<int32_t>(micros * 1000));
  return Conversion::kValue;
}

Conversion Scalar(Kind kind, absl::string_view text, TypedValue* out) {
  switch (kind) {
    case Kind::kInt: {
      int64_t value = 0;
      if (!IsIntegerText(text) || !absl::SimpleAtoi(text, &value)) return Conversion::kNone;
      out->set_int_value(value);
      return Conversion::kValue;
    }
    case Kind::kFloat: {
      double value = 0;
      if (!ParseFloat(text, &value)) return Conversion::kNone;
      out->set_float_value(value);
      return Conversion::kValue;
    }
    case Kind::kBool:
      if (text != "t" && text != "f") return Conversion::kNone;
      out->set_bool_value(text == "t");
      return Conversion::kValue;
    case Kind::kNumeric:
      if (!IsNumericText(text)) return Conversion::kNone;
      out->set_decimal_value(std::string(text));
      return Conversion::kValue;
    case Kind::kString:
      out->set_string_value(std::string(text));
      return Conversion::kValue;
    case Kind::kJson:
      out->set_json_value(std::string(text));
      return Conversion::kValue;
    case Kind::kBytea:
      return ParseBytea(text, out->mutable_bytes_value()) ? Conversion::kValue : Conversion::kNone;
    case Kind::kUuid:
      return ParseUuid(text, out->mutable_uuid_value()) ? Conversion::kValue : Conversion::kNone;
    case Kind::kDate:
      return Date(text, out);
    case Kind::kTime: {
      const std::optional<int64_t> micros = ParseTime(text);
      if (!micros) return Conversion::kNone;
      out->set_time_value(*micros);
      return Conversion::kValue;
    }
    case Kind::kTimeTz: {
      const std::optional<TimeTzText> time = ParseTimeTz(text);
      if (!time) return Conversion::kNone;
      out->mutable_timetz_value()->set_micros(time->micros);
      out->mutable_timetz_value()->set_utc_offset_seconds(time->utc_offset_seconds);
      return Conversion::kValue;
    }
    case Kind::kTimestamp:
      return Timestamp(text, /*with_zone=*/false, out);
    case Kind::kTimestampTz:
      return Timestamp(text, /*with_zone=*/true, out);
    case Kind::kInterval: {
      const std::optional<IntervalText> interval = ParseInterval(text);
      if (!interval) return Conversion::kNone;
      out->mutable_interval_value()->set_months(interval->months);
      out->mutable_interval_value()->set_days(interval->days);
      out->mutable_interval_value()->set_micros(interval->micros);
      return Conversion::kValue;
    }
    case Kind::kArray:
      break;
  }
  return Conversion::kNone;
}

// One level of an array; kOutOfRange wins over kValue, kNone over both.
Conversion Array(Kind element, const ArrayText& array, walfeed::v1::TypedArray* out) {
  Conversion result = Conversion::kValue;
  for (const ArrayText& sub : array.arrays) {
    const Conversion part = Array(element, sub, out->add_elements()->mutable_array_value());
    if (part == Conversion::kNone) return Conversion::kNone;
    if (part == Conversion::kOutOfRange) result = part;
  }
  for (const ArrayText::Element& item : array.elements) {
    TypedValue* value = out->add_elements();
    if (item.null) {
      value->set_null_value(true);
      continue;
    }
    const Conversion part = Scalar(element, item.text, value);
    if (part == Conversion::kNone) return Conversion::kNone;
    if (part == Conversion::kOutOfRange) result = part;
  }
  return result;
}

}  // namespace

uint32_t TypedOid(uint32_t type_oid, absl::string_view type_name) {
  if (Find(type_oid) != nullptr) return type_oid;
  if (type_oid < 16384) return 0;  // A built-in type without a typed form.
  for (const TypedType& type : kTypes) {
    if (type_name == type.name) return type.oid;
  }
  return 0;
}

Conversion ToTypedValue(uint32_t typed_oid, absl::string_view text, TypedValue* out) {
  out->Clear();
  const TypedType* type = Find(typed_oid);
  if (type == nullptr) return Conversion::kNone;
  if (type->kind != Kind::kArray) return Scalar(type->kind, text, out);
  const std::optional<ArrayText> array = ParseArrayText(text);
  if (!array) return Conversion::kNone;
  return Array(Find(type->element)->kind, *array, out->mutable_array_value());
}

}  // namespace walfeed::server::typed
