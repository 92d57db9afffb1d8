#include "replication/pg/stream_reader.h"

#include <poll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <algorithm>
#include <string>

#include "absl/cleanup/cleanup.h"
#include "absl/random/random.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "replication/copy_data.h"
#include "replication/pg/replication_connection.h"
#include "replication/pg/replication_log.h"
#include "replication/pgoutput.h"
#include "replication/retry.h"
#include "replication/sql_text.h"
#include "replication/status_macros.h"

namespace walfeed::replication::pg {
namespace {

// A publication dropped (and perhaps created again) while the slot still had
// changes to decode: PostgreSQL 15's pgoutput looks publications up as of each
// change, so the walsender fails at the same change on every reconnect. The
// error alone names neither the cause nor the way out.
absl::Status ExplainMissingPublication(const absl::Status& status, const ReaderOptions& options) {
  // undefined_object while streaming, from the output plugin's publication
  // lookup (the slot's own absence is caught before START_REPLICATION).
  const absl::string_view message = status.message();
  if (SqlStateOf(status) != "42704" || !absl::StrContains(message, "publication \"")) {
    return status;
  }
  return absl::Status(
      status.code(),
      absl::StrCat(
          message, ". A publication the stream reads was dropped (and perhaps created again) "
          "while slot \"", options.slot_name, "\" still had changes to decode; PostgreSQL "
          "looks publications up as of each change, so it cannot stream the changes from the "
          "drop until the publication existed again. To go on, accepting that gap: make sure "
          "the publication exists, then, with this stream stopped, SELECT "
          "pg_replication_slot_advance(", QuoteLiteral(options.slot_name),
          ", pg_current_wal_lsn()); DELETE FROM ", QuoteIdentifier(options.excluded_schema),
          ".stream_checkpoints WHERE stream = ", QuoteLiteral(options.stream_name),
          "; and restart walfeed; re-sync what consumers missed from the tables. Never drop a "
          "publication a stream still reads (docs/operations.md)"));
}

}  // namespace

std::unique_ptr<ReplicationOpener> MakePgOpener(const ReaderOptions& options) {
  return std::make_unique<PgReplicationOpener>(PgReplicationOpener::Options{
      options.stream_name, options.conninfo, options.slot_name, options.publication_names,
      options.excluded_schema, options.expected_slot, options.first_connection,
      options.walsender_name});
}

StreamReader::StreamReader(ReaderOptions options, AckTracker* tracker, StreamSink* sink,
                           ConfirmedLsnStore* store)
    : StreamReader(options, MakePgOpener(options), Clock::Real(), tracker, sink, store) {}

StreamReader::StreamReader(ReaderOptions options, std::unique_ptr<ReplicationOpener> opener,
                           const Clock* clock, AckTracker* tracker, StreamSink* sink,
                           ConfirmedLsnStore* store)
    : options_(std::move(options)),
      opener_(std::move(opener)),
      clock_(clock),
      tracker_(tracker),
      sink_(sink),
      wake_fd_(eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC)),
      gate_(options_.deliver_after),
      store_(store) {
  assembler_.set_excluded_schema(options_.excluded_schema);
}

StreamReader::~StreamReader() {
  persister_.reset();  // Joins its thread, which may still wake us.
  if (wake_fd_ >= 0) close(wake_fd_);
}

void StreamReader::Stop() {
  stop_.store(true);
  Wake();
}

void StreamReader::Wake() {
  const uint64_t one = 1;
  // A full counter (EAGAIN) already means "wake up"; nothing else can fail here.
  (void)!write(wake_fd_, &one, sizeof(one));
}

void StreamReader::DrainWakeFd() {
  uint64_t count;
  (void)!read(wake_fd_, &count, sizeof(count));
}

void StreamReader::WaitForWake(absl::Duration timeout) {
  pollfd fd{wake_fd_, POLLIN, 0};
  poll(&fd, 1,
       static_cast<int>(std::min<int64_t>(
           absl::ToInt64Milliseconds(absl::Ceil(timeout, absl::Milliseconds(1))), 60 * 1000)));
  DrainWakeFd();
}

StreamReader::Stats StreamReader::stats() const {
  absl::MutexLock lock(&stats_mu_);
  return stats_;
}

bool StreamReader::AwaitStats(const std::function<bool(const Stats&)>& condition,
                              absl::Duration timeout) const {
  absl::MutexLock lock(&stats_mu_);
  auto holds = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(stats_mu_) { return condition(stats_); };
  return stats_mu_.AwaitWithTimeout(absl::Condition(&holds), timeout);
}

void StreamReader::PublishCounts() {
  const DeliveryGate::Counts& gate = gate_.counts();
  absl::MutexLock lock(&stats_mu_);
  stats_.frames += pending_.frames;
  stats_.keepalives += pending_.keepalives;
  stats_.events += pending_.events;
  stats_.transactions += pending_.transactions;
  stats_.wal_bytes += pending_.wal_bytes;
  stats_.server_wal_end = std::max(stats_.server_wal_end, pending_.server_wal_end);
  if (pending_.data) stats_.last_data_at = turn_started_;
  stats_.redelivered_dropped = gate.redelivered_dropped;
  stats_.below_checkpoint = gate.below_checkpoint;
  stats_.non_transactional_messages = gate.non_transactional_messages;
  if (gate.non_transactional_messages > 0 && !skipped_message_logged_) {
    skipped_message_logged_ = true;
    ReplicationLogger()->info(
        "stream {}: skipped a non-transactional logical message (pg_logical_emit_message(false, "
        "...)): walfeed delivers only transactional ones, whose commit gives them an id; "
        "walfeed_stream_skipped_messages_total counts them (logged once)",
        options_.stream_name);
  }
  pending_ = PendingCounts{};
}

absl::Status StreamReader::Run(Lsn start) {
  if (wake_fd_ < 0) return absl::InternalError("eventfd() failed");
  durable_ = start;
  persister_ = std::make_unique<ConfirmedPersister>(store_, start, [this] { Wake(); });
  absl::Status status = RunSessions();
  // Joined before returning: a store round trip still in flight (a ping asked for
  // just before the end) finishes inside Run, never after it.
  persister_.reset();
  return status;
}

absl::Status StreamReader::RunSessions() {
  Backoff backoff(options_.backoff_base, options_.backoff_cap,
                  options_.backoff_seed != 0 ? options_.backoff_seed
                                             : absl::Uniform<uint64_t>(absl::BitGen()));
  while (!stop_.load()) {
    absl::Status status = RunSession(durable_);
    // A session that ended with an error skipped the OnDrained of its last turn:
    // what it handed over must not wait for the next session.
    sink_->OnDrained();
    if (stop_.load()) return absl::OkStatus();
    if (!IsTransient(status)) {
      status = ExplainMissingPublication(status, options_);
      ReplicationLogger()->error("stream {}: stopped: {}", options_.stream_name, status.ToString());
      return status;
    }
    const absl::Duration delay = backoff.Next();
    ReplicationLogger()->warn("stream {}: {}; reconnecting from {} in {}", options_.stream_name,
                              status.ToString(), durable_.ToString(), absl::FormatDuration(delay));
    sink_->OnDisconnected(status);
    {
      absl::MutexLock lock(&stats_mu_);
      ++stats_.reconnects;
    }
    WaitForWake(delay);
    // Backoff restarts once a session has streamed; see RunSession.
    if (last_session_streamed_) backoff.Reset();
  }
  return absl::OkStatus();
}

absl::Status StreamReader::RunSession(Lsn start) {
  last_session_streamed_ = false;
  WALFEED_ASSIGN_OR_RETURN(std::unique_ptr<ReplicationConnection> conn, opener_->Open(start));
  // A session that ends inside a turn (an error) still counts what it read.
  absl::Cleanup publish_counts = [this] { PublishCounts(); };
  assembler_.Reset(start);
  gate_.OnReconnect();
  last_status_sent_ = absl::InfinitePast();
  last_status_replied_ = false;
  quick_requests_ = 0;

  absl::Duration interval = options_.max_feedback_interval;
  ping_floor_ = absl::InfiniteDuration();  // Timeout 0: the walsender never pings.
  if (conn->wal_sender_timeout() > absl::ZeroDuration()) {
    interval = std::min(interval, conn->wal_sender_timeout() / 2);
    ping_floor_ = conn->wal_sender_timeout() / 4;
  }
  window_.emplace(options_.read_coalesce, conn->unix_socket(), clock_->Now(),
                  options_.stream_name);
  bool after_window = false;  // This turn's read followed a read window.
  ReplicationLogger()->info(
      "stream {}: streaming slot {} from {} (status every {}, read window {})",
      options_.stream_name, options_.slot_name, start.ToString(), absl::FormatDuration(interval),
      window_->Describe());
  sink_->OnConnected(start);

  absl::Time next_status = clock_->Now();
  // When something last arrived (or the loop last stopped reading: silence is
  // judged only while it reads). Zero silence_limit: no bound.
  absl::Time last_heard = clock_->Now();
  const absl::Duration silence_limit = conn->wal_sender_timeout();
  // A check on another connection that found the walsender still holding the
  // slot counts as hearing from it (pg/walsender_watch.h): it is busy, not gone.
  uint64_t alive_seen = 0;
  bool busy_logged = false;  // This silent spell was logged.
  // A reply request not answered yet. An idle walsender answers one within
  // milliseconds, so the check over a second connection (a backend start each
  // time) is asked for only when a request goes unanswered for probe_grace:
  // asked with every probe, it ran on every idle stream every two intervals,
  // and its confirmation, often read before the answer, was logged as a busy
  // walsender. Never later than three quarters of the silence limit, though:
  // a probe goes out on the status cadence, up to two intervals into a
  // silence, and the check must have time to finish before the limit.
  absl::Time unanswered_since = absl::InfiniteFuture();
  const absl::Duration probe_grace = interval / 2;
  const auto check_due = [&] {
    return std::max(unanswered_since, std::min(unanswered_since + probe_grace,
                                               last_heard + silence_limit * 3 / 4));
  };
  for (;;) {
    if (stop_.load()) {
      // The last store gets a moment, so what was acked before the stop is
      // confirmed now rather than re-sent to the next process.
      RequestPersist(clock_->Now());
      persister_->AwaitIdle(kFinalStoreWait);
      (void)SendStatusUpdate(*conn);
      absl::Status finished = conn->Finish(absl::Seconds(2));
      ReplicationLogger()->info("stream {}: replication connection closed ({})",
                                options_.stream_name,
                                finished.ok() ? "clean" : finished.ToString());
      return absl::OkStatus();
    }
    bool reply_now = false;
    bool room = sink_->HasRoom();
    // Read until nothing is buffered: libpq takes at most its buffer's free space
    // (8-16 kB) per read, so while a read brought whole messages the socket is read
    // again, up to kMaxDrainFrames so that status updates stay on time.
    int frames = 0;
    int frames_since_read = 0;
    size_t bytes_since_read = 0;
    size_t turn_bytes = 0;
    bool caught_up = false;  // The socket had nothing more, or little (below).
    // What a frame's arrival is stamped with (stats_.last_data_at): one clock
    // read per turn, not per frame, which a turn's length makes no coarser to
    // an operator's "is it moving?".
    turn_started_ = clock_->Now();
    turn_begin_lag_.reset();
    while (room) {
      WALFEED_ASSIGN_OR_RETURN(std::optional<CopyFrame> frame, conn->TryRead());
      if (!frame) {
        // A read that brought little found the socket all but drained: with a
        // read window the rest waits for it. Reading again at once would take
        // the walsender's messages as they trickle in, a few per read, and
        // every such read has the kernel acknowledge them at once, so the
        // walsender's sends never coalesce: on W1 it then sent one TCP
        // segment per message, and the loopback path of each segment,
        // charged to the walsender, made it the costliest part of the drain.
        caught_up = frames_since_read == 0 ||
                    (window_->length() > absl::ZeroDuration() &&
                     bytes_since_read < kSmallRead);
        if (caught_up) break;
        WALFEED_RETURN_IF_ERROR(conn->ConsumeInput());
        frames_since_read = 0;
        bytes_since_read = 0;
        continue;
      }
      ++frames;
      ++frames_since_read;
      bytes_since_read += frame->bytes().size();
      turn_bytes += frame->bytes().size();
      last_session_streamed_ = true;
      WALFEED_RETURN_IF_ERROR(HandleFrame(frame->bytes(), &reply_now));
      room = sink_->HasRoom();
      // libpq's buffer only grows (to the largest message seen), so one read may
      // hold many frames: the bound applies inside a read too.
      if (frames >= kMaxDrainFrames) break;
    }
    PublishCounts();
    sink_->OnDrained();
    const absl::Time now = clock_->Now();
    if (frames > 0 || !room) {
      last_heard = now;
      busy_logged = false;
      unanswered_since = absl::InfiniteFuture();
    }
    if (const uint64_t alive = conn->alive_confirmations(); alive != alive_seen) {
      alive_seen = alive;
      if (!busy_logged && now - last_heard >= interval) {
        busy_logged = true;
        ReplicationLogger()->info(
            "stream {}: no message from PostgreSQL for {}, but its walsender still holds "
            "slot {}: it is busy (for example writing a large transaction's changes to disk); "
            "waiting for it",
            options_.stream_name,
            absl::FormatDuration(absl::Trunc(now - last_heard, absl::Milliseconds(1))),
            options_.slot_name);
      }
      last_heard = now;
    }
    if (silence_limit > absl::ZeroDuration() && now - last_heard >= silence_limit) {
      const std::string check = conn->alive_check_failure();
      return absl::UnavailableError(absl::StrCat(
          "no message from PostgreSQL for ",
          absl::FormatDuration(absl::Trunc(now - last_heard, absl::Milliseconds(1))),
          " although it answers a reply request at once (wal_sender_timeout ",
          absl::FormatDuration(silence_limit),
          "): the connection is presumed dead (network or host unreachable)",
          check.empty() ? "" : "; a second connection could not confirm its walsender: ",
          check));
    }
    // Storing is asked for on the status cadence (or a reply request), as the
    // update that would carry it goes out; a store that finished since the last
    // update is confirmed at once, without waiting for the next tick.
    const bool due = reply_now || now >= next_status;
    if (due) RequestPersist(now);
    if (!room) {
      // Not reading, it cannot see a shutdown's wait (see HandleFrame): the
      // store's connection tells instead, on the status cadence.
      if (due) persister_->RequestPing();
      WALFEED_RETURN_IF_ERROR(CheckStore(/*full=*/true));
    }
    if (due || persister_->durable() > durable_) {
      // Silent for a status interval: ask the walsender to answer.
      const bool probe = silence_limit > absl::ZeroDuration() && now - last_heard >= interval;
      WALFEED_RETURN_IF_ERROR(SendStatusUpdate(*conn, probe));
      if (probe) unanswered_since = std::min(unanswered_since, now);
      last_status_replied_ = reply_now;
      next_status = now + interval;
    }
    if (room && now >= check_due()) {
      conn->RequestAliveCheck();
      unanswered_since = absl::InfiniteFuture();  // The next probe may ask again.
    }
    // Coalescing (ReaderOptions::read_coalesce): after a turn that brought data
    // and emptied the socket, the socket is not polled for input for a moment; it
    // is read after it. A turn cut short by kMaxDrainFrames may have left whole
    // frames in libpq's buffer, which poll() cannot see: no waiting then.
    // Unset, the window is waited only at a high frame rate, or while a
    // backlog is read over TCP; set, always (read_window.h).
    window_->AfterTurn(now, frames, turn_bytes, after_window, turn_begin_lag_);
    const bool coalesce = frames > 0 && caught_up && room && !reply_now && window_->applies() &&
                          window_->length() > absl::ZeroDuration();
    after_window = coalesce;
    const bool more_buffered = room && frames >= kMaxDrainFrames;
    absl::Time deadline = more_buffered ? now
                          : coalesce    ? std::min(next_status, now + window_->length())
                                        : next_status;
    if (silence_limit > absl::ZeroDuration() && room) {
      deadline = std::min({deadline, last_heard + silence_limit, check_due()});
    }
    WALFEED_ASSIGN_OR_RETURN(Readiness ready, conn->Wait(room && !coalesce, deadline, wake_fd_));
    if (ready.woken) DrainWakeFd();
    if (coalesce || ready.input) WALFEED_RETURN_IF_ERROR(conn->ConsumeInput());
    if (ready.output) WALFEED_RETURN_IF_ERROR(conn->FlushOutput());
  }
}

absl::Status StreamReader::HandleFrame(absl::Span<const uint8_t> frame, bool* reply_now) {
  WALFEED_ASSIGN_OR_RETURN(copy_data::ServerMessage message, copy_data::Decode(frame));
  if (const auto* keepalive = absl::get_if<copy_data::PrimaryKeepalive>(&message)) {
    tracker_->OnKeepalive(keepalive->wal_end);
    ++pending_.frames;
    ++pending_.keepalives;
    pending_.server_wal_end = std::max(pending_.server_wal_end, keepalive->wal_end);
    if (keepalive->reply_requested) {
      *reply_now = true;
      // Early: soon after our answer to the previous request. Anything else
      // (a timeout ping, a request after a periodic update) breaks the chain.
      const bool early =
          last_status_replied_ && clock_->Now() - last_status_sent_ < ping_floor_;
      if (!early) {
        quick_requests_ = 0;
      } else if (++quick_requests_ >= kShutdownQuickRequests) {
        return absl::UnavailableError(absl::StrCat(
            "PostgreSQL asked ", quick_requests_,
            " times in a row, each time right after walfeed's reply, for "
            "confirmation of everything it sent (up to ",
            keepalive->wal_end.ToString(),
            "): it is shutting down and waits for a position walfeed cannot confirm "
            "until it is acked and stored; closing the connection so the shutdown can "
            "finish"));
      }
    }
    return absl::OkStatus();
  }
  const auto& data = absl::get<copy_data::XLogData>(message);
  quick_requests_ = 0;  // A walsender still sending data is not in its shutdown wait.
  pgoutput::DecodeOptions decode_options;  // Protocol 1, streaming off.
  WALFEED_ASSIGN_OR_RETURN(pgoutput::Message decoded,
                           pgoutput::Decode(data.payload, decode_options));
  if (const auto* begin = absl::get_if<pgoutput::Begin>(&decoded)) {
    // Both from the frame, which is untrusted: Duration arithmetic saturates.
    turn_begin_lag_ = absl::Microseconds(data.send_time) - absl::Microseconds(begin->commit_time);
  }
  outputs_.clear();
  WALFEED_RETURN_IF_ERROR(assembler_.Process(std::move(decoded), &outputs_));
  for (TransactionAssembler::Output& output : outputs_) {
    WALFEED_RETURN_IF_ERROR(Dispatch(std::move(output)));
  }
  ++pending_.frames;
  pending_.wal_bytes += data.payload.size();
  pending_.data = true;
  return absl::OkStatus();
}

absl::Status StreamReader::Dispatch(TransactionAssembler::Output output) {
  WALFEED_ASSIGN_OR_RETURN(DeliveryGate::Verdict verdict, gate_.Admit(output));
  if (verdict.track) WALFEED_RETURN_IF_ERROR(TrackOutput(*tracker_, output));
  // Counted here, published below before the sink sees the output (whoever it
  // wakes reads the counts); server_wal_end moves past a commit only after the
  // sink has its events.
  if (verdict.deliver) {
    if (absl::holds_alternative<ChangeEvent>(output)) ++pending_.events;
    if (const auto* committed = absl::get_if<TransactionCommitted>(&output)) {
      ++pending_.transactions;
      pending_.server_wal_end = std::max(pending_.server_wal_end, committed->end_lsn);
    }
  }
  if (!verdict.deliver) return absl::OkStatus();
  PublishCounts();
  if (auto* event = absl::get_if<ChangeEvent>(&output)) {
    sink_->OnEvent(std::move(*event));
  } else if (const auto* committed = absl::get_if<TransactionCommitted>(&output)) {
    sink_->OnCommit(*committed);
  }
  return absl::OkStatus();
}

absl::Status StreamReader::CheckStore(bool full) {
  std::optional<absl::Status> failed = persister_->TakeError();
  if (!failed) return absl::OkStatus();
  // While full (not reading), a store whose session a shutdown ended (57P01,
  // 57P02) or which refuses new ones while shutting down (57P03) says that the
  // walsender now waits for walfeed to confirm everything it sent, which
  // walfeed may not do (unacked): closing the connection lets the shutdown end.
  // (A checkpoint store on another cluster that restarts costs a re-read from
  // the slot, nothing more.) While reading, the walsender's own messages tell.
  const std::string sqlstate = SqlStateOf(*failed);
  if (full && (sqlstate == "57P01" || sqlstate == "57P02" || sqlstate == "57P03")) {
    return absl::UnavailableError(absl::StrCat(
        "PostgreSQL is shutting down (", failed->message(),
        "); closing the replication connection so its shutdown can finish"));
  }
  // The older durable position keeps being confirmed; the next request retries.
  ReplicationLogger()->warn("stream {}: checkpoint store (the confirmed position stays at {}): {}",
                            options_.stream_name, durable_.ToString(), failed->ToString());
  return absl::OkStatus();
}

void StreamReader::RequestPersist(absl::Time now) {
  const Lsn confirmable = tracker_->Confirmable();
  if (confirmable > durable_ && now - last_persist_ >= options_.min_persist_interval) {
    last_persist_ = now;
    persister_->Request(confirmable);
  }
}

absl::Status StreamReader::SendStatusUpdate(ReplicationConnection& conn, bool request_reply) {
  durable_ = std::max(durable_, persister_->durable());
  WALFEED_RETURN_IF_ERROR(CheckStore(/*full=*/false));
  copy_data::StandbyStatusUpdate update;
  Lsn received;
  {
    absl::MutexLock lock(&stats_mu_);
    received = stats_.server_wal_end;
  }
  update.write = std::max(received, durable_);
  update.flush = durable_;
  update.apply = durable_;
  update.client_time = copy_data::ToPostgresMicros(clock_->Now());
  update.reply_requested = request_reply;
  const auto bytes = copy_data::Encode(update);
  WALFEED_RETURN_IF_ERROR(conn.Send(bytes));
  last_status_sent_ = clock_->Now();
  absl::MutexLock lock(&stats_mu_);
  ++stats_.status_updates;
  stats_.confirmed_sent = durable_;
  stats_.last_status_update_at = last_status_sent_;
  return absl::OkStatus();
}

}  // namespace walfeed::replication::pg
