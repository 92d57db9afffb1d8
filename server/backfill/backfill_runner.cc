#include "server/backfill/backfill_runner.h"

#include <algorithm>
#include <utility>

#include "absl/random/random.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "replication/error_reason.h"
#include "replication/retry.h"
#include "server/stream_log.h"

namespace walfeed::server {

using replication::BackfillState;
using replication::ChunkRecord;
namespace reason = replication::reason;

namespace {

// How long StartBackfill waits for a stream prepared a moment ago to load its
// backfills.
constexpr absl::Duration kLoadWait = absl::Seconds(10);

// A planning error with the reason a client branches on.
absl::Status PlanError(const absl::Status& why, const std::string& stream,
                       const replication::TableName& table) {
  if (replication::IsTransient(why)) {
    return reason::WithReason(
        absl::UnavailableError(absl::StrCat("could not plan the backfill: ", why.message(),
                                            "; retry")),
        reason::kStreamNotReady, {{"stream", stream}});
  }
  if (why.code() == absl::StatusCode::kInvalidArgument) {
    return reason::WithReason(why, reason::kInvalidRequest, {{"field", "where"}});
  }
  if (why.code() == absl::StatusCode::kNotFound ||
      why.code() == absl::StatusCode::kFailedPrecondition) {
    return reason::WithReason(why, reason::kTableNotBackfillable,
                              {{"stream", stream}, {"table", table.schema + "." + table.table}});
  }
  return why;
}

absl::Status NoBackfill(const std::string& stream, const std::string& id) {
  return reason::WithReason(
      absl::NotFoundError(absl::StrCat("stream ", stream, " has no backfill ", id)),
      reason::kBackfillNotFound, {{"stream", stream}, {"backfill", id}});
}

}  // namespace

std::string Audience(const std::string& consumer) {
  return consumer.empty() ? std::string("every consumer") : absl::StrCat("consumer ", consumer);
}

namespace {

uint64_t IdNumber(const std::string& id) {
  uint64_t number = 0;
  return absl::SimpleAtoi(id, &number) ? number : 0;
}

std::string NewInstance() {
  absl::BitGen random;
  return absl::StrCat(absl::Hex(absl::Uniform<uint64_t>(random), absl::kZeroPad16));
}

// The rate over the last samples, rows per second.
double RateOf(const std::deque<std::pair<absl::Time, uint64_t>>& samples) {
  if (samples.size() < 2) return 0;
  const double seconds = absl::ToDoubleSeconds(samples.back().first - samples.front().first);
  if (seconds <= 0) return 0;
  return static_cast<double>(samples.back().second - samples.front().second) / seconds;
}

}  // namespace

BackfillRunner::BackfillRunner(std::string stream, std::vector<std::string> publications,
                               DatabaseFactory databases, replication::BackfillWindows* windows,
                               Hooks hooks, BackfillOptions options)
    : stream_(std::move(stream)),
      publications_(std::move(publications)),
      databases_(std::move(databases)),
      windows_(windows),
      hooks_(std::move(hooks)),
      options_(options),
      instance_(NewInstance()) {}

BackfillRunner::~BackfillRunner() { Stop(); }

void BackfillRunner::Start() {
  thread_ = std::thread([this] { Run(); });
}

void BackfillRunner::Stop() {
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
    wake_.SignalAll();
  }
  if (thread_.joinable()) thread_.join();
}

absl::StatusOr<BackfillView> BackfillRunner::Begin(const std::string& consumer,
                                                   const replication::TableName& table,
                                                   const std::string& where,
                                                   uint32_t chunk_rows) {
  if (chunk_rows == 0) chunk_rows = options_.default_chunk_rows;
  if (chunk_rows > options_.max_chunk_rows) {
    return reason::WithReason(
        absl::InvalidArgumentError(absl::StrCat(
            "chunk_rows ", chunk_rows, " is out of range: 1 to ", options_.max_chunk_rows,
            ", or 0 for the default (", options_.default_chunk_rows, ")")),
        reason::kInvalidRequest, {{"field", "chunk_rows"}});
  }
  {
    absl::MutexLock lock(&mu_);
    // A stream prepared a moment ago loads its backfills first: wait for that
    // rather than send the caller away.
    auto loaded = [this]() ABSL_NO_THREAD_SAFETY_ANALYSIS {
      const uint64_t generation = hooks_.generation();
      return stopping_ || (generation != 0 && loaded_generation_ == generation);
    };
    if (hooks_.generation() != 0) mu_.AwaitWithTimeout(absl::Condition(&loaded), kLoadWait);
    const uint64_t generation = hooks_.generation();
    if (generation == 0 || loaded_generation_ != generation) {
      return reason::WithReason(
          absl::UnavailableError(absl::StrCat(
              "stream ", stream_, " is not streaming on this instance yet (connecting, loading "
              "its backfills, or a standby): retry, or call the active instance")),
          reason::kStreamNotReady, {{"stream", stream_}});
    }
    for (const auto& [number, job] : jobs_) {
      if (job.record.state == BackfillState::kRunning && job.record.consumer == consumer &&
          job.record.table == table) {
        return reason::WithReason(
            absl::AlreadyExistsError(absl::StrCat(
                "backfill ", job.record.id, " of ", table.Quoted(), " for ", Audience(consumer),
                " is running; cancel it first (walfeed backfill cancel ", job.record.id, ")")),
            reason::kBackfillRunning, {{"stream", stream_}, {"backfill", job.record.id}});
      }
    }
  }
  absl::StatusOr<EventId> checkpoint = hooks_.checkpoint(consumer);
  if (!checkpoint.ok()) {
    return reason::WithReason(
        absl::NotFoundError(absl::StrCat(
            "stream ", stream_, " has no consumer ", consumer,
            ": subscribe once as that consumer first, so the server holds its events")),
        reason::kConsumerNotFound, {{"stream", stream_}, {"consumer", consumer}});
  }
  absl::MutexLock rpc(&rpc_mu_);
  if (rpc_db_ == nullptr) rpc_db_ = databases_();
  absl::StatusOr<replication::BackfillTable> plan = rpc_db_->Plan(publications_, table, where);
  if (!plan.ok()) return PlanError(plan.status(), stream_, table);
  BackfillRecord record;
  record.stream = stream_;
  record.consumer = consumer;
  record.table = table;
  record.where = where;
  record.chunk_rows = chunk_rows;
  record.key_columns = plan->key_columns;
  absl::StatusOr<BackfillRecord> created = rpc_db_->Create(std::move(record));
  if (!created.ok()) return PlanError(created.status(), stream_, table);
  StreamLogger()->info("stream {}: backfill {} of {} for {} started (key {}, {} rows "
                       "per chunk{}{})",
                       stream_, created->id, table.Quoted(), Audience(consumer),
                       absl::StrJoin(plan->key_columns, ", "), chunk_rows,
                       where.empty() ? "" : ", where ", where);
  absl::MutexLock lock(&mu_);
  Job& job = jobs_[IdNumber(created->id)];
  job.record = *created;
  job.plan = std::move(*plan);
  wake_.SignalAll();
  return ViewLocked(job);
}

absl::StatusOr<BackfillView> BackfillRunner::Cancel(const std::string& id) {
  BackfillRecord record;
  std::optional<std::string> token;
  {
    absl::MutexLock lock(&mu_);
    auto it = jobs_.find(IdNumber(id));
    if (it == jobs_.end()) return NoBackfill(stream_, id);
    Job& job = it->second;
    if (job.record.state != BackfillState::kRunning) return ViewLocked(job);
    job.record.state = BackfillState::kCancelled;
    job.record.finished_at = absl::Now();
    if (job.in_flight) token = job.in_flight->token;
    job.in_flight.reset();
    record = job.record;
  }
  if (token) windows_->Forget(*token);
  absl::MutexLock rpc(&rpc_mu_);
  if (rpc_db_ == nullptr) rpc_db_ = databases_();
  absl::Status saved = rpc_db_->SaveProgress(record);
  if (!saved.ok()) {
    // Not stored: a restart would resume it. Say so rather than pretend.
    StreamLogger()->warn("stream {}: backfill {} cancelled here but the record could not be "
                         "stored ({}); the runner stores it on its next pass",
                         stream_, id, saved.ToString());
    absl::MutexLock lock(&mu_);
    auto it = jobs_.find(IdNumber(id));
    if (it != jobs_.end()) it->second.dirty = true;
  }
  StreamLogger()->info("stream {}: backfill {} cancelled", stream_, id);
  absl::MutexLock lock(&mu_);
  auto it = jobs_.find(IdNumber(id));
  if (it == jobs_.end()) return NoBackfill(stream_, id);
  return ViewLocked(it->second);
}

absl::StatusOr<BackfillView> BackfillRunner::Get(const std::string& id) const {
  absl::MutexLock lock(&mu_);
  auto it = jobs_.find(IdNumber(id));
  if (it == jobs_.end()) return NoBackfill(stream_, id);
  return ViewLocked(it->second);
}

std::vector<BackfillView> BackfillRunner::List(bool running_only) const {
  absl::MutexLock lock(&mu_);
  std::vector<BackfillView> views;
  for (auto it = jobs_.rbegin(); it != jobs_.rend(); ++it) {
    if (running_only && it->second.record.state != BackfillState::kRunning) continue;
    views.push_back(ViewLocked(it->second));
  }
  return views;
}

BackfillView BackfillRunner::ViewLocked(const Job& job) const {
  BackfillView view;
  view.record = job.record;
  view.last_key = job.last_key;
  if (job.plan) view.estimated_rows = job.plan->estimated_rows;
  view.retrying = job.retrying;
  if (job.record.state == BackfillState::kRunning) {
    view.rows_per_second = RateOf(job.rate);
    const int64_t left = view.estimated_rows - static_cast<int64_t>(job.record.rows);
    if (view.rows_per_second > 0 && left > 0) {
      view.eta_seconds = static_cast<uint64_t>(static_cast<double>(left) / view.rows_per_second);
    }
  }
  return view;
}

void BackfillRunner::OnCompleted(const replication::CompletedChunk& chunk, EventId boundary,
                                 size_t delivered) {
  absl::MutexLock lock(&mu_);
  for (auto& [number, job] : jobs_) {
    if (!job.in_flight || job.in_flight->token != chunk.token) continue;
    InFlight flight = std::move(*job.in_flight);
    job.in_flight.reset();
    if (chunk.outcome == replication::CompletedChunk::Outcome::kRetry) {
      StreamLogger()->info("stream {}: backfill {} reads a chunk again: {}", stream_,
                           job.record.id, chunk.retry_reason);
      // Under the exported snapshot it would read the same rows again.
      if (job.exported) StopExported(job);
    } else {
      // A chunk that delivered nothing has nothing to ack: it is done once
      // the chunk before it is (a consumer that acks only events it got, not
      // the watermark's passed position, still finishes the backfill).
      if (delivered == 0) boundary = job.last_boundary;
      job.last_boundary = boundary;
      ChunkRecord record{boundary, flight.last_key, flight.final};
      job.outstanding.push_back(record);
      job.to_store.push_back(std::move(record));
      job.record.rows += delivered;
      job.record.chunks += 1;
      job.record.superseded_rows += chunk.superseded;
      job.next_after = flight.last_key;
      job.last_key = flight.last_key;
      job.final_delivered = flight.final;
      job.dirty = true;
      job.rate.emplace_back(absl::Now(), job.record.rows);
      while (job.rate.size() > 20) job.rate.pop_front();
    }
    wake_.SignalAll();
    return;
  }
}

void BackfillRunner::StopExported(Job& job) {
  job.exported = false;
  windows_->CloseFromStart(job.record.id);
}

void BackfillRunner::ReleaseUnusedSnapshot(replication::BackfillDatabase& db) {
  {
    absl::MutexLock lock(&mu_);
    if (snapshot_released_) return;
    for (auto& [number, job] : jobs_) {
      if (job.exported && job.record.state != BackfillState::kRunning) StopExported(job);
      if (job.exported) return;
    }
    snapshot_released_ = true;
  }
  db.ReleaseExported();
}

void BackfillRunner::Failed(Job& job, const absl::Status& why, bool definite) {
  if (!definite) {
    ++job.failures;
    const absl::Duration delay =
        std::min(options_.retry_cap, options_.retry_base * (1 << std::min(job.failures, 8)));
    job.retry_at = absl::Now() + delay;
    job.retrying = std::string(why.message());
    StreamLogger()->warn("stream {}: backfill {}: {}; retrying in {}", stream_, job.record.id,
                         why.ToString(), absl::FormatDuration(delay));
    return;
  }
  job.record.state = BackfillState::kFailed;
  job.record.error = std::string(why.message());
  job.record.finished_at = absl::Now();
  job.dirty = true;
  StreamLogger()->error("stream {}: backfill {} of {} failed: {}", stream_, job.record.id,
                        job.record.table.Quoted(), why.ToString());
}

}  // namespace walfeed::server
