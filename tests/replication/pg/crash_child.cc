// crash_child: one walfeed stream with one consumer, started through the
// production start-up path, in a process of its own so a test can kill it with
// SIGKILL at any moment and start it again.
//
// Start-up (the production path): PgCheckpointStore::Open → GroupCommitter →
// PrepareStream → AckTracker at plan.start with every stored consumer (ours with
// EventId{} when it has no checkpoint) → CommittedConfirmedStore → StreamReader
// on its own thread, Run(plan.start).
//
// Flags (all --key=value): --conninfo --stream --slot --publication --table
// (schema.table, used only if walfeed creates the publication) --consumer
// --feedback_ms (max_feedback_interval, default 200) --backoff_ms (backoff_base,
// default 50) --backoff_cap_ms (default 1000).
//
// Protocol, one line per message. stdout (flushed after every line, written by
// the reader thread and the command thread under one lock so lines never mix):
//   ready start=<lsn> deliver_after=<id> checkpoint=<id|none> bind=<0|1>
//   connected <lsn>                 a replication session started from <lsn>
//   disconnected <status>           a session ended with a transient error
//   event <id> <OP> <col>...        one delivered event; columns as text, NULL as
//                                   <null>
//   commit <commit_lsn> <end_lsn> <event_count>
//   acked <id> | ack_failed <id> <status>
//   stats events=N below_checkpoint=N redelivered_dropped=N reconnects=N
//         keepalives=N status_updates=N confirmed_sent=<lsn>
//   exited <status>                 Run() returned by itself (a definite error)
//   stopped <status>                after "stop": Run() returned; then exit 0
//   fatal <status>                  start-up failed; then exit 1
// stdin commands:
//   ack <id>   AckDurably (durable in the checkpoint store) THEN tracker.Ack, the
//              order a consumer's ack takes in the server; replies acked/ack_failed
//   stats      replies with a stats line
//   stop       stops the reader cleanly (final status update, CopyDone)
// End of stdin is treated like "stop" without the reply, so the child never
// outlives a parent that died.
// Diagnostics (walfeed's own log) go to stderr so they never mix with stdout.
#include <cstdio>
#include <iostream>
#include <map>
#include <memory>
#include <string>
#include <thread>

#include "absl/status/status.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "absl/strings/string_view.h"
#include "absl/strings/strip.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "replication/ack_tracker.h"
#include "replication/event_id.h"
#include "replication/pg/checkpoint_store.h"
#include "replication/stream_config.h"
#include "replication/pg/stream_reader.h"
#include "replication/pg/stream_start.h"
#include "spdlog/sinks/stdout_sinks.h"
#include "spdlog/spdlog.h"

namespace walfeed::replication::pg {
namespace {

constexpr char kCheckpointSchema[] = "walfeed";

absl::Mutex output_mu;

// Writes one protocol line and flushes it: the parent may kill this process right
// after reading it, so nothing may sit in a buffer.
void Emit(const std::string& line) {
  absl::MutexLock lock(&output_mu);
  std::fputs(line.c_str(), stdout);
  std::fputc('\n', stdout);
  std::fflush(stdout);
}

// A status on one line (its message may contain newlines from libpq).
std::string OneLine(const absl::Status& status) {
  return absl::StrReplaceAll(status.ToString(), {{"\n", " "}});
}

std::string ColumnText(const pgoutput::TupleValue& value) {
  switch (value.kind) {
    case pgoutput::TupleValue::Kind::kNull:
      return "<null>";
    case pgoutput::TupleValue::Kind::kUnchangedToast:
      return "<unchanged>";
    case pgoutput::TupleValue::Kind::kText:
    case pgoutput::TupleValue::Kind::kBinary:
      return value.data;
  }
  return "<?>";
}

class PrintingSink : public StreamSink {
 public:
  // Never full: the parent drains stdout continuously, and a full pipe only
  // delays this thread, it never loses a line.
  bool HasRoom() override { return true; }

  void OnEvent(ChangeEvent event) override {
    std::string line = absl::StrCat("event ", event.id.ToString(), " ", OpName(event.op));
    const pgoutput::TupleData& tuple =
        event.op == ChangeEvent::Op::kDelete ? event.old_tuple : event.new_tuple;
    for (const pgoutput::TupleValue& value : tuple.columns) {
      absl::StrAppend(&line, " ", ColumnText(value));
    }
    Emit(line);
  }

  void OnCommit(const TransactionCommitted& commit) override {
    Emit(absl::StrCat("commit ", commit.commit_lsn.ToString(), " ", commit.end_lsn.ToString(), " ",
                      commit.event_count));
  }

  void OnConnected(Lsn start) override { Emit(absl::StrCat("connected ", start.ToString())); }

  void OnDisconnected(const absl::Status& why) override {
    Emit(absl::StrCat("disconnected ", OneLine(why)));
  }
};

std::map<std::string, std::string> ParseFlags(int argc, char** argv) {
  std::map<std::string, std::string> flags;
  for (int i = 1; i < argc; ++i) {
    absl::string_view arg = argv[i];
    if (!absl::ConsumePrefix(&arg, "--")) continue;
    const size_t eq = arg.find('=');
    if (eq == absl::string_view::npos) continue;
    flags[std::string(arg.substr(0, eq))] = std::string(arg.substr(eq + 1));
  }
  return flags;
}

int64_t IntFlag(const std::map<std::string, std::string>& flags, const std::string& name,
                int64_t fallback) {
  auto it = flags.find(name);
  int64_t value;
  if (it == flags.end() || !absl::SimpleAtoi(it->second, &value)) return fallback;
  return value;
}

int Main(int argc, char** argv) {
  // walfeed logs through spdlog, whose default logger writes to stdout; stdout is
  // the protocol channel, so the log goes to stderr.
  spdlog::set_default_logger(spdlog::stderr_logger_mt("crash_child"));

  std::map<std::string, std::string> flags = ParseFlags(argc, argv);
  StreamConfig config;
  config.name = flags["stream"];
  config.conninfo = flags["conninfo"];
  config.slot_name = flags["slot"];
  config.publication_names = {flags["publication"]};
  if (!flags["table"].empty()) config.tables = {flags["table"]};
  config.create_missing = true;
  const std::string consumer = flags["consumer"];

  // Each step says so on stderr: a child that never gets ready shows where it waits.
  spdlog::info("opening the checkpoint store");
  absl::StatusOr<std::unique_ptr<PgCheckpointStore>> store =
      PgCheckpointStore::Open({config.conninfo, kCheckpointSchema});
  if (!store.ok()) {
    Emit(absl::StrCat("fatal ", OneLine(store.status())));
    return 1;
  }
  GroupCommitter committer(store->get());
  spdlog::info("preparing stream {} (slot {})", config.name, config.slot_name);
  absl::StatusOr<PreparedStream> prepared = PrepareStream(config, &committer, kCheckpointSchema);
  if (!prepared.ok()) {
    Emit(absl::StrCat("fatal ", OneLine(prepared.status())));
    return 1;
  }

  AckTracker tracker(prepared->plan.start);
  for (const auto& [name, id] : prepared->plan.consumers) {
    if (absl::Status added = tracker.AddConsumer(name, id); !added.ok()) {
      Emit(absl::StrCat("fatal ", OneLine(added)));
      return 1;
    }
  }
  const auto stored = prepared->plan.consumers.find(consumer);
  const bool has_checkpoint = stored != prepared->plan.consumers.end();
  if (!has_checkpoint) {
    if (absl::Status added = tracker.AddConsumer(consumer, EventId{}); !added.ok()) {
      Emit(absl::StrCat("fatal ", OneLine(added)));
      return 1;
    }
  }

  CommittedConfirmedStore confirmed(&committer, config.name);
  ReaderOptions options = ReaderOptionsFor(config, *prepared, kCheckpointSchema);
  options.max_feedback_interval = absl::Milliseconds(IntFlag(flags, "feedback_ms", 200));
  options.min_persist_interval = absl::ZeroDuration();
  options.backoff_base = absl::Milliseconds(IntFlag(flags, "backoff_ms", 50));
  options.backoff_cap = absl::Milliseconds(IntFlag(flags, "backoff_cap_ms", 1000));
  PrintingSink sink;
  StreamReader reader(options, &tracker, &sink, &confirmed);

  Emit(absl::StrCat("ready start=", prepared->plan.start.ToString(),
                    " deliver_after=", prepared->plan.deliver_after.ToString(),
                    " checkpoint=", has_checkpoint ? stored->second.ToString() : "none",
                    " bind=", prepared->plan.bind ? 1 : 0));

  const Lsn start = prepared->plan.start;
  absl::Status result;  // Written by `run`, read after join().
  std::thread run([&] {
    result = reader.Run(start);
    // Run() returns by itself only on a definite error; say so at once, the parent
    // may be waiting for events that will never come.
    if (!result.ok()) Emit(absl::StrCat("exited ", OneLine(result)));
  });

  std::string command;
  bool replied_stop = false;
  while (std::getline(std::cin, command)) {
    absl::string_view rest = command;
    if (absl::ConsumePrefix(&rest, "ack ")) {
      absl::StatusOr<EventId> id = EventId::Parse(rest);
      absl::Status acked = id.status();
      // Durable first, then the tracker: only a stored ack may move the slot.
      if (acked.ok()) acked = committer.AckDurably(config.name, consumer, *id);
      if (acked.ok()) acked = tracker.Ack(consumer, *id);
      Emit(acked.ok() ? absl::StrCat("acked ", rest)
                      : absl::StrCat("ack_failed ", rest, " ", OneLine(acked)));
    } else if (command == "stats") {
      const StreamReader::Stats s = reader.stats();
      Emit(absl::StrCat("stats events=", s.events, " below_checkpoint=", s.below_checkpoint,
                        " redelivered_dropped=", s.redelivered_dropped,
                        " reconnects=", s.reconnects, " keepalives=", s.keepalives,
                        " status_updates=", s.status_updates,
                        " confirmed_sent=", s.confirmed_sent.ToString()));
    } else if (command == "stop") {
      replied_stop = true;
      break;
    } else {
      Emit(absl::StrCat("unknown ", command));
    }
  }
  reader.Stop();
  run.join();
  if (replied_stop) Emit(absl::StrCat("stopped ", OneLine(result)));
  return 0;
}

}  // namespace
}  // namespace walfeed::replication::pg

int main(int argc, char** argv) { return walfeed::replication::pg::Main(argc, argv); }
