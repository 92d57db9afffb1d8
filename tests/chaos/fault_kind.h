// The faults a chaos point can inject, and their names in reports and flags.
#ifndef WALFEED_TESTS_CHAOS_FAULT_KIND_H_
#define WALFEED_TESTS_CHAOS_FAULT_KIND_H_

#include <optional>
#include <string>
#include <vector>

namespace walfeed::chaos {

enum class FaultKind {
  kServerKill9,        // SIGKILL walfeed-server, restart it after a random outage.
  kServerSigterm,      // SIGTERM: must exit 0 within shutdown_timeout, then restart.
  kPgRestartFast,      // pg_ctl restart -m fast.
  kPgRestartImmediate, // pg_ctl restart -m immediate (crash recovery).
  kConsumerKill9,      // SIGKILL a consumer child, start a new one.
  kNetReset,           // The proxy resets every connection.
  kNetStall,           // The proxy stops moving bytes both ways for a while.
  kNetCutToServer,     // Client->server bytes stop (acks in flight), then reset.
  kNetCutToClient,     // Server->client bytes stop, then reset.
  kConsumerStall,      // A consumer's handler blocks for a while.
  kLaggingConsumer,    // The slow consumer stalls long while the other runs on.
  kTakeover,           // A new process of a consumer takes its session over.
  // Between walfeed-server and PostgreSQL (db_faults.h): a black hole of
  // 0.5-4.5 s (shorter than wal_sender_timeout) or 7-12 s (longer than the
  // detection bound), sometimes with a SIGTERM of the server inside it.
  kDbBlackhole,        // Both directions go dark.
  kDbBlackholeToPg,    // Only walfeed -> PostgreSQL goes dark.
  kDbBlackholeFromPg,  // Only PostgreSQL -> walfeed goes dark.
  kDbBlackholeConnect, // Both dark, then walfeed's connections are reset or the
                       // server is killed: the reconnect meets the black hole.
  kDbReset,            // walfeed's PostgreSQL connections are reset (RST).
};

const std::vector<FaultKind>& AllFaultKinds();
std::string FaultName(FaultKind kind);
std::optional<FaultKind> ParseFaultName(const std::string& name);

}  // namespace walfeed::chaos

#endif  // WALFEED_TESTS_CHAOS_FAULT_KIND_H_
