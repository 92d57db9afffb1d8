// walfeed_drain: the benchmark drain client. Subscribes to one walfeed stream
// with large batches and a large unacked window, counts INSERT/UPDATE/DELETE (and READ)
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
//     is open and the last event received closed its transaction: the server
//     has read the slot up to the end and every event up to it was already
//     delivered. (walfeed raises server_wal_lsn from keepalives and from each
//     commit's end LSN only after buffering that transaction's events; but a
//     keepalive can arrive while a large transaction is being buffered, hence
//     the last condition.)
//
// It uses the generated gRPC stub rather than walfeed::Subscriber because the
// stop rule needs the `progress` frames, which Subscriber does not expose.
// Prints one JSON line of counters on stdout; diagnostics go to stderr.
//
//   walfeed_drain --server 127.0.0.1:PORT --stream bench --consumer drain
//                 --end-lsn 0/5A3C1D8 [--batch 1024] [--window 200000]
//                 [--ack-every 50000] [--ack-interval-ms 1000] [--timeout-s 600]
//                 [--event-form full|compact]
//
// --event-form compact subscribes with EVENT_FORM_COMPACT: it keeps the shapes
// each batch brings and checks that every compact event names one it has.
#include <grpcpp/grpcpp.h>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "bench_client.h"
#include "google/protobuf/arena.h"
#include "walfeed/event_id.h"
#include "walfeed/v1/change_stream.grpc.pb.h"
#include "walfeed/v1/change_stream.pb.h"

namespace {

using Clock = std::chrono::steady_clock;
namespace v1 = walfeed::v1;

constexpr size_t kArenaBlockBytes = 8 << 20;

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
  bool compact = false;
};

Flags ParseFlags(int argc, char** argv) {
  walfeed::bench::FlagArgs args(
      argc, argv, "walfeed_drain",
      "--end-lsn X/Y [--server HOST:PORT] [--stream NAME] [--consumer NAME] [--batch N] "
      "[--window N] [--ack-every N] [--ack-interval-ms MS] [--timeout-s S] "
      "[--event-form full|compact]");
  Flags flags;
  while (args.Next()) {
    if (args.Is("--server")) {
      flags.server = args.text();
    } else if (args.Is("--stream")) {
      flags.stream = args.text();
    } else if (args.Is("--consumer")) {
      flags.consumer = args.text();
    } else if (args.Is("--end-lsn")) {
      flags.end_lsn = args.text();
    } else if (args.Is("--batch")) {
      flags.batch = args.Positive<uint32_t>();
    } else if (args.Is("--window")) {
      flags.window = args.Positive<uint32_t>();
    } else if (args.Is("--ack-every")) {
      flags.ack_every = args.Positive<uint32_t>();
    } else if (args.Is("--ack-interval-ms")) {
      flags.ack_interval_ms = args.Positive<int>();
    } else if (args.Is("--timeout-s")) {
      flags.timeout_s = args.Positive<int>();
    } else if (args.Is("--event-form")) {
      if (args.text() != "full" && args.text() != "compact") {
        args.Fail("--event-form: full or compact, not " + args.text());
      }
      flags.compact = args.text() == "compact";
    } else {
      args.Fail("unknown flag " + args.flag());
    }
  }
  if (flags.end_lsn.empty()) args.Fail("--end-lsn is required");
  return flags;
}

// "X/Y" -> 64-bit LSN, using EventId's parser (one accepted form everywhere).
uint64_t ParseLsn(const std::string& text) {
  absl::StatusOr<walfeed::EventId> id = walfeed::EventId::Parse(text + ":0");
  if (!id.ok()) {
    std::fprintf(stderr, "walfeed_drain: bad LSN \"%s\": %s\n", text.c_str(),
                 std::string(id.status().message()).c_str());
    std::exit(2);
  }
  return id->commit_lsn();
}

double Seconds(Clock::duration d) { return std::chrono::duration<double>(d).count(); }

int Run(const Flags& flags) {
  const uint64_t end = ParseLsn(flags.end_lsn);
  const Clock::time_point t_start = Clock::now();
  const Clock::time_point give_up = t_start + std::chrono::seconds(flags.timeout_s);

  std::shared_ptr<grpc::Channel> channel = walfeed::bench::MakeChannel(flags.server);
  std::unique_ptr<v1::ChangeStream::Stub> stub = v1::ChangeStream::NewStub(channel);

  v1::SubscribeRequest request;
  request.set_stream(flags.stream);
  request.set_consumer(flags.consumer);
  request.set_max_batch_events(flags.batch);
  request.set_max_batch_bytes(2 << 20);
  request.set_max_unacked_events(flags.window);
  request.set_max_unacked_bytes(flags.window_bytes);
  request.set_progress_interval_ms(10);
  if (flags.compact) request.set_event_form(v1::EVENT_FORM_COMPACT);

  std::unique_ptr<grpc::ClientContext> context;
  std::unique_ptr<grpc::ClientReader<v1::SubscribeResponse>> reader;
  v1::SubscribeResponse first_frame;
  const int subscribe_attempts = walfeed::bench::SubscribeWithRetry(
      stub.get(), flags.server, request, give_up, "walfeed_drain", &context, &reader, &first_frame);
  if (subscribe_attempts == 0) return 1;
  const Clock::time_point t_subscribed = Clock::now();
  // The first block holds a 2 MiB frame's messages, so the arena rarely mallocs.
  const std::unique_ptr<char[]> arena_block(new char[kArenaBlockBytes]);
  google::protobuf::Arena arena(arena_block.get(), kArenaBlockBytes);
  walfeed::bench::Acker acker(stub.get(), flags.stream, flags.consumer,
                              first_frame.started().session_id());

  uint64_t inserts = 0, updates = 0, deletes = 0, reads = 0, other = 0, bytes = 0, batches = 0;
  uint64_t progress_frames = 0, compact_events = 0;
  absl::flat_hash_map<uint32_t, int> shapes;  // Compact form: columns per shape ref.
  uint32_t since_ack = 0;
  std::string last_id;
  std::string stop_reason;
  // Inside a transaction's events a progress frame can come too (the session
  // caught up with the reader while it buffers a large transaction), and its
  // server_wal_lsn, taken from keepalives, can already be past the end.
  bool mid_transaction = false;
  Clock::time_point t_first{};
  Clock::time_point t_last_event{};
  Clock::time_point t_first_progress_after{};
  uint64_t progress_after_last = 0;
  Clock::time_point next_ack = Clock::now() + std::chrono::milliseconds(flags.ack_interval_ms);
  v1::SubscribeResponse* current = nullptr;
  while (stop_reason.empty()) {
    // Each frame is parsed onto an arena that is reset for the next one: its
    // events, columns and strings cost no malloc/free of their own.
    arena.Reset();
    current = google::protobuf::Arena::CreateMessage<v1::SubscribeResponse>(&arena);
    const v1::SubscribeResponse& frame = *current;
    if (!reader->Read(current)) {
      stop_reason = "stream_ended";
      break;
    }
    if (frame.has_events()) {
      ++batches;
      if (t_first == Clock::time_point{}) t_first = Clock::now();
      for (const v1::RelationShape& shape : frame.events().relations()) {
        shapes[shape.ref()] = shape.columns_size();
      }
      for (const v1::ChangeEvent& event : frame.events().events()) {
        if (event.commit_lsn() >= end) {
          stop_reason = "past_end";
          break;
        }
        if (event.relation_ref() != 0) {
          if (!shapes.contains(event.relation_ref())) {
            stop_reason = "unknown_shape";
            break;
          }
          ++compact_events;
        }
        switch (event.op()) {
          case v1::OPERATION_INSERT: ++inserts; break;
          case v1::OPERATION_UPDATE: ++updates; break;
          case v1::OPERATION_DELETE: ++deletes; break;
          case v1::OPERATION_READ: ++reads; break;  // A backfill's rows.
          default: ++other; continue;
        }
        bytes += event.ByteSizeLong();
        mid_transaction = !event.last_in_transaction();
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
      // Idle: ack what is pending now (a backfill waits for its chunks' acks).
      if (since_ack > 0 && !last_id.empty()) {
        acker.Post(last_id);
        since_ack = 0;
        next_ack = Clock::now() + std::chrono::milliseconds(flags.ack_interval_ms);
      }
      // How the stop rule was met: the first progress frame after the last
      // event, and how many came before one carried the end position.
      if (t_last_event != Clock::time_point{} && t_first_progress_after == Clock::time_point{}) {
        t_first_progress_after = Clock::now();
      }
      if (t_last_event != Clock::time_point{}) ++progress_after_last;
      const v1::Progress& progress = frame.progress();
      if (!progress.server_wal_lsn().empty() && ParseLsn(progress.server_wal_lsn()) >= end &&
          progress.unacked_events() < flags.window && !mid_transaction) {
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
    for (const v1::ChangeEvent& event : current->events().events()) {
      if (event.commit_lsn() >= end) break;
      last_id = event.id();
    }
  }
  if (!last_id.empty()) acker.Post(last_id);
  acker.Finish();
  const Clock::time_point t_end = Clock::now();
  context->TryCancel();
  while (reader->Read(&first_frame)) {
  }
  const grpc::Status finished = reader->Finish();
  if (stop_reason == "stream_ended") {
    std::fprintf(stderr, "walfeed_drain: stream ended: %d %s\n",
                 static_cast<int>(finished.error_code()), finished.error_message().c_str());
  }
  const uint64_t events = inserts + updates + deletes + reads;
  std::printf(
      "{\"events\": %llu, \"bytes\": %llu, \"inserts\": %llu, \"updates\": %llu, "
      "\"deletes\": %llu, \"reads\": %llu, \"other_events\": %llu, \"batches\": %llu, \"progress_frames\": %llu, "
      "\"acks\": %d, \"ack_failures\": %d, \"stop_reason\": \"%s\", \"last_id\": \"%s\", "
      "\"subscribe_attempts\": %d, \"subscribe_s\": %.4f, \"first_event_after_s\": %.4f, "
      "\"last_event_after_s\": %.4f, \"first_progress_after_last_event_s\": %.4f, "
      "\"progress_after_last_event\": %llu, \"internal_s\": %.4f, \"compact_events\": %llu}\n",
      static_cast<unsigned long long>(events), static_cast<unsigned long long>(bytes),
      static_cast<unsigned long long>(inserts), static_cast<unsigned long long>(updates),
      static_cast<unsigned long long>(deletes), static_cast<unsigned long long>(reads),
      static_cast<unsigned long long>(other),
      static_cast<unsigned long long>(batches), static_cast<unsigned long long>(progress_frames),
      acker.sent(), acker.failed(), stop_reason.c_str(), last_id.c_str(), subscribe_attempts,
      Seconds(t_subscribed - t_start),
      Seconds((t_first == Clock::time_point{} ? t_end : t_first) - t_start),
      Seconds((t_last_event == Clock::time_point{} ? t_end : t_last_event) - t_start),
      t_first_progress_after == Clock::time_point{} || t_last_event == Clock::time_point{}
          ? -1.0
          : Seconds(t_first_progress_after - t_last_event),
      static_cast<unsigned long long>(progress_after_last), Seconds(t_end - t_start),
      static_cast<unsigned long long>(compact_events));
  std::fflush(stdout);
  const bool ok = stop_reason == "past_end" || stop_reason == "progress";
  return ok && acker.failed() == 0 ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) { return Run(ParseFlags(argc, argv)); }
