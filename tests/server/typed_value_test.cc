// The typed form of PostgreSQL's text output, from byte vectors: every type's
// values and edge values, and text that must stay text.
#include "server/typed/typed_value.h"

#include <cmath>
#include <cstdint>
#include <limits>
#include <string>

#include "gtest/gtest.h"
#include "server/typed/pg_array_text.h"
#include "server/typed/pg_datetime_text.h"

namespace walfeed::server::typed {
namespace {

using walfeed::v1::TypedValue;

TypedValue Typed(uint32_t oid, const std::string& text, Conversion expected = Conversion::kValue) {
  TypedValue value;
  EXPECT_EQ(ToTypedValue(oid, text, &value), expected) << oid << " " << text;
  return value;
}

bool NotTyped(uint32_t oid, const std::string& text) {
  TypedValue value;
  return ToTypedValue(oid, text, &value) == Conversion::kNone;
}

TEST(TypedValueTest, Integers) {
  EXPECT_EQ(Typed(21, "-32768").int_value(), -32768);
  EXPECT_EQ(Typed(23, "2147483647").int_value(), 2147483647);
  EXPECT_EQ(Typed(20, "-9223372036854775808").int_value(), std::numeric_limits<int64_t>::min());
  EXPECT_EQ(Typed(20, "9223372036854775807").int_value(), std::numeric_limits<int64_t>::max());
  EXPECT_EQ(Typed(26, "4294967295").int_value(), 4294967295);
  EXPECT_TRUE(NotTyped(20, "9223372036854775808"));
  EXPECT_TRUE(NotTyped(23, ""));
  EXPECT_TRUE(NotTyped(23, "+1"));
  EXPECT_TRUE(NotTyped(23, " 1"));
  EXPECT_TRUE(NotTyped(23, "1.0"));
  for (const char* bad : {"1\n", "007", "-0", "-", "0x10"}) EXPECT_TRUE(NotTyped(23, bad)) << bad;
  EXPECT_EQ(Typed(23, "0").int_value(), 0);
}

TEST(TypedValueTest, FloatsIncludingTheirSpecialsAndNegativeZero) {
  EXPECT_EQ(Typed(701, "0.1").float_value(), 0.1);
  EXPECT_EQ(Typed(700, "0.1").float_value(), 0.1) << "the double nearest the text";
  EXPECT_EQ(Typed(701, "1e+300").float_value(), 1e300);
  EXPECT_EQ(Typed(701, "1.2345678901234568e+17").float_value(), 1.2345678901234568e+17);
  EXPECT_EQ(Typed(701, "5e-324").float_value(), 5e-324);
  const double negative_zero = Typed(701, "-0").float_value();
  EXPECT_EQ(negative_zero, 0.0);
  EXPECT_TRUE(std::signbit(negative_zero));
  EXPECT_TRUE(std::isnan(Typed(701, "NaN").float_value()));
  EXPECT_EQ(Typed(700, "Infinity").float_value(), std::numeric_limits<double>::infinity());
  EXPECT_EQ(Typed(701, "-Infinity").float_value(), -std::numeric_limits<double>::infinity());
  EXPECT_TRUE(NotTyped(701, "inf"));
  EXPECT_TRUE(NotTyped(701, "1e"));
  EXPECT_TRUE(NotTyped(701, ""));
}

TEST(TypedValueTest, BoolNumericAndText) {
  EXPECT_TRUE(Typed(16, "t").bool_value());
  EXPECT_FALSE(Typed(16, "f").bool_value());
  EXPECT_EQ(Typed(16, "f").value_case(), TypedValue::kBoolValue);
  EXPECT_TRUE(NotTyped(16, "true"));
  for (const char* numeric : {"1.50", "-0.000001", "0", "NaN", "Infinity", "-Infinity",
                              "100000000000000000000"}) {
    EXPECT_EQ(Typed(1700, numeric).decimal_value(), numeric);
  }
  EXPECT_EQ(Typed(1700, std::string(1000, '9')).decimal_value(), std::string(1000, '9'));
  for (const char* bad : {"1e5", ".5", "5.", "-", "", "1.2.3", "--1"}) {
    EXPECT_TRUE(NotTyped(1700, bad)) << bad;
  }
  EXPECT_EQ(Typed(25, "héllo 世界 🐘").string_value(), "héllo 世界 🐘");
  EXPECT_EQ(Typed(25, "").value_case(), TypedValue::kStringValue);
  EXPECT_EQ(Typed(1042, "ab   ").string_value(), "ab   ") << "bpchar keeps its padding";
  EXPECT_EQ(Typed(3802, R"({"a": [1, 2.50]})").json_value(), R"({"a": [1, 2.50]})");
  EXPECT_EQ(Typed(114, "null").json_value(), "null");
}

TEST(TypedValueTest, ByteaInBothOutputFormatsAndUuid) {
  EXPECT_EQ(Typed(17, R"(\x00ff41)").bytes_value(), std::string("\x00\xff\x41", 3));
  EXPECT_EQ(Typed(17, R"(\x)").value_case(), TypedValue::kBytesValue);
  EXPECT_EQ(Typed(17, R"(\x)").bytes_value(), "");
  EXPECT_EQ(Typed(17, R"(a\\b\000\377)").bytes_value(), std::string("a\\b\0\xff", 5));
  EXPECT_TRUE(NotTyped(17, R"(\x0)"));
  EXPECT_TRUE(NotTyped(17, R"(\xzz)"));
  EXPECT_TRUE(NotTyped(17, R"(a\9)"));
  EXPECT_TRUE(NotTyped(17, R"(a\)"));
  EXPECT_EQ(Typed(2950, "a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11").uuid_value(),
            std::string("\xa0\xee\xbc\x99\x9c\x0b\x4e\xf8\xbb\x6d\x6b\xb9\xbd\x38\x0a\x11", 16));
  EXPECT_TRUE(NotTyped(2950, "a0eebc999c0b4ef8bb6d6bb9bd380a11"));
  EXPECT_TRUE(NotTyped(2950, "a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a1g"));
}

TEST(TypedValueTest, DatesIncludingBcAndInfinity) {
  const walfeed::v1::CivilDate leap = Typed(1082, "2024-02-29").date_value();
  EXPECT_EQ(leap.year(), 2024);
  EXPECT_EQ(leap.month(), 2u);
  EXPECT_EQ(leap.day(), 29u);
  EXPECT_EQ(Typed(1082, "0001-01-01 BC").date_value().year(), 0) << "1 BC is year 0";
  EXPECT_EQ(Typed(1082, "4714-11-24 BC").date_value().year(), -4713);
  EXPECT_EQ(Typed(1082, "5874897-12-31").date_value().year(), 5874897);
  EXPECT_EQ(Typed(1082, "infinity").special_value(), walfeed::v1::SPECIAL_VALUE_INFINITY);
  EXPECT_EQ(Typed(1082, "-infinity").special_value(), walfeed::v1::SPECIAL_VALUE_MINUS_INFINITY);
  EXPECT_TRUE(NotTyped(1082, "2023-02-29"));
  EXPECT_TRUE(NotTyped(1082, "2024-13-01"));
  EXPECT_TRUE(NotTyped(1082, "02/29/2024")) << "another DateStyle stays text";
  EXPECT_TRUE(NotTyped(1082, "2024-02-29 AD"));
  EXPECT_EQ(DaysFromCivil({1970, 1, 1}), 0);
  EXPECT_EQ(DaysFromCivil({2000, 3, 1}), 11017);
  EXPECT_EQ(DaysFromCivil({1969, 12, 31}), -1);
  EXPECT_EQ(DaysFromCivil({0, 3, 1}), -719468);
}

TEST(TypedValueTest, TimestampsToTheMicrosecondAndBeyondTheTypedRange) {
  const google::protobuf::Timestamp utc = Typed(1184, "2024-03-10 10:34:56.789+00").timestamp_value();
  EXPECT_EQ(utc.seconds(), 1710066896);
  EXPECT_EQ(utc.nanos(), 789000000);
  const google::protobuf::Timestamp india =
      Typed(1184, "2024-03-10 16:04:56.789+05:30").timestamp_value();
  EXPECT_EQ(india.seconds(), 1710066896) << "the same instant";
  EXPECT_EQ(Typed(1184, "1883-11-18 12:00:00-04:56:02").timestamp_value().seconds(),
            -2717668800 + 4 * 3600 + 56 * 60 + 2);  // 16:56:02 UTC.
  const google::protobuf::Timestamp wall = Typed(1114, "1969-12-31 23:59:59.999999").timestamp_value();
  EXPECT_EQ(wall.seconds(), -1);
  EXPECT_EQ(wall.nanos(), 999999000) << "nanos never negative";
  EXPECT_EQ(Typed(1114, "0001-01-01 00:00:00").timestamp_value().seconds(), -62135596800);
  EXPECT_EQ(Typed(1114, "9999-12-31 23:59:59.999999").timestamp_value().seconds(), 253402300799);
  EXPECT_EQ(Typed(1114, "10000-01-01 00:00:00", Conversion::kOutOfRange).special_value(),
            walfeed::v1::SPECIAL_VALUE_OUT_OF_RANGE);
  EXPECT_EQ(Typed(1114, "294276-12-31 23:59:59.999999", Conversion::kOutOfRange).special_value(),
            walfeed::v1::SPECIAL_VALUE_OUT_OF_RANGE);
  EXPECT_EQ(Typed(1184, "0001-12-31 23:00:00+00 BC", Conversion::kOutOfRange).special_value(),
            walfeed::v1::SPECIAL_VALUE_OUT_OF_RANGE);
  EXPECT_EQ(Typed(1184, "0001-01-01 00:30:00+01", Conversion::kOutOfRange).special_value(),
            walfeed::v1::SPECIAL_VALUE_OUT_OF_RANGE)
      << "the instant is in year 0";
  EXPECT_EQ(Typed(1184, "-infinity").special_value(), walfeed::v1::SPECIAL_VALUE_MINUS_INFINITY);
  EXPECT_TRUE(NotTyped(1114, "2024-03-10 10:34:56+00")) << "timestamp has no offset";
  EXPECT_TRUE(NotTyped(1184, "2024-03-10 10:34:56")) << "timestamptz has one";
  EXPECT_TRUE(NotTyped(1184, "2024-03-10T10:34:56+00"));
  EXPECT_TRUE(NotTyped(1184, "2024-03-10 10:34:56.1234567+00"));
}

TEST(TypedValueTest, TimesAndIntervals) {
  EXPECT_EQ(Typed(1083, "00:00:00").time_value(), 0);
  EXPECT_EQ(Typed(1083, "24:00:00").time_value(), 86400000000);
  EXPECT_EQ(Typed(1083, "04:05:06.000001").time_value(), 14706000001);
  EXPECT_TRUE(NotTyped(1083, "24:00:00.000001"));
  EXPECT_TRUE(NotTyped(1083, "04:60:00"));
  const walfeed::v1::TimeWithZone tz = Typed(1266, "04:05:06.5-07:30").timetz_value();
  EXPECT_EQ(tz.micros(), 14706500000);
  EXPECT_EQ(tz.utc_offset_seconds(), -27000);
  EXPECT_TRUE(NotTyped(1266, "04:05:06"));

  const walfeed::v1::Interval mixed = Typed(1186, "1 year 2 mons -3 days +04:05:06.5").interval_value();
  EXPECT_EQ(mixed.months(), 14);
  EXPECT_EQ(mixed.days(), -3);
  EXPECT_EQ(mixed.micros(), 14706500000);
  const walfeed::v1::Interval negative = Typed(1186, "-1 years -2 mons -00:00:01").interval_value();
  EXPECT_EQ(negative.months(), -14);
  EXPECT_EQ(negative.micros(), -1000000);
  EXPECT_EQ(Typed(1186, "00:00:00").interval_value().micros(), 0);
  EXPECT_EQ(Typed(1186, "-1 days").interval_value().days(), -1);
  EXPECT_EQ(Typed(1186, "2562047788:00:54.775807").interval_value().micros(),
            std::numeric_limits<int64_t>::max());
  EXPECT_EQ(Typed(1186, "-178956970 years -8 mons").interval_value().months(),
            std::numeric_limits<int32_t>::min());
  for (const char* bad : {"", "P1Y", "@ 1 year", "1 fortnight", "1 year 00:00:00 1 day",
                          "1:00", "178956971 years", "2562047789:00:00"}) {
    EXPECT_TRUE(NotTyped(1186, bad)) << bad;
  }
}

TEST(TypedValueTest, ArraysNestedQuotedWithNulls) {
  const walfeed::v1::TypedArray flat = Typed(1007, "{1,NULL,3}").array_value();
  ASSERT_EQ(flat.elements_size(), 3);
  EXPECT_EQ(flat.elements(0).int_value(), 1);
  EXPECT_TRUE(flat.elements(1).null_value());
  EXPECT_EQ(flat.elements(2).int_value(), 3);
  const walfeed::v1::TypedArray square = Typed(1007, "{{1,2},{3,4}}").array_value();
  ASSERT_EQ(square.elements_size(), 2);
  EXPECT_EQ(square.elements(1).array_value().elements(0).int_value(), 3);
  EXPECT_EQ(Typed(1009, "{}").array_value().elements_size(), 0);
  const walfeed::v1::TypedArray texts =
      Typed(1009, R"({plain,"with space","quote \" and \\","NULL",""})").array_value();
  ASSERT_EQ(texts.elements_size(), 5);
  EXPECT_EQ(texts.elements(1).string_value(), "with space");
  EXPECT_EQ(texts.elements(2).string_value(), R"(quote " and \)");
  EXPECT_EQ(texts.elements(3).string_value(), "NULL") << "quoted: the text NULL";
  EXPECT_EQ(texts.elements(4).string_value(), "");
  EXPECT_EQ(Typed(1001, R"({"\\x0102"})").array_value().elements(0).bytes_value(), "\x01\x02");
  EXPECT_EQ(Typed(1185, R"({"2024-01-01 00:00:00+00",infinity})").array_value().elements(1)
                .special_value(),
            walfeed::v1::SPECIAL_VALUE_INFINITY);
  EXPECT_EQ(Typed(1115, R"({"20000-01-01 00:00:00"})", Conversion::kOutOfRange)
                .array_value()
                .elements(0)
                .special_value(),
            walfeed::v1::SPECIAL_VALUE_OUT_OF_RANGE);
  for (const char* bad : {"[0:1]={7,8}", "{1,x}", "{1,2", "{{1},2}", "{,}", "1", "{1}}",
                          "{{{{{{{1}}}}}}}", R"({"a)"}) {
    EXPECT_TRUE(NotTyped(1007, bad)) << bad;
  }
  EXPECT_TRUE(Typed(1007, "{{{{{{1}}}}}}").has_array_value()) << "6 dimensions";
}

TEST(TypedValueTest, DomainsOverBuiltInTypesAndTypesWithoutATypedForm) {
  EXPECT_EQ(TypedOid(23, "int4"), 23u);
  EXPECT_EQ(TypedOid(16390, "int4"), 23u) << "a domain: its Type message named int4";
  EXPECT_EQ(TypedOid(16390, "_int4"), 1007u);
  EXPECT_EQ(TypedOid(16390, "public.mood"), 0u) << "an enum stays text";
  EXPECT_EQ(TypedOid(600, "point"), 0u);
  EXPECT_EQ(TypedOid(3904, "int4range"), 0u);
  EXPECT_EQ(TypedOid(600, "int4"), 0u) << "a built-in OID is never taken for a domain";
  EXPECT_TRUE(NotTyped(0, "1"));
  EXPECT_TRUE(NotTyped(600, "(1,2)"));
}

}  // namespace
}  // namespace walfeed::server::typed
