#include "server/unary_calls.h"

#include <utility>

namespace walfeed::server {

// gRPC may run other reactions inline in reactor->Finish (a new call's
// handler, which calls Open): never under mu_.

std::optional<UnaryCalls::Id> UnaryCalls::Open(grpc::ServerUnaryReactor* reactor) {
  std::optional<grpc::Status> stopped;
  {
    absl::MutexLock lock(&mu_);
    if (!stopped_) {
      const Id id = next_++;
      open_.emplace(id, reactor);
      return id;
    }
    stopped = stopped_;
  }
  reactor->Finish(*stopped);
  return std::nullopt;
}

bool UnaryCalls::IsOpen(Id id) const {
  absl::MutexLock lock(&mu_);
  return open_.contains(id);
}

void UnaryCalls::Finish(Id id, const grpc::Status& status, absl::FunctionRef<void()> fill) {
  grpc::ServerUnaryReactor* reactor;
  {
    absl::MutexLock lock(&mu_);
    auto it = open_.find(id);
    if (it == open_.end()) return;  // Stop answered it; its response may be gone.
    reactor = it->second;
    open_.erase(it);
  }
  // No longer open: Stop cannot answer it, so its response is still ours.
  if (status.ok()) fill();
  reactor->Finish(status);
}

void UnaryCalls::Stop(const grpc::Status& status) {
  absl::flat_hash_map<Id, grpc::ServerUnaryReactor*> open;
  {
    absl::MutexLock lock(&mu_);
    if (!stopped_) stopped_ = status;
    open.swap(open_);
  }
  for (auto& [id, reactor] : open) reactor->Finish(status);
}

}  // namespace walfeed::server
