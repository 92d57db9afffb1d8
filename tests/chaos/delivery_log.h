// The consumer's durable record of what it was delivered and what the server
// confirmed, one text line per record, appended and fsynced by the consumer
// child before it lets the batch be acked (so a kill -9 can only lose records of
// events that were never acked, which the server must deliver again):
//
//   P <mono_ns> <pid>                       the process started
//   S <mono_ns> <session> <checkpoint|-> <start_after|->
//                                           a session went live (Started frame)
//   E <session> <id> <payload_hash> <sig>   one delivered event
//   A <mono_ns> <acked_id> <checkpoint>     an ack became durable (server replied)
//   R <mono_ns> <code>                      the session ended; the client retries
//   X <mono_ns> <code> <message...>         Run returned
//
// mono_ns is CLOCK_MONOTONIC, shared by every process on the machine, so records
// of two processes of one consumer (a takeover) can be ordered.
#ifndef WALFEED_TESTS_CHAOS_DELIVERY_LOG_H_
#define WALFEED_TESTS_CHAOS_DELIVERY_LOG_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "walfeed/v1/change_stream.pb.h"

namespace walfeed::chaos {

// Logical messages the writer and the verifier emit. Markers are not changes:
// they tell the verifier that a consumer has caught up with a known moment.
inline constexpr char kChangePrefix[] = "chaos";
inline constexpr char kMarkPrefix[] = "chaos-mark";

// What the writer committed, as a change's content identifies it: "<table>:<op>:<seq>"
// (e.g. "chaos_a:I:42", "chaos_b:D:17" for the row version with seq 17,
// "msg:M:43"), "mark:<n>" for a marker, "-" when the event is none of these.
std::string Signature(const walfeed::v1::ChangeEvent& event);

// FNV-1a over the event's deterministic serialization: stable across processes,
// so a redelivery's payload can be compared with the first delivery's.
uint64_t PayloadHash(const walfeed::v1::ChangeEvent& event);

int64_t MonotonicNanos();

struct LogRecord {
  char kind = 0;  // P S E A R X
  int64_t mono_ns = 0;
  std::string session;
  std::string id;          // E: the event; A: the acked id.
  std::string checkpoint;  // S, A ("" for "-").
  std::string start_after;  // S: where the session's events start ("" for "-").
  uint64_t hash = 0;
  std::string signature;
  std::string code;  // R, X
  std::string message;
};

// Reads a log; a torn last line (the process was killed mid-write) is dropped,
// which is safe because its batch was never acked.
absl::StatusOr<std::vector<LogRecord>> ReadLog(const std::string& path);

}  // namespace walfeed::chaos

#endif  // WALFEED_TESTS_CHAOS_DELIVERY_LOG_H_
