// PrepareStream: everything between "a stream is configured" and "its reader may
// run START_REPLICATION", in the order that keeps it fail-closed:
//
//   Load the stored checkpoint
//   read the slot ──► missing while a position is stored? ──► DataLoss (never
//                     provision: creating a slot now would hide the loss)
//   Provision (preflight; create missing publications, then the slot, if allowed)
//   read the slot again ──► PlanStart (slot_guard.h) ──► BindSlot when unbound
//
// Loading runs while the slot and Provision's preflight are read (StartReads);
// nothing is written, created or decided until all three are in, and their
// errors are reported in the order above.
//
// The result says where to start, which slot identity the reader must keep
// seeing, the consumers' stored checkpoints (to register with the AckTracker) and
// the floor below which events are not delivered again.
#ifndef WALFEED_REPLICATION_PG_STREAM_START_H_
#define WALFEED_REPLICATION_PG_STREAM_START_H_

#include <atomic>
#include <future>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "replication/group_committer.h"
#include "replication/pg/provisioning.h"
#include "replication/pg/replication_connection.h"
#include "replication/pg/slot_guard.h"
#include "replication/stream_config.h"
#include "replication/pg/stream_reader.h"

namespace walfeed::replication::pg {

// The reads PrepareStream starts with, begun on a thread of their own so that
// they overlap whatever the caller does meanwhile (opening the checkpoint store
// and loading from it): the slot over a replication connection, then
// Provision's preflight. A new connection costs a backend start and a cold
// catalog cache, several milliseconds each on a local server (tens on a loaded
// one, where backend starts also queue behind each other). When the slot
// exists, the slot read's connection is kept for the reader
// (PreparedStream::walsender) and the preflight runs on it too, counting it
// among the WAL senders in use: the start-up opens no other connection to the
// server for these reads. A slot walfeed is about to create is created over a
// connection of its own, so then the slot read's is closed first and the
// preflight runs over an SQL connection. Neither read writes anything; what
// PrepareStream decides from them, and in which order, is as above.
class StartReads {
 public:
  // Nothing is started for a `config` that does not validate (PrepareStream
  // reports why).
  static StartReads Begin(const StreamConfig& config, std::string checkpoint_schema);

  struct Results {
    absl::StatusOr<SlotCheck> slot;
    // Not run (an error) when the slot could not be read.
    absl::StatusOr<Inspected> inspection;
    // The slot read's connection, kept when the slot exists.
    std::unique_ptr<PgReplicationConnection> walsender;
  };
  // Waits for the reads; call once, on a StartReads from Begin() with a
  // `config` that validates.
  Results Take() { return results_.get(); }

  StartReads() = default;
  StartReads(StartReads&&) = default;
  StartReads& operator=(StartReads&&) = delete;
  // Reads not taken are cut short (the preflight is not begun if the slot
  // read is still running), then waited for: an early return (the checkpoint
  // store could not be opened) does not wait for a whole preflight.
  ~StartReads();

 private:
  std::shared_ptr<std::atomic<bool>> abandoned_;
  // Waited for on destruction (std::async).
  std::future<Results> results_;
};

struct PreparedStream {
  StartPlan plan;
  ProvisionResult provisioned;  // What was created, and the preflight warnings.
  // The start-up's replication connection, for the reader's first session
  // (ReaderOptionsFor passes it on); null when the slot was created, or when
  // the caller's reads were not begun with StartReads.
  std::shared_ptr<WalSenderHandoff> walsender;
};

// Prepares `config`'s stream against the server and the checkpoint store behind
// `committer`, whose tables live in `checkpoint_schema`. Errors: Provision()'s and
// PlanStart()'s (DataLoss for a lost, dropped, recreated or advanced slot, each
// naming the recovery).
// `snapshot`: the initial snapshot's steps, used if the slot is created.
absl::StatusOr<PreparedStream> PrepareStream(const StreamConfig& config,
                                             GroupCommitter* committer,
                                             absl::string_view checkpoint_schema,
                                             const SnapshotSteps* snapshot = nullptr);
// The same with reads the caller began (StartReads::Begin with the same
// `config` and `checkpoint_schema`).
absl::StatusOr<PreparedStream> PrepareStream(const StreamConfig& config,
                                             GroupCommitter* committer,
                                             absl::string_view checkpoint_schema,
                                             StartReads reads,
                                             const SnapshotSteps* snapshot = nullptr);

// ReaderOptions for a prepared stream: connection, slot, publications, the slot
// identity to re-check on every reconnect and the delivery floor.
ReaderOptions ReaderOptionsFor(const StreamConfig& config, const PreparedStream& prepared,
                               absl::string_view checkpoint_schema);

// The reader's ConfirmedLsnStore backed by the group committer: the stream's
// confirmed position is stored (riding along with acks) before it is confirmed.
class CommittedConfirmedStore : public ConfirmedLsnStore {
 public:
  // `committer` must outlive this.
  CommittedConfirmedStore(GroupCommitter* committer, std::string stream)
      : committer_(committer), stream_(std::move(stream)) {}
  absl::Status PersistConfirmed(Lsn lsn) override {
    return committer_->SetConfirmed(stream_, lsn);
  }
  absl::Status Ping() override { return committer_->Ping(); }

 private:
  GroupCommitter* const committer_;
  const std::string stream_;
};

}  // namespace walfeed::replication::pg

#endif  // WALFEED_REPLICATION_PG_STREAM_START_H_
