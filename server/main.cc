// walfeed-server: serves the change streams configured in a YAML file.
//
//   walfeed-server --config /etc/walfeed/walfeed.yaml [--listen HOST:PORT]
//
// Start-up order: config → credentials → gRPC server listening (health NOT_SERVING
// per stream) → one StreamRuntime per stream, which provisions, checks its slot
// and starts reading. Shutdown on SIGTERM/SIGINT: health NOT_SERVING, every
// subscription ends with UNAVAILABLE, readers send a last status update and end
// the copy cleanly, the gRPC server drains within shutdown_timeout.
#include <csignal>
#include <cstdio>
#include <cstring>
#include <iostream>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include <grpcpp/ext/proto_server_reflection_plugin.h>
#include <grpcpp/grpcpp.h>
#include <grpcpp/health_check_service_interface.h>
#include <sys/signalfd.h>
#include <poll.h>
#include <unistd.h>

#include "absl/strings/str_cat.h"
#include "grpc/health/v1/health.pb.h"
#include "server/auth.h"
#include "server/change_stream_service.h"
#include "server/config.h"
#include "server/stream_runtime.h"
#include "server/worker_pool.h"
#include "spdlog/spdlog.h"

namespace walfeed::server {
namespace {

constexpr char kServiceName[] = "walfeed.v1.ChangeStream";

constexpr char kUsage[] = R"(walfeed-server: stream PostgreSQL changes over gRPC.

Usage:
  walfeed-server --config FILE [--listen HOST:PORT]
  walfeed-server --config FILE --check-config
  walfeed-server --help | --version

Options:
  --config FILE     YAML configuration (see deploy/walfeed.example.yaml): the
                    listen address, TLS, tokens, and the streams (connection,
                    slot, publications). Secrets come from files or the
                    environment, never from the command line.
  --listen ADDR     Overrides `listen` from the file, e.g. 127.0.0.1:50051.
  --check-config    Parse and validate the configuration, then exit 0 (valid)
                    or 2 (invalid, with the reason).
  --help            This text.
  --version         The version.

Health (grpc.health.v1): "" is SERVING while the server runs; "walfeed.v1.ChangeStream"
is SERVING while every stream streams; "walfeed.v1.ChangeStream/<stream>" is
SERVING while that stream is connected to its slot.

Exit status: 0 after a clean shutdown (SIGTERM/SIGINT), 2 for a bad command line
or configuration, 1 when the server cannot start.
)";

struct Flags {
  std::string config;
  std::string listen;
  bool check_config = false;
};

// Parses argv; exits for --help/--version and usage errors.
Flags ParseFlags(int argc, char** argv) {
  Flags flags;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    auto value = [&](const char* name) -> std::string {
      const std::string prefix = absl::StrCat(name, "=");
      if (arg.rfind(prefix, 0) == 0) return arg.substr(prefix.size());
      if (i + 1 >= argc) {
        std::cerr << "walfeed-server: " << name << " needs a value\n\n" << kUsage;
        std::exit(2);
      }
      return argv[++i];
    };
    if (arg == "--help" || arg == "-h") {
      std::cout << kUsage;
      std::exit(0);
    } else if (arg == "--version") {
      std::cout << "walfeed-server " << WALFEED_VERSION << "\n";
      std::exit(0);
    } else if (arg == "--check-config") {
      flags.check_config = true;
    } else if (arg.rfind("--config", 0) == 0) {
      flags.config = value("--config");
    } else if (arg.rfind("--listen", 0) == 0) {
      flags.listen = value("--listen");
    } else {
      std::cerr << "walfeed-server: unknown argument \"" << arg << "\"\n\n" << kUsage;
      std::exit(2);
    }
  }
  if (flags.config.empty()) {
    std::cerr << "walfeed-server: --config FILE is required\n\n" << kUsage;
    std::exit(2);
  }
  return flags;
}

// Health names: the service, and one per stream.
class Health {
 public:
  void Attach(grpc::HealthCheckServiceInterface* service) { service_ = service; }
  void Set(const std::string& stream, bool serving) {
    absl::MutexLock lock(&mu_);
    serving_[stream] = serving;
    if (service_ == nullptr) return;
    service_->SetServingStatus(absl::StrCat(kServiceName, "/", stream), serving);
    bool all = true;
    for (const auto& [name, up] : serving_) all = all && up;
    service_->SetServingStatus(kServiceName, all);
  }
  void Shutdown() {
    absl::MutexLock lock(&mu_);
    if (service_ != nullptr) service_->Shutdown();  // Everything NOT_SERVING, for good.
  }

 private:
  absl::Mutex mu_;
  grpc::HealthCheckServiceInterface* service_ = nullptr;
  std::map<std::string, bool> serving_ ABSL_GUARDED_BY(mu_);
};

int Run(const Flags& flags) {
  // SIGTERM/SIGINT are read from a signalfd by this thread. Blocked before any
  // thread starts (gRPC's, the readers'), so every thread inherits the mask and
  // none of them is killed by the default action.
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGTERM);
  sigaddset(&signals, SIGINT);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);
  const int signal_fd = signalfd(-1, &signals, SFD_CLOEXEC);

  absl::StatusOr<ServerConfig> config = LoadConfig(flags.config);
  if (!config.ok()) {
    spdlog::error("configuration {}: {}", flags.config, std::string(config.status().message()));
    return 2;
  }
  if (!flags.listen.empty()) config->listen = flags.listen;
  if (flags.check_config) {
    std::cout << "configuration " << flags.config << " is valid (" << config->streams.size()
              << " stream(s))\n";
    return 0;
  }

  std::shared_ptr<grpc::ServerCredentials> credentials;
  if (config->plaintext) {
    credentials = grpc::InsecureServerCredentials();
    if (ListensBeyondLoopback(config->listen)) {
      spdlog::warn("listening on {} WITHOUT TLS beyond loopback: change data and tokens "
                   "cross the network in clear text; configure tls",
                   config->listen);
    }
  } else {
    absl::StatusOr<TlsFiles> files = ReadTlsFiles(*config->tls);
    if (!files.ok()) {
      spdlog::error("tls: {}", std::string(files.status().message()));
      return 2;
    }
    grpc::SslServerCredentialsOptions options(
        files->client_ca.empty() ? GRPC_SSL_DONT_REQUEST_CLIENT_CERTIFICATE
                                 : GRPC_SSL_REQUEST_AND_REQUIRE_CLIENT_CERTIFICATE_AND_VERIFY);
    options.pem_root_certs = files->client_ca;
    options.pem_key_cert_pairs.push_back({files->private_key, files->cert_chain});
    credentials = grpc::SslServerCredentials(options);
  }
  std::optional<TokenAuthorizer> authorizer;
  if (config->auth_enabled()) {
    absl::StatusOr<TokenAuthorizer> loaded = TokenAuthorizer::Load(config->tokens_file);
    if (!loaded.ok()) {
      spdlog::error("auth.tokens_file: {}", std::string(loaded.status().message()));
      return 2;
    }
    std::vector<std::string> names;
    for (const auto& stream : config->streams) names.push_back(stream.name);
    if (absl::Status known = loaded->CheckStreamsConfigured(names); !known.ok()) {
      spdlog::error("auth.tokens_file: {}", std::string(known.message()));
      return 2;
    }
    authorizer = std::move(*loaded);
  } else {
    spdlog::warn("no auth.tokens_file configured: every client may subscribe, ack and read "
                 "status");
  }

  Health health;
  std::vector<std::unique_ptr<StreamRuntime>> runtimes;
  std::map<std::string, StreamRuntime*> by_name;
  for (const replication::pg::StreamConfig& stream : config->streams) {
    RuntimeOptions options;
    options.config = stream;
    options.checkpoint_schema = config->checkpoint.schema;
    options.checkpoint_conninfo = config->checkpoint.conninfo;
    options.buffer_bytes = config->defaults.buffer_bytes;
    const std::string name = stream.name;
    runtimes.push_back(std::make_unique<StreamRuntime>(
        std::move(options), [&health, name](walfeed::v1::StreamState state) {
          health.Set(name, state == walfeed::v1::STREAM_STATE_STREAMING);
        }));
    by_name[name] = runtimes.back().get();
  }

  WorkerPool pool(8);
  SubscribeDefaults defaults;
  defaults.max_batch_events = config->defaults.max_batch_events;
  defaults.max_batch_bytes = config->defaults.max_batch_bytes;
  defaults.max_unacked_events = config->defaults.max_unacked_events;
  defaults.max_unacked_bytes = config->defaults.max_unacked_bytes;
  defaults.progress_interval = config->defaults.progress_interval;
  ChangeStreamService service(by_name, authorizer ? &*authorizer : nullptr, &pool, defaults);

  // Linking the health messages lets reflection describe grpc.health.v1.Health.
  (void)grpc::health::v1::HealthCheckRequest::descriptor();
  grpc::EnableDefaultHealthCheckService(true);
  grpc::reflection::InitProtoReflectionServerBuilderPlugin();
  grpc::ServerBuilder builder;
  int port = 0;
  builder.AddListeningPort(config->listen, credentials, &port);
  builder.RegisterService(&service);
  // Clients may keep idle subscriptions alive with pings every >= 10 s.
  builder.AddChannelArgument(GRPC_ARG_HTTP2_MIN_RECV_PING_INTERVAL_WITHOUT_DATA_MS, 10000);
  builder.AddChannelArgument(GRPC_ARG_KEEPALIVE_PERMIT_WITHOUT_CALLS, 1);
  builder.AddChannelArgument(GRPC_ARG_KEEPALIVE_TIME_MS, 30000);
  builder.AddChannelArgument(GRPC_ARG_KEEPALIVE_TIMEOUT_MS, 10000);
  std::unique_ptr<grpc::Server> server = builder.BuildAndStart();
  if (!server || port == 0) {
    spdlog::error("cannot listen on {}: the address is in use or invalid", config->listen);
    return 1;
  }
  health.Attach(server->GetHealthCheckService());
  for (const auto& runtime : runtimes) health.Set(runtime->name(), false);
  spdlog::info("walfeed-server {} listening on {} ({}), {} stream(s)", WALFEED_VERSION,
               config->listen, config->plaintext ? "plaintext" : "TLS", runtimes.size());

  for (const auto& runtime : runtimes) runtime->Start();

  // Progress frames of idle subscriptions are due on their own clock.
  for (;;) {
    pollfd fd{signal_fd, POLLIN, 0};
    if (poll(&fd, 1, 250) > 0) break;
    for (const auto& runtime : runtimes) runtime->Tick();
  }
  signalfd_siginfo info;
  (void)!read(signal_fd, &info, sizeof(info));
  spdlog::info("received {}: shutting down (up to {})", strsignal(info.ssi_signo),
               absl::FormatDuration(config->shutdown_timeout));
  health.Shutdown();
  for (const auto& runtime : runtimes) {
    runtime->Stop(absl::UnavailableError(
        "walfeed-server is shutting down; resubscribe (your checkpoint is kept)"));
  }
  server->Shutdown(std::chrono::system_clock::now() +
                   absl::ToChronoMilliseconds(config->shutdown_timeout));
  server->Wait();
  spdlog::info("walfeed-server stopped");
  return 0;
}

}  // namespace
}  // namespace walfeed::server

int main(int argc, char** argv) {
  spdlog::set_default_logger(spdlog::default_logger()->clone("server"));
  spdlog::set_pattern("%Y-%m-%dT%H:%M:%S.%e%z %^%l%$ [%n] %v");
  return walfeed::server::Run(walfeed::server::ParseFlags(argc, argv));
}
