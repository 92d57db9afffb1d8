// ConsumerRegistry, the disk tier (consumer_registry.h): what spills, what a
// session reads when its cursor is below memory, and when both tiers are full.
#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "server/consumer_registry.h"  // IWYU pragma: associated

namespace walfeed::server {
namespace {

// How much one spill write moves, and about how much one disk read brings a
// session: large enough for sequential I/O, small against buffer_bytes.
constexpr size_t kSpillChunkBytes = 1 << 20;
constexpr size_t kDiskReadBytes = 1 << 20;

}  // namespace

bool ConsumerRegistry::FullLocked() const {
  if (buffer_.HasRoom(options_.buffer_bytes)) return false;
  if (options_.spill == nullptr || buffer_.size() == 0) return true;
  // The oldest event in memory must fit in what is left of the disk budget.
  const uint64_t spilled = options_.spill->bytes();
  return spilled >= options_.retention_bytes ||
         buffer_.After(buffer_.trimmed())->bytes > options_.retention_bytes - spilled;
}

absl::Status ConsumerRegistry::SpillOverflow() {
  if (options_.spill == nullptr) return absl::OkStatus();
  spill::SpillLog::Batch batch;
  EventId last_id;
  {
    absl::MutexLock lock(&mu_);
    if (!loaded_ || buffer_.HasRoom(options_.buffer_bytes) || FullLocked()) {
      return absl::OkStatus();
    }
    const uint64_t budget = options_.retention_bytes - options_.spill->bytes();
    // The leading session: what it has not passed yet it reads from memory,
    // best (a reader spilling ahead of every session would make them all read
    // their events back from disk).
    std::optional<EventId> lead;
    for (const auto& [key, entry] : sessions_) {
      if (!entry.end) lead = std::max(lead.value_or(EventId{}), entry.framer.cursor());
    }
    const auto first = buffer_.After(buffer_.trimmed());
    auto last = first;
    uint64_t bytes = first->bytes;
    for (auto it = std::next(first); it != buffer_.end(); ++it) {
      if (bytes + it->bytes > budget || bytes >= kSpillChunkBytes) break;
      bytes += it->bytes;
      last = it;
    }
    if (!lead || *lead < last->id) {
      reader_awaits_ = last->id;
      return absl::OkStatus();
    }
    // Encoded here, a copy of the bytes (sessions keep reading the events from
    // memory meanwhile); written after unlocking.
    std::vector<const BufferedEvent*> pointers;
    for (auto it = first; it != std::next(last); ++it) pointers.push_back(&*it);
    absl::StatusOr<spill::SpillLog::Batch> encoded =
        spill::SpillLog::Encode(pointers, options_.spill->epoch());
    if (!encoded.ok()) return encoded.status();
    batch = std::move(*encoded);
    last_id = last->id;
  }
  absl::Status written = options_.spill->Append(batch);
  if (absl::IsAborted(written)) return absl::OkStatus();  // Cleared meanwhile: a restart.
  if (!written.ok()) return written;
  absl::MutexLock lock(&mu_);
  // Unloaded (and the spill cleared) meanwhile: memory is no longer the one
  // the batch came from.
  if (!loaded_ || options_.spill->epoch() != batch.epoch) return absl::OkStatus();
  // Only the reader thread appends and spills, so the chunk is still the oldest
  // part of memory (acks may have trimmed some of it meanwhile).
  buffer_.TrimThrough(last_id);
  options_.spill->TrimThrough(floor_);
  return absl::OkStatus();
}

const StreamBuffer& ConsumerRegistry::SourceForLocked(SessionEntry& entry) {
  const EventId cursor = entry.framer.cursor();
  // At or below floor_ everything was acked by every holder (a session that
  // started at a checkpoint an ack in flight then passed): memory has what
  // follows, or the spill does after floor_.
  if (options_.spill == nullptr || std::max(cursor, floor_) >= buffer_.trimmed() || entry.end) {
    return buffer_;
  }
  if (entry.staged.trimmed() <= cursor && cursor < entry.staged.newest()) return entry.staged;
  entry.staged = StreamBuffer();
  if (!entry.disk_wanted && !entry.disk_reading) {
    entry.disk_wanted = true;
    if (options_.want_disk) options_.want_disk();
  }
  return empty_;
}

std::vector<ConsumerRegistry::DiskRequest> ConsumerRegistry::TakeDiskRequests() {
  absl::MutexLock lock(&mu_);
  std::vector<DiskRequest> requests;
  for (auto& [key, entry] : sessions_) {
    if (!entry.disk_wanted) continue;
    entry.disk_wanted = false;
    if (entry.end) continue;
    entry.disk_reading = true;
    const SessionLimits& limits = entry.session->options().limits;
    requests.push_back(DiskRequest{entry.session, entry.framer.cursor(),
                                   std::max(entry.framer.cursor(), floor_),
                                   std::max<size_t>(kDiskReadBytes, limits.max_batch_bytes)});
  }
  return requests;
}

absl::Status ConsumerRegistry::FinishDiskRead(const DiskRequest& request,
                                              absl::StatusOr<std::vector<BufferedEvent>> read,
                                              SessionList* wake) {
  absl::MutexLock lock(&mu_);
  auto it = sessions_.find(request.session.get());
  if (it == sessions_.end()) return absl::OkStatus();  // Closed meanwhile.
  SessionEntry& entry = it->second;
  entry.disk_reading = false;
  if (entry.end || entry.framer.cursor() != request.after) return absl::OkStatus();
  // What the session needs next: the first event after read_after, which the
  // spill must hold while that is between the floor and memory.
  const bool needed = request.read_after >= floor_ && request.read_after < buffer_.trimmed();
  if (!read.ok()) {
    // A segment trimmed under the read: the cursor fell below the floor (an
    // ephemeral session; NextFrame ends it). Anything else is damage.
    if (absl::IsNotFound(read.status()) && !needed) {
      wake->push_back(entry.session);
      return absl::OkStatus();
    }
    return absl::DataLossError(absl::StrCat("stream \"", options_.stream,
                                            "\": the spill cannot be read: ",
                                            read.status().message()));
  }
  if (read->empty() || read->front().id <= request.read_after) {
    if (!needed) {
      wake->push_back(entry.session);
      return absl::OkStatus();
    }
    return absl::DataLossError(absl::StrCat(
        "stream \"", options_.stream, "\": the spill lacks the events after ",
        request.read_after.ToString(), " (held on disk up to ", buffer_.trimmed().ToString(),
        ")"));
  }
  entry.staged = StreamBuffer(request.after);
  for (BufferedEvent& event : *read) {
    // Only what is still below memory: the rest is read from memory.
    if (event.id > buffer_.trimmed()) break;
    if (absl::Status staged = entry.staged.Append(std::move(event)); !staged.ok()) {
      return absl::DataLossError(absl::StrCat("stream \"", options_.stream,
                                              "\": the spill returned events out of order: ",
                                              staged.message()));
    }
  }
  entry.waiting = false;
  wake->push_back(entry.session);
  return absl::OkStatus();
}

}  // namespace walfeed::server
