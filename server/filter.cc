#include "server/filter.h"

#include <algorithm>
#include <cstddef>
#include <memory>
#include <string>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "replication/relation_cache.h"
#include "walfeed/v1/change_stream.pb.h"

namespace walfeed::server {
namespace {

using replication::ChangeEvent;

// The string "<schema>.<table>", read in place: Matches runs for every event of every
// subscription, and building the string would allocate each time.
class QualifiedName {
 public:
  QualifiedName(absl::string_view schema, absl::string_view table)
      : schema_(schema), table_(table) {}

  size_t size() const { return schema_.size() + 1 + table_.size(); }

  char operator[](size_t i) const {
    if (i < schema_.size()) return schema_[i];
    if (i == schema_.size()) return '.';
    return table_[i - schema_.size() - 1];
  }

  // The position after the character starting at `i` (< size()): a UTF-8 lead byte
  // takes up to three following continuation bytes with it, so that `?` and `*` step
  // over whole characters and never leave a position inside one. Any other byte
  // (ASCII, or a stray byte of a non-UTF-8 name) is a character by itself.
  size_t NextChar(size_t i) const {
    const auto lead = static_cast<unsigned char>((*this)[i]);
    size_t end = i + 1;
    if (lead >= 0xC0) {
      const size_t limit = std::min(size(), i + 4);
      while (end < limit && (static_cast<unsigned char>((*this)[end]) & 0xC0) == 0x80) ++end;
    }
    return end;
  }

 private:
  absl::string_view schema_;
  absl::string_view table_;
};

uint32_t OperationBit(ChangeEvent::Op op) { return uint32_t{1} << static_cast<unsigned>(op); }

// The replication core's operation for a valid, specified proto Operation.
ChangeEvent::Op FromProtoOp(walfeed::v1::Operation op) {
  switch (op) {
    case walfeed::v1::OPERATION_INSERT:
      return ChangeEvent::Op::kInsert;
    case walfeed::v1::OPERATION_UPDATE:
      return ChangeEvent::Op::kUpdate;
    case walfeed::v1::OPERATION_DELETE:
      return ChangeEvent::Op::kDelete;
    case walfeed::v1::OPERATION_TRUNCATE:
      return ChangeEvent::Op::kTruncate;
    case walfeed::v1::OPERATION_READ:
      return ChangeEvent::Op::kRead;
    default:  // OPERATION_MESSAGE; Create() rejects everything else first.
      return ChangeEvent::Op::kMessage;
  }
}

}  // namespace

bool GlobMatchesTable(absl::string_view pattern, absl::string_view schema,
                      absl::string_view table) {
  const QualifiedName name(schema, table);
  const size_t name_size = name.size();
  size_t p = 0;  // Next pattern byte.
  size_t n = 0;  // Next name byte.
  // The most recent `*` and where in the name its match currently ends. On a mismatch
  // the `*` takes one more character and matching resumes after it; earlier stars
  // never need revisiting, because the latest one can absorb anything they could.
  size_t star = absl::string_view::npos;
  size_t star_end = 0;
  while (n < name_size) {
    if (p < pattern.size() && pattern[p] == '*') {
      star = p++;
      star_end = n;
    } else if (p < pattern.size() && pattern[p] == '?') {
      ++p;
      n = name.NextChar(n);
    } else if (p < pattern.size() && pattern[p] == name[n]) {
      ++p;
      ++n;
    } else if (star != absl::string_view::npos) {
      p = star + 1;
      star_end = name.NextChar(star_end);
      n = star_end;
    } else {
      return false;
    }
  }
  // The name is used up: only stars (matching nothing) may remain.
  while (p < pattern.size() && pattern[p] == '*') ++p;
  return p == pattern.size();
}

absl::StatusOr<EventFilter> EventFilter::Create(
    const google::protobuf::RepeatedPtrField<std::string>& tables,
    const google::protobuf::RepeatedField<int>& operations) {
  EventFilter filter;
  // Every buffered event is matched against every pattern under the stream's
  // lock: the list is bounded so one request cannot stall the stream.
  if (tables.size() > kMaxTablePatterns) {
    return absl::InvalidArgumentError(absl::StrCat("tables: ", tables.size(),
                                                   " patterns; at most ", kMaxTablePatterns));
  }
  filter.table_patterns_.reserve(tables.size());
  for (int i = 0; i < tables.size(); ++i) {
    const std::string& pattern = tables.Get(i);
    if (pattern.size() > kMaxTablePatternBytes) {
      return absl::InvalidArgumentError(absl::StrCat(
          "tables[", i, "]: ", pattern.size(), " bytes; at most ", kMaxTablePatternBytes,
          " (a schema.table name has at most 127)"));
    }
    if (pattern.empty()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "tables[", i, "]: empty pattern; expected \"schema.table\" (* and ? allowed)"));
    }
    if (pattern.find('.') == std::string::npos) {
      return absl::InvalidArgumentError(absl::StrCat(
          "tables[", i, "]: pattern \"", absl::Utf8SafeCEscape(pattern),
          "\" has no '.'; expected \"schema.table\" (* and ? allowed, e.g. \"public.",
          absl::Utf8SafeCEscape(pattern), "\")"));
    }
    filter.table_patterns_.push_back(pattern);
  }
  for (int i = 0; i < operations.size(); ++i) {
    const int value = operations.Get(i);
    if (value == walfeed::v1::OPERATION_UNSPECIFIED) {
      return absl::InvalidArgumentError(absl::StrCat(
          "operations[", i, "]: OPERATION_UNSPECIFIED is not an operation"));
    }
    if (!walfeed::v1::Operation_IsValid(value)) {
      return absl::InvalidArgumentError(
          absl::StrCat("operations[", i, "]: unknown operation ", value));
    }
    filter.operation_mask_ |=
        OperationBit(FromProtoOp(static_cast<walfeed::v1::Operation>(value)));
  }
  return filter;
}

bool EventFilter::MatchesTable(absl::string_view schema, absl::string_view table) const {
  if (table_patterns_.empty()) return true;
  for (const std::string& pattern : table_patterns_) {
    if (GlobMatchesTable(pattern, schema, table)) return true;
  }
  return false;
}

bool EventFilter::Matches(const ChangeEvent& event) const {
  if (operation_mask_ != 0 && (operation_mask_ & OperationBit(event.op)) == 0) return false;
  if (table_patterns_.empty()) return true;
  switch (event.op) {
    case ChangeEvent::Op::kMessage:
      return true;  // A message has no table.
    case ChangeEvent::Op::kTruncate:
      for (const std::shared_ptr<const replication::RelationInfo>& relation :
           event.truncated_relations) {
        if (relation != nullptr && MatchesTable(relation->schema, relation->table)) {
          return true;
        }
      }
      return false;
    case ChangeEvent::Op::kInsert:
    case ChangeEvent::Op::kUpdate:
    case ChangeEvent::Op::kDelete:
    case ChangeEvent::Op::kRead:
      break;
  }
  return event.relation != nullptr &&
         MatchesTable(event.relation->schema, event.relation->table);
}

FilterKey FilterKey::Of(const walfeed::v1::ChangeEvent& event) {
  FilterKey key;
  key.op = event.op();
  if (event.op() == walfeed::v1::OPERATION_TRUNCATE) {
    for (const walfeed::v1::TableName& table : event.truncate().tables()) {
      key.tables.emplace_back(table.schema(), table.table());
    }
  } else if (event.op() != walfeed::v1::OPERATION_MESSAGE) {
    key.tables.emplace_back(event.schema(), event.table());
  }
  return key;
}

bool EventFilter::Matches(const FilterKey& key) const {
  if (!walfeed::v1::Operation_IsValid(key.op) || key.op == walfeed::v1::OPERATION_UNSPECIFIED) {
    return false;
  }
  const ChangeEvent::Op op = FromProtoOp(key.op);
  if (operation_mask_ != 0 && (operation_mask_ & OperationBit(op)) == 0) return false;
  if (table_patterns_.empty() || op == ChangeEvent::Op::kMessage) return true;  // No table.
  // A row event has its one table; a TRUNCATE passes if any of its tables does.
  for (const auto& [schema, table] : key.tables) {
    if (MatchesTable(schema, table)) return true;
  }
  return false;
}

}  // namespace walfeed::server
