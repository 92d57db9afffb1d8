// The golden test of typed values (SubscribeRequest.value_form): every type of
// the integration suite's type table and its edge values go through
// PostgreSQL 15, pgoutput and the server, and each value's typed form must mean
// what PostgreSQL itself computes from the stored value (its binary send
// functions, extract(), array functions), never what our text parser thinks.
// Both the typed form and PostgreSQL's answer are rendered into one canonical
// string per kind, then compared.
#include <cmath>
#include <cstdint>
#include <cstring>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_replace.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "gmock/gmock.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "replication/pg/pg_stream_source.h"
#include "server/config.h"
#include "server/typed/pg_datetime_text.h"
#include "server/walfeed_server.h"
#include "tests/testing/pg_cluster.h"
#include "tests/testing/status_matchers.h"
#include "tests/testing/wait.h"
#include "walfeed/v1/change_stream.grpc.pb.h"

namespace walfeed::server {
namespace {

using ::walfeed::testing::IsOk;
using ::walfeed::testing::PgCluster;
using ::walfeed::testing::WaitUntil;
using ::walfeed::v1::TypedValue;

// How a kind's value is rendered for comparison. `sql` renders PostgreSQL's
// value `$`; Canon() renders a TypedValue the same way.
enum class Kind { kInt, kFloat, kBool, kExact, kBytes, kUuid, kDate, kTime, kTimeTz, kStamp,
                  kStampTz, kInterval, kUntyped };

std::string SqlCanon(Kind kind, const std::string& v) {
  switch (kind) {
    case Kind::kInt:
    case Kind::kBool:
      return absl::StrCat(v, "::text");
    case Kind::kFloat:  // The double nearest the text, bit for bit.
      return absl::StrCat("encode(float8send(", v, "::text::float8), 'hex')");
    case Kind::kExact:  // numeric, text-like, json: the output function's text.
      return absl::StrCat("format('%s', ", v, ")");
    case Kind::kBytes:
      return absl::StrCat("encode(", v, ", 'hex')");
    case Kind::kUuid:
      return absl::StrCat("encode(uuid_send(", v, "), 'hex')");
    case Kind::kDate:
      return absl::StrCat("CASE WHEN isfinite(", v, ") THEN (", v,
                          " - date '1970-01-01')::text ELSE ", v, "::text END");
    case Kind::kTime:
      return absl::StrCat("extract(epoch FROM ", v, ")::text");
    case Kind::kTimeTz:
      return absl::StrCat("extract(epoch FROM ", v, "::time)::text || ' ' || extract(timezone FROM ",
                          v, ")::text");
    case Kind::kStamp:
    case Kind::kStampTz: {
      const std::string zone = kind == Kind::kStampTz ? "+00" : "";
      return absl::StrCat("CASE WHEN NOT isfinite(", v, ") THEN ", v, "::text WHEN ", v,
                          " < '0001-01-01 00:00:00", zone, "' OR ", v, " >= '10000-01-01 00:00:00",
                          zone, "' THEN 'out of range' ELSE extract(epoch FROM ", v,
                          ")::text END");
    }
    case Kind::kInterval:
      return absl::StrCat("(extract(year FROM ", v, ") * 12 + extract(month FROM ", v,
                          "))::text || ' ' || extract(day FROM ", v, ")::text || ' ' || ",
                          "(extract(hour FROM ", v, ") * 3600 + extract(minute FROM ", v,
                          ") * 60 + extract(second FROM ", v, "))::text");
    case Kind::kUntyped:
      return "'untyped'";
  }
  return "";
}

// Microseconds as PostgreSQL prints a numeric with 6 decimals.
std::string MicrosText(__int128 micros) {
  const bool negative = micros < 0;
  const __int128 magnitude = negative ? -micros : micros;
  return absl::StrFormat("%s%d.%06d", negative ? "-" : "", static_cast<int64_t>(magnitude / 1000000),
                         static_cast<int64_t>(magnitude % 1000000));
}

std::string Canon(Kind kind, const TypedValue& value) {
  if (value.has_special_value()) {
    switch (value.special_value()) {
      case walfeed::v1::SPECIAL_VALUE_INFINITY:
        return "infinity";
      case walfeed::v1::SPECIAL_VALUE_MINUS_INFINITY:
        return "-infinity";
      case walfeed::v1::SPECIAL_VALUE_OUT_OF_RANGE:
        return "out of range";
      default:
        return "bad special";
    }
  }
  switch (kind) {
    case Kind::kInt:
      return value.has_int_value() ? absl::StrCat(value.int_value()) : "not an int";
    case Kind::kBool:
      return value.has_bool_value() ? (value.bool_value() ? "true" : "false") : "not a bool";
    case Kind::kFloat: {
      if (!value.has_float_value()) return "not a float";
      const double d = value.float_value();
      uint64_t bits = 0;
      std::memcpy(&bits, &d, sizeof bits);
      return absl::StrFormat("%016x", bits);
    }
    case Kind::kExact:
      if (value.has_decimal_value()) return value.decimal_value();
      if (value.has_string_value()) return value.string_value();
      if (value.has_json_value()) return value.json_value();
      return "not exact";
    case Kind::kBytes:
      return absl::BytesToHexString(value.bytes_value());
    case Kind::kUuid:
      return absl::BytesToHexString(value.uuid_value());
    case Kind::kDate: {
      const walfeed::v1::CivilDate& date = value.date_value();
      return absl::StrCat(typed::DaysFromCivil(typed::Civil{
          date.year(), static_cast<int>(date.month()), static_cast<int>(date.day())}));
    }
    case Kind::kTime:
      return MicrosText(value.time_value());
    case Kind::kTimeTz:
      return absl::StrCat(MicrosText(value.timetz_value().micros()), " ",
                          value.timetz_value().utc_offset_seconds());
    case Kind::kStamp:
    case Kind::kStampTz:
      return MicrosText(static_cast<__int128>(value.timestamp_value().seconds()) * 1000000 +
                        value.timestamp_value().nanos() / 1000);
    case Kind::kInterval:
      return absl::StrCat(value.interval_value().months(), " ", value.interval_value().days(), " ",
                          MicrosText(value.interval_value().micros()));
    case Kind::kUntyped:
      return "typed";
  }
  return "";
}

// An array's canonical form: its elements in storage order, then its dims.
std::string SqlArrayCanon(Kind element) {
  return absl::StrCat("CASE WHEN array_lower(v, 1) <> 1 THEN 'untyped' ELSE (SELECT ",
                      "coalesce(string_agg(CASE WHEN x IS NULL THEN 'NULL' ELSE ",
                      SqlCanon(element, "x"),
                      " END, ',' ORDER BY o), '') FROM unnest(v) WITH ORDINALITY u(x, o)) ",
                      "|| ' ' || coalesce(array_dims(v), '') END");
}

void Flatten(Kind element, const walfeed::v1::TypedArray& array, std::vector<std::string>* out) {
  for (const TypedValue& item : array.elements()) {
    if (item.has_array_value()) {
      Flatten(element, item.array_value(), out);
    } else {
      out->push_back(item.null_value() ? "NULL" : Canon(element, item));
    }
  }
}

std::string ArrayCanon(Kind element, const TypedValue& value) {
  std::vector<std::string> items;
  Flatten(element, value.array_value(), &items);
  std::string dims;
  for (const walfeed::v1::TypedArray* level = &value.array_value(); level->elements_size() > 0;) {
    absl::StrAppend(&dims, "[1:", level->elements_size(), "]");
    if (!level->elements(0).has_array_value()) break;
    level = &level->elements(0).array_value();
  }
  return absl::StrCat(absl::StrJoin(items, ","), " ", dims);
}

struct TypeCase {
  std::string column_type;
  Kind kind;
  bool array = false;
  std::vector<std::string> values;  // SQL expressions.
};

std::vector<TypeCase> Cases() {
  return {
      {"int2", Kind::kInt, false, {"-32768", "32767", "0"}},
      {"int4", Kind::kInt, false, {"-2147483648", "2147483647", "NULL"}},
      {"int8", Kind::kInt, false, {"-9223372036854775808", "9223372036854775807"}},
      {"oid", Kind::kInt, false, {"4294967295", "0"}},
      {"float4", Kind::kFloat, false, {"'Infinity'", "'-Infinity'", "'NaN'", "'-0'", "3.14", "'1e-5'"}},
      {"float8", Kind::kFloat, false,
       {"'NaN'", "'-0'", "0.1", "1e300", "123456789012345678", "'5e-324'", "'-Infinity'"}},
      {"bool", Kind::kBool, false, {"true", "false"}},
      {"numeric", Kind::kExact, false,
       {"'NaN'", "'Infinity'", "'-Infinity'", "1.50", "-0.000", "1e20", "0.000001",
        "repeat('9', 1000)::numeric"}},
      {"numeric(10,2)", Kind::kExact, false, {"-12345678.9"}},
      {"text", Kind::kExact, false, {"'héllo 世界 🐘'", "''", "'it''s'"}},
      {"varchar(10)", Kind::kExact, false, {"'abc'"}},
      {"char(5)", Kind::kExact, false, {"'ab'"}},
      {"name", Kind::kExact, false, {"'a name'"}},
      {"\"char\"", Kind::kExact, false, {"'x'"}},
      {"json", Kind::kExact, false, {R"('{"b" :  [1,2],   "a": 1, "a": 2}')", "'null'"}},
      {"jsonb", Kind::kExact, false, {R"('{"b" :  [1,2],   "aa": 1, "c": 1.50}')"}},
      {"bytea", Kind::kBytes, false, {R"('\x00ff41')", "''", "'abc'::bytea"}},
      {"uuid", Kind::kUuid, false, {"'A0EEBC99-9C0B-4EF8-BB6D-6BB9BD380A11'"}},
      {"date", Kind::kDate, false,
       {"'2024-02-29'", "'infinity'", "'-infinity'", "'0001-01-01 BC'", "'4714-11-24 BC'",
        "'5874897-12-31'"}},
      {"time", Kind::kTime, false, {"'00:00:00'", "'24:00:00'", "'04:05:06.000001'"}},
      {"time(2)", Kind::kTime, false, {"'04:05:06.789'"}},
      {"timetz", Kind::kTimeTz, false, {"'04:05:06.5-07:30'", "'23:59:59.999999+14'"}},
      {"timestamp", Kind::kStamp, false,
       {"'2024-03-10 12:34:56.000001'", "'0001-01-01 00:00:00'", "'4713-01-01 00:00:00 BC'",
        "'294276-12-31 23:59:59.999999'", "'infinity'", "'1969-12-31 23:59:59.999999'"}},
      {"timestamp(0)", Kind::kStamp, false, {"'2024-03-10 12:34:56.7'"}},
      {"timestamptz", Kind::kStampTz, false,
       {"'2024-03-10 12:34:56.789+02'", "'-infinity'", "'294276-12-31 23:59:59.999999+00'",
        "'0001-01-01 00:30:00+01'", "'1883-11-18 12:00:00 America/New_York'"}},
      {"interval", Kind::kInterval, false,
       {"'1 year 2 months 3 days 04:05:06.5'", "'-1 day'", "'90 minutes'", "'0'",
        "'-1 year -2 mons -00:00:01'", "'178000000 years'", "'-3 days 100:00:00.000001'"}},
      {"int4[]", Kind::kInt, true,
       {"'{1,2,3}'", "'{{1,2},{3,4}}'", "'[0:1]={7,8}'", "'{}'", "ARRAY[NULL, 1]"}},
      {"text[]", Kind::kExact, true,
       {R"(ARRAY['a', NULL, 'b c', 'd"e', 'f\g', '', 'NULL', 'x,y', 'é'])"}},
      {"float8[]", Kind::kFloat, true, {"'{NaN,-0,1.5}'"}},
      {"bool[]", Kind::kBool, true, {"'{t,f,NULL}'"}},
      {"numeric[]", Kind::kExact, true, {"'{1.50,NaN}'"}},
      {"bytea[]", Kind::kBytes, true, {R"(ARRAY['\x0102'::bytea, NULL, ''])"}},
      {"uuid[]", Kind::kUuid, true, {"ARRAY['a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11'::uuid]"}},
      {"date[]", Kind::kDate, true, {"'{2024-01-01,infinity}'"}},
      {"timestamptz[]", Kind::kStampTz, true,
       {"ARRAY['2024-01-01 00:00:00+00'::timestamptz, 'infinity']"}},
      {"interval[]", Kind::kInterval, true, {"ARRAY['1 day 01:00:00'::interval]"}},
      {"jsonb[]", Kind::kExact, true, {R"(ARRAY['{"a": 1}'::jsonb, '[]'])"}},
      {"mood", Kind::kUntyped, false, {"'very happy'"}},
      {"posint", Kind::kInt, false, {"42"}},
      {"point", Kind::kUntyped, false, {"'(1,2)'"}},
      {"int4range", Kind::kUntyped, false, {"'[1,5)'"}},
  };
}

class TypedValuesE2eTest : public ::testing::Test {
 protected:
  void SetUp() override {
    WALFEED_START_PG_OR_SKIP(pg_, PgCluster::Options{});
    ASSERT_THAT(pg_->Exec("CREATE TYPE mood AS ENUM ('sad', 'very happy'); "
                          "CREATE DOMAIN posint AS int4 CHECK (VALUE > 0)"),
                IsOk());
    std::vector<std::string> tables;
    for (size_t i = 0; i < cases_.size(); ++i) {
      ASSERT_THAT(pg_->Exec(absl::StrCat("CREATE TABLE t_", i, " (id int PRIMARY KEY, v ",
                                         cases_[i].column_type, ")")),
                  IsOk());
      tables.push_back(absl::StrCat("public.t_", i));
    }
    const std::string yaml = absl::StrCat(
        "listen: \"127.0.0.1:0\"\nplaintext: true\nshutdown_timeout: 1s\nstreams:\n",
        "  - name: typed\n    conninfo: \"", pg_->ConnInfo(),
        "\"\n    slot: walfeed_typed\n    publications: [walfeed_typed]\n    tables: [",
        absl::StrJoin(tables, ", "), "]\n    create_missing: true\n");
    absl::StatusOr<ServerConfig> config = ParseConfig(yaml, "typed.yaml");
    ASSERT_THAT(config, IsOk()) << yaml;
    absl::StatusOr<std::unique_ptr<WalfeedServer>> server =
        WalfeedServer::Start(*config, replication::pg::MakePgStreamSource);
    ASSERT_THAT(server, IsOk());
    server_ = std::move(*server);
  }
  void TearDown() override {
    if (server_) server_->Shutdown();
  }

  // Subscribes as durable consumer `consumer` (retrying while the stream
  // connects) and returns the first `count` events; with `count` 0, returns
  // once the session started, which makes the consumer known: the server then
  // holds every later event for it.
  std::vector<walfeed::v1::ChangeEvent> Read(const std::string& consumer,
                                             walfeed::v1::ValueForm form,
                                             walfeed::v1::EventForm event_form, size_t count) {
    auto channel = grpc::CreateChannel(absl::StrCat("127.0.0.1:", server_->port()),
                                       grpc::InsecureChannelCredentials());
    auto stub = walfeed::v1::ChangeStream::NewStub(channel);
    std::vector<walfeed::v1::ChangeEvent> events;
    const absl::Time deadline = absl::Now() + absl::Seconds(60);
    // Each try is one session; the stream refuses them while it connects.
    const auto session = [&] {
      events.clear();
      grpc::ClientContext context;
      context.set_deadline(absl::ToChronoTime(deadline));
      walfeed::v1::SubscribeRequest request;
      request.set_stream("typed");
      request.set_consumer(consumer);
      request.set_value_form(form);
      request.set_event_form(event_form);
      auto reader = stub->Subscribe(&context, request);
      walfeed::v1::SubscribeResponse response;
      bool started = false;
      while ((!started || events.size() < count) && reader->Read(&response)) {
        started = started || response.has_started();
        for (const auto& event : response.events().events()) events.push_back(event);
      }
      context.TryCancel();
      reader->Finish();
      return started && events.size() >= count;
    };
    EXPECT_TRUE(WaitUntil(session, deadline - absl::Now(), absl::Milliseconds(50)))
        << consumer << ": " << events.size() << " of " << count << " events";
    return events;
  }

  std::vector<TypeCase> cases_ = Cases();
  std::unique_ptr<PgCluster> pg_;
  std::unique_ptr<WalfeedServer> server_;
};

TEST_F(TypedValuesE2eTest, EveryTypedValueMeansWhatPostgresComputesFromTheStoredValue) {
  // Both consumers exist before the rows are written, so the server holds
  // every row for them.
  ASSERT_TRUE(Read("both", walfeed::v1::VALUE_FORM_BOTH, walfeed::v1::EVENT_FORM_FULL, 0).empty());
  ASSERT_TRUE(
      Read("typed", walfeed::v1::VALUE_FORM_TYPED, walfeed::v1::EVENT_FORM_COMPACT, 0).empty());
  std::string inserts = "BEGIN;";
  size_t total = 0;
  for (size_t i = 0; i < cases_.size(); ++i) {
    for (size_t k = 0; k < cases_[i].values.size(); ++k) {
      absl::StrAppend(&inserts, "INSERT INTO t_", i, " VALUES (", k, ", ", cases_[i].values[k],
                      ");");
      ++total;
    }
  }
  ASSERT_THAT(pg_->Exec(absl::StrCat(inserts, "COMMIT;")), IsOk());

  const std::vector<walfeed::v1::ChangeEvent> both =
      Read("both", walfeed::v1::VALUE_FORM_BOTH, walfeed::v1::EVENT_FORM_FULL, total);
  ASSERT_EQ(both.size(), total);
  const std::vector<walfeed::v1::ChangeEvent> typed_only =
      Read("typed", walfeed::v1::VALUE_FORM_TYPED, walfeed::v1::EVENT_FORM_COMPACT, total);
  ASSERT_EQ(typed_only.size(), total);

  size_t checked = 0;
  for (size_t i = 0; i < cases_.size(); ++i) {
    const TypeCase& type = cases_[i];
    const std::string table = absl::StrCat("t_", i);
    absl::StatusOr<std::vector<std::string>> expected = pg_->Query(absl::StrCat(
        "SELECT ", type.array ? SqlArrayCanon(type.kind) : SqlCanon(type.kind, "v"), " FROM ",
        table, " ORDER BY id"));
    ASSERT_THAT(expected, IsOk());
    absl::StatusOr<std::string> modifier = pg_->QueryValue(absl::StrCat(
        "SELECT atttypmod FROM pg_attribute WHERE attrelid = '", table,
        "'::regclass AND attname = 'v'"));
    ASSERT_THAT(modifier, IsOk());
    for (size_t e = 0; e < both.size(); ++e) {
      const walfeed::v1::ChangeEvent& event = both[e];
      if (event.table() != table) continue;
      const int id = std::stoi(event.new_values(0).text());
      const walfeed::v1::ColumnValue& value = event.new_values(1);
      const std::string& want = (*expected)[static_cast<size_t>(id)];
      const std::string where = absl::StrCat(type.column_type, " ", type.values[id], ": text ",
                                             value.text());
      EXPECT_EQ(value.has_type_modifier() ? value.type_modifier() : -1, std::stoi(*modifier))
          << where;
      // The compact typed form: the same typed value, text only where needed.
      const walfeed::v1::ColumnValue& compact = typed_only[e].new_values(1);
      EXPECT_EQ(compact.typed().SerializeAsString(), value.typed().SerializeAsString()) << where;
      EXPECT_EQ(compact.name(), "") << where;
      if (want == "<NULL>") {
        EXPECT_EQ(value.kind(), walfeed::v1::VALUE_KIND_NULL) << where;
        EXPECT_FALSE(value.has_typed()) << where;
        ++checked;
        continue;
      }
      EXPECT_FALSE(value.text().empty() && type.kind != Kind::kExact) << where;
      const bool untyped = want == "untyped";
      ASSERT_EQ(value.has_typed(), !untyped) << where;
      EXPECT_EQ(compact.text().empty(), !untyped && want != "out of range") << where;
      if (!untyped) {
        EXPECT_EQ(type.array ? ArrayCanon(type.kind, value.typed()) : Canon(type.kind, value.typed()),
                  want)
            << where;
      }
      ++checked;
    }
  }
  EXPECT_EQ(checked, total);
}

}  // namespace
}  // namespace walfeed::server
