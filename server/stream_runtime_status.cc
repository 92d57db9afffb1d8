// StreamRuntime's status: the snapshot GetStatus and the metrics read, and
// the lag figures derived from it.
#include "server/stream_runtime.h"

namespace walfeed::server {

Lsn ServerLsnOf(const RuntimeSnapshot& snapshot, const SlotMonitor::View& view) {
  if (view.report && view.report->server_wal_lsn.valid()) return view.report->server_wal_lsn;
  return snapshot.server_wal_end;
}

uint64_t RetainedWalBytes(const replication::SlotState& slot, Lsn server) {
  if (!slot.restart_lsn.valid() || server <= slot.restart_lsn) return 0;
  return server.value() - slot.restart_lsn.value();
}

uint64_t LagBytes(const RuntimeSnapshot& snapshot, const ConsumerSnapshot& consumer, Lsn server) {
  const Lsn from = consumer.position.commit_lsn.valid() ? consumer.position.commit_lsn
                                                        : snapshot.stream_start;
  if (!from.valid() || server <= from) return 0;
  return server.value() - from.value();
}

RuntimeSnapshot StreamRuntime::Snapshot() const {
  RuntimeSnapshot snapshot;
  static_cast<RegistrySnapshot&>(snapshot) = registry_.Snapshot();
  snapshot.name = name();
  snapshot.slot_name = options_.source.config.slot_name;
  const StreamSupervisor::State state = supervisor_.state();
  snapshot.state = state.state;
  snapshot.error = state.error;
  snapshot.leading = state.leading;
  snapshot.active = state.active;
  // Positions only grow, so the totals' (the highest any reader saw) are the
  // current ones.
  snapshot.reader = source_->totals();
  snapshot.server_wal_end = snapshot.reader.server_wal_end;
  snapshot.confirmed = snapshot.reader.confirmed_sent;
  snapshot.connections = connections_.load();
  snapshot.stream_start = Lsn(stream_start_.load());
  return snapshot;
}

}  // namespace walfeed::server
