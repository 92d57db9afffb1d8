#include "server/subscribe_options.h"

#include <algorithm>
#include <cstdint>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "replication/error_reason.h"

namespace walfeed::server {
namespace {

namespace reason = replication::reason;

// 0 leaves `*out` at the server's default; otherwise `value` must be in [1, max].
template <typename T>
absl::Status Knob(const char* field, uint64_t value, uint64_t max, T* out) {
  if (value == 0) return absl::OkStatus();
  if (value > max) {
    return reason::WithReason(
        absl::InvalidArgumentError(absl::StrCat(field, ": ", value, " is out of range: use 1 to ",
                                                max, ", or 0 for the server's default")),
        reason::kInvalidRequest, {{"field", field}});
  }
  *out = static_cast<T>(value);
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<SessionOptions> SessionOptionsFor(const walfeed::v1::SubscribeRequest& request,
                                                 const SessionLimits& defaults) {
  SessionOptions options;
  absl::StatusOr<EventFilter> filter = EventFilter::Create(request.tables(), request.operations());
  if (!filter.ok()) {
    const bool operations = absl::StartsWith(filter.status().message(), "operations");
    return reason::WithReason(filter.status(), reason::kInvalidRequest,
                              {{"field", operations ? "operations" : "tables"}});
  }
  options.filter = std::move(*filter);
  SessionLimits& limits = options.limits;
  limits = defaults;
  for (absl::Status status :
       {Knob("max_batch_events", request.max_batch_events(), kBatchEventsMax,
             &limits.max_batch_events),
        Knob("max_batch_bytes", request.max_batch_bytes(), kBatchBytesMax, &limits.max_batch_bytes),
        Knob("max_unacked_events", request.max_unacked_events(), kUnackedEventsMax,
             &limits.max_unacked_events),
        Knob("max_unacked_bytes", request.max_unacked_bytes(), kUnackedBytesMax,
             &limits.max_unacked_bytes)}) {
    if (!status.ok()) return status;
  }
  limits.max_batch_bytes = std::min(limits.max_batch_bytes, kBatchBytesCap);
  if (const uint32_t ms = request.progress_interval_ms(); ms != 0) {
    const absl::Duration interval = absl::Milliseconds(ms);
    if (interval < kProgressIntervalMin || interval > kProgressIntervalMax) {
      return reason::WithReason(
          absl::InvalidArgumentError(absl::StrCat(
              "progress_interval_ms: ", ms, " is out of range: use ",
              absl::ToInt64Milliseconds(kProgressIntervalMin), " to ",
              absl::ToInt64Milliseconds(kProgressIntervalMax), ", or 0 for the server's default")),
          reason::kInvalidRequest, {{"field", "progress_interval_ms"}});
    }
    limits.progress_interval = interval;
  }
  options.ephemeral = request.ephemeral();
  switch (request.start()) {
    case walfeed::v1::START_POSITION_UNSPECIFIED:
    case walfeed::v1::START_POSITION_EARLIEST:
      break;
    case walfeed::v1::START_POSITION_LATEST:
      options.start_latest = true;
      break;
    default:
      return reason::WithReason(
          absl::InvalidArgumentError(
              absl::StrCat("start: ", request.start(),
                           " is not a StartPosition (START_POSITION_EARLIEST or _LATEST)")),
          reason::kInvalidRequest, {{"field", "start"}});
  }
  switch (request.event_form()) {
    case walfeed::v1::EVENT_FORM_UNSPECIFIED:
    case walfeed::v1::EVENT_FORM_FULL:
      break;
    case walfeed::v1::EVENT_FORM_COMPACT:
      options.form.compact = true;
      break;
    default:
      return reason::WithReason(
          absl::InvalidArgumentError(absl::StrCat(
              "event_form: ", request.event_form(),
              " is not an EventForm (EVENT_FORM_FULL or EVENT_FORM_COMPACT)")),
          reason::kInvalidRequest, {{"field", "event_form"}});
  }
  switch (request.value_form()) {
    case walfeed::v1::VALUE_FORM_UNSPECIFIED:
    case walfeed::v1::VALUE_FORM_TEXT:
      break;
    case walfeed::v1::VALUE_FORM_TYPED:
      options.form.values = ValueForm::kTyped;
      break;
    case walfeed::v1::VALUE_FORM_BOTH:
      options.form.values = ValueForm::kBoth;
      break;
    default:
      return reason::WithReason(
          absl::InvalidArgumentError(absl::StrCat(
              "value_form: ", request.value_form(),
              " is not a ValueForm (VALUE_FORM_TEXT, VALUE_FORM_TYPED or VALUE_FORM_BOTH)")),
          reason::kInvalidRequest, {{"field", "value_form"}});
  }
  return options;
}

}  // namespace walfeed::server
