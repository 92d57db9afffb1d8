#include "tests/chaos/db_faults.h"

#include <algorithm>
#include <ostream>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "tests/chaos/harness.h"
#include "tests/testing/wait.h"

namespace walfeed::chaos {
namespace {

using ::walfeed::testing::WaitUntil;

// Once healed, the pending connect completes or the next attempt comes after
// the reader's backoff: generous for two shared cores.
constexpr absl::Duration kRecovery = absl::Seconds(90);
// Health is polled this often. That is also the precision of the timings.
constexpr absl::Duration kPoll = absl::Milliseconds(20);

TcpProxy::Direction DirectionOf(FaultKind kind) {
  switch (kind) {
    case FaultKind::kDbBlackholeToPg: return TcpProxy::kToServer;    // walfeed -> PostgreSQL.
    case FaultKind::kDbBlackholeFromPg: return TcpProxy::kToClient;  // PostgreSQL -> walfeed.
    default: return TcpProxy::kBoth;
  }
}

std::string InSeconds(absl::Duration d) {
  return absl::StrFormat("%.2fs", absl::ToDoubleSeconds(d));
}

}  // namespace

bool IsDbFault(FaultKind kind) {
  switch (kind) {
    case FaultKind::kDbBlackhole:
    case FaultKind::kDbBlackholeToPg:
    case FaultKind::kDbBlackholeFromPg:
    case FaultKind::kDbBlackholeConnect:
    case FaultKind::kDbReset: return true;
    default: return false;
  }
}

std::string P50Max(std::vector<absl::Duration> values) {
  if (values.empty()) return "-";
  std::sort(values.begin(), values.end());
  return absl::StrFormat("%.2f/%.2f", absl::ToDoubleSeconds(values[(values.size() - 1) / 2]),
                         absl::ToDoubleSeconds(values.back()));
}

absl::StatusOr<std::unique_ptr<DbFaults>> DbFaults::Start(int pg_port) {
  absl::StatusOr<std::unique_ptr<TcpProxy>> proxy = TcpProxy::Start();
  if (!proxy.ok()) return proxy.status();
  (*proxy)->SetUpstream(pg_port);  // PostgreSQL keeps its port across restarts.
  return std::unique_ptr<DbFaults>(new DbFaults(std::move(*proxy)));
}

std::string DbFaults::ConnInfo(const std::string& conninfo) const {
  // libpq takes the last value of a repeated keyword.
  return absl::StrCat(conninfo, " host=127.0.0.1 port=", proxy_->port());
}

absl::Status DbFaults::Inject(FaultKind kind, std::mt19937_64& rng, ServerControl& server,
                              std::string* detail) {
  ++points_;
  if (kind == FaultKind::kDbReset) {
    ++resets_;
    proxy_->ResetAll();
    return absl::OkStatus();
  }
  return BlackHole(Draw(kind, rng), server, detail);
}

DbFaults::Hole DbFaults::Draw(FaultKind kind, std::mt19937_64& rng) const {
  auto between = [&rng](uint64_t lo, uint64_t hi) { return lo + rng() % (hi - lo + 1); };
  Hole hole;
  hole.kind = kind;
  // Short holes end before wal_sender_timeout; long ones outlast the detection
  // bound by a second or more, and the longest outlast connect_timeout (10 s).
  hole.is_long = rng() % 2 == 0;
  hole.length = absl::Milliseconds(
      static_cast<int64_t>(hole.is_long ? between(7000, 12000) : between(500, 4500)));
  hole.kill_server = kind == FaultKind::kDbBlackholeConnect && rng() % 2 == 0;
  hole.sigterm = rng() % 3 == 0;
  hole.sigterm_at = static_cast<double>(between(20, 90)) / 100;
  return hole;
}

StreamHealth::State DbFaults::Health(ServerControl& server) {
  const int port = server.port();
  if (!health_ || health_->port() != port) health_ = std::make_unique<StreamHealth>(port, kStream);
  return health_->Check();
}

void DbFaults::Fail(const Hole& hole, const std::string& what) {
  failures_.push_back(absl::StrCat("db fault ", points_, " (", FaultName(hole.kind), ", ",
                                   absl::FormatDuration(hole.length), " hole",
                                   hole.sigterm ? ", SIGTERM inside" : "", "): ", what));
}

absl::Status DbFaults::BlackHole(const Hole& hole, ServerControl& server, std::string* detail) {
  const bool connect = hole.kind == FaultKind::kDbBlackholeConnect;
  // A long hole of an established connection is what detection is timed on.
  const bool timed = hole.is_long && !connect;
  ++holes_[hole.kind];
  ++(hole.is_long ? long_holes_ : short_holes_);
  if (!hole.is_long && !connect) ++short_established_;
  *detail = absl::StrCat(absl::FormatDuration(hole.length), hole.is_long ? " long" : " short",
                         hole.kill_server ? ", server killed" : "",
                         connect && !hole.kill_server ? ", connections reset" : "");

  const absl::Time start = absl::Now();
  const absl::Time heal = start + hole.length;
  // The stall goes first, so that every connect from now on meets the hole.
  proxy_->Stall(DirectionOf(hole.kind), heal);
  if (connect) {
    if (hole.kill_server) {
      server.kill();
      if (absl::Status s = server.start(); !s.ok()) return s;
    } else {
      proxy_->ResetAll();
    }
  }

  Sighting seen;
  bool down = hole.kill_server;  // A server started inside the hole is down from the start.
  bool terminated = false;
  std::optional<absl::Duration> exit_took;
  const absl::Time sigterm_at = start + hole.length * hole.sigterm_at;
  absl::Status status;
  WaitUntil(
      [&] {
        const StreamHealth::State state = Health(server);
        // Taken after the answer: a SERVING answered before the heal was SERVING
        // before it.
        const absl::Time now = absl::Now();
        if (now >= heal) return true;
        if (state == StreamHealth::State::kNotServing) {
          if (!seen.not_serving && !terminated) seen.not_serving = now - start;
          down = true;
        } else if (state == StreamHealth::State::kServing && down && !seen.revived) {
          seen.revived = now - start;
        }
        // SIGTERM: a long hole's after its detection (or when detection is
        // already late), so that the detection is timed first.
        const absl::Time late = start + kDetectionBound + absl::Seconds(1);
        const bool due = timed ? seen.not_serving || now >= late : now >= sigterm_at;
        if (hole.sigterm && !terminated && due) {
          terminated = true;
          down = true;  // The next process starts inside the hole.
          absl::StatusOr<absl::Duration> took = server.terminate();
          if (!took.ok()) {
            status = took.status();
            return true;
          }
          sigterm_exits_.push_back(*took);
          exit_took = *took;
          status = server.start();
          if (!status.ok()) return true;
        }
        return false;
      },
      hole.length + absl::Minutes(2), kPoll);
  if (!status.ok()) return status;
  // A restart inside the hole may end after it: recovery counts from the later.
  const absl::Time healed = std::max(heal, absl::Now());

  if (seen.not_serving)
    absl::StrAppend(detail, ", NOT_SERVING after ", InSeconds(*seen.not_serving));
  if (exit_took) absl::StrAppend(detail, ", SIGTERM exit ", InSeconds(*exit_took));
  if (timed) {
    if (!seen.not_serving) {
      Fail(hole,
           absl::StrCat("the stream was still SERVING ",
                        absl::FormatDuration(kDetectionBound + absl::Seconds(1)),
                        " into the hole (bound ", absl::FormatDuration(kDetectionBound), ")"));
    } else {
      detection_[hole.kind].push_back(*seen.not_serving);
      if (*seen.not_serving > kDetectionBound + absl::Seconds(1)) {
        Fail(hole,
             absl::StrCat("the stream turned NOT_SERVING only after ", InSeconds(*seen.not_serving),
                          " (bound ", absl::FormatDuration(kDetectionBound), ")"));
      }
    }
  } else if (connect && !seen.not_serving && !hole.kill_server) {
    Fail(hole, "the stream never turned NOT_SERVING although its connections were reset");
  } else if (!connect && !hole.is_long && seen.not_serving) {
    ++short_noticed_;
  }
  if (seen.revived) {
    Fail(hole, absl::StrCat("the stream claimed SERVING ", InSeconds(*seen.revived),
                            " into the hole after it was down: nothing can stream through it"));
  }

  const bool back =
      WaitUntil([&] { return Health(server) == StreamHealth::State::kServing; }, kRecovery, kPoll);
  const absl::Duration recovery = absl::Now() - healed;
  if (!back) {
    Fail(hole, absl::StrCat("the stream was not SERVING ", absl::FormatDuration(kRecovery),
                            " after the hole healed"));
    return absl::OkStatus();
  }
  recovery_.push_back(recovery);
  absl::StrAppend(detail, ", SERVING ", InSeconds(recovery), " after the heal");
  return absl::OkStatus();
}

void DbFaults::Report(std::ostream& out) const {
  int holes = 0;
  std::vector<absl::Duration> detection;
  for (const auto& [kind, n] : holes_) holes += n;
  for (const auto& [kind, times] : detection_) {
    detection.insert(detection.end(), times.begin(), times.end());
  }
  auto count = [this](FaultKind kind) {
    auto it = holes_.find(kind);
    return it == holes_.end() ? 0 : it->second;
  };
  out << absl::StrFormat(
      "db black holes: %d injected (both %d, to-pg %d, from-pg %d, at connect %d; %d of 7-12 s, "
      "%d of 0.5-4.5 s), detection p50/max %s s over %d long holes (bound: wal_sender_timeout "
      "%s + status interval %s = %s)\n",
      holes, count(FaultKind::kDbBlackhole), count(FaultKind::kDbBlackholeToPg),
      count(FaultKind::kDbBlackholeFromPg), count(FaultKind::kDbBlackholeConnect), long_holes_,
      short_holes_, P50Max(detection), detection.size(), absl::FormatDuration(kWalSenderTimeout),
      absl::FormatDuration(kStatusInterval), absl::FormatDuration(kDetectionBound));
  for (const auto& [kind, times] : detection_) {
    out << absl::StrFormat("  detection %-22s p50/max %s s over %d\n", FaultName(kind),
                           P50Max(times), times.size());
  }
  out << absl::StrFormat("  short holes (no reset, no kill) the stream reported anyway: %d of %d\n",
                         short_noticed_, short_established_);
  out << absl::StrFormat("  SERVING again after the heal: p50/max %s s over %d holes\n",
                         P50Max(recovery_), recovery_.size());
  out << absl::StrFormat(
      "  SIGTERM inside a black hole: %d, exit p50/max %s s (bound: shutdown_timeout %s + 2s)\n",
      sigterm_exits_.size(), P50Max(sigterm_exits_), absl::FormatDuration(kShutdownTimeout));
  out << absl::StrFormat("db resets: %d\n", resets_);
}

}  // namespace walfeed::chaos
