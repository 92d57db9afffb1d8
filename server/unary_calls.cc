#include "server/unary_calls.h"


namespace walfeed::server {

std::optional<UnaryCalls::Id> UnaryCalls::Open(grpc::ServerUnaryReactor* reactor) {
  absl::MutexLock lock(&mu_);
  if (stopped_) {
    reactor->Finish(*stopped_);
    return std::nullopt;
  }
  const Id id = next_++;
  open_.emplace(id, reactor);
  return id;
}

void UnaryCalls::Finish(Id id, const grpc::Status& status, absl::FunctionRef<void()> fill) {
  // Under the lock, so Stop cannot answer the call while `fill` writes its
  // response (Finish itself never blocks).
  absl::MutexLock lock(&mu_);
  auto it = open_.find(id);
  if (it == open_.end()) return;
  grpc::ServerUnaryReactor* reactor = it->second;
  open_.erase(it);
  if (status.ok()) fill();
  reactor->Finish(status);
}

void UnaryCalls::Stop(const grpc::Status& status) {
  absl::MutexLock lock(&mu_);
  if (!stopped_) stopped_ = status;
  for (auto& [id, reactor] : open_) reactor->Finish(status);
  open_.clear();
}

size_t UnaryCalls::open() const {
  absl::MutexLock lock(&mu_);
  return open_.size();
}

}  // namespace walfeed::server
