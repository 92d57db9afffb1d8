#include "replication/error_reason.h"

#include "absl/strings/cord.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/types/optional.h"

namespace walfeed::replication::reason {
namespace {

// Payload keys are private to the process: they never leave it as such.
constexpr absl::string_view kReasonKey = "walfeed.v1/reason";
constexpr absl::string_view kMetadataPrefix = "walfeed.v1/reason-metadata/";

}  // namespace

std::vector<absl::string_view> AllReasons() {
  return {kServerStopping,
          kStreamNotReady,
          kStreamRestarting,
          kCheckpointWriteFailed,
          kConsumerReset,
          kConsumerBusy,
          kSessionSuperseded,
          kSessionNotActive,
          kConsumerRemoved,
          kConsumerDetached,
          kConsumerNotFound,
          kStreamNotFound,
          kStartBelowCheckpoint,
          kStartNotHeld,
          kEphemeralFellBehind,
          kEphemeralNotAcked,
          kAckNotDelivered,
          kResetTargetInvalid,
          kSlotLost,
          kSlotReplaced,
          kSlotNotFound,
          kStreamFailed,
          kInvalidRequest,
          kUnauthenticated,
          kPermissionDenied,
          kCheckpointWriteRefused, kStandby, kBackfillNotFound,
          kBackfillRunning, kTableNotBackfillable, kSlotShared, kOther};
}

absl::Status WithReason(absl::Status status, absl::string_view reason) {
  return WithReason(std::move(status), reason, {});
}

absl::Status WithReason(absl::Status status, absl::string_view reason,
                        std::vector<std::pair<std::string, std::string>> metadata) {
  if (status.ok()) return status;
  status.SetPayload(kReasonKey, absl::Cord(reason));
  for (auto& [key, value] : metadata) {
    status.SetPayload(absl::StrCat(kMetadataPrefix, key), absl::Cord(value));
  }
  return status;
}

std::string ReasonOf(const absl::Status& status) {
  absl::optional<absl::Cord> reason = status.GetPayload(kReasonKey);
  return reason ? std::string(*reason) : std::string();
}

std::vector<std::pair<std::string, std::string>> ReasonMetadataOf(const absl::Status& status) {
  std::vector<std::pair<std::string, std::string>> metadata;
  status.ForEachPayload([&](absl::string_view key, const absl::Cord& value) {
    if (absl::StartsWith(key, kMetadataPrefix)) {
      metadata.emplace_back(std::string(key.substr(kMetadataPrefix.size())), std::string(value));
    }
  });
  return metadata;
}

}  // namespace walfeed::replication::reason
