#include "server/stream_buffer.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"

namespace walfeed::server {

absl::Status StreamBuffer::Append(BufferedEvent event) {
  if (event.id <= newest_) {
    return absl::FailedPreconditionError(
        absl::StrCat("event ", event.id.ToString(), " is not after the newest buffered event ",
                     newest_.ToString()));
  }
  newest_ = event.id;
  bytes_ += event.bytes;
  events_.push_back(std::move(event));
  return absl::OkStatus();
}

StreamBuffer::const_iterator StreamBuffer::After(EventId cursor) const {
  return std::upper_bound(events_.begin(), events_.end(), cursor,
                          [](EventId id, const BufferedEvent& e) { return id < e.id; });
}

void StreamBuffer::TrimThrough(EventId floor) {
  while (!events_.empty() && events_.front().id <= floor) {
    trimmed_ = events_.front().id;
    bytes_ -= events_.front().bytes;
    events_.pop_front();
  }
}

}  // namespace walfeed::server
