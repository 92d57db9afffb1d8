#include "latency_summary.h"

#include <algorithm>
#include <chrono>

#include "absl/strings/str_format.h"

namespace walfeed::bench {
namespace {

// The q-quantile (0..1) of sorted samples, in milliseconds.
double Quantile(const std::vector<int64_t>& sorted, double q) {
  if (sorted.empty()) return -1;
  const size_t at = std::min(sorted.size() - 1, static_cast<size_t>(q * sorted.size()));
  return static_cast<double>(sorted[at]) / 1000.0;
}

}  // namespace

int64_t WallMicros() {
  return std::chrono::duration_cast<std::chrono::microseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

std::string LatencyFields(std::vector<int64_t>& latencies_us, uint64_t transactions,
                          double seconds) {
  std::sort(latencies_us.begin(), latencies_us.end());
  return absl::StrFormat(
      "\"events\": %d, \"transactions\": %d, \"events_per_s\": %.0f, "
      "\"transactions_per_s\": %.0f, \"p50_ms\": %.3f, \"p90_ms\": %.3f, \"p99_ms\": %.3f, "
      "\"p999_ms\": %.3f, \"max_ms\": %.3f, \"min_ms\": %.3f",
      latencies_us.size(), transactions, static_cast<double>(latencies_us.size()) / seconds,
      static_cast<double>(transactions) / seconds, Quantile(latencies_us, 0.50),
      Quantile(latencies_us, 0.90), Quantile(latencies_us, 0.99), Quantile(latencies_us, 0.999),
      Quantile(latencies_us, 1.0), Quantile(latencies_us, 0.0));
}

}  // namespace walfeed::bench
