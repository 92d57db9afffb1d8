#include "server/metrics/family_builder.h"

namespace walfeed::server::metrics {

prometheus::ClientMetric& FamilyBuilder::Add(const std::string& name, const std::string& help,
                                             prometheus::MetricType type,
                                             const Labels& labels) {
  auto [it, inserted] = index_.try_emplace(name, families_.size());
  if (inserted) {
    prometheus::MetricFamily family;
    family.name = name;
    family.help = help;
    family.type = type;
    families_.push_back(std::move(family));
  }
  prometheus::ClientMetric& metric = families_[it->second].metric.emplace_back();
  for (const auto& [label, value] : labels) metric.label.push_back({label, value});
  return metric;
}

void FamilyBuilder::Gauge(const std::string& name, const std::string& help, const Labels& labels,
                          double value) {
  Add(name, help, prometheus::MetricType::Gauge, labels).gauge.value = value;
}

void FamilyBuilder::Counter(const std::string& name, const std::string& help,
                            const Labels& labels, double value) {
  Add(name, help, prometheus::MetricType::Counter, labels).counter.value = value;
}

void FamilyBuilder::Timestamp(const std::string& name, const std::string& help,
                              const Labels& labels, absl::Time at) {
  if (at == absl::InfinitePast()) return;
  Gauge(name, help, labels, absl::ToDoubleSeconds(at - absl::UnixEpoch()));
}

}  // namespace walfeed::server::metrics
