// The example consumers in Python, Node and Go (examples/), each run as a child
// process against an in-process walfeed server and a throwaway PostgreSQL 15.
// For each language it proves:
//   - every committed change reaches the consumer's file as the line the C++
//     reference renders from the same stream ("<id>\t<canonical JSON>",
//     examples/README.md): inserts, updates (key changes, REPLICA IDENTITY FULL,
//     unchanged TOAST), deletes, NULLs, and text that needs JSON escaping, so the
//     three languages write byte-identical lines;
//   - once idle, the consumer acks everything it wrote;
//   - while the stream cannot reach PostgreSQL the server answers UNAVAILABLE,
//     and the consumer retries with backoff until it can subscribe; after a server
//     restart it resubscribes by itself and resumes right after its checkpoint;
//   - after a SIGKILL mid-stream and a restart of the consumer, nothing is lost:
//     it resumes right after the server's durable checkpoint, which covers at
//     least every ack the killed one reported; events after that checkpoint may
//     come twice, identical byte for byte, and nothing at or below it does; ids
//     increase strictly within each run;
//   - across an immediate restart of PostgreSQL, every change reaches the
//     file, any repeat identical to its first delivery;
//   - a status no retry can fix (NOT_FOUND, INVALID_ARGUMENT) ends it with exit
//     code 1 and a line naming the code, the server's reason and its message;
//   - a ResetConsumer (to an id, to the head) while it runs ends its session
//     with CONSUMER_RESET and a RetryInfo: it subscribes again by itself and
//     resumes right after the new checkpoint; a second Subscribe of the same
//     consumer (a takeover) ends it with exit code 1 naming SESSION_SUPERSEDED.
//     Both are read from the error details (google.rpc.ErrorInfo/RetryInfo),
//     and the three languages print the same retry and give-up lines;
//   - an event larger than gRPC's default 4 MiB receive limit (a 5 MB value)
//     reaches the file as the reference's line, and the consumer acks past it.
// And for each library's transactional watermark (Python's
// client/python/walfeed/watermark.py, Node's and Go's twins, each run by its
// language's effect_once example): a consumer killed between its destination
// COMMIT and its ack applies every event exactly once across the restart.
//
// The consumers are made runnable by examples/build.sh (CMake target
// walfeed_example_clients, a dependency of this test) into <build>/examples/bin.
// Nothing sleeps: every wait is on a condition with a deadline.
#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <memory>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include <grpcpp/grpcpp.h>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_replace.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "replication/event_id.h"
#include "replication/pg/pg_stream_source.h"
#include "server/config.h"
#include "server/walfeed_server.h"
#include "tests/testing/pg_cluster.h"
#include "tests/testing/status_matchers.h"
#include "tests/testing/wait.h"
#include "walfeed/v1/change_stream.grpc.pb.h"

extern char** environ;

namespace walfeed::server {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;
using ::walfeed::replication::EventId;
using ::walfeed::testing::IsOk;
using ::walfeed::testing::PgCluster;
using ::walfeed::testing::WaitUntil;
using ::walfeed::v1::ChangeEvent;
using ::walfeed::v1::ChangeStream;
using ::walfeed::v1::ColumnValue;

constexpr absl::Duration kDeadline = absl::Seconds(45);
constexpr char kStream[] = "shop";
constexpr char kConsumer[] = "file-writer";
constexpr int kEventsPerRound = 11;  // See WriteRound.
constexpr int kRounds = 12;
constexpr size_t kKillAfterLines = 30;
constexpr int kAckEvery = 2;  // Batches per ack: a kill can leave two batches unacked.

// ---------------------------------------------------------------------------
// The canonical line, as examples/README.md defines it.

std::string JsonString(const std::string& text) {
  std::string out = "\"";
  for (const char c : text) {
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\b': out += "\\b"; break;
      case '\f': out += "\\f"; break;
      case '\n': out += "\\n"; break;
      case '\r': out += "\\r"; break;
      case '\t': out += "\\t"; break;
      default:
        if (static_cast<unsigned char>(c) < 0x20) {
          absl::StrAppend(&out, "\\u00", absl::Hex(static_cast<unsigned char>(c), absl::kZeroPad2));
        } else {
          out += c;  // Everything else, multi-byte UTF-8 included, as is.
        }
    }
  }
  return out + "\"";
}

std::string JsonColumns(const google::protobuf::RepeatedPtrField<ColumnValue>& values) {
  std::vector<std::string> parts;
  for (const ColumnValue& v : values) {
    parts.push_back(absl::StrCat("{\"kind\":", JsonString(walfeed::v1::ValueKind_Name(v.kind())),
                                 ",\"name\":", JsonString(v.name()),
                                 ",\"text\":", JsonString(v.text()), "}"));
  }
  return absl::StrCat("[", absl::StrJoin(parts, ","), "]");
}

std::string CanonicalLine(const ChangeEvent& e) {
  return absl::StrCat(e.id(), "\t{\"new_values\":", JsonColumns(e.new_values()),
                      ",\"old_values\":", JsonColumns(e.old_values()),
                      ",\"op\":", JsonString(walfeed::v1::Operation_Name(e.op())),
                      ",\"schema\":", JsonString(e.schema()), ",\"table\":", JsonString(e.table()),
                      "}");
}

// ---------------------------------------------------------------------------
// Files and child processes.

std::string ReadWholeFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream contents;
  contents << in.rdbuf();
  return contents.str();
}

// The file's complete lines (a line torn by a SIGKILL has no '\n' yet).
std::vector<std::string> CompleteLines(const std::string& path) {
  std::string text = ReadWholeFile(path);
  text.erase(text.rfind('\n') == std::string::npos ? 0 : text.rfind('\n') + 1);
  std::vector<std::string> lines = absl::StrSplit(text, '\n');
  lines.pop_back();  // After the last '\n'.
  return lines;
}

EventId LineId(const std::string& line) {
  absl::StatusOr<EventId> id = EventId::Parse(line.substr(0, line.find('\t')));
  EXPECT_THAT(id, IsOk()) << line;
  return id.value_or(EventId{});
}

// A consumer process, its stdout and stderr appended to a log file. The
// destructor kills and reaps it, so no child outlives a failed assertion.
class ConsumerProcess {
 public:
  static absl::StatusOr<std::unique_ptr<ConsumerProcess>> Spawn(
      const std::vector<std::string>& argv, const std::string& log_path) {
    posix_spawn_file_actions_t actions;
    posix_spawn_file_actions_init(&actions);
    posix_spawn_file_actions_addopen(&actions, STDIN_FILENO, "/dev/null", O_RDONLY, 0);
    posix_spawn_file_actions_addopen(&actions, STDERR_FILENO, log_path.c_str(),
                                     O_WRONLY | O_CREAT | O_APPEND, 0644);
    posix_spawn_file_actions_adddup2(&actions, STDERR_FILENO, STDOUT_FILENO);
    std::vector<std::string> copy = argv;
    std::vector<char*> args;
    for (std::string& arg : copy) args.push_back(arg.data());
    args.push_back(nullptr);
    pid_t pid = -1;
    const int rc = posix_spawn(&pid, args[0], &actions, nullptr, args.data(), environ);
    posix_spawn_file_actions_destroy(&actions);
    if (rc != 0) return absl::InternalError(absl::StrCat("posix_spawn ", argv[0], ": ", strerror(rc)));
    return std::unique_ptr<ConsumerProcess>(new ConsumerProcess(pid, log_path));
  }

  ~ConsumerProcess() { Signal(SIGKILL); }
  ConsumerProcess(const ConsumerProcess&) = delete;
  ConsumerProcess& operator=(const ConsumerProcess&) = delete;

  // Sends `signal` and reaps the process.
  void Signal(int signal) {
    if (reaped_) return;
    kill(pid_, signal);
    while (!Reap(0)) {
    }
  }

  // Sends `signal` without waiting (SIGSTOP pauses the process, SIGCONT resumes it).
  void Send(int signal) {
    if (!reaped_) kill(pid_, signal);
  }

  // Whether the process has exited by now (reaped if so).
  bool Exited() { return Reap(WNOHANG); }

  // Waits for the process to exit by itself: its exit code.
  absl::StatusOr<int> WaitForExit(absl::Duration timeout) {
    if (!WaitUntil([&] { return Reap(WNOHANG); }, timeout)) {
      return absl::DeadlineExceededError("the consumer did not exit");
    }
    if (!WIFEXITED(wait_status_)) return absl::InternalError("the consumer was killed");
    return WEXITSTATUS(wait_status_);
  }

  std::string Log() const { return ReadWholeFile(log_path_); }

 private:
  ConsumerProcess(pid_t pid, std::string log_path) : pid_(pid), log_path_(std::move(log_path)) {}

  bool Reap(int flags) {
    if (reaped_) return true;
    const pid_t r = waitpid(pid_, &wait_status_, flags);
    if (r == pid_ || (r < 0 && errno == ECHILD)) reaped_ = true;
    return reaped_;
  }

  const pid_t pid_;
  const std::string log_path_;
  bool reaped_ = false;
  int wait_status_ = 0;
};

// ---------------------------------------------------------------------------
// A C++ subscription of its own consumer: the stream's events, the truth the
// consumers' files are compared with. It acks only when told to, so the server
// holds every event it has not read.
class ReferenceSubscription {
 public:
  // Subscribes, retrying while the stream connects to PostgreSQL (UNAVAILABLE).
  absl::Status Start(ChangeStream::Stub* stub) {
    absl::Status failed;
    const bool live = WaitUntil(
        [&] {
          context_ = std::make_unique<grpc::ClientContext>();
          context_->set_deadline(absl::ToChronoTime(absl::Now() + absl::Minutes(2)));
          walfeed::v1::SubscribeRequest request;
          request.set_stream(kStream);
          request.set_consumer("reference");
          reader_ = stub->Subscribe(context_.get(), request);
          walfeed::v1::SubscribeResponse first;
          if (reader_->Read(&first) && first.has_started()) {
            session_id_ = first.started().session_id();
            return true;
          }
          const grpc::Status status = reader_->Finish();
          reader_.reset();
          if (status.error_code() == grpc::StatusCode::UNAVAILABLE) return false;
          failed = absl::InternalError(absl::StrCat("reference Subscribe: ", status.error_message()));
          return true;
        },
        kDeadline, absl::Milliseconds(50));
    if (!failed.ok()) return failed;
    return live ? absl::OkStatus() : absl::DeadlineExceededError("the stream never became ready");
  }

  // Reads until `count` events have arrived in all. With `stub`, a session the
  // server ends as UNAVAILABLE (for example when it finds, late, that a
  // PostgreSQL restart cost it the stream's lead) is followed by a new one,
  // whose redeliveries of events already read (the reference acks only when
  // told) are skipped by id.
  absl::Status ReadUntil(size_t count, ChangeStream::Stub* stub = nullptr) {
    const absl::Time deadline = absl::Now() + kDeadline;
    walfeed::v1::SubscribeResponse response;
    std::set<std::string> read_before;  // Filled when a session is resumed.
    while (events_.size() < count) {
      if (absl::Now() > deadline) {
        return absl::DeadlineExceededError(
            absl::StrCat("the reference got ", events_.size(), " of ", count, " events"));
      }
      if (!reader_->Read(&response)) {
        const grpc::Status status = reader_->Finish();
        reader_.reset();
        if (stub == nullptr || status.error_code() != grpc::StatusCode::UNAVAILABLE) {
          return absl::DeadlineExceededError(
              absl::StrCat("the reference got ", events_.size(), " of ", count,
                           " events; its stream ended: ", status.error_message()));
        }
        for (const ChangeEvent& event : events_) read_before.insert(event.id());
        if (absl::Status resumed = Start(stub); !resumed.ok()) return resumed;
        continue;
      }
      for (const ChangeEvent& event : response.events().events()) {
        if (read_before.count(event.id()) == 0) events_.push_back(event);
      }
    }
    return absl::OkStatus();
  }

  // Acks every event read so far (durably: it survives a server restart).
  absl::Status AckAll(ChangeStream::Stub* stub) {
    walfeed::v1::AckRequest request;
    request.set_stream(kStream);
    request.set_consumer("reference");
    request.set_session_id(session_id_);
    request.set_event_id(events_.back().id());
    walfeed::v1::AckResponse response;
    grpc::ClientContext context;
    context.set_deadline(absl::ToChronoTime(absl::Now() + kDeadline));
    const grpc::Status status = stub->Ack(&context, request, &response);
    if (!status.ok()) return absl::InternalError(absl::StrCat("Ack: ", status.error_message()));
    return absl::OkStatus();
  }

  void Stop() {
    if (!reader_) return;
    context_->TryCancel();
    (void)reader_->Finish();
    reader_.reset();
  }

  const std::vector<ChangeEvent>& events() const { return events_; }

 private:
  std::unique_ptr<grpc::ClientContext> context_;
  std::unique_ptr<grpc::ClientReader<walfeed::v1::SubscribeResponse>> reader_;
  std::string session_id_;
  std::vector<ChangeEvent> events_;
};

// ---------------------------------------------------------------------------
// The fixture: a cluster with three published tables, an in-process server.

// Values that need JSON escaping, or none, or are not ASCII.
const std::vector<std::string>& TrickyTexts() {
  static const auto* texts = new std::vector<std::string>{
      "plain",
      "it's \"quoted\" and back\\slashed /",
      "tab\there, newline\nthere, carriage return\r",
      "controls \x01\x07\x08\x0c\x1b\x1f and del \x7f",
      "caf\xc3\xa9, \xe6\xbc\xa2\xe5\xad\x97, \xf0\x9f\x98\x80",              // café, 漢字, 😀
      "separators \xe2\x80\xa8 and \xe2\x80\xa9, </script> & <b>",  // U+2028, U+2029
      "",
  };
  return *texts;
}

std::string SqlText(const std::string& text) {
  return absl::StrCat("'", absl::StrReplaceAll(text, {{"'", "''"}}), "'");
}

class ClientInteropTest : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    ASSERT_EQ(access(Launcher().c_str(), X_OK), 0)
        << Launcher() << " is missing: build the target walfeed_example_clients, or run "
        << WALFEED_SOURCE_DIR << "/examples/build.sh";
    WALFEED_START_PG_OR_SKIP(pg_, PgCluster::Options{});
    ASSERT_THAT(pg_->Exec("CREATE TABLE items (id int PRIMARY KEY, name text NOT NULL, qty int, "
                          "note text);"
                          "CREATE TABLE audit (id int PRIMARY KEY, v text);"
                          "ALTER TABLE audit REPLICA IDENTITY FULL;"
                          "CREATE TABLE docs (id int PRIMARY KEY, body text, rev int);"
                          // Out of line and uncompressed: an update of rev leaves it
                          // an unchanged TOAST value.
                          "ALTER TABLE docs ALTER COLUMN body SET STORAGE EXTERNAL"),
                IsOk());
    char pattern[] = "/tmp/walfeed-clients-XXXXXX";
    ASSERT_NE(mkdtemp(pattern), nullptr);
    dir_ = pattern;
  }

  void TearDown() override {
    for (auto& process : processes_) process.reset();  // Killed and reaped.
    reference_.Stop();
    stub_.reset();
    if (server_) server_->Shutdown();
    server_.reset();
    if (!dir_.empty() && !HasFailure()) std::filesystem::remove_all(dir_);
  }

  void StartServer(int port) {
    const std::string yaml = absl::StrCat(
        "listen: \"127.0.0.1:", port, "\"\nplaintext: true\nshutdown_timeout: 1s\n",
        "defaults:\n  max_batch_events: 4\n  progress_interval: 200ms\n",
        "streams:\n  - name: ", kStream, "\n    conninfo: \"", pg_->ConnInfo(),
        "\"\n    slot: walfeed_shop\n    publications: [walfeed_shop]\n",
        "    tables: [public.items, public.audit, public.docs]\n    create_missing: true\n");
    absl::StatusOr<ServerConfig> config = ParseConfig(yaml, "clients.yaml");
    ASSERT_THAT(config, IsOk()) << yaml;
    absl::StatusOr<std::unique_ptr<WalfeedServer>> server =
        WalfeedServer::Start(*config, replication::pg::MakePgStreamSource);
    ASSERT_THAT(server, IsOk());
    server_ = std::move(*server);
    // No receive limit, as in the consumers: some events are larger than 4 MiB.
    grpc::ChannelArguments args;
    args.SetMaxReceiveMessageSize(-1);
    stub_ = ChangeStream::NewStub(grpc::CreateCustomChannel(
        absl::StrCat("127.0.0.1:", server_->port()), grpc::InsecureChannelCredentials(), args));
  }

  // A graceful stop (subscriptions end with UNAVAILABLE), then a new server on
  // the same port, resuming from the stored checkpoints.
  void RestartServer() {
    const int port = server_->port();
    reference_.Stop();
    stub_.reset();
    server_->Shutdown();
    server_.reset();
    StartServer(port);
  }

  // A server, the reference, and this test's consumer ("consumer") that has
  // written and acked the first two rounds, as the reference saw them.
  void StartCaughtUpConsumer(ConsumerProcess** consumer) {
    StartServer(0);
    ASSERT_TRUE(server_);
    ASSERT_THAT(reference_.Start(stub_.get()), IsOk());
    *consumer = StartConsumer(server_->port(), kStream, kConsumer, "consumer");
    ASSERT_NE(*consumer, nullptr);
    for (int k = 0; k < 2; ++k) WriteRound(k);
    ASSERT_FALSE(HasFatalFailure());
    ASSERT_THAT(reference_.ReadUntil(2 * kEventsPerRound), IsOk());
    const std::string acked = reference_.events().back().id();
    ASSERT_TRUE(WaitUntil([&] { return Checkpoint() == acked; }, kDeadline)) << (*consumer)->Log();
  }

  // Starts this test's consumer; its log is <dir>/<name>.log.
  ConsumerProcess* StartConsumer(int port, const std::string& stream, const std::string& consumer,
                                 const std::string& name) {
    std::vector<std::string> argv = {
        Launcher(),
        "--server", absl::StrCat("127.0.0.1:", port),
        "--stream", stream,
        "--consumer", consumer,
        "--out", out_path(),
        "--ack-every", absl::StrCat(kAckEvery)};
    absl::StatusOr<std::unique_ptr<ConsumerProcess>> process =
        ConsumerProcess::Spawn(argv, absl::StrCat(dir_, "/", name, ".log"));
    EXPECT_THAT(process, IsOk());
    if (!process.ok()) return nullptr;
    processes_.push_back(std::move(*process));
    return processes_.back().get();
  }

  // <build>/examples/bin/<language>-consumer: one command line for all three.
  static std::string Launcher() {
    return absl::StrCat(WALFEED_EXAMPLES_BIN, "/", GetParam(), "-consumer");
  }
  std::string out_path() const { return dir_ + "/events.tsv"; }

  // Round k: five transactions, kEventsPerRound events, on rows 10k+1 .. 10k+4.
  void WriteRound(int k) {
    const std::vector<std::string>& texts = TrickyTexts();
    auto text = [&](int i) { return SqlText(texts[static_cast<size_t>(i) % texts.size()]); };
    const int b = 10 * k;
    const std::vector<std::string> transactions = {
        // 3 inserts, one multi-row statement, with NULLs.
        absl::StrCat("INSERT INTO items VALUES (", b + 1, ", 'item-", k, "-1', ", k, ", ", text(k),
                     "), (", b + 2, ", 'item-", k, "-2', NULL, ", text(k + 1), "), (", b + 3,
                     ", 'item-", k, "-3', 3, NULL)"),
        // An update, an update of the key (old key sent), a delete (old key).
        absl::StrCat("UPDATE items SET qty = coalesce(qty, 0) + 1, note = ", text(k + 2),
                     " WHERE id = ", b + 1, "; UPDATE items SET id = ", b + 4, " WHERE id = ", b + 2,
                     "; DELETE FROM items WHERE id = ", b + 3),
        // REPLICA IDENTITY FULL: whole old rows.
        absl::StrCat("INSERT INTO audit VALUES (", b + 1, ", ", text(k + 3),
                     "); UPDATE audit SET v = v || ' (edited)' WHERE id = ", b + 1,
                     "; DELETE FROM audit WHERE id = ", b + 1),
        // A TOASTed value, then an update that leaves it unchanged.
        absl::StrCat("INSERT INTO docs SELECT ", b + 1,
                     ", string_agg(md5(g::text || '-", k, "'), ''), 1 FROM generate_series(1, 100) g"),
        absl::StrCat("UPDATE docs SET rev = 2 WHERE id = ", b + 1),
    };
    for (const std::string& sql : transactions) {
      ASSERT_THAT(pg_->Exec(absl::StrCat("BEGIN; ", sql, "; COMMIT")), IsOk()) << sql;
    }
  }

  // ResetConsumer of this test's consumer: to `to`, or to the head when empty.
  absl::StatusOr<walfeed::v1::ResetConsumerResponse> ResetConsumer(const std::string& to) {
    walfeed::v1::ResetConsumerRequest request;
    request.set_stream(kStream);
    request.set_consumer(kConsumer);
    if (to.empty()) {
      request.set_to_head(true);
    } else {
      request.set_to(to);
    }
    walfeed::v1::ResetConsumerResponse response;
    grpc::ClientContext context;
    context.set_deadline(absl::ToChronoTime(absl::Now() + kDeadline));
    const grpc::Status status = stub_->ResetConsumer(&context, request, &response);
    if (!status.ok()) return absl::InternalError(absl::StrCat("ResetConsumer: ", status.error_message()));
    return response;
  }

  // A consumer's durable checkpoint, from GetStatus.
  std::string Checkpoint(const std::string& name = kConsumer) {
    walfeed::v1::GetStatusRequest request;
    request.set_stream(kStream);
    walfeed::v1::GetStatusResponse response;
    grpc::ClientContext context;
    context.set_deadline(absl::ToChronoTime(absl::Now() + kDeadline));
    const grpc::Status status = stub_->GetStatus(&context, request, &response);
    EXPECT_TRUE(status.ok()) << status.error_message();
    for (const auto& stream : response.streams()) {
      for (const auto& consumer : stream.consumers()) {
        if (consumer.name() == name) return consumer.checkpoint();
      }
    }
    return "";
  }

  std::unique_ptr<PgCluster> pg_;
  std::string dir_;
  std::unique_ptr<WalfeedServer> server_;
  std::unique_ptr<ChangeStream::Stub> stub_;
  ReferenceSubscription reference_;
  std::vector<std::unique_ptr<ConsumerProcess>> processes_;
};

// The values of "<prefix><value>" lines in a consumer's log, in order.
std::vector<std::string> LogValues(const std::string& log, const std::string& prefix) {
  std::vector<std::string> values;
  for (absl::string_view line : absl::StrSplit(log, '\n')) {
    if (absl::ConsumePrefix(&line, prefix)) values.emplace_back(line);
  }
  return values;
}

// The checkpoint= of a "started session=... checkpoint=..." line.
std::string StartedCheckpoint(const std::string& started) {
  const size_t at = started.find("checkpoint=");
  return at == std::string::npos ? "<none>" : started.substr(at + strlen("checkpoint="));
}

void ExpectStrictlyIncreasing(const std::vector<std::string>& lines, const std::string& what) {
  for (size_t i = 1; i < lines.size(); ++i) {
    EXPECT_LT(LineId(lines[i - 1]), LineId(lines[i])) << what << " line " << i;
  }
}

TEST_P(ClientInteropTest, DeliversEveryChangeAcrossAKillWithIdenticalRedeliveries) {
  const absl::Time begin = absl::Now();
  // 1. PostgreSQL is down: the server answers UNAVAILABLE ("still connecting")
  // and the consumer retries with backoff until the stream is ready.
  ASSERT_THAT(pg_->Stop("fast"), IsOk());
  StartServer(0);
  ASSERT_TRUE(server_);
  const int port = server_->port();
  ConsumerProcess* first = StartConsumer(port, kStream, kConsumer, "run1");
  ASSERT_NE(first, nullptr);
  ASSERT_TRUE(WaitUntil([&] { return absl::StrContains(first->Log(), "retry in "); }, kDeadline))
      << first->Log();
  ASSERT_THAT(pg_->StartAgain(), IsOk());
  ASSERT_THAT(reference_.Start(stub_.get()), IsOk());
  ASSERT_TRUE(WaitUntil([&] { return absl::StrContains(first->Log(), "started session="); },
                        kDeadline))
      << first->Log();
  const absl::Time subscribed = absl::Now();
  std::vector<std::string> started_run1 = LogValues(first->Log(), "started ");
  ASSERT_EQ(started_run1.size(), 1u);
  EXPECT_EQ(StartedCheckpoint(started_run1[0]), "");

  // 2. Changes flow while it runs. Right after the commit that takes its file
  // past kKillAfterLines lines it is killed, mid-stream; the rest (at least one
  // round) is written while it is down.
  std::vector<std::string> run1;
  std::string checkpoint_at_kill;
  std::string log1;
  int killed_after_round = -1;
  for (int k = 0; k < kRounds; ++k) {
    WriteRound(k);
    ASSERT_FALSE(HasFatalFailure());
    if (killed_after_round >= 0) continue;
    if (k == kRounds - 2) {  // A slow consumer: wait for it, keep a round for later.
      ASSERT_TRUE(WaitUntil([&] { return CompleteLines(out_path()).size() >= kKillAfterLines; },
                            kDeadline, absl::Milliseconds(5)))
          << first->Log();
    }
    if (CompleteLines(out_path()).size() >= kKillAfterLines) {
      first->Signal(SIGKILL);
      run1 = CompleteLines(out_path());
      checkpoint_at_kill = Checkpoint();
      log1 = first->Log();
      killed_after_round = k;
    }
  }
  const std::vector<std::string> acked_run1 = LogValues(log1, "acked ");
  const size_t total = static_cast<size_t>(kEventsPerRound * kRounds);
  ASSERT_THAT(reference_.ReadUntil(total), IsOk());

  // 3. Restarted, it catches up, and acks everything once idle.
  const absl::Time restarted = absl::Now();
  ConsumerProcess* second = StartConsumer(port, kStream, kConsumer, "run2");
  ASSERT_NE(second, nullptr);
  const std::string last_id = reference_.events().back().id();
  ASSERT_TRUE(WaitUntil(
      [&] {
        const std::vector<std::string> lines = CompleteLines(out_path());
        return !lines.empty() && absl::StartsWith(lines.back(), last_id + "\t");
      },
      kDeadline))
      << second->Log();
  const absl::Time caught_up = absl::Now();
  EXPECT_TRUE(WaitUntil([&] { return Checkpoint() == last_id; }, kDeadline))
      << "checkpoint " << Checkpoint() << ", last event " << last_id << "\n" << second->Log();
  second->Signal(SIGTERM);
  const std::vector<std::string> all = CompleteLines(out_path());
  const std::string log2 = second->Log();

  // The reference: every committed change, each kind of value present.
  const std::vector<ChangeEvent>& events = reference_.events();
  ASSERT_EQ(events.size(), total);
  std::map<std::string, int> kinds;  // "table OP" -> count
  std::vector<std::string> expected;
  for (const ChangeEvent& event : events) {
    ++kinds[absl::StrCat(event.table(), " ", walfeed::v1::Operation_Name(event.op()))];
    expected.push_back(CanonicalLine(event));
  }
  EXPECT_EQ(kinds, (std::map<std::string, int>{{"audit OPERATION_DELETE", kRounds},
                                               {"audit OPERATION_INSERT", kRounds},
                                               {"audit OPERATION_UPDATE", kRounds},
                                               {"docs OPERATION_INSERT", kRounds},
                                               {"docs OPERATION_UPDATE", kRounds},
                                               {"items OPERATION_DELETE", kRounds},
                                               {"items OPERATION_INSERT", 3 * kRounds},
                                               {"items OPERATION_UPDATE", 2 * kRounds}}));
  const std::string joined = absl::StrJoin(expected, "\n");
  EXPECT_THAT(joined, HasSubstr("VALUE_KIND_UNCHANGED_TOAST"));
  EXPECT_THAT(joined, HasSubstr("VALUE_KIND_NULL"));
  EXPECT_THAT(joined, HasSubstr("\\u0001"));
  ExpectStrictlyIncreasing(expected, "reference");
  std::map<std::string, size_t> position;  // id -> index in `expected`
  for (size_t i = 0; i < events.size(); ++i) position[events[i].id()] = i;

  // Run 1: a prefix of the stream, in order, byte-identical to the reference.
  ASSERT_GE(run1.size(), kKillAfterLines);
  ASSERT_LE(run1.size(), static_cast<size_t>(kEventsPerRound * (killed_after_round + 1)));
  for (size_t i = 0; i < run1.size(); ++i) {
    ASSERT_EQ(run1[i], expected[i]) << "run 1, line " << i;
  }
  // Its acks were durable: the checkpoint at the kill covers every reported ack
  // and nothing beyond what was written.
  ASSERT_FALSE(acked_run1.empty()) << log1;
  ASSERT_FALSE(checkpoint_at_kill.empty());
  const EventId kill_checkpoint = LineId(checkpoint_at_kill);
  EXPECT_LE(LineId(acked_run1.back()), kill_checkpoint);
  EXPECT_LE(kill_checkpoint, LineId(run1.back()));

  // Run 2: resumed right after the checkpoint (at or after the one at the kill:
  // an ack in flight at the kill may still have landed), then every later event
  // in order.
  ASSERT_GE(all.size(), run1.size());
  for (size_t i = 0; i < run1.size(); ++i) ASSERT_EQ(all[i], run1[i]) << "line " << i;
  const std::vector<std::string> run2(all.begin() + static_cast<long>(run1.size()), all.end());
  const std::vector<std::string> started = LogValues(log2, "started ");
  ASSERT_EQ(started.size(), 1u) << log2;
  const std::string resumed_after = StartedCheckpoint(started[0]);
  ASSERT_EQ(position.count(resumed_after), 1u) << started[0];
  EXPECT_LE(kill_checkpoint, LineId(resumed_after));
  EXPECT_LE(LineId(resumed_after), LineId(run1.back()));
  const size_t resume_at = position[resumed_after] + 1;
  ASSERT_EQ(run2.size(), expected.size() - resume_at);
  for (size_t i = 0; i < run2.size(); ++i) {
    ASSERT_EQ(run2[i], expected[resume_at + i]) << "run 2, line " << i;
  }
  ExpectStrictlyIncreasing(run1, "run 1");
  ExpectStrictlyIncreasing(run2, "run 2");

  // Nothing lost; an id written twice was written identically, and only ids
  // after the resume checkpoint came twice (run 2 started right after it).
  std::map<std::string, std::set<std::string>> by_id;
  for (const std::string& line : all) by_id[line.substr(0, line.find('\t'))].insert(line);
  EXPECT_EQ(by_id.size(), expected.size()) << "lost events";
  for (const auto& [id, lines] : by_id) EXPECT_EQ(lines.size(), 1u) << id << " differs";
  size_t duplicates = 0;
  for (const std::string& line : run2) duplicates += LineId(line) <= LineId(run1.back()) ? 1 : 0;
  EXPECT_EQ(all.size() - by_id.size(), duplicates);

  std::cout << "[" << GetParam() << "] " << total << " events; run 1 wrote " << run1.size()
            << " (killed after round " << killed_after_round + 1 << " of " << kRounds
            << "; last acked " << acked_run1.back() << ", checkpoint at kill " << checkpoint_at_kill
            << "); run 2 resumed after " << resumed_after << " and wrote " << run2.size()
            << "; duplicates " << duplicates << "; lost 0\n"
            << "[" << GetParam() << "] subscribed in " << (subscribed - begin) << " ("
            << LogValues(log1, "retry in ").size()
            << " retries while PostgreSQL was down), caught up after the kill in "
            << (caught_up - restarted) << ", total " << (absl::Now() - begin) << std::endl;
}

// A server restart: the consumer's stream ends with UNAVAILABLE (reason
// SERVER_STOPPING, with a RetryInfo), it resubscribes by itself and resumes right after its checkpoint, and its file
// ends up exactly the stream, with nothing twice (it had acked everything).
//
// This test found a walfeed bug, now fixed: after a restart PostgreSQL re-sends
// transactions the consumers had already acked (the stored confirmed position
// lags by up to min_persist_interval), and the ack tracker released such a
// transaction while it was still open, so its next event failed the stream
// ("event X outside its open transaction"); see AckTrackerReleaseTest.
TEST_P(ClientInteropTest, ResubscribesAcrossAServerRestart) {
  ConsumerProcess* consumer = nullptr;
  ASSERT_NO_FATAL_FAILURE(StartCaughtUpConsumer(&consumer));
  const std::string acked = reference_.events().back().id();
  ASSERT_THAT(reference_.AckAll(stub_.get()), IsOk());  // So it resumes too.

  RestartServer();
  ASSERT_TRUE(server_);
  ASSERT_THAT(reference_.Start(stub_.get()), IsOk());
  ASSERT_TRUE(WaitUntil([&] { return LogValues(consumer->Log(), "started ").size() == 2; },
                        kDeadline))
      << consumer->Log();
  // The stopping server said why (UNAVAILABLE with reason SERVER_STOPPING).
  EXPECT_THAT(consumer->Log(), HasSubstr("ms: SERVER_STOPPING: "));
  EXPECT_EQ(StartedCheckpoint(LogValues(consumer->Log(), "started ")[1]), acked);

  for (int k = 2; k < 4; ++k) WriteRound(k);
  ASSERT_FALSE(HasFatalFailure());
  ASSERT_THAT(reference_.ReadUntil(4 * kEventsPerRound), IsOk());
  const std::string last_id = reference_.events().back().id();
  ASSERT_TRUE(WaitUntil([&] { return Checkpoint() == last_id; }, kDeadline)) << consumer->Log();
  std::vector<std::string> expected;
  for (const ChangeEvent& event : reference_.events()) expected.push_back(CanonicalLine(event));
  EXPECT_EQ(CompleteLines(out_path()), expected);
}

// An immediate restart of PostgreSQL under a running consumer: the server
// reconnects to the slot, and the consumer (whose session the server may end
// meanwhile) gets every change once in its file, as the reference renders it.
TEST_P(ClientInteropTest, DeliversEveryChangeAcrossAPostgresRestart) {
  ConsumerProcess* consumer = nullptr;
  ASSERT_NO_FATAL_FAILURE(StartCaughtUpConsumer(&consumer));
  const std::string acked = reference_.events().back().id();
  ASSERT_THAT(reference_.AckAll(stub_.get()), IsOk());

  reference_.Stop();
  ASSERT_THAT(pg_->Restart("immediate"), IsOk());
  for (int k = 2; k < 4; ++k) WriteRound(k);
  ASSERT_FALSE(HasFatalFailure());
  // A new reference session resumes after what the first one acked.
  ReferenceSubscription after;
  ASSERT_THAT(after.Start(stub_.get()), IsOk());
  // The server may end this session too: its lead's connection can notice the
  // restart only now.
  ASSERT_THAT(after.ReadUntil(2 * kEventsPerRound, stub_.get()), IsOk());
  const std::string last_id = after.events().back().id();
  ASSERT_TRUE(WaitUntil([&] { return Checkpoint() == last_id; }, kDeadline)) << consumer->Log();
  std::vector<std::string> expected;
  for (const ChangeEvent& event : reference_.events()) expected.push_back(CanonicalLine(event));
  for (const ChangeEvent& event : after.events()) expected.push_back(CanonicalLine(event));
  // A session the restart ended may have delivered events again after the
  // checkpoint: each repeat must be its first delivery byte for byte.
  std::vector<std::string> unique;
  std::map<std::string, std::string> by_id;
  for (const std::string& line : CompleteLines(out_path())) {
    const std::string id = line.substr(0, line.find('\t'));
    auto [it, first] = by_id.emplace(id, line);
    if (first) {
      unique.push_back(line);
    } else {
      EXPECT_EQ(line, it->second) << "a redelivery differs";
    }
  }
  EXPECT_EQ(unique, expected) << consumer->Log();
}

TEST_P(ClientInteropTest, StatusesNoRetryCanFixEndTheConsumer) {
  StartServer(0);
  ASSERT_TRUE(server_);
  ASSERT_THAT(reference_.Start(stub_.get()), IsOk());  // The stream is ready.
  struct Case {
    std::string stream, consumer, code_and_reason, message;
  };
  int n = 0;
  for (const Case& c :
       {Case{"nosuch", kConsumer, "NOT_FOUND STREAM_NOT_FOUND", "no stream named \"nosuch\""},
        Case{kStream, "bad name!", "INVALID_ARGUMENT INVALID_REQUEST", "consumer"}}) {
    ConsumerProcess* process =
        StartConsumer(server_->port(), c.stream, c.consumer, absl::StrCat("fatal", ++n));
    ASSERT_NE(process, nullptr);
    absl::StatusOr<int> code = process->WaitForExit(kDeadline);
    ASSERT_THAT(code, IsOk()) << process->Log();
    EXPECT_EQ(*code, 1) << process->Log();
    // "walfeed consumer: <CODE> <REASON>: <message>", the same in every language.
    const std::vector<std::string> gave_up = LogValues(process->Log(), "walfeed consumer: ");
    ASSERT_EQ(gave_up.size(), 1u) << process->Log();
    EXPECT_TRUE(absl::StartsWith(gave_up[0], c.code_and_reason + ": ")) << gave_up[0];
    EXPECT_THAT(gave_up[0], HasSubstr(c.message));
    EXPECT_THAT(process->Log(), Not(HasSubstr("retry in")));
  }
}

// The reference's lines [from, to).
std::vector<std::string> Lines(const std::vector<ChangeEvent>& events, size_t from, size_t to) {
  std::vector<std::string> lines;
  for (size_t i = from; i < to; ++i) lines.push_back(CanonicalLine(events[i]));
  return lines;
}

// ResetConsumer while the consumer runs, twice: to an id, then to the head. Its
// session ends ABORTED with reason CONSUMER_RESET and a RetryInfo of 0 (before
// the error details, ABORTED meant "give up"): it must subscribe again by itself
// and resume right after the new checkpoint.
//
// Each time the consumer is paused (SIGSTOP) while a round is committed and the
// reset moves its checkpoint: a running consumer would have acked the round
// before the reset, and checkpoints only move forward. The server has delivered
// some of the round to the paused session, so once resumed (SIGCONT) the
// consumer reads those first, may write some of them, and its Ack of them is
// refused (ABORTED SESSION_NOT_ACTIVE: the session ended) before the stream's
// own status, CONSUMER_RESET, arrives: it must wait for that status rather than
// give up on the Ack's. Its file is therefore: the stream up to the reset round,
// a prefix of that round (0 to 11 events, as delivered and written in time),
// then the stream right after the new checkpoint. Ids within each run increase.
TEST_P(ClientInteropTest, ResubscribesAfterResetConsumer) {
  const absl::Time begin = absl::Now();
  StartServer(0);
  ASSERT_TRUE(server_);
  ASSERT_THAT(reference_.Start(stub_.get()), IsOk());
  ConsumerProcess* consumer = StartConsumer(server_->port(), kStream, kConsumer, "consumer");
  ASSERT_NE(consumer, nullptr);
  const size_t n = kEventsPerRound;
  const std::vector<ChangeEvent>& events = reference_.events();
  auto caught_up = [&](size_t count) {
    const std::string last = events[count - 1].id();
    return WaitUntil([&] { return consumer->Exited() || Checkpoint() == last; }, kDeadline) &&
           !consumer->Exited();
  };
  WriteRound(0);
  ASSERT_FALSE(HasFatalFailure());
  ASSERT_THAT(reference_.ReadUntil(n), IsOk());
  ASSERT_TRUE(caught_up(n)) << consumer->Log();

  // Round k is written while the consumer is paused, then the consumer is reset
  // (to the event at index `to`, or to the head when it is negative) and resumed.
  std::vector<std::string> targets;
  auto reset_during_round = [&](int k, int to_index) {
    consumer->Send(SIGSTOP);
    WriteRound(k);
    ASSERT_THAT(reference_.ReadUntil(n * static_cast<size_t>(k + 1)), IsOk());
    const std::string to = to_index < 0 ? "" : events[static_cast<size_t>(to_index)].id();
    absl::StatusOr<walfeed::v1::ResetConsumerResponse> reset = ResetConsumer(to);
    consumer->Send(SIGCONT);
    ASSERT_THAT(reset, IsOk());
    EXPECT_EQ(reset->previous_checkpoint(), events[n * static_cast<size_t>(k) - 1].id());
    EXPECT_EQ(reset->checkpoint(), to.empty() ? events.back().id() : to);
    targets.push_back(reset->checkpoint());
    ASSERT_TRUE(WaitUntil(
        [&] {
          return consumer->Exited() ||
                 LogValues(consumer->Log(), "started ").size() == targets.size() + 1;
        },
        kDeadline))
        << consumer->Log();
    ASSERT_FALSE(consumer->Exited()) << "it gave up instead of resubscribing\n" << consumer->Log();
    EXPECT_EQ(StartedCheckpoint(LogValues(consumer->Log(), "started ").back()),
              reset->checkpoint());
  };
  // 1. To an id in the middle of round 1: its 6th event.
  const size_t to_id = n + 5;
  reset_during_round(1, static_cast<int>(to_id));
  ASSERT_FALSE(HasFatalFailure());
  WriteRound(2);
  ASSERT_FALSE(HasFatalFailure());
  ASSERT_THAT(reference_.ReadUntil(3 * n), IsOk());
  ASSERT_TRUE(caught_up(3 * n)) << consumer->Log();
  // 2. To the head, the last event of round 3.
  reset_during_round(3, -1);
  ASSERT_FALSE(HasFatalFailure());
  WriteRound(4);
  ASSERT_FALSE(HasFatalFailure());
  ASSERT_THAT(reference_.ReadUntil(5 * n), IsOk());
  ASSERT_TRUE(caught_up(5 * n)) << consumer->Log();
  const std::string log = consumer->Log();

  // The file: rounds 0 .. 4 with each reset's cut, for some written prefixes
  // p1 and p2 of the rounds delivered before the resets.
  const std::vector<std::string> lines = CompleteLines(out_path());
  int p1 = -1;
  int p2 = -1;
  for (size_t a = 0; a <= n && p1 < 0; ++a) {
    for (size_t b = 0; b <= n && p1 < 0; ++b) {
      std::vector<std::string> expected = Lines(events, 0, n + a);
      for (const auto& part : {Lines(events, to_id + 1, 3 * n + b), Lines(events, 4 * n, 5 * n)}) {
        expected.insert(expected.end(), part.begin(), part.end());
      }
      if (lines == expected) {
        p1 = static_cast<int>(a);
        p2 = static_cast<int>(b);
      }
    }
  }
  EXPECT_GE(p1, 0) << "the file is not the stream with the resets' cuts:\n"
                   << absl::StrJoin(lines, "\n") << "\n" << log;

  // Two retries, both for the reset, in the same form in every language, and no give-up.
  const std::vector<std::string> retries = LogValues(log, "retry in ");
  ASSERT_EQ(retries.size(), 2u) << log;
  for (size_t i = 0; i < retries.size(); ++i) {
    const std::string& retry = retries[i];
    const size_t ms = retry.find("ms: ");
    ASSERT_NE(ms, std::string::npos) << retry;
    int delay = -1;
    EXPECT_TRUE(absl::SimpleAtoi(retry.substr(0, ms), &delay)) << retry;
    EXPECT_LE(delay, 5000) << retry;  // RetryInfo 0, plus the jitter.
    EXPECT_TRUE(absl::StartsWith(retry.substr(ms), "ms: CONSUMER_RESET: ")) << retry;
    EXPECT_THAT(retry, HasSubstr(targets[i])) << "the server's message names the target";
  }
  EXPECT_THAT(log, Not(HasSubstr("walfeed consumer:")));
  std::cout << "[" << GetParam() << "] reset to " << targets[0] << " and to the head "
            << targets[1] << "; resubscribed both times; wrote " << p1 << " and " << p2
            << " of the 11 events delivered before each reset; "
            << LogValues(log, "acked ").size() << " acks; total " << (absl::Now() - begin)
            << std::endl;
}

// A second Subscribe of the same consumer takes over: the consumer's session
// ends ABORTED with reason SESSION_SUPERSEDED and no RetryInfo, and the consumer
// exits with code 1 instead of taking the consumer back.
TEST_P(ClientInteropTest, ExitsWhenAnotherSubscribeTakesOver) {
  StartServer(0);
  ASSERT_TRUE(server_);
  ASSERT_THAT(reference_.Start(stub_.get()), IsOk());
  ConsumerProcess* consumer = StartConsumer(server_->port(), kStream, kConsumer, "consumer");
  ASSERT_NE(consumer, nullptr);
  WriteRound(0);
  ASSERT_FALSE(HasFatalFailure());
  ASSERT_THAT(reference_.ReadUntil(kEventsPerRound), IsOk());
  const std::string last = reference_.events().back().id();
  ASSERT_TRUE(WaitUntil([&] { return Checkpoint() == last; }, kDeadline)) << consumer->Log();

  grpc::ClientContext context;
  walfeed::v1::SubscribeRequest request;
  request.set_stream(kStream);
  request.set_consumer(kConsumer);
  std::unique_ptr<grpc::ClientReader<walfeed::v1::SubscribeResponse>> takeover =
      stub_->Subscribe(&context, request);
  walfeed::v1::SubscribeResponse first;
  ASSERT_TRUE(takeover->Read(&first));
  ASSERT_TRUE(first.has_started());
  EXPECT_EQ(first.started().checkpoint(), last);

  absl::StatusOr<int> code = consumer->WaitForExit(kDeadline);
  ASSERT_THAT(code, IsOk()) << consumer->Log();
  EXPECT_EQ(*code, 1) << consumer->Log();
  const std::string log = consumer->Log();
  const std::vector<std::string> gave_up = LogValues(log, "walfeed consumer: ");
  ASSERT_EQ(gave_up.size(), 1u) << log;
  EXPECT_TRUE(absl::StartsWith(gave_up[0], "ABORTED SESSION_SUPERSEDED: ")) << gave_up[0];
  EXPECT_THAT(gave_up[0], HasSubstr(first.started().session_id()))
      << "the server's message names the new session";
  EXPECT_THAT(log, Not(HasSubstr("retry in")));
  context.TryCancel();
  (void)takeover->Finish();
}

// Where two lines first differ, for a failure message that does not print
// megabytes ("" when they are equal).
std::string FirstDifference(const std::string& actual, const std::string& expected) {
  if (actual == expected) return "";
  size_t at = 0;
  while (at < actual.size() && at < expected.size() && actual[at] == expected[at]) ++at;
  return absl::StrCat("differs at byte ", at, " of ", actual.size(), " (expected ", expected.size(),
                      " bytes): got \"", actual.substr(at, 40), "\", expected \"",
                      expected.substr(at, 40), "\"");
}

// A row with a 5 MB value: its INSERT event is larger than gRPC's default 4 MiB
// receive limit, which a consumer must lift. With the default it ends with
// RESOURCE_EXHAUSTED ("Received message larger than max"), and every restart
// meets the same event again. Here it writes the reference's line for it, goes
// on with the events after it and acks past it.
TEST_P(ClientInteropTest, ReceivesAnEventLargerThanFourMiB) {
  const absl::Time begin = absl::Now();
  StartServer(0);
  ASSERT_TRUE(server_);
  ASSERT_THAT(reference_.Start(stub_.get()), IsOk());
  ConsumerProcess* consumer = StartConsumer(server_->port(), kStream, kConsumer, "consumer");
  ASSERT_NE(consumer, nullptr);
  // The large value: 156250 md5 hex digests, 5,000,000 bytes. Events before it,
  // after it in its transaction and in a later transaction.
  for (const char* sql :
       {"INSERT INTO items VALUES (1, 'before', 1, 'small')",
        "BEGIN; INSERT INTO items SELECT 2, 'large', 2, string_agg(md5(g::text), '') "
        "FROM generate_series(1, 156250) g; INSERT INTO items VALUES (3, 'after', 3, NULL); COMMIT",
        "INSERT INTO items VALUES (4, 'later', 4, 'small')"}) {
    ASSERT_THAT(pg_->Exec(sql), IsOk()) << sql;
  }
  constexpr size_t kEvents = 4;
  ASSERT_THAT(reference_.ReadUntil(kEvents), IsOk());
  const std::vector<ChangeEvent>& events = reference_.events();
  ASSERT_EQ(events.size(), kEvents);
  ASSERT_GT(events[1].ByteSizeLong(), size_t{4} << 20) << "the event is not larger than 4 MiB";
  const std::string last_id = events.back().id();

  // Acked through the last event, or (without the lifted limit) gave up.
  ASSERT_TRUE(WaitUntil([&] { return consumer->Exited() || Checkpoint() == last_id; }, kDeadline))
      << consumer->Log();
  ASSERT_FALSE(consumer->Exited()) << consumer->Log();
  const std::vector<std::string> lines = CompleteLines(out_path());
  ASSERT_EQ(lines.size(), kEvents) << consumer->Log();
  for (size_t i = 0; i < kEvents; ++i) {
    EXPECT_EQ(FirstDifference(lines[i], CanonicalLine(events[i])), "") << "line " << i;
  }
  std::cout << "[" << GetParam() << "] a " << events[1].ByteSizeLong()
            << "-byte event delivered and acked in " << (absl::Now() - begin) << std::endl;
}

INSTANTIATE_TEST_SUITE_P(Languages, ClientInteropTest,
                         ::testing::Values("python", "node", "go"),
                         [](const ::testing::TestParamInfo<std::string>& info) {
                           return info.param;
                         });

// examples/{python,node,go}/effect_once on each library's watermark helper:
// effects in a second database of the same cluster, each event's effect
// exactly once although the consumer dies between its destination COMMIT and
// its ack.
class EffectOnceTest : public ClientInteropTest {
 protected:
  static constexpr char kEffectConsumer[] = "effect-once";

  ConsumerProcess* StartEffectOnce(int port, const std::string& name, int crash_after_commit) {
    // lib/pq (Go) asks for TLS unless told not to; libpq and node-postgres
    // fall back to plaintext by themselves.
    const std::string dsn =
        pg_->ConnInfo("dest") + (GetParam() == std::string("go") ? " sslmode=disable" : "");
    std::vector<std::string> argv = {
        absl::StrCat(WALFEED_EXAMPLES_BIN, "/", GetParam(), "-effect-once"),
        "--server", absl::StrCat("127.0.0.1:", port),
        "--stream", kStream,
        "--consumer", kEffectConsumer,
        "--dest-dsn", dsn};
    if (crash_after_commit > 0) {
      argv.insert(argv.end(), {"--crash-after-commit", absl::StrCat(crash_after_commit)});
    }
    absl::StatusOr<std::unique_ptr<ConsumerProcess>> process =
        ConsumerProcess::Spawn(argv, absl::StrCat(dir_, "/", name, ".log"));
    EXPECT_THAT(process, IsOk());
    if (!process.ok()) return nullptr;
    processes_.push_back(std::move(*process));
    return processes_.back().get();
  }

  // Rows first .. last of items, `per_transaction` rows per transaction: one
  // INSERT event each.
  void InsertRows(int first, int last, int per_transaction) {
    for (int from = first; from <= last; from += per_transaction) {
      const int to = std::min(last, from + per_transaction - 1);
      ASSERT_THAT(pg_->Exec(absl::StrCat("INSERT INTO items SELECT g, 'row-' || g, g, NULL "
                                         "FROM generate_series(",
                                         from, ", ", to, ") g")),
                  IsOk());
    }
  }

  // The destination's applied_effects.event_id, every row in id order (empty
  // while the table does not exist yet).
  std::vector<std::string> AppliedEffects() {
    absl::StatusOr<std::vector<std::string>> ids = pg_->Query(
        "SELECT event_id FROM applied_effects ORDER BY commit_lsn, idx",
        "dest");
    return ids.ok() ? *ids : std::vector<std::string>{};
  }

  std::string StoredWatermark() {
    absl::StatusOr<std::string> id = pg_->QueryValue(
        absl::StrCat("SELECT coalesce(last_id, '') FROM walfeed_watermark WHERE consumer = '",
                     kEffectConsumer, "' AND stream = '", kStream, "'"),
        "dest");
    EXPECT_THAT(id, IsOk());
    return id.value_or("");
  }
};

TEST_P(EffectOnceTest, EffectOnceSurvivesACrashBetweenCommitAndAck) {
  const absl::Time begin = absl::Now();
  ASSERT_THAT(pg_->Exec("CREATE DATABASE dest"), IsOk());
  StartServer(0);
  ASSERT_TRUE(server_);
  const int port = server_->port();
  ASSERT_THAT(reference_.Start(stub_.get()), IsOk());
  // 12 events in 4 transactions before the consumer starts; with at most 4
  // events per batch (the server's config) they take at least 3 batches.
  constexpr int kFirstRows = 12;
  InsertRows(1, kFirstRows, 3);
  ASSERT_FALSE(HasFatalFailure());
  ASSERT_THAT(reference_.ReadUntil(kFirstRows), IsOk());

  // 1. It commits batch 1 and acks it, commits batch 2 and dies before the ack.
  ConsumerProcess* first = StartEffectOnce(port, "effect-run1", 2);
  ASSERT_NE(first, nullptr);
  absl::StatusOr<int> code = first->WaitForExit(kDeadline);
  ASSERT_THAT(code, IsOk()) << first->Log();
  ASSERT_EQ(*code, 137) << first->Log();
  const std::string log1 = first->Log();
  ASSERT_THAT(log1, HasSubstr("crashing after commit 2, before its ack"));
  ASSERT_EQ(LogValues(log1, "acked ").size(), 1u) << log1;
  // The crash window really happened: the destination is ahead of walfeed.
  const std::string watermark_at_crash = StoredWatermark();
  const std::string checkpoint_at_crash = Checkpoint(kEffectConsumer);
  ASSERT_FALSE(watermark_at_crash.empty());
  ASSERT_FALSE(checkpoint_at_crash.empty()) << "batch 1 was acked";
  EXPECT_EQ(checkpoint_at_crash, LogValues(log1, "acked ")[0]);
  EXPECT_LT(LineId(checkpoint_at_crash), LineId(watermark_at_crash));
  const std::vector<std::string> applied_at_crash = AppliedEffects();
  ASSERT_FALSE(applied_at_crash.empty());
  EXPECT_EQ(applied_at_crash.back(), watermark_at_crash);

  // 2. More changes while it is down, then a restart without the crash.
  constexpr int kTotalRows = 20;
  InsertRows(kFirstRows + 1, kTotalRows, 2);
  ASSERT_FALSE(HasFatalFailure());
  ASSERT_THAT(reference_.ReadUntil(kTotalRows), IsOk());
  const std::vector<ChangeEvent>& events = reference_.events();
  ASSERT_EQ(events.size(), static_cast<size_t>(kTotalRows));
  const std::string last_id = events.back().id();
  const absl::Time restarted = absl::Now();
  ConsumerProcess* second = StartEffectOnce(port, "effect-run2", 0);
  ASSERT_NE(second, nullptr);
  ASSERT_TRUE(WaitUntil([&] { return AppliedEffects().size() >= events.size(); }, kDeadline))
      << second->Log();
  ASSERT_TRUE(WaitUntil([&] { return Checkpoint(kEffectConsumer) == last_id; }, kDeadline))
      << second->Log();
  const absl::Time caught_up = absl::Now();
  const std::string log2 = second->Log();
  second->Signal(SIGTERM);

  // It resumed after the destination's watermark, not after walfeed's checkpoint.
  const std::vector<std::string> started = LogValues(log2, "started ");
  ASSERT_EQ(started.size(), 1u) << log2;
  EXPECT_THAT(started[0], HasSubstr(absl::StrCat("checkpoint=", checkpoint_at_crash, " ")));
  EXPECT_THAT(started[0], HasSubstr(absl::StrCat("start_after=", watermark_at_crash)));

  // Every event's effect exactly once, in id order, nothing missing.
  std::vector<std::string> expected;
  for (const ChangeEvent& event : events) expected.push_back(event.id());
  EXPECT_EQ(AppliedEffects(), expected);
  std::map<std::string, int> times;
  for (const std::string& id : AppliedEffects()) ++times[id];
  for (const std::string& id : expected) EXPECT_EQ(times[id], 1) << id;
  EXPECT_EQ(StoredWatermark(), last_id);

  std::cout << "[" << GetParam() << " effect-once] " << events.size() << " events; run 1 committed through "
            << watermark_at_crash << " (" << applied_at_crash.size()
            << " effects) and died with the checkpoint at " << checkpoint_at_crash
            << "; run 2 caught up in " << (caught_up - restarted) << "; total "
            << (absl::Now() - begin) << std::endl;
}

INSTANTIATE_TEST_SUITE_P(Languages, EffectOnceTest, ::testing::Values("python", "node", "go"),
                         [](const ::testing::TestParamInfo<std::string>& info) {
                           return info.param;
                         });

}  // namespace
}  // namespace walfeed::server
