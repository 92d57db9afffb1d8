// BackfillRunner's thread: load, resume, and one chunk at a time per backfill
// (see backfill_runner.h). Database calls run without the mutex held.
#include <algorithm>
#include <thread>
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
  // Chunks read before the stream was prepared again wait for high watermarks
  // the reloaded jobs no longer expect: their windows go (their rows are read
  // again after the newest acked chunk).
  for (auto& [number, job] : jobs_) {
    if (job.in_flight) windows_->Forget(job.in_flight->token);
  }
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
  std::vector<std::string> to_read;  // Backfills whose next chunk is due.
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
      to_read.push_back(record.id);
      worked = true;
    }
  }
  ReadChunks(db, to_read);
  ReleaseUnusedSnapshot(db);
  return worked;
}

void BackfillRunner::ReadChunks(replication::BackfillDatabase& db,
                                const std::vector<std::string>& ids) {
  std::vector<PendingRead> exported;
  for (const std::string& id : ids) {
    std::optional<PendingRead> pending = BeginRead(db, id);
    if (!pending) continue;
    if (pending->exported) {
      exported.push_back(std::move(*pending));
      continue;
    }
    absl::StatusOr<std::vector<std::string>> running = db.WriteLow(pending->token);
    if (!running.ok()) {
      FailRead(*pending, running.status());
      continue;
    }
    FinishRead(db, *pending,
               db.ReadChunk(*pending->plan, pending->record.where, pending->after,
                            pending->record.chunk_rows, *running, options_.snapshot_wait));
  }
  // Tables under the exported snapshot are read at the same time, each query
  // on a connection of its own (ExportedSnapshot::Query), this thread reading
  // the first. No low watermark: their windows opened at the stream's start.
  std::vector<absl::StatusOr<replication::ChunkRows>> rows(
      exported.size(), absl::UnknownError("not read"));
  const auto read = [&](size_t i) {
    const PendingRead& pending = exported[i];
    rows[i] = db.ReadExported(*pending.plan, pending.record.where, pending.after,
                              pending.record.chunk_rows);
  };
  std::vector<std::thread> others;
  for (size_t i = 1; i < exported.size(); ++i) others.emplace_back(read, i);
  if (!exported.empty()) read(0);
  for (std::thread& thread : others) thread.join();
  for (size_t i = 0; i < exported.size(); ++i) {
    if (!rows[i].ok()) {
      windows_->Forget(exported[i].token);
      StreamLogger()->warn("stream {}: backfill {}: reading under the slot's exported snapshot "
                           "failed ({}); the rest is read with watermarks",
                           stream_, exported[i].record.id, rows[i].status().ToString());
      absl::MutexLock lock(&mu_);
      auto it = jobs_.find(exported[i].number);
      if (it != jobs_.end() && it->second.exported) StopExported(it->second);
      continue;
    }
    FinishRead(db, exported[i], std::move(rows[i]));
  }
}

std::optional<BackfillRunner::PendingRead> BackfillRunner::BeginRead(
    replication::BackfillDatabase& db, const std::string& id) {
  PendingRead pending;
  pending.id = id;
  (void)absl::SimpleAtoi(id, &pending.number);
  {
    absl::MutexLock lock(&mu_);
    auto it = jobs_.find(pending.number);
    if (it == jobs_.end()) return std::nullopt;
    pending.plan = it->second.plan;
    pending.record = it->second.record;
    pending.after = it->second.next_after;
    pending.exported = it->second.exported;
    pending.token = absl::StrCat(instance_, ".", id, ".", ++tokens_);
  }
  if (!pending.plan) {
    absl::StatusOr<replication::BackfillTable> planned =
        db.Plan(publications_, pending.record.table, pending.record.where);
    if (!planned.ok()) {
      FailRead(pending, planned.status());
      return std::nullopt;
    }
    pending.plan = std::move(*planned);
    absl::MutexLock lock(&mu_);
    auto it = jobs_.find(pending.number);
    if (it != jobs_.end()) it->second.plan = pending.plan;
  }
  auto chunk = std::make_shared<replication::BackfillChunk>();
  chunk->token = pending.token;
  chunk->consumer = pending.record.consumer;
  chunk->relation = pending.plan->relation;
  chunk->key_columns = pending.plan->key_columns;
  if (pending.exported) chunk->from_start = pending.record.id;
  // Before the low watermark (or, under the exported snapshot, before the
  // read): the window must see every change from then on.
  windows_->Expect(chunk);
  return pending;
}

void BackfillRunner::FailRead(const PendingRead& pending, const absl::Status& why) {
  windows_->Forget(pending.token);
  absl::MutexLock lock(&mu_);
  auto it = jobs_.find(pending.number);
  if (it == jobs_.end() || it->second.record.state != BackfillState::kRunning) return;
  if (it->second.in_flight && it->second.in_flight->token == pending.token) {
    it->second.in_flight.reset();
  }
  Failed(it->second, why, Definite(why));
}

void BackfillRunner::FinishRead(replication::BackfillDatabase& db, const PendingRead& pending,
                                absl::StatusOr<replication::ChunkRows> rows) {
  if (!rows.ok()) return FailRead(pending, rows.status());
  const bool final = rows->rows.size() < pending.record.chunk_rows;
  std::vector<std::string> last_key = rows->last_key.empty() ? pending.after : rows->last_key;
  windows_->SetRows(pending.token, std::move(rows->rows));
  {
    absl::MutexLock lock(&mu_);
    auto it = jobs_.find(pending.number);
    if (it == jobs_.end() || it->second.record.state != BackfillState::kRunning) {
      windows_->Forget(pending.token);
      return;
    }
    it->second.in_flight = InFlight{pending.token, std::move(last_key), final, absl::Now()};
    it->second.failures = 0;
    it->second.retrying.clear();
  }
  if (absl::Status written = db.WriteHigh(pending.token); !written.ok()) {
    FailRead(pending, written);
  }
}

}  // namespace walfeed::server
