// The metrics endpoint against a real PostgreSQL and a real server: the
// exposition parses, and the series an operator alerts on move with the
// stream: events, consumer delivery, acks, lag, the consumer holding the
// stream, the slot, gRPC calls. Also the binary's logging options and its
// systemd readiness messages.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/un.h>

#include "tests/server/e2e_harness.h"
#include "tests/testing/metrics_scrape.h"

namespace walfeed::server::e2e {
namespace {

using ::walfeed::testing::MetricsScrape;
using ::walfeed::testing::ScrapeMetrics;

class MetricsE2eTest : public ServerE2eTest {
 protected:
  void StartWithMetrics(const std::string& extra = "") {
    // safe_wal_size is only reported under a max_slot_wal_keep_size.
    ASSERT_THAT(pg_->Exec("ALTER SYSTEM SET max_slot_wal_keep_size = '1GB'"), IsOk());
    ASSERT_THAT(pg_->Exec("SELECT pg_reload_conf()"), IsOk());
    StartServer(Yaml(absl::StrCat("metrics_listen: \"127.0.0.1:0\"\n", extra)));
    ASSERT_GT(server_->metrics_port(), 0);
  }

  MetricsScrape Scrape() {
    absl::StatusOr<MetricsScrape> scrape = ScrapeMetrics(server_->metrics_port());
    EXPECT_THAT(scrape, IsOk());
    return scrape.value_or(MetricsScrape());
  }

  // The value of a series now (NaN when absent, which fails comparisons).
  double Now(const std::string& name, const std::map<std::string, std::string>& labels) {
    return Scrape().Value(name, labels).value_or(NAN);
  }

  // Waits until `name{labels}` satisfies `done`; returns the last value.
  double WaitFor(const std::string& name, const std::map<std::string, std::string>& labels,
                 const std::function<bool(double)>& done, absl::Duration timeout = kDeadline) {
    double value = NAN;
    WaitUntil(
        [&] {
          value = Now(name, labels);
          return !std::isnan(value) && done(value);
        },
        timeout, absl::Milliseconds(50));
    return value;
  }
};

const std::map<std::string, std::string> kOrders = {{"stream", kStream}};
std::map<std::string, std::string> Consumer(const std::string& name) {
  return {{"stream", kStream}, {"consumer", name}};
}
std::map<std::string, std::string> Rpc(const std::string& method, const std::string& code = "") {
  std::map<std::string, std::string> labels = {{"grpc_service", "walfeed.v1.ChangeStream"},
                                               {"grpc_method", method}};
  if (!code.empty()) labels["grpc_code"] = code;
  return labels;
}

TEST_F(MetricsE2eTest, KeySeriesMoveWithTheStream) {
  StartWithMetrics();
  std::unique_ptr<Subscription> sub = Subscribe(Request("billing"));
  InsertTransactions(1, 40);
  ASSERT_TRUE(sub->WaitForEvents(40));
  AckOk(*sub, "billing", sub->events().back().id());

  EXPECT_GE(WaitFor("walfeed_stream_events_total", kOrders, [](double v) { return v >= 40; }),
            40);
  MetricsScrape scrape = Scrape();
  EXPECT_EQ(scrape.TypeOf("walfeed_stream_events_total"), "counter");
  EXPECT_EQ(scrape.TypeOf("walfeed_consumer_lag_seconds"), "gauge");
  EXPECT_EQ(scrape.TypeOf("walfeed_grpc_server_handling_seconds"), "histogram");
  EXPECT_GE(scrape.Value("walfeed_stream_transactions_total", kOrders).value_or(0), 40);
  EXPECT_GT(scrape.Value("walfeed_stream_wal_bytes_total", kOrders).value_or(0), 40 * 20);
  EXPECT_EQ(scrape.Value("walfeed_stream_state", {{"stream", kStream}, {"state", "streaming"}}),
            1);
  EXPECT_EQ(scrape.Value("walfeed_stream_state", {{"stream", kStream}, {"state", "failed"}}), 0);
  EXPECT_EQ(scrape.Value("walfeed_consumer_delivered_events_total", Consumer("billing")), 40);
  EXPECT_EQ(scrape.Value("walfeed_consumer_acked_events_total", Consumer("billing")), 40);
  EXPECT_EQ(scrape.Value("walfeed_consumer_unacked_events", Consumer("billing")), 0);
  EXPECT_EQ(scrape.Value("walfeed_consumer_lag_seconds", Consumer("billing")), 0);
  EXPECT_EQ(scrape.Value("walfeed_consumer_connected", Consumer("billing")), 1);
  EXPECT_EQ(scrape.Value("walfeed_consumer_sessions_started_total", Consumer("billing")), 1);
  EXPECT_GE(scrape.Value("walfeed_stream_delivered_events_total", kOrders).value_or(0), 40);
  EXPECT_EQ(scrape.Value("walfeed_slot_active", {{"slot", kSlot}}), 1);
  EXPECT_EQ(scrape.Value("walfeed_slot_wal_status", {{"slot", kSlot}, {"wal_status", "reserved"}}),
            1);
  EXPECT_GT(scrape.Value("walfeed_slot_safe_wal_size_bytes", {{"slot", kSlot}}).value_or(0), 0);
  EXPECT_GT(scrape.Value("walfeed_stream_server_wal_lsn_bytes", kOrders).value_or(0), 0);
  const double now = absl::ToDoubleSeconds(absl::Now() - absl::UnixEpoch());
  EXPECT_NEAR(scrape.Value("walfeed_stream_last_data_timestamp_seconds", kOrders).value_or(0),
              now, 60);
  EXPECT_NEAR(scrape.Value("walfeed_stream_last_feedback_timestamp_seconds", kOrders).value_or(0),
              now, 60);
  EXPECT_NEAR(scrape.Value("walfeed_slot_read_timestamp_seconds", {{"slot", kSlot}}).value_or(0),
              now, 60);
  EXPECT_GE(scrape.Value("walfeed_grpc_server_handled_total", Rpc("Ack", "OK")).value_or(0), 1);
  EXPECT_GE(scrape.Value("walfeed_grpc_server_started_total", Rpc("Subscribe")).value_or(0), 1);
  EXPECT_GE(scrape.Value("walfeed_grpc_server_handling_seconds_count", Rpc("Ack")).value_or(0), 1);
  EXPECT_GT(scrape.Value("process_resident_memory_bytes").value_or(0), 1 << 20);
  EXPECT_GT(scrape.Value("process_threads").value_or(0), 2);
  EXPECT_EQ(scrape.Samples("walfeed_build_info").size(), 1u);
  for (const auto& sample : scrape.samples()) {
    EXPECT_EQ(sample.labels.count("session_id"), 0u) << sample.name;
    EXPECT_EQ(sample.labels.count("event_id"), 0u) << sample.name;
  }

  // The ack reaches PostgreSQL (confirmed goes past the acked commit).
  const double acked_commit =
      static_cast<double>(ParseId(sub->events().back().id()).commit_lsn.value());
  EXPECT_GE(WaitFor("walfeed_stream_confirmed_lsn_bytes", kOrders,
                    [&](double v) { return v >= acked_commit; }),
            acked_commit);

  // Without acks: delivered grows, unacked and the lag in bytes and seconds
  // appear; the confirmed position stays below what was not acked.
  InsertTransactions(41, 10);
  ASSERT_TRUE(sub->WaitForEvents(50));
  const double unacked_commit =
      static_cast<double>(ParseId(sub->events()[40].id()).commit_lsn.value());
  EXPECT_EQ(WaitFor("walfeed_consumer_unacked_events", Consumer("billing"),
                    [](double v) { return v == 10; }),
            10);
  EXPECT_EQ(Now("walfeed_consumer_delivered_events_total", Consumer("billing")), 50);
  EXPECT_GT(Now("walfeed_consumer_lag_bytes", Consumer("billing")), 0);
  EXPECT_GE(WaitFor("walfeed_consumer_lag_seconds", Consumer("billing"),
                    [](double v) { return v >= 1; }),
            1)
      << "the oldest unacked event keeps ageing";
  EXPECT_LT(Now("walfeed_stream_confirmed_lsn_bytes", kOrders), unacked_commit);
  AckOk(*sub, "billing", sub->events().back().id());
  EXPECT_EQ(WaitFor("walfeed_consumer_lag_seconds", Consumer("billing"),
                    [](double v) { return v == 0; }),
            0);
  EXPECT_GE(WaitFor("walfeed_stream_confirmed_lsn_bytes", kOrders,
                    [&](double v) { return v >= unacked_commit; }),
            unacked_commit);

  // A second Subscribe of the same consumer supersedes the first.
  std::unique_ptr<Subscription> again = Subscribe(Request("billing"));
  EXPECT_EQ(WaitFor("walfeed_consumer_sessions_superseded_total", Consumer("billing"),
                    [](double v) { return v == 1; }),
            1);
  EXPECT_EQ(Now("walfeed_consumer_sessions_started_total", Consumer("billing")), 2);
}

// Metric names in a text (words starting walfeed_, process_ or exposer_),
// histogram suffixes folded into their family.
std::set<std::string> MetricNamesIn(const std::string& text) {
  std::set<std::string> names;
  for (size_t at = 0; at < text.size();) {
    const size_t start = std::min(
        {text.find("walfeed_", at), text.find("process_", at), text.find("exposer_", at)});
    if (start == std::string::npos) break;
    size_t end = start;
    while (end < text.size() && (absl::ascii_isalnum(text[end]) || text[end] == '_')) ++end;
    const bool word_start = start == 0 || !(absl::ascii_isalnum(text[start - 1]) ||
                                            text[start - 1] == '_' || text[start - 1] == '/');
    std::string name = text.substr(start, end - start);
    for (const char* suffix : {"_bucket", "_count", "_sum"}) {
      if (absl::EndsWith(name, suffix) && absl::StrContains(name, "_seconds_")) {
        name.resize(name.size() - strlen(suffix));
      }
    }
    // walfeed_orders (a slot) is no metric; every walfeed_ metric has two
    // underscores or more.
    const bool metric = name.find('_', name.find('_') + 1) != std::string::npos ||
                        !absl::StartsWith(name, "walfeed_");
    if (word_start && metric) names.insert(name);
    at = end;
  }
  return names;
}

TEST_F(MetricsE2eTest, TheGuideTheAlertsAndTheDashboardNameOnlySeriesTheServerServes) {
  StartWithMetrics("defaults:\n  buffer_bytes: 65536\n");
  std::unique_ptr<Subscription> sub = Subscribe(Request("c"));
  InsertTransactions(1, 3);
  ASSERT_TRUE(sub->WaitForEvents(3));
  AckOk(*sub, "c", sub->events().back().id());
  std::set<std::string> served;
  const MetricsScrape scrape = Scrape();
  for (const auto& sample : scrape.samples()) {
    std::string name = sample.name;
    for (const char* suffix : {"_bucket", "_count", "_sum"}) {
      if (absl::EndsWith(name, suffix) &&
          (absl::StrContains(name, "_seconds_") || absl::StrContains(name, "_latencies_"))) {
        name.resize(name.size() - strlen(suffix));
      }
    }
    served.insert(name);
  }
  const std::string root = WALFEED_SOURCE_DIR;
  const std::set<std::string> guide = MetricNamesIn(ReadWholeFile(root + "/docs/operations.md"));
  for (const char* file : {"/deploy/prometheus/walfeed-alerts.yml",
                           "/deploy/grafana/walfeed-dashboard.json", "/docs/operations.md"}) {
    for (const std::string& name : MetricNamesIn(ReadWholeFile(root + file))) {
      EXPECT_TRUE(served.count(name)) << file << " names " << name << ", which is not served";
    }
  }
  for (const std::string& name : served) {
    EXPECT_TRUE(guide.count(name)) << name << " is served but not in docs/operations.md";
  }
}

TEST_F(MetricsE2eTest, TheConsumerHoldingTheStreamIsNamed) {
  StartWithMetrics("defaults:\n  buffer_bytes: 65536\n");
  std::unique_ptr<Subscription> stuck = Subscribe(Request("stuck"));
  std::unique_ptr<Subscription> fast = Subscribe(Request("fast"));
  InsertTransactions(1, 1);
  ASSERT_TRUE(stuck->WaitForEvents(1));
  AckOk(*stuck, "stuck", stuck->events()[0].id());
  stuck.reset();
  std::thread writer([&] { InsertTransactions(2, 2000); });
  size_t acked = 0;
  MetricsScrape scrape;
  // Until fast's acks pass stuck's checkpoint, fast needs the same events, so
  // stuck alone holds nothing yet.
  const bool held = WaitUntil(
      [&] {
        AckArrived(*fast, "fast", &acked);
        scrape = Scrape();
        return scrape.Value("walfeed_consumer_holding_stream", Consumer("stuck")) == 1 &&
               scrape.Value("walfeed_consumer_held_bytes", Consumer("stuck")).value_or(0) > 0;
      },
      kDeadline, absl::Milliseconds(20));
  EXPECT_TRUE(held);
  EXPECT_EQ(scrape.Value("walfeed_consumer_holding_stream", Consumer("fast")), 0);
  EXPECT_EQ(scrape.Value("walfeed_consumer_connected", Consumer("stuck")), 0);
  EXPECT_GT(scrape.Value("walfeed_stream_buffer_bytes", {{"stream", kStream}, {"tier", "memory"}})
                .value_or(0),
            0);
  EXPECT_EQ(scrape.Value("walfeed_stream_buffer_limit_bytes",
                         {{"stream", kStream}, {"tier", "memory"}}),
            65536);
  EXPECT_GE(WaitFor("walfeed_consumer_lag_seconds", Consumer("stuck"),
                    [](double v) { return v >= 1; }),
            1);
  ASSERT_THAT(RemoveConsumer("stuck"), GrpcOk());
  EXPECT_TRUE(WaitUntil(
      [&] { return Scrape().Samples("walfeed_consumer_lag_seconds").size() == 1; }, kDeadline))
      << "a removed consumer's series go away";
  // Let the writer finish: fast acks what remains.
  WaitUntil(
      [&] {
        AckArrived(*fast, "fast", &acked);
        return acked >= 2001;
      },
      absl::Seconds(60), absl::Milliseconds(5));
  writer.join();
}

TEST_F(MetricsE2eTest, UnknownMethodsShareOneLabel) {
  StartWithMetrics();
  grpc::GenericStub stub(channel_);
  for (const char* method : {"/walfeed.v1.ChangeStream/Nope", "/x.Y/Z"}) {
    grpc::ClientContext context;
    context.set_deadline(ChronoDeadline(absl::Seconds(10)));
    grpc::Slice empty("");
    grpc::ByteBuffer request(&empty, 1);
    grpc::ByteBuffer response;
    absl::Notification done;
    grpc::Status status;
    stub.UnaryCall(&context, method, grpc::StubOptions(), &request, &response,
                   [&](grpc::Status s) {
                     status = std::move(s);
                     done.Notify();
                   });
    done.WaitForNotification();
    EXPECT_EQ(status.error_code(), grpc::StatusCode::UNIMPLEMENTED);
  }
  const MetricsScrape scrape = Scrape();
  for (const auto& sample : scrape.samples()) {
    if (sample.labels.count("grpc_method") == 0) continue;
    EXPECT_NE(sample.labels.at("grpc_method"), "Nope");
    EXPECT_NE(sample.labels.at("grpc_method"), "Z");
  }
}

TEST_F(MetricsE2eTest, AMetricsAddressInUseStopsStartWithTheRemedy) {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(bind(fd, reinterpret_cast<sockaddr*>(&address), sizeof(address)), 0);
  ASSERT_EQ(listen(fd, 1), 0);
  socklen_t length = sizeof(address);
  ASSERT_EQ(getsockname(fd, reinterpret_cast<sockaddr*>(&address), &length), 0);
  const int port = ntohs(address.sin_port);
  absl::StatusOr<ServerConfig> config =
      ParseConfig(Yaml(absl::StrCat("metrics_listen: \"127.0.0.1:", port, "\"\n")), "e2e.yaml");
  ASSERT_THAT(config, IsOk());
  absl::StatusOr<std::unique_ptr<WalfeedServer>> server =
      WalfeedServer::Start(*config, replication::pg::MakePgStreamSource);
  close(fd);
  EXPECT_THAT(server.status(),
              StatusIs(absl::StatusCode::kUnavailable,
                       AllOf(HasSubstr(absl::StrCat("metrics_listen 127.0.0.1:", port)),
                             HasSubstr("choose another metrics_listen"))));
}

// A datagram socket standing in for systemd's NOTIFY_SOCKET.
class NotifySocket {
 public:
  explicit NotifySocket(const std::string& path) : path_(path) {
    fd_ = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    sockaddr_un address{};
    address.sun_family = AF_UNIX;
    std::snprintf(address.sun_path, sizeof(address.sun_path), "%s", path.c_str());
    EXPECT_EQ(bind(fd_, reinterpret_cast<sockaddr*>(&address), sizeof(address)), 0)
        << strerror(errno);
  }
  ~NotifySocket() {
    close(fd_);
    unlink(path_.c_str());
  }
  // The next message, or "" after `timeout`.
  std::string Next(absl::Duration timeout = kDeadline) {
    pollfd ready{fd_, POLLIN, 0};
    if (poll(&ready, 1, static_cast<int>(absl::ToInt64Milliseconds(timeout))) <= 0) return "";
    char buffer[512];
    const ssize_t n = recv(fd_, buffer, sizeof(buffer), 0);
    return n > 0 ? std::string(buffer, static_cast<size_t>(n)) : "";
  }

 private:
  std::string path_;
  int fd_ = -1;
};

TEST_F(MetricsE2eTest, TheBinaryLogsJsonLinesServesMetricsAndNotifiesSystemd) {
  const std::string config_path = dir_ + "/walfeed.yaml";
  std::ofstream(config_path) << Yaml();
  NotifySocket notify(dir_ + "/notify.sock");
  ASSERT_EQ(setenv("NOTIFY_SOCKET", (dir_ + "/notify.sock").c_str(), 1), 0);
  ServerProcess process(config_path, dir_ + "/server.log",
                        {"--log-format", "json", "--metrics-listen", "127.0.0.1:0",
                         "--log-level", "debug"});
  unsetenv("NOTIFY_SOCKET");
  EXPECT_EQ(notify.Next(), "READY=1");
  const std::string log_so_far = process.Log();
  // "metrics on http://127.0.0.1:0/metrics (port 41234)"
  const size_t at = log_so_far.find("/metrics (port ");
  ASSERT_NE(at, std::string::npos) << log_so_far;
  int metrics_port = 0;
  ASSERT_TRUE(absl::SimpleAtoi(
      log_so_far.substr(at + 15, log_so_far.find(')', at) - at - 15), &metrics_port));
  EXPECT_TRUE(WaitUntil(
      [&] {
        absl::StatusOr<MetricsScrape> scrape = ScrapeMetrics(metrics_port);
        return scrape.ok() && scrape->Value("walfeed_stream_state",
                                            {{"stream", kStream}, {"state", "streaming"}}) == 1;
      },
      kDeadline));
  process.Signal(SIGTERM);
  EXPECT_EQ(notify.Next(), "STOPPING=1");
  std::optional<int> exit = process.WaitForExit(kDeadline);
  ASSERT_TRUE(exit.has_value());
  EXPECT_TRUE(WIFEXITED(*exit) && WEXITSTATUS(*exit) == 0);

  const std::string log = process.Log();
  int lines = 0;
  for (absl::string_view line : absl::StrSplit(log, '\n', absl::SkipEmpty())) {
    ++lines;
    EXPECT_TRUE(absl::StartsWith(line, "{\"time\":\"") && absl::EndsWith(line, "\"}"))
        << "not a JSON log line: " << line;
    EXPECT_TRUE(absl::StrContains(line, "\"level\":\"") &&
                absl::StrContains(line, "\"logger\":\"") &&
                absl::StrContains(line, "\"message\":\""))
        << line;
  }
  EXPECT_GT(lines, 3) << log;
  EXPECT_TRUE(absl::StrContains(log, "received Terminated: shutting down")) << log;
}

}  // namespace
}  // namespace walfeed::server::e2e
