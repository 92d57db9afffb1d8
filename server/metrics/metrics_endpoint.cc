#include "server/metrics/metrics_endpoint.h"

#include <exception>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "prometheus/exposer.h"

namespace walfeed::server::metrics {

absl::StatusOr<std::unique_ptr<MetricsEndpoint>> MetricsEndpoint::Start(
    const std::string& listen, std::vector<std::shared_ptr<prometheus::Collectable>> collectables) {
  std::unique_ptr<MetricsEndpoint> endpoint(new MetricsEndpoint());
  // The embedded HTTP server takes numeric addresses only.
  std::string address = listen;
  if (absl::StartsWith(address, "localhost:")) {
    address = absl::StrCat("127.0.0.1", address.substr(9));
  }
  try {
    // One thread: scrapes are rare, and each waits at most briefly for a slot read.
    endpoint->exposer_ = std::make_unique<prometheus::Exposer>(address, 1);
  } catch (const std::exception& e) {
    return absl::UnavailableError(absl::StrCat(
        "metrics_listen ", listen, ": cannot listen (", e.what(),
        "): the address is in use or not a local address; choose another metrics_listen"));
  }
  const std::vector<int> ports = endpoint->exposer_->GetListeningPorts();
  endpoint->port_ = ports.empty() ? 0 : ports.front();
  endpoint->collectables_ = std::move(collectables);
  for (const auto& collectable : endpoint->collectables_) {
    endpoint->exposer_->RegisterCollectable(collectable);
  }
  return endpoint;
}

MetricsEndpoint::~MetricsEndpoint() = default;

}  // namespace walfeed::server::metrics
