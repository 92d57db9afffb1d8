// Shared by the backfill and initial-snapshot end-to-end tests: a consumer's
// view of a table rebuilt from READ and change events, and a fixture with the
// backfill calls and the acking loops the tests drive.
#ifndef WALFEED_TESTS_SERVER_BACKFILL_HARNESS_H_
#define WALFEED_TESTS_SERVER_BACKFILL_HARNESS_H_

#include <algorithm>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/str_join.h"
#include "tests/server/e2e_harness.h"

namespace walfeed::server::e2e {

using ::walfeed::v1::Backfill;
using ::walfeed::v1::ColumnValue;

// A table as a consumer rebuilds it: READ, INSERT and UPDATE set the row under
// its key, DELETE removes it, TRUNCATE empties it. Rows are their column texts
// joined by tabs (NULL as \N), as ExpectedRows prints them.
class Materialized {
 public:
  explicit Materialized(std::vector<std::string> key) : key_(std::move(key)) {}

  void Apply(const ChangeEvent& event) {
    switch (event.op()) {
      case walfeed::v1::OPERATION_READ:
      case walfeed::v1::OPERATION_INSERT:
        rows_[KeyOf(event.new_values())] = RowOf(event.new_values());
        break;
      case walfeed::v1::OPERATION_UPDATE:
        if (event.old_values_size() > 0) rows_.erase(KeyOf(event.old_values()));
        rows_[KeyOf(event.new_values())] = RowOf(event.new_values());
        break;
      case walfeed::v1::OPERATION_DELETE:
        rows_.erase(KeyOf(event.old_values()));
        break;
      case walfeed::v1::OPERATION_TRUNCATE:
        rows_.clear();
        break;
      default:
        break;
    }
  }
  std::vector<std::string> Rows() const {
    std::vector<std::string> rows;
    for (const auto& [key, row] : rows_) rows.push_back(row);
    std::sort(rows.begin(), rows.end());
    return rows;
  }

 private:
  static std::string Text(const ColumnValue& value) {
    return value.kind() == walfeed::v1::VALUE_KIND_NULL ? "\\N" : value.text();
  }
  std::string KeyOf(const google::protobuf::RepeatedPtrField<ColumnValue>& values) const {
    std::string key;
    for (const std::string& name : key_) {
      for (const ColumnValue& value : values) {
        if (value.name() == name) absl::StrAppend(&key, Text(value), "\x1f");
      }
    }
    return key;
  }
  static std::string RowOf(const google::protobuf::RepeatedPtrField<ColumnValue>& values) {
    std::vector<std::string> texts;
    for (const ColumnValue& value : values) texts.push_back(Text(value));
    return absl::StrJoin(texts, "\t");
  }

  const std::vector<std::string> key_;
  std::map<std::string, std::string> rows_;
};

// Applies `events` up to and including `acked` to `table`; returns the ids
// ("id" column) of the READ events among them.
inline std::set<std::string> ApplyAcked(const std::vector<ChangeEvent>& events, EventId acked,
                                        Materialized* table) {
  std::set<std::string> reads;
  for (const ChangeEvent& event : events) {
    if (ParseId(event.id()) > acked) continue;
    table->Apply(event);
    if (event.op() == walfeed::v1::OPERATION_READ) reads.insert(NewValue(event, "id"));
  }
  return reads;
}

class BackfillE2eTest : public ServerE2eTest {
 protected:
  grpc::Status StartBackfill(const std::string& consumer, const std::string& table,
                             Backfill* backfill, uint32_t chunk_rows = 0,
                             const std::string& where = "") {
    walfeed::v1::StartBackfillRequest request;
    request.set_stream(kStream);
    request.set_consumer(consumer);
    request.set_table(table);
    request.set_chunk_rows(chunk_rows);
    request.set_where(where);
    grpc::ClientContext context;
    context.set_deadline(ChronoDeadline(kDeadline));
    walfeed::v1::StartBackfillResponse response;
    grpc::Status status = stub_->StartBackfill(&context, request, &response);
    *backfill = response.backfill();
    return status;
  }

  Backfill GetBackfill(const std::string& id) {
    walfeed::v1::GetBackfillRequest request;
    request.set_stream(kStream);
    request.set_id(id);
    grpc::ClientContext context;
    context.set_deadline(ChronoDeadline(kDeadline));
    walfeed::v1::GetBackfillResponse response;
    EXPECT_THAT(stub_->GetBackfill(&context, request, &response), GrpcOk());
    return response.backfill();
  }

  // Acks everything `subscription` received or was passed, so chunks complete.
  void AckAll(const Subscription& subscription, const std::string& consumer, EventId* acked) {
    EventId newest = *acked;
    const std::string last = subscription.last_event_id();
    if (!last.empty()) newest = std::max(newest, ParseId(last));
    const std::string passed = subscription.last_progress().passed();
    if (!passed.empty()) newest = std::max(newest, ParseId(passed));
    if (newest == *acked) return;
    AckOk(subscription, consumer, newest.ToString());
    *acked = newest;
  }

  // Acks `consumer`'s events as they come until backfill `id` has ended.
  Backfill AckUntilEnded(const Subscription& subscription, const std::string& consumer,
                         const std::string& id, absl::Duration timeout = absl::Seconds(120)) {
    EventId acked;
    Backfill backfill;
    const bool ended = WaitUntil(
        [&] {
          AckAll(subscription, consumer, &acked);
          backfill = GetBackfill(id);
          return backfill.state() != walfeed::v1::BACKFILL_STATE_RUNNING;
        },
        timeout, absl::Milliseconds(20));
    EXPECT_TRUE(ended) << backfill.ShortDebugString();
    return backfill;
  }

  // The table's rows as Materialized prints them, `columns` in table order.
  std::vector<std::string> ExpectedRows(const std::string& table,
                                        const std::vector<std::string>& columns) {
    std::vector<std::string> texts;
    for (const std::string& column : columns) {
      texts.push_back(absl::StrCat("coalesce(", column, "::text, '\\N')"));
    }
    absl::StatusOr<std::vector<std::string>> rows = pg_->Query(absl::StrCat(
        "SELECT ", absl::StrJoin(texts, " || E'\\t' || "), " FROM ", table));
    EXPECT_THAT(rows, IsOk());
    std::vector<std::string> sorted = rows.value_or(std::vector<std::string>{});
    std::sort(sorted.begin(), sorted.end());
    return sorted;
  }

  // Waits until `subscription` received a change to table `other` with id
  // `marker`: everything committed before it arrived too.
  void WaitForMarker(const Subscription& subscription, const std::string& consumer, int marker) {
    ASSERT_THAT(pg_->Exec(absl::StrCat("INSERT INTO other VALUES (", marker, ", 'marker')")),
                IsOk());
    EventId acked;
    size_t scanned = 0;
    const bool seen = WaitUntil(
        [&] {
          AckAll(subscription, consumer, &acked);
          for (const ChangeEvent& event : subscription.events_from(scanned)) {
            ++scanned;
            if (event.table() == "other" && NewValue(event, "id") == absl::StrCat(marker)) {
              return true;
            }
          }
          return false;
        },
        kDeadline, absl::Milliseconds(20));
    ASSERT_TRUE(seen) << "the marker never arrived";
  }
};

}  // namespace walfeed::server::e2e

#endif  // WALFEED_TESTS_SERVER_BACKFILL_HARNESS_H_
