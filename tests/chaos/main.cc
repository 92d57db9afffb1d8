// walfeed_chaos: the crash and fault verifier (see chaos_run.h), and, as
// `walfeed_chaos consumer ...`, the consumer child it starts (consumer_child.h).
//
//   walfeed_chaos --points N [--seed S] [--faults a,b,...] [--no-slot-loss]
//                 [--workdir DIR] [--keep]
//
// Without --seed a seed is drawn and printed; --seed S replays its fault schedule.
#include <iostream>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"
#include "tests/chaos/chaos_run.h"
#include "tests/chaos/consumer_child.h"

namespace {

constexpr char kUsage[] =
    "usage: walfeed_chaos --points N [--seed S] [--faults KIND,...] [--no-slot-loss]\n"
    "                     [--workdir DIR] [--keep]\n"
    "fault kinds: server-kill9 server-sigterm pg-restart-fast pg-restart-immediate\n"
    "             consumer-kill9 net-reset net-stall net-cut-to-server net-cut-to-client\n"
    "             consumer-stall lagging-consumer takeover\n"
    "             db-blackhole db-blackhole-to-pg db-blackhole-from-pg db-blackhole-connect\n"
    "             db-reset\n";

}  // namespace

int main(int argc, char** argv) {
  std::vector<std::string> args(argv + 1, argv + argc);
  if (!args.empty() && args[0] == "consumer") {
    return walfeed::chaos::RunConsumerChild({args.begin() + 1, args.end()});
  }
  walfeed::chaos::RunOptions options;
  options.seed = std::random_device{}();
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& arg = args[i];
    auto value = [&]() -> std::string { return i + 1 < args.size() ? args[++i] : ""; };
    bool ok = true;
    if (arg == "--points") {
      ok = absl::SimpleAtoi(value(), &options.points) && options.points >= 0;
    } else if (arg == "--seed") {
      ok = absl::SimpleAtoi(value(), &options.seed);
    } else if (arg == "--faults") {
      for (absl::string_view name : absl::StrSplit(value(), ',', absl::SkipEmpty())) {
        auto kind = walfeed::chaos::ParseFaultName(std::string(name));
        if (!kind) ok = false;
        else options.faults.push_back(*kind);
      }
    } else if (arg == "--no-slot-loss") {
      options.slot_loss = false;
    } else if (arg == "--workdir") {
      options.workdir = value();
    } else if (arg == "--keep") {
      options.keep = true;
    } else if (arg == "--help" || arg == "-h") {
      std::cout << kUsage;
      return 0;
    } else {
      ok = false;
    }
    if (!ok) {
      std::cerr << "walfeed_chaos: bad argument " << arg << "\n" << kUsage;
      return 2;
    }
  }
  return walfeed::chaos::RunChaos(options);
}
