// The end-to-end harness of the server tests: a throwaway PostgreSQL 15, the
// in-process WalfeedServer (or the walfeed-server binary), raw gRPC
// subscriptions that record every frame, and calls for every RPC. Waits are on
// conditions with deadlines.
#ifndef WALFEED_TESTS_SERVER_E2E_HARNESS_H_
#define WALFEED_TESTS_SERVER_E2E_HARNESS_H_

#include <fcntl.h>
#include <google/protobuf/unknown_field_set.h>
#include <google/protobuf/util/message_differencer.h>
#include <grpcpp/generic/generic_stub.h>
#include <grpcpp/grpcpp.h>
#include <libpq-fe.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "gmock/gmock.h"
#include "google/rpc/error_details.pb.h"
#include "google/rpc/status.pb.h"
#include "grpc/health/v1/health.pb.h"
#include "gtest/gtest.h"
#include "replication/event_id.h"
#include "replication/lsn.h"
#include "replication/pg/pg_stream_source.h"
#include "server/config.h"
#include "server/walfeed_server.h"
#include "tests/testing/pg_cluster.h"
#include "tests/testing/status_matchers.h"
#include "tests/testing/wait.h"
#include "walfeed/v1/change_stream.grpc.pb.h"

extern char** environ;  // For posix_spawn of the server binary.

namespace walfeed::server::e2e {


using ::grpc::health::v1::HealthCheckRequest;
using ::grpc::health::v1::HealthCheckResponse;
using ::testing::AllOf;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::Not;
using ::testing::UnorderedElementsAre;
using ::walfeed::replication::EventId;
using ::walfeed::replication::Lsn;
using ::walfeed::testing::IsOk;
using ::walfeed::testing::PgCluster;
using ::walfeed::testing::StatusIs;
using ::walfeed::testing::WaitUntil;
using ::walfeed::v1::AckRequest;
using ::walfeed::v1::AckResponse;
using ::walfeed::v1::ChangeEvent;
using ::walfeed::v1::ChangeStream;
using ::walfeed::v1::ColumnValue;
using ::walfeed::v1::GetStatusRequest;
using ::walfeed::v1::GetStatusResponse;
using ::walfeed::v1::Progress;
using ::walfeed::v1::Started;
using ::walfeed::v1::SubscribeRequest;
using ::walfeed::v1::SubscribeResponse;

constexpr absl::Duration kDeadline = absl::Seconds(30);
constexpr char kStream[] = "orders";
constexpr char kSlot[] = "walfeed_orders";
constexpr uint32_t kInt4 = 23;
constexpr uint32_t kText = 25;
constexpr uint32_t kNumeric = 1700;

// ---------------------------------------------------------------------------
// Matchers and small helpers.

MATCHER_P2(GrpcIs, code, message_matcher,
           "has gRPC code " + ::testing::PrintToString(static_cast<int>(code))) {
  *result_listener << "status is " << static_cast<int>(arg.error_code()) << ": "
                   << arg.error_message();
  return arg.error_code() == code && ::testing::Matches(message_matcher)(arg.error_message());
}

// The status carries google.rpc.ErrorInfo{domain "walfeed.v1", reason} in its
// details, and a RetryInfo exactly when `retryable`.
MATCHER_P2(HasReason, reason, retryable,
           std::string("has reason ") + reason + (retryable ? ", retryable" : ", definite")) {
  google::rpc::Status details;
  if (!details.ParseFromString(arg.error_details())) {
    *result_listener << "error_details do not parse as google.rpc.Status";
    return false;
  }
  std::string found;
  bool has_retry = false;
  for (const google::protobuf::Any& any : details.details()) {
    google::rpc::ErrorInfo info;
    if (any.UnpackTo(&info) && info.domain() == "walfeed.v1") found = info.reason();
    has_retry = has_retry || any.Is<google::rpc::RetryInfo>();
  }
  *result_listener << "reason \"" << found << "\"" << (has_retry ? " with" : " without")
                   << " RetryInfo; code " << details.code() << " (call "
                   << static_cast<int>(arg.error_code()) << ")";
  return found == reason && has_retry == retryable &&
         details.code() == static_cast<int>(arg.error_code());
}

MATCHER(GrpcOk, "is OK") {
  *result_listener << "status is " << static_cast<int>(arg.error_code()) << ": "
                   << arg.error_message();
  return arg.ok();
}

MATCHER_P(EqualsProto, expected, "equals " + expected.ShortDebugString()) {
  std::string diff;
  google::protobuf::util::MessageDifferencer differencer;
  differencer.ReportDifferencesToString(&diff);
  if (differencer.Compare(expected, arg)) return true;
  *result_listener << "actual " << arg.ShortDebugString() << "\ndiff: " << diff;
  return false;
}

std::chrono::system_clock::time_point ChronoDeadline(absl::Duration timeout) {
  return absl::ToChronoTime(absl::Now() + timeout);
}

// The event id's parts, parsed from its text.
EventId ParseId(const std::string& text) {
  absl::StatusOr<EventId> id = EventId::Parse(text);
  EXPECT_THAT(id, IsOk());
  return id.value_or(EventId{});
}

// Resident memory of this process (server and clients), from /proc/self/status.
uint64_t VmRssBytes() {
  std::ifstream in("/proc/self/status");
  std::string line;
  while (std::getline(in, line)) {
    if (absl::StartsWith(line, "VmRSS:")) {
      std::vector<std::string> parts =
          absl::StrSplit(line, absl::ByAnyChar(" \t"), absl::SkipEmpty());
      uint64_t kib = 0;
      if (parts.size() >= 2 && absl::SimpleAtoi(parts[1], &kib)) return kib * 1024;
    }
  }
  ADD_FAILURE() << "no VmRSS in /proc/self/status";
  return 0;
}

std::string ReadWholeFile(const std::string& path) {
  std::ifstream in(path);
  std::stringstream contents;
  contents << in.rdbuf();
  return contents.str();
}

// A fresh directory under the test temp dir.
std::string MakeTempDir() {
  std::string pattern = ::testing::TempDir() + "walfeed_e2e_XXXXXX";
  char* made = mkdtemp(pattern.data());
  EXPECT_NE(made, nullptr);
  return pattern;
}

ColumnValue Col(const std::string& name, uint32_t type_oid, const std::string& type_name, bool key,
                std::optional<std::string> text) {
  ColumnValue column;
  column.set_name(name);
  column.set_type_oid(type_oid);
  column.set_type_name(type_name);
  column.set_key(key);
  if (text) {
    column.set_kind(walfeed::v1::VALUE_KIND_TEXT);
    column.set_text(*text);
  } else {
    column.set_kind(walfeed::v1::VALUE_KIND_NULL);
  }
  return column;
}

// The text of column `name` of the event's new row ("" when absent).
std::string NewValue(const ChangeEvent& event, const std::string& name) {
  for (const ColumnValue& column : event.new_values()) {
    if (column.name() == name) return column.text();
  }
  return "";
}

// The text of column `name` of the event's old row ("" when absent).
std::string OldValue(const ChangeEvent& event, const std::string& name) {
  for (const ColumnValue& column : event.old_values()) {
    if (column.name() == name) return column.text();
  }
  return "";
}

std::vector<std::string> Ids(const std::vector<ChangeEvent>& events) {
  std::vector<std::string> ids;
  for (const ChangeEvent& event : events) ids.push_back(event.id());
  return ids;
}

// ---------------------------------------------------------------------------
// Subscription: one Subscribe call read on its own thread.

class Subscription {
 public:
  Subscription(ChangeStream::Stub* stub, const SubscribeRequest& request,
               const std::string& token = "") {
    if (!token.empty()) context_.AddMetadata("authorization", "Bearer " + token);
    thread_ = std::thread([this, stub, request] { Run(stub, request); });
  }
  ~Subscription() {
    context_.TryCancel();
    thread_.join();
  }
  Subscription(const Subscription&) = delete;
  Subscription& operator=(const Subscription&) = delete;

  // True once `n` events arrived in total.
  bool WaitForEvents(size_t n, absl::Duration timeout = kDeadline) {
    absl::MutexLock lock(&mu_);
    auto done = [this, n]() ABSL_NO_THREAD_SAFETY_ANALYSIS { return events_.size() >= n; };
    return mu_.AwaitWithTimeout(absl::Condition(&done), timeout);
  }
  // True once the `started` frame arrived or the call ended.
  bool WaitForStartedOrEnd(absl::Duration timeout = kDeadline) {
    absl::MutexLock lock(&mu_);
    auto done = [this]() ABSL_NO_THREAD_SAFETY_ANALYSIS {
      return started_.has_value() || status_.has_value();
    };
    return mu_.AwaitWithTimeout(absl::Condition(&done), timeout);
  }
  // True once the call ended (status() is set).
  bool WaitForEnd(absl::Duration timeout = kDeadline) {
    absl::MutexLock lock(&mu_);
    auto done = [this]() ABSL_NO_THREAD_SAFETY_ANALYSIS { return status_.has_value(); };
    return mu_.AwaitWithTimeout(absl::Condition(&done), timeout);
  }
  // True once a progress frame arrived after at least `events` events; that frame
  // goes to `*progress`. Frames are sent in order, so every event the server had
  // for this session when it sent the progress frame arrived before it.
  bool WaitForProgressAfter(size_t events, Progress* progress = nullptr,
                            absl::Duration timeout = kDeadline) {
    absl::MutexLock lock(&mu_);
    auto done = [this, events]() ABSL_NO_THREAD_SAFETY_ANALYSIS {
      return FindProgressLocked(events) != nullptr;
    };
    if (!mu_.AwaitWithTimeout(absl::Condition(&done), timeout)) return false;
    if (progress != nullptr) *progress = *FindProgressLocked(events);
    return true;
  }
  // True once `n` progress frames arrived in total.
  bool WaitForProgressCount(size_t n, absl::Duration timeout = kDeadline) {
    absl::MutexLock lock(&mu_);
    auto done = [this, n]() ABSL_NO_THREAD_SAFETY_ANALYSIS { return progress_.size() >= n; };
    return mu_.AwaitWithTimeout(absl::Condition(&done), timeout);
  }

  std::vector<ChangeEvent> events() const {
    absl::MutexLock lock(&mu_);
    return events_;
  }
  size_t event_count() const {
    absl::MutexLock lock(&mu_);
    return events_.size();
  }
  // The events from index `first` on.
  std::vector<ChangeEvent> events_from(size_t first) const {
    absl::MutexLock lock(&mu_);
    if (first >= events_.size()) return {};
    return std::vector<ChangeEvent>(events_.begin() + static_cast<ptrdiff_t>(first), events_.end());
  }
  // The newest event's id, "" before the first (cheaper than events() on a
  // long subscription).
  std::string last_event_id() const {
    absl::MutexLock lock(&mu_);
    return events_.empty() ? "" : events_.back().id();
  }
  bool has_started() const {
    absl::MutexLock lock(&mu_);
    return started_.has_value();
  }
  // The `started` frame (empty until it arrived).
  Started started() const {
    absl::MutexLock lock(&mu_);
    return started_.value_or(Started());
  }
  std::string session_id() const {
    absl::MutexLock lock(&mu_);
    return started_ ? started_->session_id() : "";
  }
  std::optional<grpc::Status> status() const {
    absl::MutexLock lock(&mu_);
    return status_;
  }
  size_t progress_count() const {
    absl::MutexLock lock(&mu_);
    return progress_.size();
  }
  Progress last_progress() const {
    absl::MutexLock lock(&mu_);
    return progress_.empty() ? Progress() : progress_.back().second;
  }
  // Frames after `started` that were neither events nor progress, and frames
  // before `started`: both violate the protocol.
  int protocol_errors() const {
    absl::MutexLock lock(&mu_);
    return protocol_errors_;
  }

 private:
  void Run(ChangeStream::Stub* stub, const SubscribeRequest& request) {
    std::unique_ptr<grpc::ClientReader<SubscribeResponse>> reader =
        stub->Subscribe(&context_, request);
    SubscribeResponse frame;
    while (reader->Read(&frame)) {
      absl::MutexLock lock(&mu_);
      if (!started_) {
        if (frame.has_started()) {
          started_ = frame.started();
        } else {
          ++protocol_errors_;
        }
        continue;
      }
      if (frame.has_events()) {
        if (frame.events().events().empty()) ++protocol_errors_;
        for (const ChangeEvent& event : frame.events().events()) events_.push_back(event);
      } else if (frame.has_progress()) {
        progress_.emplace_back(events_.size(), frame.progress());
      } else {
        ++protocol_errors_;
      }
    }
    grpc::Status status = reader->Finish();
    absl::MutexLock lock(&mu_);
    status_ = status;
  }

  const Progress* FindProgressLocked(size_t events) const ABSL_SHARED_LOCKS_REQUIRED(mu_) {
    for (const auto& [before, progress] : progress_) {
      if (before >= events) return &progress;
    }
    return nullptr;
  }

  grpc::ClientContext context_;
  std::thread thread_;
  mutable absl::Mutex mu_;
  std::optional<Started> started_ ABSL_GUARDED_BY(mu_);
  std::vector<ChangeEvent> events_ ABSL_GUARDED_BY(mu_);
  // Each progress frame with the number of events received before it.
  std::vector<std::pair<size_t, Progress>> progress_ ABSL_GUARDED_BY(mu_);
  std::optional<grpc::Status> status_ ABSL_GUARDED_BY(mu_);
  int protocol_errors_ ABSL_GUARDED_BY(mu_) = 0;
};

// grpc.health.v1.Health/Check on `channel` through a generic stub (no
// generated client).
grpc::Status HealthCheck(const std::shared_ptr<grpc::Channel>& channel, const std::string& service,
                         HealthCheckResponse* response,
                         absl::Duration timeout = absl::Seconds(10)) {
  grpc::TemplatedGenericStub<HealthCheckRequest, HealthCheckResponse> stub(channel);
  grpc::ClientContext context;
  context.set_deadline(ChronoDeadline(timeout));
  HealthCheckRequest request;
  request.set_service(service);
  absl::Notification done;
  grpc::Status result;
  stub.UnaryCall(&context, "/grpc.health.v1.Health/Check", grpc::StubOptions(), &request,
                 response, [&](grpc::Status status) {
                   result = std::move(status);
                   done.Notify();
                 });
  done.WaitForNotification();  // Bounded by the call's deadline.
  return result;
}

SubscribeRequest Request(const std::string& consumer, const std::string& stream = kStream) {
  SubscribeRequest request;
  request.set_stream(stream);
  request.set_consumer(consumer);
  request.set_progress_interval_ms(200);
  return request;
}

// ---------------------------------------------------------------------------
// A walfeed-server process (the real binary).

class ServerProcess {
 public:
  // Starts the binary with `config_path` and `extra_args`, its output appended
  // to `log_path`.
  ServerProcess(const std::string& config_path, const std::string& log_path,
                std::vector<std::string> extra_args = {})
      : log_path_(log_path) {
    posix_spawn_file_actions_t actions;
    posix_spawn_file_actions_init(&actions);
    posix_spawn_file_actions_addopen(&actions, 1, log_path.c_str(), O_WRONLY | O_CREAT | O_APPEND,
                                     0644);
    posix_spawn_file_actions_adddup2(&actions, 1, 2);
    std::string binary = WALFEED_SERVER_BINARY;
    std::vector<std::string> args = {binary, "--config", config_path};
    args.insert(args.end(), extra_args.begin(), extra_args.end());
    std::vector<char*> argv;
    for (std::string& arg : args) argv.push_back(arg.data());
    argv.push_back(nullptr);
    const int error = posix_spawn(&pid_, binary.c_str(), &actions, nullptr, argv.data(), environ);
    posix_spawn_file_actions_destroy(&actions);
    EXPECT_EQ(error, 0) << "posix_spawn " << binary << ": " << strerror(error);
    if (error != 0) pid_ = -1;
  }
  // Kills the process if a test left it running.
  ~ServerProcess() {
    if (pid_ > 0 && !exit_status_) {
      kill(pid_, SIGKILL);
      int status = 0;
      waitpid(pid_, &status, 0);
    }
  }
  ServerProcess(const ServerProcess&) = delete;
  ServerProcess& operator=(const ServerProcess&) = delete;

  std::string Log() const { return ReadWholeFile(log_path_); }

  // The port it logged it is listening on, or 0 if it did not within `timeout`.
  int WaitForPort(absl::Duration timeout = kDeadline) {
    int port = 0;
    WaitUntil(
        [&] {
          const std::string log = Log();
          // "walfeed-server listening on 127.0.0.1:0 (port 41234, plaintext)"
          const size_t at = log.rfind("(port ");
          if (at == std::string::npos) return false;
          const size_t start = at + 6;
          const size_t end = log.find(',', start);
          return end != std::string::npos &&
                 absl::SimpleAtoi(log.substr(start, end - start), &port) && port > 0;
        },
        timeout);
    return port;
  }

  void Signal(int signal) { ASSERT_EQ(kill(pid_, signal), 0); }

  // The wait status once it exited within `timeout`.
  std::optional<int> WaitForExit(absl::Duration timeout) {
    WaitUntil(
        [&] {
          if (exit_status_) return true;
          int status = 0;
          if (waitpid(pid_, &status, WNOHANG) == pid_) exit_status_ = status;
          return exit_status_.has_value();
        },
        timeout, absl::Milliseconds(10));
    return exit_status_;
  }

 private:
  std::string log_path_;
  pid_t pid_ = -1;
  std::optional<int> exit_status_;
};

// Inserts rows into `orders` in transactions of 1 to 3 rows until stopped,
// remembering every row whose transaction committed.
class Writer {
 public:
  explicit Writer(const PgCluster* pg) : pg_(pg) {
    thread_ = std::thread([this] { Run(); });
  }
  ~Writer() { Stop(); }

  void Stop() {
    stop_ = true;
    if (thread_.joinable()) thread_.join();
  }
  bool WaitForRows(size_t n, absl::Duration timeout = kDeadline) {
    absl::MutexLock lock(&mu_);
    auto done = [this, n]() ABSL_NO_THREAD_SAFETY_ANALYSIS { return committed_.size() >= n; };
    return mu_.AwaitWithTimeout(absl::Condition(&done), timeout);
  }
  std::set<int> committed() const {
    absl::MutexLock lock(&mu_);
    return committed_;
  }
  std::vector<std::string> failures() const {
    absl::MutexLock lock(&mu_);
    return failures_;
  }

 private:
  void Run() {
    int next = 1;
    for (int txn = 0; !stop_; ++txn) {
      const int rows = 1 + txn % 3;
      absl::Status status = pg_->Exec(
          absl::StrCat("INSERT INTO orders SELECT g, 'row-' || g, g, NULL FROM generate_series(",
                       next, ", ", next + rows - 1, ") g"));
      absl::MutexLock lock(&mu_);
      if (status.ok()) {
        for (int id = next; id < next + rows; ++id) committed_.insert(id);
      } else {
        failures_.push_back(status.ToString());
      }
      next += rows;
    }
  }

  const PgCluster* const pg_;
  std::atomic<bool> stop_{false};
  std::thread thread_;
  mutable absl::Mutex mu_;
  std::set<int> committed_ ABSL_GUARDED_BY(mu_);
  std::vector<std::string> failures_ ABSL_GUARDED_BY(mu_);
};

// ---------------------------------------------------------------------------
// The fixture: a cluster with the test tables, and an in-process server.

class ServerE2eTest : public ::testing::Test {
 protected:
  void SetUp() override {
    PgCluster::Options options;
    // Exact commit times to compare events with (pg_xact_commit_timestamp).
    options.settings["track_commit_timestamp"] = "on";
    WALFEED_START_PG_OR_SKIP(pg_, options);
    ASSERT_THAT(pg_->Exec("CREATE TABLE orders (id int PRIMARY KEY, item text NOT NULL, "
                          "qty int, note text);"
                          "CREATE TABLE order_lines (id int PRIMARY KEY, order_id int, sku text);"
                          "CREATE TABLE other (id int PRIMARY KEY, v text);"
                          "CREATE TABLE full_rows (id int PRIMARY KEY, v text, amount numeric);"
                          "ALTER TABLE full_rows REPLICA IDENTITY FULL;"
                          "CREATE TABLE unpublished (id int PRIMARY KEY)"),
                IsOk());
    dir_ = MakeTempDir();
  }

  void TearDown() override {
    if (server_) StopServer();
    if (!dir_.empty()) {
      std::error_code ignored;
      std::filesystem::remove_all(dir_, ignored);
    }
  }

  std::string StreamYaml(const std::string& name, const std::string& slot,
                         const std::string& tables) const {
    return absl::StrCat("  - name: ", name, "\n    conninfo: \"", pg_->ConnInfo(),
                        "\"\n    slot: ", slot, "\n    publications: [", slot, "]\n    tables: [",
                        tables, "]\n    create_missing: true\n");
  }

  // The server config: plaintext on a free loopback port, stream "orders".
  std::string Yaml(const std::string& extra = "",
                   const std::string& shutdown_timeout = "5s") const {
    return absl::StrCat("listen: \"127.0.0.1:0\"\nplaintext: true\nshutdown_timeout: ",
                        shutdown_timeout, "\n", extra, "streams:\n",
                        StreamYaml(kStream, kSlot,
                                   "public.orders, public.order_lines, public.other, "
                                   "public.full_rows"));
  }

  // Commits `n` single-row transactions into orders, ids from `first`.
  void InsertTransactions(int first, int n) {
    ASSERT_THAT(pg_->Exec(absl::StrCat("DO $$ BEGIN FOR i IN ", first, "..", first + n - 1,
                                       " LOOP INSERT INTO orders VALUES (i, 'item', 1, NULL); "
                                       "COMMIT; END LOOP; END $$")),
                IsOk());
  }

  void StartServer(const std::string& yaml) {
    absl::StatusOr<ServerConfig> config = ParseConfig(yaml, "e2e.yaml");
    ASSERT_THAT(config, IsOk()) << yaml;
    absl::StatusOr<std::unique_ptr<WalfeedServer>> server =
        WalfeedServer::Start(*config, replication::pg::MakePgStreamSource);
    ASSERT_THAT(server, IsOk());
    server_ = std::move(*server);
    ASSERT_GT(server_->port(), 0);
    Connect(server_->port());
  }

  void Connect(int port) {
    channel_ =
        grpc::CreateChannel(absl::StrCat("127.0.0.1:", port), grpc::InsecureChannelCredentials());
    stub_ = ChangeStream::NewStub(channel_);
  }

  // Shuts the server down; returns how long that took.
  absl::Duration StopServer() {
    const absl::Time start = absl::Now();
    server_->Shutdown();
    server_.reset();
    return absl::Now() - start;
  }

  // Subscribes, retrying while the stream is not prepared yet (UNAVAILABLE).
  // Returns the live subscription (its `started` frame arrived).
  std::unique_ptr<Subscription> Subscribe(const SubscribeRequest& request,
                                          const std::string& token = "") {
    std::unique_ptr<Subscription> subscription;
    const bool live = WaitUntil(
        [&] {
          subscription = std::make_unique<Subscription>(stub_.get(), request, token);
          if (!subscription->WaitForStartedOrEnd()) return true;  // Reported below.
          std::optional<grpc::Status> status = subscription->status();
          return !(status && status->error_code() == grpc::StatusCode::UNAVAILABLE &&
                   absl::StrContains(status->error_message(), "still connecting"));
        },
        kDeadline, absl::Milliseconds(50));
    EXPECT_TRUE(live) << "the stream never became ready";
    EXPECT_TRUE(subscription->has_started())
        << "Subscribe ended: " << subscription->status().value_or(grpc::Status::OK).error_message();
    return subscription;
  }

  // A Subscribe that must fail: its final status.
  grpc::Status SubscribeError(const SubscribeRequest& request, const std::string& token = "") {
    Subscription subscription(stub_.get(), request, token);
    EXPECT_TRUE(subscription.WaitForEnd());
    EXPECT_FALSE(subscription.has_started());
    return subscription.status().value_or(grpc::Status(grpc::StatusCode::UNKNOWN, "no end"));
  }

  grpc::Status Ack(const std::string& consumer, const std::string& session_id,
                   const std::string& event_id, AckResponse* response = nullptr,
                   const std::string& stream = kStream, const std::string& token = "") {
    AckRequest request;
    request.set_stream(stream);
    request.set_consumer(consumer);
    request.set_session_id(session_id);
    request.set_event_id(event_id);
    grpc::ClientContext context;
    context.set_deadline(ChronoDeadline(kDeadline));
    if (!token.empty()) context.AddMetadata("authorization", "Bearer " + token);
    AckResponse ignored;
    return stub_->Ack(&context, request, response != nullptr ? response : &ignored);
  }

  // Acks the newest event `subscription` received if more than `*acked`
  // arrived; `*acked` becomes their number.
  void AckArrived(const Subscription& subscription, const std::string& consumer, size_t* acked) {
    const std::vector<ChangeEvent> events = subscription.events();
    if (events.size() <= *acked) return;
    AckOk(subscription, consumer, events.back().id());
    *acked = events.size();
  }

  // Acks `event_id` and returns the checkpoint it reports.
  std::string AckOk(const Subscription& subscription, const std::string& consumer,
                    const std::string& event_id) {
    AckResponse response;
    EXPECT_THAT(Ack(consumer, subscription.session_id(), event_id, &response), GrpcOk());
    return response.checkpoint();
  }

  grpc::Status RemoveConsumer(const std::string& consumer,
                              walfeed::v1::RemoveConsumerResponse* response = nullptr,
                              const std::string& stream = kStream,
                              const std::string& token = "") {
    walfeed::v1::RemoveConsumerRequest request;
    request.set_stream(stream);
    request.set_consumer(consumer);
    grpc::ClientContext context;
    context.set_deadline(ChronoDeadline(kDeadline));
    if (!token.empty()) context.AddMetadata("authorization", "Bearer " + token);
    walfeed::v1::RemoveConsumerResponse ignored;
    return stub_->RemoveConsumer(&context, request, response != nullptr ? response : &ignored);
  }

  // ResetConsumer on stream "orders": to `to`, or to the head.
  grpc::Status Reset(const std::string& consumer, const std::string& to, bool to_head,
                     walfeed::v1::ResetConsumerResponse* response = nullptr) {
    walfeed::v1::ResetConsumerRequest request;
    request.set_stream(kStream);
    request.set_consumer(consumer);
    request.set_to(to);
    request.set_to_head(to_head);
    grpc::ClientContext context;
    context.set_deadline(ChronoDeadline(kDeadline));
    walfeed::v1::ResetConsumerResponse ignored;
    return stub_->ResetConsumer(&context, request, response != nullptr ? response : &ignored);
  }

  // The status of stream "orders" now.
  walfeed::v1::StreamStatus StreamStatusNow() {
    GetStatusResponse response;
    EXPECT_THAT(Status(kStream, &response), GrpcOk());
    return response.streams_size() == 1 ? response.streams(0) : walfeed::v1::StreamStatus();
  }

  grpc::Status Status(const std::string& stream, GetStatusResponse* response,
                      const std::string& token = "") {
    GetStatusRequest request;
    request.set_stream(stream);
    grpc::ClientContext context;
    context.set_deadline(ChronoDeadline(kDeadline));
    if (!token.empty()) context.AddMetadata("authorization", "Bearer " + token);
    return stub_->GetStatus(&context, request, response);
  }

  grpc::Status Health(const std::string& service, HealthCheckResponse* response) {
    return HealthCheck(channel_, service, response);
  }

  HealthCheckResponse::ServingStatus HealthOf(const std::string& service) {
    HealthCheckResponse response;
    grpc::Status status = Health(service, &response);
    if (!status.ok()) return HealthCheckResponse::UNKNOWN;
    return response.status();
  }

  std::string Sql(const std::string& query) {
    absl::StatusOr<std::string> value = pg_->QueryValue(query);
    EXPECT_THAT(value, IsOk());
    return value.value_or("");
  }

  std::unique_ptr<PgCluster> pg_;
  std::string dir_;
  std::unique_ptr<WalfeedServer> server_;
  std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<ChangeStream::Stub> stub_;
};

}  // namespace walfeed::server::e2e

#endif  // WALFEED_TESTS_SERVER_E2E_HARNESS_H_
