#include "server/error_details.h"

#include <cstdint>
#include <string>

#include "google/rpc/error_details.pb.h"
#include "google/rpc/status.pb.h"
#include "replication/error_reason.h"

namespace walfeed::server {

namespace reason = replication::reason;
namespace {

// For errors made without a reason: three codes say all there is to say.
absl::string_view FallbackReason(absl::StatusCode code) {
  switch (code) {
    case absl::StatusCode::kInvalidArgument:
      return reason::kInvalidRequest;
    case absl::StatusCode::kUnauthenticated:
      return reason::kUnauthenticated;
    case absl::StatusCode::kPermissionDenied:
      return reason::kPermissionDenied;
    default:
      return reason::kOther;
  }
}

}  // namespace

std::optional<absl::Duration> RetryDelayFor(absl::string_view why) {
  // Short where the condition clears by itself within moments (a reset took
  // effect, a re-read started), longer where it waits on PostgreSQL or on a
  // restart; clients add jitter.
  if (why == reason::kConsumerReset) return absl::ZeroDuration();
  if (why == reason::kStreamRestarting) return absl::Milliseconds(200);
  if (why == reason::kConsumerBusy || why == reason::kCheckpointWriteFailed ||
      why == reason::kStreamNotReady || why == reason::kServerStopping || why == reason::kStandby) {
    return absl::Seconds(1);
  }
  return std::nullopt;
}

grpc::Status ToGrpc(const absl::Status& status) {
  if (status.ok()) return grpc::Status::OK;
  std::string why = reason::ReasonOf(status);
  if (why.empty()) why = std::string(FallbackReason(status.code()));

  google::rpc::ErrorInfo info;
  info.set_reason(why);
  info.set_domain(std::string(kErrorDomain));
  for (auto& [key, value] : reason::ReasonMetadataOf(status)) {
    (*info.mutable_metadata())[key] = std::move(value);
  }
  google::rpc::Status details;
  details.set_code(static_cast<int>(status.code()));
  details.set_message(std::string(status.message()));
  details.add_details()->PackFrom(info);
  if (std::optional<absl::Duration> delay = RetryDelayFor(why)) {
    google::rpc::RetryInfo retry;
    const int64_t nanos = absl::ToInt64Nanoseconds(*delay);
    retry.mutable_retry_delay()->set_seconds(nanos / 1000000000);
    retry.mutable_retry_delay()->set_nanos(static_cast<int32_t>(nanos % 1000000000));
    details.add_details()->PackFrom(retry);
  }
  return grpc::Status(static_cast<grpc::StatusCode>(status.code()), std::string(status.message()),
                      details.SerializeAsString());
}

}  // namespace walfeed::server
