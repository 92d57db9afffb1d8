#include "client/cli/flags.h"

#include <functional>
#include <map>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "client/cli/format.h"

namespace walfeed::cli {
namespace {

constexpr char kCommonHelp[] =
    "Connection (every command):\n"
    "  --server HOST:PORT     walfeed-server address (default 127.0.0.1:50051)\n"
    "  --tls                  use TLS with the system's root certificates\n"
    "  --tls-ca FILE          use TLS, trusting this CA (PEM)\n"
    "  --tls-cert FILE        client certificate for mutual TLS (PEM; with --tls-key)\n"
    "  --tls-key FILE         its private key (PEM)\n"
    "  --tls-server-name NAME verify the server's certificate for NAME\n"
    "  --token-file FILE      bearer token (first line); default: $WALFEED_TOKEN\n"
    "  --follow-active        --server names every instance of an active/standby pair\n"
    "                         (ipv4:A:PORT,B:PORT or a DNS name with several addresses):\n"
    "                         calls go to the one that streams the stream, also after a\n"
    "                         failover (gRPC health checking)\n"
    "  --help                 this help\n"
    "A server that cannot be reached is reported in one line: what happened (connection\n"
    "refused, TLS handshake failed, ...) and what to check. Set GRPC_VERBOSITY (e.g.\n"
    "DEBUG) to see gRPC's own log as well.\n";

constexpr char kExitHelp[] =
    "Exit codes: 0 ok; 1 runtime error; 2 usage error (or the server rejected an\n"
    "argument); 3 data loss (the stream's slot was lost); 4 not found or not\n"
    "permitted (unknown stream, missing or refused token); 5 (status only) a\n"
    "stream shown has failed.\n";

using Setter = std::function<absl::Status(const std::string& value)>;

struct FlagSet {
  std::map<std::string, Setter> with_value;
  std::map<std::string, std::function<void()>> switches;
};

void AddCommon(CommonFlags* common, FlagSet* flags) {
  flags->with_value["--server"] = [common](const std::string& v) {
    common->server = v;
    return absl::OkStatus();
  };
  flags->switches["--tls"] = [common] { common->tls = true; };
  flags->switches["--follow-active"] = [common] { common->follow_active = true; };
  auto tls_file = [common](std::string* field) {
    return [common, field](const std::string& v) {
      *field = v;
      common->tls = true;
      return absl::OkStatus();
    };
  };
  flags->with_value["--tls-ca"] = tls_file(&common->tls_ca);
  flags->with_value["--tls-cert"] = tls_file(&common->tls_cert);
  flags->with_value["--tls-key"] = tls_file(&common->tls_key);
  flags->with_value["--tls-server-name"] = tls_file(&common->tls_server_name);
  flags->with_value["--token-file"] = [common](const std::string& v) {
    common->token_file = v;
    return absl::OkStatus();
  };
}

absl::Status Usage(absl::string_view why) { return absl::InvalidArgumentError(why); }

absl::StatusOr<absl::Duration> ParseSeconds(absl::string_view flag, const std::string& value) {
  double seconds = 0;
  if (!absl::SimpleAtod(value, &seconds) || !(seconds > 0)) {
    return Usage(absl::StrCat(flag, " needs a positive number of seconds, got \"", value, "\""));
  }
  return absl::Seconds(seconds);
}

// Parses `args` (after the command name) against `flags`. Returns kHelp text
// through *help when --help is given.
absl::Status ParseFlags(const std::vector<std::string>& args, size_t first, const FlagSet& flags,
                        bool* help) {
  for (size_t i = first; i < args.size(); ++i) {
    std::string arg = args[i];
    if (arg == "--help" || arg == "-h") {
      *help = true;
      return absl::OkStatus();
    }
    std::string value;
    bool inline_value = false;
    if (const size_t eq = arg.find('='); absl::StartsWith(arg, "--") && eq != std::string::npos) {
      value = arg.substr(eq + 1);
      arg = arg.substr(0, eq);
      inline_value = true;
    }
    if (auto it = flags.switches.find(arg); it != flags.switches.end()) {
      if (inline_value) return Usage(absl::StrCat(arg, " takes no value"));
      it->second();
      continue;
    }
    auto it = flags.with_value.find(arg);
    if (it == flags.with_value.end()) {
      return Usage(absl::StrCat("unknown argument \"", arg, "\""));
    }
    if (!inline_value) {
      if (i + 1 >= args.size()) return Usage(absl::StrCat(arg, " needs a value"));
      value = args[++i];
    }
    if (absl::Status set = it->second(value); !set.ok()) return set;
  }
  return absl::OkStatus();
}

// "a, b,,c" -> {"a", "b", "c"}.
std::vector<std::string> List(const std::string& value) {
  std::vector<std::string> items;
  for (absl::string_view item : absl::StrSplit(value, ',')) {
    item = absl::StripAsciiWhitespace(item);
    if (!item.empty()) items.emplace_back(item);
  }
  return items;
}

// A flag whose value is stored as given.
Setter Text(std::string* field) {
  return [field](const std::string& v) {
    *field = v;
    return absl::OkStatus();
  };
}

// --timeout SECONDS.
Setter Timeout(absl::Duration* field) {
  return [field](const std::string& v) {
    absl::StatusOr<absl::Duration> timeout = ParseSeconds("--timeout", v);
    if (!timeout.ok()) return timeout.status();
    *field = *timeout;
    return absl::OkStatus();
  };
}

}  // namespace

int ExitCodeFor(const absl::Status& status) {
  switch (status.code()) {
    case absl::StatusCode::kOk:
      return kExitOk;
    case absl::StatusCode::kInvalidArgument:
    case absl::StatusCode::kOutOfRange:
      return kExitUsage;
    case absl::StatusCode::kDataLoss:
      return kExitDataLoss;
    case absl::StatusCode::kNotFound:
    case absl::StatusCode::kPermissionDenied:
    case absl::StatusCode::kUnauthenticated:
      return kExitNotFound;
    default:
      return kExitRuntime;
  }
}

std::string MainUsage() {
  return absl::StrCat(
      "usage: walfeed <command> [flags]\n"
      "\n"
      "Commands:\n"
      "  tail     print a stream's change events (one JSON object per line)\n"
      "  status   show streams, slots and consumers\n"
      "  remove-consumer  forget a consumer that is gone for good\n"
      "  reset-consumer   move a consumer's checkpoint forward (skip events)\n"
      "  backfill start|status|cancel   a table's current rows for one consumer\n"
      "  help     this help; `walfeed <command> --help` for a command's flags\n"
      "  version  print the version\n"
      "\n",
      kCommonHelp, "\n", kExitHelp);
}

std::string TailUsage() {
  return absl::StrCat(
      "usage: walfeed tail --stream S [--consumer C] [flags]\n"
      "\n"
      "Prints a stream's events, one per line, as they arrive.\n"
      "\n"
      "Without --consumer the tail is ephemeral: it starts at the newest event the\n"
      "server holds (or after --start-after), keeps no checkpoint, never holds the\n"
      "stream back for anyone, and ends (exit 1) if it falls behind what the server\n"
      "still holds. Reconnects resume after the last event printed.\n"
      "\n"
      "With --consumer C it subscribes as durable consumer C: it resumes after C's\n"
      "checkpoint when the server restarts. Without --ack nothing is acknowledged:\n"
      "the checkpoint stays and the events come again next time (and a consumer\n"
      "that never acked holds nothing once it disconnects). A consumer has one\n"
      "session at a time, so tailing takes the consumer over from whoever has it:\n"
      "use a consumer name of your own.\n"
      "\n"
      "  --stream S             the stream (required)\n"
      "  --consumer C           a durable consumer name (1-63 of A-Za-z0-9_.-)\n"
      "  --start earliest|latest  where a consumer new to the server starts: the oldest\n"
      "                         event held (default) or after the newest\n"
      "  --tables LIST          only these schema.table globs, comma-separated (a.b,c.*)\n"
      "  --ops LIST             only these operations: insert,update,delete,truncate,message,\n"
      "                         read (a backfill's rows)\n"
      "  --ack                  ack each event once it is printed (and flushed), and what\n"
      "                         --tables/--ops left out (needs --consumer)\n"
      "  --count N              exit after printing N events\n"
      "  --until ID             exit after the first event at or beyond ID (printed if\n"
      "                         it is ID itself)\n"
      "  --start-after ID       start after ID instead of the checkpoint (at or beyond it)\n"
      "  --format json|text     json (default): see below; text: \"<id> <OP> <table> col='v' ...\"\n"
      "  --timeout SECONDS      give up after this long (exit 1 if it never subscribed or\n"
      "                         --count/--until was not reached, 0 otherwise). Until then\n"
      "                         a server that cannot be reached is retried (each 'waiting:'\n"
      "                         line says why); TLS flags the server cannot work with end\n"
      "                         the tail at once (exit 1)\n"
      "  --batch N              at most N events per server batch\n"
      "\n"
      "JSON fields: id, commit_lsn (X/Y text), index, xid, commit_time, op, schema, table,\n"
      "columns and old ([{name, type, type_oid, key, kind, value}]), old_kind,\n"
      "last_in_transaction, transaction_event_count (last event only), truncate,\n"
      "message. kind is text, null, unchanged_toast or raw; raw values (not UTF-8 in\n"
      "the database's encoding) come as value_base64. Progress goes to stderr.\n"
      "\n",
      kCommonHelp, "\n", kExitHelp);
}

std::string StatusUsage() {
  return absl::StrCat(
      "usage: walfeed status [--stream S] [flags]\n"
      "\n"
      "Prints each stream's state, slot (wal_status, active, confirmed_flush_lsn,\n"
      "retained WAL), the server's WAL position, and its consumers with their\n"
      "checkpoints, sessions, unacked events and lag in bytes.\n"
      "\n"
      "  --stream S             only this stream (default: every stream you may see)\n"
      "  --format table|json    table (default), or the GetStatusResponse as one JSON\n"
      "                         object (proto3 JSON names; 64-bit numbers as strings)\n"
      "  --timeout SECONDS      how long to wait for the answer (default 30); a server\n"
      "                         that refuses the connection or fails the handshake is\n"
      "                         reported after about a second\n"
      "\n"
      "Exits 5 when a stream shown has failed (state FAILED: it stopped on an error\n"
      "that needs an operator, which its error line names with the remedy), so that\n"
      "`walfeed status` serves as a health check; 0 while every stream shown is\n"
      "streaming, connecting or standing by.\n"
      "\n",
      kCommonHelp, "\n", kExitHelp);
}

std::string RemoveConsumerUsage() {
  return absl::StrCat(
      "usage: walfeed remove-consumer --stream S --consumer C --yes [flags]\n"
      "\n"
      "Forgets consumer C of stream S on the server: its durable checkpoint is\n"
      "deleted, its session (if any) ends, and it no longer holds back the stream's\n"
      "buffer or the replication slot, so PostgreSQL may discard the WAL of every\n"
      "change C has not acked (unless C was the stream's only consumer: a stream\n"
      "without consumers keeps everything for the next one). For consumers that are\n"
      "gone for good (NOT_FOUND, exit 4, on a retry means already removed); a consumer that\n"
      "subscribes under the same name later is a new one. Needs a token with the\n"
      "admin right when the server checks tokens. Prints the checkpoint C had.\n"
      "\n"
      "  --stream S             the stream (required)\n"
      "  --consumer C           the consumer to forget (required)\n"
      "  --yes                  required: confirms that C's unacked changes may be lost\n"
      "  --timeout SECONDS      how long to wait for the answer (default 30); a server\n"
      "                         that refuses the connection or fails the handshake is\n"
      "                         reported after about a second\n"
      "\n",
      kCommonHelp, "\n", kExitHelp);
}

std::string ResetConsumerUsage() {
  return absl::StrCat(
      "usage: walfeed reset-consumer --stream S --consumer C (--to ID | --to-head) --yes\n"
      "       [flags]\n"
      "\n"
      "Moves consumer C's checkpoint forward: to the last event at or below ID, or to\n"
      "the newest event the server holds. The events in between are never delivered\n"
      "to C (for example an event its handler cannot process). The new checkpoint is\n"
      "stored first; C's session then ends and it resumes after the new checkpoint.\n"
      "Checkpoints only move forward. Needs a token with the admin right when the\n"
      "server checks tokens. Prints the checkpoint before and after.\n"
      "\n"
      "  --stream S             the stream (required)\n"
      "  --consumer C           the consumer (required)\n"
      "  --to ID                the event id to move to (X/Y:N)\n"
      "  --to-head              instead: the newest event the server holds\n"
      "  --yes                  required: confirms that C skips the events in between\n"
      "  --timeout SECONDS      how long to wait for the answer (default 30); a server\n"
      "                         that refuses the connection or fails the handshake is\n"
      "                         reported after about a second\n"
      "\n",
      kCommonHelp, "\n", kExitHelp);
}

std::string BackfillUsage() {
  return absl::StrCat(
      "usage: walfeed backfill start --stream S [--consumer C] --table SCHEMA.TABLE\n"
      "                              [--where SQL] [--chunk-rows N] [--wait] [flags]\n"
      "       walfeed backfill status --stream S [--id ID] [flags]\n"
      "       walfeed backfill cancel --stream S --id ID [flags]\n"
      "\n"
      "A backfill delivers the current rows of a published table to one durable\n"
      "consumer (or to every consumer) as READ events, between its change events,\n"
      "while the stream keeps flowing; no other consumer sees them. Rows are read\n"
      "in key order in chunks; after a restart the backfill resumes after the last\n"
      "chunk the consumer acked. Apply READ and change events by key, in order: the\n"
      "result is the table. A stream with `snapshot: initial` starts with one\n"
      "backfill per published table for every consumer (status lists them). See\n"
      "docs/snapshots.md. start and cancel need a token with the admin right when\n"
      "the server checks tokens.\n"
      "\n"
      "  --stream S             the stream (required)\n"
      "  --consumer C           start: the consumer receiving the rows (it must have\n"
      "                         subscribed once); without it, every consumer\n"
      "  --table SCHEMA.TABLE   start: the table (must be in the stream's publications\n"
      "                         and have a primary key or unique not-null key)\n"
      "  --where SQL            start: only rows where this predicate holds\n"
      "  --chunk-rows N         start: rows per chunk (default: the server's, 10000)\n"
      "  --wait                 start: print progress every second until it ends\n"
      "  --id ID                status: one backfill (default: all); cancel: required\n"
      "  --format table|json    one line per backfill (default), or the response as\n"
      "                         JSON (proto3 JSON names; 64-bit numbers as strings)\n"
      "  --timeout SECONDS      how long to wait for each answer (default 30)\n"
      "\n",
      kCommonHelp, "\n", kExitHelp);
}

namespace {

// The commands with a help text of their own, in the order the "unknown
// command" message lists them. ParseCommandLine dispatches on the same names.
struct CommandHelp {
  const char* name;
  std::string (*usage)();
};
constexpr CommandHelp kCommandHelp[] = {
    {"tail", TailUsage},
    {"status", StatusUsage},
    {"remove-consumer", RemoveConsumerUsage},
    {"reset-consumer", ResetConsumerUsage},
    {"backfill", BackfillUsage},
};

const CommandHelp* FindCommandHelp(const std::vector<std::string>& args) {
  if (args.empty()) return nullptr;
  for (const CommandHelp& command : kCommandHelp) {
    if (args[0] == command.name) return &command;
  }
  return nullptr;
}

}  // namespace

std::string UsageFor(const std::vector<std::string>& args) {
  const CommandHelp* command = FindCommandHelp(args);
  return command == nullptr ? MainUsage() : command->usage();
}

absl::StatusOr<Invocation> ParseCommandLine(const std::vector<std::string>& args) {
  Invocation invocation;
  if (args.empty()) return Usage("no command given");
  const std::string& command = args[0];
  if (command == "help" || command == "--help" || command == "-h") {
    invocation.command = Command::kHelp;
    invocation.help = args.size() > 1 ? UsageFor({args[1]}) : MainUsage();
    return invocation;
  }
  if (command == "version" || command == "--version") {
    invocation.command = Command::kVersion;
    return invocation;
  }
  bool help = false;
  if (command == "tail") {
    TailFlags& tail = invocation.tail;
    FlagSet flags;
    AddCommon(&tail.common, &flags);
    flags.with_value["--stream"] = Text(&tail.stream);
    flags.with_value["--consumer"] = Text(&tail.consumer);
    flags.with_value["--tables"] = [&tail](const std::string& v) {
      for (std::string& table : List(v)) tail.tables.push_back(std::move(table));
      return absl::OkStatus();
    };
    flags.with_value["--ops"] = [&tail](const std::string& v) {
      for (const std::string& name : List(v)) {
        absl::StatusOr<walfeed::v1::Operation> op = ParseOperation(name);
        if (!op.ok()) return Usage(absl::StrCat("--ops: ", op.status().message()));
        tail.operations.push_back(*op);
      }
      return absl::OkStatus();
    };
    flags.switches["--ack"] = [&tail] { tail.ack = true; };
    flags.with_value["--start"] = [&tail](const std::string& v) {
      if (v == "earliest") {
        tail.start = walfeed::v1::START_POSITION_EARLIEST;
      } else if (v == "latest") {
        tail.start = walfeed::v1::START_POSITION_LATEST;
      } else {
        return Usage(absl::StrCat("--start must be earliest or latest, got \"", v, "\""));
      }
      return absl::OkStatus();
    };
    flags.with_value["--count"] = [&tail](const std::string& v) {
      if (!absl::SimpleAtoi(v, &tail.count) || tail.count == 0) {
        return Usage(absl::StrCat("--count needs a positive integer, got \"", v, "\""));
      }
      return absl::OkStatus();
    };
    flags.with_value["--until"] = [&tail](const std::string& v) {
      absl::StatusOr<EventId> id = EventId::Parse(v);
      if (!id.ok()) return Usage(absl::StrCat("--until: ", id.status().message()));
      tail.until = *id;
      return absl::OkStatus();
    };
    flags.with_value["--start-after"] = [&tail](const std::string& v) {
      absl::StatusOr<EventId> id = EventId::Parse(v);
      if (!id.ok()) return Usage(absl::StrCat("--start-after: ", id.status().message()));
      tail.start_after = v;
      return absl::OkStatus();
    };
    flags.with_value["--format"] = [&tail](const std::string& v) {
      if (v == "json") {
        tail.format = Format::kJson;
      } else if (v == "text") {
        tail.format = Format::kText;
      } else {
        return Usage(absl::StrCat("--format must be json or text, got \"", v, "\""));
      }
      return absl::OkStatus();
    };
    flags.with_value["--timeout"] = Timeout(&tail.timeout);
    flags.with_value["--batch"] = [&tail](const std::string& v) {
      if (!absl::SimpleAtoi(v, &tail.batch) || tail.batch == 0) {
        return Usage(absl::StrCat("--batch needs a positive integer, got \"", v, "\""));
      }
      return absl::OkStatus();
    };
    if (absl::Status parsed = ParseFlags(args, 1, flags, &help); !parsed.ok()) return parsed;
    if (help) {
      invocation.command = Command::kHelp;
      invocation.help = TailUsage();
      return invocation;
    }
    if (tail.stream.empty()) return Usage("--stream is required");
    if (tail.consumer.empty() && tail.ack) {
      return Usage("--ack needs --consumer: an ephemeral tail keeps no checkpoint to ack");
    }
    if (tail.consumer.empty() && tail.start != walfeed::v1::START_POSITION_UNSPECIFIED) {
      return Usage("--start needs --consumer: an ephemeral tail always starts at the newest "
                   "event (or after --start-after)");
    }
    invocation.command = Command::kTail;
    return invocation;
  }
  if (command == "status") {
    StatusFlags& status = invocation.status;
    FlagSet flags;
    AddCommon(&status.common, &flags);
    flags.with_value["--stream"] = Text(&status.stream);
    flags.with_value["--timeout"] = Timeout(&status.timeout);
    flags.with_value["--format"] = [&status](const std::string& v) {
      if (v != "table" && v != "json") {
        return Usage(absl::StrCat("--format must be table or json, got \"", v, "\""));
      }
      status.json = v == "json";
      return absl::OkStatus();
    };
    if (absl::Status parsed = ParseFlags(args, 1, flags, &help); !parsed.ok()) return parsed;
    if (help) {
      invocation.command = Command::kHelp;
      invocation.help = StatusUsage();
      return invocation;
    }
    invocation.command = Command::kStatus;
    return invocation;
  }
  if (command == "remove-consumer") {
    RemoveConsumerFlags& remove = invocation.remove_consumer;
    FlagSet flags;
    AddCommon(&remove.common, &flags);
    flags.with_value["--stream"] = Text(&remove.stream);
    flags.with_value["--consumer"] = Text(&remove.consumer);
    flags.with_value["--timeout"] = Timeout(&remove.timeout);
    flags.switches["--yes"] = [&remove] { remove.yes = true; };
    if (absl::Status parsed = ParseFlags(args, 1, flags, &help); !parsed.ok()) return parsed;
    if (help) {
      invocation.command = Command::kHelp;
      invocation.help = RemoveConsumerUsage();
      return invocation;
    }
    if (remove.stream.empty()) return Usage("--stream is required");
    if (remove.consumer.empty()) return Usage("--consumer is required");
    if (!remove.yes) {
      return Usage(absl::StrCat("removing consumer \"", remove.consumer,
                                "\" lets PostgreSQL discard every change it has not acked; "
                                "pass --yes to confirm"));
    }
    invocation.command = Command::kRemoveConsumer;
    return invocation;
  }
  if (command == "reset-consumer") {
    ResetConsumerFlags& reset = invocation.reset_consumer;
    FlagSet flags;
    AddCommon(&reset.common, &flags);
    flags.with_value["--stream"] = Text(&reset.stream);
    flags.with_value["--consumer"] = Text(&reset.consumer);
    flags.with_value["--to"] = [&reset](const std::string& v) {
      absl::StatusOr<EventId> id = EventId::Parse(v);
      if (!id.ok()) return Usage(absl::StrCat("--to: ", id.status().message()));
      reset.to = v;
      return absl::OkStatus();
    };
    flags.switches["--to-head"] = [&reset] { reset.to_head = true; };
    flags.with_value["--timeout"] = Timeout(&reset.timeout);
    flags.switches["--yes"] = [&reset] { reset.yes = true; };
    if (absl::Status parsed = ParseFlags(args, 1, flags, &help); !parsed.ok()) return parsed;
    if (help) {
      invocation.command = Command::kHelp;
      invocation.help = ResetConsumerUsage();
      return invocation;
    }
    if (reset.stream.empty()) return Usage("--stream is required");
    if (reset.consumer.empty()) return Usage("--consumer is required");
    if (reset.to.empty() == !reset.to_head) return Usage("give exactly one of --to ID and --to-head");
    if (!reset.yes) {
      return Usage(absl::StrCat("resetting consumer \"", reset.consumer,
                                "\" skips every event up to the new checkpoint for it; pass "
                                "--yes to confirm"));
    }
    invocation.command = Command::kResetConsumer;
    return invocation;
  }
  if (command == "backfill") {
    BackfillFlags& backfill = invocation.backfill;
    const std::string action = args.size() > 1 ? args[1] : "";
    if (action == "--help" || action == "-h") {
      invocation.command = Command::kHelp;
      invocation.help = BackfillUsage();
      return invocation;
    }
    if (action == "start") {
      backfill.action = BackfillFlags::Action::kStart;
    } else if (action == "status") {
      backfill.action = BackfillFlags::Action::kStatus;
    } else if (action == "cancel") {
      backfill.action = BackfillFlags::Action::kCancel;
    } else {
      return Usage(action.empty() ? "backfill needs an action: start, status or cancel"
                                  : absl::StrCat("unknown backfill action \"", action,
                                                 "\": expected start, status or cancel"));
    }
    FlagSet flags;
    AddCommon(&backfill.common, &flags);
    flags.with_value["--stream"] = Text(&backfill.stream);
    flags.with_value["--timeout"] = Timeout(&backfill.timeout);
    if (backfill.action == BackfillFlags::Action::kStart) {
      flags.with_value["--consumer"] = Text(&backfill.consumer);
      flags.with_value["--table"] = Text(&backfill.table);
      flags.with_value["--where"] = Text(&backfill.where);
      flags.with_value["--chunk-rows"] = [&backfill](const std::string& v) {
        if (!absl::SimpleAtoi(v, &backfill.chunk_rows) || backfill.chunk_rows == 0) {
          return Usage(absl::StrCat("--chunk-rows: \"", v, "\" is not a positive number"));
        }
        return absl::OkStatus();
      };
      flags.switches["--wait"] = [&backfill] { backfill.wait = true; };
    } else {
      flags.with_value["--id"] = Text(&backfill.id);
    }
    flags.with_value["--format"] = [&backfill](const std::string& v) {
      if (v != "table" && v != "json") return Usage("--format: expected table or json");
      backfill.json = v == "json";
      return absl::OkStatus();
    };
    if (absl::Status parsed = ParseFlags(args, 2, flags, &help); !parsed.ok()) return parsed;
    if (help) {
      invocation.command = Command::kHelp;
      invocation.help = BackfillUsage();
      return invocation;
    }
    if (backfill.stream.empty()) return Usage("--stream is required");
    if (backfill.action == BackfillFlags::Action::kStart) {
      if (backfill.table.empty()) return Usage("--table is required (schema.table)");
    }
    if (backfill.action == BackfillFlags::Action::kCancel && backfill.id.empty()) {
      return Usage("--id is required");
    }
    invocation.command = Command::kBackfill;
    return invocation;
  }
  std::string names;
  for (const CommandHelp& known : kCommandHelp) absl::StrAppend(&names, known.name, ", ");
  return Usage(absl::StrCat("unknown command \"", command, "\" (commands: ", names,
                            "help, version)"));
}

std::string HelpCommandFor(const std::vector<std::string>& args) {
  const CommandHelp* command = FindCommandHelp(args);
  if (command == nullptr) return "walfeed --help";
  return absl::StrCat("walfeed ", command->name, " --help");
}

}  // namespace walfeed::cli
