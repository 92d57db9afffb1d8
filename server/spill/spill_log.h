// SpillLog: the part of a stream's retained events that no longer fits in
// memory, in segment files on local disk.
//
//   reader thread:  Append (oldest events leaving memory, in id order)
//                     ─► current segment file; a new one every segment_bytes
//   disk readers:   ReadAfter(cursor) ─► the next events, checksummed (DataLoss
//                   for a record that fails: it is never returned)
//   acks:           TrimThrough(floor) drops whole segments at or below the floor
//                   from the index; Reap() deletes their files later, off any
//                   lock a session waits on
//
// A cache, never the source of truth: the slot still holds everything after the
// lowest checkpoint, so Open() deletes whatever an earlier process left, and a
// stream whose spill is damaged is re-read from the slot. Writes are never
// fsynced for the same reason.
//
// Thread-safe: the index has its own mutex; file I/O happens outside it. One
// thread appends; any number read.
#ifndef WALFEED_SERVER_SPILL_SPILL_LOG_H_
#define WALFEED_SERVER_SPILL_SPILL_LOG_H_

#include <cstddef>
#include <cstdint>
#include <deque>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/types/span.h"
#include "server/buffered_event.h"

namespace walfeed::server::spill {

// A segment size for a budget: trimming frees whole segments, so a sixteenth of
// the budget (256 KiB-64 MiB) keeps what is freed timely and the file count small.
inline uint64_t SegmentBytesFor(uint64_t budget) {
  const uint64_t sixteenth = budget / 16;
  return sixteenth < (uint64_t{256} << 10) ? uint64_t{256} << 10
         : sixteenth > (uint64_t{64} << 20) ? uint64_t{64} << 20
                                            : sixteenth;
}

class SpillLog {
 public:
  struct Options {
    std::string dir;  // The stream's own directory; created if missing.
    uint64_t segment_bytes = uint64_t{16} << 20;
  };

  // Creates `dir` if needed and deletes the segment files in it. Errors name the
  // directory and what to check (permissions, a file in the way).
  static absl::StatusOr<std::unique_ptr<SpillLog>> Open(Options options);
  ~SpillLog();
  SpillLog(const SpillLog&) = delete;
  SpillLog& operator=(const SpillLog&) = delete;

  // Records encoded for an append: pure and cheap (a copy of the bytes), so a
  // caller may encode under its own lock and write after releasing it.
  struct Batch {
    std::string bytes;
    std::vector<std::pair<EventId, uint64_t>> records;  // Each record's id and offset.
    uint64_t epoch = 0;  // epoch() when encoded.
  };
  static absl::StatusOr<Batch> Encode(absl::Span<const BufferedEvent* const> events,
                                      uint64_t epoch);

  // Appends a batch (its events each newer than every event appended before).
  // Visible to readers once it returns OK. On an error (disk full, I/O) nothing
  // of the call is visible and the log stays usable. Aborted for a batch
  // encoded before the last Clear (it is dropped).
  absl::Status Append(const Batch& batch) ABSL_LOCKS_EXCLUDED(mu_);
  absl::Status Append(absl::Span<const BufferedEvent* const> events) ABSL_LOCKS_EXCLUDED(mu_);

  // The events after `after`, in order, up to about `max_bytes` of records (at
  // least one when there is one). Empty when nothing after `after` is held.
  // DataLoss when a record is damaged; NotFound when a segment was trimmed while
  // reading (the caller's cursor fell below the floor).
  absl::StatusOr<std::vector<BufferedEvent>> ReadAfter(EventId after, size_t max_bytes) const
      ABSL_LOCKS_EXCLUDED(mu_);

  // Forgets every segment whose events are all at or below `floor`.
  // Never waits for an append in progress (the caller may hold a lock sessions
  // wait on): the segment being written stays until the next call.
  void TrimThrough(EventId floor) ABSL_NO_THREAD_SAFETY_ANALYSIS;
  // Forgets everything (after a damaged record: the stream re-reads from the
  // slot) and starts a new epoch.
  void Clear() ABSL_LOCKS_EXCLUDED(mu_);
  uint64_t epoch() const ABSL_LOCKS_EXCLUDED(mu_);
  // Deletes the files of forgotten segments.
  void Reap() ABSL_LOCKS_EXCLUDED(mu_);

  // Bytes of the records held (whole segments; trimmed ones excluded).
  uint64_t bytes() const ABSL_LOCKS_EXCLUDED(mu_);
  // Bytes of records after `after`, to segment granularity at its low end.
  uint64_t BytesAfter(EventId after) const ABSL_LOCKS_EXCLUDED(mu_);
  // The newest id appended and not trimmed; EventId{} when empty.
  EventId newest() const ABSL_LOCKS_EXCLUDED(mu_);
  const std::string& dir() const { return options_.dir; }

 private:
  struct Segment {
    uint64_t seq = 0;
    std::string path;
    EventId first;
    EventId last;
    uint64_t bytes = 0;  // Published: readers read no further.
    // Every ~kIndexStride bytes: a record's id and offset, for seeking.
    std::vector<std::pair<EventId, uint64_t>> sparse;
  };
  static constexpr uint64_t kIndexStride = 64 << 10;
  static constexpr uint64_t kReadBlockBytes = 1 << 20;

  explicit SpillLog(Options options) : options_(std::move(options)) {}
  std::string PathOf(uint64_t seq) const;
  // Opens a new segment file for appending.
  absl::Status StartSegment() ABSL_EXCLUSIVE_LOCKS_REQUIRED(write_mu_);

  const Options options_;

  // The writer's state (one appending thread; the mutex documents it).
  absl::Mutex write_mu_ ABSL_ACQUIRED_BEFORE(mu_);
  int fd_ ABSL_GUARDED_BY(write_mu_) = -1;
  uint64_t next_seq_ ABSL_GUARDED_BY(write_mu_) = 0;
  uint64_t written_ ABSL_GUARDED_BY(write_mu_) = 0;  // Bytes in the current file.

  mutable absl::Mutex mu_;
  std::deque<Segment> segments_ ABSL_GUARDED_BY(mu_);
  // Whether the newest segment is the one fd_ writes (false after a Clear or
  // when it was trimmed away whole).
  bool open_segment_listed_ ABSL_GUARDED_BY(mu_) = false;
  uint64_t bytes_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t epoch_ ABSL_GUARDED_BY(mu_) = 0;
  std::vector<std::string> doomed_ ABSL_GUARDED_BY(mu_);  // Files to delete.
};

}  // namespace walfeed::server::spill

#endif  // WALFEED_SERVER_SPILL_SPILL_LOG_H_
