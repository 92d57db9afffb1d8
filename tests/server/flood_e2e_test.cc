// A client that floods the server (Subscribe and cancel, Acks of a session that
// is not its own, GetStatus, as fast as it can, from several threads) cannot
// starve another consumer: its events keep coming and its acks stay fast.
#include <algorithm>
#include <atomic>
#include <thread>
#include <vector>

#include "tests/server/e2e_harness.h"

namespace walfeed::server {
namespace {

using namespace ::walfeed::server::e2e;  // NOLINT: the harness is this file's vocabulary.

class FloodE2eTest : public ServerE2eTest {};

TEST_F(FloodE2eTest, AFloodingClientCannotStarveAnotherConsumersAcks) {
  StartServer(Yaml());
  std::unique_ptr<Subscription> good = Subscribe(Request("good"));
  InsertTransactions(1, 1);
  ASSERT_TRUE(good->WaitForEvents(1));
  AckOk(*good, "good", good->events()[0].id());

  // The flood: its own channel, as another client would have.
  std::shared_ptr<grpc::Channel> channel = grpc::CreateChannel(
      absl::StrCat("127.0.0.1:", server_->port()), grpc::InsecureChannelCredentials());
  std::unique_ptr<ChangeStream::Stub> flood_stub = ChangeStream::NewStub(channel);
  std::atomic<bool> stop{false};
  std::atomic<int64_t> flood_calls{0};
  std::vector<std::thread> flooders;
  for (int t = 0; t < 6; ++t) {
    flooders.emplace_back([&, t] {
      while (!stop.load()) {
        grpc::ClientContext context;
        context.set_deadline(ChronoDeadline(absl::Seconds(10)));
        switch (t % 3) {
          case 0: {  // Subscribe as one consumer, over and over: takeovers.
            SubscribeRequest request = Request("flood");
            std::unique_ptr<grpc::ClientReader<SubscribeResponse>> reader =
                flood_stub->Subscribe(&context, request);
            SubscribeResponse frame;
            reader->Read(&frame);
            context.TryCancel();
            reader->Finish();
            break;
          }
          case 1: {  // Acks naming the good consumer with a guessed session.
            AckRequest request;
            request.set_stream(kStream);
            request.set_consumer("good");
            request.set_session_id("0123456789abcdef0123456789abcdef");
            request.set_event_id("0/1:0");
            AckResponse response;
            flood_stub->Ack(&context, request, &response);
            break;
          }
          default: {
            GetStatusRequest request;
            GetStatusResponse response;
            flood_stub->GetStatus(&context, request, &response);
            break;
          }
        }
        ++flood_calls;
      }
    });
  }

  // Meanwhile the good consumer receives and acks 40 transactions, one by one.
  absl::Duration slowest;
  std::vector<absl::Duration> latencies;
  for (int i = 0; i < 40; ++i) {
    InsertTransactions(2 + i, 1);
    ASSERT_TRUE(good->WaitForEvents(2 + static_cast<size_t>(i)));
    const absl::Time start = absl::Now();
    AckOk(*good, "good", good->events().back().id());
    latencies.push_back(absl::Now() - start);
    slowest = std::max(slowest, latencies.back());
  }
  stop = true;
  for (std::thread& t : flooders) t.join();
  std::sort(latencies.begin(), latencies.end());
  std::cout << "flood: " << flood_calls.load() << " calls by the flooder; the good consumer's "
            << "ack p50 " << absl::FormatDuration(latencies[latencies.size() / 2]) << ", max "
            << absl::FormatDuration(slowest) << "\n";
  EXPECT_GT(flood_calls.load(), 200) << "the flood was not a flood";
  // Normal acks take milliseconds here; a starved one waits behind the flood.
  EXPECT_LT(slowest, absl::Seconds(2));
  GetStatusResponse status;
  ASSERT_THAT(Status(kStream, &status), GrpcOk());
  for (const auto& consumer : status.streams(0).consumers()) {
    if (consumer.name() == "good") {
      EXPECT_EQ(consumer.checkpoint(), good->events().back().id());
    }
  }
}

}  // namespace
}  // namespace walfeed::server
