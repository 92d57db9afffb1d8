// WalfeedServer: a running walfeed server, everything main() does between a
// parsed configuration and a signal: credentials, token authorization, one
// StreamRuntime per stream, the gRPC server with the ChangeStream service, health
// and reflection, and the clock that sends progress frames to idle
// subscriptions. Tests run it in-process; walfeed-server wraps it.
//
// Health (grpc.health.v1): "" is SERVING while the server runs;
// "walfeed.v1.ChangeStream" is SERVING while every stream streams;
// "walfeed.v1.ChangeStream/<stream>" is SERVING while that stream is connected to
// its slot. All become NOT_SERVING at shutdown.
#ifndef WALFEED_SERVER_WALFEED_SERVER_H_
#define WALFEED_SERVER_WALFEED_SERVER_H_

#include <atomic>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <grpcpp/grpcpp.h>

#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "server/auth.h"
#include "server/change_stream_service.h"
#include "replication/stream_source.h"
#include "server/config.h"
#include "server/metrics/metrics_endpoint.h"
#include "server/metrics/rpc_metrics.h"
#include "server/progress_ticker.h"
#include "server/stream_runtime.h"
#include "server/worker_pool.h"

namespace walfeed::server {

class HealthBoard;

class WalfeedServer {
 public:
  // Listens and starts every stream (each connects and provisions on its own
  // thread; Subscribe answers UNAVAILABLE until its stream is prepared). Errors:
  // InvalidArgument for unreadable TLS or token files (named), Unavailable when
  // the address cannot be bound. `sources` makes each stream's database side
  // (main passes PostgreSQL's, replication/pg/pg_stream_source.h).
  static absl::StatusOr<std::unique_ptr<WalfeedServer>> Start(
      ServerConfig config, replication::StreamSourceFactory sources);

  // What Start reads from files before it listens: the TLS files and the
  // tokens file (which must name only configured streams). --check-config
  // runs it too, so that it finds what Start would refuse.
  struct Secrets {
    std::optional<TlsFiles> tls;             // Unset with plaintext.
    std::optional<TokenAuthorizer> tokens;   // Unset without auth.tokens_file.
  };
  static absl::StatusOr<Secrets> ReadSecrets(const ServerConfig& config);

  // Shuts down gracefully if still running.
  ~WalfeedServer();
  WalfeedServer(const WalfeedServer&) = delete;
  WalfeedServer& operator=(const WalfeedServer&) = delete;

  // The bound port (useful with listen port 0).
  int port() const { return port_; }
  // The metrics endpoint's bound port; 0 when metrics_listen is not set.
  int metrics_port() const { return metrics_ ? metrics_->port() : 0; }
  const ServerConfig& config() const { return config_; }
  StreamRuntime* stream(const std::string& name) const;

  // Health NOT_SERVING; every call still being answered, every subscription
  // and every new call ends UNAVAILABLE (reason SERVER_STOPPING); the gRPC
  // server drains for at most shutdown_timeout; then readers end their
  // replication connections cleanly and acks in flight land. The last two wait
  // on PostgreSQL (each libpq call is bounded, see pg_conn.h); walfeed-server's
  // main bounds the whole by shutdown_timeout. Idempotent.
  void Shutdown() ABSL_LOCKS_EXCLUDED(mu_);

 private:
  explicit WalfeedServer(ServerConfig config);

  ServerConfig config_;
  std::unique_ptr<HealthBoard> health_;
  std::optional<TokenAuthorizer> authorizer_;
  std::vector<std::unique_ptr<StreamRuntime>> runtimes_;
  std::map<std::string, StreamRuntime*> by_name_;
  std::unique_ptr<WorkerPool> pool_;
  std::unique_ptr<WorkerPool> status_pool_;
  std::unique_ptr<ChangeStreamService> service_;
  // Declared before server_: the interceptors refer to rpc_metrics_.
  std::unique_ptr<metrics::RpcMetrics> rpc_metrics_;
  std::unique_ptr<grpc::Server> server_;
  int port_ = 0;
  // Reads the runtimes: destroyed (in Shutdown) before they are.
  std::unique_ptr<metrics::MetricsEndpoint> metrics_;
  // Progress frames of idle sessions; ticks the runtimes once they all started.
  std::unique_ptr<ProgressTicker> ticker_;
  std::atomic<bool> runtimes_started_{false};

  absl::Mutex mu_;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  std::string advertise_ ABSL_GUARDED_BY(mu_);  // AdvertiseAddress, once bound.
};

}  // namespace walfeed::server

#endif  // WALFEED_SERVER_WALFEED_SERVER_H_
