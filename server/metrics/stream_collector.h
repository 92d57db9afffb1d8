// StreamCollector: every stream's, slot's and consumer's figures as Prometheus
// families, read at scrape time from StreamRuntime::Snapshot() and the slot
// monitor (the same sources as GetStatus).
//
// Labels are bounded by configuration and by the consumers that exist: stream
// and slot names, consumer names, and fixed value sets (state, wal_status,
// tier). Never session ids or event ids. A removed consumer's series vanish
// with it.
#ifndef WALFEED_SERVER_METRICS_STREAM_COLLECTOR_H_
#define WALFEED_SERVER_METRICS_STREAM_COLLECTOR_H_

#include <vector>

#include "absl/time/time.h"
#include "prometheus/collectable.h"
#include "server/stream_runtime.h"

namespace walfeed::server::metrics {

class StreamCollector : public prometheus::Collectable {
 public:
  // How long a scrape waits for a fresh slot read before it reports the last
  // one (walfeed_slot_read_timestamp_seconds says how old it is).
  static constexpr absl::Duration kSlotReadWait = absl::Milliseconds(500);

  // The runtimes must outlive the collector's registration.
  explicit StreamCollector(std::vector<StreamRuntime*> streams) : streams_(std::move(streams)) {}

  std::vector<prometheus::MetricFamily> Collect() const override;

 private:
  const std::vector<StreamRuntime*> streams_;
};

}  // namespace walfeed::server::metrics

#endif  // WALFEED_SERVER_METRICS_STREAM_COLLECTOR_H_
