// The `walfeed` CLI's pure parts: the JSON string escaper, one-line JSON and
// text per event (checked exactly and by parsing the JSON back with protobuf's
// JSON parser), the status table, flag parsing and exit codes, and the
// explanation of a failed connection (targets parsed, gRPC's reasons and the
// CLI's own TCP probe turned into one line; the probe against loopback sockets).
#include <google/protobuf/struct.pb.h>
#include <google/protobuf/util/json_util.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <optional>
#include <string>
#include <vector>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "client/cli/connect.h"
#include "client/cli/flags.h"
#include "client/cli/format.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/testing/status_matchers.h"

namespace walfeed::cli {
namespace {

using ::google::protobuf::Struct;
using ::google::protobuf::Value;
using ::testing::AllOf;
using ::testing::HasSubstr;
using ::testing::Not;
using ::walfeed::testing::IsOk;
using ::walfeed::testing::StatusIs;
using ::walfeed::v1::ChangeEvent;
using ::walfeed::v1::ColumnValue;

// Parses one line of JSON into a Struct (fails the test if it is not JSON).
Struct ParseJson(const std::string& line) {
  Struct parsed;
  const auto status = google::protobuf::util::JsonStringToMessage(line, &parsed);
  EXPECT_TRUE(status.ok()) << status.ToString() << "\n" << line;
  return parsed;
}

// JsonString's output decoded by a real JSON parser.
std::string RoundTrip(const std::string& text) {
  Struct parsed = ParseJson("{\"s\":" + JsonString(text) + "}");
  return parsed.fields().at("s").string_value();
}

ColumnValue Column(const std::string& name, const std::string& type, uint32_t oid, bool key,
                   walfeed::v1::ValueKind kind, const std::string& value = "") {
  ColumnValue column;
  column.set_name(name);
  column.set_type_name(type);
  column.set_type_oid(oid);
  column.set_key(key);
  column.set_kind(kind);
  if (kind == walfeed::v1::VALUE_KIND_TEXT) column.set_text(value);
  if (kind == walfeed::v1::VALUE_KIND_RAW) column.set_raw(value);
  return column;
}

ChangeEvent Insert() {
  ChangeEvent event;
  event.set_id("0/1A2B3C8:0");
  event.set_commit_lsn(0x1A2B3C8);
  event.set_index(0);
  event.set_xid(735);
  event.mutable_commit_time()->set_seconds(1714564800);  // 2024-05-01T12:00:00Z
  event.mutable_commit_time()->set_nanos(123456000);
  event.set_op(walfeed::v1::OPERATION_INSERT);
  event.set_schema("public");
  event.set_table("orders");
  *event.add_new_values() = Column("id", "int4", 23, true, walfeed::v1::VALUE_KIND_TEXT, "1");
  *event.add_new_values() = Column("note", "text", 25, false, walfeed::v1::VALUE_KIND_NULL);
  event.set_last_in_transaction(true);
  event.set_transaction_event_count(1);
  return event;
}

TEST(JsonStringTest, EscapesWhatJsonRequires) {
  EXPECT_EQ(JsonString(""), "\"\"");
  EXPECT_EQ(JsonString("plain"), "\"plain\"");
  EXPECT_EQ(JsonString("a\"b\\c/d"), "\"a\\\"b\\\\c/d\"");
  EXPECT_EQ(JsonString("\n\r\t\b\f"), "\"\\n\\r\\t\\b\\f\"");
  EXPECT_EQ(JsonString(std::string("\0\x01\x1f\x7f", 4)), "\"\\u0000\\u0001\\u001f\\u007f\"");
  EXPECT_EQ(JsonString("caf\xC3\xA9 \xE2\x82\xAC \xF0\x9F\x98\x80"),
            "\"caf\xC3\xA9 \xE2\x82\xAC \xF0\x9F\x98\x80\"")
      << "valid UTF-8 stays readable";
  EXPECT_EQ(JsonString("\xE2\x80\xA8\xE2\x80\xA9"), "\"\\u2028\\u2029\"");
}

TEST(JsonStringTest, ReplacesBytesThatAreNotUtf8) {
  EXPECT_EQ(JsonString("a\xFF" "b"), "\"a\\ufffdb\"");
  EXPECT_EQ(JsonString("\xC3"), "\"\\ufffd\"") << "truncated sequence";
  EXPECT_EQ(JsonString("\xC0\xAF"), "\"\\ufffd\\ufffd\"") << "overlong '/'";
  EXPECT_EQ(JsonString("\xED\xA0\x80"), "\"\\ufffd\\ufffd\\ufffd\"") << "surrogate";
  EXPECT_EQ(JsonString("\xF4\x90\x80\x80"), "\"\\ufffd\\ufffd\\ufffd\\ufffd\"") << "> U+10FFFF";
  EXPECT_EQ(JsonString("caf\xE9"), "\"caf\\ufffd\"") << "LATIN1 e-acute";
}

TEST(JsonStringTest, RoundTripsThroughAJsonParser) {
  for (const std::string& text :
       {std::string("quote \" backslash \\ slash /"), std::string("lines\nand\ttabs\r"),
        std::string("nul \0 inside", 12), std::string("\x01\x02\x1b[31mred\x7f"),
        std::string("\xE4\xB8\xAD\xE6\x96\x87 \xF0\x9F\x90\x98"),
        std::string("\xE2\x80\xA8 separators \xE2\x80\xA9"), std::string(1000, 'x')}) {
    EXPECT_EQ(RoundTrip(text), text) << absl::CHexEscape(text);
  }
}

TEST(IsValidUtf8Test, FollowsRfc3629) {
  EXPECT_TRUE(IsValidUtf8(""));
  EXPECT_TRUE(IsValidUtf8("ascii"));
  EXPECT_TRUE(IsValidUtf8("\xC2\x80\xDF\xBF\xE0\xA0\x80\xEF\xBF\xBF\xF0\x90\x80\x80\xF4\x8F\xBF\xBF"));
  EXPECT_FALSE(IsValidUtf8("\x80"));
  EXPECT_FALSE(IsValidUtf8("\xC1\xBF"));
  EXPECT_FALSE(IsValidUtf8("\xE0\x9F\xBF"));
  EXPECT_FALSE(IsValidUtf8("\xF5\x80\x80\x80"));
  EXPECT_FALSE(IsValidUtf8("\xE2\x82"));
}

TEST(EventJsonTest, InsertIsExact) {
  EXPECT_EQ(EventJson(Insert()),
            "{\"id\":\"0/1A2B3C8:0\",\"commit_lsn\":\"0/1A2B3C8\",\"index\":0,\"xid\":735,"
            "\"commit_time\":\"2024-05-01T12:00:00.123456Z\",\"op\":\"insert\","
            "\"schema\":\"public\",\"table\":\"orders\",\"columns\":["
            "{\"name\":\"id\",\"type\":\"int4\",\"type_oid\":23,\"key\":true,\"kind\":\"text\","
            "\"value\":\"1\"},"
            "{\"name\":\"note\",\"type\":\"text\",\"type_oid\":25,\"key\":false,\"kind\":\"null\","
            "\"value\":null}],"
            "\"old_kind\":\"none\",\"old\":[],\"last_in_transaction\":true,"
            "\"transaction_event_count\":1}");
}

TEST(EventJsonTest, KeepsNullUnchangedToastEmptyAndRawApart) {
  ChangeEvent event = Insert();
  event.set_op(walfeed::v1::OPERATION_UPDATE);
  event.set_commit_lsn(0x16B374D848);
  event.set_id("16/B374D848:4");
  event.set_index(4);
  event.set_last_in_transaction(false);
  event.set_transaction_event_count(0);
  event.clear_new_values();
  *event.add_new_values() = Column("empty", "text", 25, false, walfeed::v1::VALUE_KIND_TEXT, "");
  *event.add_new_values() = Column("null", "text", 25, false, walfeed::v1::VALUE_KIND_NULL);
  *event.add_new_values() =
      Column("toast", "text", 25, false, walfeed::v1::VALUE_KIND_UNCHANGED_TOAST);
  const std::string latin1("caf\xE9 \x00\xFF", 7);
  *event.add_new_values() = Column("raw", "text", 25, false, walfeed::v1::VALUE_KIND_RAW, latin1);
  *event.add_new_values() = Column("tricky", "text", 25, false, walfeed::v1::VALUE_KIND_TEXT,
                                   "say \"hi\"\n\\ \xE2\x80\xA8 \xF0\x9F\x98\x80");
  event.set_old_values_kind(walfeed::v1::OLD_VALUES_KEY);
  *event.add_old_values() = Column("id", "int4", 23, true, walfeed::v1::VALUE_KIND_TEXT, "7");

  const std::string line = EventJson(event);
  EXPECT_EQ(line.find('\n'), std::string::npos);
  Struct json = ParseJson(line);
  const auto& f = json.fields();
  EXPECT_EQ(f.at("id").string_value(), "16/B374D848:4");
  EXPECT_EQ(f.at("commit_lsn").string_value(), "16/B374D848");
  EXPECT_EQ(f.at("index").number_value(), 4);
  EXPECT_EQ(f.at("op").string_value(), "update");
  EXPECT_FALSE(f.at("last_in_transaction").bool_value());
  EXPECT_EQ(f.count("transaction_event_count"), 0u) << "only on the last event";
  const auto& columns = f.at("columns").list_value().values();
  ASSERT_EQ(columns.size(), 5);
  auto field = [&](int i, const std::string& name) -> const Value* {
    const auto& fields = columns[i].struct_value().fields();
    auto it = fields.find(name);
    return it == fields.end() ? nullptr : &it->second;
  };
  EXPECT_EQ(field(0, "kind")->string_value(), "text");
  EXPECT_EQ(field(0, "value")->string_value(), "");
  EXPECT_EQ(field(1, "kind")->string_value(), "null");
  EXPECT_EQ(field(1, "value")->kind_case(), Value::kNullValue);
  EXPECT_EQ(field(2, "kind")->string_value(), "unchanged_toast");
  EXPECT_EQ(field(2, "value"), nullptr);
  EXPECT_EQ(field(3, "kind")->string_value(), "raw");
  EXPECT_EQ(field(3, "value"), nullptr);
  std::string decoded;
  ASSERT_TRUE(absl::Base64Unescape(field(3, "value_base64")->string_value(), &decoded));
  EXPECT_EQ(decoded, latin1) << "raw bytes survive exactly";
  EXPECT_EQ(field(4, "value")->string_value(), "say \"hi\"\n\\ \xE2\x80\xA8 \xF0\x9F\x98\x80");
  EXPECT_EQ(f.at("old_kind").string_value(), "key");
  ASSERT_EQ(f.at("old").list_value().values_size(), 1);
  EXPECT_EQ(f.at("old").list_value().values(0).struct_value().fields().at("value").string_value(),
            "7");
}

TEST(EventJsonTest, TruncateAndMessagesCarryTheirPayloads) {
  ChangeEvent truncate;
  truncate.set_id("0/10:0");
  truncate.set_commit_lsn(0x10);
  truncate.set_op(walfeed::v1::OPERATION_TRUNCATE);
  walfeed::v1::TableName* table = truncate.mutable_truncate()->add_tables();
  table->set_schema("public");
  table->set_table("orders");
  truncate.mutable_truncate()->set_cascade(true);
  Struct json = ParseJson(EventJson(truncate));
  const auto& t = json.fields().at("truncate").struct_value().fields();
  EXPECT_TRUE(t.at("cascade").bool_value());
  EXPECT_FALSE(t.at("restart_identity").bool_value());
  EXPECT_EQ(t.at("tables").list_value().values(0).struct_value().fields().at("table").string_value(),
            "orders");
  EXPECT_EQ(EventText(truncate), "0/10:0 TRUNCATE public.orders CASCADE");

  ChangeEvent message;
  message.set_id("0/20:1");
  message.set_op(walfeed::v1::OPERATION_MESSAGE);
  message.mutable_message()->set_prefix("audit");
  message.mutable_message()->set_content("hello");
  message.mutable_message()->set_lsn("0/28");
  json = ParseJson(EventJson(message));
  const auto& m = json.fields().at("message").struct_value().fields();
  EXPECT_EQ(m.at("prefix").string_value(), "audit");
  EXPECT_EQ(m.at("content").string_value(), "hello");
  EXPECT_EQ(m.at("content_base64").string_value(), "aGVsbG8=");
  message.mutable_message()->set_content(std::string("\xFF\x00", 2));
  json = ParseJson(EventJson(message));
  EXPECT_EQ(json.fields().at("message").struct_value().fields().count("content"), 0u);
  EXPECT_EQ(EventText(message), "0/20:1 MESSAGE prefix='audit' content=raw:/wA=");
}

TEST(EventTextTest, KeepsTheQuickstartShape) {
  EXPECT_EQ(EventText(Insert()), "0/1A2B3C8:0 INSERT public.orders id='1' note=NULL");
  ChangeEvent event = Insert();
  event.mutable_new_values(1)->set_kind(walfeed::v1::VALUE_KIND_TEXT);
  event.mutable_new_values(1)->set_text("it's\na \\ test");
  EXPECT_EQ(EventText(event), "0/1A2B3C8:0 INSERT public.orders id='1' note='it\\'s\\na \\\\ test'");
  ChangeEvent deleted = Insert();
  deleted.set_op(walfeed::v1::OPERATION_DELETE);
  deleted.clear_new_values();
  *deleted.add_old_values() = Column("id", "int4", 23, true, walfeed::v1::VALUE_KIND_TEXT, "1");
  EXPECT_EQ(EventText(deleted), "0/1A2B3C8:0 DELETE public.orders id='1'");
}

TEST(StatusTableTest, ShowsStreamsSlotsAndConsumers) {
  walfeed::v1::GetStatusResponse response;
  walfeed::v1::StreamStatus* stream = response.add_streams();
  stream->set_name("orders");
  stream->set_state(walfeed::v1::STREAM_STATE_STREAMING);
  stream->set_server_wal_lsn("0/1A2B400");
  stream->mutable_slot()->set_name("walfeed_orders");
  stream->mutable_slot()->set_wal_status("reserved");
  stream->mutable_slot()->set_active(true);
  stream->mutable_slot()->set_confirmed_flush_lsn("0/1A2B3C8");
  stream->mutable_slot()->set_retained_wal_bytes(4096);
  walfeed::v1::ConsumerStatus* consumer = stream->add_consumers();
  consumer->set_name("billing");
  consumer->set_checkpoint("0/1A2B3C8:2");
  consumer->set_session_id("abc-1");
  consumer->set_unacked_events(3);
  consumer->set_lag_bytes(56);
  consumer->set_held_bytes(700);
  stream->set_buffered_bytes(400);
  stream->set_spilled_bytes(300);
  stream->set_retention_bytes(1024);
  walfeed::v1::ConsumerStatus* gone = stream->add_consumers();
  gone->set_name("search");
  gone->set_checkpoint("0/1A00000:0");
  gone->set_detached(true);
  stream->set_held_by("billing");
  stream->mutable_held_since()->set_seconds(1796000000);
  walfeed::v1::StreamStatus* failed = response.add_streams();
  failed->set_name("lost");
  failed->set_state(walfeed::v1::STREAM_STATE_FAILED);
  failed->set_error("slot walfeed_lost no longer exists");
  failed->mutable_slot()->set_name("walfeed_lost");
  failed->mutable_slot()->set_wal_status("missing");

  EXPECT_EQ(StatusTable(response),
            "STREAM  STATE      SLOT            WAL_STATUS  ACTIVE  CONFIRMED_FLUSH  SERVER_LSN  "
            "RETAINED_BYTES  BUFFER_BYTES  SPILL_BYTES\n"
            "orders  streaming  walfeed_orders  reserved    yes     0/1A2B3C8        0/1A2B400   "
            "4096            400           300/1024\n"
            "lost    FAILED     walfeed_lost    missing     no      -                -           "
            "0               0             -\n"
            "\n"
            "STREAM  CONSUMER  CHECKPOINT   SESSION     UNACKED  LAG_BYTES  HELD_BYTES\n"
            "orders  billing   0/1A2B3C8:2  abc-1       3        56         700\n"
            "orders  search    0/1A00000:0  (detached)  0        0          0\n"
            "\n"
            "held:\n"
            "orders: the buffer is full (400 bytes in memory, 300 on disk) and waits for "
            "consumer billing since "
            "2026-11-30 00:53:20 UTC\n"
            "\n"
            "errors:\n"
            "lost: slot walfeed_lost no longer exists\n");
  EXPECT_EQ(StatusTable(walfeed::v1::GetStatusResponse()), "no streams\n");
}

TEST(StatusTableTest, AStandbyNamesTheActiveInstance) {
  walfeed::v1::GetStatusResponse response;
  walfeed::v1::StreamStatus* stream = response.add_streams();
  stream->set_name("orders");
  stream->set_state(walfeed::v1::STREAM_STATE_STANDBY);
  stream->set_active("walfeed-1.internal:50051");
  stream->mutable_slot()->set_name("walfeed_orders");
  stream->mutable_slot()->set_wal_status("reserved");
  stream->mutable_slot()->set_active(true);
  const std::string table = StatusTable(response);
  EXPECT_THAT(table, HasSubstr("orders  standby  walfeed_orders"));
  EXPECT_THAT(table, HasSubstr("\nstandby:\norders: streamed by walfeed-1.internal:50051; this "
                               "instance takes over if that one stops\n"));
  EXPECT_THAT(table, Not(HasSubstr("errors:")));
}

TEST(StatusJsonTest, IsTheResponseInProto3JsonWithDefaultsPrinted) {
  walfeed::v1::GetStatusResponse response;
  walfeed::v1::StreamStatus* stream = response.add_streams();
  stream->set_name("orders");
  stream->set_state(walfeed::v1::STREAM_STATE_STREAMING);
  stream->mutable_slot()->set_retained_wal_bytes(uint64_t{1} << 60);
  walfeed::v1::ConsumerStatus* consumer = stream->add_consumers();
  consumer->set_name("billing");
  const std::string json = StatusJson(response);
  ASSERT_FALSE(json.empty());
  EXPECT_EQ(json.back(), '\n');
  EXPECT_EQ(json.find('\n'), json.size() - 1) << "one line";
  EXPECT_THAT(json, HasSubstr("\"state\":\"STREAM_STATE_STREAMING\""));
  EXPECT_THAT(json, HasSubstr("\"retainedWalBytes\":\"1152921504606846976\""));
  EXPECT_THAT(json, HasSubstr("\"unackedEvents\":\"0\""));  // A default, printed.
  walfeed::v1::GetStatusResponse parsed;
  ASSERT_TRUE(google::protobuf::util::JsonStringToMessage(json, &parsed).ok());
  EXPECT_EQ(parsed.SerializeAsString(), response.SerializeAsString());
}

TEST(FlagsTest, ParsesTail) {
  absl::StatusOr<Invocation> parsed = ParseCommandLine(
      {"tail", "--stream", "orders", "--consumer=me", "--tables", "public.a, app.*",
       "--ops", "insert,DELETE", "--ack", "--count", "3", "--until", "0/a:1", "--format", "text",
       "--server", "db:1", "--tls-ca", "/ca.pem", "--timeout", "1.5"});
  ASSERT_THAT(parsed, IsOk());
  ASSERT_EQ(parsed->command, Command::kTail);
  const TailFlags& tail = parsed->tail;
  EXPECT_EQ(tail.stream, "orders");
  EXPECT_EQ(tail.consumer, "me");
  EXPECT_THAT(tail.tables, ::testing::ElementsAre("public.a", "app.*"));
  EXPECT_THAT(tail.operations, ::testing::ElementsAre(walfeed::v1::OPERATION_INSERT,
                                                      walfeed::v1::OPERATION_DELETE));
  EXPECT_TRUE(tail.ack);
  EXPECT_EQ(tail.count, 3u);
  EXPECT_EQ(tail.until->ToString(), "0/A:1");
  EXPECT_EQ(tail.format, Format::kText);
  EXPECT_EQ(tail.common.server, "db:1");
  EXPECT_TRUE(tail.common.tls);
  EXPECT_EQ(tail.timeout, absl::Milliseconds(1500));
}

TEST(FlagsTest, AUsageErrorPointsAtHelpThatExists) {
  EXPECT_EQ(HelpCommandFor({"tail", "--bogus"}), "walfeed tail --help");
  EXPECT_EQ(HelpCommandFor({"reset-consumer"}), "walfeed reset-consumer --help");
  EXPECT_EQ(HelpCommandFor({"frobnicate"}), "walfeed --help");
  EXPECT_EQ(HelpCommandFor({}), "walfeed --help");
}

TEST(FlagsTest, RefusesBadUsageWithAReason) {
  const std::vector<std::pair<std::vector<std::string>, std::string>> cases = {
      {{}, "no command"},
      {{"frobnicate"}, "unknown command \"frobnicate\" (commands: tail, status,"},
      {{"tail", "--consumer", "c"}, "--stream is required"},
      {{"tail", "--stream", "s", "--ack"}, "--ack needs --consumer"},
      {{"tail", "--stream", "s", "--start", "latest"}, "--start needs --consumer"},
      {{"tail", "--stream", "s", "--consumer", "c", "--start", "now"}, "earliest or latest"},
      {{"tail", "--stream", "s", "--consumer", "c", "--ops", "upsert"}, "unknown operation"},
      {{"tail", "--stream", "s", "--consumer", "c", "--count", "0"}, "--count"},
      {{"tail", "--stream", "s", "--consumer", "c", "--until", "nope"}, "invalid event id"},
      {{"tail", "--stream", "s", "--consumer", "c", "--format", "xml"}, "json or text"},
      {{"tail", "--stream", "s", "--consumer", "c", "--ack=yes"}, "takes no value"},
      {{"tail", "--stream"}, "needs a value"},
      {{"status", "--bogus"}, "unknown argument"},
      {{"status", "--format", "yaml"}, "--format must be table or json"},
      {{"remove-consumer", "--consumer", "c", "--yes"}, "--stream is required"},
      {{"remove-consumer", "--stream", "s", "--yes"}, "--consumer is required"},
      {{"remove-consumer", "--stream", "s", "--consumer", "c"}, "pass --yes to confirm"},
      {{"reset-consumer", "--stream", "s", "--consumer", "c", "--to-head"}, "pass --yes"},
      {{"reset-consumer", "--stream", "s", "--consumer", "c", "--yes"}, "exactly one of"},
      {{"reset-consumer", "--stream", "s", "--consumer", "c", "--to", "0/1:0", "--to-head",
        "--yes"},
       "exactly one of"},
      {{"reset-consumer", "--stream", "s", "--consumer", "c", "--to", "x", "--yes"},
       "invalid event id"},
      {{"reset-consumer", "--consumer", "c", "--to-head", "--yes"}, "--stream is required"},
  };
  for (const auto& [args, why] : cases) {
    EXPECT_THAT(ParseCommandLine(args), StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr(why)))
        << ::testing::PrintToString(args);
  }
}

TEST(FlagsTest, HelpEverywhere) {
  for (const std::vector<std::string>& args :
       std::vector<std::vector<std::string>>{{"--help"},
                                             {"help"},
                                             {"tail", "--help"},
                                             {"status", "--help"},
                                             {"remove-consumer", "--help"},
                                             {"reset-consumer", "--help"},
                                             {"help", "remove-consumer"},
                                             {"help", "tail"},
                                             {"tail", "--stream", "s", "-h"}}) {
    absl::StatusOr<Invocation> parsed = ParseCommandLine(args);
    ASSERT_THAT(parsed, IsOk());
    EXPECT_EQ(parsed->command, Command::kHelp);
    EXPECT_THAT(parsed->help, HasSubstr("Exit codes"));
    EXPECT_THAT(parsed->help, HasSubstr("usage: walfeed"));
  }
  EXPECT_THAT(ParseCommandLine({"tail", "--help"})->help, HasSubstr("--until"));
  EXPECT_THAT(ParseCommandLine({"status", "--help"})->help, Not(HasSubstr("--until")));
}

TEST(FlagsTest, ParsesRemoveConsumer) {
  absl::StatusOr<Invocation> parsed =
      ParseCommandLine({"remove-consumer", "--stream", "orders", "--consumer=old-billing", "--yes",
                        "--server", "db:1", "--timeout", "5"});
  ASSERT_THAT(parsed, IsOk());
  ASSERT_EQ(parsed->command, Command::kRemoveConsumer);
  EXPECT_EQ(parsed->remove_consumer.stream, "orders");
  EXPECT_EQ(parsed->remove_consumer.consumer, "old-billing");
  EXPECT_TRUE(parsed->remove_consumer.yes);
  EXPECT_EQ(parsed->remove_consumer.common.server, "db:1");
  EXPECT_EQ(parsed->remove_consumer.timeout, absl::Seconds(5));
  EXPECT_THAT(MainUsage(), HasSubstr("remove-consumer"));
}

TEST(FlagsTest, ExitCodes) {
  EXPECT_EQ(ExitCodeFor(absl::OkStatus()), 0);
  EXPECT_EQ(ExitCodeFor(absl::UnavailableError("x")), 1);
  EXPECT_EQ(ExitCodeFor(absl::AbortedError("x")), 1);
  EXPECT_EQ(ExitCodeFor(absl::InvalidArgumentError("x")), 2);
  EXPECT_EQ(ExitCodeFor(absl::DataLossError("x")), 3);
  EXPECT_EQ(ExitCodeFor(absl::NotFoundError("x")), 4);
  EXPECT_EQ(ExitCodeFor(absl::PermissionDeniedError("x")), 4);
  EXPECT_EQ(ExitCodeFor(absl::UnauthenticatedError("x")), 4);
}

// ---------------------------------------------------------------------------
// Explaining a failed connection (client/cli/connect.h).

TEST(ParseTargetTest, FindsHostAndPortInTheTargetsGrpcAccepts) {
  auto endpoint = [](const std::string& target) {
    std::optional<Endpoint> parsed = ParseTarget(target);
    if (!parsed) return std::string("none");
    if (!parsed->unix_path.empty()) return absl::StrCat("unix ", parsed->unix_path);
    return absl::StrCat(parsed->host, " ", parsed->port);
  };
  EXPECT_EQ(endpoint("127.0.0.1:50051"), "127.0.0.1 50051");
  EXPECT_EQ(endpoint("walfeed.internal:7"), "walfeed.internal 7");
  EXPECT_EQ(endpoint("walfeed.internal"), "walfeed.internal 443");  // gRPC's default port.
  EXPECT_EQ(endpoint("[::1]:50051"), "::1 50051");
  EXPECT_EQ(endpoint("[::1]"), "::1 443");
  EXPECT_EQ(endpoint("::1"), "::1 443");
  EXPECT_EQ(endpoint("dns:///walfeed:50051"), "walfeed 50051");
  EXPECT_EQ(endpoint("dns://8.8.8.8/walfeed:50051"), "walfeed 50051");
  EXPECT_EQ(endpoint("dns:walfeed:50051"), "walfeed 50051");
  EXPECT_EQ(endpoint("ipv4:10.0.0.1:1,10.0.0.2:2"), "10.0.0.1 1");
  EXPECT_EQ(endpoint("ipv6:[::1]:3"), "::1 3");
  EXPECT_EQ(endpoint("unix:/run/walfeed.sock"), "unix /run/walfeed.sock");
  EXPECT_EQ(endpoint("unix:///run/walfeed.sock"), "unix /run/walfeed.sock");
  EXPECT_EQ(endpoint("unix:relative.sock"), "unix relative.sock");
  for (const char* unusable : {"", ":50051", "host:", "[::1", "[::1]x", "xds:///walfeed",
                               "unix-abstract:walfeed", "vsock:3:50051", "unix:", "dns://x"}) {
    EXPECT_EQ(endpoint(unusable), "none") << unusable;
  }
}

// gRPC 1.51's messages for each failure, as a fail-fast call reports them.
constexpr char kGrpcRefused[] =
    "failed to connect to all addresses; last error: UNKNOWN: ipv4:127.0.0.1:5999: Failed to "
    "connect to remote host: Connection refused";
constexpr char kGrpcWrongVersion[] =
    "failed to connect to all addresses; last error: UNKNOWN: ipv4:127.0.0.1:5901: Ssl "
    "handshake failed: SSL_ERROR_SSL: error:0A00010B:SSL routines::wrong version number";
constexpr char kGrpcUntrusted[] =
    "failed to connect to all addresses; last error: UNKNOWN: ipv4:127.0.0.1:5902: Ssl "
    "handshake failed: SSL_ERROR_SSL: error:0A000086:SSL routines::certificate verify failed";
constexpr char kGrpcPeerName[] =
    "failed to connect to all addresses; last error: UNKNOWN: ipv4:127.0.0.1:5902: Peer name "
    "127.0.0.1 is not in peer certificate";
constexpr char kGrpcClosed[] =
    "failed to connect to all addresses; last error: UNAVAILABLE: ipv4:127.0.0.1:5902: Socket "
    "closed";

ConnectFailure Describe(bool tls, Probe::Result result, const std::string& grpc_error,
                        const std::string& detail = "") {
  return DescribeConnectFailure("db:5", tls, Probe{result, detail}, grpc_error);
}

TEST(DescribeConnectFailureTest, NothingListeningIsSaidWithoutGrpcWords) {
  using R = Probe::Result;
  EXPECT_EQ(Describe(false, R::kRefused, kGrpcRefused).message,
            "cannot connect to db:5: connection refused (is walfeed-server running there?)");
  // The probe decides, whatever gRPC said and whether TLS was on.
  EXPECT_EQ(Describe(true, R::kRefused, "").message,
            "cannot connect to db:5: connection refused (is walfeed-server running there?)");
  EXPECT_EQ(Describe(false, R::kRefused, kGrpcRefused, "no socket at that path").message,
            "cannot connect to db:5: no socket at that path (is walfeed-server running there?)");
  EXPECT_EQ(
      Describe(false, R::kNoSuchHost, "DNS resolution failed", "name or service not known").message,
      "cannot connect to db:5: no such host: name or service not known (check the host "
      "name in --server)");
  EXPECT_EQ(Describe(false, R::kUnreachable, "x", "no route to host").message,
            "cannot connect to db:5: no route to host (check the address in --server and the "
            "network)");
  EXPECT_THAT(Describe(false, R::kTimedOut, "").message,
              HasSubstr("cannot connect to db:5: no answer (is the address right?"));
  // A target the CLI cannot probe: gRPC's reason, without its framing.
  EXPECT_EQ(Describe(false, R::kNotProbed, kGrpcRefused).message,
            "cannot connect to db:5: connection refused (is walfeed-server running there?)");
  EXPECT_EQ(Describe(false, R::kNotProbed,
                     "failed to connect to all addresses; last error: "
                     "UNKNOWN: unix-abstract:x: No such device")
                .message,
            "cannot connect to db:5: No such device");
  for (R result : {R::kRefused, R::kNoSuchHost, R::kUnreachable, R::kTimedOut, R::kNotProbed}) {
    EXPECT_FALSE(Describe(true, result, kGrpcRefused).definite) << "a server may still come";
    EXPECT_FALSE(Describe(true, result, kGrpcRefused).handshake);
  }
}

TEST(DescribeConnectFailureTest, HandshakeFailuresNameTlsAndTheFlagToCheck) {
  using R = Probe::Result;
  const ConnectFailure not_tls = Describe(true, R::kConnected, kGrpcWrongVersion);
  EXPECT_EQ(not_tls.message,
            "cannot connect to db:5: TLS handshake failed: wrong version number (the server does "
            "not seem to use TLS: drop --tls and the --tls-* flags, or turn TLS on in the server)");
  EXPECT_TRUE(not_tls.definite);

  const ConnectFailure untrusted = Describe(true, R::kConnected, kGrpcUntrusted);
  EXPECT_THAT(untrusted.message,
              HasSubstr("TLS handshake failed: certificate verify failed (the server's "
                        "certificate is not trusted: pass the CA that signed it with --tls-ca"));
  EXPECT_TRUE(untrusted.definite);

  const ConnectFailure other_name = Describe(true, R::kConnected, kGrpcPeerName);
  EXPECT_THAT(other_name.message,
              HasSubstr("TLS handshake failed: the server's certificate is not valid for "
                        "\"127.0.0.1\" (connect by a name it is valid for, or pass that name with "
                        "--tls-server-name NAME)"));
  EXPECT_TRUE(other_name.definite);

  // TLS to a server that hangs up: mutual TLS without a client certificate (or
  // a proxy with nothing behind it), so not definite.
  const ConnectFailure closed = Describe(true, R::kConnected, kGrpcClosed);
  EXPECT_THAT(closed.message, AllOf(HasSubstr("TLS handshake failed: the server closed the "
                                              "connection"),
                                    HasSubstr("--tls-cert and --tls-key")));
  EXPECT_FALSE(closed.definite);

  // Plaintext to a TLS server: it hangs up on the HTTP/2 preface.
  const ConnectFailure plaintext = Describe(false, R::kConnected, kGrpcClosed);
  EXPECT_EQ(plaintext.message,
            "cannot connect to db:5: the server closed the connection during the handshake "
            "(does it use TLS? then add --tls, or --tls-ca FILE)");
  EXPECT_FALSE(plaintext.definite);
  EXPECT_TRUE(plaintext.handshake);
  EXPECT_TRUE(not_tls.handshake);
  EXPECT_TRUE(closed.handshake);
  EXPECT_THAT(
      Describe(false, R::kConnected, "last error: UNKNOWN: ipv4:1.2.3.4:5: bad frame").message,
      HasSubstr("the gRPC handshake failed: bad frame (does the server use TLS?"));

  // Connected, but the handshake had not finished when the time was up.
  EXPECT_THAT(Describe(true, R::kConnected, "").message,
              HasSubstr("the TLS handshake did not finish in time"));
  EXPECT_THAT(Describe(false, R::kConnected, "").message, HasSubstr("did not answer gRPC in time"));

  // An unknown TLS reason is passed on, shortened to OpenSSL's words.
  EXPECT_THAT(Describe(true, R::kConnected,
                       "last error: UNKNOWN: ipv4:1.2.3.4:5: Ssl handshake failed: "
                       "SSL_ERROR_SSL: error:0A000410:SSL routines::sslv3 alert handshake failure")
                  .message,
              HasSubstr("TLS handshake failed: sslv3 alert handshake failure (does the server use "
                        "TLS? check --tls, --tls-ca and --tls-server-name)"));
}

TEST(DescribeConnectFailureTest, IsOneLine) {
  EXPECT_EQ(Describe(false, Probe::Result::kNotProbed, "first\nsecond\r\nthird").message,
            "cannot connect to db:5: first second third");
}

// A loopback TCP socket: bound, and listening if asked.
class LoopbackSocket {
 public:
  explicit LoopbackSocket(bool listening) {
    fd_ = socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in address{};
    address.sin_family = AF_INET;
    address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t length = sizeof(address);
    if (fd_ < 0 || bind(fd_, reinterpret_cast<sockaddr*>(&address), sizeof(address)) != 0 ||
        getsockname(fd_, reinterpret_cast<sockaddr*>(&address), &length) != 0 ||
        (listening && listen(fd_, 4) != 0)) {
      return;
    }
    port_ = ntohs(address.sin_port);
  }
  ~LoopbackSocket() {
    if (fd_ >= 0) close(fd_);
  }
  LoopbackSocket(const LoopbackSocket&) = delete;
  LoopbackSocket& operator=(const LoopbackSocket&) = delete;
  int port() const { return port_; }

 private:
  int fd_ = -1;
  int port_ = 0;
};

TEST(ProbeEndpointTest, TellsAListeningPortFromAClosedOne) {
  LoopbackSocket listening(true);
  LoopbackSocket closed(false);
  ASSERT_GT(listening.port(), 0);
  ASSERT_GT(closed.port(), 0);
  EXPECT_EQ(
      ProbeEndpoint(ParseTarget(absl::StrCat("127.0.0.1:", listening.port())), absl::Seconds(10))
          .result,
      Probe::Result::kConnected);
  EXPECT_EQ(ProbeEndpoint(ParseTarget(absl::StrCat("127.0.0.1:", closed.port())), absl::Seconds(10))
                .result,
            Probe::Result::kRefused);
  const Probe no_socket =
      ProbeEndpoint(ParseTarget("unix:/nonexistent-walfeed-dir/walfeed.sock"), absl::Seconds(10));
  EXPECT_EQ(no_socket.result, Probe::Result::kRefused);
  EXPECT_EQ(no_socket.detail, "no socket at that path");
  EXPECT_EQ(ProbeEndpoint(ParseTarget("xds:///walfeed"), absl::Seconds(10)).result,
            Probe::Result::kNotProbed);
}

}  // namespace
}  // namespace walfeed::cli
