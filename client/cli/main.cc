// walfeed: the command-line client. `walfeed tail` prints a stream's events (one
// JSON object or text line each) through walfeed::Subscriber, so it reconnects
// and resumes like any consumer; `walfeed status` prints GetStatus as tables or
// JSON; `walfeed remove-consumer` calls RemoveConsumer; `walfeed reset-consumer`
// calls ResetConsumer.
// Flags, output formats and exit codes: client/cli/flags.h, client/cli/format.h,
// `walfeed --help`.
#include <grpcpp/grpcpp.h>
#include <pthread.h>
#include <signal.h>

#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "client/cli/flags.h"
#include "client/cli/format.h"
#include "walfeed/subscriber.h"
#include "walfeed/v1/change_stream.grpc.pb.h"

#ifndef WALFEED_VERSION
#define WALFEED_VERSION "dev"
#endif

namespace walfeed::cli {
namespace {

// The bearer token: the first line of --token-file, else $WALFEED_TOKEN (never a
// flag, which `ps` would show to every user).
absl::StatusOr<std::string> Token(const CommonFlags& common) {
  if (!common.token_file.empty()) {
    std::ifstream in(common.token_file);
    std::string line;
    if (!in || !std::getline(in, line)) {
      return absl::InvalidArgumentError(
          absl::StrCat("--token-file ", common.token_file, " is missing, unreadable or empty"));
    }
    return std::string(absl::StripAsciiWhitespace(line));
  }
  const char* env = std::getenv("WALFEED_TOKEN");
  return std::string(env ? absl::StripAsciiWhitespace(env) : "");
}

absl::StatusOr<SubscriberOptions> Connection(const CommonFlags& common) {
  SubscriberOptions options;
  options.server = common.server;
  options.tls.enabled = common.tls;
  options.tls.root_certs_file = common.tls_ca;
  options.tls.cert_chain_file = common.tls_cert;
  options.tls.private_key_file = common.tls_key;
  options.tls.server_name_override = common.tls_server_name;
  absl::StatusOr<std::string> token = Token(common);
  if (!token.ok()) return token.status();
  options.bearer_token = *token;
  return options;
}

int Fail(const absl::Status& status) {
  std::cerr << "walfeed: " << status.message() << "\n";
  return ExitCodeFor(status);
}

// Stops the running `tail` from a signal or the --timeout watchdog. A stop that
// comes before the Subscriber exists (or after it is gone) is remembered or
// dropped, never delivered to a dangling pointer.
class StopSwitch {
 public:
  static StopSwitch& Get() {
    static StopSwitch* const instance = new StopSwitch();
    return *instance;
  }
  void Register(Subscriber* subscriber) ABSL_LOCKS_EXCLUDED(mu_) {
    absl::MutexLock lock(&mu_);
    target_ = subscriber;
    if (requested_ && target_ != nullptr) target_->Stop();
  }
  void Request() ABSL_LOCKS_EXCLUDED(mu_) {
    absl::MutexLock lock(&mu_);
    requested_ = true;
    if (target_ != nullptr) target_->Stop();
  }

 private:
  absl::Mutex mu_;
  Subscriber* target_ ABSL_GUARDED_BY(mu_) = nullptr;
  bool requested_ ABSL_GUARDED_BY(mu_) = false;
};

// SIGINT/SIGTERM end `tail` cleanly (acks of printed events are sent first).
// The signals are blocked in every thread (so call this before any thread
// starts) and taken by one thread that waits for them.
void StopOnSignals() {
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGINT);
  sigaddset(&set, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &set, nullptr);
  std::thread([set] {
    int signal_number = 0;
    if (sigwait(&set, &signal_number) == 0) StopSwitch::Get().Request();
  }).detach();  // Lives until the process exits.
}

// `*reached`: --count or --until was reached; `*subscribed`: a session started.
int Tail(const TailFlags& flags, bool* reached, std::atomic<bool>* subscribed) {
  absl::StatusOr<SubscriberOptions> connection = Connection(flags.common);
  if (!connection.ok()) return Fail(connection.status());
  SubscriberOptions options = *std::move(connection);
  options.stream = flags.stream;
  options.consumer = flags.consumer;
  options.tables = flags.tables;
  options.operations = flags.operations;
  options.start_after = flags.start_after;
  options.ephemeral = flags.consumer.empty();
  options.start = flags.start;
  options.max_batch_events = flags.batch;
  // Acks name exactly the last event printed, so the tool acks by hand; with
  // --ack, what the filters left out is acked too (Progress.passed).
  options.ack = AckPolicy::Manual();
  options.ack_passed_when_manual = flags.ack;
  options.on_started = [&flags, subscribed](const SessionInfo& session) {
    *subscribed = true;
    if (flags.consumer.empty()) {
      std::cerr << "subscribed to " << flags.stream << " (ephemeral: no checkpoint; session "
                << session.session_id << ", after "
                << (session.start_after.empty() ? "the stream's start" : session.start_after)
                << ")" << std::endl;
      return;
    }
    std::cerr << "subscribed to " << flags.stream << " as " << flags.consumer << " (session "
              << session.session_id << ", checkpoint "
              << (session.checkpoint.empty() ? "none" : session.checkpoint) << ")" << std::endl;
  };
  options.on_retry = [](const absl::Status& why, absl::Duration delay) {
    std::cerr << "waiting: " << why.message() << " (retrying in "
              << absl::FormatDuration(absl::Trunc(delay, absl::Milliseconds(1)))
              << ")" << std::endl;
  };

  Subscriber subscriber(options);
  StopSwitch::Get().Register(&subscriber);
  uint64_t printed = 0;
  bool finished = false;   // --count or --until reached.
  absl::Status run = subscriber.Run([&](const Batch& batch) -> absl::Status {
    std::string out;
    std::optional<EventId> last;
    for (int i = 0; i < batch.size() && !finished; ++i) {
      if (flags.until && batch.id(i) > *flags.until) {
        finished = true;
        break;
      }
      out += flags.format == Format::kJson ? EventJson(batch.event(i)) : EventText(batch.event(i));
      out += '\n';
      last = batch.id(i);
      ++printed;
      if ((flags.count > 0 && printed >= flags.count) || (flags.until && *last == *flags.until)) {
        finished = true;
      }
    }
    if (!out.empty()) {
      // Written and flushed before the ack: an acked event was delivered.
      if (std::fwrite(out.data(), 1, out.size(), stdout) != out.size() || std::fflush(stdout) != 0) {
        if (errno == EPIPE) {
          subscriber.Stop();
          return absl::OkStatus();
        }
        return absl::UnavailableError("cannot write to stdout");
      }
      if (flags.ack && last) {
        if (absl::Status acked = subscriber.Ack(*last); !acked.ok()) return acked;
      }
    }
    if (finished) subscriber.Stop();
    return absl::OkStatus();
  });
  StopSwitch::Get().Register(nullptr);
  *reached = finished;
  if (!run.ok()) return Fail(run);
  return kExitOk;  // Also when stdout was closed: the reader had enough.
}

int TailWithTimeout(const TailFlags& flags) {
  bool reached = false;
  std::atomic<bool> subscribed{false};
  if (flags.timeout == absl::InfiniteDuration()) return Tail(flags, &reached, &subscribed);
  absl::Notification done;
  std::atomic<bool> timed_out{false};
  std::thread watchdog([&] {
    if (!done.WaitForNotificationWithTimeout(flags.timeout)) {
      timed_out = true;
      StopSwitch::Get().Request();
    }
  });
  int code = Tail(flags, &reached, &subscribed);
  done.Notify();
  watchdog.join();
  if (code == kExitOk && timed_out && !subscribed) {
    // The server never let us in (down, unreachable, the stream still
    // connecting): a timeout without a subscription is a failure, not quiet.
    std::cerr << "walfeed: timed out after " << absl::FormatDuration(flags.timeout)
              << " without subscribing (see the 'waiting:' lines above for why)" << std::endl;
    return kExitRuntime;
  }
  if (code == kExitOk && timed_out && !reached && (flags.count > 0 || flags.until)) {
    std::cerr << "walfeed: timed out after " << absl::FormatDuration(flags.timeout) << " before "
              << (flags.count > 0 ? "--count" : "--until") << " was reached" << std::endl;
    code = kExitRuntime;
  }
  return code;
}

// One unary call's stub and context: the deadline, wait-for-ready (a server that
// is still starting is waited for, within the timeout) and the bearer token.
struct UnaryCall {
  std::unique_ptr<walfeed::v1::ChangeStream::Stub> stub;
  grpc::ClientContext context;
};

absl::Status PrepareCall(const CommonFlags& common, absl::Duration timeout, UnaryCall* call) {
  absl::StatusOr<SubscriberOptions> options = Connection(common);
  if (!options.ok()) return options.status();
  absl::StatusOr<std::shared_ptr<grpc::Channel>> channel = CreateChannel(*options);
  if (!channel.ok()) return channel.status();
  call->stub = walfeed::v1::ChangeStream::NewStub(*channel);
  call->context.set_deadline(absl::ToChronoTime(absl::Now() + timeout));
  call->context.set_wait_for_ready(true);
  if (!options->bearer_token.empty()) {
    call->context.AddMetadata("authorization", "Bearer " + options->bearer_token);
  }
  return absl::OkStatus();
}

// A failed call as a status naming the RPC and the server.
absl::Status CallError(const grpc::Status& status, absl::string_view rpc,
                       const std::string& server) {
  return absl::Status(static_cast<absl::StatusCode>(status.error_code()),
                      absl::StrCat(rpc, " on ", server, ": ", status.error_message()));
}

int Status(const StatusFlags& flags) {
  UnaryCall call;
  if (absl::Status prepared = PrepareCall(flags.common, flags.timeout, &call); !prepared.ok()) {
    return Fail(prepared);
  }
  walfeed::v1::GetStatusRequest request;
  request.set_stream(flags.stream);
  walfeed::v1::GetStatusResponse response;
  const grpc::Status status = call.stub->GetStatus(&call.context, request, &response);
  if (!status.ok()) return Fail(CallError(status, "GetStatus", flags.common.server));
  std::cout << (flags.json ? StatusJson(response) : StatusTable(response)) << std::flush;
  return kExitOk;
}

int RemoveConsumer(const RemoveConsumerFlags& flags) {
  UnaryCall call;
  if (absl::Status prepared = PrepareCall(flags.common, flags.timeout, &call); !prepared.ok()) {
    return Fail(prepared);
  }
  walfeed::v1::RemoveConsumerRequest request;
  request.set_stream(flags.stream);
  request.set_consumer(flags.consumer);
  walfeed::v1::RemoveConsumerResponse response;
  const grpc::Status status = call.stub->RemoveConsumer(&call.context, request, &response);
  if (!status.ok()) return Fail(CallError(status, "RemoveConsumer", flags.common.server));
  std::cout << "removed consumer " << flags.consumer << " of stream " << flags.stream
            << " (its checkpoint was "
            << (response.checkpoint().empty() ? "none" : response.checkpoint()) << ")"
            << std::endl;
  return kExitOk;
}

int ResetConsumer(const ResetConsumerFlags& flags) {
  UnaryCall call;
  if (absl::Status prepared = PrepareCall(flags.common, flags.timeout, &call); !prepared.ok()) {
    return Fail(prepared);
  }
  walfeed::v1::ResetConsumerRequest request;
  request.set_stream(flags.stream);
  request.set_consumer(flags.consumer);
  request.set_to(flags.to);
  request.set_to_head(flags.to_head);
  walfeed::v1::ResetConsumerResponse response;
  const grpc::Status status = call.stub->ResetConsumer(&call.context, request, &response);
  if (!status.ok()) return Fail(CallError(status, "ResetConsumer", flags.common.server));
  std::cout << "reset consumer " << flags.consumer << " of stream " << flags.stream << " from "
            << (response.previous_checkpoint().empty() ? "none" : response.previous_checkpoint())
            << " to " << (response.checkpoint().empty() ? "none" : response.checkpoint())
            << std::endl;
  return kExitOk;
}

int Main(int argc, char** argv) {
  const std::vector<std::string> args(argv + 1, argv + argc);
  absl::StatusOr<Invocation> invocation = ParseCommandLine(args);
  if (!invocation.ok()) {
    // The one line that says what is wrong, and where the rest is.
    std::cerr << "walfeed: " << invocation.status().message() << "\n"
              << "see `walfeed " << (args.empty() ? std::string("--help") : args[0] + " --help")
              << "`" << std::endl;
    return kExitUsage;
  }
  switch (invocation->command) {
    case Command::kHelp:
      std::cout << invocation->help;
      return kExitOk;
    case Command::kVersion:
      std::cout << "walfeed " << WALFEED_VERSION << "\n";
      return kExitOk;
    case Command::kTail:
      StopOnSignals();
      // A closed stdout (`| head`) should fail a write, not kill the process.
      signal(SIGPIPE, SIG_IGN);
      return TailWithTimeout(invocation->tail);
    case Command::kStatus:
      return Status(invocation->status);
    case Command::kRemoveConsumer:
      return RemoveConsumer(invocation->remove_consumer);
    case Command::kResetConsumer:
      return ResetConsumer(invocation->reset_consumer);
  }
  return kExitUsage;
}

}  // namespace
}  // namespace walfeed::cli

int main(int argc, char** argv) { return walfeed::cli::Main(argc, argv); }
