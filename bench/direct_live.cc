// direct_live: the live-latency baseline without walfeed. Reads a logical slot
// straight from PostgreSQL (libpq, pgoutput, as pg_recvlogical or a psycopg2
// client would) and measures, for every INSERT/UPDATE/DELETE message, its
// arrival time minus its transaction's commit timestamp (from the Begin
// message). walfeed_bench.py runs it alone, on a slot of the same
// publication and through the same writers, just before walfeed_live's case:
// the lowest latency a direct reader got on the machine in those seconds.
//
// It reads every message as soon as the socket has it (poll, no read window):
// the lowest latency a direct reader gets. It confirms each commit's end
// position on a 100 ms cadence and whenever PostgreSQL asks for a reply.
//
// Prints {"subscribed": true} once streaming has begun, then, after
// --warmup-s seconds from the first change and --duration-s more, one JSON
// line with the same fields as walfeed_live's latency figures.
//
//   direct_live --conninfo "host=127.0.0.1 port=P dbname=D user=U" --slot S
//               --publication P [--duration-s 10] [--warmup-s 2] [--timeout-s 60]
#include <libpq-fe.h>
#include <poll.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "flag_args.h"
#include "latency_summary.h"

namespace {

using Clock = std::chrono::steady_clock;

struct Flags {
  std::string conninfo;
  std::string slot;
  std::string publication;
  int duration_s = 10;
  int warmup_s = 2;
  int timeout_s = 60;  // For the first change to arrive.
};

Flags ParseFlags(int argc, char** argv) {
  walfeed::bench::FlagArgs args(argc, argv, "direct_live",
                                "--conninfo CONNINFO --slot NAME --publication NAME "
                                "[--duration-s S] [--warmup-s S] [--timeout-s S]");
  Flags flags;
  while (args.Next()) {
    if (args.Is("--conninfo")) {
      flags.conninfo = args.text();
    } else if (args.Is("--slot")) {
      flags.slot = args.text();
    } else if (args.Is("--publication")) {
      flags.publication = args.text();
    } else if (args.Is("--duration-s")) {
      flags.duration_s = args.Positive<int>();
    } else if (args.Is("--warmup-s")) {
      flags.warmup_s = args.Positive<int>();
    } else if (args.Is("--timeout-s")) {
      flags.timeout_s = args.Positive<int>();
    } else {
      args.Fail("unknown flag " + args.flag());
    }
  }
  if (flags.conninfo.empty() || flags.slot.empty() || flags.publication.empty()) {
    args.Fail("--conninfo, --slot and --publication are required");
  }
  return flags;
}

// PostgreSQL's timestamps count microseconds from 2000-01-01 00:00 UTC.
constexpr int64_t kPgEpochUnixMicros = 946684800LL * 1000000;

uint64_t Be64(const char* p) {
  uint64_t v = 0;
  for (int i = 0; i < 8; ++i) v = (v << 8) | static_cast<unsigned char>(p[i]);
  return v;
}

void PutBe64(char* p, uint64_t v) {
  for (int i = 7; i >= 0; --i, v >>= 8) p[i] = static_cast<char>(v & 0xff);
}

struct PgConnDeleter {
  void operator()(PGconn* conn) const { PQfinish(conn); }
};

int Fail(const char* what, PGconn* conn) {
  std::fprintf(stderr, "direct_live: %s: %s", what, conn ? PQerrorMessage(conn) : "\n");
  return 1;
}

// A standby status update confirming `lsn` as written, flushed and applied.
bool SendStatus(PGconn* conn, uint64_t lsn) {
  char message[34];
  message[0] = 'r';
  PutBe64(message + 1, lsn);
  PutBe64(message + 9, lsn);
  PutBe64(message + 17, lsn);
  PutBe64(message + 25, static_cast<uint64_t>(walfeed::bench::WallMicros() - kPgEpochUnixMicros));
  message[33] = 0;
  return PQputCopyData(conn, message, sizeof(message)) == 1 && PQflush(conn) >= 0;
}

int Run(const Flags& flags) {
  // The conninfo as given (key=value or a URI), plus replication=database.
  const char* const keywords[] = {"dbname", "replication", nullptr};
  const char* const values[] = {flags.conninfo.c_str(), "database", nullptr};
  std::unique_ptr<PGconn, PgConnDeleter> conn(
      PQconnectdbParams(keywords, values, /*expand_dbname=*/1));
  if (PQstatus(conn.get()) != CONNECTION_OK) return Fail("connect", conn.get());
  const std::string start = "START_REPLICATION SLOT \"" + flags.slot +
                            "\" LOGICAL 0/0 (proto_version '1', publication_names '\"" +
                            flags.publication + "\"')";
  PGresult* started = PQexec(conn.get(), start.c_str());
  const bool copying = PQresultStatus(started) == PGRES_COPY_BOTH;
  PQclear(started);
  if (!copying) return Fail("START_REPLICATION", conn.get());
  std::printf("{\"subscribed\": true}\n");  // Tells the driver to start its writers.
  std::fflush(stdout);

  const Clock::time_point give_up = Clock::now() + std::chrono::seconds(flags.timeout_s);
  std::vector<int64_t> latencies_us;
  uint64_t transactions = 0;
  int64_t commit_unix_us = 0;  // The open transaction's, from its Begin.
  uint64_t confirmed = 0, received = 0;
  Clock::time_point first{}, measure_from{}, measure_until{};
  Clock::time_point next_status = Clock::now();
  std::string stop_reason;
  while (stop_reason.empty()) {
    char* buffer = nullptr;
    const int length = PQgetCopyData(conn.get(), &buffer, /*async=*/1);
    const Clock::time_point now = Clock::now();
    bool reply = false;
    if (length > 0) {
      std::unique_ptr<char, decltype(&PQfreemem)> owned(buffer, PQfreemem);
      if (buffer[0] == 'k' && length >= 18) {
        reply = buffer[17] != 0;
      } else if (buffer[0] == 'w' && length > 25) {
        const char* payload = buffer + 25;
        const int size = length - 25;
        const char kind = payload[0];
        if (kind == 'B' && size >= 21) {
          commit_unix_us = static_cast<int64_t>(Be64(payload + 9)) + kPgEpochUnixMicros;
        } else if (kind == 'C' && size >= 26) {
          received = Be64(payload + 10);  // The commit's end position.
          if (now >= measure_from && first != Clock::time_point{}) ++transactions;
        } else if (kind == 'I' || kind == 'U' || kind == 'D') {
          const int64_t now_us = walfeed::bench::WallMicros();
          if (first == Clock::time_point{}) {
            first = now;
            measure_from = first + std::chrono::seconds(flags.warmup_s);
            measure_until = measure_from + std::chrono::seconds(flags.duration_s);
          }
          if (now >= measure_from) latencies_us.push_back(now_us - commit_unix_us);
        }
      }
    } else if (length == -1) {
      stop_reason = "stream_ended";
      break;
    } else if (length < -1) {
      return Fail("read", conn.get());
    }
    if (reply || (now >= next_status && received != confirmed)) {
      if (!SendStatus(conn.get(), received)) return Fail("status update", conn.get());
      confirmed = received;
      next_status = now + std::chrono::milliseconds(100);
    }
    if (first != Clock::time_point{} && now >= measure_until) stop_reason = "duration";
    if (first == Clock::time_point{} && now >= give_up) stop_reason = "no_events";
    if (length == 0 && stop_reason.empty()) {
      // Nothing buffered: wait for the socket, or for the next status update
      // when there is something to confirm.
      const Clock::time_point until =
          received != confirmed ? next_status : now + std::chrono::milliseconds(100);
      const auto wait = std::max<Clock::duration>(std::chrono::milliseconds(1), until - now);
      pollfd fd{PQsocket(conn.get()), POLLIN, 0};
      poll(&fd, 1, static_cast<int>(
                       std::chrono::duration_cast<std::chrono::milliseconds>(wait).count()));
      if (PQconsumeInput(conn.get()) != 1) return Fail("read", conn.get());
    }
  }
  const std::string latency = walfeed::bench::LatencyFields(
      latencies_us, transactions, static_cast<double>(flags.duration_s));
  std::printf("{%s, \"stop_reason\": \"%s\"}\n", latency.c_str(), stop_reason.c_str());
  std::fflush(stdout);
  return stop_reason == "duration" ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) { return Run(ParseFlags(argc, argv)); }
