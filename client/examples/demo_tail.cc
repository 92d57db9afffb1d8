// walfeed-demo-tail: a minimal generated-stub client used by the quickstart (the
// full client library and the `walfeed` CLI are built on the same calls).
//
//   walfeed-demo-tail --server 127.0.0.1:50051 --stream demo --consumer demo
//                     [--count N] [--timeout-seconds S] [--ack]
//
// Subscribes (retrying while the stream is still connecting), prints one line per
// event ("<id> <op> <schema>.<table> col=value ..."), acks cumulatively after each
// batch with --ack, and exits after --count events or --timeout-seconds.
#include <chrono>
#include <cstdlib>
#include <iostream>
#include <string>
#include <thread>

#include <grpcpp/grpcpp.h>

#include "walfeed/v1/change_stream.grpc.pb.h"

namespace {

struct Options {
  std::string server = "127.0.0.1:50051";
  std::string stream;
  std::string consumer = "demo";
  long count = 0;  // 0: until the timeout.
  long timeout_seconds = 30;
  bool ack = false;
};

[[noreturn]] void Usage(const std::string& why) {
  std::cerr << (why.empty() ? "" : "walfeed-demo-tail: " + why + "\n\n")
            << "usage: walfeed-demo-tail --stream S [--server HOST:PORT] [--consumer C]\n"
               "                         [--count N] [--timeout-seconds S] [--ack]\n";
  std::exit(why.empty() ? 0 : 2);
}

Options Parse(int argc, char** argv) {
  Options options;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    auto next = [&]() -> std::string {
      if (i + 1 >= argc) Usage(arg + " needs a value");
      return argv[++i];
    };
    if (arg == "--help") Usage("");
    else if (arg == "--server") options.server = next();
    else if (arg == "--stream") options.stream = next();
    else if (arg == "--consumer") options.consumer = next();
    else if (arg == "--count") options.count = std::atol(next().c_str());
    else if (arg == "--timeout-seconds") options.timeout_seconds = std::atol(next().c_str());
    else if (arg == "--ack") options.ack = true;
    else Usage("unknown argument " + arg);
  }
  if (options.stream.empty()) Usage("--stream is required");
  return options;
}

const char* OpName(walfeed::v1::Operation op) {
  switch (op) {
    case walfeed::v1::OPERATION_INSERT: return "INSERT";
    case walfeed::v1::OPERATION_UPDATE: return "UPDATE";
    case walfeed::v1::OPERATION_DELETE: return "DELETE";
    case walfeed::v1::OPERATION_TRUNCATE: return "TRUNCATE";
    case walfeed::v1::OPERATION_MESSAGE: return "MESSAGE";
    default: return "?";
  }
}

std::string Value(const walfeed::v1::ColumnValue& column) {
  switch (column.kind()) {
    case walfeed::v1::VALUE_KIND_NULL: return "NULL";
    case walfeed::v1::VALUE_KIND_UNCHANGED_TOAST: return "<unchanged>";
    case walfeed::v1::VALUE_KIND_RAW: return "<" + std::to_string(column.raw().size()) + " bytes>";
    default: return "'" + column.text() + "'";
  }
}

}  // namespace

int main(int argc, char** argv) {
  const Options options = Parse(argc, argv);
  auto channel = grpc::CreateChannel(options.server, grpc::InsecureChannelCredentials());
  auto stub = walfeed::v1::ChangeStream::NewStub(channel);
  const auto deadline =
      std::chrono::system_clock::now() + std::chrono::seconds(options.timeout_seconds);
  long printed = 0;
  for (;;) {
    grpc::ClientContext context;
    context.set_deadline(deadline);
    walfeed::v1::SubscribeRequest request;
    request.set_stream(options.stream);
    request.set_consumer(options.consumer);
    auto reader = stub->Subscribe(&context, request);
    walfeed::v1::SubscribeResponse frame;
    std::string session;
    while (reader->Read(&frame)) {
      if (frame.has_started()) {
        session = frame.started().session_id();
        std::cerr << "subscribed to " << options.stream << " as " << options.consumer
                  << " (checkpoint " << (frame.started().checkpoint().empty() ? "none" : frame.started().checkpoint())
                  << ")\n";
        continue;
      }
      if (!frame.has_events()) continue;
      std::string last;
      for (const walfeed::v1::ChangeEvent& event : frame.events().events()) {
        std::cout << event.id() << " " << OpName(event.op());
        if (!event.table().empty()) std::cout << " " << event.schema() << "." << event.table();
        for (const auto& column : event.new_values()) {
          std::cout << " " << column.name() << "=" << Value(column);
        }
        std::cout << std::endl;
        last = event.id();
        ++printed;
      }
      if (options.ack && !last.empty()) {
        grpc::ClientContext ack_context;
        walfeed::v1::AckRequest ack;
        ack.set_stream(options.stream);
        ack.set_consumer(options.consumer);
        ack.set_session_id(session);
        ack.set_event_id(last);
        walfeed::v1::AckResponse acked;
        const grpc::Status status = stub->Ack(&ack_context, ack, &acked);
        if (!status.ok()) {
          std::cerr << "ack failed: " << status.error_message() << "\n";
          return 1;
        }
        std::cerr << "acked " << acked.checkpoint() << "\n";
      }
      if (options.count > 0 && printed >= options.count) {
        context.TryCancel();
        return 0;
      }
    }
    const grpc::Status status = reader->Finish();
    if (status.error_code() == grpc::StatusCode::UNAVAILABLE &&
        std::chrono::system_clock::now() < deadline) {
      std::cerr << "waiting: " << status.error_message() << "\n";
      std::this_thread::sleep_for(std::chrono::milliseconds(500));  // Demo retry pause.
      continue;
    }
    if (status.error_code() == grpc::StatusCode::DEADLINE_EXCEEDED) return printed > 0 ? 0 : 1;
    std::cerr << "subscribe ended: " << status.error_message() << "\n";
    return status.ok() ? 0 : 1;
  }
}
