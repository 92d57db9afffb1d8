// ToGrpc: an absl::Status from the stream layer as the gRPC status a client
// receives, with the machine-readable half attached.
//
// Code and message map one to one. Every error also carries, in the standard
// grpc-status-details-bin trailer, a google.rpc.Status holding a
// google.rpc.ErrorInfo (domain "walfeed.v1", the reason attached where the
// error was made, replication/error_reason.h, or OTHER) and, for the reasons a
// retry cures, a google.rpc.RetryInfo. The proto's ErrorReason enum documents
// each reason for clients.
#ifndef WALFEED_SERVER_ERROR_DETAILS_H_
#define WALFEED_SERVER_ERROR_DETAILS_H_

#include <optional>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "grpcpp/support/status.h"

namespace walfeed::server {

// The ErrorInfo domain of every walfeed error.
inline constexpr absl::string_view kErrorDomain = "walfeed.v1";

grpc::Status ToGrpc(const absl::Status& status);

// The delay a client should wait before retrying after an error with `reason`;
// nullopt when the error is definite (a retry gets the same answer).
std::optional<absl::Duration> RetryDelayFor(absl::string_view reason);

}  // namespace walfeed::server

#endif  // WALFEED_SERVER_ERROR_DETAILS_H_
