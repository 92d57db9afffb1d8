// UnaryCalls: the unary calls workers are still answering, so a stopping server
// answers them itself.
//
// gRPC ends a call still open at its shutdown deadline with CANCELLED, which a
// client cannot tell from its own cancellation. Stop instead finishes every
// open call with the given status (UNAVAILABLE: retry elsewhere or later) and
// every later Open at once. Whichever of Stop and the worker's Finish comes
// first answers the call; the other does nothing. Because gRPC may free a
// call's request and response once it is answered, a worker copies its inputs
// before it starts and writes the response only inside Finish's `fill`.
// (Calls that reach gRPC after its own drain began are refused by gRPC,
// without details: UNAVAILABLE or CANCELLED.)
#ifndef WALFEED_SERVER_UNARY_CALLS_H_
#define WALFEED_SERVER_UNARY_CALLS_H_

#include <cstdint>
#include <optional>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/functional/function_ref.h"
#include "absl/synchronization/mutex.h"
#include "grpcpp/support/server_callback.h"
#include "grpcpp/support/status.h"

namespace walfeed::server {

class UnaryCalls {
 public:
  using Id = uint64_t;

  // Registers `reactor`'s call; nullopt when stopping (the call was finished
  // with the stop status).
  std::optional<Id> Open(grpc::ServerUnaryReactor* reactor) ABSL_LOCKS_EXCLUDED(mu_);

  // Whether the call still waits for its answer (work for a call Stop
  // answered can be skipped).
  bool IsOpen(Id id) const ABSL_LOCKS_EXCLUDED(mu_);

  // Unless Stop answered the call already: runs `fill` (writes the response)
  // and finishes it with `status`.
  void Finish(Id id, const grpc::Status& status, absl::FunctionRef<void()> fill)
      ABSL_LOCKS_EXCLUDED(mu_);
  void Finish(Id id, const grpc::Status& status) ABSL_LOCKS_EXCLUDED(mu_) {
    Finish(id, status, [] {});
  }

  // Finishes every open call with `status`, and every later one on Open.
  void Stop(const grpc::Status& status) ABSL_LOCKS_EXCLUDED(mu_);

 private:
  mutable absl::Mutex mu_;
  absl::flat_hash_map<Id, grpc::ServerUnaryReactor*> open_ ABSL_GUARDED_BY(mu_);
  Id next_ ABSL_GUARDED_BY(mu_) = 1;
  std::optional<grpc::Status> stopped_ ABSL_GUARDED_BY(mu_);
};

}  // namespace walfeed::server

#endif  // WALFEED_SERVER_UNARY_CALLS_H_
