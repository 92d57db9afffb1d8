// What a walfeed server's error says beyond its code: the stable reason
// (google.rpc.ErrorInfo) and, when a retry is right, how long to wait first
// (google.rpc.RetryInfo). walfeed.v1's ErrorReason enum documents each reason.
//
// Subscriber keeps both on the statuses it returns and hands to on_retry, so a
// caller branches on ErrorReason(status) == "SESSION_SUPERSEDED" instead of on
// message text.
#ifndef WALFEED_CLIENT_INCLUDE_WALFEED_ERROR_DETAILS_H_
#define WALFEED_CLIENT_INCLUDE_WALFEED_ERROR_DETAILS_H_

#include <optional>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "grpcpp/support/status.h"

namespace walfeed {

// `status` as an absl::Status with `what` before its message and the server's
// reason and retry delay kept (both read from the grpc-status-details-bin
// trailer; a status without valid details converts without them).
absl::Status StatusFromGrpc(const grpc::Status& status, absl::string_view what);

// The server's reason, e.g. "SESSION_SUPERSEDED"; "" when the error came with
// none (made by gRPC itself, or by an older server).
std::string ErrorReason(const absl::Status& status);

// The delay the server asked for before a retry; nullopt when it did not say a
// retry is right.
std::optional<absl::Duration> RetryDelay(const absl::Status& status);

}  // namespace walfeed

#endif  // WALFEED_CLIENT_INCLUDE_WALFEED_ERROR_DETAILS_H_
