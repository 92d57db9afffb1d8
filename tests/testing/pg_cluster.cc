#include "tests/testing/pg_cluster.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <libpq-fe.h>
#include <netinet/in.h>
#include <pwd.h>
#include <spawn.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

extern char** environ;

namespace walfeed::testing {
namespace {

constexpr char kBinDir[] = "/usr/lib/postgresql/15/bin";

// Runs argv (as `user` when non-empty, through runuser), output appended to
// `log_file`. Returns the exit status as a Status.
absl::Status Run(const std::vector<std::string>& argv, const std::string& user,
                 const std::string& log_file) {
  std::vector<std::string> full;
  if (!user.empty()) full = {"/usr/sbin/runuser", "-u", user, "--"};
  full.insert(full.end(), argv.begin(), argv.end());
  std::vector<char*> args;
  for (std::string& a : full) args.push_back(a.data());
  args.push_back(nullptr);

  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, STDOUT_FILENO, log_file.c_str(),
                                   O_WRONLY | O_CREAT | O_APPEND, 0644);
  posix_spawn_file_actions_adddup2(&actions, STDOUT_FILENO, STDERR_FILENO);
  posix_spawn_file_actions_addopen(&actions, STDIN_FILENO, "/dev/null", O_RDONLY, 0);
  pid_t pid;
  const int rc = posix_spawn(&pid, args[0], &actions, nullptr, args.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  if (rc != 0) {
    return absl::UnavailableError(absl::StrCat("cannot run ", full[0], ": ", strerror(rc)));
  }
  int status = 0;
  while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
    return absl::InternalError(absl::StrCat(absl::StrJoin(argv, " "), " failed (status ",
                                            status, "); see ", log_file));
  }
  return absl::OkStatus();
}

absl::StatusOr<int> FreeLoopbackPort() {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) return absl::InternalError("socket() failed");
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = 0;
  socklen_t len = sizeof(addr);
  if (bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0 ||
      getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) != 0) {
    close(fd);
    return absl::InternalError("cannot bind a loopback port");
  }
  const int port = ntohs(addr.sin_port);
  close(fd);
  return port;
}

std::string ReadFile(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// The OS user the server runs as: ourselves, or `postgres` when we are root.
std::string ServerUser() { return geteuid() == 0 ? "postgres" : ""; }

}  // namespace

bool MustRunIntegrationTests() {
  const char* ci = std::getenv("CI");
  return ci != nullptr && *ci != '\0' && std::string(ci) != "false";
}

absl::StatusOr<std::unique_ptr<PgCluster>> PgCluster::Start(const Options& options) {
  if (access(absl::StrCat(kBinDir, "/initdb").c_str(), X_OK) != 0) {
    return absl::FailedPreconditionError(
        absl::StrCat(kBinDir, "/initdb not found: install postgresql-15 "
                              "(bash deploy/install-deps.sh)"));
  }
  const std::string user = ServerUser();
  std::unique_ptr<PgCluster> cluster(new PgCluster());
  char pattern[] = "/tmp/walfeed-pg-XXXXXX";
  if (mkdtemp(pattern) == nullptr) return absl::InternalError("mkdtemp failed");
  cluster->root_dir_ = pattern;
  cluster->data_dir_ = cluster->root_dir_ + "/data";
  cluster->log_file_ = cluster->root_dir_ + "/server.log";
  if (!user.empty()) {
    const passwd* pw = getpwnam(user.c_str());
    if (pw == nullptr) {
      return absl::FailedPreconditionError("running as root but there is no `postgres` user");
    }
    if (chown(pattern, pw->pw_uid, pw->pw_gid) != 0) {
      return absl::InternalError(absl::StrCat("chown ", pattern, " failed"));
    }
  }
  const std::string init_log = cluster->root_dir_ + "/initdb.log";
  absl::Status init = Run({absl::StrCat(kBinDir, "/initdb"), "-D", cluster->data_dir_,
                           "-U", "postgres", "--auth=trust", "-E", "UTF8", "--locale=C",
                           "--no-sync"},
                          user, init_log);
  if (!init.ok()) return absl::InternalError(absl::StrCat(init.message(), "\n", ReadFile(init_log)));

  std::map<std::string, std::string> settings = {
      {"listen_addresses", "'127.0.0.1'"},
      {"unix_socket_directories", absl::StrCat("'", cluster->root_dir_, "'")},
      {"wal_level", "logical"},
      {"max_replication_slots", "20"},
      {"max_wal_senders", "20"},
      {"fsync", "off"},  // The OS keeps the page cache across a server crash.
      {"full_page_writes", "off"},
      {"shared_buffers", "32MB"},
      {"TimeZone", "'UTC'"},
      {"DateStyle", "'ISO, MDY'"},
      {"IntervalStyle", "'postgres'"},
      {"lc_messages", "'C'"},
      {"extra_float_digits", "1"},
  };
  for (const auto& [key, value] : options.settings) settings[key] = value;

  for (int attempt = 0; attempt < 5; ++attempt) {
    absl::StatusOr<int> port = FreeLoopbackPort();
    if (!port.ok()) return port.status();
    cluster->port_ = *port;
    settings["port"] = absl::StrCat(*port);
    {
      std::ofstream conf(cluster->data_dir_ + "/postgresql.auto.conf", std::ios::trunc);
      for (const auto& [key, value] : settings) conf << key << " = " << value << "\n";
    }
    if (cluster->StartAgain().ok()) return cluster;
    // Most likely another process took the port between probe and start.
  }
  return absl::UnavailableError(
      absl::StrCat("PostgreSQL did not start; server log:\n", cluster->Log()));
}

PgCluster::~PgCluster() {
  if (running_) (void)Stop("immediate");
  std::error_code ignored;
  std::filesystem::remove_all(root_dir_, ignored);
}

std::string PgCluster::ConnInfo(absl::string_view dbname) const {
  return absl::StrCat("host=127.0.0.1 port=", port_, " user=postgres dbname=", dbname,
                      " connect_timeout=10");
}

std::string PgCluster::UnixSocketConnInfo(absl::string_view dbname) const {
  return absl::StrCat("host=", root_dir_, " port=", port_, " user=postgres dbname=", dbname,
                      " connect_timeout=10");
}

absl::Status PgCluster::RunPgCtl(const std::vector<std::string>& args) const {
  std::vector<std::string> argv = {absl::StrCat(kBinDir, "/pg_ctl"), "-D", data_dir_};
  argv.insert(argv.end(), args.begin(), args.end());
  return Run(argv, ServerUser(), root_dir_ + "/pg_ctl.log");
}

absl::Status PgCluster::StartAgain() {
  absl::Status status = RunPgCtl({"-w", "-t", "60", "-l", log_file_, "start"});
  running_ = status.ok();
  return status;
}

absl::Status PgCluster::Stop(absl::string_view mode) {
  absl::Status status = RunPgCtl({"-w", "-t", "60", "-m", std::string(mode), "stop"});
  if (status.ok()) running_ = false;
  return status;
}

absl::Status PgCluster::Restart(absl::string_view mode) {
  absl::Status stopped = Stop(mode);
  if (!stopped.ok()) return stopped;
  return StartAgain();
}

absl::StatusOr<std::vector<std::string>> PgCluster::Query(absl::string_view sql,
                                                          absl::string_view dbname) const {
  PGconn* conn = PQconnectdb(ConnInfo(dbname).c_str());
  if (PQstatus(conn) != CONNECTION_OK) {
    std::string error = PQerrorMessage(conn);
    PQfinish(conn);
    return absl::UnavailableError(absl::StrCat("connect: ", error));
  }
  PGresult* res = PQexec(conn, std::string(sql).c_str());
  const ExecStatusType status = PQresultStatus(res);
  absl::StatusOr<std::vector<std::string>> out;
  if (status == PGRES_TUPLES_OK) {
    std::vector<std::string> rows;
    for (int i = 0; i < PQntuples(res); ++i) {
      rows.push_back(PQgetisnull(res, i, 0) ? "<NULL>" : PQgetvalue(res, i, 0));
    }
    out = std::move(rows);
  } else if (status == PGRES_COMMAND_OK) {
    out = std::vector<std::string>{};
  } else {
    out = absl::InternalError(absl::StrCat(sql, ": ", PQresultErrorMessage(res)));
  }
  PQclear(res);
  PQfinish(conn);
  return out;
}

absl::StatusOr<std::string> PgCluster::QueryValue(absl::string_view sql,
                                                  absl::string_view dbname) const {
  absl::StatusOr<std::vector<std::string>> rows = Query(sql, dbname);
  if (!rows.ok()) return rows.status();
  if (rows->size() != 1) {
    return absl::InternalError(absl::StrCat(sql, ": expected one row, got ", rows->size()));
  }
  return rows->front();
}

absl::Status PgCluster::Exec(absl::string_view sql, absl::string_view dbname) const {
  return Query(sql, dbname).status();
}

std::string PgCluster::Log() const { return ReadFile(log_file_); }

}  // namespace walfeed::testing
