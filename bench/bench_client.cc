#include "bench_client.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstdio>

namespace walfeed::bench {

std::shared_ptr<grpc::Channel> MakeChannel(const std::string& server, int distinct) {
  grpc::ChannelArguments args;
  args.SetMaxReceiveMessageSize(256 << 20);
  args.SetInt(GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS, 10);
  args.SetInt(GRPC_ARG_MIN_RECONNECT_BACKOFF_MS, 10);
  args.SetInt(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS, 50);
  if (distinct > 0) args.SetInt("walfeed.bench.connection", distinct);
  return grpc::CreateCustomChannel(server, grpc::InsecureChannelCredentials(), args);
}

namespace {

// Waits until something accepts TCP connections at "IPv4:port", trying every
// 2 ms until `give_up`. gRPC waits out a reconnect backoff after a refused
// connect (50-700 ms seen here, whatever the backoff arguments say), which a
// client started right after its server would otherwise pay; a plain connect
// costs nothing. Other address forms are left to gRPC.
void AwaitListening(const std::string& server, std::chrono::steady_clock::time_point give_up) {
  const size_t colon = server.rfind(':');
  sockaddr_in address{};
  address.sin_family = AF_INET;
  int port = 0;
  if (colon == std::string::npos || !absl::SimpleAtoi(server.substr(colon + 1), &port) ||
      inet_pton(AF_INET, server.substr(0, colon).c_str(), &address.sin_addr) != 1) {
    return;
  }
  address.sin_port = htons(static_cast<uint16_t>(port));
  while (std::chrono::steady_clock::now() < give_up) {
    const int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) return;
    const bool accepted =
        connect(fd, reinterpret_cast<const sockaddr*>(&address), sizeof(address)) == 0;
    close(fd);
    if (accepted) return;
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
}

}  // namespace

int SubscribeWithRetry(walfeed::v1::ChangeStream::Stub* stub, const std::string& server,
                       const walfeed::v1::SubscribeRequest& request,
                       std::chrono::steady_clock::time_point give_up, const char* who,
                       std::unique_ptr<grpc::ClientContext>* context,
                       std::unique_ptr<grpc::ClientReader<walfeed::v1::SubscribeResponse>>* reader,
                       walfeed::v1::SubscribeResponse* started) {
  AwaitListening(server, give_up);
  const auto deadline = std::chrono::system_clock::now() +
                        (give_up - std::chrono::steady_clock::now()) + std::chrono::seconds(1);
  for (int attempts = 1;; ++attempts) {
    *context = std::make_unique<grpc::ClientContext>();
    (*context)->set_wait_for_ready(true);
    (*context)->set_deadline(deadline);
    *reader = stub->Subscribe(context->get(), request);
    if ((*reader)->Read(started) && started->has_started()) return attempts;
    const grpc::Status status = (*reader)->Finish();
    if (status.error_code() != grpc::StatusCode::UNAVAILABLE ||
        std::chrono::steady_clock::now() >= give_up) {
      std::fprintf(stderr, "%s: Subscribe failed: %d %s\n", who,
                   static_cast<int>(status.error_code()), status.error_message().c_str());
      return 0;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
}

void Acker::Loop() {
  for (;;) {
    std::string id;
    bool last = false;
    {
      absl::MutexLock lock(&mu_);
      mu_.Await(absl::Condition(this, &Acker::ReadyLocked));
      id.swap(pending_);
      last = done_;
    }
    if (!id.empty()) Send(id);
    if (last) {
      absl::MutexLock lock(&mu_);
      if (pending_.empty()) return;
    }
  }
}


void Acker::Send(const std::string& id) {
  walfeed::v1::AckRequest request;
  request.set_stream(stream_);
  request.set_consumer(consumer_);
  request.set_session_id(session_id_);
  request.set_event_id(id);
  walfeed::v1::AckResponse response;
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(30));
  const grpc::Status status = stub_->Ack(&context, request, &response);
  absl::MutexLock lock(&mu_);
  if (status.ok()) {
    ++sent_;
  } else {
    ++failed_;
    std::fprintf(stderr, "ack %s failed: %d %s\n", id.c_str(),
                 static_cast<int>(status.error_code()), status.error_message().c_str());
  }
}


}  // namespace walfeed::bench
