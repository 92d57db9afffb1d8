// walfeed_drain: the benchmark drain client. Subscribes to one walfeed stream
// with large batches and a large unacked window, counts INSERT/UPDATE/DELETE
// events and their serialized size, acks cumulatively (every --ack-every events
// or --ack-interval-ms, on a separate thread so reading never waits for an ack)
// and stops at an end LSN with the peer harness's stop rule:
//
//   * an event whose transaction commits at or after the end LSN is past the end:
//     stop before it (not counted). The end LSN is a WAL insert position taken
//     after the last measured commit, so every measured transaction's commit
//     record starts before it;
//   * a `progress` frame (sent only while the session has nothing to deliver)
//     whose server_wal_lsn is at or beyond the end LSN, while the unacked window
//     is open: the server has read the slot up to the end and every event up to
//     it was already delivered. (walfeed raises server_wal_lsn from keepalives and
//     from each commit's end LSN only after buffering that transaction's events.)
//
// It uses the generated gRPC stub rather than walfeed::Subscriber because the
// stop rule needs the `progress` frames, which Subscriber does not expose.
// Prints one JSON line of counters on stdout; diagnostics go to stderr.
//
//   walfeed_drain --server 127.0.0.1:PORT --stream bench --consumer drain
//                 --end-lsn 0/5A3C1D8 [--batch 1024] [--window 200000]
//                 [--ack-every 50000] [--ack-interval-ms 1000] [--timeout-s 600]
#include <grpcpp/grpcpp.h>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <thread>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_format.h"
#include "absl/synchronization/mutex.h"
#include "walfeed/event_id.h"
#include "walfeed/v1/change_stream.grpc.pb.h"
#include "walfeed/v1/change_stream.pb.h"

namespace {

using Clock = std::chrono::steady_clock;
namespace v1 = walfeed::v1;

struct Flags {
  std::string server = "127.0.0.1:50051";
  std::string stream = "bench";
  std::string consumer = "drain";
  std::string end_lsn;
  uint32_t batch = 1024;
  uint32_t window = 200000;
  uint64_t window_bytes = uint64_t{64} << 30;  // The server's maximum: bytes never bind.
  uint32_t ack_every = 50000;
  int ack_interval_ms = 1000;
  int timeout_s = 600;
};

[[noreturn]] void Usage(const std::string& why) {
  std::fprintf(stderr,
               "walfeed_drain: %s\nusage: walfeed_drain --end-lsn X/Y [--server HOST:PORT] "
               "[--stream NAME] [--consumer NAME] [--batch N] [--window N] [--ack-every N] "
               "[--ack-interval-ms MS] [--timeout-s S]\n",
               why.c_str());
  std::exit(2);
}

template <typename T>
T ParseNumber(const std::string& flag, const std::string& text) {
  T value{};
  if (!absl::SimpleAtoi(text, &value) || value <= 0) Usage(flag + ": not a positive number");
  return value;
}

Flags ParseFlags(int argc, char** argv) {
  Flags flags;
  for (int i = 1; i < argc; ++i) {
    const std::string flag = argv[i];
    if (i + 1 >= argc) Usage(flag + " needs a value");
    const std::string value = argv[++i];
    if (flag == "--server") {
      flags.server = value;
    } else if (flag == "--stream") {
      flags.stream = value;
    } else if (flag == "--consumer") {
      flags.consumer = value;
    } else if (flag == "--end-lsn") {
      flags.end_lsn = value;
    } else if (flag == "--batch") {
      flags.batch = ParseNumber<uint32_t>(flag, value);
    } else if (flag == "--window") {
      flags.window = ParseNumber<uint32_t>(flag, value);
    } else if (flag == "--ack-every") {
      flags.ack_every = ParseNumber<uint32_t>(flag, value);
    } else if (flag == "--ack-interval-ms") {
      flags.ack_interval_ms = ParseNumber<int>(flag, value);
    } else if (flag == "--timeout-s") {
      flags.timeout_s = ParseNumber<int>(flag, value);
    } else {
      Usage("unknown flag " + flag);
    }
  }
  if (flags.end_lsn.empty()) Usage("--end-lsn is required");
  return flags;
}

// "X/Y" -> 64-bit LSN, using EventId's parser (one accepted form everywhere).
uint64_t ParseLsn(const std::string& text) {
  absl::StatusOr<walfeed::EventId> id = walfeed::EventId::Parse(text + ":0");
  if (!id.ok()) Usage("bad LSN \"" + text + "\": " + std::string(id.status().message()));
  return id->commit_lsn();
}

// Sends cumulative acks from its own thread: Post() only records the newest id,
// so a slow ack never holds up reading and acks coalesce.
class Acker {
 public:
  Acker(v1::ChangeStream::Stub* stub, std::string stream, std::string consumer,
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
  void Loop() {
    for (;;) {
      std::string id;
      bool last = false;
      {
        absl::MutexLock lock(&mu_);
        mu_.Await(absl::Condition(this, &Acker::ReadyLocked));
        id.swap(pending_);
        last = done_;
      }
      if (!id.empty()) Send(id);
      if (last) {
        absl::MutexLock lock(&mu_);
        if (pending_.empty()) return;
      }
    }
  }

  bool ReadyLocked() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return done_ || !pending_.empty();
  }

  void Send(const std::string& id) {
    v1::AckRequest request;
    request.set_stream(stream_);
    request.set_consumer(consumer_);
    request.set_session_id(session_id_);
    request.set_event_id(id);
    v1::AckResponse response;
    grpc::ClientContext context;
    context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(30));
    const grpc::Status status = stub_->Ack(&context, request, &response);
    absl::MutexLock lock(&mu_);
    if (status.ok()) {
      ++sent_;
    } else {
      ++failed_;
      std::fprintf(stderr, "walfeed_drain: ack %s failed: %d %s\n", id.c_str(),
                   static_cast<int>(status.error_code()), status.error_message().c_str());
    }
  }

  v1::ChangeStream::Stub* const stub_;
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

double Seconds(Clock::duration d) { return std::chrono::duration<double>(d).count(); }

int Run(const Flags& flags) {
  const uint64_t end = ParseLsn(flags.end_lsn);
  const Clock::time_point t_start = Clock::now();
  const Clock::time_point give_up = t_start + std::chrono::seconds(flags.timeout_s);

  grpc::ChannelArguments args;
  args.SetMaxReceiveMessageSize(256 << 20);
  // The server is started just before this client: retry the connection every
  // 10-50 ms instead of gRPC's default 1 s initial backoff.
  args.SetInt(GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS, 10);
  args.SetInt(GRPC_ARG_MIN_RECONNECT_BACKOFF_MS, 10);
  args.SetInt(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS, 50);
  std::shared_ptr<grpc::Channel> channel =
      grpc::CreateCustomChannel(flags.server, grpc::InsecureChannelCredentials(), args);
  std::unique_ptr<v1::ChangeStream::Stub> stub = v1::ChangeStream::NewStub(channel);

  v1::SubscribeRequest request;
  request.set_stream(flags.stream);
  request.set_consumer(flags.consumer);
  request.set_max_batch_events(flags.batch);
  request.set_max_batch_bytes(2 << 20);
  request.set_max_unacked_events(flags.window);
  request.set_max_unacked_bytes(flags.window_bytes);
  request.set_progress_interval_ms(10);

  // The server may still be starting or connecting to PostgreSQL: retry
  // UNAVAILABLE until the first frame arrives.
  std::unique_ptr<grpc::ClientContext> context;
  std::unique_ptr<grpc::ClientReader<v1::SubscribeResponse>> reader;
  v1::SubscribeResponse frame;
  int subscribe_attempts = 0;
  for (;;) {
    ++subscribe_attempts;
    context = std::make_unique<grpc::ClientContext>();
    context->set_wait_for_ready(true);
    context->set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(flags.timeout_s));
    reader = stub->Subscribe(context.get(), request);
    if (reader->Read(&frame) && frame.has_started()) break;
    const grpc::Status status = reader->Finish();
    if (status.error_code() != grpc::StatusCode::UNAVAILABLE || Clock::now() >= give_up) {
      std::fprintf(stderr, "walfeed_drain: Subscribe failed: %d %s\n",
                   static_cast<int>(status.error_code()), status.error_message().c_str());
      return 1;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  const Clock::time_point t_subscribed = Clock::now();
  Acker acker(stub.get(), flags.stream, flags.consumer, frame.started().session_id());

  uint64_t inserts = 0, updates = 0, deletes = 0, other = 0, bytes = 0, batches = 0;
  uint64_t progress_frames = 0;
  uint32_t since_ack = 0;
  std::string last_id;
  std::string stop_reason;
  Clock::time_point t_first{};
  Clock::time_point t_last_event{};
  Clock::time_point t_first_progress_after{};
  uint64_t progress_after_last = 0;
  Clock::time_point next_ack = Clock::now() + std::chrono::milliseconds(flags.ack_interval_ms);
  while (stop_reason.empty()) {
    if (!reader->Read(&frame)) {
      stop_reason = "stream_ended";
      break;
    }
    if (frame.has_events()) {
      ++batches;
      if (t_first == Clock::time_point{}) t_first = Clock::now();
      for (const v1::ChangeEvent& event : frame.events().events()) {
        if (event.commit_lsn() >= end) {
          stop_reason = "past_end";
          break;
        }
        switch (event.op()) {
          case v1::OPERATION_INSERT: ++inserts; break;
          case v1::OPERATION_UPDATE: ++updates; break;
          case v1::OPERATION_DELETE: ++deletes; break;
          default: ++other; continue;
        }
        bytes += event.ByteSizeLong();
        ++since_ack;
        t_last_event = Clock::now();
        t_first_progress_after = Clock::time_point{};
        progress_after_last = 0;
      }
      const int n = frame.events().events_size();
      if (stop_reason.empty() && n > 0) last_id = frame.events().events(n - 1).id();
      if (stop_reason.empty() && !last_id.empty() &&
          (since_ack >= flags.ack_every || Clock::now() >= next_ack)) {
        acker.Post(last_id);
        since_ack = 0;
        next_ack = Clock::now() + std::chrono::milliseconds(flags.ack_interval_ms);
      }
    } else if (frame.has_progress()) {
      ++progress_frames;
      // How the stop rule was met: the first progress frame after the last
      // event, and how many came before one carried the end position.
      if (t_last_event != Clock::time_point{} && t_first_progress_after == Clock::time_point{}) {
        t_first_progress_after = Clock::now();
      }
      if (t_last_event != Clock::time_point{}) ++progress_after_last;
      const v1::Progress& progress = frame.progress();
      if (!progress.server_wal_lsn().empty() && ParseLsn(progress.server_wal_lsn()) >= end &&
          progress.unacked_events() < flags.window) {
        stop_reason = "progress";
      }
    }
    if (Clock::now() >= give_up) stop_reason = "timeout";
  }
  // The last events of a batch that crossed the end are past it; ack what was
  // counted (the harness's peers send a final ack too), then end the call.
  if (stop_reason == "past_end") {
    // last_id is the last counted id only if the batch had no counted events
    // after it; recompute from the frame.
    for (const v1::ChangeEvent& event : frame.events().events()) {
      if (event.commit_lsn() >= end) break;
      last_id = event.id();
    }
  }
  if (!last_id.empty()) acker.Post(last_id);
  acker.Finish();
  const Clock::time_point t_end = Clock::now();
  context->TryCancel();
  while (reader->Read(&frame)) {
  }
  const grpc::Status finished = reader->Finish();
  if (stop_reason == "stream_ended") {
    std::fprintf(stderr, "walfeed_drain: stream ended: %d %s\n",
                 static_cast<int>(finished.error_code()), finished.error_message().c_str());
  }
  const uint64_t events = inserts + updates + deletes;
  std::printf(
      "{\"events\": %llu, \"bytes\": %llu, \"inserts\": %llu, \"updates\": %llu, "
      "\"deletes\": %llu, \"other_events\": %llu, \"batches\": %llu, \"progress_frames\": %llu, "
      "\"acks\": %d, \"ack_failures\": %d, \"stop_reason\": \"%s\", \"last_id\": \"%s\", "
      "\"subscribe_attempts\": %d, \"subscribe_s\": %.4f, \"first_event_after_s\": %.4f, "
      "\"last_event_after_s\": %.4f, \"first_progress_after_last_event_s\": %.4f, "
      "\"progress_after_last_event\": %llu, \"internal_s\": %.4f}\n",
      static_cast<unsigned long long>(events), static_cast<unsigned long long>(bytes),
      static_cast<unsigned long long>(inserts), static_cast<unsigned long long>(updates),
      static_cast<unsigned long long>(deletes), static_cast<unsigned long long>(other),
      static_cast<unsigned long long>(batches), static_cast<unsigned long long>(progress_frames),
      acker.sent(), acker.failed(), stop_reason.c_str(), last_id.c_str(), subscribe_attempts,
      Seconds(t_subscribed - t_start),
      Seconds((t_first == Clock::time_point{} ? t_end : t_first) - t_start),
      Seconds((t_last_event == Clock::time_point{} ? t_end : t_last_event) - t_start),
      t_first_progress_after == Clock::time_point{} || t_last_event == Clock::time_point{}
          ? -1.0
          : Seconds(t_first_progress_after - t_last_event),
      static_cast<unsigned long long>(progress_after_last), Seconds(t_end - t_start));
  std::fflush(stdout);
  const bool ok = stop_reason == "past_end" || stop_reason == "progress";
  return ok && acker.failed() == 0 ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) { return Run(ParseFlags(argc, argv)); }
