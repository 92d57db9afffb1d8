// Stable, machine-readable reasons carried by the errors clients act on.
//
// A status code says what kind of failure happened; the reason says which one,
// so a client in any language branches on it instead of on message text (four
// different situations are ABORTED, for example). Reasons travel inside
// absl::Status as a payload, from wherever the error is made to the server's
// edge, which sends them as google.rpc.ErrorInfo (server/error_details.h). Each
// name here is a value of the ErrorReason enum in walfeed/v1/change_stream.proto
// without its ERROR_REASON_ prefix, and documented there; a test keeps the two
// lists equal.
#ifndef WALFEED_REPLICATION_ERROR_REASON_H_
#define WALFEED_REPLICATION_ERROR_REASON_H_

#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"

namespace walfeed::replication::reason {

// Retryable (the server adds a RetryInfo).
inline constexpr absl::string_view kServerStopping = "SERVER_STOPPING";
inline constexpr absl::string_view kStreamNotReady = "STREAM_NOT_READY";
inline constexpr absl::string_view kStreamRestarting = "STREAM_RESTARTING";
inline constexpr absl::string_view kCheckpointWriteFailed = "CHECKPOINT_WRITE_FAILED";
inline constexpr absl::string_view kConsumerReset = "CONSUMER_RESET";
inline constexpr absl::string_view kConsumerBusy = "CONSUMER_BUSY";
inline constexpr absl::string_view kStandby = "STANDBY";

// Definite: retrying the same call gives the same answer.
inline constexpr absl::string_view kCheckpointWriteRefused = "CHECKPOINT_WRITE_REFUSED";
inline constexpr absl::string_view kSessionSuperseded = "SESSION_SUPERSEDED";
inline constexpr absl::string_view kSessionNotActive = "SESSION_NOT_ACTIVE";
inline constexpr absl::string_view kConsumerRemoved = "CONSUMER_REMOVED";
inline constexpr absl::string_view kConsumerDetached = "CONSUMER_DETACHED";
inline constexpr absl::string_view kConsumerNotFound = "CONSUMER_NOT_FOUND";
inline constexpr absl::string_view kStreamNotFound = "STREAM_NOT_FOUND";
inline constexpr absl::string_view kStartBelowCheckpoint = "START_BELOW_CHECKPOINT";
inline constexpr absl::string_view kStartNotHeld = "START_NOT_HELD";
inline constexpr absl::string_view kEphemeralFellBehind = "EPHEMERAL_FELL_BEHIND";
inline constexpr absl::string_view kEphemeralNotAcked = "EPHEMERAL_NOT_ACKED";
inline constexpr absl::string_view kAckNotDelivered = "ACK_NOT_DELIVERED";
inline constexpr absl::string_view kResetTargetInvalid = "RESET_TARGET_INVALID";
inline constexpr absl::string_view kSlotLost = "SLOT_LOST";
inline constexpr absl::string_view kSlotReplaced = "SLOT_REPLACED";
inline constexpr absl::string_view kSlotNotFound = "SLOT_NOT_FOUND";
inline constexpr absl::string_view kStreamFailed = "STREAM_FAILED";
inline constexpr absl::string_view kInvalidRequest = "INVALID_REQUEST";
inline constexpr absl::string_view kUnauthenticated = "UNAUTHENTICATED";
inline constexpr absl::string_view kPermissionDenied = "PERMISSION_DENIED";
inline constexpr absl::string_view kBackfillNotFound = "BACKFILL_NOT_FOUND";
inline constexpr absl::string_view kBackfillRunning = "BACKFILL_RUNNING";
inline constexpr absl::string_view kTableNotBackfillable = "TABLE_NOT_BACKFILLABLE";
inline constexpr absl::string_view kSlotShared = "SLOT_SHARED";
// Sent for an error no more specific reason was attached to.
inline constexpr absl::string_view kOther = "OTHER";

// Every reason above, for the test that keeps them equal to the proto's enum.
std::vector<absl::string_view> AllReasons();

// `status` with `reason` attached (OK stays OK).
absl::Status WithReason(absl::Status status, absl::string_view reason);

// `status` with `reason` and context for it (e.g. {"stream", name}), which the
// server sends as ErrorInfo.metadata. Keep values to names and ids, never data.
absl::Status WithReason(absl::Status status, absl::string_view reason,
                        std::vector<std::pair<std::string, std::string>> metadata);

// The reason attached to `status`, "" if none.
std::string ReasonOf(const absl::Status& status);

// The metadata attached with the reason, in no particular order.
std::vector<std::pair<std::string, std::string>> ReasonMetadataOf(const absl::Status& status);

}  // namespace walfeed::replication::reason

#endif  // WALFEED_REPLICATION_ERROR_REASON_H_
