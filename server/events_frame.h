// EventsFrame: the wire bytes of a SubscribeResponse carrying an `events` batch,
// composed from ChangeEvents that are already serialized.
//
// The server buffers each event serialized once (stream_buffer.h). Parsing it back
// for every session only to have gRPC serialize it again cost more CPU than
// converting it in the first place. Protobuf encodes a message-typed field as
// (tag, length, bytes), and a repeated one as that per element, so a batch is the
// concatenation of (tag, length, event) and the frame wraps the batch once more.
// The result is byte-for-byte what serializing the parsed messages gives (tested).
#ifndef WALFEED_SERVER_EVENTS_FRAME_H_
#define WALFEED_SERVER_EVENTS_FRAME_H_

#include <string>

#include "absl/strings/string_view.h"
#include "absl/types/span.h"

namespace walfeed::server {

// Replaces `*frame` with SubscribeResponse{events: EventBatch{events: [...],
// passed, relations: [...]}} where each element of `events` is a serialized
// walfeed.v1.ChangeEvent and each of `relations` a serialized
// walfeed.v1.RelationShape (`passed` is left out when empty, as serializing
// leaves out an empty string).
void ComposeEventsFrame(absl::Span<const std::string* const> events, std::string* frame,
                        absl::string_view passed = {},
                        absl::Span<const std::string* const> relations = {});

}  // namespace walfeed::server

#endif  // WALFEED_SERVER_EVENTS_FRAME_H_
