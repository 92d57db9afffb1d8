// A PostgreSQL that goes silent (a black-holed network, a frozen host: no reset,
// no error), against a real PostgreSQL 15 behind a loopback TCP proxy and the
// in-process server: the stream notices within wal_sender_timeout, reports it
// (health NOT_SERVING), reconnects once the path heals, and nothing is lost;
// and SIGTERM during the black hole answers every client UNAVAILABLE at once and
// exits within shutdown_timeout.
#include "tests/chaos/tcp_proxy.h"
#include "tests/server/e2e_harness.h"

namespace walfeed::server {
namespace {

using namespace ::walfeed::server::e2e;  // NOLINT: the harness is this file's vocabulary.

class SilentDbE2eTest : public ServerE2eTest {
 protected:
  // PostgreSQL with `wal_sender_timeout`, behind proxy_: everything the server
  // says to it (replication, checkpoints) goes through the proxy; the test
  // writes directly. The server's YAML, with `shutdown_timeout`.
  std::string ProxiedYaml(const std::string& wal_sender_timeout,
                          const std::string& shutdown_timeout) {
    EXPECT_THAT(pg_->Exec(absl::StrCat("ALTER SYSTEM SET wal_sender_timeout = '",
                                       wal_sender_timeout, "'")),
                IsOk());
    EXPECT_THAT(pg_->Exec("SELECT pg_reload_conf()"), IsOk());
    absl::StatusOr<std::unique_ptr<chaos::TcpProxy>> proxy = chaos::TcpProxy::Start();
    EXPECT_THAT(proxy, IsOk());
    if (!proxy.ok()) return "";
    proxy_ = std::move(*proxy);
    proxy_->SetUpstream(pg_->port());
    const std::string conninfo =
        absl::StrCat(pg_->ConnInfo(), " host=127.0.0.1 port=", proxy_->port());
    return absl::StrCat("listen: \"127.0.0.1:0\"\nplaintext: true\nshutdown_timeout: ",
                        shutdown_timeout, "\nstreams:\n  - name: ", kStream,
                        "\n    conninfo: \"", conninfo, "\"\n    slot: ", kSlot,
                        "\n    publications: [", kSlot,
                        "]\n    tables: [public.orders]\n    create_missing: true\n");
  }
  std::unique_ptr<chaos::TcpProxy> proxy_;
};

TEST_F(SilentDbE2eTest, ABlackHoleIsNoticedWithinTheSenderTimeoutAndNothingIsLost) {
  StartServer(ProxiedYaml("4s", "5s"));
  const std::string health = absl::StrCat("walfeed.v1.ChangeStream/", kStream);
  std::unique_ptr<Subscription> sub = Subscribe(Request("c"));
  InsertTransactions(1, 5);
  ASSERT_TRUE(sub->WaitForEvents(5));
  AckOk(*sub, "c", sub->events().back().id());
  ASSERT_EQ(HealthOf(health), HealthCheckResponse::SERVING);
  GetStatusResponse before;
  ASSERT_THAT(Status(kStream, &before), GrpcOk());
  ASSERT_TRUE(before.streams(0).has_slot_read_at());
  EXPECT_EQ(before.streams(0).slot().wal_status(), "reserved");

  // Both directions go dark for 15 s; nothing is closed.
  const absl::Time dark = absl::Now();
  proxy_->Stall(chaos::TcpProxy::kBoth, dark + absl::Seconds(15));
  InsertTransactions(6, 5);  // Committed while walfeed cannot hear about them.
  ASSERT_TRUE(WaitUntil([&] { return HealthOf(health) != HealthCheckResponse::SERVING; },
                        absl::Seconds(12)))
      << "the stream still claims to stream 12 s into a black hole";
  const absl::Duration noticed = absl::Now() - dark;
  EXPECT_LE(noticed, absl::Seconds(4) + absl::Seconds(3))
      << "noticed after " << absl::FormatDuration(noticed);

  // Status still answers at once, with the last slot figures and their time:
  // it does not wait for a database that does not answer.
  const absl::Time asked = absl::Now();
  GetStatusResponse during;
  ASSERT_THAT(Status(kStream, &during), GrpcOk());
  EXPECT_LE(absl::Now() - asked, absl::Seconds(3));
  EXPECT_NE(during.streams(0).state(), walfeed::v1::STREAM_STATE_STREAMING);
  EXPECT_EQ(during.streams(0).slot().wal_status(), "reserved") << "the last figures";
  EXPECT_LT(during.streams(0).slot_read_at().seconds(), absl::ToUnixSeconds(dark) + 1)
      << "read before the black hole";

  // Once the path heals the stream resumes; every row arrives.
  InsertTransactions(11, 5);
  std::unique_ptr<Subscription> again = Subscribe(Request("c"));
  ASSERT_TRUE(again->WaitForEvents(10, absl::Seconds(60))) << again->event_count();
  std::vector<std::string> ids;
  for (const ChangeEvent& event : again->events()) ids.push_back(NewValue(event, "id"));
  for (int i = 0; i < 10; ++i) EXPECT_EQ(ids[i], absl::StrCat(6 + i));
  EXPECT_TRUE(
      WaitUntil([&] { return HealthOf(health) == HealthCheckResponse::SERVING; }, kDeadline));
}

// The walfeed-server process, SIGTERM'd while PostgreSQL is black-holed and an
// Ack waits on it: the subscription and the Ack end UNAVAILABLE (never
// CANCELLED), and the process exits within shutdown_timeout, not when the
// database answers (it never does here), TCP gives up (30 s) or its leadership
// lock's lease runs out.
TEST_F(SilentDbE2eTest, SigtermDuringABlackHoleExitsWithinTheShutdownTimeout) {
  // The reader must not notice the silence first: this is shutdown's bound.
  constexpr absl::Duration kShutdownTimeout = absl::Seconds(2);
  const std::string config = dir_ + "/walfeed.yaml";
  {
    std::ofstream out(config);
    out << ProxiedYaml("60s", "2s");
  }
  ServerProcess process(config, dir_ + "/server.log");
  const int port = process.WaitForPort();
  ASSERT_GT(port, 0) << process.Log();
  Connect(port);
  std::unique_ptr<Subscription> sub = Subscribe(Request("c"));
  InsertTransactions(1, 3);
  ASSERT_TRUE(sub->WaitForEvents(3));
  AckOk(*sub, "c", sub->events()[0].id());

  proxy_->Stall(chaos::TcpProxy::kBoth, absl::Now() + absl::Seconds(120));
  // The hole is in effect once a slot query goes unanswered.
  GetStatusResponse status;
  ASSERT_TRUE(WaitUntil(
      [&] {
        return Status(kStream, &status).ok() &&
               absl::StrContains(status.streams(0).error(), "did not answer");
      },
      kDeadline));
  // An ack that must reach PostgreSQL to be answered, sent before the signal.
  grpc::Status ack_status;
  std::thread ack([&] { ack_status = Ack("c", sub->session_id(), sub->events()[2].id()); });
  // A call sent after the Ack on the same connection, answered only after its
  // ~1 s wait for the slot query: by then the server holds the Ack (a call
  // that reaches it after it began to stop is gRPC's to refuse, not ours).
  ASSERT_THAT(Status(kStream, &status), GrpcOk());
  const absl::Time term = absl::Now();
  process.Signal(SIGTERM);
  ASSERT_TRUE(sub->WaitForEnd());
  // Ended by the shutdown, or, on a slow machine, a moment before it: the
  // server stops serving once it cannot renew its leadership lock (2 s into
  // the hole). Either way UNAVAILABLE and retryable, never CANCELLED.
  const grpc::Status ended = *sub->status();
  if (absl::StrContains(ended.error_message(), "shutting down")) {
    EXPECT_THAT(ended, HasReason("SERVER_STOPPING", true));
  } else {
    EXPECT_THAT(ended, GrpcIs(grpc::StatusCode::UNAVAILABLE, HasSubstr("stopped streaming")));
    EXPECT_THAT(ended, HasReason("STREAM_NOT_READY", true));
  }
  const std::optional<int> exit_status =
      process.WaitForExit(kShutdownTimeout + absl::Seconds(4));
  const absl::Duration took = absl::Now() - term;
  ack.join();
  ASSERT_TRUE(exit_status.has_value())
      << "still running " << absl::FormatDuration(took) << " after SIGTERM\n"
      << process.Log();
  EXPECT_TRUE(WIFEXITED(*exit_status) && WEXITSTATUS(*exit_status) == 0) << *exit_status;
  EXPECT_THAT(ack_status, GrpcIs(grpc::StatusCode::UNAVAILABLE, HasSubstr("shutting down")));
  EXPECT_THAT(ack_status, HasReason("SERVER_STOPPING", true));
  std::cout << "walfeed-server exited " << absl::FormatDuration(took)
            << " after SIGTERM during a black hole\n";
}

}  // namespace
}  // namespace walfeed::server
