// Pieces shared by the benchmark clients (walfeed_drain, walfeed_live,
// walfeed_fanout): a channel that reconnects fast to a server started just
// before the client, a Subscribe that waits for the stream to be live, and an
// acker that never holds up reading.
#ifndef WALFEED_BENCH_BENCH_CLIENT_H_
#define WALFEED_BENCH_BENCH_CLIENT_H_

#include <grpcpp/grpcpp.h>

#include <chrono>
#include <memory>
#include <string>
#include <thread>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "flag_args.h"
#include "walfeed/v1/change_stream.grpc.pb.h"

namespace walfeed::bench {

// A plaintext channel with a 256 MiB receive limit that retries its
// connection every 10-50 ms instead of gRPC's default 1 s initial backoff.
// `distinct` > 0 gives the channel a connection of its own (gRPC otherwise
// shares one TCP connection among channels with equal arguments).
std::shared_ptr<grpc::Channel> MakeChannel(const std::string& server, int distinct = 0);

// Opens `request` on `stub` (a channel to `server`) and reads its first frame:
// first waits until `server` accepts connections, then retries UNAVAILABLE
// (the stream may still be connecting to PostgreSQL) every 5 ms until
// `give_up`. On success `*context`, `*reader` and `*started` hold the live
// call and its `started` frame and the number of attempts is returned; on
// failure the final status is printed to stderr (prefixed with `who`) and 0 is
// returned.
int SubscribeWithRetry(walfeed::v1::ChangeStream::Stub* stub, const std::string& server,
                       const walfeed::v1::SubscribeRequest& request,
                       std::chrono::steady_clock::time_point give_up, const char* who,
                       std::unique_ptr<grpc::ClientContext>* context,
                       std::unique_ptr<grpc::ClientReader<walfeed::v1::SubscribeResponse>>* reader,
                       walfeed::v1::SubscribeResponse* started);

// Sends cumulative acks from its own thread: Post() only records the newest id,
// so a slow ack never holds up reading and acks coalesce. Failures are counted
// and printed to stderr.
class Acker {
 public:
  Acker(walfeed::v1::ChangeStream::Stub* stub, std::string stream, std::string consumer,
        std::string session_id)
      : stub_(stub),
        stream_(std::move(stream)),
        consumer_(std::move(consumer)),
        session_id_(std::move(session_id)),
        thread_([this] { Loop(); }) {}

  ~Acker() { Finish(); }
  Acker(const Acker&) = delete;
  Acker& operator=(const Acker&) = delete;

  void Post(const std::string& id) {
    absl::MutexLock lock(&mu_);
    pending_ = id;
  }

  // Sends what is pending, then stops the thread.
  void Finish() {
    {
      absl::MutexLock lock(&mu_);
      if (done_) return;
      done_ = true;
    }
    thread_.join();
  }

  int sent() const {
    absl::MutexLock lock(&mu_);
    return sent_;
  }
  int failed() const {
    absl::MutexLock lock(&mu_);
    return failed_;
  }

 private:
  void Loop();

  bool ReadyLocked() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return done_ || !pending_.empty();
  }

  void Send(const std::string& id);

  walfeed::v1::ChangeStream::Stub* const stub_;
  const std::string stream_;
  const std::string consumer_;
  const std::string session_id_;
  mutable absl::Mutex mu_;
  std::string pending_ ABSL_GUARDED_BY(mu_);
  bool done_ ABSL_GUARDED_BY(mu_) = false;
  int sent_ ABSL_GUARDED_BY(mu_) = 0;
  int failed_ ABSL_GUARDED_BY(mu_) = 0;
  std::thread thread_;  // Last: starts after the members it uses.
};

}  // namespace walfeed::bench

#endif  // WALFEED_BENCH_BENCH_CLIENT_H_
