#include "replication/backfill_window.h"

#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"

namespace walfeed::replication {
namespace {

constexpr absl::string_view kLowTag = "lw ";
constexpr absl::string_view kHighTag = "hw ";

// Where `relation`'s columns named `names` are; empty if one is missing.
std::vector<int> KeyPositions(const RelationInfo& relation,
                              const std::vector<std::string>& names) {
  std::vector<int> positions;
  for (const std::string& name : names) {
    int found = -1;
    for (size_t i = 0; i < relation.columns.size(); ++i) {
      if (relation.columns[i].name == name) found = static_cast<int>(i);
    }
    if (found < 0) return {};
    positions.push_back(found);
  }
  return positions;
}

bool HasUnchangedToast(const pgoutput::TupleData& tuple) {
  for (const pgoutput::TupleValue& value : tuple.columns) {
    if (value.kind == pgoutput::TupleValue::Kind::kUnchangedToast) return true;
  }
  return false;
}

}  // namespace

std::string WatermarkContent(WatermarkKind kind, absl::string_view token) {
  return absl::StrCat(kind == WatermarkKind::kLow ? kLowTag : kHighTag, token);
}

std::optional<Watermark> ParseWatermark(absl::string_view prefix, absl::string_view content) {
  if (prefix != kWatermarkPrefix) return std::nullopt;
  if (absl::StartsWith(content, kLowTag)) {
    return Watermark{WatermarkKind::kLow, std::string(content.substr(kLowTag.size()))};
  }
  if (absl::StartsWith(content, kHighTag)) {
    return Watermark{WatermarkKind::kHigh, std::string(content.substr(kHighTag.size()))};
  }
  return std::nullopt;
}

std::optional<std::string> EncodeKey(const pgoutput::TupleData& tuple,
                                     const std::vector<int>& positions) {
  std::string key;
  for (int position : positions) {
    if (position < 0 || static_cast<size_t>(position) >= tuple.columns.size()) {
      return std::nullopt;
    }
    const pgoutput::TupleValue& value = tuple.columns[position];
    if (value.kind == pgoutput::TupleValue::Kind::kUnchangedToast) return std::nullopt;
    key.push_back(static_cast<char>(value.kind));
    absl::StrAppend(&key, value.data.size(), ":", value.data);
  }
  return key;
}

void BackfillWindows::CountLocked() { expected_.store(windows_.size() + from_start_.size()); }

void BackfillWindows::Expect(std::shared_ptr<BackfillChunk> chunk) {
  absl::MutexLock lock(&mu_);
  std::string token = chunk->token;
  Window window;
  window.log.relation_id = chunk->relation->relation_id;
  window.log.key_columns = chunk->key_columns;
  // A from-start chunk has no low watermark: its window is open already.
  window.open = !chunk->from_start.empty();
  window.chunk = std::move(chunk);
  windows_[token] = std::move(window);
  CountLocked();
}

bool BackfillWindows::SetRows(absl::string_view token, std::vector<pgoutput::TupleData> rows) {
  absl::MutexLock lock(&mu_);
  auto it = windows_.find(token);
  if (it == windows_.end()) return false;
  it->second.chunk->rows = std::move(rows);
  it->second.rows_set = true;
  return true;
}

void BackfillWindows::Forget(absl::string_view token) {
  absl::MutexLock lock(&mu_);
  windows_.erase(token);
  CountLocked();
}

void BackfillWindows::OpenFromStart(const std::string& backfill_id, uint32_t relation_id,
                                    std::vector<std::string> key_columns) {
  absl::MutexLock lock(&mu_);
  KeyLog log;
  log.relation_id = relation_id;
  log.key_columns = std::move(key_columns);
  from_start_[backfill_id] = std::move(log);
  CountLocked();
}

void BackfillWindows::CloseFromStart(const std::string& backfill_id) {
  absl::MutexLock lock(&mu_);
  from_start_.erase(backfill_id);
  CountLocked();
}

bool BackfillWindows::FromStartOpen(const std::string& backfill_id) const {
  absl::MutexLock lock(&mu_);
  auto it = from_start_.find(backfill_id);
  return it != from_start_.end() && it->second.has_value();
}

size_t BackfillWindows::open_windows() const {
  absl::MutexLock lock(&mu_);
  return windows_.size();
}

bool BackfillWindows::Observe(const ChangeEvent& event) {
  if (event.op != ChangeEvent::Op::kMessage && expected_.load(std::memory_order_relaxed) == 0) {
    return false;
  }
  if (event.op == ChangeEvent::Op::kMessage) {
    std::optional<Watermark> mark = ParseWatermark(event.message_prefix, event.message_content);
    if (!mark) return false;
    absl::MutexLock lock(&mu_);
    auto it = windows_.find(mark->token);
    if (it == windows_.end()) return true;  // Another process's, or a replayed one.
    if (mark->kind == WatermarkKind::kLow) {
      it->second.open = true;
    } else if (it->second.open) {
      it->second.open = false;
      high_in_transaction_.push_back(mark->token);
      high_pending_.store(true);
    }
    return true;
  }
  absl::MutexLock lock(&mu_);
  for (auto& [token, window] : windows_) {
    if (window.open && window.chunk->from_start.empty()) NoteChange(window.log, event);
  }
  for (auto& [id, log] : from_start_) {
    if (!log) continue;
    NoteChange(*log, event);
    if (log->changed.size() > kMaxFromStartKeys) log.reset();
  }
  return false;
}

void BackfillWindows::NoteChange(KeyLog& log, const ChangeEvent& event) {
  if (event.op == ChangeEvent::Op::kTruncate) {
    for (const auto& relation : event.truncated_relations) {
      if (relation != nullptr && relation->relation_id == log.relation_id) log.truncated = true;
    }
    return;
  }
  if (event.relation == nullptr || event.relation->relation_id != log.relation_id) return;
  const RelationInfo& mine = *event.relation;
  if (log.positions_for != event.relation) {
    log.positions_for = event.relation;
    log.positions = KeyPositions(*event.relation, log.key_columns);
  }
  if (log.positions.empty()) {
    log.unknown_key = absl::StrCat("a change to ", mine.schema, ".", mine.table,
                                   " whose description lacks a key column");
    return;
  }
  const bool has_new = event.op == ChangeEvent::Op::kInsert || event.op == ChangeEvent::Op::kUpdate;
  const bool has_old = event.op == ChangeEvent::Op::kDelete ||
                       (event.op == ChangeEvent::Op::kUpdate &&
                        event.old_kind != pgoutput::OldTupleKind::kNone);
  if (has_new) {
    std::optional<std::string> key = EncodeKey(event.new_tuple, log.positions);
    // An UPDATE whose key column is an unchanged TOAST value: the key did not
    // change, and the old key (if sent) names the row.
    if (key && HasUnchangedToast(event.new_tuple)) {
      // The change event lacks that value, so it cannot stand in for the
      // chunk's row; the chunk is read again if it holds the key.
      log.partial.insert(*key);
    }
    if (key) {
      log.changed.insert(std::move(*key));
    } else if (!has_old) {
      log.unknown_key = absl::StrCat("an UPDATE of ", mine.schema, ".", mine.table, " at ",
                                     event.id.ToString(),
                                     " whose key was not sent (unchanged TOAST)");
    }
  }
  if (has_old) {
    std::optional<std::string> key = EncodeKey(event.old_tuple, log.positions);
    if (key) {
      log.changed.insert(std::move(*key));
    } else {
      log.unknown_key = absl::StrCat("a change to ", mine.schema, ".", mine.table, " at ",
                                     event.id.ToString(), " whose old key was not sent");
    }
  }
}

void BackfillWindows::Judge(const KeyLog& log, Window& window, CompletedChunk& chunk) {
  if (!window.rows_set) {
    chunk.outcome = CompletedChunk::Outcome::kRetry;
    chunk.retry_reason = "the high watermark came before the chunk's rows";
    return;
  }
  if (!log.unknown_key.empty()) {
    chunk.outcome = CompletedChunk::Outcome::kRetry;
    chunk.retry_reason = log.unknown_key;
    return;
  }
  if (log.truncated) {
    chunk.superseded = window.chunk->rows.size();
    return;
  }
  // Positions in the chunk's own description (the rows were read in it).
  const std::vector<int> positions = KeyPositions(*chunk.relation, window.chunk->key_columns);
  for (pgoutput::TupleData& row : window.chunk->rows) {
    std::optional<std::string> key = EncodeKey(row, positions);
    if (key && log.partial.contains(*key)) {
      chunk.outcome = CompletedChunk::Outcome::kRetry;
      chunk.retry_reason = absl::StrCat(
          "an UPDATE of ", chunk.relation->schema, ".", chunk.relation->table,
          " inside the window left a TOASTed value unsent, so its row must be read again");
      chunk.survivors.clear();
      chunk.superseded = 0;
      return;
    }
    if (key && log.changed.contains(*key)) {
      ++chunk.superseded;
      continue;
    }
    chunk.survivors.push_back(std::move(row));
  }
}

std::vector<CompletedChunk> BackfillWindows::OnCommit(const TransactionCommitted& commit) {
  std::vector<CompletedChunk> completed;
  if (!high_pending_.load()) return completed;
  absl::MutexLock lock(&mu_);
  for (const std::string& token : high_in_transaction_) {
    auto it = windows_.find(token);
    if (it == windows_.end()) continue;
    Window& window = it->second;
    CompletedChunk chunk;
    chunk.token = token;
    chunk.consumer = window.chunk->consumer;
    chunk.relation = window.chunk->relation;
    chunk.high_watermark = commit;
    if (window.chunk->from_start.empty()) {
      Judge(window.log, window, chunk);
    } else if (auto log = from_start_.find(window.chunk->from_start);
               log != from_start_.end() && log->second.has_value()) {
      Judge(*log->second, window, chunk);
    } else {
      chunk.outcome = CompletedChunk::Outcome::kRetry;
      chunk.retry_reason = absl::StrCat(
          "more than ", kMaxFromStartKeys, " keys of ", chunk.relation->schema, ".",
          chunk.relation->table, " changed since the stream started: the rest of the initial "
          "snapshot is read with watermarks");
    }
    completed.push_back(std::move(chunk));
    windows_.erase(it);
  }
  high_in_transaction_.clear();
  high_pending_.store(false);
  CountLocked();
  return completed;
}

}  // namespace walfeed::replication
