// Counting the events of a Subscribe response frame without parsing them: the
// fan-out benchmark measures the server's capacity to deliver, so its clients
// only walk the frame's wire format (SubscribeResponse.events = field 2, an
// EventBatch whose field 1 repeats one length-delimited ChangeEvent per event)
// and read each event's id, its first field, to ack with.
#ifndef WALFEED_BENCH_FRAME_COUNT_H_
#define WALFEED_BENCH_FRAME_COUNT_H_

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace walfeed::bench {

struct FrameCount {
  bool valid = false;    // False: truncated or not protobuf wire format.
  bool events = false;   // An `events` frame (else `started`, `progress`, ...).
  uint64_t count = 0;    // Events in it.
  std::string last_id;   // The last event's id (ChangeEvent field 1), for acks.
};

// `pieces` are the frame's bytes in order, split anywhere (gRPC's slices).
FrameCount CountFrameEvents(const std::vector<std::string_view>& pieces);

}  // namespace walfeed::bench

#endif  // WALFEED_BENCH_FRAME_COUNT_H_
