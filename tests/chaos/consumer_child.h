// The consumer child: `walfeed_chaos consumer ...` runs one walfeed::Subscriber
// in its own process so the verifier can kill it with SIGKILL.
//
// It appends every delivered event to its delivery log (delivery_log.h) and
// fsyncs before the handler returns OK, so nothing it may ack is unrecorded. It
// reports on stdout, one line each: "started <session>", "n <events handled>",
// "mark <n>" for each marker message, "acked <id>" when an ack is durable, and "exit <code>" when Run returns.
// Commands on stdin: "stall <ms>" (the next handler call blocks that long: a
// slow consumer whose events stay unacked) and "stop" (Subscriber::Stop). End of
// stdin (the verifier died) also stops it.
#ifndef WALFEED_TESTS_CHAOS_CONSUMER_CHILD_H_
#define WALFEED_TESTS_CHAOS_CONSUMER_CHILD_H_

#include <cstdint>
#include <string>
#include <vector>

namespace walfeed::chaos {

struct ConsumerFlags {
  std::string server;
  std::string stream;
  std::string consumer;
  std::string log;
  uint64_t seed = 0;
  uint32_t ack_events = 0;       // 0: no count trigger.
  int ack_interval_ms = 0;       // 0: no time trigger.
  uint32_t max_unacked = 0;      // The session's unacked window (events).
};

std::vector<std::string> ConsumerArgv(const ConsumerFlags& flags);

// `args` are the arguments after "consumer". Returns the process exit code.
int RunConsumerChild(const std::vector<std::string>& args);

}  // namespace walfeed::chaos

#endif  // WALFEED_TESTS_CHAOS_CONSUMER_CHILD_H_
