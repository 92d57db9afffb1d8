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

void BackfillWindows::Expect(std::shared_ptr<BackfillChunk> chunk) {
  absl::MutexLock lock(&mu_);
  std::string token = chunk->token;
  Window window;
  window.chunk = std::move(chunk);
  windows_[token] = std::move(window);
  expected_.store(windows_.size());
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
  expected_.store(windows_.size());
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
    if (window.open) NoteChange(window, event);
  }
  return false;
}

void BackfillWindows::NoteChange(Window& window, const ChangeEvent& event) {
  const RelationInfo& mine = *window.chunk->relation;
  if (event.op == ChangeEvent::Op::kTruncate) {
    for (const auto& relation : event.truncated_relations) {
      if (relation != nullptr && relation->relation_id == mine.relation_id) window.truncated = true;
    }
    return;
  }
  if (event.relation == nullptr || event.relation->relation_id != mine.relation_id) return;
  if (window.positions_for != event.relation) {
    window.positions_for = event.relation;
    window.positions = KeyPositions(*event.relation, window.chunk->key_columns);
  }
  if (window.positions.empty()) {
    window.unknown_key = absl::StrCat("a change to ", mine.schema, ".", mine.table,
                                      " whose description lacks a key column");
    return;
  }
  const bool has_new = event.op == ChangeEvent::Op::kInsert || event.op == ChangeEvent::Op::kUpdate;
  const bool has_old = event.op == ChangeEvent::Op::kDelete ||
                       (event.op == ChangeEvent::Op::kUpdate &&
                        event.old_kind != pgoutput::OldTupleKind::kNone);
  if (has_new) {
    std::optional<std::string> key = EncodeKey(event.new_tuple, window.positions);
    // An UPDATE whose key column is an unchanged TOAST value: the key did not
    // change, and the old key (if sent) names the row.
    if (key && HasUnchangedToast(event.new_tuple)) {
      // The change event lacks that value, so it cannot stand in for the
      // chunk's row; the chunk is read again if it holds the key.
      window.partial.insert(*key);
    }
    if (key) {
      window.changed.insert(std::move(*key));
    } else if (!has_old) {
      window.unknown_key = absl::StrCat("an UPDATE of ", mine.schema, ".", mine.table,
                                        " at ", event.id.ToString(),
                                        " whose key was not sent (unchanged TOAST)");
    }
  }
  if (has_old) {
    std::optional<std::string> key = EncodeKey(event.old_tuple, window.positions);
    if (key) {
      window.changed.insert(std::move(*key));
    } else {
      window.unknown_key = absl::StrCat("a change to ", mine.schema, ".", mine.table, " at ",
                                        event.id.ToString(), " whose old key was not sent");
    }
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
    if (!window.rows_set) {
      chunk.outcome = CompletedChunk::Outcome::kRetry;
      chunk.retry_reason = "the high watermark came before the chunk's rows";
    } else if (!window.unknown_key.empty()) {
      chunk.outcome = CompletedChunk::Outcome::kRetry;
      chunk.retry_reason = window.unknown_key;
    } else if (window.truncated) {
      chunk.superseded = window.chunk->rows.size();
    } else {
      // Positions in the chunk's own description (the rows were read in it).
      const std::vector<int> positions = KeyPositions(*chunk.relation, window.chunk->key_columns);
      for (pgoutput::TupleData& row : window.chunk->rows) {
        std::optional<std::string> key = EncodeKey(row, positions);
        if (key && window.partial.contains(*key)) {
          chunk.outcome = CompletedChunk::Outcome::kRetry;
          chunk.retry_reason = absl::StrCat(
              "an UPDATE of ", chunk.relation->schema, ".", chunk.relation->table,
              " inside the window left a TOASTed value unsent, so its row must be read again");
          chunk.survivors.clear();
          chunk.superseded = 0;
          break;
        }
        if (key && window.changed.contains(*key)) {
          ++chunk.superseded;
          continue;
        }
        chunk.survivors.push_back(std::move(row));
      }
    }
    completed.push_back(std::move(chunk));
    windows_.erase(it);
  }
  high_in_transaction_.clear();
  high_pending_.store(false);
  expected_.store(windows_.size());
  return completed;
}

}  // namespace walfeed::replication
