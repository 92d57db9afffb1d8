// DbFaults: faults between walfeed-server and PostgreSQL. A second TcpProxy
// sits in walfeed's conninfo. The writer, the markers and the verifier's own
// queries go to PostgreSQL directly, so only walfeed is cut off, and every change
// committed during a fault must still arrive once the path heals.
//
// In this proxy walfeed is the client and PostgreSQL the server: kToServer is
// walfeed -> PostgreSQL, kToClient is PostgreSQL -> walfeed. A stall is a black
// hole at the application level. The proxy stops reading but the kernels still
// acknowledge, so TCP keepalives and tcp_user_timeout do not end it. These must:
//   - walfeed's silence bound: nothing heard for wal_sender_timeout, with a
//     reply-requesting probe after every quiet status interval;
//   - for a hole towards PostgreSQL only, the walsender's own wal_sender_timeout
//     (it hears nothing and closes, and that close passes through);
//   - connect_timeout, for a connect that meets the hole.
//
// Black holes last 0.5-4.5 s (shorter than wal_sender_timeout: walfeed may not
// notice) or 7-12 s (at least 1 s past the detection bound: the stream must
// turn NOT_SERVING, and the time it took is recorded). One in three black holes
// also SIGTERMs walfeed-server inside the hole, after the detection for a long
// one. The server must exit within kExitBound, and the process started next
// begins inside the hole, so its first connect meets the hole too.
//
// The stream's health is polled throughout a hole. Each of these checks fails
// the run when it does not hold:
//   detected    a long hole turned the stream NOT_SERVING within the bound + 1 s;
//               a connect hole turned it NOT_SERVING at all;
//   no revival  once NOT_SERVING (or restarted), the stream did not claim
//               SERVING again before the hole healed: nothing can stream through;
//   recovery    the stream was SERVING again within 90 s of the heal.
#ifndef WALFEED_TESTS_CHAOS_DB_FAULTS_H_
#define WALFEED_TESTS_CHAOS_DB_FAULTS_H_

#include <functional>
#include <iosfwd>
#include <map>
#include <memory>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "tests/chaos/fault_kind.h"
#include "tests/chaos/stream_health.h"
#include "tests/chaos/tcp_proxy.h"

namespace walfeed::chaos {

// Set on the run's cluster: small, so a silent PostgreSQL is noticed in seconds.
inline constexpr absl::Duration kWalSenderTimeout = absl::Seconds(5);
// How long the stream may take to report a black hole. walfeed sends a status
// update every min(1 s, wal_sender_timeout / 2) (stream_reader.h). After a
// quiet interval the update asks for a reply, and after wal_sender_timeout with
// nothing heard the session ends.
inline constexpr absl::Duration kStatusInterval = absl::Seconds(1);
inline const absl::Duration kDetectionBound = kWalSenderTimeout + kStatusInterval;

bool IsDbFault(FaultKind kind);

// What a db fault needs from the run, to act on walfeed-server.
struct ServerControl {
  std::function<int()> port;   // The live server's gRPC port.
  std::function<void()> kill;  // SIGKILL.
  // SIGTERM; how long the exit took. The run checks it against kExitBound.
  std::function<absl::StatusOr<absl::Duration>()> terminate;
  std::function<absl::Status()> start;  // Start a new server process.
};

class DbFaults {
 public:
  // Starts the proxy towards PostgreSQL on `pg_port`.
  static absl::StatusOr<std::unique_ptr<DbFaults>> Start(int pg_port);

  // `conninfo` (PostgreSQL's) redirected through the proxy.
  std::string ConnInfo(const std::string& conninfo) const;

  // Injects `kind` (IsDbFault), drawing its shape from `rng`. Returns once the
  // path has healed and the stream is SERVING again (or the wait gave up).
  absl::Status Inject(FaultKind kind, std::mt19937_64& rng, ServerControl& server,
                      std::string* detail);

  // Violations of the checks above, with the kind and the moment.
  const std::vector<std::string>& failures() const { return failures_; }
  // The summary lines of the report.
  void Report(std::ostream& out) const;

 private:
  // One black hole, drawn before it starts so that a seed replays its shape.
  struct Hole {
    FaultKind kind;
    absl::Duration length;
    bool is_long = false;
    bool kill_server = false;  // A connect hole: kill the server, not reset its connections.
    bool sigterm = false;
    double sigterm_at = 0;  // A fraction of the hole (a long hole: at the detection).
  };
  // What polling the stream's health saw during one hole.
  struct Sighting {
    std::optional<absl::Duration> not_serving;  // From the start, the first server only.
    std::optional<absl::Duration> revived;      // SERVING again after that, before the heal.
  };

  explicit DbFaults(std::unique_ptr<TcpProxy> proxy) : proxy_(std::move(proxy)) {}
  Hole Draw(FaultKind kind, std::mt19937_64& rng) const;
  absl::Status BlackHole(const Hole& hole, ServerControl& server, std::string* detail);
  StreamHealth::State Health(ServerControl& server);
  void Fail(const Hole& hole, const std::string& what);

  std::unique_ptr<TcpProxy> proxy_;
  std::unique_ptr<StreamHealth> health_;
  int points_ = 0;  // Db faults injected so far, to name one in a failure.
  std::vector<std::string> failures_;
  // Figures for the report.
  std::map<FaultKind, int> holes_;
  int long_holes_ = 0;
  int short_holes_ = 0;
  int short_established_ = 0;  // Short holes of established connections (not connect).
  int short_noticed_ = 0;      // Of those, the ones the stream reported anyway.
  int resets_ = 0;
  std::vector<absl::Duration> sigterm_exits_;  // SIGTERM inside a hole: time to exit.
  std::map<FaultKind, std::vector<absl::Duration>> detection_;  // Long holes only.
  std::vector<absl::Duration> recovery_;                        // Heal to SERVING.
};

// The p50 and the maximum of `values`, in seconds with one decimal ("5.1/5.9"),
// "-" when there are none.
std::string P50Max(std::vector<absl::Duration> values);

}  // namespace walfeed::chaos

#endif  // WALFEED_TESTS_CHAOS_DB_FAULTS_H_
