// PgStreamSource: the StreamSource (replication/stream_source.h) of a stream in
// PostgreSQL. main wires it into the server; nothing else in the server knows it.
//
//   TryLead(): LeaderLock (the first call also begins the StartReads)
//   Prepare(): PgCheckpointStore::Open (once) ─► GroupCommitter ─► PrepareStream
//   Run():     StreamReader (PgReplicationOpener) with the store's committer
//              persisting the confirmed position (CommittedConfirmedStore)
//   ReadSlot(): ReadSlotReport over a short SQL connection
#ifndef WALFEED_REPLICATION_PG_PG_STREAM_SOURCE_H_
#define WALFEED_REPLICATION_PG_PG_STREAM_SOURCE_H_

#include <atomic>
#include <future>
#include <memory>
#include <optional>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "replication/pg/checkpoint_store.h"
#include "replication/pg/exported_snapshot.h"
#include "replication/pg/leader_lock.h"
#include "replication/pg/stream_reader.h"
#include "replication/pg/stream_start.h"
#include "replication/stream_source.h"

namespace walfeed::replication::pg {

class PgStreamSource final : public StreamSource {
 public:
  explicit PgStreamSource(SourceOptions options);

  absl::StatusOr<PreparedSource> Prepare() override;
  GroupCommitter* committer() override { return committer_.get(); }
  absl::Status Run(const StartPlan& plan, AckTracker* tracker, StreamSink* sink) override
      ABSL_LOCKS_EXCLUDED(mu_);
  void Stop() override ABSL_LOCKS_EXCLUDED(mu_);
  void Interrupt() override ABSL_LOCKS_EXCLUDED(mu_);
  void Wake() override ABSL_LOCKS_EXCLUDED(mu_);
  ReaderStats stats() const override ABSL_LOCKS_EXCLUDED(mu_);
  ReaderStats totals() const override ABSL_LOCKS_EXCLUDED(mu_);
  absl::StatusOr<SlotReport> ReadSlot() override;
  std::unique_ptr<BackfillDatabase> NewBackfillDatabase() override;
  absl::StatusOr<bool> TryLead() override ABSL_LOCKS_EXCLUDED(lead_mu_);
  absl::Status CheckLead() override ABSL_LOCKS_EXCLUDED(lead_mu_);
  void Resign() override ABSL_LOCKS_EXCLUDED(lead_mu_);
  std::string Leader() override ABSL_LOCKS_EXCLUDED(mu_);

 private:
  // SnapshotSteps::before_slot: the initial snapshot's backfill records (one
  // per published table, for every consumer), unless a Prepare that did not
  // get to create the slot stored them already; `tables` gets their plans.
  absl::Status RecordInitialSnapshot(std::vector<InitialSnapshotTable>* tables);

  const SourceOptions options_;
  // The slot's exported snapshot while this process reads its initial
  // snapshot; shared with every backfill database.
  const std::shared_ptr<ExportedSnapshot> exported_ = std::make_shared<ExportedSnapshot>();
  // Whether the last Prepare() found backfill tables to resume from; shared
  // with every backfill database (PgBackfillDatabase's `tables_exist`).
  const std::shared_ptr<std::atomic<bool>> backfill_tables_ =
      std::make_shared<std::atomic<bool>>(true);
  bool noted_existing_slot_ = false;  // Prepare()'s thread.
  // Prepare()'s thread, then shared (the committer with Ack callers).
  std::unique_ptr<PgCheckpointStore> store_;
  std::unique_ptr<GroupCommitter> committer_;
  std::unique_ptr<CommittedConfirmedStore> confirmed_store_;
  std::optional<PreparedStream> prepared_;
  // The deferred table checks of the last Prepare(), logging their warnings;
  // waited for before the next one starts and on destruction.
  std::future<void> table_warnings_;

  mutable absl::Mutex mu_;
  bool stopped_ ABSL_GUARDED_BY(mu_) = false;
  bool interrupted_ ABSL_GUARDED_BY(mu_) = false;  // Interrupt() before or during Run.
  std::shared_ptr<StreamReader> reader_ ABSL_GUARDED_BY(mu_);
  ReaderStats retired_ ABSL_GUARDED_BY(mu_);  // The counters of readers before reader_.

  std::string leader_ ABSL_GUARDED_BY(mu_);  // LeaderLock::holder() after TryLead.

  // Leadership calls (which wait on PostgreSQL) come from the supervisor's
  // threads, serialized here; Leader() reads leader_ without waiting on them.
  absl::Mutex lead_mu_ ABSL_ACQUIRED_BEFORE(mu_);
  LeaderLock lead_ ABSL_GUARDED_BY(lead_mu_);
  // The first TryLead() (the process's start-up) begins the start's read-only
  // reads beside the lock's own connection, and the Prepare() after it takes
  // them: the lead's round trips no longer come before theirs. A lead not
  // taken abandons them. Later attempts (a standby's polls, a lead taken
  // again) leave them to Prepare(), so a standby opens nothing while it waits.
  bool lead_tried_ ABSL_GUARDED_BY(lead_mu_) = false;
  std::optional<StartReads> early_reads_ ABSL_GUARDED_BY(lead_mu_);
};

// The StreamSourceFactory main hands to the server.
std::unique_ptr<StreamSource> MakePgStreamSource(SourceOptions options);

}  // namespace walfeed::replication::pg

#endif  // WALFEED_REPLICATION_PG_PG_STREAM_SOURCE_H_
