// Pieces for running a StreamReader inside an integration test: a sink that
// collects what it is given (or only counts it), an in-memory confirmed-position
// store, and a reader on its own thread. Waits are on conditions with deadlines.
#ifndef WALFEED_TESTS_TESTING_READER_HARNESS_H_
#define WALFEED_TESTS_TESTING_READER_HARNESS_H_

#include <cstddef>
#include <cstdint>
#include <thread>
#include <utility>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "replication/pg/stream_reader.h"

namespace walfeed::testing {

using ::walfeed::replication::ChangeEvent;
using ::walfeed::replication::Lsn;
using ::walfeed::replication::TransactionCommitted;

inline constexpr absl::Duration kReaderDeadline = absl::Seconds(60);

class CollectingSink : public replication::StreamSink {
 public:
  // With `retain` false only counts are kept (and the last event), so a test can
  // stream millions of rows without the sink being what uses the memory.
  explicit CollectingSink(bool retain = true) : retain_(retain) {}

  bool HasRoom() override ABSL_LOCKS_EXCLUDED(mu_);
  void OnEvent(ChangeEvent event) override ABSL_LOCKS_EXCLUDED(mu_);
  void OnCommit(const TransactionCommitted& commit) override ABSL_LOCKS_EXCLUDED(mu_);
  void OnConnected(Lsn start) override ABSL_LOCKS_EXCLUDED(mu_);
  void OnDisconnected(const absl::Status& why) override ABSL_LOCKS_EXCLUDED(mu_);

  void SetRoom(bool room) ABSL_LOCKS_EXCLUDED(mu_);
  // Wait until at least `n` commits / events / connections arrived; false on deadline.
  bool WaitForCommits(size_t n, absl::Duration timeout = kReaderDeadline)
      ABSL_LOCKS_EXCLUDED(mu_);
  bool WaitForEvents(size_t n, absl::Duration timeout = kReaderDeadline)
      ABSL_LOCKS_EXCLUDED(mu_);
  bool WaitForConnections(size_t n, absl::Duration timeout = kReaderDeadline)
      ABSL_LOCKS_EXCLUDED(mu_);

  std::vector<ChangeEvent> events() const ABSL_LOCKS_EXCLUDED(mu_);
  std::vector<TransactionCommitted> commits() const ABSL_LOCKS_EXCLUDED(mu_);
  size_t event_count() const ABSL_LOCKS_EXCLUDED(mu_);
  size_t connections() const ABSL_LOCKS_EXCLUDED(mu_);
  size_t disconnections() const ABSL_LOCKS_EXCLUDED(mu_);
  ChangeEvent last_event() const ABSL_LOCKS_EXCLUDED(mu_);

 private:
  bool WaitFor(const std::function<bool()>& enough, absl::Duration timeout)
      ABSL_LOCKS_EXCLUDED(mu_);

  const bool retain_;
  mutable absl::Mutex mu_;
  bool room_ ABSL_GUARDED_BY(mu_) = true;
  size_t event_count_ ABSL_GUARDED_BY(mu_) = 0;
  size_t connections_ ABSL_GUARDED_BY(mu_) = 0;
  size_t disconnections_ ABSL_GUARDED_BY(mu_) = 0;
  ChangeEvent last_event_ ABSL_GUARDED_BY(mu_);
  std::vector<ChangeEvent> events_ ABSL_GUARDED_BY(mu_);
  std::vector<TransactionCommitted> commits_ ABSL_GUARDED_BY(mu_);
};

class MemoryConfirmedStore : public replication::ConfirmedLsnStore {
 public:
  absl::Status PersistConfirmed(Lsn lsn) override ABSL_LOCKS_EXCLUDED(mu_);
  Lsn stored() const ABSL_LOCKS_EXCLUDED(mu_);

 private:
  mutable absl::Mutex mu_;
  Lsn stored_ ABSL_GUARDED_BY(mu_);
};

// One StreamReader running Run(start) on its own thread; Stop() (or the destructor)
// stops it and returns what Run returned.
class RunningReader {
 public:
  RunningReader(replication::pg::ReaderOptions options, replication::AckTracker* tracker,
                replication::StreamSink* sink, replication::ConfirmedLsnStore* store,
                Lsn start);
  ~RunningReader();
  RunningReader(const RunningReader&) = delete;
  RunningReader& operator=(const RunningReader&) = delete;

  absl::Status Stop();
  // Waits for Run() to return by itself (a definite error); false on deadline.
  bool WaitForExit(absl::Duration timeout = kReaderDeadline) ABSL_LOCKS_EXCLUDED(mu_);
  absl::Status result() const ABSL_LOCKS_EXCLUDED(mu_);
  replication::pg::StreamReader& reader() { return reader_; }

 private:
  replication::pg::StreamReader reader_;
  mutable absl::Mutex mu_;
  bool exited_ ABSL_GUARDED_BY(mu_) = false;
  absl::Status result_ ABSL_GUARDED_BY(mu_);
  std::thread thread_;
};

}  // namespace walfeed::testing

#endif  // WALFEED_TESTS_TESTING_READER_HARNESS_H_
