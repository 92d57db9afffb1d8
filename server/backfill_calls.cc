// The backfill RPCs of ChangeStreamService: StartBackfill and CancelBackfill
// (the `admin` right; they write records, so they run on the worker pool),
// GetBackfill and ListBackfills (the `status` right; answered from memory).
#include <string>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "replication/error_reason.h"
#include "server/change_stream_service.h"

namespace walfeed::server {

namespace reason = replication::reason;

namespace {

constexpr size_t kMaxNameBytes = 63;        // NAMEDATALEN - 1.
constexpr size_t kMaxWhereBytes = 8 << 10;  // A predicate, not a program.

absl::Status Invalid(absl::string_view field, std::string message) {
  return reason::WithReason(absl::InvalidArgumentError(std::move(message)),
                            reason::kInvalidRequest, {{"field", std::string(field)}});
}

absl::StatusOr<replication::TableName> ParseTable(const std::string& text) {
  const size_t dot = text.find('.');
  if (dot == std::string::npos || dot == 0 || dot + 1 == text.size()) {
    return Invalid("table", absl::StrCat("table: \"", text.substr(0, 200),
                                         "\" is not schema.table (e.g. public.orders)"));
  }
  replication::TableName table{text.substr(0, dot), text.substr(dot + 1)};
  if (table.schema.size() > kMaxNameBytes || table.table.size() > kMaxNameBytes ||
      text.find('\0') != std::string::npos) {
    return Invalid("table", "table: a schema or table name is longer than 63 bytes");
  }
  return table;
}

absl::Status ValidateBackfillId(const std::string& id) {
  if (!id.empty() && id.size() <= 19 &&
      std::all_of(id.begin(), id.end(), [](char c) { return absl::ascii_isdigit(c); })) {
    return absl::OkStatus();
  }
  return Invalid("id", absl::StrCat("id: \"", id.substr(0, 40),
                                    "\" is not a backfill id (a number, as StartBackfill and "
                                    "ListBackfills return it)"));
}

walfeed::v1::BackfillState StateToProto(replication::BackfillState state) {
  switch (state) {
    case replication::BackfillState::kRunning:
      return walfeed::v1::BACKFILL_STATE_RUNNING;
    case replication::BackfillState::kDone:
      return walfeed::v1::BACKFILL_STATE_DONE;
    case replication::BackfillState::kCancelled:
      return walfeed::v1::BACKFILL_STATE_CANCELLED;
    case replication::BackfillState::kFailed:
      return walfeed::v1::BACKFILL_STATE_FAILED;
  }
  return walfeed::v1::BACKFILL_STATE_UNSPECIFIED;
}

}  // namespace

void SetTime(absl::Time time, google::protobuf::Timestamp* out) {
  const int64_t micros = absl::ToUnixMicros(time);
  out->set_seconds(micros / 1000000);
  out->set_nanos(static_cast<int32_t>(micros % 1000000) * 1000);
}

void BackfillToProto(const BackfillView& view, walfeed::v1::Backfill* out) {
  const replication::BackfillRecord& record = view.record;
  out->set_id(record.id);
  out->set_stream(record.stream);
  out->set_consumer(record.consumer);
  out->mutable_table()->set_schema(record.table.schema);
  out->mutable_table()->set_table(record.table.table);
  out->set_where(record.where);
  out->set_chunk_rows(record.chunk_rows);
  out->set_state(StateToProto(record.state));
  out->set_error(record.state == replication::BackfillState::kRunning && !view.retrying.empty()
                     ? absl::StrCat("retrying: ", view.retrying)
                     : record.error);
  for (const std::string& column : record.key_columns) out->add_key_columns(column);
  out->set_rows(record.rows);
  out->set_chunks(record.chunks);
  out->set_superseded_rows(record.superseded_rows);
  for (const std::string& value : view.last_key) out->add_last_key(value);
  out->set_estimated_rows(view.estimated_rows);
  out->set_rows_per_second(view.rows_per_second);
  out->set_eta_seconds(view.eta_seconds);
  out->set_initial_snapshot(record.initial_snapshot);
  if (record.created_at != absl::InfinitePast()) SetTime(record.created_at, out->mutable_created_at());
  if (record.finished_at != absl::InfinitePast()) {
    SetTime(record.finished_at, out->mutable_finished_at());
  }
}

absl::StatusOr<BackfillRunner*> ChangeStreamService::Backfills(
    grpc::CallbackServerContext* context, Right right, absl::string_view stream) const {
  if (absl::Status status = Authorize(context, right, stream); !status.ok()) return status;
  absl::StatusOr<StreamRuntime*> runtime = Find(stream);
  if (!runtime.ok()) return runtime.status();
  if ((*runtime)->backfills() == nullptr) {
    return reason::WithReason(
        absl::FailedPreconditionError(absl::StrCat("stream ", stream, " cannot backfill")),
        reason::kStreamFailed, {{"stream", std::string(stream)}});
  }
  return (*runtime)->backfills();
}

grpc::ServerUnaryReactor* ChangeStreamService::StartBackfill(
    grpc::CallbackServerContext* context, const walfeed::v1::StartBackfillRequest* request,
    walfeed::v1::StartBackfillResponse* response) {
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  absl::StatusOr<BackfillRunner*> runner = Backfills(context, Right::kAdmin, request->stream());
  absl::Status status = runner.status();
  // "" = every consumer of the stream.
  if (status.ok() && !request->consumer().empty()) {
    status = ValidateConsumerName(request->consumer());
  }
  absl::StatusOr<replication::TableName> table = ParseTable(request->table());
  if (status.ok()) status = table.status();
  if (status.ok() && request->where().size() > kMaxWhereBytes) {
    status = Invalid("where", "where: longer than 8 KiB");
  }
  if (!status.ok()) {
    reactor->Finish(ToGrpc(status));
    return reactor;
  }
  const std::optional<UnaryCalls::Id> call = calls_.Open(reactor);
  if (!call) return reactor;
  pool_->Run([this, call = *call, runner = *runner, consumer = request->consumer(),
              table = *table, where = request->where(), chunk_rows = request->chunk_rows(),
              response] {
    absl::StatusOr<BackfillView> started = runner->Begin(consumer, table, where, chunk_rows);
    calls_.Finish(call, ToGrpc(started.status()), [&] { BackfillToProto(*started, response->mutable_backfill()); });
  });
  return reactor;
}

grpc::ServerUnaryReactor* ChangeStreamService::CancelBackfill(
    grpc::CallbackServerContext* context, const walfeed::v1::CancelBackfillRequest* request,
    walfeed::v1::CancelBackfillResponse* response) {
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  absl::StatusOr<BackfillRunner*> runner = Backfills(context, Right::kAdmin, request->stream());
  absl::Status status = runner.status();
  if (status.ok()) status = ValidateBackfillId(request->id());
  if (!status.ok()) {
    reactor->Finish(ToGrpc(status));
    return reactor;
  }
  const std::optional<UnaryCalls::Id> call = calls_.Open(reactor);
  if (!call) return reactor;
  pool_->Run([this, call = *call, runner = *runner, id = request->id(), response] {
    absl::StatusOr<BackfillView> cancelled = runner->Cancel(id);
    calls_.Finish(call, ToGrpc(cancelled.status()),
                  [&] { BackfillToProto(*cancelled, response->mutable_backfill()); });
  });
  return reactor;
}

grpc::ServerUnaryReactor* ChangeStreamService::GetBackfill(
    grpc::CallbackServerContext* context, const walfeed::v1::GetBackfillRequest* request,
    walfeed::v1::GetBackfillResponse* response) {
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  absl::StatusOr<BackfillRunner*> runner = Backfills(context, Right::kStatus, request->stream());
  absl::Status status = runner.status();
  if (status.ok()) status = ValidateBackfillId(request->id());
  absl::StatusOr<BackfillView> view =
      status.ok() ? (*runner)->Get(request->id()) : absl::StatusOr<BackfillView>(status);
  if (view.ok()) BackfillToProto(*view, response->mutable_backfill());
  reactor->Finish(ToGrpc(view.status()));
  return reactor;
}

grpc::ServerUnaryReactor* ChangeStreamService::ListBackfills(
    grpc::CallbackServerContext* context, const walfeed::v1::ListBackfillsRequest* request,
    walfeed::v1::ListBackfillsResponse* response) {
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  absl::StatusOr<BackfillRunner*> runner = Backfills(context, Right::kStatus, request->stream());
  if (runner.ok()) {
    for (const BackfillView& view : (*runner)->List(/*running_only=*/false)) {
      BackfillToProto(view, response->add_backfills());
    }
  }
  reactor->Finish(ToGrpc(runner.status()));
  return reactor;
}

}  // namespace walfeed::server
