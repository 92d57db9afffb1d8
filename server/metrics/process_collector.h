// ProcessCollector: the process's own figures in the names Prometheus client
// libraries use (process_*), read from /proc/self at scrape time, and
// walfeed_build_info.
#ifndef WALFEED_SERVER_METRICS_PROCESS_COLLECTOR_H_
#define WALFEED_SERVER_METRICS_PROCESS_COLLECTOR_H_

#include <string>
#include <vector>

#include "prometheus/collectable.h"

namespace walfeed::server::metrics {

class ProcessCollector : public prometheus::Collectable {
 public:
  explicit ProcessCollector(std::string version) : version_(std::move(version)) {}
  std::vector<prometheus::MetricFamily> Collect() const override;

 private:
  const std::string version_;
};

}  // namespace walfeed::server::metrics

#endif  // WALFEED_SERVER_METRICS_PROCESS_COLLECTOR_H_
