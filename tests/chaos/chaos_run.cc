#include "tests/chaos/chaos_run.h"

#include <signal.h>
#include <stdlib.h>
#include <sys/wait.h>

#include <atomic>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <memory>
#include <random>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "tests/chaos/change_writer.h"
#include "tests/chaos/child_process.h"
#include "tests/chaos/db_faults.h"
#include "tests/chaos/delivery_log.h"
#include "tests/chaos/harness.h"
#include "tests/chaos/slot_loss.h"
#include "tests/chaos/tcp_proxy.h"
#include "tests/chaos/verifier.h"
#include "tests/testing/pg_cluster.h"
#include "tests/testing/wait.h"

namespace walfeed::chaos {
namespace {

using ::walfeed::testing::PgCluster;
using ::walfeed::testing::WaitUntil;

// Bytes of spill segments under `dir` now.
uint64_t SpillBytes(const std::string& dir) {
  uint64_t bytes = 0;
  std::error_code ignored;
  for (const auto& entry : std::filesystem::recursive_directory_iterator(dir, ignored)) {
    if (entry.path().extension() == ".spill") bytes += entry.file_size(ignored);
  }
  return bytes;
}

// Generous: a consumer may be stalled for seconds, and the server may be
// catching up on everything written during an outage, on two shared cores.
constexpr absl::Duration kCatchUp = absl::Seconds(120);
constexpr absl::Duration kExit = absl::Seconds(30);
constexpr char kFast[] = "fast";
constexpr char kSlow[] = "slow";
// Acks every few seconds with a large window: its backlog is mostly on disk.
constexpr char kLazy[] = "lazy";
constexpr const char* kConsumers[] = {kFast, kSlow, kLazy};

class ChaosRun {
 public:
  explicit ChaosRun(RunOptions options) : options_(std::move(options)), rng_(options_.seed) {}

  int Execute();

 private:
  struct Consumer {
    ConsumerLogs logs;
    std::unique_ptr<ConsumerHandle> live;
    bool slow = false;
    bool lazy = false;
  };
  struct Point {
    FaultKind kind;
    int64_t mono_ns = 0;
  };

  uint64_t Rand(uint64_t lo, uint64_t hi) { return lo + rng_() % (hi - lo + 1); }
  absl::Duration RandMs(uint64_t lo, uint64_t hi) {
    return absl::Milliseconds(static_cast<int64_t>(Rand(lo, hi)));
  }
  // Fault timing: a randomized deadline, waited on the run's abort condition.
  void Pause(absl::Duration d) { abort_.WaitForNotificationWithTimeout(d); }

  absl::Status Setup();
  absl::Status StartServer();
  // SIGTERM, checked: walfeed-server must exit 0 within kExitBound. Returns how
  // long it took.
  absl::StatusOr<absl::Duration> TerminateServer();
  absl::Status StartConsumer(const std::string& name);
  // `walfeed tail` without --consumer (ephemeral) through the proxy, started
  // again whenever it ends (it ends when it falls behind what the server holds).
  absl::Status KeepTailRunning();
  // The server is down while the writer commits up to `changes` more changes
  // (or `timeout` passes): an outage measured in data, not only in time.
  void Outage(uint64_t changes, absl::Duration timeout);
  absl::Status Inject(FaultKind kind, std::string* detail);
  absl::Status Takeover(const std::string& name);
  absl::Status CatchUp(int64_t mark, const std::string& after);
  absl::Status Finish();
  void Report(const Verdict& verdict, absl::Duration elapsed);

  RunOptions options_;
  std::mt19937_64 rng_;
  std::string dir_;
  std::string config_path_;
  std::unique_ptr<PgCluster> pg_;
  std::unique_ptr<TcpProxy> proxy_;  // Consumers -> walfeed-server.
  std::unique_ptr<DbFaults> db_;     // walfeed-server -> PostgreSQL, with its own proxy.
  ServerControl server_control_;     // What db_ may do to the server.
  std::unique_ptr<ServerHandle> server_;
  int server_starts_ = 0;
  std::vector<absl::Duration> sigterm_exits_;  // server-sigterm and the final stop.
  std::map<std::string, Consumer> consumers_;
  std::unique_ptr<ChangeWriter> writer_;
  std::atomic<uint64_t> tail_events_{0};  // Before tail_: its drain thread counts here.
  std::unique_ptr<ChildProcess> tail_;
  int tail_starts_ = 0;
  std::vector<Point> points_;
  // The spill (bytes of segment files) at each fault's moment: how often the
  // faults met the disk tier.
  uint64_t spill_peak_ = 0;
  int points_with_spill_ = 0;
  std::vector<std::string> failures_;
  absl::Notification abort_;
};

absl::Status ChaosRun::Setup() {
  PgCluster::Options pg_options;
  // Small, so that the db faults' black holes are noticed within seconds.
  pg_options.settings["wal_sender_timeout"] =
      absl::StrCat("'", absl::ToInt64Milliseconds(kWalSenderTimeout), "ms'");
  absl::StatusOr<std::unique_ptr<PgCluster>> pg = PgCluster::Start(pg_options);
  if (!pg.ok()) return pg.status();
  pg_ = std::move(*pg);
  if (absl::Status s = CreateSchema(pg_->ConnInfo()); !s.ok()) return s;
  absl::StatusOr<std::unique_ptr<DbFaults>> db = DbFaults::Start(pg_->port());
  if (!db.ok()) return db.status();
  db_ = std::move(*db);
  server_control_.port = [this] { return server_->port(); };
  server_control_.kill = [this] { server_->process().Kill(); };
  server_control_.terminate = [this] { return TerminateServer(); };
  server_control_.start = [this] { return StartServer(); };
  config_path_ = dir_ + "/walfeed.yaml";
  {
    // Only walfeed-server goes through the db proxy; the writer, the markers and
    // the checks below use pg_->ConnInfo() directly.
    std::ofstream out(config_path_);
    out << ServerYaml(db_->ConnInfo(pg_->ConnInfo()), dir_ + "/state");
  }
  absl::StatusOr<std::unique_ptr<TcpProxy>> proxy = TcpProxy::Start();
  if (!proxy.ok()) return proxy.status();
  proxy_ = std::move(*proxy);
  if (absl::Status s = StartServer(); !s.ok()) return s;
  consumers_[kFast].slow = false;
  consumers_[kSlow].slow = true;
  consumers_[kLazy].lazy = true;
  for (const char* name : kConsumers) {
    if (absl::Status s = StartConsumer(name); !s.ok()) return s;
  }
  // A consumer without a checkpoint starts at the oldest event the server still
  // holds, so the writer starts only once both consumers have a durable
  // checkpoint: from then on the server keeps every change for them.
  for (auto& [name, consumer] : consumers_) {
    if (!consumer.live->WaitForSessions(1, kCatchUp)) {
      return absl::DeadlineExceededError(absl::StrCat("consumer ", name, " never subscribed"));
    }
  }
  if (absl::Status s = CatchUp(-1, "start-up"); !s.ok()) return s;
  for (auto& [name, consumer] : consumers_) {
    if (!consumer.live->WaitForAcks(1, kCatchUp)) {
      return absl::DeadlineExceededError(absl::StrCat("consumer ", name, " never acked"));
    }
  }
  if (absl::Status s = KeepTailRunning(); !s.ok()) return s;
  writer_ = std::make_unique<ChangeWriter>(pg_->ConnInfo(), options_.seed ^ 0x5eed5eedULL);
  writer_->Start();
  return absl::OkStatus();
}

absl::Status ChaosRun::StartServer() {
  ++server_starts_;
  absl::StatusOr<std::unique_ptr<ServerHandle>> server = ServerHandle::Start(
      config_path_, absl::StrCat(dir_, "/server-", server_starts_, ".log"));
  if (!server.ok()) return server.status();
  server_ = std::move(*server);
  proxy_->SetUpstream(server_->port());
  return absl::OkStatus();
}

absl::StatusOr<absl::Duration> ChaosRun::TerminateServer() {
  absl::StatusOr<ServerHandle::Termination> t = server_->Terminate();
  if (!t.ok()) return t.status();
  const std::string log = absl::StrCat("server-", server_starts_, ".log");
  if (!t->wait_status) {
    failures_.push_back(absl::StrCat("walfeed-server still ran ", absl::FormatDuration(t->took),
                                     " after SIGTERM and was killed (", log, ")"));
  } else if (!WIFEXITED(*t->wait_status) || WEXITSTATUS(*t->wait_status) != 0) {
    failures_.push_back(absl::StrCat("walfeed-server exited with wait status ", *t->wait_status,
                                     " after SIGTERM (", log, ")"));
  } else if (t->took > kExitBound) {
    failures_.push_back(absl::StrCat("walfeed-server exited ", absl::FormatDuration(t->took),
                                     " after SIGTERM, later than shutdown_timeout + 2 s (", log,
                                     ")"));
  }
  return t->took;
}

absl::Status ChaosRun::KeepTailRunning() {
  if (tail_ && !tail_->exited()) return absl::OkStatus();
  ++tail_starts_;
  absl::StatusOr<std::unique_ptr<ChildProcess>> tail = ChildProcess::Spawn(
      {WALFEED_CLI_BINARY, "tail", "--server", absl::StrCat("127.0.0.1:", proxy_->port()),
       "--stream", kStream},
      absl::StrCat(dir_, "/tail-", tail_starts_, ".stderr"), [this](const std::string& line) {
        if (!line.empty() && line[0] == '{') ++tail_events_;
      });
  if (!tail.ok()) return tail.status();
  tail_ = std::move(*tail);
  return absl::OkStatus();
}

absl::Status ChaosRun::StartConsumer(const std::string& name) {
  Consumer& consumer = consumers_[name];
  const size_t n = consumer.logs.paths.size();
  ConsumerFlags flags;
  flags.server = absl::StrCat("127.0.0.1:", proxy_->port());
  flags.stream = kStream;
  flags.consumer = name;
  flags.log = absl::StrCat(dir_, "/", name, "-", n, ".log");
  flags.seed = rng_();
  if (consumer.lazy) {
    flags.ack_events = 0;
    flags.ack_interval_ms = static_cast<int>(Rand(2000, 6000));
    flags.max_unacked = 5000;
  } else if (consumer.slow) {
    // Acks late and seldom: it lags, and a fault finds many events unacked.
    flags.ack_events = 0;
    flags.ack_interval_ms = static_cast<int>(Rand(300, 1500));
    flags.max_unacked = 500;
  } else {
    flags.ack_events = static_cast<uint32_t>(Rand(1, 300));
    flags.ack_interval_ms = static_cast<int>(Rand(10, 300));
    flags.max_unacked = 1000;
  }
  consumer.logs.name = name;
  consumer.logs.window = flags.max_unacked;
  consumer.logs.paths.push_back(flags.log);
  consumer.logs.killed.push_back(false);
  absl::StatusOr<std::unique_ptr<ConsumerHandle>> handle =
      ConsumerHandle::Start(flags, absl::StrCat(dir_, "/", name, "-", n, ".stderr"));
  if (!handle.ok()) return handle.status();
  consumer.live = std::move(*handle);
  return absl::OkStatus();
}

void ChaosRun::Outage(uint64_t changes, absl::Duration timeout) {
  const uint64_t target = writer_->committed_changes() + changes;
  WaitUntil([&] { return writer_->committed_changes() >= target; }, timeout,
            absl::Milliseconds(5));
}

absl::Status ChaosRun::Takeover(const std::string& name) {
  Consumer& consumer = consumers_[name];
  std::unique_ptr<ConsumerHandle> old = std::move(consumer.live);
  if (absl::Status s = StartConsumer(name); !s.ok()) return s;
  ConsumerHandle* fresh = consumer.live.get();
  // The newer Subscribe fences the older session. If the old process was between
  // sessions it may subscribe again after the new one and win instead; either
  // way exactly one ends with ABORTED and the other carries on.
  const bool settled = WaitUntil(
      [&] { return old->exit_line().has_value() || fresh->exit_line().has_value(); }, kExit,
      absl::Milliseconds(5));
  if (!settled) return absl::DeadlineExceededError("takeover: neither process was fenced");
  const bool old_lost = old->exit_line().has_value();
  ConsumerHandle* loser = old_lost ? old.get() : fresh;
  if (*loser->exit_line() != "ABORTED") {
    return absl::InternalError(
        absl::StrCat("takeover: the fenced process ended ", *loser->exit_line()));
  }
  if (!loser->process().WaitForExit(kExit)) {
    return absl::DeadlineExceededError("takeover: the fenced process did not exit");
  }
  if (!old_lost) consumer.live = std::move(old);
  return absl::OkStatus();
}

absl::Status ChaosRun::Inject(FaultKind kind, std::string* detail) {
  switch (kind) {
    case FaultKind::kServerKill9: {
      server_->process().Kill();
      const uint64_t changes = Rand(0, 400);
      Outage(changes, RandMs(0, 1500));
      *detail = absl::StrCat("outage up to ", changes, " changes");
      return StartServer();
    }
    case FaultKind::kServerSigterm: {
      absl::StatusOr<absl::Duration> took = TerminateServer();
      if (!took.ok()) return took.status();
      sigterm_exits_.push_back(*took);
      *detail = absl::StrFormat("exit %.2fs", absl::ToDoubleSeconds(*took));
      Outage(Rand(0, 400), RandMs(0, 1500));
      return StartServer();
    }
    case FaultKind::kPgRestartFast:
      return pg_->Restart("fast");
    case FaultKind::kPgRestartImmediate:
      return pg_->Restart("immediate");
    case FaultKind::kConsumerKill9: {
      const std::string name = kConsumers[Rand(0, 2)];
      Consumer& consumer = consumers_[name];
      consumer.live->process().Kill();
      consumer.logs.killed.back() = true;
      *detail = name;
      return StartConsumer(name);
    }
    case FaultKind::kNetReset:
      proxy_->ResetAll();
      return absl::OkStatus();
    case FaultKind::kNetStall: {
      const absl::Duration d = RandMs(200, 3000);
      proxy_->Stall(TcpProxy::kBoth, absl::Now() + d);
      *detail = absl::FormatDuration(d);
      return absl::OkStatus();
    }
    case FaultKind::kNetCutToServer:
    case FaultKind::kNetCutToClient: {
      const TcpProxy::Direction direction =
          kind == FaultKind::kNetCutToServer ? TcpProxy::kToServer : TcpProxy::kToClient;
      const absl::Duration d = RandMs(100, 2500);
      proxy_->Stall(direction, absl::Now() + d);
      Pause(d);
      proxy_->ResetAll();
      *detail = absl::FormatDuration(d);
      return absl::OkStatus();
    }
    case FaultKind::kConsumerStall: {
      const std::string name = kConsumers[Rand(0, 2)];
      const uint64_t ms = Rand(300, 4000);
      *detail = absl::StrCat(name, " ", ms, "ms");
      return consumers_[name].live->process().WriteLine(absl::StrCat("stall ", ms));
    }
    case FaultKind::kLaggingConsumer: {
      const uint64_t ms = Rand(3000, 8000);
      Consumer& slow = consumers_[kSlow];
      if (absl::Status s = slow.live->process().WriteLine(absl::StrCat("stall ", ms)); !s.ok()) {
        return s;
      }
      // The other consumer must not be held back by the lagging one.
      ConsumerHandle& fast = *consumers_[kFast].live;
      const bool moved = fast.WaitForHandled(fast.handled() + 1, absl::Milliseconds(ms));
      *detail = absl::StrCat("slow stalled ", ms, "ms, fast ", moved ? "moved on" : "idle");
      return absl::OkStatus();
    }
    case FaultKind::kTakeover:
      *detail = kFast;
      return Takeover(kFast);
    case FaultKind::kDbBlackhole:
    case FaultKind::kDbBlackholeToPg:
    case FaultKind::kDbBlackholeFromPg:
    case FaultKind::kDbBlackholeConnect:
    case FaultKind::kDbReset:
      return db_->Inject(kind, rng_, server_control_, detail);
  }
  return absl::OkStatus();
}

absl::Status ChaosRun::CatchUp(int64_t mark, const std::string& after) {
  const bool emitted = WaitUntil(
      [&] {
        return pg_->Exec(absl::StrCat("SELECT pg_logical_emit_message(true, '", kMarkPrefix,
                                      "', '", mark, "')"))
            .ok();
      },
      kCatchUp, absl::Milliseconds(50));
  if (!emitted) return absl::UnavailableError("could not write a marker to PostgreSQL");
  for (auto& [name, consumer] : consumers_) {
    if (!consumer.live->WaitForMark(mark, kCatchUp)) {
      return absl::DeadlineExceededError(
          absl::StrCat("consumer ", name, " did not reach marker ", mark, " after ", after,
                       " (", consumer.live->handled(), " events handled; its run ended: ",
                       consumer.live->exit_line().value_or("no"), ")"));
    }
  }
  return absl::OkStatus();
}

absl::Status ChaosRun::Finish() {
  if (absl::Status s = writer_->Stop(); !s.ok()) return s;
  if (absl::Status s = CatchUp(options_.points, "the writer stopped"); !s.ok()) return s;
  for (auto& [name, consumer] : consumers_) {
    (void)consumer.live->process().WriteLine("stop");
  }
  for (auto& [name, consumer] : consumers_) {
    if (!consumer.live->process().WaitForExit(kExit)) {
      return absl::DeadlineExceededError(absl::StrCat("consumer ", name, " did not stop"));
    }
  }
  absl::StatusOr<absl::Duration> took = TerminateServer();
  if (!took.ok()) return took.status();
  sigterm_exits_.push_back(*took);
  return absl::OkStatus();
}

void ChaosRun::Report(const Verdict& verdict, absl::Duration elapsed) {
  struct KindFigures {
    int points = 0;
    uint64_t sessions = 0;
    uint64_t redelivered = 0;
    uint64_t largest = 0;
  };
  std::map<std::string, KindFigures> kinds;
  for (const Point& p : points_) ++kinds[FaultName(p.kind)].points;
  uint64_t duplicates = 0;
  uint64_t largest = 0;
  uint64_t lost = 0;
  for (const auto& [name, fig] : verdict.consumers) {
    duplicates += fig.duplicates;
    largest = std::max(largest, fig.largest_window);
    lost += fig.lost;
    for (const auto& [start, dups] : fig.session_duplicates) {
      std::string kind = "(before the first fault)";
      for (const Point& p : points_) {
        if (p.mono_ns <= start) kind = FaultName(p.kind);
      }
      KindFigures& k = kinds[kind];
      ++k.sessions;
      k.redelivered += dups;
      k.largest = std::max(k.largest, dups);
    }
  }
  std::cout << "\n== walfeed chaos report (seed " << options_.seed << ") ==\n";
  std::cout << absl::StrFormat(
      "points %d, committed changes %d, transactions %d (commit outcome settled after a lost "
      "connection: %d), lost %d, duplicates %d, largest duplicate window %d, time %s\n",
      points_.size(), verdict.committed_changes, writer_->committed().size(),
      writer_->unknown_outcomes_settled(), lost, duplicates, largest,
      absl::FormatDuration(absl::Trunc(elapsed, absl::Seconds(1))));
  for (const auto& [name, fig] : verdict.consumers) {
    std::cout << absl::StrFormat(
        "consumer %-5s processes %d delivered %d distinct %d duplicates %d largest window %d "
        "sessions %d acks %d lost %d\n",
        name, consumers_[name].logs.paths.size(), fig.delivered, fig.distinct, fig.duplicates,
        fig.largest_window, fig.sessions, fig.acks, fig.lost);
  }
  std::cout << "sessions whose Started checkpoint was past their start_after (an ack of the "
               "superseded session landed meanwhile):";
  for (const auto& [name, fig] : verdict.consumers) {
    std::cout << " " << name << " " << fig.started_below_checkpoint;
  }
  std::cout << "\n";
  std::cout << absl::StrFormat("ephemeral tail: %d processes, %d events printed\n", tail_starts_,
                               tail_events_.load());
  std::cout << absl::StrFormat("spill: %d of %d faults struck while events were on disk (peak "
                               "%d bytes)\n",
                               points_with_spill_, points_.size(), spill_peak_);
  std::cout << absl::StrFormat("%-26s %6s %9s %12s %8s\n", "fault kind", "points", "sessions",
                               "redelivered", "largest");
  for (const auto& [kind, k] : kinds) {
    std::cout << absl::StrFormat("%-26s %6d %9d %12d %8d\n", kind, k.points, k.sessions,
                                 k.redelivered, k.largest);
  }
  db_->Report(std::cout);
  std::cout << absl::StrFormat(
      "SIGTERM outside a black hole (server-sigterm, final stop): %d, exit p50/max %s s\n",
      sigterm_exits_.size(), P50Max(sigterm_exits_));
}

int ChaosRun::Execute() {
  const absl::Time began = absl::Now();
  std::cout << "walfeed chaos: seed " << options_.seed << ", " << options_.points
            << " points (replay: tests/chaos/run.sh --points " << options_.points << " --seed "
            << options_.seed << ")" << std::endl;
  if (options_.workdir.empty()) {
    const char* tmp = getenv("TMPDIR");
    std::string pattern = absl::StrCat(tmp != nullptr ? tmp : "/tmp", "/walfeed_chaos_XXXXXX");
    if (mkdtemp(pattern.data()) == nullptr) {
      std::cerr << "mkdtemp failed\n";
      return 2;
    }
    dir_ = pattern;
  } else {
    dir_ = options_.workdir;
    std::filesystem::create_directories(dir_);
  }
  std::cout << "logs in " << dir_ << std::endl;
  const std::vector<FaultKind>& kinds =
      options_.faults.empty() ? AllFaultKinds() : options_.faults;

  absl::Status run = Setup();
  for (int i = 0; run.ok() && i < options_.points; ++i) {
    const FaultKind kind = kinds[rng_() % kinds.size()];
    // A random moment: after a random number of further deliveries to the fast
    // consumer, or a random deadline, whichever comes first.
    ConsumerHandle& fast = *consumers_[kFast].live;
    const uint64_t more = Rand(1, 600);
    const absl::Duration by = RandMs(20, 2000);
    fast.WaitForHandled(fast.handled() + more, by);
    points_.push_back(Point{kind, MonotonicNanos()});
    const uint64_t spilled = SpillBytes(dir_ + "/state");
    spill_peak_ = std::max(spill_peak_, spilled);
    points_with_spill_ += spilled > 0;
    std::string detail;
    run = Inject(kind, &detail);
    std::cout << absl::StrFormat("point %d/%d %s %s", i + 1, options_.points, FaultName(kind),
                                 detail)
              << std::endl;
    // The durable consumers caught up with the ephemeral tail connected: it
    // never holds them back.
    if (run.ok()) run = CatchUp(i, FaultName(kind));
    if (run.ok()) run = KeepTailRunning();
  }
  if (tail_) tail_->Kill();
  if (run.ok()) run = Finish();
  if (!run.ok()) {
    failures_.push_back(absl::StrCat("run stopped: ", run.ToString()));
    if (writer_) (void)writer_->Stop();
  }
  for (auto& [name, consumer] : consumers_) {
    if (consumer.live && !consumer.live->process().exited()) {
      consumer.live->process().Kill();
      consumer.logs.killed.back() = true;
    }
  }
  std::vector<ConsumerLogs> logs;
  for (auto& [name, consumer] : consumers_) logs.push_back(consumer.logs);
  const Verdict verdict = writer_ ? Verify(writer_->committed(), logs) : Verdict{};
  if (writer_) Report(verdict, absl::Now() - began);

  if (options_.slot_loss && run.ok()) {
    for (std::string& failure : RunSlotLossScenarios(options_.seed, dir_)) {
      failures_.push_back(std::move(failure));
    }
  }
  std::vector<std::string> all = failures_;
  if (db_) all.insert(all.end(), db_->failures().begin(), db_->failures().end());
  all.insert(all.end(), verdict.violations.begin(), verdict.violations.end());
  if (all.empty()) {
    std::cout << "PROVEN: lost 0, every redelivery identical and of unacked events only, ids "
                 "increasing in every session (seed "
              << options_.seed << ")" << std::endl;
    if (!options_.keep) {
      server_.reset();
      std::error_code ignored;
      std::filesystem::remove_all(dir_, ignored);
    }
    return 0;
  }
  std::cout << "FAILED (seed " << options_.seed << ", logs kept in " << dir_ << "):\n";
  for (const std::string& line : all) std::cout << "  " << line << "\n";
  std::cout << "replay: tests/chaos/run.sh --points " << options_.points << " --seed "
            << options_.seed << std::endl;
  return 1;
}

}  // namespace

int RunChaos(const RunOptions& options) {
  ChaosRun run(options);
  return run.Execute();
}

}  // namespace walfeed::chaos
