// walfeed::Subscriber: a consumer of one walfeed stream that reconnects, resumes
// after its durable checkpoint and acks cumulatively, so application code only
// sees batches of change events.
//
//   walfeed::SubscriberOptions options;
//   options.server = "walfeed.internal:50051";
//   options.stream = "orders";
//   options.consumer = "billing";
//   options.ack = walfeed::AckPolicy::EveryEvents(500);
//   walfeed::Subscriber subscriber(options);
//   absl::Status status = subscriber.Run([&](const walfeed::Batch& batch) {
//     for (const walfeed::v1::ChangeEvent& event : batch) Apply(event);
//     return absl::OkStatus();  // Only now may the batch's ids be acked.
//   });
//
// Delivery is at-least-once: events handled but not yet acked when a connection
// breaks (or the process dies) are delivered again, with identical ids, after the
// reconnect. For exactly-once effects store the last applied id with the effect
// (walfeed/pg_watermark.h does that for a PostgreSQL destination).
//
// The handler sees the generated walfeed::v1::ChangeEvent (the only reason this
// header includes a generated one): it is the API's contract, shared with clients
// in every other language, and carries every field the server sends (value kinds,
// raw bytes, TRUNCATE and message payloads) with no copy or translation to keep
// in step as the proto grows. walfeed::Batch adds parsed, ordered ids.
//
// Errors are classified once (see IsRetryable): transient ones (server restarting,
// stream still connecting to PostgreSQL, network) are retried with capped,
// jittered exponential backoff; definite ones end Run with the server's status.
#ifndef WALFEED_CLIENT_INCLUDE_WALFEED_SUBSCRIBER_H_
#define WALFEED_CLIENT_INCLUDE_WALFEED_SUBSCRIBER_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "walfeed/error_details.h"
#include "walfeed/event_id.h"
#include "walfeed/v1/change_stream.pb.h"

namespace grpc {
class Channel;
}  // namespace grpc

namespace walfeed {
namespace internal_subscriber {
struct Core;
}  // namespace internal_subscriber

// One `events` frame of a subscription: events in strictly increasing id order,
// never empty, with their ids parsed.
class Batch {
 public:
  // Compact-form shapes by ref, as one session received them.
  using Shapes =
      absl::flat_hash_map<uint32_t, std::shared_ptr<const walfeed::v1::RelationShape>>;

  // Checks that `events` is not empty and that every id parses and is greater
  // than the one before (InvalidArgument otherwise). Subscriber builds batches
  // with it; tests and replays may too. `shapes`: the session's shapes so far,
  // to which the batch's own (EventBatch.relations) are added; every
  // compact-form event must name one of them (InvalidArgument otherwise).
  static absl::StatusOr<Batch> Create(walfeed::v1::EventBatch events,
                                      std::string session_id = "", Shapes* shapes = nullptr);

  // The session that delivered the batch ("" when built by hand).
  const std::string& session_id() const { return session_id_; }
  const google::protobuf::RepeatedPtrField<walfeed::v1::ChangeEvent>& events() const {
    return events_.events();
  }
  int size() const { return events_.events_size(); }
  const walfeed::v1::ChangeEvent& event(int i) const { return events_.events(i); }
  // The parsed id of event(i).
  const EventId& id(int i) const { return ids_[static_cast<size_t>(i)]; }
  // SubscriberOptions::event_form EVENT_FORM_COMPACT: the shape event(i)'s
  // values follow (names, types and key flags of its columns, in order;
  // old key values follow its key columns), or nullptr for an event in the full
  // form, whose columns describe themselves.
  const walfeed::v1::RelationShape* shape(int i) const {
    return shapes_.empty() ? nullptr : shapes_[static_cast<size_t>(i)].get();
  }
  const EventId& first_id() const { return ids_.front(); }
  const EventId& last_id() const { return ids_.back(); }

  auto begin() const { return events_.events().begin(); }
  auto end() const { return events_.events().end(); }

 private:
  Batch() = default;

  walfeed::v1::EventBatch events_;
  std::vector<EventId> ids_;
  // Per event when any is compact; empty when none is.
  std::vector<std::shared_ptr<const walfeed::v1::RelationShape>> shapes_;
  std::string session_id_;
};

// When Subscriber acks. Acks are cumulative and only ever name an id the handler
// returned OK for (or, with Manual, an id passed to Subscriber::Ack).
struct AckPolicy {
  // Ack once at least `n` handled events are unacked (n = 1: after every batch).
  static AckPolicy EveryEvents(uint32_t n) { return AckPolicy{n, absl::ZeroDuration()}; }
  // Ack handled events at most `interval` after the first of them was handled.
  static AckPolicy EveryInterval(absl::Duration interval) { return AckPolicy{0, interval}; }
  // Never ack on its own: the application calls Subscriber::Ack(id), for example
  // after its destination committed.
  static AckPolicy Manual() { return AckPolicy{0, absl::ZeroDuration()}; }

  bool manual() const { return every_events == 0 && interval <= absl::ZeroDuration(); }

  // Both may be set: whichever comes first. Neither: manual.
  uint32_t every_events = 1;
  absl::Duration interval = absl::ZeroDuration();
};
// Automatic policies also ack everything handled when the server reports the
// stream idle (a `progress` frame), before Run returns after Stop(), and before
// Run returns a handler's error, so a quiet stream never leaves handled events
// unacked and an unacked window can never stall with handled events in it. They
// ack positions the server passed (events the filters left out) the same way.

struct TlsOptions {
  // Off: plaintext (loopback and tests only). On: TLS, with the server verified
  // against the root certificates (the system's when none are given).
  bool enabled = false;
  // Each certificate or key comes from a PEM string or, when that is empty, a
  // file. Set both chain and key for mutual TLS.
  std::string root_certs_pem;
  std::string root_certs_file;
  std::string cert_chain_pem;
  std::string cert_chain_file;
  std::string private_key_pem;
  std::string private_key_file;
  // Verify the server's certificate for this name instead of the address's host
  // (e.g. "localhost" when dialing 127.0.0.1).
  std::string server_name_override;
};

struct BackoffOptions {
  // The first retry waits about `base`; each further one doubles, up to `cap`.
  // Every delay is drawn uniformly from [delay/2, delay] so that many consumers
  // restarted together do not reconnect in lockstep. The count restarts after
  // a session that got its `started` frame.
  absl::Duration base = absl::Milliseconds(250);
  absl::Duration cap = absl::Seconds(30);
};

struct KeepaliveOptions {
  // HTTP/2 pings on an idle connection, so a dead peer or NAT drop is noticed
  // while no events flow. walfeed-server accepts pings every >= 10 s; a shorter
  // `time` makes it close the connection ("too_many_pings"). Zero: no pings.
  absl::Duration time = absl::Seconds(30);
  absl::Duration timeout = absl::Seconds(10);
};

// Fired on Run's thread when a session is live.
struct SessionInfo {
  std::string session_id;
  std::string checkpoint;   // The consumer's durable checkpoint, "" if none.
  std::string start_after;  // Events follow this id ("" = the stream's start).
  std::string slot;         // The stream's replication slot.
};

struct SubscriberOptions {
  // host:port (any gRPC target: "dns:///walfeed:50051", "unix:/run/walfeed.sock").
  std::string server = "127.0.0.1:50051";
  // Active/standby: `server` names every instance (a DNS name with several
  // addresses, or "ipv4:10.0.0.1:50051,10.0.0.2:50051"), and the channel
  // sends calls only to the one whose stream is SERVING, following a failover
  // by itself (gRPC client-side health checking on the health service
  // "walfeed.v1.ChangeStream/<stream>", with round_robin). Off: `server` as
  // is (a single instance, or an address that already follows readiness).
  bool follow_active = false;
  // A channel to use instead of dialing `server` with `tls` and `keepalive` (for
  // custom credentials or interceptors).
  std::shared_ptr<grpc::Channel> channel;

  std::string stream;
  // Durable consumer name: 1-63 of [A-Za-z0-9_.-].
  std::string consumer;
  // Empty: start after the consumer's durable checkpoint. Otherwise an id at or
  // beyond the checkpoint to start after (for consumers that keep their own
  // position, e.g. PgWatermark::Resume). Reconnects keep using it until the
  // checkpoint reaches it, then resume from the checkpoint.
  std::string start_after;
  // An ephemeral subscription (SubscribeRequest.ephemeral): no durable state on
  // the server, `consumer` optional. It starts at the newest event the server
  // holds (or after start_after), is never acked (`ack` is ignored), holds
  // nothing back, and resumes after the last event it received when it
  // reconnects; Run ends with OUT_OF_RANGE if the server no longer holds what
  // follows (it fell behind the durable consumers).
  bool ephemeral = false;
  // Where a durable consumer the server does not know yet starts: the oldest
  // event held (EARLIEST, the default) or after the newest (LATEST).
  walfeed::v1::StartPosition start = walfeed::v1::START_POSITION_UNSPECIFIED;
  // Only tables matching these "schema.table" globs (* and ?); empty: all.
  std::vector<std::string> tables;
  // Only these operations; empty: all.
  std::vector<walfeed::v1::Operation> operations;
  // EVENT_FORM_COMPACT: row events without their columns' metadata, which
  // Batch::shape gives instead (fewer bytes to receive and parse). Default:
  // every column carries its name and type.
  walfeed::v1::EventForm event_form = walfeed::v1::EVENT_FORM_UNSPECIFIED;
  // VALUE_FORM_TYPED or _BOTH: column values also (or only) as
  // ColumnValue::typed, their type's native form (integers, doubles,
  // timestamps, bytes, arrays...). Default: PostgreSQL's text only.
  walfeed::v1::ValueForm value_form = walfeed::v1::VALUE_FORM_UNSPECIFIED;

  // 0 for each: the server's default (256 events, 1 MiB per batch; a window of
  // 10,000 events or 64 MiB unacked; progress every 5 s).
  uint32_t max_batch_events = 0;
  uint32_t max_batch_bytes = 0;
  uint32_t max_unacked_events = 0;
  uint64_t max_unacked_bytes = 0;
  absl::Duration progress_interval = absl::ZeroDuration();

  TlsOptions tls;
  // Sent as "authorization: Bearer <token>" on every call when not empty. Over
  // plaintext the token travels in the clear: use TLS beyond loopback.
  std::string bearer_token;

  AckPolicy ack = AckPolicy::EveryEvents(1);
  // With AckPolicy::Manual: also ack, on its own, positions the server passed
  // (events the subscription's filters left out, EventBatch.passed and
  // Progress.passed) once every event delivered is acked. Automatic policies
  // always do, so a filtered consumer never holds the stream back.
  bool ack_passed_when_manual = false;
  // How long one Ack call may take (it returns once the checkpoint is durable).
  absl::Duration ack_timeout = absl::Seconds(30);
  BackoffOptions backoff;
  KeepaliveOptions keepalive;
  // Largest frame accepted. The server keeps batches under 3 MiB, but a single
  // larger event is sent alone and may exceed it.
  int max_receive_message_bytes = 256 << 20;

  // Observers, called on Run's thread (keep them short): a session went live;
  // an ack became durable (`checkpoint` as the server reports it); a transient
  // failure, retried after `delay`.
  std::function<void(const SessionInfo&)> on_started;
  std::function<void(const EventId& acked, const std::string& checkpoint)> on_acked;
  std::function<void(const absl::Status& why, absl::Duration delay)> on_retry;
};

// The channel Run dials when options.channel is unset: options.server with the
// TLS, keepalive, reconnect backoff and message size options. For other calls on
// the same server (GetStatus). INVALID_ARGUMENT for unreadable TLS files.
absl::StatusOr<std::shared_ptr<grpc::Channel>> CreateChannel(const SubscriberOptions& options);

// The gRPC service config of follow_active (round_robin, health-checked on
// `stream`'s health service; "" checks "walfeed.v1.ChangeStream", every
// stream), for channels made elsewhere: grpc::ChannelArguments::SetServiceConfigJSON.
std::string FollowActiveServiceConfig(const std::string& stream);

// True for failures a later Subscribe may not meet again: UNAVAILABLE (server
// shutting down or restarting, stream still connecting to PostgreSQL, network),
// DEADLINE_EXCEEDED, RESOURCE_EXHAUSTED, CANCELLED (not by Stop), INTERNAL and
// UNKNOWN (broken connections surface as these). Everything else is definite:
// DATA_LOSS, NOT_FOUND, PERMISSION_DENIED, UNAUTHENTICATED, INVALID_ARGUMENT,
// OUT_OF_RANGE, FAILED_PRECONDITION, UNIMPLEMENTED, ALREADY_EXISTS and ABORTED.
// ABORTED is definite for this process when it means a newer Subscribe of the
// same consumer took over (reason SESSION_SUPERSEDED): reconnecting would take
// the consumer back and fence the other session in turn, the two processes
// ping-ponging forever. (An ABORTED the server marks retryable, a reset, is
// retried: see the overload below.)
bool IsRetryable(absl::StatusCode code);

// What Subscriber decides by: retryable when the server attached a RetryInfo
// (for example ABORTED with reason CONSUMER_RESET: the consumer was reset and
// resumes after its new checkpoint), else by the code as above.
bool IsRetryable(const absl::Status& status);

class Subscriber {
 public:
  // Returns OK to allow acking the batch (per the policy); anything else ends Run
  // with that status.
  using Handler = std::function<absl::Status(const Batch&)>;

  explicit Subscriber(SubscriberOptions options);
  // Must not run while Run is running on another thread.
  ~Subscriber();
  Subscriber(const Subscriber&) = delete;
  Subscriber& operator=(const Subscriber&) = delete;

  // Subscribes and hands each batch to `handler` on the calling thread, one at a
  // time, in id order; acks per the policy; reconnects after transient failures.
  // Returns:
  //   OK after Stop() (pending acks of handled events were sent first);
  //   the handler's error (annotated with the batch's ids);
  //   the server's definite status (message prefixed with the call), e.g.
  //     DATA_LOSS when the slot was lost, NOT_FOUND for an unknown stream,
  //     ABORTED when another session took this consumer over or the consumer
  //     was removed;
  //   FAILED_PRECONDITION when, on a reconnect, the server's checkpoint is below
  //     what this Subscriber had acked: the consumer was removed (or its
  //     checkpoint deleted) meanwhile, and resuming would silently skip events;
  //   INVALID_ARGUMENT for unusable options (nothing was sent);
  //   INTERNAL when the server broke the protocol (malformed or unordered ids).
  // Call it once per Subscriber.
  absl::Status Run(const Handler& handler);

  // Makes Run return OK soon: after the handler call or Ack in progress, and
  // after acking what was handled. Safe from any thread, also before Run (then
  // Run returns at once) and from the handler.
  void Stop();

  // Acks, cumulatively, everything up to `id`, which must not be beyond the last
  // event handed to the handler (FAILED_PRECONDITION otherwise; INVALID_ARGUMENT
  // for a malformed id). Returns at once; Run's thread sends the ack (a failure
  // ends or restarts the session like any other). With an automatic policy it
  // only makes an ack come sooner. Safe from any thread, including the handler
  // (an id of the batch being handled is allowed).
  absl::Status Ack(absl::string_view id);
  absl::Status Ack(const EventId& id);

  // The consumer's durable checkpoint as the server last reported it (Started
  // frame or Ack response), "" before any.
  std::string checkpoint() const;

 private:
  const SubscriberOptions options_;
  // State shared with Stop/Ack callers and with the gRPC reactor of the current
  // call (whose final callback may still be unlocking it when Run returns).
  std::shared_ptr<internal_subscriber::Core> core_;
};

}  // namespace walfeed

#endif  // WALFEED_CLIENT_INCLUDE_WALFEED_SUBSCRIBER_H_
