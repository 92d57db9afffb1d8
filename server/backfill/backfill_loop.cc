// BackfillRunner's thread: load, resume, and one chunk at a time per backfill
// (see backfill_runner.h). Database calls run without the mutex held.
#include <algorithm>
#include <utility>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "replication/retry.h"
#include "server/backfill/backfill_runner.h"
#include "server/stream_log.h"

namespace walfeed::server {

using replication::BackfillState;
using replication::ChunkRecord;

namespace {
constexpr absl::Duration kIdleWait = absl::Milliseconds(50);

bool Definite(const absl::Status& status) { return !replication::IsTransient(status); }
}  // namespace

void BackfillRunner::Run() {
  std::unique_ptr<replication::BackfillDatabase> db = databases_();
  while (true) {
    const uint64_t generation = hooks_.generation();
    bool loaded = false;
    {
      absl::MutexLock lock(&mu_);
      if (stopping_) return;
      if (generation == 0 && loaded_generation_ != 0) {
        // No longer streamed here: whoever streams it next resumes from the records.
        for (auto& [number, job] : jobs_) {
          if (job.in_flight) windows_->Forget(job.in_flight->token);
          if (job.exported) StopExported(job);
        }
        jobs_.clear();
        loaded_generation_ = 0;
        if (!snapshot_released_) {
          snapshot_released_ = true;
          db->ReleaseExported();
        }
      }
      loaded = generation != 0 && loaded_generation_ == generation;
    }
    bool worked = false;
    if (generation != 0 && !loaded) {
      worked = Load(*db);
      if (worked) {
        absl::MutexLock lock(&mu_);
        loaded_generation_ = generation;
      }
    } else if (loaded) {
      worked = Step(*db);
    }
    absl::MutexLock lock(&mu_);
    if (!worked && !stopping_) wake_.WaitWithTimeout(&mu_, kIdleWait);
  }
}

bool BackfillRunner::Load(replication::BackfillDatabase& db) {
  absl::StatusOr<std::vector<replication::BackfillDatabase::Loaded>> loaded = db.Load(stream_);
  if (!loaded.ok()) {
    StreamLogger()->warn("stream {}: could not load its backfills ({}); retrying", stream_,
                         loaded.status().ToString());
    return false;
  }
  absl::btree_map<uint64_t, Job> jobs;
  for (replication::BackfillDatabase::Loaded& entry : *loaded) {
    Job job;
    job.record = std::move(entry.record);
    uint64_t number = 0;
    (void)absl::SimpleAtoi(job.record.id, &number);
    if (job.record.state == BackfillState::kRunning) {
      absl::StatusOr<EventId> checkpoint = hooks_.checkpoint(job.record.consumer);
      if (!checkpoint.ok()) {
        job.record.state = BackfillState::kCancelled;
        job.record.error = absl::StrCat(Audience(job.record.consumer), " no longer exists");
        job.record.finished_at = absl::Now();
        job.dirty = true;
      } else {
        // Resume after the newest chunk the consumer acked whole; read the
        // others again (their READ events are gone with the process that
        // appended them).
        const ChunkRecord* done = nullptr;
        for (const ChunkRecord& chunk : entry.chunks) {
          if (chunk.boundary <= *checkpoint) done = &chunk;
        }
        if (done != nullptr) {
          job.last_boundary = done->boundary;
          job.next_after = done->last_key;
          job.last_key = done->last_key;
          if (done->final) {
            job.record.state = BackfillState::kDone;
            job.record.finished_at = absl::Now();
            job.dirty = true;
          }
        }
        absl::Status dropped = db.DropChunksAfter(job.record.id, *checkpoint);
        if (!dropped.ok()) {
          StreamLogger()->warn("stream {}: backfill {}: could not drop the records of chunks "
                               "to read again ({}); retrying",
                               stream_, job.record.id, dropped.ToString());
          return false;
        }
        if (job.record.state == BackfillState::kRunning) {
          // Its window opened at the stream's start, in this process: it
          // still reads under the exported snapshot.
          job.exported = job.record.initial_snapshot && windows_->FromStartOpen(job.record.id);
          StreamLogger()->info("stream {}: backfill {} of {} for {} resumes {}{}",
                               stream_, job.record.id, job.record.table.Quoted(),
                               Audience(job.record.consumer),
                               done == nullptr ? std::string("from the start")
                                               : absl::StrCat("after chunk ending at ",
                                                              done->boundary.ToString()),
                               job.exported ? " under the slot's exported snapshot" : "");
        }
      }
    }
    jobs.emplace(number, std::move(job));
  }
  absl::MutexLock lock(&mu_);
  jobs_ = std::move(jobs);
  return true;
}

bool BackfillRunner::Step(replication::BackfillDatabase& db) {
  std::vector<uint64_t> ids;
  {
    absl::MutexLock lock(&mu_);
    for (const auto& [number, job] : jobs_) {
      if (job.record.state == BackfillState::kRunning || job.dirty || !job.to_store.empty()) {
        ids.push_back(number);
      }
    }
  }
  bool worked = false;
  for (uint64_t number : ids) {
    // 1. What completed: its chunk records, then the counters and state.
    std::vector<ChunkRecord> to_store;
    BackfillRecord record;
    bool dirty = false;
    {
      absl::MutexLock lock(&mu_);
      auto it = jobs_.find(number);
      if (it == jobs_.end()) continue;
      to_store.swap(it->second.to_store);
      dirty = it->second.dirty;
      it->second.dirty = false;
      record = it->second.record;
    }
    size_t stored = 0;
    for (; stored < to_store.size(); ++stored) {
      if (absl::Status ok = db.AddChunk(record.id, to_store[stored]); !ok.ok()) {
        StreamLogger()->warn("stream {}: backfill {}: could not store a chunk's record ({}); "
                             "retrying",
                             stream_, record.id, ok.ToString());
        break;
      }
    }
    if (dirty) {
      if (absl::Status ok = db.SaveProgress(record); !ok.ok()) {
        StreamLogger()->warn("stream {}: backfill {}: could not store its progress ({}); "
                             "retrying",
                             stream_, record.id, ok.ToString());
      } else {
        dirty = false;
      }
    }
    if (stored < to_store.size() || dirty) {
      absl::MutexLock lock(&mu_);
      auto it = jobs_.find(number);
      if (it != jobs_.end()) {
        it->second.to_store.insert(it->second.to_store.begin(), to_store.begin() + stored,
                                   to_store.end());
        it->second.dirty = it->second.dirty || dirty;
      }
      continue;  // Nothing new before what was delivered is on record.
    }
    if (!to_store.empty()) worked = true;
    if (record.state != BackfillState::kRunning) continue;

    // 2. What the consumer acked.
    absl::StatusOr<EventId> checkpoint = hooks_.checkpoint(record.consumer);
    std::optional<EventId> acked;
    bool read = false;
    {
      absl::MutexLock lock(&mu_);
      auto it = jobs_.find(number);
      if (it == jobs_.end() || it->second.record.state != BackfillState::kRunning) continue;
      Job& job = it->second;
      if (!checkpoint.ok()) {
        job.record.state = BackfillState::kCancelled;
        job.record.error = absl::StrCat(Audience(job.record.consumer), " was removed");
        job.record.finished_at = absl::Now();
        job.dirty = true;
        worked = true;
        continue;
      }
      while (!job.outstanding.empty() && job.outstanding.front().boundary <= *checkpoint) {
        acked = job.outstanding.front().boundary;
        if (job.outstanding.front().final) {
          job.record.state = BackfillState::kDone;
          job.record.finished_at = absl::Now();
          job.dirty = true;
          StreamLogger()->info("stream {}: backfill {} of {} for {} is done: {} rows "
                               "in {} chunks ({} superseded by the stream)",
                               stream_, job.record.id, job.record.table.Quoted(),
                               Audience(job.record.consumer), job.record.rows, job.record.chunks,
                               job.record.superseded_rows);
        }
        job.outstanding.pop_front();
      }
      const absl::Time now = absl::Now();
      if (job.in_flight && now - job.in_flight->since > options_.chunk_timeout) {
        StreamLogger()->warn("stream {}: backfill {}: the chunk's high watermark did not reach "
                             "the stream in {}; reading it again",
                             stream_, job.record.id, absl::FormatDuration(options_.chunk_timeout));
        windows_->Forget(job.in_flight->token);
        job.in_flight.reset();
      }
      read = job.record.state == BackfillState::kRunning && !job.in_flight &&
             !job.final_delivered && job.outstanding.size() < options_.max_outstanding &&
             now >= job.retry_at;
    }
    if (acked) {
      worked = true;
      if (absl::Status ok = db.PruneChunks(record.id, *acked); !ok.ok()) {
        StreamLogger()->warn("stream {}: backfill {}: could not prune chunk records ({})",
                             stream_, record.id, ok.ToString());
      }
    }
    if (read && hooks_.has_room()) {
      ReadChunk(db, record.id);
      worked = true;
    }
  }
  ReleaseUnusedSnapshot(db);
  return worked;
}

void BackfillRunner::ReadChunk(replication::BackfillDatabase& db, const std::string& id) {
  uint64_t number = 0;
  (void)absl::SimpleAtoi(id, &number);
  std::optional<replication::BackfillTable> plan;
  BackfillRecord record;
  std::vector<std::string> after;
  std::string token;
  bool exported = false;
  {
    absl::MutexLock lock(&mu_);
    auto it = jobs_.find(number);
    if (it == jobs_.end()) return;
    plan = it->second.plan;
    record = it->second.record;
    after = it->second.next_after;
    exported = it->second.exported;
    token = absl::StrCat(instance_, ".", id, ".", ++tokens_);
  }
  auto fail = [&](const absl::Status& why) {
    windows_->Forget(token);
    absl::MutexLock lock(&mu_);
    auto it = jobs_.find(number);
    if (it == jobs_.end() || it->second.record.state != BackfillState::kRunning) return;
    if (it->second.in_flight && it->second.in_flight->token == token) it->second.in_flight.reset();
    Failed(it->second, why, Definite(why));
  };
  if (!plan) {
    absl::StatusOr<replication::BackfillTable> planned =
        db.Plan(publications_, record.table, record.where);
    if (!planned.ok()) return fail(planned.status());
    plan = std::move(*planned);
    absl::MutexLock lock(&mu_);
    auto it = jobs_.find(number);
    if (it != jobs_.end()) it->second.plan = plan;
  }
  auto chunk = std::make_shared<replication::BackfillChunk>();
  chunk->token = token;
  chunk->consumer = record.consumer;
  chunk->relation = plan->relation;
  chunk->key_columns = plan->key_columns;
  absl::StatusOr<replication::ChunkRows> rows;
  if (exported) {
    // No low watermark: the window opened at the stream's start.
    chunk->from_start = record.id;
    windows_->Expect(chunk);
    rows = db.ReadExported(*plan, record.where, after, record.chunk_rows);
    if (!rows.ok()) {
      windows_->Forget(token);
      StreamLogger()->warn("stream {}: backfill {}: reading under the slot's exported snapshot "
                           "failed ({}); the rest is read with watermarks",
                           stream_, id, rows.status().ToString());
      absl::MutexLock lock(&mu_);
      auto it = jobs_.find(number);
      if (it != jobs_.end() && it->second.exported) StopExported(it->second);
      return;
    }
  } else {
    windows_->Expect(chunk);
    absl::StatusOr<std::vector<std::string>> running = db.WriteLow(token);
    if (!running.ok()) return fail(running.status());
    rows = db.ReadChunk(*plan, record.where, after, record.chunk_rows, *running,
                        options_.snapshot_wait);
    if (!rows.ok()) return fail(rows.status());
  }
  const bool final = rows->rows.size() < record.chunk_rows;
  std::vector<std::string> last_key = rows->last_key.empty() ? after : rows->last_key;
  windows_->SetRows(token, std::move(rows->rows));
  {
    absl::MutexLock lock(&mu_);
    auto it = jobs_.find(number);
    if (it == jobs_.end() || it->second.record.state != BackfillState::kRunning) {
      windows_->Forget(token);
      return;
    }
    it->second.in_flight = InFlight{token, std::move(last_key), final, absl::Now()};
    it->second.failures = 0;
    it->second.retrying.clear();
  }
  if (absl::Status written = db.WriteHigh(token); !written.ok()) fail(written);
}

}  // namespace walfeed::server
