#include "replication/pg/stream_reader.h"

#include <poll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "replication/copy_data.h"
#include "replication/pg/slot_guard.h"
#include "replication/pgoutput.h"
#include "replication/retry.h"
#include "replication/status_macros.h"
#include "spdlog/spdlog.h"

namespace walfeed::replication::pg {
namespace {

// poll() timeout for `deadline`, rounded up so the loop never spins on a deadline
// that is a fraction of a millisecond away.
int PollTimeoutMs(absl::Time now, absl::Time deadline) {
  if (deadline <= now) return 0;
  return static_cast<int>(std::min<int64_t>(
      absl::ToInt64Milliseconds(absl::Ceil(deadline - now, absl::Milliseconds(1))),
      60 * 1000));
}

std::shared_ptr<spdlog::logger> Logger() {
  static std::shared_ptr<spdlog::logger> logger = [] {
    std::shared_ptr<spdlog::logger> existing = spdlog::get("replication");
    return existing ? existing : spdlog::default_logger()->clone("replication");
  }();
  return logger;
}

}  // namespace

StreamReader::StreamReader(ReaderOptions options, AckTracker* tracker, StreamSink* sink,
                           ConfirmedLsnStore* store)
    : options_(std::move(options)),
      tracker_(tracker),
      sink_(sink),
      store_(store),
      wake_fd_(eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC)) {
  assembler_.set_excluded_schema(options_.excluded_schema);
}

StreamReader::~StreamReader() {
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
  const absl::Time now = absl::Now();
  poll(&fd, 1, PollTimeoutMs(now, now + timeout));
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

absl::Status StreamReader::Run(Lsn start) {
  if (wake_fd_ < 0) return absl::InternalError("eventfd() failed");
  durable_ = start;
  Backoff backoff(options_.backoff_base, options_.backoff_cap, options_.backoff_seed);
  while (!stop_.load()) {
    absl::Status status = RunSession(durable_);
    // A session that ended with an error skipped the OnDrained of its last turn:
    // what it handed over must not wait for the next session.
    sink_->OnDrained();
    if (stop_.load()) return absl::OkStatus();
    if (!IsTransient(status)) {
      Logger()->error("stream {}: stopped: {}", options_.stream_name, status.ToString());
      return status;
    }
    const absl::Duration delay = backoff.Next();
    Logger()->warn("stream {}: {}; reconnecting from {} in {}", options_.stream_name,
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
  WALFEED_ASSIGN_OR_RETURN(std::unique_ptr<ReplicationConnection> conn,
                           ReplicationConnection::Connect(options_.conninfo));
  SlotCheck check{options_.stream_name, options_.slot_name, options_.excluded_schema, 0, {}};
  if (options_.expected_slot) {
    WALFEED_ASSIGN_OR_RETURN(check.system_identifier, ReadSystemIdentifier(conn->pg()));
    WALFEED_ASSIGN_OR_RETURN(check.slot, ReadSlot(conn->pg(), options_.slot_name));
    WALFEED_RETURN_IF_ERROR(CheckResume(check, *options_.expected_slot, start));
  }
  StartOptions start_options;
  start_options.slot_name = options_.slot_name;
  start_options.start_lsn = start;
  start_options.publication_names = options_.publication_names;
  if (absl::Status started = conn->Start(start_options); !started.ok()) {
    return ExplainStartFailure(started, check, start);
  }
  assembler_.Reset(start);
  skipping_ = false;
  last_status_sent_ = absl::InfinitePast();
  last_status_replied_ = false;
  quick_requests_ = 0;

  absl::Duration interval = options_.max_feedback_interval;
  ping_floor_ = absl::InfiniteDuration();  // Timeout 0: the walsender never pings.
  if (conn->wal_sender_timeout() > absl::ZeroDuration()) {
    interval = std::min(interval, conn->wal_sender_timeout() / 2);
    ping_floor_ = conn->wal_sender_timeout() / 4;
  }
  Logger()->info("stream {}: streaming slot {} from {} (status every {})",
                 options_.stream_name, options_.slot_name, start.ToString(),
                 absl::FormatDuration(interval));
  sink_->OnConnected(start);

  absl::Time next_status = absl::Now();
  for (;;) {
    if (stop_.load()) {
      (void)SendStatusUpdate(*conn);
      absl::Status finished = conn->Finish();
      Logger()->info("stream {}: replication connection closed ({})", options_.stream_name,
                     finished.ok() ? "clean" : finished.ToString());
      return absl::OkStatus();
    }
    bool reply_now = false;
    bool room = sink_->HasRoom();
    // Read until the socket is empty: libpq takes at most its buffer's free space
    // (8-16 kB) per read, so while a read brought whole messages the socket is read
    // again, up to kMaxDrainFrames so that status updates stay on time.
    int frames = 0;
    int frames_since_read = 0;
    bool caught_up = false;  // The socket had nothing more.
    while (room) {
      WALFEED_ASSIGN_OR_RETURN(std::optional<Frame> frame, conn->TryRead());
      if (!frame) {
        caught_up = frames_since_read == 0;
        if (caught_up) break;
        WALFEED_RETURN_IF_ERROR(conn->ConsumeInput());
        frames_since_read = 0;
        continue;
      }
      ++frames;
      ++frames_since_read;
      last_session_streamed_ = true;
      WALFEED_RETURN_IF_ERROR(HandleFrame(frame->bytes(), &reply_now));
      room = sink_->HasRoom();
      // libpq's buffer only grows (to the largest message seen), so one read may
      // hold many frames: the bound applies inside a read too.
      if (frames >= kMaxDrainFrames) break;
    }
    sink_->OnDrained();
    absl::Time now = absl::Now();
    if (reply_now || now >= next_status) {
      WALFEED_RETURN_IF_ERROR(SendStatusUpdate(*conn));
      last_status_replied_ = reply_now;
      next_status = now + interval;
    }
    // Coalescing (ReaderOptions::read_coalesce): after a turn that brought data
    // and emptied the socket, the socket is not polled for input for a moment; it
    // is read after it. A turn cut short by kMaxDrainFrames may have left whole
    // frames in libpq's buffer, which poll() cannot see: no waiting then.
    const bool coalesce = frames > 0 && caught_up && room && !reply_now &&
                          options_.read_coalesce > absl::ZeroDuration();
    const bool more_buffered = room && frames >= kMaxDrainFrames;
    pollfd fds[2] = {
        {conn->socket(),
         static_cast<short>((room && !coalesce ? POLLIN : 0) |
                            (conn->HasPendingOutput() ? POLLOUT : 0)),
         0},
        {wake_fd_, POLLIN, 0}};
    const absl::Time deadline =
        more_buffered ? now
        : coalesce    ? std::min(next_status, now + options_.read_coalesce)
                      : next_status;
    const int ready = poll(fds, 2, PollTimeoutMs(now, deadline));
    if (ready < 0 && errno != EINTR) {
      return absl::InternalError(absl::StrCat("poll() failed: ", strerror(errno)));
    }
    if (fds[1].revents != 0) DrainWakeFd();
    if (coalesce || (fds[0].revents & (POLLIN | POLLERR | POLLHUP)) != 0) {
      WALFEED_RETURN_IF_ERROR(conn->ConsumeInput());
    }
    if ((fds[0].revents & POLLOUT) != 0) WALFEED_RETURN_IF_ERROR(conn->FlushOutput());
  }
}

absl::Status StreamReader::HandleFrame(absl::Span<const uint8_t> frame, bool* reply_now) {
  WALFEED_ASSIGN_OR_RETURN(copy_data::ServerMessage message, copy_data::Decode(frame));
  if (const auto* keepalive = absl::get_if<copy_data::PrimaryKeepalive>(&message)) {
    tracker_->OnKeepalive(keepalive->wal_end);
    absl::MutexLock lock(&stats_mu_);
    ++stats_.frames;
    ++stats_.keepalives;
    stats_.server_wal_end = std::max(stats_.server_wal_end, keepalive->wal_end);
    if (keepalive->reply_requested) {
      *reply_now = true;
      // Early: soon after our answer to the previous request. Anything else
      // (a timeout ping, a request after a periodic update) breaks the chain.
      const bool early = last_status_replied_ && absl::Now() - last_status_sent_ < ping_floor_;
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
  outputs_.clear();
  WALFEED_RETURN_IF_ERROR(assembler_.Process(std::move(decoded), &outputs_));
  for (TransactionAssembler::Output& output : outputs_) {
    WALFEED_RETURN_IF_ERROR(Dispatch(std::move(output)));
  }
  absl::MutexLock lock(&stats_mu_);
  ++stats_.frames;
  return absl::OkStatus();
}

absl::Status StreamReader::Dispatch(TransactionAssembler::Output output) {
  if (auto* begun = absl::get_if<TransactionBegun>(&output)) {
    if (begun->commit_lsn <= last_committed_) {
      skipping_ = true;  // Delivered whole before a reconnect: PostgreSQL re-sent it.
      return absl::OkStatus();
    }
    if (open_) {
      if (open_->commit_lsn == begun->commit_lsn) return absl::OkStatus();  // Resumed.
      return absl::DataLossError(absl::StrCat(
          "transaction ", open_->commit_lsn.ToString(),
          " was partly delivered before a reconnect but PostgreSQL sent ",
          begun->commit_lsn.ToString(), " instead of re-sending it"));
    }
    WALFEED_RETURN_IF_ERROR(tracker_->OnBegin(begun->commit_lsn));
    open_ = OpenTransaction{begun->commit_lsn, 0};
    return absl::OkStatus();
  }
  if (auto* event = absl::get_if<ChangeEvent>(&output)) {
    if (skipping_ || (open_ && event->id.index < open_->delivered)) {
      absl::MutexLock lock(&stats_mu_);
      ++stats_.redelivered_dropped;
      return absl::OkStatus();
    }
    if (!open_ || open_->commit_lsn != event->id.commit_lsn) {
      return absl::DataLossError(
          absl::StrCat("event ", event->id.ToString(), " outside its transaction"));
    }
    WALFEED_RETURN_IF_ERROR(tracker_->OnEvent(event->id));
    ++open_->delivered;
    if (event->id <= options_.deliver_after) {
      absl::MutexLock lock(&stats_mu_);
      ++stats_.below_checkpoint;
      return absl::OkStatus();
    }
    {
      // Counted before the sink sees it, so whoever the sink wakes reads the count.
      absl::MutexLock lock(&stats_mu_);
      ++stats_.events;
    }
    sink_->OnEvent(std::move(*event));
    return absl::OkStatus();
  }
  if (auto* committed = absl::get_if<TransactionCommitted>(&output)) {
    if (skipping_) {
      skipping_ = false;
      return absl::OkStatus();
    }
    WALFEED_RETURN_IF_ERROR(tracker_->OnCommit(committed->commit_lsn, committed->end_lsn,
                                               committed->event_count));
    last_committed_ = committed->commit_lsn;
    open_.reset();
    {
      absl::MutexLock lock(&stats_mu_);
      ++stats_.transactions;
      stats_.server_wal_end = std::max(stats_.server_wal_end, committed->end_lsn);
    }
    sink_->OnCommit(*committed);
    return absl::OkStatus();
  }
  // A non-transactional logical message: no commit LSN to anchor an id, and it may
  // belong to a transaction that later aborted. Not delivered; counted.
  absl::MutexLock lock(&stats_mu_);
  ++stats_.non_transactional_messages;
  return absl::OkStatus();
}

absl::Status StreamReader::SendStatusUpdate(ReplicationConnection& conn) {
  const Lsn confirmable = tracker_->Confirmable();
  const absl::Time now = absl::Now();
  if (confirmable > durable_ && now - last_persist_ >= options_.min_persist_interval) {
    last_persist_ = now;
    absl::Status persisted = store_->PersistConfirmed(confirmable);
    if (persisted.ok()) {
      durable_ = confirmable;
    } else {
      // Keep confirming the older durable position; the next update retries.
      Logger()->warn("stream {}: could not store confirmed position {}: {}",
                     options_.stream_name, confirmable.ToString(), persisted.ToString());
    }
  }
  copy_data::StandbyStatusUpdate update;
  Lsn received;
  {
    absl::MutexLock lock(&stats_mu_);
    received = stats_.server_wal_end;
  }
  update.write = std::max(received, durable_);
  update.flush = durable_;
  update.apply = durable_;
  update.client_time = copy_data::ToPostgresMicros(now);
  const auto bytes = copy_data::Encode(update);
  WALFEED_RETURN_IF_ERROR(conn.Send(bytes));
  last_status_sent_ = absl::Now();
  absl::MutexLock lock(&stats_mu_);
  ++stats_.status_updates;
  stats_.confirmed_sent = durable_;
  return absl::OkStatus();
}

}  // namespace walfeed::replication::pg
