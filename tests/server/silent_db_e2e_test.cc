// A PostgreSQL that goes silent (a black-holed network, a frozen host: no reset,
// no error), against a real PostgreSQL 15 behind a loopback TCP proxy and the
// in-process server: the stream notices within wal_sender_timeout, reports it
// (health NOT_SERVING), reconnects once the path heals, and nothing is lost.
#include "tests/chaos/tcp_proxy.h"
#include "tests/server/e2e_harness.h"

namespace walfeed::server {
namespace {

using namespace ::walfeed::server::e2e;  // NOLINT: the harness is this file's vocabulary.

class SilentDbE2eTest : public ServerE2eTest {};

TEST_F(SilentDbE2eTest, ABlackHoleIsNoticedWithinTheSenderTimeoutAndNothingIsLost) {
  ASSERT_THAT(pg_->Exec("ALTER SYSTEM SET wal_sender_timeout = '4s'"), IsOk());
  ASSERT_THAT(pg_->Exec("SELECT pg_reload_conf()"), IsOk());
  absl::StatusOr<std::unique_ptr<chaos::TcpProxy>> proxy = chaos::TcpProxy::Start();
  ASSERT_THAT(proxy, IsOk());
  (*proxy)->SetUpstream(pg_->port());
  // Everything the server says to PostgreSQL (replication, checkpoints) goes
  // through the proxy; the test writes directly.
  const std::string conninfo =
      absl::StrCat(pg_->ConnInfo(), " host=127.0.0.1 port=", (*proxy)->port());
  StartServer(absl::StrCat(
      "listen: \"127.0.0.1:0\"\nplaintext: true\nshutdown_timeout: 5s\nstreams:\n  - name: ",
      kStream, "\n    conninfo: \"", conninfo, "\"\n    slot: ", kSlot, "\n    publications: [",
      kSlot, "]\n    tables: [public.orders]\n    create_missing: true\n"));
  const std::string health = absl::StrCat("walfeed.v1.ChangeStream/", kStream);
  std::unique_ptr<Subscription> sub = Subscribe(Request("c"));
  InsertTransactions(1, 5);
  ASSERT_TRUE(sub->WaitForEvents(5));
  AckOk(*sub, "c", sub->events().back().id());
  ASSERT_EQ(HealthOf(health), HealthCheckResponse::SERVING);

  // Both directions go dark for 15 s; nothing is closed.
  const absl::Time dark = absl::Now();
  (*proxy)->Stall(chaos::TcpProxy::kBoth, dark + absl::Seconds(15));
  InsertTransactions(6, 5);  // Committed while walfeed cannot hear about them.
  ASSERT_TRUE(WaitUntil([&] { return HealthOf(health) != HealthCheckResponse::SERVING; },
                        absl::Seconds(12)))
      << "the stream still claims to stream 12 s into a black hole";
  const absl::Duration noticed = absl::Now() - dark;
  EXPECT_LE(noticed, absl::Seconds(4) + absl::Seconds(3))
      << "noticed after " << absl::FormatDuration(noticed);

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

}  // namespace
}  // namespace walfeed::server
