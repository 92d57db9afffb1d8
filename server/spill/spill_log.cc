#include "server/spill/spill_log.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <optional>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "server/spill/spill_record.h"

namespace walfeed::server::spill {
namespace {

constexpr absl::string_view kSuffix = ".spill";

absl::Status Errno(int err, absl::string_view what) {
  const std::string text = absl::StrCat(what, ": ", std::strerror(err));
  switch (err) {
    case ENOENT:
      return absl::NotFoundError(text);
    case EACCES:
    case EPERM:
    case EROFS:
      return absl::PermissionDeniedError(text);
    case ENOSPC:
    case EDQUOT:
      return absl::ResourceExhaustedError(text);
    default:
      return absl::InternalError(text);
  }
}

// mkdir -p.
absl::Status MakeDirs(const std::string& dir) {
  for (size_t at = 1; at <= dir.size(); ++at) {
    if (at != dir.size() && dir[at] != '/') continue;
    const std::string prefix = dir.substr(0, at);
    if (::mkdir(prefix.c_str(), 0700) != 0 && errno != EEXIST) {
      return Errno(errno, absl::StrCat("cannot create spill directory ", prefix,
                                       " (check state_dir and its permissions)"));
    }
  }
  struct stat st;
  if (::stat(dir.c_str(), &st) != 0) return Errno(errno, absl::StrCat("spill directory ", dir));
  if (!S_ISDIR(st.st_mode)) {
    return absl::FailedPreconditionError(
        absl::StrCat("spill directory ", dir, " exists and is not a directory; move it away"));
  }
  return absl::OkStatus();
}

// pread of exactly `n` bytes at `offset`: false on a short file (truncated).
absl::Status ReadExactly(int fd, uint64_t offset, size_t n, char* out, const std::string& path) {
  size_t got = 0;
  while (got < n) {
    const ssize_t r = ::pread(fd, out + got, n - got, static_cast<off_t>(offset + got));
    if (r < 0 && errno == EINTR) continue;
    if (r < 0) return Errno(errno, absl::StrCat("reading spill segment ", path));
    if (r == 0) {
      return absl::DataLossError(absl::StrCat("spill segment ", path, " is shorter than written (",
                                              offset + got, " bytes)"));
    }
    got += static_cast<size_t>(r);
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::unique_ptr<SpillLog>> SpillLog::Open(Options options) {
  if (options.segment_bytes == 0) options.segment_bytes = 1;
  if (absl::Status made = MakeDirs(options.dir); !made.ok()) return made;
  DIR* dir = ::opendir(options.dir.c_str());
  if (dir == nullptr) return Errno(errno, absl::StrCat("cannot list spill directory ", options.dir));
  std::vector<std::string> stale;
  while (struct dirent* entry = ::readdir(dir)) {
    if (absl::EndsWith(entry->d_name, kSuffix)) stale.push_back(entry->d_name);
  }
  ::closedir(dir);
  // Whatever an earlier process spilled is stale: its events are re-read from
  // the slot.
  for (const std::string& name : stale) {
    const std::string path = absl::StrCat(options.dir, "/", name);
    if (::unlink(path.c_str()) != 0 && errno != ENOENT) {
      return Errno(errno, absl::StrCat("cannot delete stale spill segment ", path));
    }
  }
  return std::unique_ptr<SpillLog>(new SpillLog(std::move(options)));
}

SpillLog::~SpillLog() {
  {
    absl::MutexLock lock(&write_mu_);
    if (fd_ >= 0) ::close(fd_);
    fd_ = -1;
  }
  Clear();
  Reap();
}

std::string SpillLog::PathOf(uint64_t seq) const {
  return absl::StrFormat("%s/%016x%s", options_.dir, seq, kSuffix);
}

absl::Status SpillLog::StartSegment() {
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
  const uint64_t seq = next_seq_++;
  const std::string path = PathOf(seq);
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  if (fd < 0) return Errno(errno, absl::StrCat("cannot create spill segment ", path));
  fd_ = fd;
  written_ = 0;
  absl::MutexLock lock(&mu_);
  segments_.push_back(Segment{seq, path, EventId{}, EventId{}, 0, {}});
  open_segment_listed_ = true;
  return absl::OkStatus();
}

absl::StatusOr<SpillLog::Batch> SpillLog::Encode(
    absl::Span<const BufferedEvent* const> events, uint64_t epoch) {
  Batch batch;
  batch.epoch = epoch;
  batch.records.reserve(events.size());
  for (const BufferedEvent* event : events) {
    batch.records.emplace_back(event->id, batch.bytes.size());
    if (absl::Status encoded = EncodeRecord(*event, &batch.bytes); !encoded.ok()) return encoded;
  }
  return batch;
}

absl::Status SpillLog::Append(absl::Span<const BufferedEvent* const> events) {
  absl::StatusOr<Batch> batch = Encode(events, epoch());
  if (!batch.ok()) return batch.status();
  return Append(*batch);
}

absl::Status SpillLog::Append(const Batch& batch) {
  if (batch.records.empty()) return absl::OkStatus();
  absl::MutexLock write_lock(&write_mu_);
  bool listed;
  {
    absl::MutexLock lock(&mu_);
    // Encoded before a Clear: those events belong to a run of the stream that
    // is over. (Clear waits for write_mu_, so none can start during the write.)
    if (batch.epoch != epoch_) {
      return absl::AbortedError("the spill was cleared after this batch was encoded");
    }
    listed = open_segment_listed_;
  }
  if (fd_ < 0 || !listed || written_ >= options_.segment_bytes) {
    if (absl::Status started = StartSegment(); !started.ok()) return started;
  }
  std::vector<std::pair<EventId, uint64_t>> sparse;
  std::optional<uint64_t> last_indexed;
  {
    absl::MutexLock lock(&mu_);
    const Segment& open = segments_.back();
    if (!open.sparse.empty()) last_indexed = open.sparse.back().second;
  }
  for (const auto& [id, offset] : batch.records) {
    const uint64_t at = written_ + offset;
    if (!last_indexed || at >= *last_indexed + kIndexStride) {
      sparse.emplace_back(id, at);
      last_indexed = at;
    }
  }
  size_t done = 0;
  while (done < batch.bytes.size()) {
    const ssize_t n = ::write(fd_, batch.bytes.data() + done, batch.bytes.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      const int err = errno;
      // Nothing of this call is published; cut the file back to what is.
      if (::ftruncate(fd_, static_cast<off_t>(written_)) != 0) {
        ::close(fd_);  // Unsure what the file holds: the next append starts another.
        fd_ = -1;
      } else {
        ::lseek(fd_, static_cast<off_t>(written_), SEEK_SET);
      }
      return Errno(err, absl::StrCat("writing spill segment ", PathOf(next_seq_ - 1)));
    }
    done += static_cast<size_t>(n);
  }
  written_ += batch.bytes.size();
  absl::MutexLock lock(&mu_);
  Segment& open = segments_.back();
  if (open.bytes == 0) open.first = batch.records.front().first;
  open.last = batch.records.back().first;
  open.bytes += batch.bytes.size();
  open.sparse.insert(open.sparse.end(), sparse.begin(), sparse.end());
  bytes_ += batch.bytes.size();
  return absl::OkStatus();
}

absl::StatusOr<std::vector<BufferedEvent>> SpillLog::ReadAfter(EventId after,
                                                               size_t max_bytes) const {
  struct Extent {
    std::string path;
    uint64_t from = 0;
    uint64_t to = 0;
  };
  std::vector<Extent> spans;
  {
    absl::MutexLock lock(&mu_);
    uint64_t planned = 0;
    for (const Segment& segment : segments_) {
      if (segment.bytes == 0 || segment.last <= after) continue;
      uint64_t from = 0;
      // The last indexed record at or below `after`: everything before it is too.
      auto it = std::upper_bound(
          segment.sparse.begin(), segment.sparse.end(), after,
          [](EventId id, const std::pair<EventId, uint64_t>& e) { return id < e.first; });
      if (it != segment.sparse.begin()) from = std::prev(it)->second;
      spans.push_back(Extent{segment.path, from, segment.bytes});
      planned += segment.bytes - from;
      if (planned >= max_bytes) break;
    }
  }
  std::vector<BufferedEvent> events;
  size_t taken = 0;
  // Read in blocks of at least kReadBlockBytes: one pread per block, not per
  // record.
  std::string window;
  for (const Extent& span : spans) {
    const int fd = ::open(span.path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) return Errno(errno, absl::StrCat("opening spill segment ", span.path));
    uint64_t window_at = span.from;
    window.clear();
    // Makes [at, at + n) readable in `window`; false with `failed` set if not.
    absl::Status failed;
    auto ensure = [&](uint64_t at, uint64_t n) {
      if (at >= window_at && at + n <= window_at + window.size()) return true;
      const uint64_t want = std::min<uint64_t>(std::max<uint64_t>(n, kReadBlockBytes), span.to - at);
      window.resize(want);
      window_at = at;
      failed = ReadExactly(fd, at, want, window.data(), span.path);
      return failed.ok();
    };
    uint64_t at = span.from;
    while (at < span.to && taken < max_bytes) {
      if (span.to - at < kRecordHeaderBytes) {
        failed = absl::DataLossError(absl::StrCat("spill segment ", span.path,
                                                  " ends inside a record header at ", at));
        break;
      }
      if (!ensure(at, kRecordHeaderBytes)) break;
      uint32_t body = 0;
      failed = BodyLength(absl::string_view(window).substr(at - window_at, kRecordHeaderBytes),
                          &body);
      if (failed.ok() && body > span.to - at - kRecordHeaderBytes) {
        failed = absl::DataLossError("spill record is malformed: it runs past the segment's end");
      }
      if (!failed.ok()) {
        failed = absl::DataLossError(
            absl::StrCat("spill segment ", span.path, " at ", at, ": ", failed.message()));
        break;
      }
      const uint64_t size = kRecordHeaderBytes + body;
      if (!ensure(at, size)) break;
      BufferedEvent event;
      if (failed = DecodeRecord(absl::string_view(window).substr(at - window_at, size), &event);
          !failed.ok()) {
        failed = absl::DataLossError(
            absl::StrCat("spill segment ", span.path, " at ", at, ": ", failed.message()));
        break;
      }
      at += size;
      if (event.id <= after) continue;
      if (!events.empty() && event.id <= events.back().id) {
        failed = absl::DataLossError(absl::StrCat("spill segment ", span.path, " at ", at,
                                                  ": ids out of order"));
        break;
      }
      taken += size;
      events.push_back(std::move(event));
    }
    ::close(fd);
    if (!failed.ok()) return failed;
    if (taken >= max_bytes) break;
  }
  return events;
}

void SpillLog::TrimThrough(EventId floor) {
  // The open segment may go too when no append is writing to it right now.
  const bool writer_idle = write_mu_.TryLock();
  {
    absl::MutexLock lock(&mu_);
    while (!segments_.empty()) {
      const Segment& front = segments_.front();
      const bool open = segments_.size() == 1 && open_segment_listed_;
      // An empty segment is dropped unless it is the one being written (one
      // left behind by a failed write must not stop trimming for good).
      if (front.bytes > 0 ? front.last > floor : open) break;
      if (open && !writer_idle) break;
      if (open) open_segment_listed_ = false;
      bytes_ -= segments_.front().bytes;
      doomed_.push_back(std::move(segments_.front().path));
      segments_.pop_front();
    }
  }
  if (writer_idle) {
    bool listed;
    {
      absl::MutexLock lock(&mu_);
      listed = open_segment_listed_;
    }
    if (!listed && fd_ >= 0) {
      ::close(fd_);
      fd_ = -1;
    }
    write_mu_.Unlock();
  }
}

void SpillLog::Clear() {
  absl::MutexLock write_lock(&write_mu_);
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
  absl::MutexLock lock(&mu_);
  ++epoch_;
  for (Segment& segment : segments_) doomed_.push_back(std::move(segment.path));
  segments_.clear();
  open_segment_listed_ = false;
  bytes_ = 0;
}

void SpillLog::Reap() {
  std::vector<std::string> doomed;
  {
    absl::MutexLock lock(&mu_);
    doomed.swap(doomed_);
  }
  for (const std::string& path : doomed) ::unlink(path.c_str());
}

uint64_t SpillLog::epoch() const {
  absl::MutexLock lock(&mu_);
  return epoch_;
}

uint64_t SpillLog::bytes() const {
  absl::MutexLock lock(&mu_);
  return bytes_;
}

uint64_t SpillLog::BytesAfter(EventId after) const {
  absl::MutexLock lock(&mu_);
  uint64_t total = 0;
  for (const Segment& segment : segments_) {
    if (segment.last > after) total += segment.bytes;
  }
  return total;
}

EventId SpillLog::newest() const {
  absl::MutexLock lock(&mu_);
  for (auto it = segments_.rbegin(); it != segments_.rend(); ++it) {
    if (it->bytes > 0) return it->last;
  }
  return EventId{};
}

}  // namespace walfeed::server::spill
