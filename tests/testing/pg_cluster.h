// PgCluster: a throwaway PostgreSQL 15 cluster for integration tests.
//
// Start() runs initdb into a fresh temporary directory, picks a free loopback
// port, configures wal_level=logical (plus any per-test overrides such as
// max_slot_wal_keep_size or wal_sender_timeout) and starts the server; the
// destructor stops it and deletes the directory. initdb and postgres refuse to run
// as root, so as root the server runs as the `postgres` OS user that Debian's
// postgresql-15 package creates.
//
// Value text is pinned (TimeZone UTC, DateStyle ISO, IntervalStyle postgres,
// lc_messages C) so tests can compare values exactly as PostgreSQL prints them.
//
// Integration tests call PgCluster::StartOrSkip(): without the server binaries it
// skips with the reason locally, and fails in CI (the CI environment variable is
// set), so CI can never pass by skipping.
#ifndef WALFEED_TESTS_TESTING_PG_CLUSTER_H_
#define WALFEED_TESTS_TESTING_PG_CLUSTER_H_

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace walfeed::testing {

class PgCluster {
 public:
  struct Options {
    // postgresql.conf settings added to (or overriding) the defaults.
    std::map<std::string, std::string> settings;
  };

  // Starts a new cluster, or returns why it cannot (binaries missing, initdb or
  // start failed; the server log is quoted).
  static absl::StatusOr<std::unique_ptr<PgCluster>> Start(const Options& options);
  static absl::StatusOr<std::unique_ptr<PgCluster>> Start() { return Start(Options{}); }

  ~PgCluster();
  PgCluster(const PgCluster&) = delete;
  PgCluster& operator=(const PgCluster&) = delete;

  int port() const { return port_; }
  const std::string& data_dir() const { return data_dir_; }
  // A libpq key/value conninfo for database `dbname` as the superuser.
  std::string ConnInfo(absl::string_view dbname = "postgres") const;
  // The same over the server's Unix-domain socket.
  std::string UnixSocketConnInfo(absl::string_view dbname = "postgres") const;

  // Stops with `mode` ("fast" or "immediate") and starts again.
  absl::Status Restart(absl::string_view mode);
  absl::Status Stop(absl::string_view mode);
  absl::Status StartAgain();

  // Runs SQL (simple query protocol, several statements allowed) and returns the
  // first column of the last result's rows; NULL comes back as "<NULL>".
  absl::StatusOr<std::vector<std::string>> Query(absl::string_view sql,
                                                 absl::string_view dbname = "postgres") const;
  // Query() for a statement that returns exactly one value.
  absl::StatusOr<std::string> QueryValue(absl::string_view sql,
                                         absl::string_view dbname = "postgres") const;
  absl::Status Exec(absl::string_view sql, absl::string_view dbname = "postgres") const;

  // The server log so far (for failure messages).
  std::string Log() const;

 private:
  PgCluster() = default;
  absl::Status RunPgCtl(const std::vector<std::string>& args) const;

  std::string root_dir_;  // Temporary directory holding data/ and the log.
  std::string data_dir_;
  std::string log_file_;
  int port_ = 0;
  bool running_ = false;
};

}  // namespace walfeed::testing

// Starts a cluster into `var` (a std::unique_ptr<PgCluster>), or skips the test
// with the reason when PostgreSQL is not installed outside CI.
#define WALFEED_START_PG_OR_SKIP(var, options)                                   \
  do {                                                                           \
    auto walfeed_cluster_ = ::walfeed::testing::PgCluster::Start(options);       \
    if (!walfeed_cluster_.ok()) {                                                \
      if (::walfeed::testing::MustRunIntegrationTests()) {                       \
        FAIL() << "PostgreSQL test cluster: " << walfeed_cluster_.status();      \
      }                                                                          \
      GTEST_SKIP() << "no PostgreSQL test cluster (" << walfeed_cluster_.status() \
                   << "); CI always runs these";                                 \
    }                                                                            \
    var = std::move(walfeed_cluster_).value();                                   \
  } while (false)

namespace walfeed::testing {
// True in CI (the CI environment variable is set): integration tests must run.
bool MustRunIntegrationTests();
}  // namespace walfeed::testing

#endif  // WALFEED_TESTS_TESTING_PG_CLUSTER_H_
