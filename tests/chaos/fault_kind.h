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
};

const std::vector<FaultKind>& AllFaultKinds();
std::string FaultName(FaultKind kind);
std::optional<FaultKind> ParseFaultName(const std::string& name);

}  // namespace walfeed::chaos

#endif  // WALFEED_TESTS_CHAOS_FAULT_KIND_H_
