// walfeed_live: the live-latency client. Subscribes as a new durable consumer
// at the stream's head (START_POSITION_LATEST), parses every event, acks every
// --ack-interval-ms, and measures for each INSERT/UPDATE/DELETE event how long
// after its transaction's commit it arrived: receive wall-clock time minus the
// event's commit_time (PostgreSQL's commit timestamp, taken when the commit
// record is written, so WAL flush, walsender, walfeed and gRPC are all inside).
// The server, PostgreSQL and this client must share one clock (one host).
//
// Events arriving in the first --warmup-s seconds after the first event are
// not measured; it stops --duration-s seconds later and prints one JSON line:
// events and transactions measured, their rate, and latency p50/p90/p99/p99.9/
// max in milliseconds.
//
//   walfeed_live --server 127.0.0.1:PORT --stream live --consumer live1
//                --duration-s 10 [--warmup-s 2] [--ack-interval-ms 100]
//                [--timeout-s 60]
#include <grpcpp/grpcpp.h>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "bench_client.h"
#include "latency_summary.h"
#include "walfeed/v1/change_stream.grpc.pb.h"
#include "walfeed/v1/change_stream.pb.h"

namespace {

using Clock = std::chrono::steady_clock;
namespace v1 = walfeed::v1;

struct Flags {
  std::string server = "127.0.0.1:50051";
  std::string stream = "live";
  std::string consumer = "live";
  int duration_s = 10;
  int warmup_s = 2;
  int ack_interval_ms = 100;
  int timeout_s = 60;  // For the first event to arrive.
};

Flags ParseFlags(int argc, char** argv) {
  walfeed::bench::FlagArgs args(argc, argv, "walfeed_live",
                                "[--server HOST:PORT] [--stream NAME] [--consumer NAME] "
                                "[--duration-s S] [--warmup-s S] [--ack-interval-ms MS] "
                                "[--timeout-s S]");
  Flags flags;
  while (args.Next()) {
    if (args.Is("--server")) {
      flags.server = args.text();
    } else if (args.Is("--stream")) {
      flags.stream = args.text();
    } else if (args.Is("--consumer")) {
      flags.consumer = args.text();
    } else if (args.Is("--duration-s")) {
      flags.duration_s = args.Positive<int>();
    } else if (args.Is("--warmup-s")) {
      flags.warmup_s = args.Positive<int>();
    } else if (args.Is("--ack-interval-ms")) {
      flags.ack_interval_ms = args.Positive<int>();
    } else if (args.Is("--timeout-s")) {
      flags.timeout_s = args.Positive<int>();
    } else {
      args.Fail("unknown flag " + args.flag());
    }
  }
  return flags;
}

int Run(const Flags& flags) {
  const Clock::time_point give_up = Clock::now() + std::chrono::seconds(flags.timeout_s);
  std::unique_ptr<v1::ChangeStream::Stub> stub =
      v1::ChangeStream::NewStub(walfeed::bench::MakeChannel(flags.server));
  v1::SubscribeRequest request;
  request.set_stream(flags.stream);
  request.set_consumer(flags.consumer);
  request.set_start(v1::START_POSITION_LATEST);
  request.set_max_unacked_events(1000000);
  request.set_progress_interval_ms(100);  // Wakes the loop to check the time when idle.

  std::unique_ptr<grpc::ClientContext> context;
  std::unique_ptr<grpc::ClientReader<v1::SubscribeResponse>> reader;
  v1::SubscribeResponse frame;
  if (walfeed::bench::SubscribeWithRetry(stub.get(), flags.server, request, give_up,
                                         "walfeed_live", &context, &reader, &frame) == 0) {
    return 1;
  }
  walfeed::bench::Acker acker(stub.get(), flags.stream, flags.consumer,
                              frame.started().session_id());
  std::printf("{\"subscribed\": true}\n");  // Tells the driver to start its writers.
  std::fflush(stdout);

  std::vector<int64_t> latencies_us;
  uint64_t transactions = 0;
  std::string last_id;
  Clock::time_point first{}, measure_from{}, measure_until{};
  Clock::time_point next_ack = Clock::now() + std::chrono::milliseconds(flags.ack_interval_ms);
  std::string stop_reason;
  while (stop_reason.empty()) {
    if (!reader->Read(&frame)) {
      stop_reason = "stream_ended";
      break;
    }
    const Clock::time_point now = Clock::now();
    if (frame.has_events()) {
      const int64_t now_us = walfeed::bench::WallMicros();
      if (first == Clock::time_point{}) {
        first = now;
        measure_from = first + std::chrono::seconds(flags.warmup_s);
        measure_until = measure_from + std::chrono::seconds(flags.duration_s);
      }
      for (const v1::ChangeEvent& event : frame.events().events()) {
        if (event.op() != v1::OPERATION_INSERT && event.op() != v1::OPERATION_UPDATE &&
            event.op() != v1::OPERATION_DELETE) {
          continue;
        }
        if (now < measure_from) continue;
        const int64_t commit_us =
            event.commit_time().seconds() * 1000000 + event.commit_time().nanos() / 1000;
        latencies_us.push_back(now_us - commit_us);
        if (event.last_in_transaction()) ++transactions;
      }
      const int n = frame.events().events_size();
      if (n > 0) last_id = frame.events().events(n - 1).id();
    }
    if (!last_id.empty() && now >= next_ack) {
      acker.Post(last_id);
      next_ack = now + std::chrono::milliseconds(flags.ack_interval_ms);
    }
    if (first != Clock::time_point{} && now >= measure_until) stop_reason = "duration";
    if (first == Clock::time_point{} && now >= give_up) stop_reason = "no_events";
  }
  if (!last_id.empty()) acker.Post(last_id);
  acker.Finish();
  context->TryCancel();
  while (reader->Read(&frame)) {
  }
  reader->Finish();

  const std::string latency = walfeed::bench::LatencyFields(
      latencies_us, transactions, static_cast<double>(flags.duration_s));
  std::printf("{%s, \"acks\": %d, \"ack_failures\": %d, \"stop_reason\": \"%s\"}\n",
              latency.c_str(), acker.sent(), acker.failed(), stop_reason.c_str());
  std::fflush(stdout);
  return stop_reason == "duration" && acker.failed() == 0 ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) { return Run(ParseFlags(argc, argv)); }
