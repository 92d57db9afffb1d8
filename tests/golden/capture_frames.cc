// golden_capture_frames: records the raw walsender CopyData stream of one logical
// replication slot as hex lines, to produce the golden pgoutput vectors.
//
// Test tooling only: it links libpq, which the replication core never does. It
// connects with replication=database, runs START_REPLICATION SLOT ... LOGICAL with
// the given pgoutput options and writes every CopyData frame it receives ('w'
// XLogData and 'k' keepalive, walsender header included, nothing reinterpreted) as
// one lower-case hex line. Like pg_recvlogical --endpos it stops once the stream
// has provably passed --endpos: after a keepalive whose walEnd >= endpos (the
// walsender has decoded every WAL record before it), or after a transaction-ending
// XLogData (Commit, Stream Commit/Abort, Prepare, Commit/Rollback Prepared) whose
// header position >= endpos. It never confirms anything (write = flush = 0/0), so
// the slot can be read again.
//
// Keepalives are answered whenever the server asks, and also whenever the
// keepalive reports a walEnd not seen before: the walsender only pings again after
// a reply, so this keeps the final "caught up" keepalive prompt without a
// ping-pong while the position stands still.
//
// Usage:
//   golden_capture_frames --dsn CONNINFO --slot NAME --endpos X/Y --out FILE
//       [--start X/Y] [--timeout SECONDS] [--option NAME=VALUE]... [--comment TEXT]...
// The output starts with '#' lines: the comments, the server version and the exact
// START_REPLICATION command. The file appears only when endpos was reached.
// Exit status: 0 done, 1 error, 2 deadline passed before endpos.

#include <poll.h>

#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/escaping.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "absl/time/clock.h"
#include "absl/types/span.h"
#include "absl/types/variant.h"
#include "libpq-fe.h"
#include "replication/copy_data.h"
#include "replication/lsn.h"

namespace walfeed::golden {
namespace {

using ::walfeed::replication::Lsn;
namespace copy_data = ::walfeed::replication::copy_data;

constexpr int kExitError = 1;
constexpr int kExitDeadline = 2;

struct Options {
  std::string dsn;
  std::string slot;
  Lsn start;
  Lsn endpos;
  std::string out;
  int timeout_seconds = 60;
  std::vector<std::pair<std::string, std::string>> plugin_options;
  std::vector<std::string> comments;
};

struct ConnDeleter {
  void operator()(PGconn* conn) const { PQfinish(conn); }
};
struct ResultDeleter {
  void operator()(PGresult* result) const { PQclear(result); }
};
using ConnPtr = std::unique_ptr<PGconn, ConnDeleter>;
using ResultPtr = std::unique_ptr<PGresult, ResultDeleter>;

void Usage() {
  std::cerr << "usage: golden_capture_frames --dsn CONNINFO --slot NAME --endpos X/Y"
               " --out FILE\n"
               "           [--start X/Y] [--timeout SECONDS] [--option NAME=VALUE]..."
               " [--comment TEXT]...\n";
}

// Parses argv into `options`; prints the problem and returns false on bad input.
bool ParseArgs(int argc, char** argv, Options& options) {
  bool have_endpos = false;
  for (int i = 1; i < argc; ++i) {
    const absl::string_view flag = argv[i];
    if (i + 1 >= argc) {
      std::cerr << "missing value for " << flag << "\n";
      return false;
    }
    const std::string value = argv[++i];
    if (flag == "--dsn") {
      options.dsn = value;
    } else if (flag == "--slot") {
      options.slot = value;
    } else if (flag == "--out") {
      options.out = value;
    } else if (flag == "--start" || flag == "--endpos") {
      absl::StatusOr<Lsn> lsn = Lsn::Parse(value);
      if (!lsn.ok()) {
        std::cerr << flag << ": " << lsn.status() << "\n";
        return false;
      }
      if (flag == "--start") {
        options.start = *lsn;
      } else {
        options.endpos = *lsn;
        have_endpos = true;
      }
    } else if (flag == "--timeout") {
      if (!absl::SimpleAtoi(value, &options.timeout_seconds) || options.timeout_seconds <= 0) {
        std::cerr << "--timeout wants a positive number of seconds, got " << value << "\n";
        return false;
      }
    } else if (flag == "--option") {
      const size_t eq = value.find('=');
      if (eq == std::string::npos || eq == 0) {
        std::cerr << "--option wants NAME=VALUE, got " << value << "\n";
        return false;
      }
      options.plugin_options.emplace_back(value.substr(0, eq), value.substr(eq + 1));
    } else if (flag == "--comment") {
      options.comments.push_back(value);
    } else {
      std::cerr << "unknown flag " << flag << "\n";
      return false;
    }
  }
  if (options.dsn.empty() || options.slot.empty() || options.out.empty() || !have_endpos ||
      !options.endpos.valid()) {
    std::cerr << "--dsn, --slot, --out and a non-zero --endpos are required\n";
    return false;
  }
  return true;
}

// Appends `text` quoted with libpq's escapers; false (error printed) on failure.
bool AppendQuoted(PGconn* conn, const std::string& text, bool identifier, std::string& command) {
  char* escaped = identifier ? PQescapeIdentifier(conn, text.data(), text.size())
                             : PQescapeLiteral(conn, text.data(), text.size());
  if (escaped == nullptr) {
    std::cerr << "cannot quote " << text << ": " << PQerrorMessage(conn);
    return false;
  }
  command += escaped;
  PQfreemem(escaped);
  return true;
}

// START_REPLICATION SLOT "s" LOGICAL X/Y ("name" 'value', ...), quoted the way
// pg_recvlogical quotes it; nullopt if quoting failed.
std::optional<std::string> BuildCommand(PGconn* conn, const Options& options) {
  std::string command = "START_REPLICATION SLOT ";
  if (!AppendQuoted(conn, options.slot, /*identifier=*/true, command)) return std::nullopt;
  absl::StrAppend(&command, " LOGICAL ", options.start.ToString());
  if (options.plugin_options.empty()) return command;
  command += " (";
  for (size_t i = 0; i < options.plugin_options.size(); ++i) {
    if (i > 0) command += ", ";
    if (!AppendQuoted(conn, options.plugin_options[i].first, true, command)) {
      return std::nullopt;
    }
    command += " ";
    if (!AppendQuoted(conn, options.plugin_options[i].second, false, command)) {
      return std::nullopt;
    }
  }
  command += ")";
  return command;
}

// True for the pgoutput messages that close a transaction (or a streamed or
// prepared part of one); their XLogData header position is that record's end.
bool EndsTransaction(absl::Span<const uint8_t> payload) {
  switch (payload[0]) {
    case 'C':  // Commit
    case 'c':  // Stream Commit
    case 'A':  // Stream Abort
    case 'P':  // Prepare
    case 'p':  // Stream Prepare
    case 'K':  // Commit Prepared
    case 'r':  // Rollback Prepared
      return true;
    default:
      return false;
  }
}

bool SendStatus(PGconn* conn) {
  copy_data::StandbyStatusUpdate update;  // write = flush = apply = 0/0
  update.client_time = copy_data::ToPostgresMicros(absl::Now());
  const auto bytes = copy_data::Encode(update);
  if (PQputCopyData(conn, reinterpret_cast<const char*>(bytes.data()),
                    static_cast<int>(bytes.size())) != 1 ||
      PQflush(conn) != 0) {
    std::cerr << "sending status update failed: " << PQerrorMessage(conn);
    return false;
  }
  return true;
}

// Ends COPY politely and drains what the server still sends, so a late
// ErrorResponse is printed rather than lost.
void StopStreaming(PGconn* conn) {
  if (PQputCopyEnd(conn, nullptr) != 1 || PQflush(conn) != 0) return;
  char* buffer = nullptr;
  while (PQgetCopyData(conn, &buffer, 0) > 0) PQfreemem(buffer);
  while (PGresult* raw = PQgetResult(conn)) {
    ResultPtr result(raw);
    const ExecStatusType status = PQresultStatus(result.get());
    if (status != PGRES_COMMAND_OK && status != PGRES_COPY_OUT && status != PGRES_COPY_BOTH) {
      std::cerr << "after CopyDone: " << PQresultErrorMessage(result.get());
    }
  }
}

int Run(const Options& options) {
  const char* keywords[] = {"dbname", "replication", "fallback_application_name", nullptr};
  const char* values[] = {options.dsn.c_str(), "database", "walfeed_golden_capture", nullptr};
  ConnPtr conn(PQconnectdbParams(keywords, values, /*expand_dbname=*/1));
  if (PQstatus(conn.get()) != CONNECTION_OK) {
    std::cerr << "connection failed: " << PQerrorMessage(conn.get());
    return kExitError;
  }

  // A replication=database walsender also runs simple SQL before COPY starts.
  std::string server_version;
  {
    ResultPtr result(PQexec(conn.get(), "SELECT version()"));
    if (PQresultStatus(result.get()) != PGRES_TUPLES_OK || PQntuples(result.get()) != 1) {
      std::cerr << "SELECT version() failed: " << PQerrorMessage(conn.get());
      return kExitError;
    }
    server_version = PQgetvalue(result.get(), 0, 0);
  }

  const std::optional<std::string> built = BuildCommand(conn.get(), options);
  if (!built.has_value()) return kExitError;
  const std::string& command = *built;

  const std::string tmp_path = options.out + ".partial";
  std::ofstream out(tmp_path, std::ios::trunc);
  if (!out) {
    std::cerr << "cannot write " << tmp_path << "\n";
    return kExitError;
  }
  for (const std::string& comment : options.comments) out << "# " << comment << "\n";
  out << "# server: " << server_version << "\n"
      << "# command: " << command << "\n"
      << "# endpos: " << options.endpos.ToString() << "\n"
      << "# one CopyData frame per line, lower-case hex: 'w' (77) XLogData or 'k' (6b)"
         " keepalive\n";

  {
    ResultPtr result(PQexec(conn.get(), command.c_str()));
    if (PQresultStatus(result.get()) != PGRES_COPY_BOTH) {
      std::cerr << command << " failed: " << PQerrorMessage(conn.get());
      std::remove(tmp_path.c_str());
      return kExitError;
    }
  }

  const auto deadline =
      std::chrono::steady_clock::now() + std::chrono::seconds(options.timeout_seconds);
  size_t frames = 0;
  bool done = false;
  Lsn last_keepalive_end = Lsn::kInvalid;
  while (!done) {
    char* buffer = nullptr;
    const int n = PQgetCopyData(conn.get(), &buffer, /*async=*/1);
    if (n == 0) {
      const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
          deadline - std::chrono::steady_clock::now());
      if (left.count() <= 0) {
        std::cerr << "deadline of " << options.timeout_seconds << " s passed before endpos "
                  << options.endpos << " (" << frames << " frames received)\n";
        std::remove(tmp_path.c_str());
        return kExitDeadline;
      }
      pollfd fd = {PQsocket(conn.get()), POLLIN, 0};
      if (poll(&fd, 1, static_cast<int>(left.count())) < 0 && errno != EINTR) {
        std::perror("poll");
        std::remove(tmp_path.c_str());
        return kExitError;
      }
      if (PQconsumeInput(conn.get()) == 0) {
        std::cerr << "connection lost: " << PQerrorMessage(conn.get());
        std::remove(tmp_path.c_str());
        return kExitError;
      }
      continue;
    }
    if (n < 0) {
      // -1: the server ended COPY before endpos; -2: connection error.
      std::cerr << "stream ended before endpos " << options.endpos << ": "
                << PQerrorMessage(conn.get());
      while (PGresult* raw = PQgetResult(conn.get())) {
        ResultPtr result(raw);
        std::cerr << PQresultErrorMessage(result.get());
      }
      std::remove(tmp_path.c_str());
      return kExitError;
    }

    const absl::Span<const uint8_t> frame(reinterpret_cast<const uint8_t*>(buffer),
                                          static_cast<size_t>(n));
    out << absl::BytesToHexString(absl::string_view(buffer, static_cast<size_t>(n))) << "\n";
    ++frames;
    absl::StatusOr<copy_data::ServerMessage> message = copy_data::Decode(frame);
    if (!message.ok()) {
      std::cerr << "undecodable frame " << frames << ": " << message.status() << "\n";
      PQfreemem(buffer);
      std::remove(tmp_path.c_str());
      return kExitError;
    }
    bool reply = false;
    if (const auto* keepalive = absl::get_if<copy_data::PrimaryKeepalive>(&*message)) {
      reply = keepalive->reply_requested || keepalive->wal_end != last_keepalive_end;
      last_keepalive_end = keepalive->wal_end;
      done = keepalive->wal_end >= options.endpos;
    } else {
      const auto& data = absl::get<copy_data::XLogData>(*message);
      done = EndsTransaction(data.payload) && data.wal_end >= options.endpos;
    }
    PQfreemem(buffer);
    if (reply && !done && !SendStatus(conn.get())) {
      std::remove(tmp_path.c_str());
      return kExitError;
    }
  }

  StopStreaming(conn.get());
  out.close();
  if (!out || std::rename(tmp_path.c_str(), options.out.c_str()) != 0) {
    std::cerr << "cannot finish " << options.out << "\n";
    std::remove(tmp_path.c_str());
    return kExitError;
  }
  std::cerr << "wrote " << frames << " frames to " << options.out << "\n";
  return 0;
}

}  // namespace
}  // namespace walfeed::golden

int main(int argc, char** argv) {
  walfeed::golden::Options options;
  if (!walfeed::golden::ParseArgs(argc, argv, options)) {
    walfeed::golden::Usage();
    return walfeed::golden::kExitError;
  }
  return walfeed::golden::Run(options);
}
