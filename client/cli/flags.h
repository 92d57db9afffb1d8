// Command line of the `walfeed` CLI: parsing (a pure function of argv, unit-
// tested), the help texts and the exit codes.
//
// Exit codes (documented in every --help):
//   0  success (also: the reader of stdout went away, e.g. `| head`)
//   1  runtime error (server unreachable past --timeout, handler/output error, ...)
//   2  usage error, or the server rejected an argument (INVALID_ARGUMENT,
//      OUT_OF_RANGE for --start-after)
//   3  data loss: the stream's slot was lost, dropped or recreated
//   4  not found or not permitted: unknown stream, missing or refused token
#ifndef WALFEED_CLIENT_CLI_FLAGS_H_
#define WALFEED_CLIENT_CLI_FLAGS_H_

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "walfeed/event_id.h"
#include "walfeed/v1/change_stream.pb.h"

namespace walfeed::cli {

inline constexpr int kExitOk = 0;
inline constexpr int kExitRuntime = 1;
inline constexpr int kExitUsage = 2;
inline constexpr int kExitDataLoss = 3;
inline constexpr int kExitNotFound = 4;
// `status` only: the answer shows a stream that failed (it needs an operator).
inline constexpr int kExitStreamFailed = 5;

// The exit code for how a command ended.
int ExitCodeFor(const absl::Status& status);

// Flags every command takes.
struct CommonFlags {
  std::string server = "127.0.0.1:50051";
  bool tls = false;  // Set by --tls or any --tls-* flag.
  std::string tls_ca;
  std::string tls_cert;
  std::string tls_key;
  std::string tls_server_name;
  std::string token_file;  // Otherwise $WALFEED_TOKEN.
  bool follow_active = false;  // SubscriberOptions::follow_active.
};

enum class Format { kJson, kText };

struct TailFlags {
  CommonFlags common;
  std::string stream;
  std::string consumer;
  std::vector<std::string> tables;
  std::vector<walfeed::v1::Operation> operations;
  bool ack = false;
  uint64_t count = 0;  // 0: no limit.
  std::optional<EventId> until;
  std::string start_after;
  walfeed::v1::StartPosition start = walfeed::v1::START_POSITION_UNSPECIFIED;
  Format format = Format::kJson;
  absl::Duration timeout = absl::InfiniteDuration();
  uint32_t batch = 0;
};

struct StatusFlags {
  CommonFlags common;
  std::string stream;
  bool json = false;  // --format json: GetStatusResponse as one JSON object.
  absl::Duration timeout = absl::Seconds(30);
};

struct RemoveConsumerFlags {
  CommonFlags common;
  std::string stream;
  std::string consumer;
  bool yes = false;  // --yes: the caller knows what removing means.
  absl::Duration timeout = absl::Seconds(30);
};

struct ResetConsumerFlags {
  CommonFlags common;
  std::string stream;
  std::string consumer;
  std::string to;  // An event id, or "" with to_head.
  bool to_head = false;
  bool yes = false;
  absl::Duration timeout = absl::Seconds(30);
};

// walfeed backfill start|status|cancel.
struct BackfillFlags {
  CommonFlags common;
  enum class Action { kStart, kStatus, kCancel } action = Action::kStatus;
  std::string stream;
  std::string consumer;  // start
  std::string table;     // start: schema.table
  std::string where;     // start
  uint32_t chunk_rows = 0;  // start; 0: the server's default
  std::string id;        // status (optional: every backfill), cancel
  bool wait = false;     // start: wait until it is done, printing progress
  bool json = false;
  absl::Duration timeout = absl::Seconds(30);
};

enum class Command {
  kHelp,
  kVersion,
  kTail,
  kStatus,
  kRemoveConsumer,
  kResetConsumer,
  kBackfill
};

struct Invocation {
  Command command = Command::kHelp;
  std::string help;  // For kHelp: the text to print.
  TailFlags tail;
  StatusFlags status;
  RemoveConsumerFlags remove_consumer;
  ResetConsumerFlags reset_consumer;
  BackfillFlags backfill;
};

// A usage error: InvalidArgument whose message says what is wrong; UsageFor
// gives the text to show under it.
absl::StatusOr<Invocation> ParseCommandLine(const std::vector<std::string>& args);
// Where a usage error points: "walfeed <command> --help" for a command that
// has its own help, else "walfeed --help".
std::string HelpCommandFor(const std::vector<std::string>& args);

// Help texts.
std::string MainUsage();
std::string TailUsage();
std::string StatusUsage();
std::string RemoveConsumerUsage();
std::string ResetConsumerUsage();
std::string BackfillUsage();
// The usage text for the command named first in `args` (MainUsage if none).
std::string UsageFor(const std::vector<std::string>& args);

}  // namespace walfeed::cli

#endif  // WALFEED_CLIENT_CLI_FLAGS_H_
