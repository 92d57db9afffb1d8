// Scraping walfeed-server's metrics endpoint in tests: a plain HTTP GET, and a
// parser for the Prometheus text format that fails on any malformed line (so
// every scrape in a test also checks the exposition).
#ifndef WALFEED_TESTS_TESTING_METRICS_SCRAPE_H_
#define WALFEED_TESTS_TESTING_METRICS_SCRAPE_H_

#include <map>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"

namespace walfeed::testing {

// GET http://127.0.0.1:<port><path>: the body of a 200 answer, or an error.
absl::StatusOr<std::string> HttpGet(int port, const std::string& path,
                                    absl::Duration timeout = absl::Seconds(10));

struct MetricSample {
  std::string name;
  std::map<std::string, std::string> labels;
  double value = 0;
};

class MetricsScrape {
 public:
  // InvalidArgument naming the first line that is not a comment, blank, or
  // `name{label="value",...} value`.
  static absl::StatusOr<MetricsScrape> Parse(absl::string_view text);

  // The value of the one sample named `name` whose labels include `labels`;
  // nullopt when none does (more than one is a test error, reported).
  std::optional<double> Value(const std::string& name,
                              const std::map<std::string, std::string>& labels = {}) const;
  // Every sample named `name`.
  std::vector<MetricSample> Samples(const std::string& name) const;
  // The "# TYPE" given for `family`, "" when none.
  std::string TypeOf(const std::string& family) const;

  const std::vector<MetricSample>& samples() const { return samples_; }

 private:
  std::vector<MetricSample> samples_;
  std::map<std::string, std::string> types_;
};

// HttpGet(port, "/metrics") parsed.
absl::StatusOr<MetricsScrape> ScrapeMetrics(int port);

}  // namespace walfeed::testing

#endif  // WALFEED_TESTS_TESTING_METRICS_SCRAPE_H_
