#include "tests/chaos/fault_kind.h"

namespace walfeed::chaos {

const std::vector<FaultKind>& AllFaultKinds() {
  static const auto* kinds = new std::vector<FaultKind>{
      FaultKind::kServerKill9,    FaultKind::kServerSigterm,   FaultKind::kPgRestartFast,
      FaultKind::kPgRestartImmediate, FaultKind::kConsumerKill9, FaultKind::kNetReset,
      FaultKind::kNetStall,       FaultKind::kNetCutToServer,  FaultKind::kNetCutToClient,
      FaultKind::kConsumerStall,  FaultKind::kLaggingConsumer, FaultKind::kTakeover,
      FaultKind::kDbBlackhole,    FaultKind::kDbBlackholeToPg, FaultKind::kDbBlackholeFromPg,
      FaultKind::kDbBlackholeConnect, FaultKind::kDbReset};
  return *kinds;
}

std::string FaultName(FaultKind kind) {
  switch (kind) {
    case FaultKind::kServerKill9: return "server-kill9";
    case FaultKind::kServerSigterm: return "server-sigterm";
    case FaultKind::kPgRestartFast: return "pg-restart-fast";
    case FaultKind::kPgRestartImmediate: return "pg-restart-immediate";
    case FaultKind::kConsumerKill9: return "consumer-kill9";
    case FaultKind::kNetReset: return "net-reset";
    case FaultKind::kNetStall: return "net-stall";
    case FaultKind::kNetCutToServer: return "net-cut-to-server";
    case FaultKind::kNetCutToClient: return "net-cut-to-client";
    case FaultKind::kConsumerStall: return "consumer-stall";
    case FaultKind::kLaggingConsumer: return "lagging-consumer";
    case FaultKind::kTakeover: return "takeover";
    case FaultKind::kDbBlackhole: return "db-blackhole";
    case FaultKind::kDbBlackholeToPg: return "db-blackhole-to-pg";
    case FaultKind::kDbBlackholeFromPg: return "db-blackhole-from-pg";
    case FaultKind::kDbBlackholeConnect: return "db-blackhole-connect";
    case FaultKind::kDbReset: return "db-reset";
  }
  return "?";
}

std::optional<FaultKind> ParseFaultName(const std::string& name) {
  for (FaultKind kind : AllFaultKinds()) {
    if (FaultName(kind) == name) return kind;
  }
  return std::nullopt;
}

}  // namespace walfeed::chaos
