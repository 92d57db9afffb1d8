#include "server/walfeed_server.h"

#include <grpcpp/ext/proto_server_reflection_plugin.h>
#include <grpcpp/health_check_service_interface.h>

#include <unistd.h>

#include <algorithm>

#include "absl/random/random.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "grpc/health/v1/health.pb.h"
#include "replication/error_reason.h"
#include "server/metrics/process_collector.h"
#include "server/metrics/stream_collector.h"
#include "server/spill/spill_log.h"
#include "spdlog/spdlog.h"

namespace walfeed::server {

namespace reason = replication::reason;

constexpr char kServiceName[] = "walfeed.v1.ChangeStream";

// Health names: the service, and one per stream.
class HealthBoard {
 public:
  void Attach(grpc::HealthCheckServiceInterface* service) {
    absl::MutexLock lock(&mu_);
    service_ = service;
  }
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
  grpc::HealthCheckServiceInterface* service_ ABSL_GUARDED_BY(mu_) = nullptr;
  std::map<std::string, bool> serving_ ABSL_GUARDED_BY(mu_);
};

namespace {

// The longest the progress ticker sleeps: a backstop, since every session that
// goes idle asks for the tick its next progress frame needs (TickBy).
constexpr absl::Duration kTickPeriod = absl::Milliseconds(250);

// advertise_address, or the listen address with the bound port (and the host
// name for a wildcard host).
std::string AdvertiseAddress(const ServerConfig& config, int port) {
  if (!config.advertise_address.empty()) return config.advertise_address;
  std::string host = config.listen.substr(0, config.listen.rfind(':'));
  if (host == "0.0.0.0" || host == "[::]" || host.empty()) {
    char name[256] = {};
    host = gethostname(name, sizeof(name) - 1) == 0 ? name : "localhost";
  }
  return absl::StrCat(host, ":", port);
}

}  // namespace

WalfeedServer::WalfeedServer(ServerConfig config)
    : config_(std::move(config)), health_(std::make_unique<HealthBoard>()) {}

StreamRuntime* WalfeedServer::stream(const std::string& name) const {
  auto it = by_name_.find(name);
  return it == by_name_.end() ? nullptr : it->second;
}

absl::StatusOr<WalfeedServer::Secrets> WalfeedServer::ReadSecrets(const ServerConfig& cfg) {
  Secrets secrets;
  if (!cfg.plaintext) {
    absl::StatusOr<TlsFiles> files = ReadTlsFiles(*cfg.tls);
    if (!files.ok()) {
      return absl::InvalidArgumentError(absl::StrCat("tls: ", files.status().message()));
    }
    secrets.tls = *std::move(files);
  }
  if (cfg.auth_enabled()) {
    absl::StatusOr<TokenAuthorizer> loaded = TokenAuthorizer::Load(cfg.tokens_file);
    if (!loaded.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat("auth.tokens_file: ", loaded.status().message()));
    }
    std::vector<std::string> names;
    for (const auto& stream : cfg.streams) names.push_back(stream.name);
    if (absl::Status known = loaded->CheckStreamsConfigured(names); !known.ok()) {
      return absl::InvalidArgumentError(absl::StrCat("auth.tokens_file: ", known.message()));
    }
    secrets.tokens = *std::move(loaded);
  }
  return secrets;
}

absl::StatusOr<std::unique_ptr<WalfeedServer>> WalfeedServer::Start(
    ServerConfig config, replication::StreamSourceFactory sources) {
  absl::StatusOr<Secrets> secrets = ReadSecrets(config);
  if (!secrets.ok()) return secrets.status();
  std::unique_ptr<WalfeedServer> server(new WalfeedServer(std::move(config)));
  const ServerConfig& cfg = server->config_;

  std::shared_ptr<grpc::ServerCredentials> credentials;
  if (!secrets->tls) {
    credentials = grpc::InsecureServerCredentials();
    if (ListensBeyondLoopback(cfg.listen)) {
      spdlog::warn("listening on {} WITHOUT TLS beyond loopback: change data and tokens "
                   "cross the network in clear text; configure tls",
                   cfg.listen);
    }
  } else {
    const TlsFiles& files = *secrets->tls;
    grpc::SslServerCredentialsOptions options(
        files.client_ca.empty() ? GRPC_SSL_DONT_REQUEST_CLIENT_CERTIFICATE
                                : GRPC_SSL_REQUEST_AND_REQUIRE_CLIENT_CERTIFICATE_AND_VERIFY);
    options.pem_root_certs = files.client_ca;
    options.pem_key_cert_pairs.push_back({files.private_key, files.cert_chain});
    credentials = grpc::SslServerCredentials(options);
  }
  if (secrets->tokens) {
    server->authorizer_ = std::move(secrets->tokens);
  } else {
    spdlog::warn("no auth.tokens_file configured: every client may subscribe, ack, read "
                 "status and remove consumers");
  }

  HealthBoard* health = server->health_.get();
  // Active/standby: each stream is led by one process; this one's id (unique
  // per start) and where clients reach it (known once the port is bound).
  const std::string instance_id =
      absl::StrFormat("%08x", absl::Uniform<uint32_t>(absl::BitGen()));
  WalfeedServer* self = server.get();
  auto advertise = [self] {
    absl::MutexLock lock(&self->mu_);
    return self->advertise_;
  };
  // Made before the runtimes, which ask it for ticks; it ticks them only once
  // all of them have started (runtimes_ no longer changes then).
  server->ticker_ = std::make_unique<ProgressTicker>(kTickPeriod, [self] {
    if (!self->runtimes_started_.load(std::memory_order_acquire)) return;
    for (const auto& runtime : self->runtimes_) runtime->Tick();
  });
  ProgressTicker* ticker = server->ticker_.get();
  for (const replication::StreamConfig& stream : cfg.streams) {
    RuntimeOptions options;
    options.progress_due = [ticker](absl::Time due) { ticker->TickBy(due); };
    options.source.config = stream;
    options.source.instance_id = instance_id;
    options.source.advertise_address = advertise;
    options.source.checkpoint_schema = cfg.checkpoint.schema;
    options.source.checkpoint_conninfo = cfg.checkpoint.conninfo;
    options.source.read_coalesce = cfg.defaults.read_coalesce;
    options.buffer_bytes = cfg.defaults.buffer_bytes;
    options.retention = cfg.RetentionFor(stream.name);
    const std::string name = stream.name;
    std::unique_ptr<spill::SpillLog> spill;
    if (!cfg.state_dir.empty()) {
      // "stream-" keeps any stream name (even "..") inside the spill directory.
      absl::StatusOr<std::unique_ptr<spill::SpillLog>> opened = spill::SpillLog::Open(
          {absl::StrCat(cfg.state_dir, "/spill/stream-", name),
           spill::SegmentBytesFor(options.retention.retention_bytes)});
      if (!opened.ok()) {
        return absl::Status(opened.status().code(),
                            absl::StrCat("state_dir: stream ", name, ": ",
                                         opened.status().message()));
      }
      spill = std::move(*opened);
    }
    std::unique_ptr<replication::StreamSource> source = sources(options.source);
    server->runtimes_.push_back(std::make_unique<StreamRuntime>(
        std::move(options), std::move(source),
        [health, name](walfeed::v1::StreamState state) {
          health->Set(name, state == walfeed::v1::STREAM_STATE_STREAMING);
        },
        std::move(spill)));
    server->by_name_[name] = server->runtimes_.back().get();
  }

  server->pool_ = std::make_unique<WorkerPool>(8);
  server->status_pool_ = std::make_unique<WorkerPool>(2);
  server->service_ = std::make_unique<ChangeStreamService>(
      server->by_name_, server->authorizer_ ? &*server->authorizer_ : nullptr,
      server->pool_.get(), server->status_pool_.get(), cfg.defaults);

  if (!cfg.metrics_listen.empty()) {
    auto registry = std::make_shared<prometheus::Registry>();
    server->rpc_metrics_ =
        std::make_unique<metrics::RpcMetrics>(*registry, metrics::ServedMethods());
    std::vector<StreamRuntime*> streams;
    for (const auto& runtime : server->runtimes_) streams.push_back(runtime.get());
    absl::StatusOr<std::unique_ptr<metrics::MetricsEndpoint>> endpoint =
        metrics::MetricsEndpoint::Start(
            cfg.metrics_listen,
            {registry, std::make_shared<metrics::StreamCollector>(std::move(streams)),
             std::make_shared<metrics::ProcessCollector>(WALFEED_VERSION)});
    if (!endpoint.ok()) return endpoint.status();
    server->metrics_ = *std::move(endpoint);
    if (ListensBeyondLoopback(cfg.metrics_listen)) {
      spdlog::warn("serving metrics on {} beyond loopback, without TLS or authentication: "
                   "stream and consumer names are visible to anyone who reaches it",
                   cfg.metrics_listen);
    }
    spdlog::info("metrics on http://{}/metrics (port {})", cfg.metrics_listen,
                 server->metrics_->port());
  }

  // Linking the health messages lets reflection describe grpc.health.v1.Health.
  (void)grpc::health::v1::HealthCheckRequest::descriptor();
  grpc::EnableDefaultHealthCheckService(true);
  grpc::reflection::InitProtoReflectionServerBuilderPlugin();
  grpc::ServerBuilder builder;
  builder.AddListeningPort(cfg.listen, credentials, &server->port_);
  builder.RegisterService(server->service_.get());
  // Clients may keep idle subscriptions alive with pings every >= 10 s.
  builder.AddChannelArgument(GRPC_ARG_HTTP2_MIN_RECV_PING_INTERVAL_WITHOUT_DATA_MS, 10000);
  builder.AddChannelArgument(GRPC_ARG_KEEPALIVE_PERMIT_WITHOUT_CALLS, 1);
  builder.AddChannelArgument(GRPC_ARG_KEEPALIVE_TIME_MS, 30000);
  builder.AddChannelArgument(GRPC_ARG_KEEPALIVE_TIMEOUT_MS, 10000);
  // gRPC sets SO_REUSEPORT by default: a second walfeed-server started on the same
  // port by mistake would then share incoming connections with the first, and
  // their sessions would fence each other. Without it the second fails to start.
  builder.AddChannelArgument(GRPC_ARG_ALLOW_REUSEPORT, 0);
  if (server->rpc_metrics_) {
    std::vector<std::unique_ptr<grpc::experimental::ServerInterceptorFactoryInterface>> creators;
    creators.push_back(server->rpc_metrics_->InterceptorFactory());
    builder.experimental().SetInterceptorCreators(std::move(creators));
  }
  server->server_ = builder.BuildAndStart();
  if (!server->server_ || server->port_ == 0) {
    return absl::UnavailableError(absl::StrCat(
        "cannot listen on ", cfg.listen, ": the address is in use or invalid"));
  }
  {
    absl::MutexLock lock(&server->mu_);
    server->advertise_ = AdvertiseAddress(cfg, server->port_);
  }
  health->Attach(server->server_->GetHealthCheckService());
  for (const auto& runtime : server->runtimes_) health->Set(runtime->name(), false);
  spdlog::info("walfeed-server listening on {} (port {}, {}), {} stream(s)", cfg.listen,
               server->port_, cfg.plaintext ? "plaintext" : "TLS", server->runtimes_.size());
  for (const auto& runtime : server->runtimes_) runtime->Start();
  server->runtimes_started_.store(true, std::memory_order_release);
  return server;
}

void WalfeedServer::Shutdown() {
  {
    absl::MutexLock lock(&mu_);
    if (stopping_) return;
    stopping_ = true;
  }
  if (ticker_) ticker_->Stop();
  health_->Shutdown();
  const absl::Status stopping = reason::WithReason(
      absl::UnavailableError("walfeed-server is shutting down; resubscribe (your checkpoint is kept)"),
      reason::kServerStopping);
  // Clients first, PostgreSQL last: calls still being answered and sessions
  // end UNAVAILABLE now, whatever the database does; only then does anything
  // wait on it (readers ending their copy, acks in flight).
  if (service_) service_->Stop(stopping);
  for (const auto& runtime : runtimes_) runtime->BeginStop(stopping);
  if (server_) {
    // gRPC's drain waits for every client connection to go away, idle ones
    // included, until its deadline. Once every session has sent its last
    // status there is nothing left to drain: a short deadline then closes the
    // idle connections (a unary status still in flight gets those moments).
    // Half the budget at most: a client that stopped reading must not use up
    // the time the readers need to end their copy cleanly.
    const absl::Time deadline = absl::Now() + config_.shutdown_timeout / 2;
    if (service_) service_->AwaitSubscriptionsDone(deadline);
    server_->Shutdown(absl::ToChronoTime(std::min(deadline, absl::Now() + absl::Milliseconds(100))));
    server_->Wait();
  }
  for (const auto& runtime : runtimes_) runtime->Stop(stopping);
  pool_.reset();  // Acks in flight land (their calls were answered already).
  status_pool_.reset();
  metrics_.reset();
  spdlog::info("walfeed-server stopped");
}

WalfeedServer::~WalfeedServer() { Shutdown(); }

}  // namespace walfeed::server
