// Crash semantics of a walfeed stream against a real PostgreSQL 15, through the
// production start-up path (PrepareStream, stored consumer checkpoints, a reader
// that stores before it confirms), with walfeed in a child process
// (crash_child.cc) that is killed with SIGKILL at chosen moments.
//
// What it proves:
// * AckPositionTest: for each row of postgres-replication.md §4.2's table (the
//   consumer acked T1 whole / T2 in part / T2 whole), a restarted walfeed delivers
//   exactly the events after the consumer's ack, with the ids and values of their
//   first delivery, never anything at or below it, whether it was killed after the
//   slot had confirmed the ack, right after the ack became durable, before any of
//   the ack was confirmed (only the stored consumer checkpoint remembers it), or
//   stopped cleanly: all four endings give the same result.
// * PgRestartTest: PostgreSQL stopped (fast or immediate) and started again while
//   transactions are being written. The shutdown is not held up by walfeed; the
//   reader reconnects by itself from walfeed's stored position, not from the
//   slot's confirmed_flush_lsn (which PostgreSQL 15 can lose on restart, §4.4);
//   every committed row arrives exactly once; and a walfeed process killed
//   afterwards resumes exactly after its consumer's ack.
// * FastShutdownTest: a fast shutdown finishes while walfeed is connected even in
//   the best case (every event acked and confirmed), and a new walfeed resumes
//   after the ack.
//
// Nothing sleeps: lines from the child are awaited with deadlines, and server
// state (slot positions, stored checkpoints) is polled with WaitUntil.
#include <fcntl.h>
#include <libpq-fe.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <deque>
#include <fstream>
#include <functional>
#include <iostream>
#include <memory>
#include <optional>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "replication/event_id.h"
#include "replication/lsn.h"
#include "tests/testing/pg_cluster.h"
#include "tests/testing/status_matchers.h"
#include "tests/testing/wait.h"

extern char** environ;

namespace walfeed::replication::pg {
namespace {

using ::testing::ElementsAreArray;
using ::walfeed::testing::IsOk;
using ::walfeed::testing::PgCluster;
using ::walfeed::testing::WaitUntil;

constexpr absl::Duration kDeadline = absl::Seconds(30);
constexpr char kStream[] = "orders";
constexpr char kSlot[] = "s";
constexpr char kConsumer[] = "c";

// ---------------------------------------------------------------------------
// A child process with its stdin and stdout on pipes. The destructor kills and
// reaps it, so no child survives a failed assertion.
class ChildProcess {
 public:
  static absl::StatusOr<std::unique_ptr<ChildProcess>> Spawn(const std::vector<std::string>& argv,
                                                             const std::string& stderr_path) {
    // Writing a command to a child that was just killed must be an error to
    // report, not a SIGPIPE that ends the whole test binary.
    signal(SIGPIPE, SIG_IGN);
    int to_child[2];
    int from_child[2];
    // O_CLOEXEC: no other process spawned by this test (pg_ctl, another child)
    // may hold a pipe end, or EOF would never arrive.
    if (pipe2(to_child, O_CLOEXEC) != 0) return absl::InternalError("pipe2 failed");
    if (pipe2(from_child, O_CLOEXEC) != 0) {
      close(to_child[0]);
      close(to_child[1]);
      return absl::InternalError("pipe2 failed");
    }
    posix_spawn_file_actions_t actions;
    posix_spawn_file_actions_init(&actions);
    posix_spawn_file_actions_adddup2(&actions, to_child[0], STDIN_FILENO);
    posix_spawn_file_actions_adddup2(&actions, from_child[1], STDOUT_FILENO);
    posix_spawn_file_actions_addopen(&actions, STDERR_FILENO, stderr_path.c_str(),
                                     O_WRONLY | O_CREAT | O_APPEND, 0644);
    std::vector<std::string> copy = argv;
    std::vector<char*> args;
    for (std::string& arg : copy) args.push_back(arg.data());
    args.push_back(nullptr);
    pid_t pid = -1;
    const int rc = posix_spawn(&pid, args[0], &actions, nullptr, args.data(), environ);
    posix_spawn_file_actions_destroy(&actions);
    close(to_child[0]);
    close(from_child[1]);
    if (rc != 0) {
      close(to_child[1]);
      close(from_child[0]);
      return absl::InternalError(absl::StrCat("posix_spawn ", argv[0], ": ", strerror(rc)));
    }
    return std::unique_ptr<ChildProcess>(new ChildProcess(pid, to_child[1], from_child[0]));
  }

  ~ChildProcess() {
    Kill();
    close(stdin_fd_);
    if (drain_.joinable()) drain_.join();  // EOF: the child is gone.
    close(stdout_fd_);
  }

  ChildProcess(const ChildProcess&) = delete;
  ChildProcess& operator=(const ChildProcess&) = delete;

  absl::Status WriteLine(absl::string_view line) {
    std::string text = absl::StrCat(line, "\n");
    size_t done = 0;
    while (done < text.size()) {
      const ssize_t n = write(stdin_fd_, text.data() + done, text.size() - done);
      if (n < 0 && errno == EINTR) continue;
      if (n < 0) return absl::UnavailableError(absl::StrCat("write: ", strerror(errno)));
      done += static_cast<size_t>(n);
    }
    return absl::OkStatus();
  }

  // The next line the child printed: DeadlineExceeded after `timeout`, OutOfRange
  // once its stdout is closed and every line was read.
  absl::StatusOr<std::string> ReadLine(absl::Duration timeout) {
    absl::MutexLock lock(&mu_);
    auto ready = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return !lines_.empty() || eof_; };
    if (!mu_.AwaitWithTimeout(absl::Condition(&ready), timeout)) {
      return absl::DeadlineExceededError(
          absl::StrCat("no line from the child within ", absl::FormatDuration(timeout)));
    }
    if (lines_.empty()) return absl::OutOfRangeError("the child closed its stdout");
    std::string line = std::move(lines_.front());
    lines_.pop_front();
    return line;
  }

  // SIGKILL: the process gets no chance to flush, confirm or close anything.
  void Kill() {
    if (reaped_) return;
    kill(pid_, SIGKILL);
    Reap(0);
  }

  // Waits for the child to exit by itself; its exit code.
  absl::StatusOr<int> WaitForExit(absl::Duration timeout) {
    if (!reaped_ && !WaitUntil([&] { return Reap(WNOHANG); }, timeout)) {
      return absl::DeadlineExceededError("the child did not exit");
    }
    if (!WIFEXITED(wait_status_)) return absl::InternalError("the child was killed");
    return WEXITSTATUS(wait_status_);
  }

 private:
  ChildProcess(pid_t pid, int stdin_fd, int stdout_fd)
      : pid_(pid), stdin_fd_(stdin_fd), stdout_fd_(stdout_fd) {
    // The child's stdout is drained all the time, not only while the test waits
    // for a line: a full pipe would stall the reader thread inside the child (it
    // prints from there), and the test would then observe a stalled walfeed, for
    // instance across a PostgreSQL restart, instead of a running one.
    drain_ = std::thread([this] { Drain(); });
  }

  // True once reaped.
  bool Reap(int flags) {
    if (reaped_) return true;
    for (;;) {
      const pid_t r = waitpid(pid_, &wait_status_, flags);
      if (r == pid_) {
        reaped_ = true;
        return true;
      }
      if (r < 0 && errno == EINTR) continue;
      return false;
    }
  }

  void Drain() {
    char buffer[4096];
    std::string partial;
    for (;;) {
      const ssize_t n = read(stdout_fd_, buffer, sizeof(buffer));
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) break;
      partial.append(buffer, static_cast<size_t>(n));
      std::vector<std::string> complete;
      size_t newline;
      while ((newline = partial.find('\n')) != std::string::npos) {
        complete.push_back(partial.substr(0, newline));
        partial.erase(0, newline + 1);
      }
      absl::MutexLock lock(&mu_);
      for (std::string& line : complete) lines_.push_back(std::move(line));
    }
    absl::MutexLock lock(&mu_);
    eof_ = true;
  }

  const pid_t pid_;
  const int stdin_fd_;
  const int stdout_fd_;
  bool reaped_ = false;
  int wait_status_ = 0;
  std::thread drain_;
  absl::Mutex mu_;
  std::deque<std::string> lines_ ABSL_GUARDED_BY(mu_);
  bool eof_ ABSL_GUARDED_BY(mu_) = false;
};

// ---------------------------------------------------------------------------
// crash_child's protocol (see crash_child.cc), parsed.

struct Ready {
  Lsn start;
  EventId deliver_after;
  std::string checkpoint;  // An id, or "none".
  bool bind = false;
};

struct Event {
  EventId id;
  std::string line;  // "event <id> <OP> <columns>": compared whole, ids and values.
};

struct Commit {
  Lsn commit_lsn;
  Lsn end_lsn;
  uint32_t event_count = 0;
};

struct ChildStats {
  uint64_t events = 0;
  uint64_t below_checkpoint = 0;
  uint64_t redelivered_dropped = 0;
  uint64_t reconnects = 0;
  uint64_t keepalives = 0;
  uint64_t status_updates = 0;
  Lsn confirmed_sent;
};

std::string ReadFileText(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

class StreamChild {
 public:
  struct Flags {
    std::string conninfo;
    int feedback_ms = 200;
    // What the database was doing, appended to failure messages: a child that
    // never gets ready is most often waiting inside PostgreSQL.
    std::function<std::string()> server_state;
  };

  // Spawns crash_child and waits for its "ready" line (PrepareStream done).
  static absl::StatusOr<std::unique_ptr<StreamChild>> Start(const Flags& flags,
                                                            const std::string& log_path) {
    std::vector<std::string> argv = {
        WALFEED_CRASH_CHILD,
        absl::StrCat("--conninfo=", flags.conninfo),
        absl::StrCat("--stream=", kStream),
        absl::StrCat("--slot=", kSlot),
        "--publication=pub",
        "--table=public.t",
        absl::StrCat("--consumer=", kConsumer),
        absl::StrCat("--feedback_ms=", flags.feedback_ms),
        "--backoff_ms=50",
        "--backoff_cap_ms=500",
    };
    absl::StatusOr<std::unique_ptr<ChildProcess>> process = ChildProcess::Spawn(argv, log_path);
    if (!process.ok()) return process.status();
    std::unique_ptr<StreamChild> child(
        new StreamChild(std::move(*process), log_path, flags.server_state));
    if (absl::Status ready = child->ReadUntil([&] { return child->ready_.has_value(); });
        !ready.ok()) {
      return ready;
    }
    return child;
  }

  const Ready& ready() const { return *ready_; }
  const std::vector<Event>& events() const { return events_; }
  const std::vector<Commit>& commits() const { return commits_; }
  const std::vector<Lsn>& connected() const { return connected_; }
  // events().size() at each "disconnected" line: what was delivered before.
  const std::vector<size_t>& disconnect_marks() const { return disconnect_marks_; }

  // Reads lines until `done()` holds. Errors: the deadline, the child's end of
  // output, or a fatal/exited line (walfeed stopped by itself).
  absl::Status ReadUntil(const std::function<bool()>& done, absl::Duration timeout = kDeadline) {
    const absl::Time deadline = absl::Now() + timeout;
    while (!done()) {
      absl::StatusOr<std::string> line = process_->ReadLine(deadline - absl::Now());
      if (!line.ok()) return Annotate(line.status());
      if (absl::Status handled = Handle(*line); !handled.ok()) return Annotate(handled);
    }
    return absl::OkStatus();
  }

  absl::Status ReadUntilCommit(Lsn commit_lsn) {
    return ReadUntil([&] {
      for (const Commit& commit : commits_) {
        if (commit.commit_lsn == commit_lsn) return true;
      }
      return false;
    });
  }

  // Ack in the server's order: durable in the checkpoint store, then the tracker.
  absl::Status Ack(EventId id) {
    absl::StatusOr<std::string> reply = Command(absl::StrCat("ack ", id.ToString()));
    if (!reply.ok()) return reply.status();
    if (*reply != absl::StrCat("acked ", id.ToString())) {
      return Annotate(absl::InternalError(absl::StrCat("ack refused: ", *reply)));
    }
    return absl::OkStatus();
  }

  absl::StatusOr<ChildStats> Stats() {
    absl::StatusOr<std::string> reply = Command("stats");
    if (!reply.ok()) return reply.status();
    ChildStats stats;
    for (absl::string_view field : absl::StrSplit(*reply, ' ')) {
      std::pair<absl::string_view, absl::string_view> kv = absl::StrSplit(field, '=');
      if (kv.first == "confirmed_sent") {
        stats.confirmed_sent = Lsn::Parse(kv.second).value_or(Lsn::kInvalid);
      }
      uint64_t value = 0;
      if (!absl::SimpleAtoi(kv.second, &value)) continue;
      if (kv.first == "events") stats.events = value;
      if (kv.first == "below_checkpoint") stats.below_checkpoint = value;
      if (kv.first == "redelivered_dropped") stats.redelivered_dropped = value;
      if (kv.first == "reconnects") stats.reconnects = value;
      if (kv.first == "keepalives") stats.keepalives = value;
      if (kv.first == "status_updates") stats.status_updates = value;
    }
    return stats;
  }

  // Stops the reader cleanly (final status update, CopyDone) and waits for the
  // process to exit with 0.
  absl::Status Stop() {
    absl::StatusOr<std::string> reply = Command("stop");
    if (!reply.ok()) return reply.status();
    if (*reply != "stopped OK") return Annotate(absl::InternalError(*reply));
    absl::StatusOr<int> code = process_->WaitForExit(kDeadline);
    if (!code.ok()) return Annotate(code.status());
    if (*code != 0) return Annotate(absl::InternalError(absl::StrCat("exit code ", *code)));
    return absl::OkStatus();
  }

  void Kill() { process_->Kill(); }

  // The last lines and walfeed's log, for failure messages.
  std::string Diagnostics() const {
    const size_t from = transcript_.size() > 20 ? transcript_.size() - 20 : 0;
    std::vector<std::string> tail(transcript_.begin() + from, transcript_.end());
    std::string log = ReadFileText(log_path_);
    if (log.size() > 4000) log = log.substr(log.size() - 4000);
    return absl::StrCat("\n--- last lines from crash_child:\n", absl::StrJoin(tail, "\n"),
                        "\n--- its stderr (", log_path_, "):\n", log,
                        server_state_ ? server_state_() : "");
  }

 private:
  StreamChild(std::unique_ptr<ChildProcess> process, std::string log_path,
              std::function<std::string()> server_state)
      : process_(std::move(process)),
        log_path_(std::move(log_path)),
        server_state_(std::move(server_state)) {}

  absl::Status Annotate(const absl::Status& status) const {
    return absl::Status(status.code(), absl::StrCat(status.message(), Diagnostics()));
  }

  // Sends a command and returns its reply, recording events that arrive first.
  absl::StatusOr<std::string> Command(absl::string_view command) {
    if (absl::Status sent = process_->WriteLine(command); !sent.ok()) return Annotate(sent);
    absl::Status replied = ReadUntil([&] { return !replies_.empty(); });
    if (!replied.ok()) return replied;
    std::string reply = std::move(replies_.front());
    replies_.pop_front();
    return reply;
  }

  absl::Status Handle(const std::string& line) {
    transcript_.push_back(line);
    std::vector<std::string> words = absl::StrSplit(line, ' ');
    const std::string& kind = words[0];
    if (kind == "event" && words.size() >= 3) {
      absl::StatusOr<EventId> id = EventId::Parse(words[1]);
      if (!id.ok()) return id.status();
      events_.push_back({*id, line});
    } else if (kind == "commit" && words.size() == 4) {
      Commit commit;
      absl::StatusOr<Lsn> commit_lsn = Lsn::Parse(words[1]);
      absl::StatusOr<Lsn> end_lsn = Lsn::Parse(words[2]);
      if (!commit_lsn.ok() || !end_lsn.ok() || !absl::SimpleAtoi(words[3], &commit.event_count)) {
        return absl::InternalError(absl::StrCat("bad line: ", line));
      }
      commit.commit_lsn = *commit_lsn;
      commit.end_lsn = *end_lsn;
      commits_.push_back(commit);
    } else if (kind == "connected" && words.size() == 2) {
      absl::StatusOr<Lsn> start = Lsn::Parse(words[1]);
      if (!start.ok()) return start.status();
      connected_.push_back(*start);
    } else if (kind == "disconnected") {
      disconnect_marks_.push_back(events_.size());
    } else if (kind == "ready") {
      Ready ready;
      for (size_t i = 1; i < words.size(); ++i) {
        std::pair<std::string, std::string> kv = absl::StrSplit(words[i], '=');
        if (kv.first == "start") ready.start = Lsn::Parse(kv.second).value_or(Lsn::kInvalid);
        if (kv.first == "deliver_after") {
          ready.deliver_after = EventId::Parse(kv.second).value_or(EventId{});
        }
        if (kv.first == "checkpoint") ready.checkpoint = kv.second;
        if (kv.first == "bind") ready.bind = kv.second == "1";
      }
      ready_ = ready;
    } else if (kind == "fatal" || kind == "exited") {
      return absl::InternalError(absl::StrCat("walfeed stopped: ", line));
    } else {
      replies_.push_back(line);
    }
    return absl::OkStatus();
  }

  std::unique_ptr<ChildProcess> process_;
  const std::string log_path_;
  const std::function<std::string()> server_state_;
  std::vector<std::string> transcript_;
  std::optional<Ready> ready_;
  std::vector<Event> events_;
  std::vector<Commit> commits_;
  std::vector<Lsn> connected_;
  std::vector<size_t> disconnect_marks_;
  std::deque<std::string> replies_;
};

std::vector<std::string> Lines(const std::vector<Event>& events) {
  std::vector<std::string> lines;
  for (const Event& event : events) lines.push_back(event.line);
  return lines;
}

// The events of `events` strictly after `ack`: what a consumer that acked `ack`
// must get from a restarted walfeed.
std::vector<std::string> LinesAfter(const std::vector<Event>& events, EventId ack) {
  std::vector<std::string> lines;
  for (const Event& event : events) {
    if (event.id > ack) lines.push_back(event.line);
  }
  return lines;
}

// How many of `events` a reader started at `start` with floor `ack` drops as at or
// below the checkpoint: PostgreSQL re-sends every transaction committing at or after
// the start (§4.2), and those events at or below the ack are not delivered.
uint64_t BelowCheckpoint(const std::vector<Event>& events, Lsn start, EventId ack) {
  uint64_t n = 0;
  for (const Event& event : events) {
    if (event.id.commit_lsn >= start && event.id <= ack) ++n;
  }
  return n;
}

// ---------------------------------------------------------------------------

class CrashTestBase : public ::testing::Test {
 protected:
  void SetUp() override {
    PgCluster::Options options;
    // Pinned because the "before any confirm" ending relies on the reader's
    // status cadence being min(feedback, wal_sender_timeout / 2) = 30 s.
    options.settings["wal_sender_timeout"] = "'60s'";
    WALFEED_START_PG_OR_SKIP(pg_, options);
    ASSERT_THAT(pg_->Exec("CREATE TABLE t (id int PRIMARY KEY, v text)"), IsOk());
  }

  absl::StatusOr<std::unique_ptr<StreamChild>> Launch(int feedback_ms = 200) {
    StreamChild::Flags flags;
    flags.conninfo = pg_->ConnInfo();
    flags.feedback_ms = feedback_ms;
    flags.server_state = [this] { return ServerState(); };
    // A log file per launch, next to the cluster, so a failure shows this run's log.
    const std::string log = absl::StrCat(pg_->data_dir(), "/../crash_child.", launches_++, ".log");
    return StreamChild::Start(flags, log);
  }

  // One value from the server; `fallback` when the query fails (the caller's
  // expectation then fails with a value that says so).
  std::string Value(const std::string& sql, const std::string& fallback) {
    return pg_->QueryValue(sql).value_or(fallback);
  }
  // Every session's wait and statement, and the end of the server log.
  std::string ServerState() {
    absl::StatusOr<std::vector<std::string>> sessions = pg_->Query(
        "SELECT pid || ' ' || backend_type || ' ' || coalesce(state, '') || ' wait=' || "
        "coalesce(wait_event_type || '/' || wait_event, '-') || ' xid=' || "
        "coalesce(backend_xid::text, '-') || ' ' || left(coalesce(query, ''), 100) "
        "FROM pg_stat_activity ORDER BY pid");
    std::string log = pg_->Log();
    if (log.size() > 3000) log = log.substr(log.size() - 3000);
    return absl::StrCat("\n--- pg_stat_activity:\n",
                        sessions.ok() ? absl::StrJoin(*sessions, "\n") : sessions.status().ToString(),
                        "\n--- server log (end):\n", log);
  }
  Lsn SlotConfirmed() {
    const std::string sql = absl::StrCat(
        "SELECT confirmed_flush_lsn FROM pg_replication_slots WHERE slot_name = '", kSlot, "'");
    return Lsn::Parse(Value(sql, "0/0")).value_or(Lsn::kInvalid);
  }
  Lsn StoredConfirmed() {
    const std::string sql = absl::StrCat(
        "SELECT confirmed_lsn FROM walfeed.stream_checkpoints WHERE stream = '", kStream, "'");
    return Lsn::Parse(Value(sql, "0/0")).value_or(Lsn::kInvalid);
  }
  EventId StoredAck() {
    const std::string sql = absl::StrCat(
        "SELECT commit_lsn || ':' || event_index FROM walfeed.consumer_checkpoints "
        "WHERE stream = '",
        kStream, "' AND consumer = '", kConsumer, "'");
    return EventId::Parse(Value(sql, "0/0:0")).value_or(EventId{});
  }

  // A killed walfeed's server sessions outlive it briefly: its walsender until it
  // notices the closed socket (until then the slot is active and PrepareStream
  // reports it busy, a transient error the server would retry), and its
  // checkpoint store's backend until a statement in flight finishes (which may
  // still store a confirmed position). Stored positions are read, and walfeed is
  // started again, only once both are gone. The test itself holds no session
  // between queries, so "no other client" means "none of walfeed's".
  bool WaitForWalfeedGone() {
    return WaitUntil(
        [&] {
          return Value(
                     "SELECT count(*) FROM pg_stat_activity WHERE backend_type IN "
                     "('client backend', 'walsender') AND pid <> pg_backend_pid()",
                     "") == "0";
        },
        kDeadline);
  }

  std::unique_ptr<PgCluster> pg_;
  int launches_ = 0;
};

// ---------------------------------------------------------------------------
// §4.2's table, from the consumer's side.

enum class AckCase {
  kT1Whole,  // Acked T1's last event, nothing of T2.
  kT2Part,   // Acked T2:0 of the two-event T2.
  kT2Whole,  // Acked T2's last event.
};

enum class Ending {
  kKillOnceConfirmed,     // SIGKILL after the slot and the store show the ack.
  kKillRightAfterAck,     // SIGKILL as soon as the ack is durable (200 ms cadence:
                          // the confirm may or may not have gone out).
  kKillBeforeAnyConfirm,  // SIGKILL with a 30 s status cadence: no confirm after the
                          // ack, only the stored consumer checkpoint knows it.
  kCleanStop,             // "stop": final status update and CopyDone.
};

std::string Name(AckCase c) {
  switch (c) {
    case AckCase::kT1Whole:
      return "T1Whole";
    case AckCase::kT2Part:
      return "T2Part";
    case AckCase::kT2Whole:
      return "T2Whole";
  }
  return "";
}

std::string Name(Ending e) {
  switch (e) {
    case Ending::kKillOnceConfirmed:
      return "KillOnceConfirmed";
    case Ending::kKillRightAfterAck:
      return "KillRightAfterAck";
    case Ending::kKillBeforeAnyConfirm:
      return "KillBeforeAnyConfirm";
    case Ending::kCleanStop:
      return "CleanStop";
  }
  return "";
}

class AckPositionTest : public CrashTestBase,
                        public ::testing::WithParamInterface<std::tuple<AckCase, Ending>> {};

TEST_P(AckPositionTest, RestartDeliversExactlyWhatFollowsTheAck) {
  const auto [ack_case, ending] = GetParam();
  const bool slow_feedback = ending == Ending::kKillBeforeAnyConfirm;

  // First life: walfeed creates and binds the slot, streams T1..T3, the consumer acks.
  absl::StatusOr<std::unique_ptr<StreamChild>> first = Launch(slow_feedback ? 60000 : 200);
  ASSERT_THAT(first, IsOk());
  StreamChild& one = **first;
  ASSERT_TRUE(one.ready().bind);
  ASSERT_EQ(one.ready().checkpoint, "none");

  ASSERT_THAT(pg_->Exec("INSERT INTO t VALUES (1, 'a'), (2, 'b')"), IsOk());
  ASSERT_THAT(pg_->Exec("BEGIN; INSERT INTO t VALUES (3, 'c');"
                        "UPDATE t SET v = 'b2' WHERE id = 2; COMMIT"),
              IsOk());
  ASSERT_THAT(pg_->Exec("DELETE FROM t WHERE id = 1"), IsOk());
  ASSERT_THAT(one.ReadUntil([&] { return one.commits().size() >= 3; }), IsOk());
  ASSERT_EQ(one.commits().size(), 3u);
  const Commit t1 = one.commits()[0];
  const Commit t2 = one.commits()[1];
  const Commit t3 = one.commits()[2];
  ASSERT_EQ(t1.event_count, 2u);
  ASSERT_EQ(t2.event_count, 2u);
  ASSERT_EQ(t3.event_count, 1u);
  // The first delivery, exactly (a DELETE carries the key; the other column of
  // the key tuple is a placeholder, printed as <null>).
  const std::string c1 = t1.commit_lsn.ToString();
  const std::string c2 = t2.commit_lsn.ToString();
  const std::string c3 = t3.commit_lsn.ToString();
  ASSERT_THAT(Lines(one.events()), ElementsAreArray({
                                       "event " + c1 + ":0 INSERT 1 a",
                                       "event " + c1 + ":1 INSERT 2 b",
                                       "event " + c2 + ":0 INSERT 3 c",
                                       "event " + c2 + ":1 UPDATE 2 b2",
                                       "event " + c3 + ":0 DELETE 1 <null>",
                                   }));
  const std::vector<Event> first_delivery = one.events();

  // What the consumer acks, and the confirm that ack allows (§4.8): the acked
  // transaction's end_lsn when whole, its commit_lsn when partial, possibly carried
  // up to a keepalive's walEnd received before the next transaction, but never
  // past the next unacked transaction's commit_lsn (that would skip it).
  EventId ack;
  Lsn lowest_confirm;
  Lsn highest_confirm;
  switch (ack_case) {
    case AckCase::kT1Whole:
      ack = {t1.commit_lsn, 1};
      lowest_confirm = t1.end_lsn;
      highest_confirm = t2.commit_lsn;
      break;
    case AckCase::kT2Part:
      ack = {t2.commit_lsn, 0};
      lowest_confirm = t2.commit_lsn;
      highest_confirm = t2.commit_lsn;
      break;
    case AckCase::kT2Whole:
      ack = {t2.commit_lsn, 1};
      lowest_confirm = t2.end_lsn;
      highest_confirm = t3.commit_lsn;
      break;
  }
  ASSERT_THAT(one.Ack(ack), IsOk());
  // "acked" means durable: the checkpoint is in the table before any confirm.
  EXPECT_EQ(StoredAck(), ack);

  switch (ending) {
    case Ending::kKillOnceConfirmed:
      ASSERT_TRUE(WaitUntil(
          [&] { return SlotConfirmed() >= lowest_confirm && StoredConfirmed() >= lowest_confirm; },
          kDeadline))
          << "slot " << SlotConfirmed() << ", stored " << StoredConfirmed()
          << ", want >= " << lowest_confirm << one.Diagnostics();
      one.Kill();
      break;
    case Ending::kKillRightAfterAck:
      one.Kill();
      break;
    case Ending::kKillBeforeAnyConfirm:
      one.Kill();
      break;
    case Ending::kCleanStop:
      ASSERT_THAT(one.Stop(), IsOk());
      // A clean stop stores and sends the last confirmable position.
      EXPECT_GE(StoredConfirmed(), lowest_confirm);
      EXPECT_TRUE(WaitUntil([&] { return SlotConfirmed() == StoredConfirmed(); }, kDeadline))
          << "slot " << SlotConfirmed() << ", stored " << StoredConfirmed();
      break;
  }
  ASSERT_TRUE(WaitForWalfeedGone());
  if (ending == Ending::kKillBeforeAnyConfirm) {
    // Nothing confirmed covers any of the ack (an idle advance before T1 may have
    // gone out): nothing but the consumer checkpoint records it.
    EXPECT_LE(StoredConfirmed(), t1.commit_lsn);
    EXPECT_LE(SlotConfirmed(), t1.commit_lsn);
  }
  // Whatever the ending: the slot never got ahead of the stored position, and the
  // stored position never passed the first transaction the consumer still needs.
  const Lsn stored = StoredConfirmed();
  EXPECT_LE(SlotConfirmed(), stored);
  EXPECT_LE(stored, highest_confirm);
  EXPECT_EQ(StoredAck(), ack);

  // Second life.
  absl::StatusOr<std::unique_ptr<StreamChild>> second = Launch();
  ASSERT_THAT(second, IsOk());
  StreamChild& two = **second;
  EXPECT_FALSE(two.ready().bind);
  EXPECT_EQ(two.ready().checkpoint, ack.ToString());
  EXPECT_EQ(two.ready().deliver_after, ack);
  EXPECT_EQ(two.ready().start, stored);  // walfeed's position, not the slot's.
  if (ending == Ending::kKillBeforeAnyConfirm) {
    EXPECT_LE(two.ready().start, t1.commit_lsn);
  }
  if (ending == Ending::kKillOnceConfirmed || ending == Ending::kCleanStop) {
    EXPECT_GE(two.ready().start, lowest_confirm);
  }
  ASSERT_THAT(two.ReadUntilCommit(t3.commit_lsn), IsOk());
  absl::StatusOr<ChildStats> stats = two.Stats();
  ASSERT_THAT(stats, IsOk());

  const std::vector<std::string> expected = LinesAfter(first_delivery, ack);
  EXPECT_THAT(Lines(two.events()), ElementsAreArray(expected)) << two.Diagnostics();
  // Spelled out per row of §4.2, so the expectation does not only rest on
  // LinesAfter.
  switch (ack_case) {
    case AckCase::kT1Whole:
      EXPECT_EQ(expected.size(), 3u);  // T2 whole and T3.
      break;
    case AckCase::kT2Part:
      ASSERT_EQ(expected.size(), 2u);  // T2:1 and T3.
      EXPECT_EQ(expected[0], "event " + c2 + ":1 UPDATE 2 b2");
      break;
    case AckCase::kT2Whole:
      ASSERT_EQ(expected.size(), 1u);  // T3 only.
      EXPECT_EQ(expected[0], "event " + c3 + ":0 DELETE 1 <null>");
      break;
  }
  EXPECT_EQ(stats->events, expected.size());
  // PostgreSQL re-sent every transaction committing at or after the start; the
  // acked part of them was dropped by the floor, not delivered.
  EXPECT_EQ(stats->below_checkpoint, BelowCheckpoint(first_delivery, two.ready().start, ack));
  if (ending == Ending::kKillBeforeAnyConfirm) {
    // PostgreSQL re-sent every acked event; the floor alone kept them back.
    EXPECT_EQ(stats->below_checkpoint, first_delivery.size() - expected.size());
  }
  EXPECT_EQ(stats->redelivered_dropped, 0u);
  EXPECT_EQ(stats->reconnects, 0u);
}

INSTANTIATE_TEST_SUITE_P(
    AllRowsAllEndings, AckPositionTest,
    ::testing::Combine(::testing::Values(AckCase::kT1Whole, AckCase::kT2Part, AckCase::kT2Whole),
                       ::testing::Values(Ending::kKillOnceConfirmed, Ending::kKillRightAfterAck,
                                         Ending::kKillBeforeAnyConfirm, Ending::kCleanStop)),
    [](const ::testing::TestParamInfo<std::tuple<AckCase, Ending>>& info) {
      return Name(std::get<0>(info.param)) + "_" + Name(std::get<1>(info.param));
    });

// ---------------------------------------------------------------------------
// PostgreSQL restarts under a running walfeed.

// Inserts two-row transactions on its own connection until stopped, through a
// server restart: a failed statement's outcome is unknown (it may have committed
// just before the server went away), so the table, not this writer, is the truth
// about what committed; the writer only records what it knows committed.
class Writer {
 public:
  Writer(std::string conninfo, int first_id) : conninfo_(std::move(conninfo)), next_id_(first_id) {
    thread_ = std::thread([this] { Loop(); });
  }
  ~Writer() { Stop(); }

  // Ends the writer once `n` transactions are known committed, so the volume
  // written after the restart is bounded however long the test takes to get here.
  void StopAfter(int n) { stop_after_.store(n); }
  bool done() const { return done_.load(); }
  void Stop() {
    stop_after_.store(0);
    if (thread_.joinable()) thread_.join();
  }

  int committed() const { return committed_.load(); }
  int failed() const { return failed_.load(); }
  // Ids whose INSERT returned OK; only read after Stop().
  const std::vector<int>& committed_ids() const { return committed_ids_; }

 private:
  bool ShouldStop() const { return committed_.load() >= stop_after_.load(); }

  void Loop() {
    PGconn* conn = nullptr;
    while (!ShouldStop()) {
      if (conn == nullptr) {
        // The server may be down or starting up: wait for it to accept us.
        WaitUntil(
            [&] {
              if (ShouldStop()) return true;
              conn = PQconnectdb(conninfo_.c_str());
              if (PQstatus(conn) == CONNECTION_OK) return true;
              PQfinish(conn);
              conn = nullptr;
              return false;
            },
            kDeadline);
        if (conn == nullptr) break;
      }
      const int id = next_id_;
      next_id_ += 2;
      const std::string sql = absl::StrCat("INSERT INTO t VALUES (", id, ", 'w", id, "'), (",
                                           id + 1, ", 'w", id + 1, "')");
      PGresult* result = PQexec(conn, sql.c_str());
      const bool ok = PQresultStatus(result) == PGRES_COMMAND_OK;
      PQclear(result);
      if (ok) {
        committed_ids_.push_back(id);
        committed_ids_.push_back(id + 1);
        committed_.fetch_add(1);
      } else {
        failed_.fetch_add(1);
        PQfinish(conn);
        conn = nullptr;
      }
    }
    if (conn != nullptr) PQfinish(conn);
    done_.store(true);
  }

  const std::string conninfo_;
  int next_id_;
  // A bound even before StopAfter, so a test that never gets there cannot fill
  // the disk.
  std::atomic<int> stop_after_{20000};
  std::atomic<int> committed_{0};
  std::atomic<int> failed_{0};
  std::atomic<bool> done_{false};
  std::vector<int> committed_ids_;  // Writer thread only, until joined.
  std::thread thread_;
};

// The slot's confirmed_flush_lsn when the first logical decoding session after
// `log_offset` in the server log started: PostgreSQL logs it as "Streaming
// transactions committing after X" (logical.c, CreateDecodingContext), before the
// client's first status update can move it.
std::optional<Lsn> SlotPositionAtFirstStartAfter(const std::string& log, size_t log_offset) {
  const std::string marker = "Streaming transactions committing after ";
  const size_t at = log.find(marker, log_offset);
  if (at == std::string::npos) return std::nullopt;
  const size_t from = at + marker.size();
  const size_t comma = log.find(',', from);
  if (comma == std::string::npos) return std::nullopt;
  absl::StatusOr<Lsn> lsn = Lsn::Parse(log.substr(from, comma - from));
  if (!lsn.ok()) return std::nullopt;
  return *lsn;
}

// How long a PostgreSQL shutdown may take with walfeed connected. A shutdown with
// nothing to wait for takes one or two seconds here; thirty seconds of a walsender
// exchanging keepalives with walfeed is not a loaded machine, it is a shutdown that
// waits for something that will not come.
constexpr absl::Duration kShutdownGrace = absl::Seconds(30);

// Stops PostgreSQL with `mode` while `walfeed` is connected. If the shutdown has
// not finished after kShutdownGrace, records a failure with the evidence (how many
// keepalives and status updates walfeed exchanged meanwhile, and its log), then
// kills walfeed, which is what lets the shutdown finish, as an operator would
// have to. Returns whether walfeed had to be killed.
bool StopServerUnderWalfeed(PgCluster& pg, const std::string& mode, StreamChild& walfeed,
                            absl::Status* stop_status) {
  const absl::StatusOr<ChildStats> before = walfeed.Stats();
  absl::Notification stopped;
  std::thread stopper([&] {
    *stop_status = pg.Stop(mode);
    stopped.Notify();
  });
  const bool held_up = !stopped.WaitForNotificationWithTimeout(kShutdownGrace);
  if (held_up) {
    const absl::StatusOr<ChildStats> after = walfeed.Stats();
    std::string exchanged = "(stats unavailable)";
    if (before.ok() && after.ok()) {
      exchanged =
          absl::StrCat(after->keepalives - before->keepalives, " keepalives and ",
                       after->status_updates - before->status_updates,
                       " status updates, confirmed position stayed ",
                       after->confirmed_sent == before->confirmed_sent ? "at " : "moved to ",
                       after->confirmed_sent.ToString());
    }
    ADD_FAILURE() << "pg_ctl stop -m " << mode << " did not finish within "
                  << absl::FormatDuration(kShutdownGrace)
                  << " while walfeed was connected: the walsender waits at shutdown until the "
                     "client's flush position reaches everything it sent, and walfeed only "
                     "ever reports a stored, acked position. Meanwhile walfeed exchanged "
                  << exchanged << "." << walfeed.Diagnostics();
    walfeed.Kill();
  }
  stopper.join();
  return held_up;
}

// Every row of t, "id value", sorted by id.
absl::StatusOr<std::vector<std::string>> TableRows(PgCluster& pg) {
  return pg.Query("SELECT id || ' ' || v FROM t ORDER BY id");
}

// Checks that `events` are the table's rows, each exactly once, in strictly
// increasing id order (every event is an INSERT of t).
void ExpectEveryRowExactlyOnce(const std::vector<Event>& events,
                               const std::vector<std::string>& table) {
  for (size_t i = 1; i < events.size(); ++i) {
    ASSERT_LT(events[i - 1].id, events[i].id) << events[i - 1].line << " then " << events[i].line;
  }
  std::vector<std::string> delivered_rows;
  for (const Event& event : events) {
    std::vector<std::string> words = absl::StrSplit(event.line, absl::MaxSplits(' ', 3));
    ASSERT_EQ(words.size(), 4u) << event.line;
    ASSERT_EQ(words[2], "INSERT") << event.line;
    delivered_rows.push_back(words[3]);
  }
  EXPECT_THAT(delivered_rows, ::testing::UnorderedElementsAreArray(table));
}

class PgRestartTest : public CrashTestBase, public ::testing::WithParamInterface<std::string> {};

TEST_P(PgRestartTest, ReaderReconnectsFromItsStoredPositionAndLosesNothing) {
  const std::string mode = GetParam();
  absl::StatusOr<std::unique_ptr<StreamChild>> first = Launch();
  ASSERT_THAT(first, IsOk());
  StreamChild& one = **first;

  // Ten transactions B1..B10 of two rows each.
  for (int k = 1; k <= 10; ++k) {
    ASSERT_THAT(pg_->Exec(absl::StrCat("INSERT INTO t VALUES (", 2 * k - 1, ", 'b", 2 * k - 1,
                                       "'), (", 2 * k, ", 'b", 2 * k, "')")),
                IsOk());
  }
  ASSERT_THAT(one.ReadUntil([&] { return one.commits().size() >= 10; }), IsOk());
  const Commit b3 = one.commits()[2];
  const Commit b6 = one.commits()[5];
  // Two acks, each confirmed: the slot saves its position to disk only now and
  // then (with a restart_lsn move, or at a checkpoint), so the second confirm is
  // the kind PostgreSQL 15 loses in a restart (§4.4).
  ASSERT_THAT(one.Ack({b3.commit_lsn, 1}), IsOk());
  ASSERT_TRUE(WaitUntil([&] { return SlotConfirmed() >= b3.end_lsn; }, kDeadline));
  const EventId checkpoint{b6.commit_lsn, 0};  // B6 in part: confirm stays at its commit.
  ASSERT_THAT(one.Ack(checkpoint), IsOk());
  ASSERT_TRUE(WaitUntil([&] { return SlotConfirmed() == b6.commit_lsn; }, kDeadline))
      << "slot at " << SlotConfirmed() << ", want " << b6.commit_lsn << one.Diagnostics();
  ASSERT_EQ(StoredConfirmed(), b6.commit_lsn);

  // Restart PostgreSQL while a writer commits, and let it write on afterwards.
  const size_t log_offset = pg_->Log().size();
  Writer writer(pg_->ConnInfo(), 1001);
  ASSERT_TRUE(WaitUntil([&] { return writer.committed() >= 20; }, kDeadline));
  absl::Status stop_status;
  const bool walfeed_killed = StopServerUnderWalfeed(*pg_, mode, one, &stop_status);
  ASSERT_THAT(stop_status, IsOk());
  ASSERT_THAT(pg_->StartAgain(), IsOk());
  writer.StopAfter(writer.committed() + 20);

  // The walfeed that streams after the restart: the same process, reconnected by
  // itself, or (only when it had to be killed to let the shutdown finish) a new
  // one, which must resume from the stored position.
  StreamChild* current = &one;
  std::unique_ptr<StreamChild> replacement;
  if (walfeed_killed) {
    absl::StatusOr<std::unique_ptr<StreamChild>> launched = Launch();
    ASSERT_THAT(launched, IsOk());
    replacement = std::move(*launched);
    current = replacement.get();
    EXPECT_EQ(current->ready().start, b6.commit_lsn);
    EXPECT_EQ(current->ready().deliver_after, checkpoint);
  }

  ASSERT_TRUE(WaitUntil([&] { return writer.done(); }, kDeadline))
      << "writer committed " << writer.committed() << ", failed " << writer.failed();
  writer.Stop();
  ASSERT_THAT(pg_->Exec("INSERT INTO t VALUES (1000000, 'sentinel')"), IsOk());
  ASSERT_THAT(current->ReadUntil([&] {
    return !current->events().empty() && !current->commits().empty() &&
           absl::EndsWith(current->events().back().line, " INSERT 1000000 sentinel") &&
           current->commits().back().commit_lsn == current->events().back().id.commit_lsn;
  }),
              IsOk());

  // The first session after the restart asked for walfeed's stored position (B6's
  // commit); the slot may have lost that confirm (§4.4), never gone past it.
  const std::optional<Lsn> slot_after_restart =
      SlotPositionAtFirstStartAfter(pg_->Log(), log_offset);
  ASSERT_TRUE(slot_after_restart.has_value()) << pg_->Log().substr(log_offset);
  EXPECT_LE(*slot_after_restart, b6.commit_lsn);
  RecordProperty("slot_confirmed_after_restart", slot_after_restart->ToString());
  RecordProperty("walfeed_confirmed_before_restart", b6.commit_lsn.ToString());
  if (*slot_after_restart < b6.commit_lsn) {
    std::cout << "[ INFO     ] " << mode << " restart: slot confirmed_flush_lsn regressed from "
              << b6.commit_lsn << " to " << *slot_after_restart
              << "; walfeed resumed from its stored " << b6.commit_lsn << "\n";
  }

  // Everything a consumer received, across processes, without what was re-sent.
  std::vector<Event> received;
  Lsn last_before_restart;  // Commit LSN of the last event delivered before it.
  if (!walfeed_killed) {
    // One reconnect, by itself, from the position it stored and confirmed.
    ASSERT_EQ(one.connected().size(), 2u) << one.Diagnostics();
    EXPECT_EQ(one.connected()[1], b6.commit_lsn);
    ASSERT_FALSE(one.disconnect_marks().empty());
    const size_t mark = one.disconnect_marks()[0];
    ASSERT_GT(mark, 0u);
    last_before_restart = one.events()[mark - 1].id.commit_lsn;
    received = one.events();
    // PostgreSQL re-sent from B6's commit; what this process had delivered was
    // recognised by id and dropped, not delivered twice.
    absl::StatusOr<ChildStats> stats = one.Stats();
    ASSERT_THAT(stats, IsOk());
    EXPECT_GE(stats->reconnects, 1u);
    EXPECT_EQ(stats->below_checkpoint, 0u);
    EXPECT_EQ(stats->events, one.events().size());
    uint64_t resent_and_dropped = 0;
    for (size_t i = 0; i < mark; ++i) {
      if (one.events()[i].id.commit_lsn >= b6.commit_lsn) ++resent_and_dropped;
    }
    EXPECT_EQ(stats->redelivered_dropped, resent_and_dropped);
  } else {
    // The new process re-delivered what followed the checkpoint, with the ids and
    // values of the first delivery, then went on.
    last_before_restart = one.events().back().id.commit_lsn;
    const std::vector<std::string> again = LinesAfter(one.events(), checkpoint);
    const std::vector<std::string> lines = Lines(current->events());
    ASSERT_GE(lines.size(), again.size());
    EXPECT_THAT(std::vector<std::string>(lines.begin(), lines.begin() + again.size()),
                ElementsAreArray(again));
    for (const Event& event : one.events()) {
      if (event.id <= checkpoint) received.push_back(event);
    }
    received.insert(received.end(), current->events().begin(), current->events().end());
  }

  // Every committed row arrived exactly once: nothing lost, nothing twice.
  absl::StatusOr<std::vector<std::string>> table = TableRows(*pg_);
  ASSERT_THAT(table, IsOk());
  ExpectEveryRowExactlyOnce(received, *table);
  // And what the writer saw commit is in the table (the server lost nothing).
  std::set<std::string> table_rows(table->begin(), table->end());
  for (int id : writer.committed_ids()) {
    EXPECT_EQ(table_rows.count(absl::StrCat(id, " w", id)), 1u) << id;
  }
  RecordProperty("writer_committed", writer.committed());
  RecordProperty("writer_failed", writer.failed());

  // Ack part of a transaction first delivered after the restart (the checkpoint
  // store reconnects by itself), then kill walfeed at once.
  const std::vector<Event>& events = current->events();
  std::vector<size_t> after_restart;  // First events of transactions after it.
  for (size_t i = 0; i < events.size(); ++i) {
    if (events[i].id.commit_lsn > last_before_restart && events[i].id.index == 0) {
      after_restart.push_back(i);
    }
  }
  ASSERT_GE(after_restart.size(), 2u);
  const EventId late_ack = events[after_restart[after_restart.size() / 2]].id;
  ASSERT_THAT(current->Ack(late_ack), IsOk());
  current->Kill();
  ASSERT_TRUE(WaitForWalfeedGone());
  EXPECT_EQ(StoredAck(), late_ack);
  const Lsn stored = StoredConfirmed();
  EXPECT_GE(stored, b6.commit_lsn);
  EXPECT_LE(stored, late_ack.commit_lsn);

  // A new walfeed delivers exactly what follows the ack, with the ids and values
  // of the first delivery.
  absl::StatusOr<std::unique_ptr<StreamChild>> next = Launch();
  ASSERT_THAT(next, IsOk());
  StreamChild& last = **next;
  EXPECT_EQ(last.ready().start, stored);
  EXPECT_EQ(last.ready().deliver_after, late_ack);
  ASSERT_THAT(last.ReadUntilCommit(events.back().id.commit_lsn), IsOk());
  EXPECT_THAT(Lines(last.events()), ElementsAreArray(LinesAfter(events, late_ack)))
      << last.Diagnostics();
  absl::StatusOr<ChildStats> last_stats = last.Stats();
  ASSERT_THAT(last_stats, IsOk());
  EXPECT_EQ(last_stats->below_checkpoint, BelowCheckpoint(received, stored, late_ack));
  EXPECT_EQ(last_stats->redelivered_dropped, 0u);
}

INSTANTIATE_TEST_SUITE_P(FastAndImmediate, PgRestartTest, ::testing::Values("fast", "immediate"),
                         [](const ::testing::TestParamInfo<std::string>& info) {
                           return info.param;
                         });

// The best case for a clean shutdown: the consumer acked everything and the slot
// confirmed it. The shutdown checkpoint is WAL walfeed has not confirmed, and it
// could confirm it only after storing it, in the server that is shutting down.
class FastShutdownTest : public CrashTestBase {};

TEST_F(FastShutdownTest, FinishesWithEverythingAcked) {
  absl::StatusOr<std::unique_ptr<StreamChild>> first = Launch();
  ASSERT_THAT(first, IsOk());
  StreamChild& one = **first;
  ASSERT_THAT(pg_->Exec("INSERT INTO t VALUES (1, 'a'), (2, 'b')"), IsOk());
  ASSERT_THAT(one.ReadUntil([&] { return one.commits().size() >= 1; }), IsOk());
  const Commit t1 = one.commits()[0];
  ASSERT_THAT(one.Ack({t1.commit_lsn, 1}), IsOk());
  ASSERT_TRUE(WaitUntil(
      [&] { return SlotConfirmed() >= t1.end_lsn && StoredConfirmed() >= t1.end_lsn; }, kDeadline));

  absl::Status stop_status;
  const bool walfeed_killed = StopServerUnderWalfeed(*pg_, "fast", one, &stop_status);
  ASSERT_THAT(stop_status, IsOk());
  ASSERT_THAT(pg_->StartAgain(), IsOk());
  if (!walfeed_killed) {
    // It reconnected by itself; nothing was acked that it could deliver again.
    ASSERT_THAT(one.ReadUntil([&] { return one.connected().size() >= 2; }), IsOk());
  }
  one.Kill();
  ASSERT_TRUE(WaitForWalfeedGone());

  // Whatever the slot kept, a new walfeed resumes after T1 and delivers only T2.
  const Lsn stored = StoredConfirmed();
  absl::StatusOr<std::unique_ptr<StreamChild>> second = Launch();
  ASSERT_THAT(second, IsOk());
  StreamChild& two = **second;
  EXPECT_EQ(two.ready().start, stored);
  ASSERT_THAT(pg_->Exec("INSERT INTO t VALUES (3, 'c')"), IsOk());
  ASSERT_THAT(two.ReadUntil([&] { return !two.commits().empty(); }), IsOk());
  const std::string c2 = two.commits()[0].commit_lsn.ToString();
  EXPECT_THAT(Lines(two.events()), ElementsAreArray({"event " + c2 + ":0 INSERT 3 c"}));
}

}  // namespace
}  // namespace walfeed::replication::pg
