// walfeed-server: serves the change streams configured in a YAML file.
//
//   walfeed-server --config /etc/walfeed/walfeed.yaml [--listen HOST:PORT]
//
// Start-up order: config → credentials → gRPC server listening (health NOT_SERVING
// per stream) → one StreamRuntime per stream, which provisions, checks its slot
// and starts reading (server/walfeed_server.h). Shutdown on SIGTERM/SIGINT: health
// NOT_SERVING, every call and subscription ends with UNAVAILABLE, the gRPC server
// drains, readers send a last status update and end the copy cleanly; the process
// exits within shutdown_timeout whatever PostgreSQL does.
#include <poll.h>
#include <systemd/sd-daemon.h>
#include <sys/signalfd.h>
#include <unistd.h>

#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <memory>
#include <string>
#include <thread>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "grpc/grpc.h"
#include "replication/pg/pg_conn.h"
#include "replication/pg/pg_stream_source.h"
#include "server/config.h"
#include "server/log_format.h"
#include "server/walfeed_server.h"
#include "spdlog/spdlog.h"

namespace walfeed::server {
namespace {

constexpr char kUsage[] = R"(walfeed-server: stream PostgreSQL changes over gRPC.

Usage:
  walfeed-server --config FILE [--listen HOST:PORT] [--advertise-address HOST:PORT]
                 [--metrics-listen HOST:PORT] [--log-format text|json]
                 [--log-level LEVEL]
  walfeed-server --config FILE --check-config
  walfeed-server --help | --version

Options:
  --config FILE     YAML configuration (see deploy/walfeed.example.yaml): the
                    listen address, TLS, tokens, and the streams (connection,
                    slot, publications). Secrets come from files or the
                    environment, never from the command line.
  --listen ADDR     Overrides `listen` from the file, e.g. 127.0.0.1:50051.
  --advertise-address ADDR
                    Overrides `advertise_address`: where clients reach this
                    instance, as standbys name it (e.g. the pod's IP:50051).
  --metrics-listen ADDR
                    Overrides `metrics_listen`: serve Prometheus metrics at
                    http://ADDR/metrics, e.g. 127.0.0.1:9464 (an IP address;
                    no TLS or authentication: keep it on a private network).
  --log-format F    text (default) or json: one line per entry either way.
                    Overrides `log.format`.
  --log-level L     trace, debug, info (default), warn or error. Overrides
                    `log.level`. gRPC's own lines follow GRPC_VERBOSITY.
  --check-config    Parse and validate the configuration and what it names
                    (the TLS and tokens files are read, each conninfo is
                    parsed; no connection is made), then exit 0 (valid) or 2
                    (invalid, with the reason).
  --help            This text.
  --version         The version.

Health (grpc.health.v1): "" is SERVING while the server runs; "walfeed.v1.ChangeStream"
is SERVING while every stream streams; "walfeed.v1.ChangeStream/<stream>" is
SERVING while that stream is connected to its slot.

Active/standby: run several instances with the same configuration; each stream
is streamed by one of them (a PostgreSQL advisory lock decides), the others
stand by (health NOT_SERVING, calls UNAVAILABLE naming the active instance)
and take over when it stops or loses PostgreSQL. See docs/operations.md.

Under systemd (Type=notify) the server reports READY=1 once it listens and
STOPPING=1 when a shutdown begins.

Exit status: 0 after a clean shutdown (SIGTERM/SIGINT), 2 for a bad command line
or configuration, 1 when the server cannot start.
)";

struct Flags {
  std::string config;
  std::string listen;
  std::string advertise_address;
  std::string metrics_listen;
  std::string log_format;
  std::string log_level;
  bool check_config = false;
};

[[noreturn]] void UsageError(const std::string& message) {
  std::cerr << "walfeed-server: " << message << "\n\n" << kUsage;
  std::exit(2);
}

// Parses argv; exits for --help/--version and usage errors.
Flags ParseFlags(int argc, char** argv) {
  Flags flags;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    auto value = [&](const char* name) -> std::string {
      const std::string prefix = absl::StrCat(name, "=");
      if (arg.rfind(prefix, 0) == 0) return arg.substr(prefix.size());
      if (i + 1 >= argc) {
        std::cerr << "walfeed-server: " << name << " needs a value\n\n" << kUsage;
        std::exit(2);
      }
      return argv[++i];
    };
    if (arg == "--help" || arg == "-h") {
      std::cout << kUsage;
      std::exit(0);
    } else if (arg == "--version") {
      std::cout << "walfeed-server " << WALFEED_VERSION << "\n";
      std::exit(0);
    } else if (arg == "--check-config") {
      flags.check_config = true;
    } else if (arg.rfind("--config", 0) == 0) {
      flags.config = value("--config");
    } else if (arg == "--listen" || arg.rfind("--listen=", 0) == 0) {
      flags.listen = value("--listen");
      if (absl::Status valid = CheckListen(flags.listen); !valid.ok()) {
        UsageError(absl::StrCat("--listen ", valid.message()));
      }
    } else if (arg.rfind("--advertise-address", 0) == 0) {
      flags.advertise_address = value("--advertise-address");
      if (absl::Status valid = CheckAdvertiseAddress(flags.advertise_address); !valid.ok()) {
        UsageError(absl::StrCat("--advertise-address ", valid.message()));
      }
    } else if (arg.rfind("--metrics-listen", 0) == 0) {
      flags.metrics_listen = value("--metrics-listen");
      if (absl::Status valid = CheckMetricsListen(flags.metrics_listen); !valid.ok()) {
        UsageError(absl::StrCat("--metrics-listen ", valid.message()));
      }
    } else if (arg.rfind("--log-format", 0) == 0) {
      flags.log_format = value("--log-format");
      if (absl::StatusOr<LogFormat> format = ParseLogFormat(flags.log_format); !format.ok()) {
        UsageError(absl::StrCat("--log-format ", format.status().message()));
      }
    } else if (arg.rfind("--log-level", 0) == 0) {
      flags.log_level = value("--log-level");
      if (absl::Status valid = CheckLogLevel(flags.log_level); !valid.ok()) {
        UsageError(absl::StrCat("--log-level ", valid.message()));
      }
    } else {
      std::cerr << "walfeed-server: unknown argument \"" << arg << "\"\n\n" << kUsage;
      std::exit(2);
    }
  }
  if (flags.config.empty()) {
    std::cerr << "walfeed-server: --config FILE is required\n\n" << kUsage;
    std::exit(2);
  }
  return flags;
}

// Flushes the logs and stdio, then leaves without running destructors: the
// end of a shutdown, whether it finished or its watchdog gave up waiting.
[[noreturn]] void FlushAndExit() {
  spdlog::apply_all([](const std::shared_ptr<spdlog::logger>& l) { l->flush(); });
  std::fflush(nullptr);
  std::_Exit(0);
}

// A configuration error, naming the file once: most messages begin with it
// (file:line:), some quote it, the rest get it in front.
void LogConfigError(const std::string& path, const absl::Status& error) {
  const std::string message(error.message());
  if (absl::StartsWith(message, path + ":") ||
      absl::StrContains(message, absl::StrCat("\"", path, "\""))) {
    spdlog::error("configuration error: {}", message);
  } else {
    spdlog::error("configuration {}: {}", path, message);
  }
}

int Run(const Flags& flags) {
  // SIGTERM/SIGINT are read from a signalfd by this thread. Blocked before any
  // thread starts (gRPC's, the readers'), so every thread inherits the mask and
  // none of them is killed by the default action.
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGTERM);
  sigaddset(&signals, SIGINT);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);
  const int signal_fd = signalfd(-1, &signals, SFD_CLOEXEC);

  // The command line's format first, so that a configuration error is logged
  // in it too; then the file's settings where the command line is silent.
  LogConfig log;
  if (!flags.log_format.empty()) log.format = *ParseLogFormat(flags.log_format);
  if (!flags.log_level.empty()) log.level = flags.log_level;
  ConfigureLogging(log.format, log.level);
  absl::StatusOr<ServerConfig> config = LoadConfig(flags.config);
  if (!config.ok()) {
    LogConfigError(flags.config, config.status());
    return 2;
  }
  if (flags.log_format.empty()) log.format = config->log.format;
  if (flags.log_level.empty()) log.level = config->log.level;
  ConfigureLogging(log.format, log.level);
  if (!flags.listen.empty()) config->listen = flags.listen;
  if (!flags.metrics_listen.empty()) config->metrics_listen = flags.metrics_listen;
  if (!flags.advertise_address.empty()) config->advertise_address = flags.advertise_address;
  if (flags.check_config) {
    // What Start would refuse before it listens, and what each stream would
    // fail on at once: the files it reads, and conninfo strings libpq rejects.
    absl::Status valid = WalfeedServer::ReadSecrets(*config).status();
    if (valid.ok() && !config->checkpoint.conninfo.empty()) {
      valid = replication::pg::CheckConninfo(config->checkpoint.conninfo);
      if (!valid.ok()) {
        valid = absl::InvalidArgumentError(absl::StrCat("checkpoint: ", valid.message()));
      }
    }
    for (const replication::StreamConfig& stream : config->streams) {
      if (!valid.ok()) break;
      valid = replication::pg::CheckConninfo(stream.conninfo);
      if (!valid.ok()) {
        valid = absl::InvalidArgumentError(
            absl::StrCat("stream ", stream.name, ": ", valid.message()));
      }
    }
    if (!valid.ok()) {
      LogConfigError(flags.config, valid);
      return 2;
    }
    std::cout << "configuration " << flags.config << " is valid (" << config->streams.size()
              << " stream(s))\n";
    return 0;
  }
  const absl::Duration grace = config->shutdown_timeout;
  spdlog::info("walfeed-server {} starting", WALFEED_VERSION);
  absl::StatusOr<std::unique_ptr<WalfeedServer>> server = WalfeedServer::Start(
      *std::move(config), replication::pg::MakePgStreamSource);
  if (!server.ok()) {
    spdlog::error("{}", std::string(server.status().message()));
    return server.status().code() == absl::StatusCode::kInvalidArgument ? 2 : 1;
  }
  // A reference to gRPC's library for the process's life, never released: the
  // last release (otherwise ~grpc::Server's) tears the library down and joins
  // its executor threads, and one of them may be waiting out a TCP backup
  // poller's 10 s poll (gRPC starts one when a write to a client would block).
  // Benchmark drains caught it 4 times in about 440 runs: "walfeed-server
  // stopped" was logged, then the process sat in grpc_shutdown until the
  // shutdown watchdog ended it at shutdown_timeout. The library's threads end
  // with the process instead (see the end of this function).
  grpc_init();
  // No-ops outside systemd (no NOTIFY_SOCKET).
  sd_notify(0, "READY=1");
  pollfd fd{signal_fd, POLLIN, 0};
  while (poll(&fd, 1, -1) <= 0) {
  }
  signalfd_siginfo info;
  (void)!read(signal_fd, &info, sizeof(info));
  spdlog::info("received {}: shutting down (up to {})", strsignal(info.ssi_signo),
               absl::FormatDuration(grace));
  sd_notify(0, "STOPPING=1");
  // Shutdown answers every client first, then waits on PostgreSQL; a silent
  // database (or a client that stopped reading) must not hold the process. At
  // shutdown_timeout it exits anyway: nothing is lost by that, as by any crash:
  // unacked events are delivered again, and positions not yet confirmed are
  // read again from the slot.
  absl::Notification stopped;
  std::thread watchdog([grace, &stopped] {
    if (stopped.WaitForNotificationWithTimeout(grace)) return;
    spdlog::warn("shutdown did not finish within {} (PostgreSQL or a client is not "
                 "answering): exiting now; nothing is lost, the next start resumes from the "
                 "stored positions",
                 absl::FormatDuration(grace));
    FlushAndExit();
  });
  (*server)->Shutdown();
  server->reset();  // Joins what is left (the slot monitors), still under the watchdog.
  stopped.Notify();
  watchdog.join();
  // Everything of walfeed's has stopped and been joined; gRPC's library is
  // still up (grpc_init above). Exiting without static destructors keeps its
  // threads from running while globals are destroyed under them.
  FlushAndExit();
}

}  // namespace
}  // namespace walfeed::server

int main(int argc, char** argv) {
  spdlog::set_default_logger(spdlog::default_logger()->clone("server"));
  // Debian's Abseil is built without NDEBUG, so by default every Mutex lock and
  // unlock also updates a process-wide lock-order graph (deadlock detection), a
  // debugging aid that costs every lock on the data path. The unit tests, which
  // link the libraries directly, keep it.
  absl::SetMutexDeadlockDetectionMode(absl::OnDeadlockCycle::kIgnore);
  return walfeed::server::Run(walfeed::server::ParseFlags(argc, argv));
}
