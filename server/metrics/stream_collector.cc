#include "server/metrics/stream_collector.h"

#include <string>

#include "absl/strings/ascii.h"
#include "absl/strings/strip.h"
#include "absl/strings/str_cat.h"
#include "server/metrics/family_builder.h"
#include "walfeed/v1/change_stream.pb.h"

namespace walfeed::server::metrics {
namespace {

double Bytes(Lsn lsn) { return static_cast<double>(lsn.value()); }

// "STREAM_STATE_STREAMING" -> "streaming".
std::string StateLabel(walfeed::v1::StreamState state) {
  return absl::AsciiStrToLower(
      absl::StripPrefix(walfeed::v1::StreamState_Name(state), "STREAM_STATE_"));
}

void AddStream(const RuntimeSnapshot& s, const SlotMonitor::View& view, FamilyBuilder& out) {
  const Labels stream = {{"stream", s.name}};
  const Lsn server = ServerLsnOf(s, view);

  out.Gauge("walfeed_stream_info", "The stream and its replication slot (always 1).",
            {{"stream", s.name}, {"slot", s.slot_name}}, 1);
  for (walfeed::v1::StreamState state :
       {walfeed::v1::STREAM_STATE_CONNECTING, walfeed::v1::STREAM_STATE_STREAMING,
        walfeed::v1::STREAM_STATE_FAILED, walfeed::v1::STREAM_STATE_STANDBY}) {
    out.Gauge("walfeed_stream_state",
              "1 for the stream's current state: connecting (or reconnecting), streaming, "
              "failed (needs an operator; see GetStatus or the log for the error), standby "
              "(another instance streams it).",
              {{"stream", s.name}, {"state", StateLabel(state)}}, s.state == state ? 1 : 0);
  }
  out.Gauge("walfeed_stream_leader",
            "1 while this instance leads the stream (holds its leadership lock).", stream,
            s.leading ? 1 : 0);
  out.Counter("walfeed_stream_events_total",
              "Change events decoded from the slot (rows, truncates, logical messages).", stream,
              static_cast<double>(s.reader.events));
  out.Counter("walfeed_stream_transactions_total", "Transactions decoded from the slot.",
              stream, static_cast<double>(s.reader.transactions));
  out.Counter("walfeed_stream_wal_bytes_total",
              "pgoutput message bytes received from PostgreSQL.", stream,
              static_cast<double>(s.reader.wal_bytes));
  out.Counter("walfeed_stream_skipped_messages_total",
              "Non-transactional logical messages skipped (only transactional ones are "
              "delivered).",
              stream, static_cast<double>(s.reader.non_transactional_messages));
  out.Counter("walfeed_stream_reconnects_total",
              "Replication connections that started streaming after the first.", stream,
              static_cast<double>(s.connections > 0 ? s.connections - 1 : 0));
  out.Counter("walfeed_stream_delivered_events_total",
              "Events sent to subscribers, every session counted (redeliveries too).", stream,
              static_cast<double>(s.delivered_events));
  out.Gauge("walfeed_stream_server_wal_lsn_bytes",
            "The server's WAL position (pg_current_wal_lsn), as a byte offset.", stream,
            Bytes(server));
  out.Gauge("walfeed_stream_confirmed_lsn_bytes",
            "The flush position last confirmed to PostgreSQL (acked by every consumer and "
            "stored), as a byte offset.",
            stream, Bytes(s.confirmed));
  out.Timestamp("walfeed_stream_last_data_timestamp_seconds",
                "When the last pgoutput message arrived (Unix time).", stream,
                s.reader.last_data_at);
  out.Timestamp("walfeed_stream_last_feedback_timestamp_seconds",
                "When the last standby status update was sent to PostgreSQL (Unix time).",
                stream, s.reader.last_status_update_at);
  out.Gauge("walfeed_stream_buffered_events", "Events held in memory for consumers.", stream,
            static_cast<double>(s.buffered_events));
  const char* kBuffer = "Bytes held for consumers, by tier (memory, disk: the spill).";
  const char* kLimit = "What each tier may hold (buffer_bytes, retention_bytes).";
  out.Gauge("walfeed_stream_buffer_bytes", kBuffer, {{"stream", s.name}, {"tier", "memory"}},
            static_cast<double>(s.buffered_bytes));
  out.Gauge("walfeed_stream_buffer_bytes", kBuffer, {{"stream", s.name}, {"tier", "disk"}},
            static_cast<double>(s.spilled_bytes));
  out.Gauge("walfeed_stream_buffer_limit_bytes", kLimit, {{"stream", s.name}, {"tier", "memory"}},
            static_cast<double>(s.buffer_limit_bytes));
  out.Gauge("walfeed_stream_buffer_limit_bytes", kLimit, {{"stream", s.name}, {"tier", "disk"}},
            static_cast<double>(s.retention_bytes));
  out.Gauge("walfeed_stream_ephemeral_sessions", "Ephemeral (tail) sessions connected.", stream,
            static_cast<double>(s.ephemeral_sessions));

  // The slot, as PostgreSQL last reported it.
  const Labels slot = {{"stream", s.name}, {"slot", s.slot_name}};
  out.Timestamp("walfeed_slot_read_timestamp_seconds",
                "When the slot figures below were read from PostgreSQL (Unix time).", slot,
                view.report ? view.read_at : absl::InfinitePast());
  out.Gauge("walfeed_slot_read_ok",
            "1 when the latest read of pg_replication_slots succeeded in time.", slot,
            view.fresh && !view.error ? 1 : 0);
  if (view.report) {
    const std::optional<replication::SlotState>& state = view.report->slot;
    const std::string wal_status = !state ? "missing" : state->wal_status;
    for (const char* status : {"reserved", "extended", "unreserved", "lost", "missing"}) {
      out.Gauge("walfeed_slot_wal_status",
                "1 for the slot's wal_status: reserved, extended, unreserved (WAL past "
                "max_slot_wal_keep_size: invalidated at the next checkpoint unless it "
                "catches up), lost (invalidated), missing (no such slot).",
                {{"stream", s.name}, {"slot", s.slot_name}, {"wal_status", status}},
                wal_status == status ? 1 : 0);
    }
    if (state) {
      out.Gauge("walfeed_slot_active", "1 while a walsender holds the slot.", slot,
                state->active ? 1 : 0);
      out.Gauge("walfeed_slot_retained_wal_bytes",
                "WAL the slot keeps from being recycled (server position - restart_lsn).",
                slot, static_cast<double>(RetainedWalBytes(*state, server)));
      if (state->safe_wal_size) {
        out.Gauge("walfeed_slot_safe_wal_size_bytes",
                  "WAL that can still be written before the slot is in danger of "
                  "invalidation (pg_replication_slots.safe_wal_size; absent without a "
                  "max_slot_wal_keep_size).",
                  slot, static_cast<double>(*state->safe_wal_size));
      }
      out.Gauge("walfeed_slot_confirmed_flush_lsn_bytes",
                "The slot's confirmed_flush_lsn as PostgreSQL reports it, as a byte offset.",
                slot, Bytes(state->confirmed_flush));
    }
  }

  for (const ConsumerSnapshot& c : s.consumers) {
    const Labels consumer = {{"stream", s.name}, {"consumer", c.name}};
    out.Counter("walfeed_consumer_delivered_events_total",
                "Events sent to the consumer's sessions (redeliveries count again).", consumer,
                static_cast<double>(c.delivered_events));
    out.Counter("walfeed_consumer_acked_events_total",
                "Delivered events the consumer acknowledged.", consumer,
                static_cast<double>(c.acked_events));
    out.Gauge("walfeed_consumer_unacked_events",
              "Events delivered in the current session and not acknowledged yet.", consumer,
              static_cast<double>(c.unacked_events));
    out.Gauge("walfeed_consumer_lag_bytes",
              "WAL between the consumer's checkpoint and the server's position.", consumer,
              static_cast<double>(LagBytes(s, c, server)));
    out.Gauge("walfeed_consumer_lag_seconds",
              "How long ago the oldest event the consumer has not acknowledged arrived (0 when "
              "it acknowledged everything read).",
              consumer, absl::ToDoubleSeconds(c.lag));
    out.Gauge("walfeed_consumer_held_bytes",
              "Bytes held only because this consumer has not acknowledged them.", consumer,
              static_cast<double>(c.held_bytes));
    // The episode, not the moment: a consumer that lets the buffer refill
    // every few seconds holds the stream throughout (alerts wait minutes).
    out.Gauge("walfeed_consumer_holding_stream",
              "1 while the stream waits for this consumer: from the buffer filling up until "
              "it has had room for 5 s.",
              consumer, c.name == s.hold_episode_by ? 1 : 0);
    out.Gauge("walfeed_consumer_connected", "1 while the consumer has a session.", consumer,
              c.session_id.empty() ? 0 : 1);
    out.Gauge("walfeed_consumer_detached",
              "1 when the laggard policy detached the consumer (ResetConsumer re-attaches it).",
              consumer, c.detached ? 1 : 0);
    out.Counter("walfeed_consumer_sessions_started_total", "Subscribe calls that started a session.",
                consumer, static_cast<double>(c.sessions_started));
    out.Counter("walfeed_consumer_sessions_superseded_total",
                "Sessions ended by a newer Subscribe of the same consumer.", consumer,
                static_cast<double>(c.sessions_superseded));
  }
}

}  // namespace

std::vector<prometheus::MetricFamily> StreamCollector::Collect() const {
  const absl::Time asked = absl::Now();
  for (StreamRuntime* runtime : streams_) runtime->WantSlot();
  FamilyBuilder out;
  for (StreamRuntime* runtime : streams_) {
    const SlotMonitor::View view = runtime->SlotView(asked, asked + kSlotReadWait);
    AddStream(runtime->Snapshot(), view, out);
  }
  return out.Take();
}

}  // namespace walfeed::server::metrics
