// walfeed_fanout: N subscribers on one stream, each a new durable consumer
// starting at the oldest event the server holds, each on its own connection
// and thread, each receiving --events events. They count events by walking
// the frames' wire format (frame_count.h) and never parse an event, so the
// figure is the server's capacity to deliver, not the clients' parsing. Each
// acks cumulatively every --ack-every events, with an unacked window of four
// times that (0: never acks, and the window is --events).
//
// All subscribers connect first, then start together, and none acks before
// every one has subscribed (see Registration); the JSON line gives the
// time from that start to the last subscriber's last event, the aggregate
// events/s (subscribers x events / that time) and the spread per subscriber.
// A subscriber that loses its connection subscribes again, as a consumer
// would, and goes on counting after its last ack ("reconnects" in the line;
// stderr says how each lost it).
//
//   walfeed_fanout --server 127.0.0.1:PORT --stream fan --subscribers 64
//                  --events 200000 [--ack-every 10000] [--consumer-prefix fan]
//                  [--timeout-s 300]
#include <grpcpp/generic/generic_stub.h>
#include <grpcpp/grpcpp.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "absl/synchronization/notification.h"
#include "bench_client.h"
#include "frame_count.h"
#include "walfeed/v1/change_stream.grpc.pb.h"
#include "walfeed/v1/change_stream.pb.h"

namespace {

using Clock = std::chrono::steady_clock;
namespace v1 = walfeed::v1;

struct Flags {
  std::string server = "127.0.0.1:50051";
  std::string stream = "fan";
  std::string consumer_prefix = "fan";
  int subscribers = 1;
  uint64_t events = 0;
  uint64_t ack_every = 10000;
  int timeout_s = 300;
};

Flags ParseFlags(int argc, char** argv) {
  walfeed::bench::FlagArgs args(argc, argv, "walfeed_fanout",
                                "--events N [--subscribers N] [--ack-every N|0] "
                                "[--server HOST:PORT] [--stream NAME] [--consumer-prefix NAME] "
                                "[--timeout-s S]");
  Flags flags;
  while (args.Next()) {
    if (args.Is("--server")) {
      flags.server = args.text();
    } else if (args.Is("--stream")) {
      flags.stream = args.text();
    } else if (args.Is("--consumer-prefix")) {
      flags.consumer_prefix = args.text();
    } else if (args.Is("--subscribers")) {
      flags.subscribers = args.Positive<int>();
    } else if (args.Is("--events")) {
      flags.events = args.Positive<uint64_t>();
    } else if (args.Is("--ack-every")) {
      flags.ack_every = args.text() == "0" ? 0 : args.Positive<uint64_t>();
    } else if (args.Is("--timeout-s")) {
      flags.timeout_s = args.Positive<int>();
    } else {
      args.Fail("unknown flag " + args.flag());
    }
  }
  if (flags.events == 0) args.Fail("--events is required");
  if (flags.events > 10000000) args.Fail("--events: at most 10,000,000 (the unacked window)");
  return flags;
}

struct Outcome {
  uint64_t events = 0;
  uint64_t frames = 0;
  uint64_t acks = 0;
  uint64_t acked_events = 0;  // Events up to the last acknowledged Ack.
  uint64_t reconnects = 0;    // New sessions after a lost connection.
  Clock::time_point done{};
  std::string error;
  std::string last_loss;  // How the last lost connection showed.
};

// Every subscriber is a consumer the server learns of when it subscribes, and
// the server keeps events only for the consumers it knows: one that acked
// before the last had subscribed let the server drop what that one had not
// received yet (it then starts after the oldest event still held, as a new
// consumer does). So no subscriber acks until every one has had its first
// session started, or given up. It goes on reading meanwhile (the server
// stops at its unacked window, and progress frames, at least one a second,
// bring it back to acking): a subscriber that stopped reading for that long
// could have its connection dropped by the server host's TCP user timeout.
class Registration {
 public:
  explicit Registration(int subscribers) : waiting_(subscribers) {}

  // Once per subscriber: its first session started, or it ended without one.
  void Done() { waiting_.fetch_sub(1); }
  bool All() const { return waiting_.load() <= 0; }

 private:
  std::atomic<int> waiting_;
};

// One completion-queue step; false when the operation failed.
bool Step(grpc::CompletionQueue& cq, int expected_tag) {
  void* tag = nullptr;
  bool ok = false;
  if (!cq.Next(&tag, &ok)) return false;
  return ok && tag == reinterpret_cast<void*>(static_cast<intptr_t>(expected_tag));
}

class Subscriber {
 public:
  Subscriber(const Flags& flags, int index, Registration* registration)
      : flags_(flags),
        index_(index),
        registration_(registration),
        channel_(walfeed::bench::MakeChannel(flags.server, index + 1)) {}

  bool Connect(Clock::time_point deadline) {
    return channel_->WaitForConnected(std::chrono::system_clock::now() +
                                      (deadline - Clock::now()));
  }

  // Subscribes and counts until --events have arrived. A lost connection
  // (UNAVAILABLE) is followed by a new session, as any consumer would: the
  // server resumes after the consumer's last ack, and counting goes on from
  // there.
  Outcome Run(Clock::time_point deadline) {
    Outcome out;
    for (;;) {
      const SessionEnd end = RunSession(deadline, &out);
      Register();  // Its first session never started: not waited for.
      if (end != SessionEnd::kConnectionLost) break;
      if (++out.reconnects > kMaxReconnects) {
        out.error = "lost its connection " + std::to_string(out.reconnects) +
                    " times; the last: " + out.last_loss;
        break;
      }
    }
    out.done = Clock::now();
    return out;
  }

 private:
  // Counts this subscriber in registration_ once.
  void Register() {
    if (registered_) return;
    registered_ = true;
    registration_->Done();
  }

  enum class SessionEnd { kDone, kFailed, kConnectionLost };
  static constexpr int kMaxReconnects = 5;

  SessionEnd RunSession(Clock::time_point deadline, Outcome* out) {
    v1::SubscribeRequest request;
    request.set_stream(flags_.stream);
    request.set_consumer(flags_.consumer_prefix + std::to_string(index_));
    request.set_start(v1::START_POSITION_EARLIEST);
    request.set_max_batch_events(1024);
    request.set_max_batch_bytes(2 << 20);
    // Acking: a window of four ack intervals (the server tracks each unacked
    // event of a session, about 24 bytes each). Not acking: all of it.
    request.set_max_unacked_events(static_cast<uint32_t>(
        flags_.ack_every > 0 ? std::min(flags_.events, 4 * flags_.ack_every) : flags_.events));
    request.set_max_unacked_bytes(uint64_t{64} << 30);
    request.set_progress_interval_ms(1000);
    grpc::Slice slice(request.SerializeAsString());
    grpc::ByteBuffer request_bytes(&slice, 1);

    grpc::GenericStub stub(channel_);
    grpc::CompletionQueue cq;
    grpc::ClientContext context;
    context.set_deadline(std::chrono::system_clock::now() + (deadline - Clock::now()));
    // After a lost connection the channel's first reconnect can fail (on a
    // host this busy its handshake can time out), leaving the channel in
    // TRANSIENT_FAILURE until its backoff retries; without waiting for ready
    // every new session in that time fails at once, and a subscriber used
    // up its reconnects within milliseconds. A consumer waits, up to its
    // deadline.
    context.set_wait_for_ready(true);
    std::unique_ptr<grpc::GenericClientAsyncReaderWriter> call =
        stub.PrepareCall(&context, "/walfeed.v1.ChangeStream/Subscribe", &cq);
    call->StartCall(reinterpret_cast<void*>(1));
    bool ok = Step(cq, 1);
    if (ok) call->Write(request_bytes, reinterpret_cast<void*>(2));
    ok = ok && Step(cq, 2);
    if (ok) call->WritesDone(reinterpret_cast<void*>(3));
    ok = ok && Step(cq, 3);
    grpc::ByteBuffer frame;
    std::vector<grpc::Slice> slices;
    std::vector<std::string_view> pieces;
    std::string session_id;
    uint64_t since_ack = 0;
    std::string last_id;  // The last event counted in this session.
    uint64_t session_frames = 0;
    bool stream_ended = false;  // The server (or the connection) ended it.
    grpc::Status ack_status;
    while (ok && out->events < flags_.events) {
      call->Read(&frame, reinterpret_cast<void*>(4));
      if (!Step(cq, 4)) {
        stream_ended = true;
        break;
      }
      slices.clear();
      pieces.clear();
      if (!frame.Dump(&slices).ok()) {
        out->error = "could not read a frame's bytes";
        break;
      }
      for (const grpc::Slice& s : slices) {
        pieces.emplace_back(reinterpret_cast<const char*>(s.begin()), s.size());
      }
      const walfeed::bench::FrameCount counted = walfeed::bench::CountFrameEvents(pieces);
      if (!counted.valid) {
        out->error = "a frame is not valid protobuf wire format";
        break;
      }
      ++out->frames;
      if (++session_frames == 1) {  // The `started` frame: parsed, for the session.
        v1::SubscribeResponse started;
        std::string bytes;
        for (std::string_view piece : pieces) bytes.append(piece);
        if (!started.ParseFromString(bytes) || !started.has_started()) {
          out->error = "the first frame of a session is not `started`";
          break;
        }
        session_id = started.started().session_id();
        Register();
        // Where this session starts: after an id this subscriber acked (or
        // tried to: an ack lost with the connection may have landed).
        const std::string& after = started.started().start_after();
        const auto known = counted_through_.find(after);
        if (!after.empty() && known == counted_through_.end()) {
          out->error = "a session resumed after " + after + ", which this subscriber never acked";
          break;
        }
        out->events = after.empty() ? 0 : known->second;
      }
      out->events += counted.count;
      since_ack += counted.count;
      if (!counted.last_id.empty()) last_id = counted.last_id;
      all_registered_ = all_registered_ || registration_->All();
      if (flags_.ack_every > 0 && since_ack >= flags_.ack_every && !last_id.empty() &&
          all_registered_) {
        since_ack = 0;
        counted_through_[last_id] = out->events;
        ack_status = Ack(session_id, last_id);
        if (!ack_status.ok()) break;
        ++out->acks;
        out->acked_events = out->events;
      }
    }
    // Cancelled only when this side stopped reading: a stream that ended on
    // its own reports why (a cancel first would report CANCELLED instead).
    if (!stream_ended) context.TryCancel();
    grpc::Status status;
    call->Finish(&status, reinterpret_cast<void*>(5));
    cq.Shutdown();
    void* tag;
    bool ignored;
    while (cq.Next(&tag, &ignored)) {
    }
    if (!out->error.empty()) return SessionEnd::kFailed;
    if (!ack_status.ok()) status = ack_status;
    if (out->events >= flags_.events) return SessionEnd::kDone;
    const std::string why = (ack_status.ok() ? "the stream ended after " : "an ack failed after ") +
                            std::to_string(out->events) + " events: " +
                            std::to_string(status.error_code()) + " " + status.error_message();
    if (status.error_code() == grpc::StatusCode::UNAVAILABLE) {
      out->last_loss = why;
      return SessionEnd::kConnectionLost;
    }
    out->error = why;
    return SessionEnd::kFailed;
  }

  grpc::Status Ack(const std::string& session_id, const std::string& id) {
    if (!ack_stub_) ack_stub_ = v1::ChangeStream::NewStub(channel_);
    v1::AckRequest request;
    request.set_stream(flags_.stream);
    request.set_consumer(flags_.consumer_prefix + std::to_string(index_));
    request.set_session_id(session_id);
    request.set_event_id(id);
    v1::AckResponse response;
    grpc::ClientContext context;
    context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(30));
    return ack_stub_->Ack(&context, request, &response);
  }

  const Flags& flags_;
  const int index_;
  Registration* const registration_;
  bool registered_ = false;      // Register() counted it.
  bool all_registered_ = false;  // Registration::All() was true once (it stays so).
  std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<v1::ChangeStream::Stub> ack_stub_;
  // Events counted through each id this subscriber acked or tried to ack.
  std::map<std::string, uint64_t> counted_through_;
};

double Seconds(Clock::duration d) { return std::chrono::duration<double>(d).count(); }

int Run(const Flags& flags) {
  const Clock::time_point connect_by = Clock::now() + std::chrono::seconds(30);
  std::vector<std::unique_ptr<Subscriber>> subscribers;
  Registration registration(flags.subscribers);
  for (int i = 0; i < flags.subscribers; ++i) {
    subscribers.push_back(std::make_unique<Subscriber>(flags, i, &registration));
    if (!subscribers.back()->Connect(connect_by)) {
      std::fprintf(stderr, "walfeed_fanout: subscriber %d could not connect to %s\n", i,
                   flags.server.c_str());
      return 1;
    }
  }
  absl::Notification go;
  std::vector<Outcome> outcomes(flags.subscribers);
  std::vector<std::thread> threads;
  Clock::time_point start;
  for (int i = 0; i < flags.subscribers; ++i) {
    threads.emplace_back([&, i] {
      go.WaitForNotification();
      outcomes[i] = subscribers[i]->Run(start + std::chrono::seconds(flags.timeout_s));
    });
  }
  start = Clock::now();
  go.Notify();
  for (std::thread& t : threads) t.join();

  double slowest = 0, fastest = 1e18;
  uint64_t delivered = 0, frames = 0, acks = 0, acked = 0, reconnects = 0;
  int failed = 0;
  for (int i = 0; i < flags.subscribers; ++i) {
    const Outcome& o = outcomes[i];
    delivered += o.events;
    frames += o.frames;
    acks += o.acks;
    acked += o.acked_events;
    reconnects += o.reconnects;
    if (o.reconnects > 0 && o.error.empty()) {
      std::fprintf(stderr,
                   "walfeed_fanout: subscriber %d: subscribed again %llu time(s); the last "
                   "lost connection: %s\n",
                   i, static_cast<unsigned long long>(o.reconnects), o.last_loss.c_str());
    }
    if (!o.error.empty()) {
      ++failed;
      std::fprintf(stderr, "walfeed_fanout: subscriber %d: %s\n", i, o.error.c_str());
      continue;
    }
    slowest = std::max(slowest, Seconds(o.done - start));
    fastest = std::min(fastest, Seconds(o.done - start));
  }
  std::printf(
      "{\"subscribers\": %d, \"events_each\": %llu, \"delivered_events\": %llu, "
      "\"frames\": %llu, \"acks\": %llu, \"acked_events\": %llu, \"reconnects\": %llu, "
      "\"failed_subscribers\": %d, \"seconds\": %.4f, "
      "\"fastest_subscriber_s\": %.4f, \"aggregate_events_per_s\": %.0f}\n",
      flags.subscribers, static_cast<unsigned long long>(flags.events),
      static_cast<unsigned long long>(delivered), static_cast<unsigned long long>(frames),
      static_cast<unsigned long long>(acks), static_cast<unsigned long long>(acked),
      static_cast<unsigned long long>(reconnects), failed,
      slowest, failed == flags.subscribers ? -1.0 : fastest,
      slowest > 0 ? static_cast<double>(delivered) / slowest : 0.0);
  std::fflush(stdout);
  return failed == 0 ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) { return Run(ParseFlags(argc, argv)); }
