// End-to-end tests of the client library and the `walfeed` CLI against the
// in-process WalfeedServer and a throwaway PostgreSQL 15. They prove:
//   - Subscriber acks exactly per policy: every N events, on an interval, or
//     only what Ack() names (never beyond what the handler was given);
//   - after the server is shut down and a new one starts on the same database
//     and port, Subscriber reconnects by itself and resumes after the durable
//     checkpoint: every row arrives, nothing acked comes again, and only the
//     handled-but-unacked tail is redelivered (at-least-once);
//   - definite errors end Run with that status instead of retrying: the slot
//     dropped from outside (DATA_LOSS), an unknown stream (NOT_FOUND), a bad
//     consumer name (INVALID_ARGUMENT), a takeover (ABORTED);
//   - PgWatermark: a consumer "killed" after its destination committed and
//     before it acked, then restarted (once resuming from the server's
//     checkpoint, once from the watermark), applies every effect exactly once;
//   - `walfeed tail --count N --format json --ack` prints N parseable JSON lines
//     and acks exactly the last printed id; `walfeed status` shows the slot and
//     consumers; exit codes for unknown streams and usage errors;
//   - TLS (CA file, server name override) and bearer tokens reach Subscribe,
//     Ack and GetStatus from the library and the CLI.
// Tests never sleep: every wait is on a condition with a deadline.
#include <fcntl.h>
#include <google/protobuf/struct.pb.h>
#include <google/protobuf/util/json_util.h>
#include <grpcpp/grpcpp.h>
#include <libpq-fe.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
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
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "replication/pg/pg_stream_source.h"
#include "server/config.h"
#include "server/walfeed_server.h"
#include "tests/testing/pg_cluster.h"
#include "tests/testing/status_matchers.h"
#include "tests/testing/wait.h"
#include "walfeed/event_id.h"
#include "walfeed/pg_watermark.h"
#include "walfeed/subscriber.h"
#include "walfeed/v1/change_stream.grpc.pb.h"

extern char** environ;

namespace walfeed {
namespace {

using ::testing::AllOf;
using ::testing::ElementsAre;
using ::testing::ElementsAreArray;
using ::testing::HasSubstr;
using ::testing::Not;
using ::walfeed::testing::IsOk;
using ::walfeed::testing::PgCluster;
using ::walfeed::testing::StatusIs;
using ::walfeed::testing::WaitUntil;
using ::walfeed::v1::ChangeEvent;

constexpr absl::Duration kDeadline = absl::Seconds(30);
constexpr char kStream[] = "orders";
constexpr char kSlot[] = "walfeed_orders";

// The text of column `name` of the event's new row ("" when absent).
std::string NewValue(const ChangeEvent& event, const std::string& name) {
  for (const auto& column : event.new_values()) {
    if (column.name() == name) return column.text();
  }
  return "";
}

std::string ReadFile(const std::string& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

// ---------------------------------------------------------------------------
// A Subscriber running on its own thread, recording what it saw.

class Running {
 public:
  using Inner = std::function<absl::Status(const Batch&)>;

  explicit Running(SubscriberOptions options, Inner inner = nullptr) : inner_(std::move(inner)) {
    options.on_started = [this](const SessionInfo& session) {
      absl::MutexLock lock(&mu_);
      sessions_.push_back(session);
    };
    options.on_acked = [this](const EventId& id, const std::string& checkpoint) {
      absl::MutexLock lock(&mu_);
      acked_.push_back(id.ToString());
      ack_times_.push_back(absl::Now());
      EXPECT_EQ(checkpoint, id.ToString()) << "the server's checkpoint follows the ack";
    };
    options.on_retry = [this](const absl::Status& why, absl::Duration) {
      absl::MutexLock lock(&mu_);
      retries_.push_back(why);
    };
    subscriber_ = std::make_unique<Subscriber>(std::move(options));
    thread_ = std::thread([this] {
      absl::Status result = subscriber_->Run([this](const Batch& batch) { return Handle(batch); });
      absl::MutexLock lock(&mu_);
      result_ = result;
    });
  }
  ~Running() { Stop(); }
  Running(const Running&) = delete;
  Running& operator=(const Running&) = delete;

  Subscriber& subscriber() { return *subscriber_; }

  // Stop() and wait for Run to return.
  void Stop() {
    if (!thread_.joinable()) return;
    subscriber_->Stop();
    thread_.join();
  }

  bool WaitFor(const std::function<bool()>& condition, absl::Duration timeout = kDeadline) {
    absl::MutexLock lock(&mu_);
    auto ready = [&]() ABSL_NO_THREAD_SAFETY_ANALYSIS { return condition(); };
    return mu_.AwaitWithTimeout(absl::Condition(&ready), timeout);
  }
  // Conditions for WaitFor (called with mu_ held).
  bool WaitForEvents(size_t n) {
    return WaitFor([&]() ABSL_NO_THREAD_SAFETY_ANALYSIS { return events_.size() >= n; });
  }
  bool WaitForSessions(size_t n) {
    return WaitFor([&]() ABSL_NO_THREAD_SAFETY_ANALYSIS { return sessions_.size() >= n; });
  }
  bool WaitForAcked(const std::string& id) {
    return WaitFor([&]() ABSL_NO_THREAD_SAFETY_ANALYSIS {
      return !acked_.empty() && acked_.back() == id;
    });
  }
  bool WaitForRetries(size_t n) {
    return WaitFor([&]() ABSL_NO_THREAD_SAFETY_ANALYSIS { return retries_.size() >= n; });
  }
  // True once Run returned; then result() holds its status.
  bool WaitForEnd(absl::Duration timeout = kDeadline) {
    const bool ended = WaitFor([&]() ABSL_NO_THREAD_SAFETY_ANALYSIS { return result_.has_value(); },
                               timeout);
    if (ended) thread_.join();
    return ended;
  }

  std::vector<ChangeEvent> events() const {
    absl::MutexLock lock(&mu_);
    return events_;
  }
  std::vector<std::string> ids() const {
    absl::MutexLock lock(&mu_);
    std::vector<std::string> ids;
    for (const ChangeEvent& event : events_) ids.push_back(event.id());
    return ids;
  }
  // The session (0-based, in start order) each event arrived in.
  std::vector<size_t> event_sessions() const {
    absl::MutexLock lock(&mu_);
    return event_sessions_;
  }
  std::vector<absl::Time> handled_times() const {
    absl::MutexLock lock(&mu_);
    return handled_times_;
  }
  std::vector<std::string> acked() const {
    absl::MutexLock lock(&mu_);
    return acked_;
  }
  std::vector<absl::Time> ack_times() const {
    absl::MutexLock lock(&mu_);
    return ack_times_;
  }
  std::vector<SessionInfo> sessions() const {
    absl::MutexLock lock(&mu_);
    return sessions_;
  }
  std::vector<absl::Status> retries() const {
    absl::MutexLock lock(&mu_);
    return retries_;
  }
  std::optional<absl::Status> result() const {
    absl::MutexLock lock(&mu_);
    return result_;
  }

 private:
  absl::Status Handle(const Batch& batch) {
    absl::Status status = inner_ ? inner_(batch) : absl::OkStatus();
    absl::MutexLock lock(&mu_);
    for (const ChangeEvent& event : batch) {
      events_.push_back(event);
      event_sessions_.push_back(sessions_.size() - 1);
      handled_times_.push_back(absl::Now());
    }
    return status;
  }

  Inner inner_;
  std::unique_ptr<Subscriber> subscriber_;
  std::thread thread_;

  mutable absl::Mutex mu_;
  std::vector<ChangeEvent> events_ ABSL_GUARDED_BY(mu_);
  std::vector<size_t> event_sessions_ ABSL_GUARDED_BY(mu_);
  std::vector<absl::Time> handled_times_ ABSL_GUARDED_BY(mu_);
  std::vector<std::string> acked_ ABSL_GUARDED_BY(mu_);
  std::vector<absl::Time> ack_times_ ABSL_GUARDED_BY(mu_);
  std::vector<SessionInfo> sessions_ ABSL_GUARDED_BY(mu_);
  std::vector<absl::Status> retries_ ABSL_GUARDED_BY(mu_);
  std::optional<absl::Status> result_ ABSL_GUARDED_BY(mu_);
};

// ---------------------------------------------------------------------------
// A child process (the walfeed binary) with its output in files.

class Child {
 public:
  Child(const std::vector<std::string>& args, const std::string& dir, const std::string& name)
      : out_path_(dir + "/" + name + ".out"), err_path_(dir + "/" + name + ".err") {
    std::vector<std::string> argv_storage = {WALFEED_CLI_BINARY};
    argv_storage.insert(argv_storage.end(), args.begin(), args.end());
    std::vector<char*> argv;
    for (std::string& arg : argv_storage) argv.push_back(arg.data());
    argv.push_back(nullptr);
    posix_spawn_file_actions_t actions;
    posix_spawn_file_actions_init(&actions);
    posix_spawn_file_actions_addopen(&actions, 1, out_path_.c_str(), O_WRONLY | O_CREAT | O_TRUNC,
                                     0644);
    posix_spawn_file_actions_addopen(&actions, 2, err_path_.c_str(), O_WRONLY | O_CREAT | O_TRUNC,
                                     0644);
    const int error = posix_spawn(&pid_, argv[0], &actions, nullptr, argv.data(), environ);
    posix_spawn_file_actions_destroy(&actions);
    EXPECT_EQ(error, 0) << "posix_spawn " << argv[0];
    if (error != 0) pid_ = -1;
  }
  ~Child() {
    if (pid_ > 0 && !exit_code_) {
      kill(pid_, SIGKILL);
      int status = 0;
      waitpid(pid_, &status, 0);
    }
  }
  Child(const Child&) = delete;
  Child& operator=(const Child&) = delete;

  // The exit code, or nullopt if it still runs at `timeout` (or died by a signal).
  std::optional<int> WaitForExit(absl::Duration timeout = kDeadline) {
    WaitUntil(
        [&] {
          if (exit_code_ || pid_ <= 0) return true;
          int status = 0;
          if (waitpid(pid_, &status, WNOHANG) != pid_) return false;
          exit_code_ = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
          return true;
        },
        timeout);
    return exit_code_;
  }
  std::string out() const { return ReadFile(out_path_); }
  std::string err() const { return ReadFile(err_path_); }

 private:
  std::string out_path_;
  std::string err_path_;
  pid_t pid_ = -1;
  std::optional<int> exit_code_;
};

// ---------------------------------------------------------------------------
// The fixture: a cluster with table `orders`, a database `dest` for effects,
// and an in-process server on a port that stays the same across restarts.

class ClientE2eTest : public ::testing::Test {
 protected:
  void SetUp() override {
    WALFEED_START_PG_OR_SKIP(pg_, PgCluster::Options{});
    ASSERT_THAT(pg_->Exec("CREATE TABLE orders (id int PRIMARY KEY, item text, note text)"),
                IsOk());
    ASSERT_THAT(pg_->Exec("CREATE DATABASE dest"), IsOk());
    char pattern[] = "/tmp/walfeed-client-e2e-XXXXXX";
    ASSERT_NE(mkdtemp(pattern), nullptr);
    dir_ = pattern;
    StartServer();
  }
  void TearDown() override {
    if (server_) server_->Shutdown();
    server_.reset();
    std::error_code ignored;
    if (!dir_.empty()) std::filesystem::remove_all(dir_, ignored);
  }

  void StartServer() {
    const std::string yaml = absl::StrCat(
        "listen: \"127.0.0.1:", port_, "\"\n", security_, "shutdown_timeout: 1s\nstreams:\n",
        "  - name: ", kStream, "\n    conninfo: \"", pg_->ConnInfo(), "\"\n    slot: ", kSlot,
        "\n    publications: [", kSlot, "]\n    tables: [public.orders]\n",
        "    create_missing: true\n");
    absl::StatusOr<server::ServerConfig> config = server::ParseConfig(yaml, "client-e2e.yaml");
    ASSERT_THAT(config, IsOk()) << yaml;
    absl::StatusOr<std::unique_ptr<server::WalfeedServer>> server =
        server::WalfeedServer::Start(*config, replication::pg::MakePgStreamSource);
    ASSERT_THAT(server, IsOk());
    server_ = std::move(*server);
    port_ = server_->port();  // Chosen on the first start, kept for restarts.
  }
  void StopServer() {
    server_->Shutdown();
    server_.reset();
  }

  std::string Address() const { return absl::StrCat("127.0.0.1:", port_); }

  SubscriberOptions Options(const std::string& consumer) const {
    SubscriberOptions options;
    options.server = Address();
    options.stream = kStream;
    options.consumer = consumer;
    // Quick retries while the stream connects to PostgreSQL or the server restarts.
    options.backoff.base = absl::Milliseconds(20);
    options.backoff.cap = absl::Milliseconds(300);
    // No progress frames unless a test wants them: they flush acks.
    options.progress_interval = absl::Hours(1);
    return options;
  }

  // Inserts rows [first, last] in one transaction.
  void InsertRows(int first, int last) {
    ASSERT_THAT(pg_->Exec(absl::StrCat("INSERT INTO orders SELECT g, 'item' || g, NULL FROM "
                                       "generate_series(",
                                       first, ", ", last, ") g")),
                IsOk());
  }

  // The consumer's checkpoint as GetStatus reports it ("" if none or unknown).
  std::string ServerCheckpoint(const std::string& consumer) {
    auto channel = grpc::CreateChannel(Address(), grpc::InsecureChannelCredentials());
    auto stub = walfeed::v1::ChangeStream::NewStub(channel);
    grpc::ClientContext context;
    context.set_deadline(absl::ToChronoTime(absl::Now() + kDeadline));
    walfeed::v1::GetStatusRequest request;
    request.set_stream(kStream);
    walfeed::v1::GetStatusResponse response;
    const grpc::Status status = stub->GetStatus(&context, request, &response);
    EXPECT_TRUE(status.ok()) << status.error_message();
    for (const auto& stream : response.streams()) {
      for (const auto& c : stream.consumers()) {
        if (c.name() == consumer) return c.checkpoint();
      }
    }
    return "";
  }

  std::unique_ptr<PgCluster> pg_;
  std::string dir_;
  std::unique_ptr<server::WalfeedServer> server_;
  int port_ = 0;
  // The server config's transport and auth keys.
  std::string security_ = "plaintext: true\n";
};

// ---------------------------------------------------------------------------
// 1. Ack policies.

TEST_F(ClientE2eTest, EveryNEventsAcksAfterEachNthHandledEventAndFlushesOnStop) {
  SubscriberOptions options = Options("every3");
  options.ack = AckPolicy::EveryEvents(3);
  options.max_batch_events = 1;  // One event per batch: acks must wait for the count.
  Running running(options);
  ASSERT_TRUE(running.WaitForSessions(1));
  InsertRows(1, 7);
  ASSERT_TRUE(running.WaitForEvents(7));
  const std::vector<std::string> ids = running.ids();
  ASSERT_TRUE(running.WaitForAcked(ids[5]));
  running.Stop();
  ASSERT_THAT(running.result().value(), IsOk());
  // After the 3rd and 6th event, and the 7th only when stopping.
  EXPECT_THAT(running.acked(), ElementsAre(ids[2], ids[5], ids[6]));
  EXPECT_EQ(running.subscriber().checkpoint(), ids[6]);
  EXPECT_EQ(ServerCheckpoint("every3"), ids[6]);
}

TEST_F(ClientE2eTest, IntervalPolicyAcksNoSoonerThanTheIntervalAndWithoutNewEvents) {
  constexpr absl::Duration kInterval = absl::Milliseconds(300);
  SubscriberOptions options = Options("timed");
  options.ack = AckPolicy::EveryInterval(kInterval);
  options.max_batch_events = 1;
  Running running(options);
  ASSERT_TRUE(running.WaitForSessions(1));
  InsertRows(1, 5);
  ASSERT_TRUE(running.WaitForEvents(5));
  const std::vector<std::string> ids = running.ids();
  // No further event, progress frame or Stop: only the interval can ack this.
  ASSERT_TRUE(running.WaitForAcked(ids[4]));
  const std::vector<std::string> acked = running.acked();
  const std::vector<absl::Time> ack_times = running.ack_times();
  const std::vector<absl::Time> handled = running.handled_times();
  // Each ack came at least the interval after the first event it covers was handled.
  size_t first_uncovered = 0;
  for (size_t a = 0; a < acked.size(); ++a) {
    EXPECT_GE(ack_times[a] - handled[first_uncovered], kInterval) << "ack " << acked[a];
    while (first_uncovered < ids.size() && ids[first_uncovered] != acked[a]) ++first_uncovered;
    ++first_uncovered;
  }
  EXPECT_EQ(ServerCheckpoint("timed"), ids[4]);
}

TEST_F(ClientE2eTest, ManualPolicyAcksOnlyWhatAckNames) {
  SubscriberOptions options = Options("manual");
  options.ack = AckPolicy::Manual();
  auto running = std::make_unique<Running>(options);
  ASSERT_TRUE(running->WaitForSessions(1));
  EXPECT_THAT(running->subscriber().Ack("0/1:0"),
              StatusIs(absl::StatusCode::kFailedPrecondition, HasSubstr("not handed")));
  InsertRows(1, 4);
  ASSERT_TRUE(running->WaitForEvents(4));
  const std::vector<std::string> ids = running->ids();
  EXPECT_THAT(running->subscriber().Ack("not-an-id"),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("not-an-id")));
  EXPECT_THAT(running->subscriber().Ack("FFFFFFFF/0:0"),
              StatusIs(absl::StatusCode::kFailedPrecondition, HasSubstr(ids[3])));
  ASSERT_THAT(running->subscriber().Ack(ids[1]), IsOk());
  ASSERT_TRUE(running->WaitForAcked(ids[1]));
  running->Stop();
  EXPECT_THAT(running->acked(), ElementsAre(ids[1])) << "nothing acked on its own";
  EXPECT_EQ(ServerCheckpoint("manual"), ids[1]);

  // The next session resumes right after what was acked.
  Running next(options);
  ASSERT_TRUE(next.WaitForEvents(2));
  EXPECT_EQ(next.sessions().at(0).checkpoint, ids[1]);
  EXPECT_THAT(next.ids(), ElementsAre(ids[2], ids[3]));
}

// ---------------------------------------------------------------------------
// 2. Reconnect and resume.

TEST_F(ClientE2eTest, ReconnectsToARestartedServerAndResumesAfterTheCheckpoint) {
  SubscriberOptions options = Options("resume");
  options.ack = AckPolicy::EveryEvents(2);  // Leaves the 3rd event handled but unacked.
  options.max_batch_events = 1;
  Running running(options);
  ASSERT_TRUE(running.WaitForSessions(1));
  InsertRows(1, 3);
  ASSERT_TRUE(running.WaitForEvents(3));
  const std::vector<std::string> before = running.ids();
  ASSERT_TRUE(running.WaitForAcked(before[1]));

  StopServer();
  ASSERT_TRUE(running.WaitForRetries(1)) << "the session ended and Run kept going";
  EXPECT_EQ(running.retries().front().code(), absl::StatusCode::kUnavailable)
      << running.retries().front();
  InsertRows(4, 5);  // While no server runs: PostgreSQL keeps it in the slot.
  StartServer();

  ASSERT_TRUE(running.WaitForEvents(6));
  ASSERT_TRUE(running.WaitForSessions(2));
  EXPECT_FALSE(running.result().has_value()) << "Run is still running";
  const std::vector<SessionInfo> sessions = running.sessions();
  ASSERT_EQ(sessions.size(), 2u);
  EXPECT_EQ(sessions[1].checkpoint, before[1]);
  const std::vector<ChangeEvent> events = running.events();
  const std::vector<size_t> in_session = running.event_sessions();
  ASSERT_EQ(events.size(), 6u);
  // Session 0: rows 1-3. Session 1: the unacked row 3 again, then rows 4-5;
  // nothing at or below the acked checkpoint comes twice.
  std::vector<std::string> rows;
  for (const ChangeEvent& event : events) rows.push_back(NewValue(event, "id"));
  EXPECT_THAT(rows, ElementsAre("1", "2", "3", "3", "4", "5"));
  EXPECT_THAT(in_session, ElementsAre(0, 0, 0, 1, 1, 1));
  EXPECT_EQ(events[3].id(), before[2]) << "a redelivered event keeps its id";
  const EventId checkpoint = EventId::Parse(before[1]).value();
  for (size_t i = 3; i < events.size(); ++i) {
    EXPECT_GT(EventId::Parse(events[i].id()).value(), checkpoint) << events[i].id();
  }
  // Acks resume per policy in the new session (e3 and e4 make two), and the odd
  // one out is acked when stopping.
  ASSERT_TRUE(running.WaitForAcked(events[4].id()));
  EXPECT_EQ(ServerCheckpoint("resume"), events[4].id());
  running.Stop();
  EXPECT_THAT(running.result().value(), IsOk());
  EXPECT_THAT(running.acked(), ElementsAre(before[1], events[4].id(), events[5].id()));
  EXPECT_EQ(ServerCheckpoint("resume"), events[5].id());
}

// The compact form: a consumer that asked for it gets row events without
// column metadata and the shapes beside them; resolved against its shapes,
// every event equals what a full-form consumer got, across key changes,
// deletes, a column added, REPLICA IDENTITY FULL and a server restart (the new
// session gets the shapes again).
TEST_F(ClientE2eTest, CompactEventsResolvedAgainstTheirShapesEqualTheFullForm) {
  Running full(Options("full"));
  std::vector<ChangeEvent> resolved;
  size_t compact_events = 0;
  std::set<std::string> compact_ids;  // Events that came in the compact form.
  absl::Mutex resolved_mu;
  SubscriberOptions compact_options = Options("compact");
  compact_options.event_form = walfeed::v1::EVENT_FORM_COMPACT;
  Running compact(compact_options, [&](const Batch& batch) {
    absl::MutexLock lock(&resolved_mu);
    for (int i = 0; i < batch.size(); ++i) {
      ChangeEvent event = batch.event(i);
      const walfeed::v1::RelationShape* shape = batch.shape(i);
      if (shape != nullptr) {
        ++compact_events;
        compact_ids.insert(event.id());
        std::vector<int> keys;
        for (int c = 0; c < shape->columns_size(); ++c) {
          if (shape->columns(c).key()) keys.push_back(c);
        }
        const auto describe = [&](walfeed::v1::ColumnValue* value, int column) {
          const walfeed::v1::ColumnShape& described = shape->columns(column);
          value->set_name(described.name());
          value->set_type_oid(described.type_oid());
          value->set_type_name(described.type_name());
          value->set_key(described.key());
          if (described.has_type_modifier()) value->set_type_modifier(described.type_modifier());
        };
        for (int c = 0; c < event.new_values_size(); ++c) describe(event.mutable_new_values(c), c);
        const bool keys_only = event.old_values_kind() == walfeed::v1::OLD_VALUES_KEY;
        for (int c = 0; c < event.old_values_size(); ++c) {
          describe(event.mutable_old_values(c), keys_only ? keys[static_cast<size_t>(c)] : c);
        }
        event.clear_relation_ref();
      }
      resolved.push_back(std::move(event));
    }
    return absl::OkStatus();
  });
  ASSERT_TRUE(full.WaitForSessions(1));
  ASSERT_TRUE(compact.WaitForSessions(1));
  InsertRows(1, 3);
  ASSERT_THAT(pg_->Exec("UPDATE orders SET id = 100 WHERE id = 1; "
                        "DELETE FROM orders WHERE id = 2; "
                        "ALTER TABLE orders ADD COLUMN extra int DEFAULT 5; "
                        "INSERT INTO orders VALUES (4, 'four', 'x', 6); "
                        "ALTER TABLE orders REPLICA IDENTITY FULL; "
                        "UPDATE orders SET note = 'n' WHERE id = 3"),
              IsOk());
  ASSERT_TRUE(compact.WaitForEvents(7));  // 3 inserts, update, delete, insert, update.
  StopServer();
  StartServer();
  // Subscribed before the insert is read: the server converts row events to
  // the compact form only once a session has asked for it. Events it read
  // before (redelivered ones not acked before the stop) come in the full form,
  // which describes itself.
  ASSERT_TRUE(compact.WaitForSessions(2)) << "reconnected to the new server";
  ASSERT_THAT(pg_->Exec("INSERT INTO orders VALUES (5, 'five', NULL, 7)"), IsOk());
  std::string inserted;  // The insert's id: the last event of both consumers.
  {
    absl::MutexLock lock(&resolved_mu);
    auto arrived = [&]() ABSL_NO_THREAD_SAFETY_ANALYSIS {
      for (const ChangeEvent& event : resolved) {
        if (event.op() == walfeed::v1::OPERATION_INSERT && event.new_values_size() > 0 &&
            event.new_values(0).text() == "5") {
          inserted = event.id();
          return true;
        }
      }
      return false;
    };
    ASSERT_TRUE(resolved_mu.AwaitWithTimeout(absl::Condition(&arrived), kDeadline));
    ASSERT_EQ(compact_ids.count(inserted), 1u) << "the new session gets the shapes again";
  }
  ASSERT_TRUE(full.WaitForAcked(inserted));
  full.Stop();
  compact.Stop();
  ASSERT_THAT(compact.result().value(), IsOk());

  // Redelivery after the restart may differ between the two: compare by id.
  std::map<std::string, std::string> expected;
  for (const ChangeEvent& event : full.events()) expected[event.id()] = event.SerializeAsString();
  absl::MutexLock lock(&resolved_mu);
  EXPECT_GE(compact_events, 8u);
  std::set<std::string> seen;
  for (const ChangeEvent& event : resolved) {
    ASSERT_EQ(expected.count(event.id()), 1u) << event.ShortDebugString();
    EXPECT_EQ(event.SerializeAsString(), expected[event.id()]) << event.ShortDebugString();
    seen.insert(event.id());
  }
  EXPECT_EQ(seen.size(), expected.size());
}

// ---------------------------------------------------------------------------
// 3. Definite errors end Run.

TEST_F(ClientE2eTest, DroppedSlotEndsRunWithDataLoss) {
  Running running(Options("doomed"));
  ASSERT_TRUE(running.WaitForSessions(1));
  // The walsender holds the slot; end it, then drop the slot once it is free.
  ASSERT_TRUE(WaitUntil(
      [&] {
        (void)pg_->Exec(absl::StrCat(
            "SELECT pg_terminate_backend(active_pid) FROM pg_replication_slots WHERE slot_name = '",
            kSlot, "' AND active_pid IS NOT NULL"));
        return pg_->Exec(absl::StrCat("SELECT pg_drop_replication_slot('", kSlot, "')")).ok();
      },
      kDeadline, absl::Milliseconds(5)));
  ASSERT_TRUE(running.WaitForEnd());
  EXPECT_THAT(running.result().value(),
              StatusIs(absl::StatusCode::kDataLoss, AllOf(HasSubstr(kSlot), HasSubstr("doomed"))));
  // The stream failed: `walfeed status` says so, and exits 5 as a health check.
  Child status({"status", "--server", Address()}, dir_, "status");
  EXPECT_EQ(status.WaitForExit(), 5) << status.err();
  EXPECT_THAT(status.out(), AllOf(HasSubstr("FAILED"), HasSubstr("no longer exists")));
}

TEST_F(ClientE2eTest, UnknownStreamAndBadConsumerEndRunAtOnce) {
  SubscriberOptions options = Options("c");
  options.stream = "nope";
  Running unknown(options);
  ASSERT_TRUE(unknown.WaitForEnd());
  EXPECT_THAT(unknown.result().value(),
              StatusIs(absl::StatusCode::kNotFound, HasSubstr("nope")));
  EXPECT_TRUE(unknown.retries().empty());

  Running bad(Options("not a valid name!"));
  ASSERT_TRUE(bad.WaitForEnd());
  EXPECT_THAT(bad.result().value(), StatusIs(absl::StatusCode::kInvalidArgument));
}

TEST_F(ClientE2eTest, TakeoverEndsTheOlderRunWithAbortedAndTheNewerKeepsGoing) {
  Running first(Options("shared"));
  ASSERT_TRUE(first.WaitForSessions(1));
  Running second(Options("shared"));
  ASSERT_TRUE(second.WaitForSessions(1));
  ASSERT_TRUE(first.WaitForEnd());
  EXPECT_THAT(first.result().value(),
              StatusIs(absl::StatusCode::kAborted, HasSubstr("superseded")));
  InsertRows(1, 1);
  ASSERT_TRUE(second.WaitForEvents(1));
  EXPECT_FALSE(second.result().has_value());
}

// ---------------------------------------------------------------------------
// 4. Exactly-once effects with the PostgreSQL watermark.

// The destination: a walfeed::SqlConnection over libpq, as docs/clients.md shows
// it (the library leaves the driver to the caller).
class Dest : public SqlConnection {
 public:
  explicit Dest(const std::string& conninfo) : conn_(PQconnectdb(conninfo.c_str())) {
    EXPECT_EQ(PQstatus(conn_), CONNECTION_OK) << PQerrorMessage(conn_);
  }
  ~Dest() override { PQfinish(conn_); }
  Dest(const Dest&) = delete;
  Dest& operator=(const Dest&) = delete;

  absl::StatusOr<std::vector<Row>> Execute(const std::string& sql,
                                           const std::vector<std::string>& params) override {
    std::vector<const char*> values;
    for (const std::string& p : params) values.push_back(p.c_str());
    PGresult* result = PQexecParams(conn_, sql.c_str(), static_cast<int>(values.size()), nullptr,
                                    values.data(), nullptr, nullptr, 0);
    const ExecStatusType status = PQresultStatus(result);
    absl::StatusOr<std::vector<Row>> out;
    if (status == PGRES_COMMAND_OK || status == PGRES_TUPLES_OK) {
      std::vector<Row> rows(PQntuples(result));
      for (int r = 0; r < PQntuples(result); ++r) {
        for (int c = 0; c < PQnfields(result); ++c) {
          rows[r].push_back(PQgetisnull(result, r, c)
                                ? std::nullopt
                                : std::optional<std::string>(PQgetvalue(result, r, c)));
        }
      }
      out = std::move(rows);
    } else {
      const char* field = result ? PQresultErrorField(result, PG_DIAG_SQLSTATE) : nullptr;
      const std::string state = field ? field : "";
      const std::string message = PQerrorMessage(conn_);
      absl::StatusCode code = absl::StatusCode::kInternal;
      if (PQstatus(conn_) == CONNECTION_BAD || absl::StartsWith(state, "08") ||
          absl::StartsWith(state, "57P")) {
        code = absl::StatusCode::kUnavailable;
      } else if (absl::StartsWith(state, "40")) {
        code = absl::StatusCode::kAborted;
      } else if (absl::StartsWith(state, "42") || absl::StartsWith(state, "3F")) {
        code = absl::StatusCode::kInvalidArgument;
      }
      out = absl::Status(code, absl::StrCat("SQLSTATE ", state, ": ", message));
    }
    PQclear(result);
    return out;
  }
  bool InTransaction() override { return PQtransactionStatus(conn_) == PQTRANS_INTRANS; }

  absl::Status Exec(const std::string& sql) { return Execute(sql, {}).status(); }

 private:
  PGconn* conn_;
};

// Records the event in dest.applied (no unique key: a second application of the
// same event would show as a second row).
absl::Status RecordEffect(SqlConnection& conn, const ChangeEvent& event) {
  return conn
      .Execute("INSERT INTO applied (event_id, row_id) VALUES ($1, $2)",
               {event.id(), NewValue(event, "id")})
      .status();
}

TEST_F(ClientE2eTest, WatermarkAppliesEachEffectExactlyOnceAcrossAKillBeforeTheAck) {
  ASSERT_THAT(pg_->Exec("CREATE TABLE applied (event_id text NOT NULL, row_id int NOT NULL)",
                        "dest"),
              IsOk());
  Dest dest(pg_->ConnInfo("dest"));
  absl::StatusOr<PgWatermark> opened =
      PgWatermark::Open(dest, {"app.walfeed_watermark", kStream, "wm"});
  EXPECT_THAT(opened, StatusIs(absl::StatusCode::kInvalidArgument)) << "schema app is missing";
  ASSERT_THAT(dest.Exec("CREATE SCHEMA app"), IsOk());
  opened = PgWatermark::Open(dest, {"app.walfeed_watermark", kStream, "wm"});
  ASSERT_THAT(opened, IsOk());
  ASSERT_THAT(PgWatermark::Open(dest, {"app.walfeed_watermark", kStream, "wm"}), IsOk())
      << "opening again is harmless";
  const PgWatermark watermark = *opened;
  EXPECT_EQ(watermark.Resume(dest).value(), "");

  int skipped = 0;
  // The consumer's handler: effects and watermark in one destination
  // transaction; OK (and so the ack, with an automatic policy) only after COMMIT.
  auto apply = [&](const Batch& batch) -> absl::Status {
    if (absl::Status begun = dest.Exec("BEGIN"); !begun.ok()) return begun;
    absl::StatusOr<PgWatermark::Result> result = watermark.Apply(dest, batch, RecordEffect);
    if (!result.ok()) {
      (void)dest.Exec("ROLLBACK");
      return result.status();
    }
    skipped += result->skipped;
    return dest.Exec("COMMIT");
  };
  auto applied_rows = [&] {
    return pg_->QueryValue("SELECT count(*) FROM applied", "dest").value_or("?");
  };

  // Apply outside a transaction is refused: effects and id must commit together.
  {
    walfeed::v1::EventBatch one;
    ChangeEvent* event = one.add_events();
    event->set_id("0/1:0");
    EXPECT_THAT(watermark.Apply(dest, Batch::Create(one).value(), RecordEffect),
                StatusIs(absl::StatusCode::kFailedPrecondition, HasSubstr("BEGIN")));
  }

  // A: applies and commits, and is "killed" before any ack (manual, never acks).
  SubscriberOptions options = Options("wm");
  options.ack = AckPolicy::Manual();
  {
    Running a(options, apply);
    ASSERT_TRUE(a.WaitForSessions(1));
    InsertRows(1, 3);
    InsertRows(4, 5);
    ASSERT_TRUE(a.WaitForEvents(5));
    EXPECT_EQ(applied_rows(), "5");
    a.Stop();
    EXPECT_TRUE(a.acked().empty());
  }
  EXPECT_EQ(ServerCheckpoint("wm"), "") << "nothing was acked";
  const std::string after_a = watermark.Resume(dest).value();
  EXPECT_FALSE(after_a.empty());

  // B resumes from the server's checkpoint (none): all five come again and are
  // skipped; new rows are applied and acked after their commit.
  options.ack = AckPolicy::EveryEvents(1);
  {
    Running b(options, apply);
    ASSERT_TRUE(b.WaitForEvents(5));
    EXPECT_EQ(b.sessions().at(0).checkpoint, "");
    InsertRows(6, 7);
    ASSERT_TRUE(b.WaitForEvents(7));
    ASSERT_TRUE(b.WaitForAcked(b.ids().back()));
    EXPECT_EQ(skipped, 5);
    EXPECT_EQ(b.ids()[4], after_a);
  }
  const std::string after_b = watermark.Resume(dest).value();
  EXPECT_EQ(ServerCheckpoint("wm"), after_b);

  // C resumes from the watermark: nothing old comes again.
  options.start_after = watermark.Resume(dest).value();
  {
    Running c(options, apply);
    ASSERT_TRUE(c.WaitForSessions(1));
    EXPECT_EQ(c.sessions()[0].start_after, after_b);
    InsertRows(8, 8);
    ASSERT_TRUE(c.WaitForEvents(1));
    EXPECT_EQ(NewValue(c.events()[0], "id"), "8");
    ASSERT_TRUE(c.WaitForAcked(c.ids()[0]));
  }
  EXPECT_EQ(skipped, 5);
  EXPECT_EQ(applied_rows(), "8");
  EXPECT_EQ(pg_->QueryValue("SELECT count(DISTINCT event_id) FROM applied", "dest").value_or(""),
            "8");
  EXPECT_EQ(pg_->QueryValue("SELECT string_agg(row_id::text, ',' ORDER BY row_id) FROM applied",
                            "dest")
                .value_or(""),
            "1,2,3,4,5,6,7,8");
  EXPECT_EQ(pg_->QueryValue("SELECT last_id || ' ' || commit_lsn || ' ' || idx FROM "
                            "app.walfeed_watermark WHERE consumer = 'wm'",
                            "dest")
                .value_or(""),
            absl::StrCat(watermark.Resume(dest).value(), " ",
                         EventId::Parse(watermark.Resume(dest).value())->CommitLsnText(), " ",
                         EventId::Parse(watermark.Resume(dest).value())->index()));
}

// ---------------------------------------------------------------------------
// 5. The walfeed CLI.

TEST_F(ClientE2eTest, TailPrintsJsonLinesAndAcksExactlyWhatItPrinted) {
  Child tail({"tail", "--server", Address(), "--stream", kStream, "--consumer", "cli", "--count",
              "3", "--format", "json", "--ack", "--timeout", "60"},
             dir_, "tail");
  ASSERT_TRUE(WaitUntil([&] { return absl::StrContains(tail.err(), "subscribed to orders"); },
                        kDeadline))
      << tail.err();
  ASSERT_THAT(pg_->Exec("INSERT INTO orders VALUES (1, 'a', NULL), "
                        "(2, 'quote \" backslash \\ tab \t nl ' || chr(10) || ' caf\xC3\xA9', 'n'), "
                        "(3, 'c', ''), (4, 'd', 'not printed')"),
              IsOk());
  ASSERT_EQ(tail.WaitForExit(), 0) << tail.err();
  const std::vector<std::string> lines =
      absl::StrSplit(tail.out(), '\n', absl::SkipEmpty());
  ASSERT_EQ(lines.size(), 3u) << tail.out();
  std::vector<std::string> ids;
  for (const std::string& line : lines) {
    google::protobuf::Struct json;
    ASSERT_TRUE(google::protobuf::util::JsonStringToMessage(line, &json).ok()) << line;
    const auto& f = json.fields();
    ids.push_back(f.at("id").string_value());
    EXPECT_EQ(f.at("op").string_value(), "insert");
    EXPECT_EQ(f.at("schema").string_value(), "public");
    EXPECT_EQ(f.at("table").string_value(), "orders");
    const EventId id = EventId::Parse(ids.back()).value();
    EXPECT_EQ(f.at("commit_lsn").string_value(), id.CommitLsnText());
    EXPECT_EQ(f.at("index").number_value(), id.index());
  }
  auto column = [&](size_t line, int i) {
    google::protobuf::Struct json;
    EXPECT_TRUE(google::protobuf::util::JsonStringToMessage(lines[line], &json).ok());
    return json.fields().at("columns").list_value().values(i).struct_value();
  };
  EXPECT_EQ(column(0, 0).fields().at("value").string_value(), "1");
  EXPECT_EQ(column(0, 0).fields().at("type").string_value(), "int4");
  EXPECT_TRUE(column(0, 0).fields().at("key").bool_value());
  EXPECT_EQ(column(0, 2).fields().at("kind").string_value(), "null");
  EXPECT_EQ(column(1, 1).fields().at("value").string_value(),
            "quote \" backslash \\ tab \t nl \n caf\xC3\xA9");
  EXPECT_EQ(column(2, 2).fields().at("kind").string_value(), "text");
  EXPECT_EQ(column(2, 2).fields().at("value").string_value(), "");
  // Acked exactly the third (last printed) event, not the fourth of the batch.
  EXPECT_EQ(ServerCheckpoint("cli"), ids[2]);

  // Text format, continuing after the checkpoint.
  Child text({"tail", "--server", Address(), "--stream", kStream, "--consumer", "cli", "--count",
              "1", "--format", "text", "--timeout", "60"},
             dir_, "text");
  ASSERT_EQ(text.WaitForExit(), 0) << text.err();
  EXPECT_THAT(text.out(), HasSubstr(" INSERT public.orders id='4' item='d' note='not printed'\n"));
}

TEST_F(ClientE2eTest, StatusShowsTheSlotAndConsumersAndExitCodesAreDocumented) {
  SubscriberOptions options = Options("reporter");
  Running running(options);
  ASSERT_TRUE(running.WaitForSessions(1));
  InsertRows(1, 1);
  ASSERT_TRUE(running.WaitForEvents(1));
  ASSERT_TRUE(running.WaitForAcked(running.ids()[0]));

  Child status({"status", "--server", Address()}, dir_, "status");
  ASSERT_EQ(status.WaitForExit(), 0) << status.err();
  const std::string out = status.out();
  EXPECT_THAT(out, HasSubstr(kSlot));
  EXPECT_THAT(out, HasSubstr("streaming"));
  EXPECT_THAT(out, HasSubstr("WAL_STATUS"));
  EXPECT_THAT(out, HasSubstr("reporter"));
  EXPECT_THAT(out, HasSubstr(running.ids()[0]));

  Child unknown({"status", "--server", Address(), "--stream", "nope"}, dir_, "unknown");
  EXPECT_EQ(unknown.WaitForExit(), 4) << unknown.err();
  Child unknown_tail({"tail", "--server", Address(), "--stream", "nope", "--consumer", "c"}, dir_,
                     "unknown_tail");
  EXPECT_EQ(unknown_tail.WaitForExit(), 4) << unknown_tail.err();
  EXPECT_THAT(unknown_tail.err(), HasSubstr("nope"));
  Child usage({"tail", "--stream", kStream, "--ack"}, dir_, "usage");
  EXPECT_EQ(usage.WaitForExit(), 2);
  EXPECT_THAT(usage.err(), HasSubstr("--ack needs --consumer"));
  EXPECT_THAT(usage.err(), HasSubstr("see `walfeed tail --help`"));
  EXPECT_THAT(usage.err(), Not(HasSubstr("JSON fields"))) << "one line, not the whole help";
  // Nothing listens there: the tail never subscribes, and says so with exit 1.
  Child nowhere({"tail", "--server", "127.0.0.1:1", "--stream", kStream, "--timeout", "2"}, dir_,
                "nowhere");
  EXPECT_EQ(nowhere.WaitForExit(), 1) << nowhere.err();
  EXPECT_THAT(nowhere.err(), HasSubstr("without subscribing"));
}

TEST_F(ClientE2eTest, TailWithoutAConsumerIsEphemeralAndResetConsumerSkipsEvents) {
  // A durable consumer receives two rows and acks the first.
  SubscriberOptions options = Options("stuck");
  options.ack = AckPolicy::Manual();
  Running running(options);
  ASSERT_TRUE(running.WaitForSessions(1));
  InsertRows(1, 2);
  ASSERT_TRUE(running.WaitForEvents(2));

  // The ephemeral tail sees only what comes after it subscribed, and is no consumer.
  Child tail({"tail", "--server", Address(), "--stream", kStream, "--count", "1", "--format",
              "text", "--timeout", "60"},
             dir_, "ephemeral");
  ASSERT_TRUE(WaitUntil([&] { return absl::StrContains(tail.err(), "ephemeral"); }, kDeadline))
      << tail.err();
  InsertRows(3, 3);
  ASSERT_EQ(tail.WaitForExit(), 0) << tail.err();
  EXPECT_THAT(tail.out(), HasSubstr("id='3'"));
  EXPECT_THAT(tail.out(), Not(HasSubstr("id='1'")));
  Child status({"status", "--server", Address(), "--format", "json"}, dir_, "status");
  ASSERT_EQ(status.WaitForExit(), 0) << status.err();
  walfeed::v1::GetStatusResponse reported;
  ASSERT_TRUE(google::protobuf::util::JsonStringToMessage(status.out(), &reported).ok())
      << status.out();
  ASSERT_EQ(reported.streams_size(), 1);
  ASSERT_EQ(reported.streams(0).consumers_size(), 1) << "the ephemeral tail is no consumer";
  EXPECT_EQ(reported.streams(0).consumers(0).name(), "stuck");

  // reset-consumer moves "stuck" past its second event; its session ends.
  ASSERT_TRUE(running.WaitForEvents(3));
  const std::string second = running.ids()[1];
  Child refused({"reset-consumer", "--server", Address(), "--stream", kStream, "--consumer",
                 "stuck", "--to", second},
                dir_, "refused");
  EXPECT_EQ(refused.WaitForExit(), 2) << "needs --yes";
  Child reset({"reset-consumer", "--server", Address(), "--stream", kStream, "--consumer",
               "stuck", "--to", second, "--yes"},
              dir_, "reset");
  ASSERT_EQ(reset.WaitForExit(), 0) << reset.err();
  EXPECT_THAT(reset.out(), HasSubstr(absl::StrCat("from none to ", second)));
  EXPECT_EQ(ServerCheckpoint("stuck"), second);
}

// ---------------------------------------------------------------------------
// 6. TLS and bearer tokens, through the library and the CLI.

TEST_F(ClientE2eTest, TlsAndBearerTokensWorkForSubscribeAckAndStatus) {
  // A CA and a server certificate for "localhost", made for this run.
  const std::string script = absl::StrCat(
      "set -e; cd '", dir_, "'; ",
      "openssl req -x509 -newkey rsa:2048 -nodes -days 2 -subj /CN=test-ca -keyout ca.key "
      "-out ca.crt 2>/dev/null; ",
      "openssl req -newkey rsa:2048 -nodes -subj /CN=localhost -keyout server.key -out "
      "server.csr 2>/dev/null; ",
      "printf 'subjectAltName=DNS:localhost\\n' > server.ext; ",
      "openssl x509 -req -in server.csr -CA ca.crt -CAkey ca.key -CAcreateserial -days 2 "
      "-extfile server.ext -out server.crt 2>/dev/null");
  ASSERT_EQ(std::system(absl::StrCat("bash -c \"", script, "\"").c_str()), 0) << script;
  constexpr char kToken[] = "client-e2e-token-0000000001";
  {
    std::ofstream tokens(dir_ + "/tokens");
    tokens << kToken << " subscribe,status orders\n";
    std::ofstream token_file(dir_ + "/token");
    token_file << kToken << "\n";
  }
  StopServer();
  security_ = absl::StrCat("tls:\n  cert_file: ", dir_, "/server.crt\n  key_file: ", dir_,
                           "/server.key\nauth:\n  tokens_file: ", dir_, "/tokens\n");
  StartServer();

  SubscriberOptions options = Options("secure");
  options.tls.enabled = true;
  options.tls.root_certs_file = dir_ + "/ca.crt";
  options.tls.server_name_override = "localhost";
  options.bearer_token = kToken;
  {
    Running running(options);
    ASSERT_TRUE(running.WaitForSessions(1));
    InsertRows(1, 1);
    ASSERT_TRUE(running.WaitForEvents(1));
    ASSERT_TRUE(running.WaitForAcked(running.ids()[0])) << "the token goes with Ack too";
  }
  SubscriberOptions no_token = options;
  no_token.bearer_token.clear();
  Running refused(no_token);
  ASSERT_TRUE(refused.WaitForEnd());
  EXPECT_THAT(refused.result().value(), StatusIs(absl::StatusCode::kUnauthenticated));

  const std::vector<std::string> tls = {"--server", Address(), "--tls-ca", dir_ + "/ca.crt",
                                        "--tls-server-name", "localhost"};
  std::vector<std::string> args = {"status"};
  args.insert(args.end(), tls.begin(), tls.end());
  args.insert(args.end(), {"--token-file", dir_ + "/token"});
  Child status(args, dir_, "secure-status");
  ASSERT_EQ(status.WaitForExit(), 0) << status.err();
  EXPECT_THAT(status.out(), AllOf(HasSubstr(kSlot), HasSubstr("secure")));
  args.resize(args.size() - 2);  // Without the token.
  Child anonymous(args, dir_, "anonymous-status");
  EXPECT_EQ(anonymous.WaitForExit(), 4) << anonymous.err();
  EXPECT_THAT(anonymous.err(), HasSubstr("--token-file FILE, else $WALFEED_TOKEN"))
      << "says how the CLI sends a token";
}

}  // namespace
}  // namespace walfeed
