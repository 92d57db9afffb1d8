// ChangeStreamService: the walfeed.v1.ChangeStream gRPC service (callback API).
//
// Reactor methods never block: Subscribe reactors read frames from their
// StreamRuntime under short locks and keep one write in flight; Ack, GetStatus,
// RemoveConsumer and ResetConsumer, which wait on a durable write or on
// PostgreSQL, run on a WorkerPool and finish the call from there. Statuses from
// the runtime (absl) become gRPC statuses with their reason (error_details.h).
//
// Subscribe is registered raw (request and responses as bytes): the runtime holds
// events serialized and composes each events frame from those bytes
// (events_frame.h), so gRPC sends them without a parse and a second serialization.
// The request is parsed here; the wire contract is the .proto's all the same.
#ifndef WALFEED_SERVER_CHANGE_STREAM_SERVICE_H_
#define WALFEED_SERVER_CHANGE_STREAM_SERVICE_H_

#include <map>
#include <memory>
#include <optional>
#include <string>

#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "server/auth.h"
#include "server/error_details.h"
#include "server/session_limits.h"
#include "server/stream_runtime.h"
#include "server/unary_calls.h"
#include "server/worker_pool.h"
#include "walfeed/v1/change_stream.grpc.pb.h"

namespace walfeed::server {

using Rpc = walfeed::v1::ChangeStream;
using ChangeStreamBase = Rpc::WithRawCallbackMethod_Subscribe<Rpc::WithCallbackMethod_Ack<
    Rpc::WithCallbackMethod_GetStatus<Rpc::WithCallbackMethod_RemoveConsumer<
        Rpc::WithCallbackMethod_ResetConsumer<Rpc::WithCallbackMethod_StartBackfill<
            Rpc::WithCallbackMethod_GetBackfill<Rpc::WithCallbackMethod_ListBackfills<
                Rpc::WithCallbackMethod_CancelBackfill<Rpc::Service>>>>>>>>>;

// A consumer name as requests carry it (1-63 of [A-Za-z0-9_.-]); INVALID_ARGUMENT
// naming the field otherwise.
absl::Status ValidateConsumerName(absl::string_view consumer);
// `time` (at or after the Unix epoch) as a Timestamp, to the microsecond.
void SetTime(absl::Time time, google::protobuf::Timestamp* out);
// A backfill as the API shows it.
void BackfillToProto(const BackfillView& view, walfeed::v1::Backfill* out);

class ChangeStreamService final : public ChangeStreamBase {
 public:
  // `streams` by name; `authorizer` may be null (no authentication configured).
  // All pointers must outlive the service.
  // `pool` runs what waits on durable writes (Ack, RemoveConsumer,
  // ResetConsumer); `status_pool` runs GetStatus.
  ChangeStreamService(std::map<std::string, StreamRuntime*> streams,
                      const TokenAuthorizer* authorizer, WorkerPool* pool,
                      WorkerPool* status_pool, SessionLimits defaults);

  // How long GetStatus waits for PostgreSQL to answer a stream's slot query
  // before it answers with the last figures.
  static constexpr absl::Duration kSlotReadWait = absl::Seconds(1);

  // `request` is a serialized SubscribeRequest; each response a SubscribeResponse.
  grpc::ServerWriteReactor<grpc::ByteBuffer>* Subscribe(grpc::CallbackServerContext* context,
                                                        const grpc::ByteBuffer* request) override;
  grpc::ServerUnaryReactor* Ack(grpc::CallbackServerContext* context,
                                const walfeed::v1::AckRequest* request,
                                walfeed::v1::AckResponse* response) override;
  grpc::ServerUnaryReactor* GetStatus(grpc::CallbackServerContext* context,
                                      const walfeed::v1::GetStatusRequest* request,
                                      walfeed::v1::GetStatusResponse* response) override;
  grpc::ServerUnaryReactor* RemoveConsumer(grpc::CallbackServerContext* context,
                                           const walfeed::v1::RemoveConsumerRequest* request,
                                           walfeed::v1::RemoveConsumerResponse* response) override;
  grpc::ServerUnaryReactor* ResetConsumer(grpc::CallbackServerContext* context,
                                          const walfeed::v1::ResetConsumerRequest* request,
                                          walfeed::v1::ResetConsumerResponse* response) override;
  // Backfills (backfill_calls.cc): Start and Cancel run on `pool`, Get and
  // List answer from memory.
  grpc::ServerUnaryReactor* StartBackfill(grpc::CallbackServerContext* context,
                                          const walfeed::v1::StartBackfillRequest* request,
                                          walfeed::v1::StartBackfillResponse* response) override;
  grpc::ServerUnaryReactor* GetBackfill(grpc::CallbackServerContext* context,
                                        const walfeed::v1::GetBackfillRequest* request,
                                        walfeed::v1::GetBackfillResponse* response) override;
  grpc::ServerUnaryReactor* ListBackfills(grpc::CallbackServerContext* context,
                                          const walfeed::v1::ListBackfillsRequest* request,
                                          walfeed::v1::ListBackfillsResponse* response) override;
  grpc::ServerUnaryReactor* CancelBackfill(grpc::CallbackServerContext* context,
                                           const walfeed::v1::CancelBackfillRequest* request,
                                           walfeed::v1::CancelBackfillResponse* response) override;

  // Every call still being answered, and every later one, ends with `why`
  // (UNAVAILABLE: the server is stopping), never with gRPC's CANCELLED.
  void Stop(const absl::Status& why) ABSL_LOCKS_EXCLUDED(mu_);
  // After Stop: waits until every Subscribe call has sent its last status;
  // false at `deadline` (a client that stopped reading).
  bool AwaitSubscriptionsDone(absl::Time deadline);

  // Subscribe calls not done yet.
  class SubscribeCount {
   public:
    void Add(int delta) ABSL_LOCKS_EXCLUDED(mu_);
    bool AwaitNone(absl::Time deadline) ABSL_LOCKS_EXCLUDED(mu_);

   private:
    absl::Mutex mu_;
    int live_ ABSL_GUARDED_BY(mu_) = 0;
  };

 private:
  absl::Status Authorize(grpc::CallbackServerContext* context, Right right,
                         absl::string_view stream) const;
  absl::StatusOr<StreamRuntime*> Find(absl::string_view stream) const;
  // The stream's backfill runner, after authorizing `right`.
  absl::StatusOr<BackfillRunner*> Backfills(grpc::CallbackServerContext* context, Right right,
                                            absl::string_view stream) const;

  const std::map<std::string, StreamRuntime*> streams_;
  const TokenAuthorizer* const authorizer_;
  WorkerPool* const pool_;
  WorkerPool* const status_pool_;
  const SessionLimits defaults_;
  UnaryCalls calls_;
  SubscribeCount subscriptions_;
  absl::Mutex mu_;
  std::optional<absl::Status> stopping_ ABSL_GUARDED_BY(mu_);
};

}  // namespace walfeed::server

#endif  // WALFEED_SERVER_CHANGE_STREAM_SERVICE_H_
