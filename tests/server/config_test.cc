// ServerConfig parsing: the example file, defaults, every error path (each
// message must name the key path), path resolution, secrets never echoed, TLS
// file reading and the loopback check.
#include "server/config.h"

#include <stdlib.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/testing/status_matchers.h"

namespace walfeed::server {
namespace {

using ::testing::AllOf;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::Not;
using ::testing::StartsWith;
using ::walfeed::testing::IsOk;
using ::walfeed::testing::StatusIs;

constexpr absl::StatusCode kInvalid = absl::StatusCode::kInvalidArgument;

// A valid config; tests change one thing at a time with absl::StrReplaceAll.
constexpr absl::string_view kValid = R"(listen: "127.0.0.1:50051"
plaintext: true
streams:
  - name: orders
    conninfo: "host=localhost dbname=app"
    slot: walfeed_orders
    publications: [walfeed_orders]
)";

absl::StatusOr<ServerConfig> Parse(absl::string_view text) {
  return ParseConfig(text, "test.yaml");
}

// `kValid` with `from` replaced by `to` (which must occur).
std::string Valid(absl::string_view from, absl::string_view to) {
  EXPECT_THAT(std::string(kValid), HasSubstr(std::string(from)));
  return absl::StrReplaceAll(kValid, {{from, to}});
}

// kValid's stream with extra lines appended to it.
std::string WithStreamLines(absl::string_view lines) { return absl::StrCat(kValid, lines); }

// A fresh directory for one test's files, removed with it. Named after the
// process and the test, since ctest runs tests in parallel processes.
class TestDir {
 public:
  TestDir() {
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    path_ = absl::StrCat(::testing::TempDir(), "/config_test_", getpid(), "_", info->name());
    std::filesystem::remove_all(path_);
    std::filesystem::create_directories(path_);
  }
  ~TestDir() { std::filesystem::remove_all(path_); }
  TestDir(const TestDir&) = delete;
  TestDir& operator=(const TestDir&) = delete;

  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

void WriteFile(const std::string& path, absl::string_view contents) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out << contents;
  ASSERT_TRUE(out.good()) << path;
}

TEST(ConfigTest, MinimalConfigTakesDefaults) {
  absl::StatusOr<ServerConfig> config = Parse(kValid);
  ASSERT_THAT(config, IsOk());
  EXPECT_EQ(config->listen, "127.0.0.1:50051");
  EXPECT_TRUE(config->plaintext);
  EXPECT_FALSE(config->tls.has_value());
  EXPECT_FALSE(config->auth_enabled());
  EXPECT_EQ(config->checkpoint.schema, "walfeed");
  EXPECT_EQ(config->checkpoint.conninfo, "");
  EXPECT_EQ(config->shutdown_timeout, absl::Seconds(10));
  EXPECT_EQ(config->defaults.max_batch_events, 256u);
  EXPECT_EQ(config->defaults.max_batch_bytes, 1u << 20);
  EXPECT_EQ(config->defaults.max_unacked_events, 10000u);
  EXPECT_EQ(config->defaults.max_unacked_bytes, uint64_t{64} << 20);
  EXPECT_EQ(config->defaults.progress_interval, absl::Seconds(5));
  EXPECT_EQ(config->defaults.buffer_bytes, uint64_t{64} << 20);
  ASSERT_EQ(config->streams.size(), 1u);
  const replication::StreamConfig& stream = config->streams[0];
  EXPECT_EQ(stream.name, "orders");
  EXPECT_EQ(stream.conninfo, "host=localhost dbname=app");
  EXPECT_EQ(stream.slot_name, "walfeed_orders");
  EXPECT_THAT(stream.publication_names, ElementsAre("walfeed_orders"));
  EXPECT_TRUE(stream.tables.empty());
  EXPECT_FALSE(stream.create_missing);
  EXPECT_TRUE(stream.publish_via_partition_root);
  EXPECT_FALSE(stream.initial_snapshot);
  EXPECT_EQ(stream.snapshot_connections, 4u);
}

TEST(ConfigTest, ExampleFileParses) {
  ASSERT_EQ(setenv("WALFEED_INVENTORY_CONNINFO", "host=inv dbname=inv password=example", 1), 0);
  absl::StatusOr<ServerConfig> config = LoadConfig(WALFEED_EXAMPLE_CONFIG);
  ASSERT_THAT(config, IsOk());
  EXPECT_EQ(config->listen, "127.0.0.1:50051");
  EXPECT_FALSE(config->plaintext);
  ASSERT_TRUE(config->tls.has_value());
  EXPECT_EQ(config->tls->cert_file, "/etc/walfeed/tls/server.crt");
  EXPECT_EQ(config->tls->key_file, "/etc/walfeed/tls/server.key");
  EXPECT_TRUE(config->tls->RequiresClientCertificates());
  EXPECT_TRUE(config->auth_enabled());
  EXPECT_EQ(config->tokens_file, "/etc/walfeed/tokens");
  EXPECT_EQ(config->checkpoint.schema, "walfeed");
  EXPECT_EQ(config->checkpoint.conninfo, "");
  EXPECT_EQ(config->shutdown_timeout, absl::Seconds(10));
  EXPECT_EQ(config->defaults.max_batch_events, 256u);
  EXPECT_EQ(config->defaults.max_batch_bytes, 1048576u);
  EXPECT_EQ(config->defaults.max_unacked_events, 10000u);
  EXPECT_EQ(config->defaults.max_unacked_bytes, 67108864u);
  EXPECT_EQ(config->defaults.progress_interval, absl::Seconds(5));
  EXPECT_EQ(config->defaults.buffer_bytes, 67108864u);
  EXPECT_EQ(config->defaults.read_coalesce, std::nullopt) << "unset: chosen by the transport";
  ASSERT_EQ(config->streams.size(), 2u);
  EXPECT_EQ(config->streams[0].name, "orders");
  EXPECT_EQ(config->streams[0].slot_name, "walfeed_orders");
  EXPECT_THAT(config->streams[0].tables, ElementsAre("public.orders", "public.order_lines"));
  EXPECT_TRUE(config->streams[0].create_missing);
  EXPECT_TRUE(config->streams[0].publish_via_partition_root);
  EXPECT_TRUE(config->streams[0].initial_snapshot);
  EXPECT_EQ(config->streams[0].snapshot_connections, 4u);
  EXPECT_FALSE(config->streams[1].initial_snapshot);
  EXPECT_EQ(config->streams[1].name, "inventory");
  EXPECT_EQ(config->streams[1].conninfo, "host=inv dbname=inv password=example");
  EXPECT_FALSE(config->streams[1].create_missing);
  EXPECT_EQ(config->state_dir, "/var/lib/walfeed");
  EXPECT_EQ(config->RetentionFor("orders").retention_bytes, uint64_t{1} << 30);
  EXPECT_EQ(config->RetentionFor("orders").laggard_policy, LaggardPolicy::kHold);
  EXPECT_EQ(config->RetentionFor("inventory").retention_bytes, uint64_t{256} << 20);
  EXPECT_EQ(config->RetentionFor("inventory").laggard_policy, LaggardPolicy::kDetach);
  EXPECT_FALSE(ListensBeyondLoopback(config->listen));

  // Without its variable the example names the variable, not a value.
  ASSERT_EQ(unsetenv("WALFEED_INVENTORY_CONNINFO"), 0);
  EXPECT_THAT(LoadConfig(WALFEED_EXAMPLE_CONFIG),
              StatusIs(kInvalid, AllOf(HasSubstr("streams[1].conninfo_env"),
                                       HasSubstr("WALFEED_INVENTORY_CONNINFO is not set"))));
}

TEST(ConfigTest, EveryKeyIsRead) {
  const std::string text = R"(listen: "[::]:6000"
tls:
  cert_file: certs/server.crt
  key_file: /abs/server.key
auth:
  tokens_file: tokens
checkpoint:
  schema: wf_state
  conninfo: "host=checkpoints dbname=wf"
shutdown_timeout: 1m30s
defaults:
  max_batch_events: 10
  max_batch_bytes: 2048
  max_unacked_events: 20
  max_unacked_bytes: 4096
  progress_interval: 250ms
  buffer_bytes: 8192
  read_coalesce: 0s
  retention_bytes: 2097152
  laggard_policy: detach
state_dir: state
streams:
  - name: orders
    conninfo: "host=localhost dbname=app"
    slot: walfeed_orders
    publications: [p1, p2]
    tables: [public.orders]
    create_missing: true
    publish_via_partition_root: false
    snapshot: initial
    snapshot_connections: 7
)";
  absl::StatusOr<ServerConfig> config = ParseConfig(text, "/etc/walfeed/walfeed.yaml");
  ASSERT_THAT(config, IsOk());
  EXPECT_EQ(config->listen, "[::]:6000");
  // Relative paths are relative to the config file's directory.
  EXPECT_EQ(config->tls->cert_file, "/etc/walfeed/certs/server.crt");
  EXPECT_EQ(config->tls->key_file, "/abs/server.key");
  EXPECT_FALSE(config->tls->RequiresClientCertificates());
  EXPECT_EQ(config->tokens_file, "/etc/walfeed/tokens");
  EXPECT_EQ(config->checkpoint.schema, "wf_state");
  EXPECT_EQ(config->checkpoint.conninfo, "host=checkpoints dbname=wf");
  EXPECT_EQ(config->shutdown_timeout, absl::Seconds(90));
  EXPECT_EQ(config->defaults.max_batch_events, 10u);
  EXPECT_EQ(config->defaults.max_batch_bytes, 2048u);
  EXPECT_EQ(config->defaults.max_unacked_events, 20u);
  EXPECT_EQ(config->defaults.max_unacked_bytes, 4096u);
  EXPECT_EQ(config->defaults.progress_interval, absl::Milliseconds(250));
  EXPECT_EQ(config->defaults.buffer_bytes, 8192u);
  EXPECT_EQ(config->defaults.read_coalesce, absl::ZeroDuration());
  EXPECT_EQ(config->state_dir, "/etc/walfeed/state");
  EXPECT_EQ(config->RetentionFor("orders").retention_bytes, 2097152u);
  EXPECT_EQ(config->RetentionFor("orders").laggard_policy, LaggardPolicy::kDetach);
  EXPECT_THAT(config->streams[0].publication_names, ElementsAre("p1", "p2"));
  EXPECT_THAT(config->streams[0].tables, ElementsAre("public.orders"));
  EXPECT_TRUE(config->streams[0].create_missing);
  EXPECT_FALSE(config->streams[0].publish_via_partition_root);
  EXPECT_TRUE(config->streams[0].initial_snapshot);
  EXPECT_EQ(config->streams[0].snapshot_connections, 7u);

  // A bare source name leaves relative paths relative to the working directory.
  config = ParseConfig(text, "walfeed.yaml");
  ASSERT_THAT(config, IsOk());
  EXPECT_EQ(config->tls->cert_file, "certs/server.crt");
}

TEST(ConfigTest, UnknownKeysNameTheirPathAndTheAllowedKeys) {
  EXPECT_THAT(Parse(WithStreamLines("    slots: x\n")),
              StatusIs(kInvalid, AllOf(StartsWith("test.yaml:8: "),
                                       HasSubstr("streams[0].slots: unknown key; expected one "
                                                 "of name, conninfo, conninfo_file, conninfo_env, "
                                                 "slot, publications, tables, create_missing"))));
  EXPECT_THAT(Parse(absl::StrCat("lisen: x\n", kValid)),
              StatusIs(kInvalid, AllOf(StartsWith("test.yaml:1: "),
                                       HasSubstr("lisen: unknown key; expected one of listen"))));
  EXPECT_THAT(Parse(Valid("plaintext: true", "tls: {cert_file: a, key_file: b, ca: c}")),
              StatusIs(kInvalid, HasSubstr("tls.ca: unknown key; expected one of cert_file, "
                                           "key_file, client_ca_file")));
  EXPECT_THAT(Parse(absl::StrCat(kValid, "auth: {token_file: t}\n")),
              StatusIs(kInvalid, HasSubstr("auth.token_file: unknown key")));
  EXPECT_THAT(Parse(absl::StrCat(kValid, "checkpoint: {schemas: x}\n")),
              StatusIs(kInvalid, HasSubstr("checkpoint.schemas: unknown key")));
  EXPECT_THAT(Parse(absl::StrCat(kValid, "defaults: {batch_events: 1}\n")),
              StatusIs(kInvalid, HasSubstr("defaults.batch_events: unknown key")));
}

TEST(ConfigTest, RetentionSettingsAreBoundedAndNamed) {
  EXPECT_THAT(Parse(absl::StrCat(kValid, "defaults: {retention_bytes: 1000}\n")),
              StatusIs(kInvalid, HasSubstr("defaults.retention_bytes")));
  EXPECT_THAT(Parse(absl::StrCat(kValid, "defaults: {laggard_policy: drop}\n")),
              StatusIs(kInvalid, AllOf(HasSubstr("defaults.laggard_policy"),
                                       HasSubstr("expected hold"), HasSubstr("\"drop\""))));
  EXPECT_THAT(Parse(WithStreamLines("    laggard_policy: later\n")),
              StatusIs(kInvalid, HasSubstr("streams[0].laggard_policy")));
  // A stream's own setting starts from the defaults.
  absl::StatusOr<ServerConfig> config = Parse(absl::StrCat(
      "defaults: {retention_bytes: 4194304}\n", WithStreamLines("    laggard_policy: detach\n")));
  ASSERT_THAT(config, IsOk());
  EXPECT_EQ(config->RetentionFor("orders").retention_bytes, 4194304u);
  EXPECT_EQ(config->RetentionFor("orders").laggard_policy, LaggardPolicy::kDetach);
  EXPECT_TRUE(config->state_dir.empty()) << "no state_dir: nothing spills";
}

TEST(ConfigTest, RepeatedKeysAreErrors) {
  EXPECT_THAT(Parse(absl::StrCat(kValid, "plaintext: false\n")),
              StatusIs(kInvalid, HasSubstr("plaintext: key appears twice")));
  EXPECT_THAT(Parse(WithStreamLines("    slot: other\n")),
              StatusIs(kInvalid, HasSubstr("streams[0].slot: key appears twice")));
}

TEST(ConfigTest, WrongTypesNameTheKeyAndTheExpectedForm) {
  EXPECT_THAT(Parse(Valid("listen: \"127.0.0.1:50051\"", "listen: [a, b]")),
              StatusIs(kInvalid, HasSubstr("listen: expected host:port, found a list")));
  EXPECT_THAT(Parse(Valid("plaintext: true", "plaintext: yes")),
              StatusIs(kInvalid, HasSubstr("plaintext: expected true or false, found \"yes\"")));
  EXPECT_THAT(Parse(Valid("plaintext: true", "plaintext: true\ntls: x")),
              StatusIs(kInvalid, HasSubstr("tls: expected a mapping")));
  EXPECT_THAT(Parse(absl::StrCat(kValid, "auth:\n")),
              StatusIs(kInvalid, HasSubstr("auth: expected a mapping (key: value lines), found "
                                           "no value")));
  EXPECT_THAT(Parse(Valid("publications: [walfeed_orders]", "publications: walfeed_orders")),
              StatusIs(kInvalid, HasSubstr("streams[0].publications: expected a list")));
  EXPECT_THAT(Parse(Valid("publications: [walfeed_orders]", "publications: [[a]]")),
              StatusIs(kInvalid, HasSubstr("streams[0].publications[0]: expected a string")));
  EXPECT_THAT(Parse(WithStreamLines("    tables: [{a: b}]\n")),
              StatusIs(kInvalid, HasSubstr("streams[0].tables[0]: expected a string")));
  EXPECT_THAT(Parse(WithStreamLines("    create_missing: on\n")),
              StatusIs(kInvalid, HasSubstr("streams[0].create_missing: expected true or false")));
  EXPECT_THAT(Parse(Valid("name: orders", "name:")),
              StatusIs(kInvalid, HasSubstr("streams[0].name: expected a stream name, found no "
                                           "value")));
  EXPECT_THAT(Parse("[1, 2]\n"),
              StatusIs(kInvalid, StartsWith("test.yaml:1: expected a mapping (key: value lines), "
                                            "found a list")));
  EXPECT_THAT(Parse(absl::StrCat(kValid, "? [a]\n: b\n")),
              StatusIs(kInvalid, HasSubstr("keys must be plain names")));
}

TEST(ConfigTest, IntegersMustBePositiveAndBounded) {
  for (const char* bad :
       {"0", "-1", "abc", "1.5", "0x10", "+5", "100001", "\"\"", "99999999999999999999999"}) {
    SCOPED_TRACE(bad);
    EXPECT_THAT(Parse(absl::StrCat(kValid, "defaults: {max_batch_events: ", bad, "}\n")),
                StatusIs(kInvalid, HasSubstr("defaults.max_batch_events: expected an integer "
                                             "from 1 to 100000")));
  }
  EXPECT_THAT(Parse(absl::StrCat(kValid, "defaults: {max_batch_bytes: 67108865}\n")),
              StatusIs(kInvalid, HasSubstr("defaults.max_batch_bytes: expected an integer from 1 "
                                           "to 67108864")));
  EXPECT_THAT(Parse(absl::StrCat(kValid, "defaults: {max_unacked_events: 0}\n")),
              StatusIs(kInvalid, HasSubstr("defaults.max_unacked_events")));
  EXPECT_THAT(Parse(absl::StrCat(kValid, "defaults: {max_unacked_bytes: 68719476737}\n")),
              StatusIs(kInvalid, HasSubstr("defaults.max_unacked_bytes")));
  EXPECT_THAT(Parse(absl::StrCat(kValid, "defaults: {buffer_bytes: 0}\n")),
              StatusIs(kInvalid, HasSubstr("defaults.buffer_bytes")));
  EXPECT_THAT(Parse(absl::StrCat(kValid, "defaults: {read_coalesce: 1s}\n")),
              StatusIs(kInvalid, AllOf(HasSubstr("defaults.read_coalesce"),
                                       HasSubstr("from 0 to 100ms"))));
  EXPECT_THAT(Parse(absl::StrCat(kValid, "defaults: {max_unacked_bytes: 68719476736}\n")), IsOk());
  for (const char* bad : {"0", "33", "two"}) {
    SCOPED_TRACE(bad);
    EXPECT_THAT(Parse(absl::StrCat(kValid, "    snapshot_connections: ", bad, "\n")),
                StatusIs(kInvalid, HasSubstr("streams[0].snapshot_connections: expected an "
                                             "integer from 1 to 32")));
  }
  EXPECT_THAT(Parse(absl::StrCat(kValid, "    snapshot: everything\n")),
              StatusIs(kInvalid, AllOf(HasSubstr("streams[0].snapshot"),
                                       HasSubstr("expected none"), HasSubstr("or initial"))));
}

TEST(ConfigTest, DurationsAreAbslDurationsWithinBounds) {
  for (const char* bad : {"10", "ten seconds", "10 s", "-1s", "inf", "\"\""}) {
    SCOPED_TRACE(bad);
    EXPECT_THAT(Parse(absl::StrCat(kValid, "shutdown_timeout: ", bad, "\n")),
                StatusIs(kInvalid, HasSubstr("shutdown_timeout: ")));
  }
  EXPECT_THAT(Parse(absl::StrCat(kValid, "shutdown_timeout: 10 seconds\n")),
              StatusIs(kInvalid, HasSubstr("shutdown_timeout: expected a duration such as 500ms, "
                                           "10s or 1m30s, from 1ms to 1h, found \"10 seconds\"")));
  EXPECT_THAT(Parse(absl::StrCat(kValid, "shutdown_timeout: 2h\n")),
              StatusIs(kInvalid, HasSubstr("shutdown_timeout: must be from 1ms to 1h, found "
                                           "\"2h\"")));
  EXPECT_THAT(Parse(absl::StrCat(kValid, "shutdown_timeout: 0s\n")),
              StatusIs(kInvalid, HasSubstr("shutdown_timeout: must be from 1ms to 1h")));
  EXPECT_THAT(Parse(absl::StrCat(kValid, "defaults: {progress_interval: 1ms}\n")),
              StatusIs(kInvalid, HasSubstr("defaults.progress_interval: must be from 10ms to 1h")));
  EXPECT_THAT(Parse(absl::StrCat(kValid, "shutdown_timeout: 1h\n")), IsOk());
}

TEST(ConfigTest, MetricsListenAndLoggingAreReadAndChecked) {
  absl::StatusOr<ServerConfig> config = Parse(absl::StrCat(
      kValid, "metrics_listen: \"0.0.0.0:9464\"\nlog: {format: json, level: warn}\n"));
  ASSERT_THAT(config, IsOk());
  EXPECT_EQ(config->metrics_listen, "0.0.0.0:9464");
  EXPECT_EQ(config->log.format, LogFormat::kJson);
  EXPECT_EQ(config->log.level, "warn");
  config = Parse(kValid);
  ASSERT_THAT(config, IsOk());
  EXPECT_EQ(config->metrics_listen, "") << "metrics are served only when configured";
  EXPECT_EQ(config->log.format, LogFormat::kText);
  EXPECT_EQ(config->log.level, "info");
  for (const char* ok : {"127.0.0.1:0", "[::1]:9464", "localhost:9464"}) {
    EXPECT_THAT(Parse(absl::StrCat(kValid, "metrics_listen: \"", ok, "\"\n")), IsOk()) << ok;
  }
  EXPECT_THAT(Parse(absl::StrCat(kValid, "metrics_listen: \"metrics.example:9464\"\n")),
              StatusIs(kInvalid, AllOf(HasSubstr("metrics_listen"),
                                       HasSubstr("needs an IP address, not a name"))));
  EXPECT_THAT(Parse(absl::StrCat(kValid, "metrics_listen: \"127.0.0.1\"\n")),
              StatusIs(kInvalid, HasSubstr("has no port")));
  EXPECT_THAT(Parse(absl::StrCat(kValid, "log: {format: xml}\n")),
              StatusIs(kInvalid, AllOf(HasSubstr("log.format"), HasSubstr("text (one line"),
                                       HasSubstr("json"))));
  EXPECT_THAT(Parse(absl::StrCat(kValid, "log: {level: loud}\n")),
              StatusIs(kInvalid, AllOf(HasSubstr("log.level"),
                                       HasSubstr("trace, debug, info, warn or error"))));
  EXPECT_THAT(Parse(absl::StrCat(kValid, "log: {colour: red}\n")),
              StatusIs(kInvalid, HasSubstr("log.colour")));
}

TEST(ConfigTest, TheCheckpointSchemaMustBeWalfeedsOwn) {
  for (const char* schema : {"public", "pg_catalog", "information_schema"}) {
    SCOPED_TRACE(schema);
    EXPECT_THAT(Parse(absl::StrCat(kValid, "checkpoint:\n  schema: ", schema, "\n")),
                StatusIs(kInvalid, AllOf(HasSubstr("checkpoint.schema: "),
                                         HasSubstr("is reserved or shared"))));
  }
  EXPECT_THAT(Parse(absl::StrCat(kValid, "checkpoint:\n  schema: walfeed_ckpt\n")), IsOk());
}

TEST(ConfigTest, StreamsAreRequiredAndNamedUniquely) {
  EXPECT_THAT(Parse("listen: \"127.0.0.1:1\"\nplaintext: true\n"),
              StatusIs(kInvalid, HasSubstr("streams: missing")));
  EXPECT_THAT(Parse("listen: \"127.0.0.1:1\"\nplaintext: true\nstreams: []\n"),
              StatusIs(kInvalid, HasSubstr("streams: expected a list of at least one stream")));
  EXPECT_THAT(Parse("listen: \"127.0.0.1:1\"\nplaintext: true\nstreams: {a: b}\n"),
              StatusIs(kInvalid, HasSubstr("streams: expected a list of at least one stream")));
  const std::string twice = absl::StrCat(kValid, R"(  - name: orders
    conninfo: "host=other"
    slot: walfeed_other
    publications: [p]
)");
  EXPECT_THAT(Parse(twice),
              StatusIs(kInvalid, AllOf(StartsWith("test.yaml:8: "),
                                       HasSubstr("streams[1].name: duplicate stream name "
                                                 "\"orders\" (also streams[0].name)"))));
  const std::string shared = absl::StrCat(kValid, R"(  - name: orders_copy
    conninfo: "host=localhost dbname=app"
    slot: walfeed_orders
    publications: [p]
)");
  EXPECT_THAT(Parse(shared),
              StatusIs(kInvalid, AllOf(StartsWith("test.yaml:8: "),
                                       HasSubstr("streams[1].slot: slot \"walfeed_orders\" is "
                                                 "also the slot of streams[0] on the same "
                                                 "database: each stream needs a slot of its "
                                                 "own"))));
  const std::string elsewhere = absl::StrCat(kValid, R"(  - name: orders_copy
    conninfo: "host=replica dbname=app"
    slot: walfeed_orders
    publications: [p]
)");
  EXPECT_THAT(Parse(elsewhere), IsOk()) << "the same slot name on another database is another slot";
  for (const char* key : {"name", "slot", "publications"}) {
    SCOPED_TRACE(key);
    std::string text(kValid);
    const size_t at = text.find(absl::StrCat(key, ":"));
    text.erase(at, text.find('\n', at) + 1 - at);
    text.insert(at, "tables: []\n");  // Keeps a "- " entry a mapping.
    EXPECT_THAT(Parse(text),
                StatusIs(kInvalid, HasSubstr(absl::StrCat("streams[0].", key, ": missing"))));
  }
}

TEST(ConfigTest, StreamConfigValidateErrorsArePrefixedWithTheStream) {
  EXPECT_THAT(Parse(Valid("slot: walfeed_orders", "slot: Walfeed-Orders")),
              StatusIs(kInvalid, AllOf(StartsWith("test.yaml:4: streams[0]: "),
                                       HasSubstr("slot_name \"Walfeed-Orders\" is invalid"))));
  EXPECT_THAT(Parse(Valid("name: orders", "name: \"bad name\"")),
              StatusIs(kInvalid, AllOf(HasSubstr("streams[0]: "), HasSubstr("is invalid"))));
  EXPECT_THAT(Parse(Valid("publications: [walfeed_orders]", "publications: []")),
              StatusIs(kInvalid,
                       AllOf(HasSubstr("streams[0]: "), HasSubstr("publication_names is empty"))));
  EXPECT_THAT(Parse(Valid("publications: [walfeed_orders]", "publications: [a, a]")),
              StatusIs(kInvalid, AllOf(HasSubstr("streams[0]: "), HasSubstr("twice"))));
  EXPECT_THAT(Parse(WithStreamLines("    tables: [orders]\n")),
              StatusIs(kInvalid, AllOf(HasSubstr("streams[0]: "), HasSubstr("tables: "))));
  EXPECT_THAT(Parse(Valid("conninfo: \"host=localhost dbname=app\"", "conninfo: \"  \"")),
              StatusIs(kInvalid, AllOf(HasSubstr("streams[0]: "), HasSubstr("conninfo is empty"))));
}

TEST(ConfigTest, ExactlyOneConninfoSource) {
  EXPECT_THAT(
      Parse(Valid("    conninfo: \"host=localhost dbname=app\"\n", "")),
      StatusIs(kInvalid, HasSubstr("streams[0]: missing conninfo; set one of conninfo (a libpq "
                                   "connection string), conninfo_file")));
  EXPECT_THAT(Parse(WithStreamLines("    conninfo_env: SOME_VAR\n")),
              StatusIs(kInvalid, HasSubstr("streams[0]: set only one of conninfo, conninfo_file "
                                           "and conninfo_env; found conninfo and conninfo_env")));
  EXPECT_THAT(Parse(absl::StrCat(kValid, "checkpoint: {conninfo: a, conninfo_file: b}\n")),
              StatusIs(kInvalid, HasSubstr("checkpoint: set only one of conninfo, conninfo_file "
                                           "and conninfo_env; found conninfo and conninfo_file")));
  EXPECT_THAT(Parse(Valid("conninfo: \"host=localhost dbname=app\"", "conninfo: {a: b}")),
              StatusIs(kInvalid, HasSubstr("streams[0].conninfo: expected a libpq connection "
                                           "string, found a mapping")));
}

TEST(ConfigTest, ConninfoFileIsReadRelativeToTheConfigAndTrimmed) {
  const TestDir test_dir;
  const std::string& dir = test_dir.path();
  WriteFile(dir + "/orders.conninfo", "host=db password=from-file-secret\n");
  const std::string text =
      Valid("conninfo: \"host=localhost dbname=app\"", "conninfo_file: orders.conninfo");
  absl::StatusOr<ServerConfig> config = ParseConfig(text, dir + "/walfeed.yaml");
  ASSERT_THAT(config, IsOk());
  EXPECT_EQ(config->streams[0].conninfo, "host=db password=from-file-secret");

  // Also through LoadConfig, which passes the file's own path.
  WriteFile(dir + "/walfeed.yaml", text);
  config = LoadConfig(dir + "/walfeed.yaml");
  ASSERT_THAT(config, IsOk());
  EXPECT_EQ(config->streams[0].conninfo, "host=db password=from-file-secret");

  // The checkpoint conninfo may come from a file too.
  WriteFile(dir + "/cp.conninfo", "host=cp\n");
  config = ParseConfig(absl::StrCat(kValid, "checkpoint: {conninfo_file: cp.conninfo}\n"),
                       dir + "/walfeed.yaml");
  ASSERT_THAT(config, IsOk());
  EXPECT_EQ(config->checkpoint.conninfo, "host=cp");

  EXPECT_THAT(ParseConfig(Valid("conninfo: \"host=localhost dbname=app\"",
                                "conninfo_file: missing.conninfo"),
                          dir + "/walfeed.yaml"),
              StatusIs(absl::StatusCode::kNotFound,
                       AllOf(HasSubstr("streams[0].conninfo_file: cannot open"),
                             HasSubstr("missing.conninfo"))));
  WriteFile(dir + "/empty.conninfo", " \n\n");
  EXPECT_THAT(
      ParseConfig(Valid("conninfo: \"host=localhost dbname=app\"", "conninfo_file: empty.conninfo"),
                  dir + "/walfeed.yaml"),
      StatusIs(kInvalid, AllOf(HasSubstr("streams[0].conninfo_file: file"),
                               HasSubstr("empty.conninfo\" is empty"))));
  EXPECT_THAT(ParseConfig(Valid("conninfo: \"host=localhost dbname=app\"", "conninfo_file: \"\""),
                          dir + "/walfeed.yaml"),
              StatusIs(kInvalid, HasSubstr("streams[0].conninfo_file: is empty")));
}

TEST(ConfigTest, ConninfoEnvIsReadAndChecked) {
  const std::string text =
      Valid("conninfo: \"host=localhost dbname=app\"", "conninfo_env: WALFEED_TEST_CONNINFO");
  ASSERT_EQ(setenv("WALFEED_TEST_CONNINFO", " host=env password=from-env-secret ", 1), 0);
  absl::StatusOr<ServerConfig> config = Parse(text);
  ASSERT_THAT(config, IsOk());
  EXPECT_EQ(config->streams[0].conninfo, "host=env password=from-env-secret");

  ASSERT_EQ(setenv("WALFEED_TEST_CONNINFO", "", 1), 0);
  EXPECT_THAT(Parse(text), StatusIs(kInvalid, HasSubstr("streams[0].conninfo_env: environment "
                                                        "variable WALFEED_TEST_CONNINFO is "
                                                        "empty")));
  ASSERT_EQ(unsetenv("WALFEED_TEST_CONNINFO"), 0);
  EXPECT_THAT(Parse(text), StatusIs(kInvalid, HasSubstr("streams[0].conninfo_env: environment "
                                                        "variable WALFEED_TEST_CONNINFO is not "
                                                        "set")));
  EXPECT_THAT(Parse(Valid("conninfo: \"host=localhost dbname=app\"", "conninfo_env: 1BAD-NAME")),
              StatusIs(kInvalid, HasSubstr("streams[0].conninfo_env: \"1BAD-NAME\" is not an "
                                           "environment variable name")));
}

TEST(ConfigTest, SecretsAreNeverEchoed) {
  const TestDir test_dir;
  const std::string& dir = test_dir.path();
  constexpr absl::string_view kSecret = "hunter2-very-secret";
  auto expect_hidden = [&](const absl::StatusOr<ServerConfig>& result) {
    ASSERT_FALSE(result.ok());
    EXPECT_THAT(std::string(result.status().message()), Not(HasSubstr(std::string(kSecret))));
  };
  const std::string inline_conninfo = absl::StrCat("conninfo: \"host=db password=", kSecret, "\"");
  // A later error in the same stream.
  expect_hidden(Parse(
      Valid("conninfo: \"host=localhost dbname=app\"", inline_conninfo).append("    slot: x\n")));
  expect_hidden(Parse(
      absl::StrReplaceAll(kValid, {{"conninfo: \"host=localhost dbname=app\"", inline_conninfo},
                                   {"slot: walfeed_orders", "slot: BAD"}})));
  // The wrong type.
  expect_hidden(Parse(Valid("conninfo: \"host=localhost dbname=app\"",
                            absl::StrCat("conninfo: {password: ", kSecret, "}"))));
  expect_hidden(Parse(
      Valid("conninfo: \"host=localhost dbname=app\"", absl::StrCat("conninfo: [", kSecret, "]"))));
  // Invalid YAML inside the secret (a bad escape) or right after it.
  expect_hidden(Parse(Valid("conninfo: \"host=localhost dbname=app\"",
                            absl::StrCat("conninfo: \"password=\\", kSecret, "\""))));
  expect_hidden(Parse(Valid("conninfo: \"host=localhost dbname=app\"",
                            absl::StrCat("conninfo: \"password=", kSecret))));
  // Together with both other sources.
  expect_hidden(Parse(WithStreamLines(absl::StrCat("    conninfo_file: ", kSecret, "x\n"))));
  // From a file or the environment, followed by a StreamConfig error.
  WriteFile(dir + "/c", absl::StrCat("password=", kSecret, "\n"));
  expect_hidden(ParseConfig(
      absl::StrReplaceAll(kValid, {{"conninfo: \"host=localhost dbname=app\"", "conninfo_file: c"},
                                   {"slot: walfeed_orders", "slot: BAD"}}),
      dir + "/w.yaml"));
  ASSERT_EQ(setenv("WALFEED_SECRET_TEST", absl::StrCat("password=", kSecret).c_str(), 1), 0);
  expect_hidden(Parse(absl::StrReplaceAll(
      kValid, {{"conninfo: \"host=localhost dbname=app\"", "conninfo_env: WALFEED_SECRET_TEST"},
               {"publications: [walfeed_orders]", "publications: []"}})));
  // The checkpoint conninfo.
  expect_hidden(Parse(absl::StrCat(kValid, "checkpoint: {conninfo: {p: ", kSecret, "}}\n")));
}

TEST(ConfigTest, ListenMustBeHostPort) {
  for (const char* good : {"127.0.0.1:50051", "0.0.0.0:1", "[::1]:50051", "[::]:0",
                           "walfeed.internal:443", "localhost:65535"}) {
    SCOPED_TRACE(good);
    EXPECT_THAT(Parse(Valid("\"127.0.0.1:50051\"", absl::StrCat("\"", good, "\""))), IsOk());
  }
  const struct {
    const char* listen;
    const char* why;
  } kBad[] = {
      {"127.0.0.1", "has no port"},
      {":50051", "has no host"},
      {"::1:50051", "an IPv6 address needs brackets, as in [::1]:50051"},
      {"[::1]50051", "expected host:port"},
      {"[::1", "expected host:port"},
      {"[db.internal]:1", "is not an IPv6 address"},
      {"127.0.0.1:65536", "the port must be a number from 0 to 65535"},
      {"127.0.0.1:http", "the port must be a number from 0 to 65535"},
      {"127.0.0.1:", "the port must be a number from 0 to 65535"},
      {"unix:/tmp/walfeed.sock", "the port must be a number"},
      {"my host:1", "the host must be a DNS name or an IP address"},
      {"", "has no port"},
  };
  for (const auto& bad : kBad) {
    SCOPED_TRACE(bad.listen);
    EXPECT_THAT(Parse(Valid("\"127.0.0.1:50051\"", absl::StrCat("\"", bad.listen, "\""))),
                StatusIs(kInvalid, AllOf(StartsWith("test.yaml:1: listen: "), HasSubstr(bad.why))));
  }
  EXPECT_THAT(Parse(Valid("listen: \"127.0.0.1:50051\"\n", "")),
              StatusIs(kInvalid, HasSubstr("listen: missing; host:port to serve on")));
}

TEST(ConfigTest, TlsOrExplicitPlaintext) {
  const std::string kNeither =
      "tls: no tls block: configure tls (cert_file, key_file) or set plaintext: true";
  EXPECT_THAT(Parse(Valid("plaintext: true\n", "")), StatusIs(kInvalid, HasSubstr(kNeither)));
  EXPECT_THAT(Parse(Valid("plaintext: true", "plaintext: false")),
              StatusIs(kInvalid, HasSubstr(kNeither)));
  EXPECT_THAT(Parse(Valid("plaintext: true", "plaintext: true\ntls: {cert_file: a, key_file: b}")),
              StatusIs(kInvalid, HasSubstr("plaintext: true conflicts with the tls block")));
  EXPECT_THAT(Parse(Valid("plaintext: true", "tls: {cert_file: a}")),
              StatusIs(kInvalid, HasSubstr("tls.key_file: missing")));
  EXPECT_THAT(Parse(Valid("plaintext: true", "tls: {key_file: a}")),
              StatusIs(kInvalid, HasSubstr("tls.cert_file: missing")));
  EXPECT_THAT(Parse(Valid("plaintext: true", "tls: {cert_file: a, key_file: \"\"}")),
              StatusIs(kInvalid, HasSubstr("tls.key_file: is empty; expected a file path")));

  absl::StatusOr<ServerConfig> config =
      Parse(Valid("plaintext: true", "tls: {cert_file: a, key_file: b, client_ca_file: c}"));
  ASSERT_THAT(config, IsOk());
  EXPECT_FALSE(config->plaintext);
  EXPECT_TRUE(config->tls->RequiresClientCertificates());
  EXPECT_EQ(config->tls->client_ca_file, "c");
}

TEST(ConfigTest, AuthBlock) {
  absl::StatusOr<ServerConfig> config =
      ParseConfig(absl::StrCat(kValid, "auth: {tokens_file: tokens}\n"), "/etc/w/walfeed.yaml");
  ASSERT_THAT(config, IsOk());
  EXPECT_TRUE(config->auth_enabled());
  EXPECT_EQ(config->tokens_file, "/etc/w/tokens");
  EXPECT_THAT(Parse(absl::StrCat(kValid, "auth: {}\n")),
              StatusIs(kInvalid, HasSubstr("auth.tokens_file: missing; the bearer-tokens file; "
                                           "remove the whole auth block to allow every call")));
  EXPECT_THAT(Parse(absl::StrCat(kValid, "auth: {tokens_file: }\n")),
              StatusIs(kInvalid, HasSubstr("auth.tokens_file: expected a file path")));
}

TEST(ConfigTest, CheckpointBlock) {
  EXPECT_THAT(Parse(absl::StrCat(kValid, "checkpoint: {schema: \"\"}\n")),
              StatusIs(kInvalid, HasSubstr("checkpoint.schema: is empty")));
  absl::StatusOr<ServerConfig> config =
      Parse(absl::StrCat(kValid, "checkpoint: {conninfo: \"\"}\n"));
  ASSERT_THAT(config, IsOk());
  EXPECT_EQ(config->checkpoint.conninfo, "");
  EXPECT_EQ(config->checkpoint.schema, "walfeed");
}

TEST(ConfigTest, DocumentLevelErrors) {
  EXPECT_THAT(Parse(""), StatusIs(kInvalid, HasSubstr("test.yaml: the config is empty")));
  EXPECT_THAT(Parse("# only a comment\n"), StatusIs(kInvalid, HasSubstr("the config is empty")));
  EXPECT_THAT(Parse(absl::StrCat(kValid, "---\nlisten: x\n")),
              StatusIs(kInvalid, HasSubstr("holds 2 YAML documents")));
  EXPECT_THAT(Parse("listen: [a\nplaintext: true\n"),
              StatusIs(kInvalid, AllOf(StartsWith("test.yaml:"), HasSubstr("not valid YAML"))));
  EXPECT_THAT(ParseConfig("listen: x", ""), StatusIs(kInvalid, StartsWith("<config>:")));
  EXPECT_THAT(LoadConfig("/nonexistent/walfeed.yaml"),
              StatusIs(absl::StatusCode::kNotFound, HasSubstr("/nonexistent/walfeed.yaml")));
}

TEST(ConfigTest, ListensBeyondLoopback) {
  EXPECT_FALSE(ListensBeyondLoopback("127.0.0.1:50051"));
  EXPECT_FALSE(ListensBeyondLoopback("127.1.2.3:1"));
  EXPECT_FALSE(ListensBeyondLoopback("localhost:1"));
  EXPECT_FALSE(ListensBeyondLoopback("LocalHost:1"));
  EXPECT_FALSE(ListensBeyondLoopback("[::1]:1"));
  EXPECT_FALSE(ListensBeyondLoopback("[::ffff:127.0.0.1]:1"));
  EXPECT_TRUE(ListensBeyondLoopback("0.0.0.0:50051"));
  EXPECT_TRUE(ListensBeyondLoopback("[::]:50051"));
  EXPECT_TRUE(ListensBeyondLoopback("10.0.0.5:50051"));
  EXPECT_TRUE(ListensBeyondLoopback("[::ffff:10.0.0.1]:1"));
  EXPECT_TRUE(ListensBeyondLoopback("walfeed.internal:50051"));
  EXPECT_TRUE(ListensBeyondLoopback("127.0.0.1.example.com:1"));
  EXPECT_TRUE(ListensBeyondLoopback("not a listen address"));
}

TEST(ConfigTest, ReadTlsFiles) {
  const TestDir test_dir;
  const std::string& dir = test_dir.path();
  constexpr absl::string_view kKeySecret = "MIIEvQIBADANBgkqhkiG9w0BAQEFAASC";
  WriteFile(dir + "/cert.pem", "-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n");
  WriteFile(dir + "/key.pem", absl::StrCat("-----BEGIN PRIVATE KEY-----\n", kKeySecret,
                                           "\n-----END PRIVATE KEY-----\n"));
  WriteFile(dir + "/ca.pem", "-----BEGIN CERTIFICATE-----\nBBBB\n-----END CERTIFICATE-----\n");
  WriteFile(dir + "/not-pem.key", kKeySecret);

  TlsConfig tls{dir + "/cert.pem", dir + "/key.pem", ""};
  absl::StatusOr<TlsFiles> files = ReadTlsFiles(tls);
  ASSERT_THAT(files, IsOk());
  EXPECT_THAT(files->cert_chain, HasSubstr("AAAA"));
  EXPECT_THAT(files->private_key, HasSubstr(std::string(kKeySecret)));
  EXPECT_EQ(files->client_ca, "");

  tls.client_ca_file = dir + "/ca.pem";
  files = ReadTlsFiles(tls);
  ASSERT_THAT(files, IsOk());
  EXPECT_THAT(files->client_ca, HasSubstr("BBBB"));

  tls.client_ca_file = dir + "/missing.pem";
  EXPECT_THAT(ReadTlsFiles(tls), StatusIs(absl::StatusCode::kNotFound,
                                          AllOf(HasSubstr("tls.client_ca_file: cannot open"),
                                                HasSubstr("missing.pem"))));
  tls.client_ca_file = "";
  tls.key_file = dir + "/not-pem.key";
  absl::StatusOr<TlsFiles> not_pem = ReadTlsFiles(tls);
  EXPECT_THAT(not_pem,
              StatusIs(kInvalid, AllOf(HasSubstr("tls.key_file: "), HasSubstr("is not a PEM file"),
                                       Not(HasSubstr(std::string(kKeySecret))))));
  tls.cert_file = dir;  // A directory: reading it fails.
  absl::StatusOr<TlsFiles> directory = ReadTlsFiles(tls);
  ASSERT_FALSE(directory.ok());
  EXPECT_THAT(std::string(directory.status().message()), HasSubstr("tls.cert_file: cannot read"));
}

TEST(ConfigTest, ReadSmallFileRefusesLargeFiles) {
  const TestDir test_dir;
  const std::string& dir = test_dir.path();
  WriteFile(dir + "/big", std::string(100, 'x'));
  EXPECT_THAT(ReadSmallFile(dir + "/big", 100), IsOk());
  EXPECT_THAT(ReadSmallFile(dir + "/big", 99),
              StatusIs(kInvalid, HasSubstr("is larger than 99 bytes")));
}

}  // namespace
}  // namespace walfeed::server
