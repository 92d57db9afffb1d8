#include "tests/chaos/stream_health.h"

#include <grpcpp/generic/generic_stub.h>
#include <grpcpp/impl/codegen/proto_utils.h>  // Serializes the health messages.

#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "grpc/health/v1/health.pb.h"

namespace walfeed::chaos {

using ::grpc::health::v1::HealthCheckRequest;
using ::grpc::health::v1::HealthCheckResponse;

StreamHealth::StreamHealth(int port, const std::string& stream)
    : port_(port),
      service_(absl::StrCat("walfeed.v1.ChangeStream/", stream)),
      channel_(grpc::CreateChannel(absl::StrCat("127.0.0.1:", port),
                                   grpc::InsecureChannelCredentials())) {}

StreamHealth::State StreamHealth::Check() {
  // libgrpc++ implements the health service, so walfeed ships no generated stub
  // for it: a generic stub over the message types does the call.
  grpc::TemplatedGenericStub<HealthCheckRequest, HealthCheckResponse> stub(channel_);
  grpc::ClientContext context;
  context.set_deadline(absl::ToChronoTime(absl::Now() + absl::Seconds(1)));
  HealthCheckRequest request;
  request.set_service(service_);
  HealthCheckResponse response;
  grpc::Status status;
  absl::Notification done;
  stub.UnaryCall(&context, "/grpc.health.v1.Health/Check", grpc::StubOptions(), &request, &response,
                 [&](grpc::Status s) {
                   status = std::move(s);
                   done.Notify();
                 });
  done.WaitForNotification();  // Bounded by the call's deadline.
  if (!status.ok()) return State::kUnknown;
  switch (response.status()) {
    case HealthCheckResponse::SERVING: return State::kServing;
    case HealthCheckResponse::NOT_SERVING: return State::kNotServing;
    default: return State::kUnknown;
  }
}

}  // namespace walfeed::chaos
