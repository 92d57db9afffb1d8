#include "walfeed/error_details.h"

#include <cstdint>

#include "absl/strings/cord.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/types/optional.h"
#include "google/rpc/error_details.pb.h"
#include "google/rpc/status.pb.h"

namespace walfeed {
namespace {

// absl::Status payload keys; they live only inside this process.
constexpr absl::string_view kReasonKey = "walfeed.v1/reason";
constexpr absl::string_view kRetryDelayKey = "walfeed.v1/retry-delay-ns";
constexpr absl::string_view kDomain = "walfeed.v1";

}  // namespace

absl::Status StatusFromGrpc(const grpc::Status& status, absl::string_view what) {
  if (status.ok()) return absl::OkStatus();
  absl::Status converted(static_cast<absl::StatusCode>(status.error_code()),
                         absl::StrCat(what, ": ", status.error_message()));
  google::rpc::Status details;
  if (status.error_details().empty() || !details.ParseFromString(status.error_details())) {
    return converted;
  }
  for (const google::protobuf::Any& any : details.details()) {
    google::rpc::ErrorInfo info;
    google::rpc::RetryInfo retry;
    if (any.UnpackTo(&info)) {
      if (info.domain() == kDomain) converted.SetPayload(kReasonKey, absl::Cord(info.reason()));
    } else if (any.UnpackTo(&retry)) {
      // Saturating arithmetic: a hostile or broken delay cannot overflow.
      const absl::Duration delay = absl::Seconds(retry.retry_delay().seconds()) +
                                   absl::Nanoseconds(retry.retry_delay().nanos());
      if (delay >= absl::ZeroDuration() && delay < absl::InfiniteDuration()) {
        converted.SetPayload(kRetryDelayKey,
                             absl::Cord(absl::StrCat(absl::ToInt64Nanoseconds(delay))));
      }
    }
  }
  return converted;
}

std::string ErrorReason(const absl::Status& status) {
  absl::optional<absl::Cord> reason = status.GetPayload(kReasonKey);
  return reason ? std::string(*reason) : std::string();
}

std::optional<absl::Duration> RetryDelay(const absl::Status& status) {
  absl::optional<absl::Cord> delay = status.GetPayload(kRetryDelayKey);
  int64_t nanos = 0;
  if (!delay || !absl::SimpleAtoi(std::string(*delay), &nanos)) return std::nullopt;
  return absl::Nanoseconds(nanos);
}

}  // namespace walfeed
