// MetricsEndpoint: serves Prometheus text format at http://<listen>/metrics,
// on an address of its own (metrics_listen), with prometheus-cpp's exposer.
// No TLS and no authentication: bind it to loopback or a network only the
// scraper reaches (the server warns otherwise).
#ifndef WALFEED_SERVER_METRICS_METRICS_ENDPOINT_H_
#define WALFEED_SERVER_METRICS_METRICS_ENDPOINT_H_

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "prometheus/collectable.h"

namespace prometheus {
class Exposer;
}

namespace walfeed::server::metrics {

class MetricsEndpoint {
 public:
  // Listens on `listen` ("host:port", host an IP address, "[v6]" or
  // localhost; port 0 picks one) and serves `collectables`. UNAVAILABLE when
  // the address cannot be bound, naming it.
  static absl::StatusOr<std::unique_ptr<MetricsEndpoint>> Start(
      const std::string& listen, std::vector<std::shared_ptr<prometheus::Collectable>> collectables);
  // Stops serving; waits for a scrape in progress.
  ~MetricsEndpoint();
  MetricsEndpoint(const MetricsEndpoint&) = delete;
  MetricsEndpoint& operator=(const MetricsEndpoint&) = delete;

  int port() const { return port_; }

 private:
  MetricsEndpoint() = default;

  std::vector<std::shared_ptr<prometheus::Collectable>> collectables_;
  std::unique_ptr<prometheus::Exposer> exposer_;
  int port_ = 0;
};

}  // namespace walfeed::server::metrics

#endif  // WALFEED_SERVER_METRICS_METRICS_ENDPOINT_H_
