// Subscriber's state machine against a scripted in-process ChangeStream server
// (no database): option checks, Stop before and during retries, capped backoff,
// which statuses end Run and which are retried, an Ack refused with ABORTED (a
// takeover ends Run; a session that merely ended is reconnected), start_after
// across reconnects, handler errors, and protocol violations. Also Batch::Create
// and IsRetryable.
#include "walfeed/subscriber.h"

#include <arpa/inet.h>
#include <grpcpp/grpcpp.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "gmock/gmock.h"
#include "google/rpc/error_details.pb.h"
#include "google/rpc/status.pb.h"
#include "gtest/gtest.h"
#include "tests/testing/status_matchers.h"
#include "tests/testing/wait.h"
#include "walfeed/v1/change_stream.grpc.pb.h"

namespace walfeed {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::walfeed::testing::IsOk;
using ::walfeed::testing::StatusIs;
using ::walfeed::v1::AckRequest;
using ::walfeed::v1::AckResponse;
using ::walfeed::v1::SubscribeRequest;
using ::walfeed::v1::SubscribeResponse;

constexpr absl::Duration kDeadline = absl::Seconds(20);

walfeed::v1::EventBatch Events(const std::vector<std::string>& ids) {
  walfeed::v1::EventBatch batch;
  for (const std::string& id : ids) batch.add_events()->set_id(id);
  return batch;
}

SubscribeResponse Started(const std::string& session, const std::string& checkpoint = "") {
  SubscribeResponse frame;
  frame.mutable_started()->set_session_id(session);
  frame.mutable_started()->set_checkpoint(checkpoint);
  return frame;
}

SubscribeResponse EventsFrame(const std::vector<std::string>& ids) {
  SubscribeResponse frame;
  *frame.mutable_events() = Events(ids);
  return frame;
}

// Keeps a sync server call open until the client cancels it (bounded).
grpc::Status HoldUntilCancelled(grpc::ServerContext* context) {
  if (!walfeed::testing::WaitUntil([&] { return context->IsCancelled(); }, kDeadline,
                                   absl::Milliseconds(2))) {
    return grpc::Status(grpc::StatusCode::INTERNAL, "the client never cancelled");
  }
  return grpc::Status::CANCELLED;
}

// A ChangeStream server whose Subscribe and Ack do what the test scripts.
class ScriptedService final : public walfeed::v1::ChangeStream::Service {
 public:
  using SubscribeScript =
      std::function<grpc::Status(int call, grpc::ServerContext*, grpc::ServerWriter<SubscribeResponse>*)>;
  using AckScript = std::function<grpc::Status(const AckRequest&, AckResponse*)>;

  void Script(SubscribeScript subscribe, AckScript ack = nullptr) {
    absl::MutexLock lock(&mu_);
    subscribe_ = std::move(subscribe);
    ack_ = std::move(ack);
  }
  std::vector<SubscribeRequest> subscribes() const {
    absl::MutexLock lock(&mu_);
    return subscribes_;
  }
  std::vector<AckRequest> acks() const {
    absl::MutexLock lock(&mu_);
    return acks_;
  }

  grpc::Status Subscribe(grpc::ServerContext* context, const SubscribeRequest* request,
                         grpc::ServerWriter<SubscribeResponse>* writer) override {
    SubscribeScript script;
    int call = 0;
    {
      absl::MutexLock lock(&mu_);
      subscribes_.push_back(*request);
      call = static_cast<int>(subscribes_.size());
      script = subscribe_;
    }
    return script(call, context, writer);
  }
  grpc::Status Ack(grpc::ServerContext*, const AckRequest* request,
                   AckResponse* response) override {
    AckScript script;
    {
      absl::MutexLock lock(&mu_);
      acks_.push_back(*request);
      script = ack_;
    }
    if (script) return script(*request, response);
    response->set_checkpoint(request->event_id());
    return grpc::Status::OK;
  }

 private:
  mutable absl::Mutex mu_;
  SubscribeScript subscribe_ ABSL_GUARDED_BY(mu_);
  AckScript ack_ ABSL_GUARDED_BY(mu_);
  std::vector<SubscribeRequest> subscribes_ ABSL_GUARDED_BY(mu_);
  std::vector<AckRequest> acks_ ABSL_GUARDED_BY(mu_);
};

class SubscriberTest : public ::testing::Test {
 protected:
  void SetUp() override {
    grpc::ServerBuilder builder;
    builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &port_);
    builder.RegisterService(&service_);
    server_ = builder.BuildAndStart();
    ASSERT_NE(server_, nullptr);
  }
  void TearDown() override {
    server_->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(1));
  }

  SubscriberOptions Options() const {
    SubscriberOptions options;
    options.server = absl::StrCat("127.0.0.1:", port_);
    options.stream = "s";
    options.consumer = "c";
    options.backoff.base = absl::Milliseconds(5);
    options.backoff.cap = absl::Milliseconds(40);
    return options;
  }

  ScriptedService service_;
  std::unique_ptr<grpc::Server> server_;
  int port_ = 0;
};

// Records retries; Run's result comes back from RunFor.
struct Observed {
  absl::Mutex mu;
  std::vector<absl::Status> retries ABSL_GUARDED_BY(mu);
  std::vector<absl::Duration> delays ABSL_GUARDED_BY(mu);
  std::vector<std::string> handled ABSL_GUARDED_BY(mu);

  void Watch(SubscriberOptions* options) {
    options->on_retry = [this](const absl::Status& why, absl::Duration delay) {
      absl::MutexLock lock(&mu);
      retries.push_back(why);
      delays.push_back(delay);
    };
  }
  Subscriber::Handler Handler(std::function<absl::Status(const Batch&)> inner = nullptr) {
    return [this, inner](const Batch& batch) {
      {
        absl::MutexLock lock(&mu);
        for (int i = 0; i < batch.size(); ++i) handled.push_back(batch.id(i).ToString());
      }
      return inner ? inner(batch) : absl::OkStatus();
    };
  }
  std::vector<absl::Status> Retries() {
    absl::MutexLock lock(&mu);
    return retries;
  }
  std::vector<std::string> Handled() {
    absl::MutexLock lock(&mu);
    return handled;
  }
};

TEST(BatchTest, CreateChecksIdsAndOrder) {
  absl::StatusOr<Batch> batch = Batch::Create(Events({"0/A:0", "0/A:1", "0/10:0"}), "s1");
  ASSERT_THAT(batch, IsOk());
  EXPECT_EQ(batch->size(), 3);
  EXPECT_EQ(batch->session_id(), "s1");
  EXPECT_EQ(batch->first_id().ToString(), "0/A:0");
  EXPECT_EQ(batch->last_id().ToString(), "0/10:0");
  EXPECT_EQ(batch->id(1), EventId(0xA, 1));
  int seen = 0;
  for (const walfeed::v1::ChangeEvent& event : *batch) seen += event.id().empty() ? 0 : 1;
  EXPECT_EQ(seen, 3);
  EXPECT_THAT(Batch::Create(Events({})), StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(Batch::Create(Events({"0/A:0", "bogus"})),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("bogus")));
  EXPECT_THAT(Batch::Create(Events({"0/10:0", "0/A:0"})),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("does not follow")));
  EXPECT_THAT(Batch::Create(Events({"0/A:0", "0/A:0"})),
              StatusIs(absl::StatusCode::kInvalidArgument));
}

// Compact form: a batch's shapes join the session's; an event names one of
// them or is in the full form; a ref the session never received is an error.
TEST(BatchTest, CompactEventsResolveAgainstTheSessionsShapes) {
  walfeed::v1::EventBatch first = Events({"0/A:0", "0/A:1"});
  walfeed::v1::RelationShape* shape = first.add_relations();
  shape->set_ref(3);
  shape->set_table("t");
  shape->add_columns()->set_name("id");
  first.mutable_events(1)->set_relation_ref(3);
  Batch::Shapes shapes;
  absl::StatusOr<Batch> batch = Batch::Create(first, "s1", &shapes);
  ASSERT_THAT(batch, IsOk());
  EXPECT_EQ(batch->shape(0), nullptr) << "the full form describes itself";
  ASSERT_NE(batch->shape(1), nullptr);
  EXPECT_EQ(batch->shape(1)->columns(0).name(), "id");

  // A later batch of the session refers to it without carrying it.
  walfeed::v1::EventBatch second = Events({"0/B:0"});
  second.mutable_events(0)->set_relation_ref(3);
  batch = Batch::Create(second, "s1", &shapes);
  ASSERT_THAT(batch, IsOk());
  EXPECT_EQ(batch->shape(0)->table(), "t");
  // A new session knows no shapes.
  Batch::Shapes fresh;
  EXPECT_THAT(Batch::Create(second, "s2", &fresh),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("names relation shape 3, which this session never received")));
  EXPECT_EQ(Batch::Create(Events({"0/C:0"}))->shape(0), nullptr);
}

TEST(IsRetryableTest, TransientAndDefiniteCodes) {
  for (absl::StatusCode code :
       {absl::StatusCode::kUnavailable, absl::StatusCode::kDeadlineExceeded,
        absl::StatusCode::kResourceExhausted, absl::StatusCode::kCancelled,
        absl::StatusCode::kInternal, absl::StatusCode::kUnknown}) {
    EXPECT_TRUE(IsRetryable(code)) << code;
  }
  for (absl::StatusCode code :
       {absl::StatusCode::kDataLoss, absl::StatusCode::kNotFound,
        absl::StatusCode::kPermissionDenied, absl::StatusCode::kUnauthenticated,
        absl::StatusCode::kInvalidArgument, absl::StatusCode::kOutOfRange,
        absl::StatusCode::kAborted, absl::StatusCode::kFailedPrecondition,
        absl::StatusCode::kUnimplemented, absl::StatusCode::kAlreadyExists}) {
    EXPECT_FALSE(IsRetryable(code)) << code;
  }
}

TEST(SubscriberOptionsTest, UnusableOptionsFailBeforeConnecting) {
  auto run = [](const SubscriberOptions& options) {
    Subscriber subscriber(options);
    return subscriber.Run([](const Batch&) { return absl::OkStatus(); });
  };
  SubscriberOptions options;
  options.stream = "s";
  options.consumer = "c";
  SubscriberOptions no_stream = options;
  no_stream.stream.clear();
  EXPECT_THAT(run(no_stream), StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("stream")));
  SubscriberOptions bad_start = options;
  bad_start.start_after = "0/1";
  EXPECT_THAT(run(bad_start),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("start_after")));
  SubscriberOptions stray_tls = options;
  stray_tls.tls.root_certs_file = "/ca.pem";
  EXPECT_THAT(run(stray_tls),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("tls.enabled")));
  SubscriberOptions missing_ca = options;
  missing_ca.tls.enabled = true;
  missing_ca.tls.root_certs_file = "/nonexistent/ca.pem";
  EXPECT_THAT(run(missing_ca),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("/nonexistent/ca.pem")));
  SubscriberOptions half_mtls = options;
  half_mtls.tls.enabled = true;
  half_mtls.tls.cert_chain_pem = "-----BEGIN CERTIFICATE-----";
  EXPECT_THAT(run(half_mtls), StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("key")));
  SubscriberOptions bad_backoff = options;
  bad_backoff.backoff.cap = absl::Milliseconds(1);
  EXPECT_THAT(run(bad_backoff), StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("backoff")));
}

TEST(SubscriberStopTest, StopBeforeRunReturnsAtOnceAndRunIsOnceOnly) {
  SubscriberOptions options;
  options.stream = "s";
  options.consumer = "c";
  Subscriber subscriber(options);
  subscriber.Stop();
  EXPECT_THAT(subscriber.Run([](const Batch&) { return absl::OkStatus(); }), IsOk());
  EXPECT_THAT(subscriber.Run([](const Batch&) { return absl::OkStatus(); }),
              StatusIs(absl::StatusCode::kFailedPrecondition));
}

TEST(SubscriberStopTest, RetriesAnUnreachableServerWithCappedBackoffUntilStopped) {
  // A bound but never listening port refuses connections.
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  ASSERT_GE(fd, 0);
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(bind(fd, reinterpret_cast<sockaddr*>(&address), sizeof(address)), 0);
  socklen_t length = sizeof(address);
  ASSERT_EQ(getsockname(fd, reinterpret_cast<sockaddr*>(&address), &length), 0);

  SubscriberOptions options;
  options.server = absl::StrCat("127.0.0.1:", ntohs(address.sin_port));
  options.stream = "s";
  options.consumer = "c";
  options.backoff.base = absl::Milliseconds(2);
  options.backoff.cap = absl::Milliseconds(16);
  Observed observed;
  observed.Watch(&options);
  Subscriber subscriber(options);
  absl::Status result;
  std::thread runner([&] { result = subscriber.Run(observed.Handler()); });
  {
    absl::MutexLock lock(&observed.mu);
    auto enough = [&]() ABSL_NO_THREAD_SAFETY_ANALYSIS { return observed.retries.size() >= 8; };
    EXPECT_TRUE(observed.mu.AwaitWithTimeout(absl::Condition(&enough), kDeadline));
  }
  subscriber.Stop();
  runner.join();
  close(fd);
  EXPECT_THAT(result, IsOk());
  absl::MutexLock lock(&observed.mu);
  for (const absl::Status& why : observed.retries) {
    EXPECT_EQ(why.code(), absl::StatusCode::kUnavailable) << why;
  }
  for (absl::Duration delay : observed.delays) {
    EXPECT_GE(delay, absl::Milliseconds(1));  // Half the base at least.
    EXPECT_LE(delay, absl::Milliseconds(16));  // Never past the cap.
  }
  EXPECT_GT(observed.delays.back(), absl::Milliseconds(4)) << "the delay grows";
}

TEST_F(SubscriberTest, DefiniteStatusesEndRunWithoutRetrying) {
  for (grpc::StatusCode code :
       {grpc::StatusCode::DATA_LOSS, grpc::StatusCode::NOT_FOUND,
        grpc::StatusCode::PERMISSION_DENIED, grpc::StatusCode::UNAUTHENTICATED,
        grpc::StatusCode::INVALID_ARGUMENT, grpc::StatusCode::OUT_OF_RANGE,
        grpc::StatusCode::ABORTED}) {
    service_.Script([code](int, grpc::ServerContext*, grpc::ServerWriter<SubscribeResponse>*) {
      return grpc::Status(code, "scripted refusal");
    });
    SubscriberOptions options = Options();
    Observed observed;
    observed.Watch(&options);
    Subscriber subscriber(options);
    const absl::Status result = subscriber.Run(observed.Handler());
    EXPECT_EQ(static_cast<int>(result.code()), static_cast<int>(code)) << result;
    EXPECT_THAT(std::string(result.message()),
                HasSubstr("Subscribe stream \"s\" consumer \"c\": scripted refusal"));
    EXPECT_TRUE(observed.Retries().empty());
  }
}

TEST_F(SubscriberTest, TransientStatusesAreRetriedThenADefiniteOneEnds) {
  service_.Script([](int call, grpc::ServerContext*, grpc::ServerWriter<SubscribeResponse>* w) {
    switch (call) {
      case 1:
        return grpc::Status(grpc::StatusCode::UNAVAILABLE, "still connecting");
      case 2:
        w->Write(Started("s2"));
        return grpc::Status::OK;  // Ended without an error: reconnect too.
      case 3:
        return grpc::Status(grpc::StatusCode::RESOURCE_EXHAUSTED, "busy");
      default:
        return grpc::Status(grpc::StatusCode::DATA_LOSS, "slot lost");
    }
  });
  SubscriberOptions options = Options();
  Observed observed;
  observed.Watch(&options);
  Subscriber subscriber(options);
  EXPECT_THAT(subscriber.Run(observed.Handler()),
              StatusIs(absl::StatusCode::kDataLoss, HasSubstr("slot lost")));
  const std::vector<absl::Status> retries = observed.Retries();
  ASSERT_EQ(retries.size(), 3u);
  EXPECT_EQ(retries[0].code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(retries[1].code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(std::string(retries[1].message()), HasSubstr("without an error"));
  EXPECT_EQ(retries[2].code(), absl::StatusCode::kResourceExhausted);
}

// A status as the server sends it: code, message and google.rpc details.
grpc::Status WithDetails(grpc::StatusCode code, const std::string& message,
                         const std::string& reason, std::optional<int> retry_ms) {
  google::rpc::Status details;
  details.set_code(static_cast<int>(code));
  details.set_message(message);
  google::rpc::ErrorInfo info;
  info.set_reason(reason);
  info.set_domain("walfeed.v1");
  details.add_details()->PackFrom(info);
  if (retry_ms) {
    google::rpc::RetryInfo retry;
    retry.mutable_retry_delay()->set_nanos(*retry_ms * 1000000);
    details.add_details()->PackFrom(retry);
  }
  return grpc::Status(code, message, details.SerializeAsString());
}

// ABORTED is definite by its code, but a reset consumer is told to resubscribe
// (RetryInfo): Run goes on, and the reason reaches the caller either way.
TEST_F(SubscriberTest, AnAbortedTheServerMarksRetryableIsRetriedNotTheOthers) {
  service_.Script([](int call, grpc::ServerContext*, grpc::ServerWriter<SubscribeResponse>* w) {
    w->Write(Started(absl::StrCat("s", call)));
    if (call == 1) {
      return WithDetails(grpc::StatusCode::ABORTED, "consumer c was reset", "CONSUMER_RESET", 30);
    }
    return WithDetails(grpc::StatusCode::ABORTED, "superseded", "SESSION_SUPERSEDED", std::nullopt);
  });
  SubscriberOptions options = Options();
  Observed observed;
  observed.Watch(&options);
  Subscriber subscriber(options);
  const absl::Status result = subscriber.Run(observed.Handler());
  EXPECT_THAT(result, StatusIs(absl::StatusCode::kAborted, HasSubstr("superseded")));
  EXPECT_EQ(ErrorReason(result), "SESSION_SUPERSEDED");
  EXPECT_EQ(RetryDelay(result), std::nullopt);
  const std::vector<absl::Status> retries = observed.Retries();
  ASSERT_EQ(retries.size(), 1u);
  EXPECT_EQ(ErrorReason(retries[0]), "CONSUMER_RESET");
  EXPECT_EQ(RetryDelay(retries[0]), absl::Milliseconds(30));
  absl::MutexLock lock(&observed.mu);
  ASSERT_EQ(observed.delays.size(), 1u);
  EXPECT_GE(observed.delays[0], absl::Milliseconds(30)) << "never sooner than the server asked";
}

TEST_F(SubscriberTest, StartAfterHoldsUntilTheCheckpointPassesIt) {
  service_.Script([](int call, grpc::ServerContext*, grpc::ServerWriter<SubscribeResponse>* w) {
    if (call == 1) w->Write(Started("a", ""));
    if (call == 2) w->Write(Started("b", "0/6:0"));
    if (call <= 2) return grpc::Status(grpc::StatusCode::UNAVAILABLE, "restarting");
    return grpc::Status(grpc::StatusCode::NOT_FOUND, "done");
  });
  SubscriberOptions options = Options();
  options.start_after = "0/5:0";
  Subscriber subscriber(options);
  EXPECT_THAT(subscriber.Run([](const Batch&) { return absl::OkStatus(); }),
              StatusIs(absl::StatusCode::kNotFound));
  const std::vector<SubscribeRequest> requests = service_.subscribes();
  ASSERT_EQ(requests.size(), 3u);
  EXPECT_EQ(requests[0].start_after(), "0/5:0");
  EXPECT_EQ(requests[1].start_after(), "0/5:0") << "the checkpoint had not reached it";
  EXPECT_EQ(requests[2].start_after(), "") << "the checkpoint 0/6:0 is past it";
  EXPECT_EQ(subscriber.checkpoint(), "0/6:0");
}

TEST_F(SubscriberTest, NothingOfTheCallOutlivesRun) {
  // The call's ClientContext holds a reference to the channel. Were it still
  // alive when Run returned, the reference would be dropped on gRPC's callback
  // thread, and if it was the last one (Run dialed the channel itself) ~Channel
  // would tear down the callback completion queue under that thread. With the
  // caller's channel, any reference left after Run shows the leak, no race needed
  // to win; the repeats catch a reactor that finishes only after Run returned.
  service_.Script([](int, grpc::ServerContext*, grpc::ServerWriter<SubscribeResponse>* w) {
    w->Write(Started("s1"));
    return grpc::Status(grpc::StatusCode::NOT_FOUND, "done");
  });
  absl::StatusOr<std::shared_ptr<grpc::Channel>> channel = CreateChannel(Options());
  ASSERT_THAT(channel, IsOk());
  for (int i = 0; i < 20; ++i) {
    {
      SubscriberOptions options = Options();
      options.channel = *channel;
      Subscriber subscriber(options);
      EXPECT_THAT(subscriber.Run([](const Batch&) { return absl::OkStatus(); }),
                  StatusIs(absl::StatusCode::kNotFound));
    }
    ASSERT_EQ(channel->use_count(), 1) << "run " << i << ": the call's context is still alive";
  }
}

TEST_F(SubscriberTest, RequestCarriesTheOptions) {
  service_.Script([](int, grpc::ServerContext*, grpc::ServerWriter<SubscribeResponse>*) {
    return grpc::Status(grpc::StatusCode::NOT_FOUND, "done");
  });
  SubscriberOptions options = Options();
  options.tables = {"public.a", "app.*"};
  options.operations = {walfeed::v1::OPERATION_DELETE};
  options.max_batch_events = 7;
  options.max_batch_bytes = 8;
  options.max_unacked_events = 9;
  options.max_unacked_bytes = 10;
  options.progress_interval = absl::Milliseconds(1500);
  Subscriber subscriber(options);
  (void)subscriber.Run([](const Batch&) { return absl::OkStatus(); });
  ASSERT_EQ(service_.subscribes().size(), 1u);
  const SubscribeRequest request = service_.subscribes()[0];
  EXPECT_EQ(request.stream(), "s");
  EXPECT_EQ(request.consumer(), "c");
  EXPECT_THAT(request.tables(), ElementsAre("public.a", "app.*"));
  EXPECT_THAT(request.operations(), ElementsAre(walfeed::v1::OPERATION_DELETE));
  EXPECT_EQ(request.max_batch_events(), 7u);
  EXPECT_EQ(request.max_batch_bytes(), 8u);
  EXPECT_EQ(request.max_unacked_events(), 9u);
  EXPECT_EQ(request.max_unacked_bytes(), 10u);
  EXPECT_EQ(request.progress_interval_ms(), 1500u);
}

// An Ack refused with ABORTED: the stream's own end decides.
class AbortedAckTest : public SubscriberTest, public ::testing::WithParamInterface<bool> {};

TEST_P(AbortedAckTest, TakeoverEndsRunButAnEndedSessionReconnects) {
  const bool takeover = GetParam();
  auto refused = std::make_shared<absl::Notification>();
  service_.Script(
      [takeover, refused](int call, grpc::ServerContext*,
                          grpc::ServerWriter<SubscribeResponse>* w) {
        if (call > 1) return grpc::Status(grpc::StatusCode::NOT_FOUND, "second call");
        w->Write(Started("s1"));
        w->Write(EventsFrame({"0/10:0", "0/10:1"}));
        // The stream ends only after the ack was refused, like a real takeover
        // or shutdown racing an ack.
        if (!refused->WaitForNotificationWithTimeout(kDeadline)) {
          return grpc::Status(grpc::StatusCode::INTERNAL, "no ack came");
        }
        return takeover ? grpc::Status(grpc::StatusCode::ABORTED, "superseded by s2")
                        : grpc::Status(grpc::StatusCode::UNAVAILABLE, "shutting down");
      },
      [refused](const AckRequest&, AckResponse*) {
        refused->Notify();
        return grpc::Status(grpc::StatusCode::ABORTED, "session s1 is not the active session");
      });
  SubscriberOptions options = Options();
  Observed observed;
  observed.Watch(&options);
  Subscriber subscriber(options);
  const absl::Status result = subscriber.Run(observed.Handler());
  const std::vector<AckRequest> acks = service_.acks();
  ASSERT_EQ(acks.size(), 1u);
  EXPECT_EQ(acks[0].session_id(), "s1");
  EXPECT_EQ(acks[0].event_id(), "0/10:1");
  EXPECT_EQ(acks[0].stream(), "s");
  EXPECT_EQ(acks[0].consumer(), "c");
  if (takeover) {
    EXPECT_THAT(result, StatusIs(absl::StatusCode::kAborted, HasSubstr("superseded by s2")));
    EXPECT_TRUE(observed.Retries().empty());
  } else {
    EXPECT_THAT(result, StatusIs(absl::StatusCode::kNotFound, HasSubstr("second call")));
    ASSERT_EQ(observed.Retries().size(), 1u);
    EXPECT_EQ(observed.Retries()[0].code(), absl::StatusCode::kUnavailable);
  }
}

INSTANTIATE_TEST_SUITE_P(StreamEnd, AbortedAckTest, ::testing::Bool(),
                         [](const ::testing::TestParamInfo<bool>& info) {
                           return info.param ? "Takeover" : "SessionEnded";
                         });

// A durable checkpoint never moves back; if the server's is below what this
// process acked when it reconnects, the consumer was removed meanwhile and Run
// ends instead of carrying on as a new consumer.
TEST_F(SubscriberTest, ACheckpointBelowWhatWasAckedEndsRun) {
  auto acked = std::make_shared<absl::Notification>();
  service_.Script(
      [acked](int call, grpc::ServerContext*, grpc::ServerWriter<SubscribeResponse>* w) {
        if (call == 1) {
          w->Write(Started("s1"));
          w->Write(EventsFrame({"0/10:0", "0/10:1"}));
          if (!acked->WaitForNotificationWithTimeout(kDeadline)) {
            return grpc::Status(grpc::StatusCode::INTERNAL, "no ack came");
          }
          return grpc::Status(grpc::StatusCode::UNAVAILABLE, "restarting");
        }
        w->Write(Started(absl::StrCat("s", call)));  // No checkpoint: removed.
        w->Write(EventsFrame({"0/20:0"}));
        return grpc::Status(grpc::StatusCode::UNAVAILABLE, "should not get this far");
      },
      [acked](const AckRequest& request, AckResponse* response) {
        response->set_checkpoint(request.event_id());
        acked->Notify();
        return grpc::Status::OK;
      });
  SubscriberOptions options = Options();
  Observed observed;
  observed.Watch(&options);
  Subscriber subscriber(options);
  EXPECT_THAT(subscriber.Run(observed.Handler()),
              StatusIs(absl::StatusCode::kFailedPrecondition,
                       ::testing::AllOf(HasSubstr("none"), HasSubstr("0/10:1"),
                                        HasSubstr("removed"))));
  EXPECT_THAT(observed.Handled(), ::testing::ElementsAre("0/10:0", "0/10:1"));
}

TEST_F(SubscriberTest, TransientAckFailureReconnectsAndADefiniteOneEndsRun) {
  service_.Script(
      [](int call, grpc::ServerContext* context, grpc::ServerWriter<SubscribeResponse>* w) {
        w->Write(Started(absl::StrCat("s", call)));
        w->Write(EventsFrame({absl::StrCat("0/", call, ":0")}));
        // Held open until the client cancels after its ack failed.
        return HoldUntilCancelled(context);
      },
      [](const AckRequest& request, AckResponse*) {
        return request.session_id() == "s1"
                   ? grpc::Status(grpc::StatusCode::UNAVAILABLE, "could not store the ack")
                   : grpc::Status(grpc::StatusCode::OUT_OF_RANGE, "not delivered");
      });
  SubscriberOptions options = Options();
  Observed observed;
  observed.Watch(&options);
  Subscriber subscriber(options);
  EXPECT_THAT(subscriber.Run(observed.Handler()),
              StatusIs(absl::StatusCode::kOutOfRange, HasSubstr("Ack 0/2:0")));
  ASSERT_EQ(observed.Retries().size(), 1u);
  EXPECT_THAT(observed.Retries()[0],
              StatusIs(absl::StatusCode::kUnavailable, HasSubstr("could not store the ack")));
}

TEST_F(SubscriberTest, HandlerErrorEndsRunAfterAckingEarlierBatches) {
  service_.Script([](int, grpc::ServerContext* context, grpc::ServerWriter<SubscribeResponse>* w) {
    w->Write(Started("s1"));
    w->Write(EventsFrame({"0/10:0", "0/10:1"}));
    w->Write(EventsFrame({"0/20:0"}));
    return HoldUntilCancelled(context);
  });
  SubscriberOptions options = Options();
  options.ack = AckPolicy::EveryEvents(100);  // Only the error's flush acks.
  Observed observed;
  Subscriber subscriber(options);
  const absl::Status result = subscriber.Run(observed.Handler([](const Batch& batch) {
    return batch.first_id() == EventId(0x20, 0) ? absl::FailedPreconditionError("disk full")
                                               : absl::OkStatus();
  }));
  EXPECT_THAT(result, StatusIs(absl::StatusCode::kFailedPrecondition,
                               HasSubstr("handler failed on events 0/20:0..0/20:0: disk full")));
  const std::vector<AckRequest> acks = service_.acks();
  ASSERT_EQ(acks.size(), 1u);
  EXPECT_EQ(acks[0].event_id(), "0/10:1") << "the failed batch is not acked";
}

TEST_F(SubscriberTest, ProtocolViolationsEndRunWithInternal) {
  const std::vector<std::pair<std::vector<SubscribeResponse>, std::string>> cases = {
      {{EventsFrame({"0/1:0"})}, "before `started`"},
      {{Started("a"), Started("b")}, "second `started`"},
      {{Started("a"), EventsFrame({"0/1:0", "zzz"})}, "zzz"},
      {{Started("a"), EventsFrame({"0/2:0"}), EventsFrame({"0/1:0"})}, "does not follow"},
  };
  for (const auto& [frames, why] : cases) {
    service_.Script(
        [frames = frames](int, grpc::ServerContext* context, grpc::ServerWriter<SubscribeResponse>* w) {
          for (const SubscribeResponse& frame : frames) w->Write(frame);
          return HoldUntilCancelled(context);
        });
    Subscriber subscriber(Options());
    EXPECT_THAT(subscriber.Run([](const Batch&) { return absl::OkStatus(); }),
                StatusIs(absl::StatusCode::kInternal, HasSubstr(why)));
  }
}

TEST_F(SubscriberTest, StopFromTheHandlerFlushesAcksAndReturnsOk) {
  service_.Script([](int, grpc::ServerContext* context, grpc::ServerWriter<SubscribeResponse>* w) {
    w->Write(Started("s1"));
    w->Write(EventsFrame({"0/10:0", "0/10:1", "0/10:2"}));
    return HoldUntilCancelled(context);
  });
  SubscriberOptions options = Options();
  options.ack = AckPolicy::Manual();
  Subscriber subscriber(options);
  EXPECT_THAT(subscriber.Run([&](const Batch& batch) {
    EXPECT_THAT(subscriber.Ack(batch.id(1)), IsOk()) << "ids of the batch in hand are allowed";
    subscriber.Stop();
    return absl::OkStatus();
  }),
              IsOk());
  const std::vector<AckRequest> acks = service_.acks();
  ASSERT_EQ(acks.size(), 1u);
  EXPECT_EQ(acks[0].event_id(), "0/10:1");
}

}  // namespace
}  // namespace walfeed
