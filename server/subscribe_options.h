// What a SubscribeRequest asks for, checked and merged over the server's
// defaults. Every knob has a documented range (session_limits.h); a value out of
// it is INVALID_ARGUMENT naming the field and the range, so a careless client
// learns its mistake instead of getting an accident of the implementation.
#ifndef WALFEED_SERVER_SUBSCRIBE_OPTIONS_H_
#define WALFEED_SERVER_SUBSCRIBE_OPTIONS_H_

#include "absl/status/statusor.h"
#include "server/session.h"
#include "server/session_limits.h"
#include "walfeed/v1/change_stream.pb.h"

namespace walfeed::server {

// Events frames stay under gRPC's default 4 MiB receive limit: a larger
// max_batch_bytes is accepted and capped to this (one larger event still goes
// alone).
inline constexpr uint32_t kBatchBytesCap = 3u << 20;

absl::StatusOr<SessionOptions> SessionOptionsFor(const walfeed::v1::SubscribeRequest& request,
                                                 const SessionLimits& defaults);

}  // namespace walfeed::server

#endif  // WALFEED_SERVER_SUBSCRIBE_OPTIONS_H_
