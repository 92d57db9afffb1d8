// walfeed: the command-line client. `walfeed tail` prints a stream's events (one
// JSON object or text line each) through walfeed::Subscriber, so it reconnects
// and resumes like any consumer; `walfeed status` prints GetStatus as tables or
// JSON; `walfeed remove-consumer` calls RemoveConsumer; `walfeed reset-consumer`
// calls ResetConsumer; `walfeed backfill` starts, shows and cancels backfills.
// Flags, output formats and exit codes: client/cli/flags.h, client/cli/format.h,
// `walfeed --help`.
//
// A server it cannot reach is reported in one line that says what happened and
// what to check (client/cli/connect.h): the one-shot commands wait for the
// connection first — kConnectGrace while connecting fails, their --timeout
// while it is merely slow — and `tail` explains each failed reconnect, ending at
// once when its own TLS settings cannot work with the server. gRPC's own log
// lines are not printed unless GRPC_VERBOSITY or GRPC_TRACE asks for them.
#include <grpc/support/log.h>
#include <grpcpp/grpcpp.h>
#include <pthread.h>
#include <signal.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "client/cli/connect.h"
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
  options.follow_active = common.follow_active;
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
  std::cerr << "walfeed: " << status.message();
  // The server's message says what a token is; this says how the CLI sends one.
  if (status.code() == absl::StatusCode::kUnauthenticated) {
    std::cerr << " (walfeed sends the first line of --token-file FILE, else $WALFEED_TOKEN)";
  }
  std::cerr << "\n";
  return ExitCodeFor(status);
}

// How long a one-shot command keeps trying while connecting fails (refused,
// handshake rejected): a server that is just starting gets this long to listen.
constexpr absl::Duration kConnectGrace = absl::Seconds(1);
// The first reconnect delay of their channel, so that kConnectGrace holds
// several attempts.
constexpr absl::Duration kConnectRetry = absl::Milliseconds(100);
// How long the CLI's own TCP connect may take when it explains a failure.
constexpr absl::Duration kProbeTimeout = absl::Seconds(1);

// gRPC writes connection and handshake errors to stderr itself ("E1202 ...
// ssl_transport_security.cc:1501] Handshake failed ..."), once per attempt; the
// CLI says what failed in one line of its own instead. Setting GRPC_VERBOSITY
// or GRPC_TRACE brings gRPC's log back, for debugging.
void DropGrpcLog(gpr_log_func_args*) {}

void QuietGrpcLog() {
  if (std::getenv("GRPC_VERBOSITY") == nullptr && std::getenv("GRPC_TRACE") == nullptr) {
    gpr_set_log_function(DropGrpcLog);
  }
}

// Why the connection to common.server could not be made, in one line;
// `grpc_error` is the failed call's message ("" if it ran out of time).
ConnectFailure ExplainConnectFailure(const CommonFlags& common, absl::string_view grpc_error) {
  const Probe probe = ProbeEndpoint(ParseTarget(common.server), kProbeTimeout);
  return DescribeConnectFailure(common.server, common.tls, probe, grpc_error);
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

// `*reached`: --count or --until was reached; `*subscribed`: a session started;
// `*unreachable`: why the last attempt could not connect ("" if it could).
int Tail(const TailFlags& flags, bool* reached, std::atomic<bool>* subscribed,
         std::string* unreachable) {
  absl::StatusOr<SubscriberOptions> connection = Connection(flags.common);
  if (!connection.ok()) return Fail(connection.status());
  SubscriberOptions options = *std::move(connection);
  options.stream = flags.stream;  // Before the channel: follow_active checks its health.
  // The Subscriber's own channel, dialed here so that a failed attempt can be
  // told from a server that answered (the channel is not connected).
  absl::StatusOr<std::shared_ptr<grpc::Channel>> channel = CreateChannel(options);
  if (!channel.ok()) return Fail(channel.status());
  options.channel = *channel;
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
  // Set when the first connection fails in a way no retry can fix.
  std::optional<std::string> hopeless;
  options.on_retry = [&flags, subscribed, unreachable, &hopeless, channel = *channel](
                         const absl::Status& why, absl::Duration delay) {
    std::string reason(why.message());
    unreachable->clear();
    if (channel->GetState(/*try_to_connect=*/false) == GRPC_CHANNEL_TRANSIENT_FAILURE) {
      const ConnectFailure failure = ExplainConnectFailure(flags.common, why.message());
      if (failure.definite && !*subscribed) {
        // The client's TLS settings cannot work with this server: say so now
        // rather than retry until --timeout (or forever).
        hopeless = failure.message;
        StopSwitch::Get().Request();
        return;
      }
      // After a session, a handshake failure is not about the flags (they
      // worked): a proxy with no server behind it, say. gRPC's words then.
      if (!(failure.handshake && *subscribed)) reason = *unreachable = failure.message;
    }
    std::cerr << "waiting: " << reason << "; retrying in "
              << absl::FormatDuration(absl::Trunc(delay, absl::Milliseconds(1))) << std::endl;
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
  if (hopeless) return Fail(absl::UnavailableError(*hopeless));
  if (!run.ok()) return Fail(run);
  return kExitOk;  // Also when stdout was closed: the reader had enough.
}

int TailWithTimeout(const TailFlags& flags) {
  bool reached = false;
  std::atomic<bool> subscribed{false};
  std::string unreachable;
  if (flags.timeout == absl::InfiniteDuration()) {
    return Tail(flags, &reached, &subscribed, &unreachable);
  }
  absl::Notification done;
  std::atomic<bool> timed_out{false};
  std::thread watchdog([&] {
    if (!done.WaitForNotificationWithTimeout(flags.timeout)) {
      timed_out = true;
      StopSwitch::Get().Request();
    }
  });
  int code = Tail(flags, &reached, &subscribed, &unreachable);
  done.Notify();
  watchdog.join();
  if (code == kExitOk && timed_out && !subscribed) {
    // The server never let us in (down, unreachable, the stream still
    // connecting): a timeout without a subscription is a failure, not quiet.
    std::cerr << "walfeed: timed out after " << absl::FormatDuration(flags.timeout)
              << " without subscribing"
              << (unreachable.empty() ? " (see the 'waiting:' lines above for why)"
                                      : ": " + unreachable)
              << std::endl;
    return kExitRuntime;
  }
  if (code == kExitOk && timed_out && !reached && (flags.count > 0 || flags.until)) {
    std::cerr << "walfeed: timed out after " << absl::FormatDuration(flags.timeout) << " before "
              << (flags.count > 0 ? "--count" : "--until") << " was reached" << std::endl;
    code = kExitRuntime;
  }
  return code;
}

// One unary call: its channel, stub and context (deadline, bearer token).
// PrepareCall connects the channel first. Connecting that fails (refused, a
// rejected handshake) is retried for kConnectGrace, so that a server that is
// just starting can begin to listen; connecting that is merely slow is waited
// for until the deadline. Once connected, the call waits for ready within the
// deadline (a connection that drops is made again). Not connected, the call is
// made fail-fast: it ends at once with gRPC's reason, which CallError turns
// into one line that says what to check.
struct UnaryCall {
  std::shared_ptr<grpc::Channel> channel;
  std::unique_ptr<walfeed::v1::ChangeStream::Stub> stub;
  grpc::ClientContext context;
  bool connected = false;
};

// True once `channel` is READY; false while connecting still fails at
// `give_up`, or has not finished at `deadline`.
bool WaitForConnection(grpc::Channel& channel, absl::Time give_up, absl::Time deadline) {
  for (;;) {
    const grpc_connectivity_state state = channel.GetState(/*try_to_connect=*/true);
    if (state == GRPC_CHANNEL_READY) return true;
    const bool failing = state == GRPC_CHANNEL_TRANSIENT_FAILURE;
    const absl::Time now = absl::Now();
    if (now >= deadline || (failing && now >= give_up)) return false;
    channel.WaitForStateChange(
        state, absl::ToChronoTime(failing ? std::min(give_up, deadline) : deadline));
  }
}

absl::Status PrepareCall(const CommonFlags& common, absl::Duration timeout, UnaryCall* call) {
  absl::StatusOr<SubscriberOptions> options = Connection(common);
  if (!options.ok()) return options.status();
  options->backoff.base = kConnectRetry;
  absl::StatusOr<std::shared_ptr<grpc::Channel>> channel = CreateChannel(*options);
  if (!channel.ok()) return channel.status();
  call->channel = *channel;
  call->stub = walfeed::v1::ChangeStream::NewStub(call->channel);
  const absl::Time start = absl::Now();
  absl::Time deadline = start + timeout;
  call->connected =
      WaitForConnection(*call->channel, start + std::min(kConnectGrace, timeout), deadline);
  if (!call->connected &&
      call->channel->GetState(/*try_to_connect=*/false) == GRPC_CHANNEL_TRANSIENT_FAILURE) {
    // The fail-fast call ends at once with the reason; a --timeout shorter
    // than kConnectGrace must not cut it off before.
    deadline = std::max(deadline, absl::Now() + kProbeTimeout);
  }
  call->context.set_deadline(absl::ToChronoTime(deadline));
  call->context.set_wait_for_ready(call->connected);
  if (!options->bearer_token.empty()) {
    call->context.AddMetadata("authorization", "Bearer " + options->bearer_token);
  }
  return absl::OkStatus();
}

// A failed call as a status naming the RPC and the server, or, when the channel
// never connected, why it could not.
absl::Status CallError(const grpc::Status& status, absl::string_view rpc, const CommonFlags& common,
                       const UnaryCall& call) {
  const bool unavailable = status.error_code() == grpc::StatusCode::UNAVAILABLE;
  if (!call.connected &&
      (unavailable || status.error_code() == grpc::StatusCode::DEADLINE_EXCEEDED) &&
      call.channel->GetState(/*try_to_connect=*/false) != GRPC_CHANNEL_READY) {
    return absl::UnavailableError(
        ExplainConnectFailure(common, unavailable ? status.error_message() : "").message);
  }
  return absl::Status(static_cast<absl::StatusCode>(status.error_code()),
                      absl::StrCat(rpc, " on ", common.server, ": ", status.error_message()));
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
  if (!status.ok()) return Fail(CallError(status, "GetStatus", flags.common, call));
  std::cout << (flags.json ? StatusJson(response) : StatusTable(response)) << std::flush;
  for (const walfeed::v1::StreamStatus& stream : response.streams()) {
    if (stream.state() == walfeed::v1::STREAM_STATE_FAILED) return kExitStreamFailed;
  }
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
  if (!status.ok()) return Fail(CallError(status, "RemoveConsumer", flags.common, call));
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
  if (!status.ok()) return Fail(CallError(status, "ResetConsumer", flags.common, call));
  std::cout << "reset consumer " << flags.consumer << " of stream " << flags.stream << " from "
            << (response.previous_checkpoint().empty() ? "none" : response.previous_checkpoint())
            << " to " << (response.checkpoint().empty() ? "none" : response.checkpoint())
            << std::endl;
  return kExitOk;
}

// Prints `backfill`'s line (or JSON); the exit code for how it stands.
int PrintBackfill(const walfeed::v1::Backfill& backfill, bool json) {
  std::cout << (json ? MessageJson(backfill) : BackfillLine(backfill)) << std::endl;
  return backfill.state() == walfeed::v1::BACKFILL_STATE_FAILED ||
                 backfill.state() == walfeed::v1::BACKFILL_STATE_CANCELLED
             ? kExitRuntime
             : kExitOk;
}

int Backfill(const BackfillFlags& flags) {
  UnaryCall call;
  if (absl::Status prepared = PrepareCall(flags.common, flags.timeout, &call); !prepared.ok()) {
    return Fail(prepared);
  }
  walfeed::v1::Backfill backfill;
  switch (flags.action) {
    case BackfillFlags::Action::kStart: {
      walfeed::v1::StartBackfillRequest request;
      request.set_stream(flags.stream);
      request.set_consumer(flags.consumer);
      request.set_table(flags.table);
      request.set_where(flags.where);
      request.set_chunk_rows(flags.chunk_rows);
      walfeed::v1::StartBackfillResponse response;
      const grpc::Status status = call.stub->StartBackfill(&call.context, request, &response);
      if (!status.ok()) return Fail(CallError(status, "StartBackfill", flags.common, call));
      backfill = response.backfill();
      break;
    }
    case BackfillFlags::Action::kCancel: {
      walfeed::v1::CancelBackfillRequest request;
      request.set_stream(flags.stream);
      request.set_id(flags.id);
      walfeed::v1::CancelBackfillResponse response;
      const grpc::Status status = call.stub->CancelBackfill(&call.context, request, &response);
      if (!status.ok()) return Fail(CallError(status, "CancelBackfill", flags.common, call));
      backfill = response.backfill();
      break;
    }
    case BackfillFlags::Action::kStatus: {
      if (flags.id.empty()) {
        walfeed::v1::ListBackfillsRequest request;
        request.set_stream(flags.stream);
        walfeed::v1::ListBackfillsResponse response;
        const grpc::Status status = call.stub->ListBackfills(&call.context, request, &response);
        if (!status.ok()) return Fail(CallError(status, "ListBackfills", flags.common, call));
        if (flags.json) {
          std::cout << MessageJson(response) << std::endl;
        } else if (response.backfills().empty()) {
          std::cout << "stream " << flags.stream << " has no backfills" << std::endl;
        }
        for (const walfeed::v1::Backfill& one : response.backfills()) {
          if (!flags.json) std::cout << BackfillLine(one) << std::endl;
        }
        return kExitOk;
      }
      walfeed::v1::GetBackfillRequest request;
      request.set_stream(flags.stream);
      request.set_id(flags.id);
      walfeed::v1::GetBackfillResponse response;
      const grpc::Status status = call.stub->GetBackfill(&call.context, request, &response);
      if (!status.ok()) return Fail(CallError(status, "GetBackfill", flags.common, call));
      backfill = response.backfill();
      break;
    }
  }
  if (!flags.wait) return PrintBackfill(backfill, flags.json);
  // --wait: one line a second until it ends.
  while (backfill.state() == walfeed::v1::BACKFILL_STATE_RUNNING) {
    std::cout << BackfillLine(backfill) << std::endl;
    absl::SleepFor(absl::Seconds(1));
    UnaryCall poll;
    if (absl::Status prepared = PrepareCall(flags.common, flags.timeout, &poll); !prepared.ok()) {
      return Fail(prepared);
    }
    walfeed::v1::GetBackfillRequest request;
    request.set_stream(flags.stream);
    request.set_id(backfill.id());
    walfeed::v1::GetBackfillResponse response;
    const grpc::Status status = poll.stub->GetBackfill(&poll.context, request, &response);
    if (!status.ok()) return Fail(CallError(status, "GetBackfill", flags.common, poll));
    backfill = response.backfill();
  }
  return PrintBackfill(backfill, flags.json);
}

int Main(int argc, char** argv) {
  const std::vector<std::string> args(argv + 1, argv + argc);
  absl::StatusOr<Invocation> invocation = ParseCommandLine(args);
  if (!invocation.ok()) {
    // The one line that says what is wrong, and where the rest is.
    std::cerr << "walfeed: " << invocation.status().message() << "\n"
              << "see `" << HelpCommandFor(args) << "`" << std::endl;
    return kExitUsage;
  }
  QuietGrpcLog();
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
    case Command::kBackfill:
      return Backfill(invocation->backfill);
  }
  return kExitUsage;
}

}  // namespace
}  // namespace walfeed::cli

int main(int argc, char** argv) {
  const int code = walfeed::cli::Main(argc, argv);
  // gRPC's own threads (a subchannel still reconnecting, a TLS handshake in
  // flight) outlive main, and static destructors running under them crashed an
  // exit now and then (SIGSEGV right after a failed TLS handshake was reported).
  // Nothing is left to clean up but the output: flush it and leave without them.
  std::cout.flush();
  std::cerr.flush();
  std::fflush(nullptr);
  std::_Exit(code);
}
