#include "tests/testing/reader_harness.h"

namespace walfeed::testing {

bool CollectingSink::HasRoom() {
  absl::MutexLock lock(&mu_);
  return room_;
}

void CollectingSink::OnEvent(ChangeEvent event) {
  absl::MutexLock lock(&mu_);
  ++event_count_;
  if (retain_) {
    events_.push_back(event);
  }
  last_event_ = std::move(event);
}

void CollectingSink::OnCommit(const TransactionCommitted& commit) {
  absl::MutexLock lock(&mu_);
  commits_.push_back(commit);
}

void CollectingSink::OnConnected(Lsn) {
  absl::MutexLock lock(&mu_);
  ++connections_;
}

void CollectingSink::OnDisconnected(const absl::Status&) {
  absl::MutexLock lock(&mu_);
  ++disconnections_;
}

void CollectingSink::SetRoom(bool room) {
  absl::MutexLock lock(&mu_);
  room_ = room;
}

bool CollectingSink::WaitFor(const std::function<bool()>& enough, absl::Duration timeout) {
  absl::MutexLock lock(&mu_);
  return mu_.AwaitWithTimeout(absl::Condition(&enough), timeout);
}

bool CollectingSink::WaitForCommits(size_t n, absl::Duration timeout) {
  return WaitFor([&]() ABSL_NO_THREAD_SAFETY_ANALYSIS { return commits_.size() >= n; },
                 timeout);
}

bool CollectingSink::WaitForEvents(size_t n, absl::Duration timeout) {
  return WaitFor([&]() ABSL_NO_THREAD_SAFETY_ANALYSIS { return event_count_ >= n; }, timeout);
}

bool CollectingSink::WaitForConnections(size_t n, absl::Duration timeout) {
  return WaitFor([&]() ABSL_NO_THREAD_SAFETY_ANALYSIS { return connections_ >= n; }, timeout);
}

std::vector<ChangeEvent> CollectingSink::events() const {
  absl::MutexLock lock(&mu_);
  return events_;
}

std::vector<TransactionCommitted> CollectingSink::commits() const {
  absl::MutexLock lock(&mu_);
  return commits_;
}

size_t CollectingSink::event_count() const {
  absl::MutexLock lock(&mu_);
  return event_count_;
}

size_t CollectingSink::connections() const {
  absl::MutexLock lock(&mu_);
  return connections_;
}

size_t CollectingSink::disconnections() const {
  absl::MutexLock lock(&mu_);
  return disconnections_;
}

ChangeEvent CollectingSink::last_event() const {
  absl::MutexLock lock(&mu_);
  return last_event_;
}

absl::Status MemoryConfirmedStore::PersistConfirmed(Lsn lsn) {
  absl::MutexLock lock(&mu_);
  stored_ = lsn;
  return absl::OkStatus();
}

Lsn MemoryConfirmedStore::stored() const {
  absl::MutexLock lock(&mu_);
  return stored_;
}

RunningReader::RunningReader(replication::pg::ReaderOptions options,
                             replication::AckTracker* tracker,
                             replication::StreamSink* sink,
                             replication::ConfirmedLsnStore* store, Lsn start)
    : reader_(std::move(options), tracker, sink, store), thread_([this, start] {
        absl::Status result = reader_.Run(start);
        absl::MutexLock lock(&mu_);
        result_ = std::move(result);
        exited_ = true;
      }) {}

RunningReader::~RunningReader() { (void)Stop(); }

absl::Status RunningReader::Stop() {
  if (thread_.joinable()) {
    reader_.Stop();
    thread_.join();
  }
  return result();
}

bool RunningReader::WaitForExit(absl::Duration timeout) {
  absl::MutexLock lock(&mu_);
  return mu_.AwaitWithTimeout(absl::Condition(&exited_), timeout);
}

absl::Status RunningReader::result() const {
  absl::MutexLock lock(&mu_);
  return result_;
}

}  // namespace walfeed::testing
