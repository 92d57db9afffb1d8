// StreamHealth: whether walfeed-server says the chaos stream is streaming, as its
// health service reports it: grpc.health.v1.Health/Check for
// "walfeed.v1.ChangeStream/<stream>", NOT_SERVING whenever the stream is not
// STREAMING. That is what a load balancer or an operator sees, so it is what
// the db faults time.
//
// The channel goes straight to the server's port, not through the consumers'
// proxy, which another fault may be stalling. Check never waits on PostgreSQL
// (the server answers health from memory), so it stays quick in a black hole.
#ifndef WALFEED_TESTS_CHAOS_STREAM_HEALTH_H_
#define WALFEED_TESTS_CHAOS_STREAM_HEALTH_H_

#include <grpcpp/grpcpp.h>

#include <memory>
#include <string>

namespace walfeed::chaos {

class StreamHealth {
 public:
  enum class State { kServing, kNotServing, kUnknown };  // Unknown: no answer.

  StreamHealth(int port, const std::string& stream);
  int port() const { return port_; }
  // One Check, with a 1 s deadline.
  State Check();

 private:
  const int port_;
  const std::string service_;
  std::shared_ptr<grpc::Channel> channel_;
};

}  // namespace walfeed::chaos

#endif  // WALFEED_TESTS_CHAOS_STREAM_HEALTH_H_
