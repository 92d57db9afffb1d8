// Active/standby against a real PostgreSQL 15 and two walfeed-server processes
// with the same streams: one streams, the other stands by (health NOT_SERVING,
// RPCs UNAVAILABLE naming the active one) and takes over when the active one
// is killed (kill -9), stopped (SIGTERM) or cut off from PostgreSQL. Clients
// reach "the service" through a proxy that follows readiness, as a load
// balancer or a Kubernetes Service would; nothing committed is lost, and
// redelivery stays within what the consumer had not acked.
//
// WALFEED_FAILOVER_KILLS=N sets the number of kill -9 rounds (default 3); the
// test prints the failover time of each (kill to the standby's SERVING).
#include <algorithm>

#include "tests/chaos/tcp_proxy.h"
#include "walfeed/subscriber.h"
#include "tests/server/e2e_harness.h"

namespace walfeed::server {
namespace {

using namespace ::walfeed::server::e2e;  // NOLINT: the harness is this file's vocabulary.

const std::string kHealth = absl::StrCat("walfeed.v1.ChangeStream/", kStream);

// A walfeed-server process and a channel straight to it.
class Instance {
 public:
  Instance(const std::string& config_path, const std::string& log_path)
      : process_(std::make_unique<ServerProcess>(config_path, log_path)) {
    port_ = process_->WaitForPort();
    EXPECT_GT(port_, 0) << process_->Log();
    channel_ = grpc::CreateChannel(absl::StrCat("127.0.0.1:", port_),
                                   grpc::InsecureChannelCredentials());
    stub_ = ChangeStream::NewStub(channel_);
  }

  int port() const { return port_; }
  ChangeStream::Stub* stub() { return stub_.get(); }
  ServerProcess& process() { return *process_; }

  bool Serving() {
    HealthCheckResponse response;
    return HealthCheck(channel_, kHealth, &response, absl::Seconds(2)).ok() &&
           response.status() == HealthCheckResponse::SERVING;
  }

  walfeed::v1::StreamStatus Status() {
    GetStatusRequest request;
    request.set_stream(kStream);
    grpc::ClientContext context;
    context.set_deadline(ChronoDeadline(absl::Seconds(10)));
    GetStatusResponse response;
    EXPECT_THAT(stub_->GetStatus(&context, request, &response), GrpcOk());
    return response.streams_size() == 1 ? response.streams(0) : walfeed::v1::StreamStatus();
  }

 private:
  std::unique_ptr<ServerProcess> process_;
  int port_ = 0;
  std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<ChangeStream::Stub> stub_;
};

// Sends new client connections to whichever instance is SERVING the stream,
// checked every 50 ms: what a load balancer with health checks does.
class ReadinessRouter {
 public:
  explicit ReadinessRouter(chaos::TcpProxy* proxy) : proxy_(proxy) {
    thread_ = std::thread([this] { Run(); });
  }
  ~ReadinessRouter() {
    stop_.Notify();
    thread_.join();
  }
  void Set(std::vector<Instance*> instances) {
    absl::MutexLock lock(&mu_);
    instances_ = std::move(instances);
  }

 private:
  void Run() {
    do {
      std::vector<Instance*> instances;
      {
        absl::MutexLock lock(&mu_);
        instances = instances_;
      }
      for (Instance* instance : instances) {
        if (instance->Serving()) {
          proxy_->SetUpstream(instance->port());
          break;
        }
      }
      // Health has no push: check again every 50 ms until stopped.
    } while (!stop_.WaitForNotificationWithTimeout(absl::Milliseconds(50)));
  }

  chaos::TcpProxy* const proxy_;
  absl::Notification stop_;
  absl::Mutex mu_;
  std::vector<Instance*> instances_ ABSL_GUARDED_BY(mu_);
  std::thread thread_;
};

// A consumer that subscribes through `target`, acks every `ack_every` events,
// and subscribes again whenever its session ends, as a production client does.
class ResubscribingConsumer {
 public:
  ResubscribingConsumer(const std::string& target, size_t ack_every,
                        const std::string& service_config = "")
      : ack_every_(ack_every) {
    grpc::ChannelArguments args;
    if (!service_config.empty()) args.SetServiceConfigJSON(service_config);
    // Find the new instance quickly after a failover.
    args.SetInt(GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS, 100);
    args.SetInt(GRPC_ARG_MIN_RECONNECT_BACKOFF_MS, 100);
    args.SetInt(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS, 500);
    channel_ = grpc::CreateCustomChannel(target, grpc::InsecureChannelCredentials(), args);
    stub_ = ChangeStream::NewStub(channel_);
    thread_ = std::thread([this] { Run(); });
  }
  ~ResubscribingConsumer() { Stop(); }
  void Stop() {
    if (!stop_.HasBeenNotified()) stop_.Notify();
    if (thread_.joinable()) thread_.join();
  }

  // Deliveries of each row id (from INSERTs into orders).
  std::map<int, int> deliveries() const {
    absl::MutexLock lock(&mu_);
    return deliveries_;
  }
  size_t sessions() const {
    absl::MutexLock lock(&mu_);
    return sessions_;
  }
  // Subscribes a standby refused.
  size_t standby_refusals() const {
    absl::MutexLock lock(&mu_);
    return standby_refusals_;
  }
  bool WaitForRows(const std::set<int>& rows, absl::Duration timeout) {
    absl::MutexLock lock(&mu_);
    auto done = [&]() ABSL_NO_THREAD_SAFETY_ANALYSIS {
      for (int row : rows) {
        if (!deliveries_.count(row)) return false;
      }
      return true;
    };
    return mu_.AwaitWithTimeout(absl::Condition(&done), timeout);
  }

 private:
  void Run() {
    SubscribeRequest request = Request("failover");
    request.set_max_unacked_events(200);
    while (!stop_.HasBeenNotified()) {
      Subscription subscription(stub_.get(), request);
      {
        absl::MutexLock lock(&mu_);
        ++sessions_;
      }
      size_t seen = 0;
      size_t acked = 0;
      while (!stop_.HasBeenNotified() && !subscription.WaitForEnd(absl::Milliseconds(20))) {
        const std::vector<ChangeEvent> events = subscription.events();
        {
          absl::MutexLock lock(&mu_);
          for (; seen < events.size(); ++seen) {
            int row = 0;
            if (absl::SimpleAtoi(NewValue(events[seen], "id"), &row)) ++deliveries_[row];
          }
        }
        if (events.size() >= acked + ack_every_ ||
            (events.size() > acked && subscription.last_progress().unacked_events() > 0)) {
          AckRequest ack;
          ack.set_stream(kStream);
          ack.set_consumer("failover");
          ack.set_session_id(subscription.session_id());
          ack.set_event_id(events.back().id());
          grpc::ClientContext context;
          context.set_deadline(ChronoDeadline(absl::Seconds(5)));
          AckResponse response;
          if (stub_->Ack(&context, ack, &response).ok()) acked = events.size();
        }
      }
      // Refused (no instance streams the stream yet): back off a little, as
      // the RetryInfo asks, instead of spinning.
      if (!subscription.has_started()) {
        const std::optional<grpc::Status> status = subscription.status();
        if (status && absl::StrContains(status->error_message(), "standby")) {
          absl::MutexLock lock(&mu_);
          ++standby_refusals_;
        }
        stop_.WaitForNotificationWithTimeout(absl::Milliseconds(100));
      }
    }
  }

  const size_t ack_every_;
  std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<ChangeStream::Stub> stub_;
  absl::Notification stop_;
  mutable absl::Mutex mu_;
  std::map<int, int> deliveries_ ABSL_GUARDED_BY(mu_);
  size_t sessions_ ABSL_GUARDED_BY(mu_) = 0;
  size_t standby_refusals_ ABSL_GUARDED_BY(mu_) = 0;
  std::thread thread_;
};

class FailoverE2eTest : public ServerE2eTest {
 protected:
  // The configuration both instances run, with `conninfo` (default: direct).
  std::string WriteConfig(const std::string& name, const std::string& conninfo = "") {
    const std::string path = absl::StrCat(dir_, "/", name, ".yaml");
    std::ofstream(path) << absl::StrCat(
        "listen: \"127.0.0.1:0\"\nplaintext: true\nshutdown_timeout: 5s\nstreams:\n  - name: ",
        kStream, "\n    conninfo: \"", conninfo.empty() ? pg_->ConnInfo() : conninfo,
        "\"\n    slot: ", kSlot, "\n    publications: [", kSlot,
        "]\n    tables: [public.orders]\n    create_missing: true\n");
    return path;
  }
  std::unique_ptr<Instance> StartInstance(const std::string& config, const std::string& name) {
    return std::make_unique<Instance>(config, absl::StrCat(dir_, "/", name, ".log"));
  }
};

TEST_F(FailoverE2eTest, OneStreamsTheOtherStandsByNamingItAndTakesOverOnSigterm) {
  const std::string config = WriteConfig("walfeed");
  std::unique_ptr<Instance> a = StartInstance(config, "a");
  ASSERT_TRUE(WaitUntil([&] { return a->Serving(); }, kDeadline)) << a->process().Log();
  std::unique_ptr<Instance> b = StartInstance(config, "b");
  ASSERT_TRUE(WaitUntil(
      [&] { return b->Status().state() == walfeed::v1::STREAM_STATE_STANDBY; }, kDeadline))
      << b->process().Log();
  EXPECT_FALSE(b->Serving());
  EXPECT_EQ(b->Status().active(), absl::StrCat("127.0.0.1:", a->port()));
  EXPECT_EQ(a->Status().active(), "");

  // The standby refuses, naming the active instance; the active one serves.
  Subscription refused(b->stub(), Request("c"));
  ASSERT_TRUE(refused.WaitForEnd());
  EXPECT_THAT(*refused.status(),
              AllOf(GrpcIs(grpc::StatusCode::UNAVAILABLE,
                           AllOf(HasSubstr("standby"),
                                 HasSubstr(absl::StrCat("127.0.0.1:", a->port())))),
                    HasReason("STANDBY", true)));
  Subscription sub(a->stub(), Request("c"));
  InsertTransactions(1, 3);
  ASSERT_TRUE(sub.WaitForEvents(3));

  // SIGTERM hands over: the standby streams once the active one let go.
  const absl::Time stop = absl::Now();
  a->process().Signal(SIGTERM);
  ASSERT_TRUE(WaitUntil([&] { return b->Serving(); }, kDeadline)) << b->process().Log();
  const absl::Duration handover = absl::Now() - stop;
  std::cout << "[failover] SIGTERM hand-over: " << absl::FormatDuration(handover) << "\n";
  EXPECT_LT(handover, absl::Seconds(10));
  std::optional<int> exit = a->process().WaitForExit(kDeadline);
  ASSERT_TRUE(exit.has_value());
  EXPECT_TRUE(WIFEXITED(*exit) && WEXITSTATUS(*exit) == 0);
  Subscription after(b->stub(), Request("c"));
  InsertTransactions(4, 2);
  ASSERT_TRUE(after.WaitForEvents(2)) << "events 4 and 5 (3 were never acked: redelivered too)";
}

TEST_F(FailoverE2eTest, KillNineOfTheActiveUnderLoadLosesNothing) {
  int kills = 3;
  if (const char* env = std::getenv("WALFEED_FAILOVER_KILLS")) {
    ASSERT_TRUE(absl::SimpleAtoi(env, &kills)) << env;
  }
  const std::string config = WriteConfig("walfeed");
  std::unique_ptr<Instance> instances[2];
  instances[0] = StartInstance(config, "i0");
  ASSERT_TRUE(WaitUntil([&] { return instances[0]->Serving(); }, kDeadline));
  instances[1] = StartInstance(config, "i1");
  absl::StatusOr<std::unique_ptr<chaos::TcpProxy>> proxy = chaos::TcpProxy::Start();
  ASSERT_THAT(proxy, IsOk());
  ReadinessRouter router(proxy->get());
  router.Set({instances[0].get(), instances[1].get()});
  ResubscribingConsumer consumer(absl::StrCat("127.0.0.1:", (*proxy)->port()), 20);
  Writer writer(pg_.get());

  std::vector<absl::Duration> failovers;
  int active = 0;
  for (int round = 0; round < kills; ++round) {
    // Some traffic through the active instance first.
    const size_t before = consumer.deliveries().size();
    ASSERT_TRUE(WaitUntil([&] { return consumer.deliveries().size() >= before + 100; },
                          absl::Seconds(60)))
        << "round " << round << ": the consumer is not receiving";
    const int standby = 1 - active;
    const absl::Time kill = absl::Now();
    instances[active]->process().Signal(SIGKILL);
    ASSERT_TRUE(WaitUntil([&] { return instances[standby]->Serving(); }, absl::Seconds(60),
                          absl::Milliseconds(20)))
        << "round " << round << ": the standby never took over\n"
        << instances[standby]->process().Log();
    failovers.push_back(absl::Now() - kill);
    (void)instances[active]->process().WaitForExit(kDeadline);
    // The killed one comes back as the new standby.
    router.Set({instances[standby].get()});
    instances[active] =
        StartInstance(config, absl::StrCat("i", active, "-", round + 1));
    router.Set({instances[standby].get(), instances[active].get()});
    active = standby;
  }
  writer.Stop();
  const std::set<int> committed = writer.committed();
  ASSERT_FALSE(committed.empty());
  EXPECT_TRUE(consumer.WaitForRows(committed, absl::Seconds(90)));
  consumer.Stop();
  const std::map<int, int> deliveries = consumer.deliveries();
  size_t lost = 0;
  size_t redelivered = 0;
  for (int row : committed) {
    auto it = deliveries.find(row);
    if (it == deliveries.end()) {
      ++lost;
    } else {
      redelivered += static_cast<size_t>(it->second - 1);
    }
  }
  EXPECT_EQ(lost, 0u);
  // Each failover redelivers at most what was not acked: the window (200)
  // plus what arrived between acks.
  EXPECT_LE(redelivered, static_cast<size_t>(kills) * (200 + 20)) << "redelivered";
  std::vector<absl::Duration> sorted = failovers;
  std::sort(sorted.begin(), sorted.end());
  std::cout << "[failover] " << kills << " kill -9 rounds, " << committed.size()
            << " rows, lost " << lost << ", redelivered " << redelivered << ", sessions "
            << consumer.sessions() << "; kill to standby SERVING: median "
            << absl::FormatDuration(sorted[sorted.size() / 2]) << ", max "
            << absl::FormatDuration(sorted.back()) << ", all:";
  for (absl::Duration d : failovers) std::cout << " " << absl::FormatDuration(d);
  std::cout << "\n";
  EXPECT_LT(sorted.back(), absl::Seconds(10));
}

// Without a load balancer: a gRPC channel over both instances' addresses with
// client-side health checking on the stream's health service (the service
// config of SubscriberOptions::follow_active and `walfeed tail
// --follow-active`) sends calls only to the instance that streams, and
// follows a failover by itself.
TEST_F(FailoverE2eTest, AClientWithHealthCheckingFollowsTheActiveInstance) {
  const std::string config = WriteConfig("walfeed");
  std::unique_ptr<Instance> a = StartInstance(config, "a");
  ASSERT_TRUE(WaitUntil([&] { return a->Serving(); }, kDeadline)) << a->process().Log();
  std::unique_ptr<Instance> b = StartInstance(config, "b");
  ASSERT_TRUE(WaitUntil(
      [&] { return b->Status().state() == walfeed::v1::STREAM_STATE_STANDBY; }, kDeadline));
  // b first: the channel must skip it while it stands by.
  ResubscribingConsumer consumer(
      absl::StrCat("ipv4:127.0.0.1:", b->port(), ",127.0.0.1:", a->port()), 1,
      walfeed::FollowActiveServiceConfig(kStream));
  InsertTransactions(1, 3);
  ASSERT_TRUE(consumer.WaitForRows({1, 2, 3}, kDeadline));
  a->process().Signal(SIGKILL);
  ASSERT_TRUE(WaitUntil([&] { return b->Serving(); }, kDeadline));
  InsertTransactions(4, 3);
  EXPECT_TRUE(consumer.WaitForRows({1, 2, 3, 4, 5, 6}, kDeadline));
  EXPECT_EQ(consumer.standby_refusals(), 0u) << "a call reached the standby";
}

TEST_F(FailoverE2eTest, AnActiveCutOffFromPostgresStopsServingBeforeTheStandbyStarts) {
  absl::StatusOr<std::unique_ptr<chaos::TcpProxy>> db = chaos::TcpProxy::Start();
  ASSERT_THAT(db, IsOk());
  (*db)->SetUpstream(pg_->port());
  std::unique_ptr<Instance> a = StartInstance(
      WriteConfig("a", absl::StrCat(pg_->ConnInfo(), " host=127.0.0.1 port=", (*db)->port())),
      "a");
  ASSERT_TRUE(WaitUntil([&] { return a->Serving(); }, kDeadline)) << a->process().Log();
  std::unique_ptr<Instance> b = StartInstance(WriteConfig("b"), "b");
  ASSERT_TRUE(WaitUntil(
      [&] { return b->Status().state() == walfeed::v1::STREAM_STATE_STANDBY; }, kDeadline));
  Subscription sub(a->stub(), Request("c"));
  InsertTransactions(1, 3);
  ASSERT_TRUE(sub.WaitForEvents(3));

  // Everything between a and PostgreSQL goes silent; nothing is closed.
  const absl::Time cut = absl::Now();
  (*db)->Stall(chaos::TcpProxy::kBoth, cut + absl::Seconds(60));
  std::optional<absl::Duration> a_stopped;
  std::optional<absl::Duration> b_started;
  ASSERT_TRUE(WaitUntil(
      [&] {
        if (!a_stopped && !a->Serving()) a_stopped = absl::Now() - cut;
        if (!b_started && b->Serving()) b_started = absl::Now() - cut;
        return a_stopped && b_started;
      },
      absl::Seconds(45), absl::Milliseconds(20)))
      << "a: " << a->process().Log() << "\nb: " << b->process().Log();
  std::cout << "[failover] cut off: a stopped serving after " << absl::FormatDuration(*a_stopped)
            << ", b streams after " << absl::FormatDuration(*b_started) << "\n";
  EXPECT_LT(*a_stopped, *b_started) << "two instances served the stream at once";
  ASSERT_TRUE(sub.WaitForEnd(absl::Seconds(5))) << "a's session ends when a stands down";
  EXPECT_THAT(*sub.status(), HasReason("STREAM_NOT_READY", true));

  // b delivers what was never acked, and what follows.
  Subscription on_b(b->stub(), Request("c"));
  InsertTransactions(4, 2);
  ASSERT_TRUE(on_b.WaitForEvents(5)) << on_b.event_count();
}

}  // namespace
}  // namespace walfeed::server
