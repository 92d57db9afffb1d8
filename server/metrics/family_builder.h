// FamilyBuilder: metric families assembled at scrape time from a snapshot of
// the server's state, for prometheus::Collectable implementations. The values
// already exist (the registry's counters, the reader's, the slot read); these
// collectors only name them, so the hot paths stay free of metric updates.
#ifndef WALFEED_SERVER_METRICS_FAMILY_BUILDER_H_
#define WALFEED_SERVER_METRICS_FAMILY_BUILDER_H_

#include <cstddef>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "absl/time/time.h"
#include "prometheus/metric_family.h"

namespace walfeed::server::metrics {

using Labels = std::vector<std::pair<std::string, std::string>>;

class FamilyBuilder {
 public:
  // Adds one sample to the family `name`, created (with `help` and the type)
  // at its first sample. A family's samples keep the order they were added in.
  void Gauge(const std::string& name, const std::string& help, const Labels& labels,
             double value);
  void Counter(const std::string& name, const std::string& help, const Labels& labels,
               double value);
  // A point in time as a gauge in Unix seconds; nothing for InfinitePast
  // (never happened), so an alert on its age cannot fire on a default.
  void Timestamp(const std::string& name, const std::string& help, const Labels& labels,
                 absl::Time at);

  std::vector<prometheus::MetricFamily> Take() { return std::move(families_); }

 private:
  prometheus::ClientMetric& Add(const std::string& name, const std::string& help,
                                prometheus::MetricType type, const Labels& labels);

  std::vector<prometheus::MetricFamily> families_;
  std::map<std::string, size_t> index_;  // Family name -> position in families_.
};

}  // namespace walfeed::server::metrics

#endif  // WALFEED_SERVER_METRICS_FAMILY_BUILDER_H_
