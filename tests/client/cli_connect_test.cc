// The `walfeed` binary when it cannot talk to the server: it must say in one
// line what went wrong and what to check, exit 1, and do so within seconds
// instead of waiting out --timeout or printing gRPC's own log lines.
//   - a closed port: "connection refused (is walfeed-server running there?)",
//     for every one-shot command and at the start of `tail`;
//   - TLS against a plaintext server, plaintext against a TLS server, an
//     untrusted certificate and a certificate for another name: one line that
//     names TLS and the flag to check;
//   - the same servers answer when the flags match (the wait for a connection
//     does not get in the way).
// The servers are in-process gRPC servers with a fake ChangeStream service (no
// database); certificates are made by openssl for each run.
#include <fcntl.h>
#include <grpcpp/grpcpp.h>
#include <netinet/in.h>
#include <signal.h>
#include <spawn.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <memory>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/testing/wait.h"
#include "walfeed/v1/change_stream.grpc.pb.h"

extern char** environ;

namespace walfeed {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;
using ::testing::Not;
using ::testing::SizeIs;
using ::walfeed::testing::WaitUntil;

// How long a failing command may take. The commands get --timeout 20, so one
// that waits out its timeout (the old behaviour) fails here.
constexpr absl::Duration kQuick = absl::Seconds(5);
// How long the test waits for a command before killing it.
constexpr absl::Duration kPatience = absl::Seconds(40);

std::string ReadFile(const std::string& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

std::vector<std::string> Lines(const std::string& text) {
  return absl::StrSplit(text, '\n', absl::SkipEmpty());
}

// The walfeed binary run to completion, with its output and how long it took.
struct CliRun {
  std::optional<int> exit_code;  // nullopt: still running after kPatience (killed).
  absl::Duration elapsed;
  std::string out;
  std::string err;
};

CliRun RunCli(const std::vector<std::string>& args, const std::string& dir) {
  static int runs = 0;
  const std::string base = absl::StrCat(dir, "/run-", ++runs);
  const std::string out_path = base + ".out";
  const std::string err_path = base + ".err";
  std::vector<std::string> argv_storage = {WALFEED_CLI_BINARY};
  argv_storage.insert(argv_storage.end(), args.begin(), args.end());
  std::vector<char*> argv;
  for (std::string& arg : argv_storage) argv.push_back(arg.data());
  argv.push_back(nullptr);
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, 1, out_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC,
                                   0644);
  posix_spawn_file_actions_addopen(&actions, 2, err_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC,
                                   0644);
  CliRun run{std::nullopt, absl::ZeroDuration(), "", ""};
  const absl::Time start = absl::Now();
  pid_t pid = -1;
  const int error = posix_spawn(&pid, argv[0], &actions, nullptr, argv.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  EXPECT_EQ(error, 0) << "posix_spawn " << argv[0];
  if (error != 0) return run;
  WaitUntil(
      [&] {
        int status = 0;
        if (waitpid(pid, &status, WNOHANG) != pid) return false;
        run.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
        return true;
      },
      kPatience, absl::Milliseconds(5));
  run.elapsed = absl::Now() - start;
  if (!run.exit_code) {
    kill(pid, SIGKILL);
    int status = 0;
    waitpid(pid, &status, 0);
  }
  run.out = ReadFile(out_path);
  run.err = ReadFile(err_path);
  return run;
}

// What every run prints when asked: the arguments, exit code, time and stderr.
std::string Describe(const std::vector<std::string>& args, const CliRun& run) {
  return absl::StrCat("walfeed ", absl::StrJoin(args, " "), "\nexit ",
                      run.exit_code ? absl::StrCat(*run.exit_code) : "none (killed)", " after ",
                      absl::FormatDuration(run.elapsed), "\nstderr:\n", run.err);
}

// A ChangeStream whose GetStatus reports one stream named "fake".
class FakeChangeStream final : public walfeed::v1::ChangeStream::Service {
 public:
  grpc::Status GetStatus(grpc::ServerContext*, const walfeed::v1::GetStatusRequest*,
                         walfeed::v1::GetStatusResponse* response) override {
    response->add_streams()->set_name("fake");
    return grpc::Status::OK;
  }
};

class FakeServer {
 public:
  explicit FakeServer(std::shared_ptr<grpc::ServerCredentials> credentials) {
    grpc::ServerBuilder builder;
    builder.AddListeningPort("127.0.0.1:0", std::move(credentials), &port_);
    builder.RegisterService(&service_);
    server_ = builder.BuildAndStart();
  }
  ~FakeServer() {
    if (server_) server_->Shutdown(std::chrono::system_clock::now());
  }
  bool ok() const { return server_ != nullptr && port_ > 0; }
  std::string Address() const { return absl::StrCat("127.0.0.1:", port_); }

 private:
  FakeChangeStream service_;
  int port_ = 0;
  std::unique_ptr<grpc::Server> server_;
};

// A loopback port that refuses connections: bound (so nobody else takes it
// while the test runs) but not listening.
class ClosedPort {
 public:
  ClosedPort() {
    fd_ = socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in address{};
    address.sin_family = AF_INET;
    address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    address.sin_port = 0;
    socklen_t length = sizeof(address);
    if (fd_ < 0 || bind(fd_, reinterpret_cast<sockaddr*>(&address), sizeof(address)) != 0 ||
        getsockname(fd_, reinterpret_cast<sockaddr*>(&address), &length) != 0) {
      return;
    }
    port_ = ntohs(address.sin_port);
  }
  ~ClosedPort() {
    if (fd_ >= 0) close(fd_);
  }
  ClosedPort(const ClosedPort&) = delete;
  ClosedPort& operator=(const ClosedPort&) = delete;
  bool ok() const { return port_ > 0; }
  std::string Address() const { return absl::StrCat("127.0.0.1:", port_); }

 private:
  int fd_ = -1;
  int port_ = 0;
};

class CliConnectTest : public ::testing::Test {
 protected:
  // A CA and a server certificate it signed for "localhost" (not 127.0.0.1).
  static void SetUpTestSuite() {
    char pattern[] = "/tmp/walfeed-cli-connect-XXXXXX";
    if (mkdtemp(pattern) == nullptr) return;
    dir_ = new std::string(pattern);
    const std::string script = absl::StrCat(
        "set -e; cd '", *dir_, "'; ",
        "openssl req -x509 -newkey rsa:2048 -nodes -days 1 -subj /CN=cli-test-ca "
        "-keyout ca.key -out ca.crt 2>/dev/null; ",
        "openssl req -newkey rsa:2048 -nodes -subj /CN=localhost -keyout server.key "
        "-out server.csr 2>/dev/null; ",
        "echo subjectAltName=DNS:localhost > san.ext; ",
        "openssl x509 -req -in server.csr -CA ca.crt -CAkey ca.key -CAcreateserial -days 1 "
        "-extfile san.ext -out server.crt 2>/dev/null");
    certificates_ok_ = std::system(absl::StrCat("bash -c \"", script, "\"").c_str()) == 0;
  }
  static void TearDownTestSuite() {
    if (dir_ == nullptr) return;
    std::error_code ignored;
    std::filesystem::remove_all(*dir_, ignored);
    delete dir_;
    dir_ = nullptr;
  }
  void SetUp() override { ASSERT_NE(dir_, nullptr) << "mkdtemp"; }

  static std::string Dir() { return *dir_; }
  static std::string Ca() { return *dir_ + "/ca.crt"; }

  std::unique_ptr<FakeServer> PlaintextServer() {
    auto server = std::make_unique<FakeServer>(grpc::InsecureServerCredentials());
    EXPECT_TRUE(server->ok());
    return server;
  }
  std::unique_ptr<FakeServer> TlsServer() {
    grpc::SslServerCredentialsOptions options;
    options.pem_key_cert_pairs.push_back(
        {ReadFile(*dir_ + "/server.key"), ReadFile(*dir_ + "/server.crt")});
    auto server = std::make_unique<FakeServer>(grpc::SslServerCredentials(options));
    EXPECT_TRUE(server->ok());
    return server;
  }

  // Runs `args` and checks the common shape of a connection failure: exit 1
  // within kQuick and exactly one line on stderr (no gRPC log lines), which
  // starts "walfeed: cannot connect to <server>: ". Returns that line.
  std::string ExpectOneLineFailure(const std::vector<std::string>& args,
                                   const std::string& server) {
    const CliRun run = RunCli(args, Dir());
    const std::string what = Describe(args, run);
    EXPECT_EQ(run.exit_code, std::optional<int>(1)) << what;
    EXPECT_LT(run.elapsed, kQuick) << what;
    EXPECT_EQ(run.out, "") << what;
    const std::vector<std::string> lines = Lines(run.err);
    EXPECT_THAT(lines, SizeIs(1)) << what;
    if (lines.empty()) return "";
    EXPECT_THAT(lines[0],
                ::testing::StartsWith(absl::StrCat("walfeed: cannot connect to ", server, ": ")))
        << what;
    return lines[0];
  }

  static std::string* dir_;
  static bool certificates_ok_;
};

std::string* CliConnectTest::dir_ = nullptr;
bool CliConnectTest::certificates_ok_ = false;

#define SKIP_WITHOUT_CERTIFICATES()                                               \
  do {                                                                            \
    if (!certificates_ok_) GTEST_SKIP() << "openssl could not make certificates"; \
  } while (0)

TEST_F(CliConnectTest, OneShotCommandsSayConnectionRefusedAtOnce) {
  ClosedPort closed;
  ASSERT_TRUE(closed.ok());
  const std::string server = closed.Address();
  const std::vector<std::vector<std::string>> commands = {
      {"status", "--server", server, "--timeout", "20"},
      {"status", "--server", server, "--format", "json", "--timeout", "20"},
      {"remove-consumer", "--server", server, "--stream", "s", "--consumer", "c", "--yes",
       "--timeout", "20"},
      {"reset-consumer", "--server", server, "--stream", "s", "--consumer", "c", "--to-head",
       "--yes", "--timeout", "20"},
  };
  for (const std::vector<std::string>& args : commands) {
    const std::string line = ExpectOneLineFailure(args, server);
    EXPECT_EQ(line, absl::StrCat("walfeed: cannot connect to ", server,
                                 ": connection refused (is walfeed-server running there?)"));
  }
}

TEST_F(CliConnectTest, TailSaysConnectionRefusedWhileItWaitsAndWhenItGivesUp) {
  ClosedPort closed;
  ASSERT_TRUE(closed.ok());
  const std::string server = closed.Address();
  const std::vector<std::string> args = {"tail", "--server",  server, "--stream",
                                         "s",    "--timeout", "2"};
  const CliRun run = RunCli(args, Dir());
  const std::string what = Describe(args, run);
  EXPECT_EQ(run.exit_code, std::optional<int>(1)) << what;
  EXPECT_LT(run.elapsed, kQuick) << what;
  const std::vector<std::string> lines = Lines(run.err);
  ASSERT_THAT(lines, Not(::testing::IsEmpty())) << what;
  const std::string refused = absl::StrCat(
      "cannot connect to ", server, ": connection refused (is walfeed-server running there?)");
  // While it retries: the reason in the CLI's words, not gRPC's.
  for (size_t i = 0; i + 1 < lines.size(); ++i) {
    EXPECT_THAT(lines[i],
                ::testing::StartsWith(absl::StrCat("waiting: ", refused, "; retrying in ")))
        << what;
  }
  // When it gives up: why, in the same line.
  EXPECT_EQ(lines.back(),
            absl::StrCat("walfeed: timed out after 2s without subscribing: ", refused))
      << what;
}

TEST_F(CliConnectTest, TlsAgainstAPlaintextServerSaysTheServerIsNotTls) {
  SKIP_WITHOUT_CERTIFICATES();
  std::unique_ptr<FakeServer> plaintext = PlaintextServer();
  const std::string server = plaintext->Address();
  // Plaintext to plaintext works (and shows the fake server answers).
  const CliRun works = RunCli({"status", "--server", server, "--format", "json"}, Dir());
  ASSERT_EQ(works.exit_code, std::optional<int>(0)) << works.err;
  EXPECT_THAT(works.out, HasSubstr("\"fake\""));

  for (const std::vector<std::string>& tls :
       {std::vector<std::string>{"--tls"}, std::vector<std::string>{"--tls-ca", Ca()}}) {
    std::vector<std::string> args = {"status", "--server", server, "--timeout", "20"};
    args.insert(args.end(), tls.begin(), tls.end());
    const std::string line = ExpectOneLineFailure(args, server);
    EXPECT_THAT(line, AllOf(HasSubstr("TLS handshake failed"), HasSubstr("--tls")));
    EXPECT_THAT(line, HasSubstr("does not seem to use TLS"));
  }
}

TEST_F(CliConnectTest, PlaintextAgainstATlsServerSuggestsTls) {
  SKIP_WITHOUT_CERTIFICATES();
  std::unique_ptr<FakeServer> tls = TlsServer();
  const std::string server = tls->Address();
  // With the CA and the certificate's name it works.
  const CliRun works = RunCli({"status", "--server", server, "--tls-ca", Ca(), "--tls-server-name",
                               "localhost", "--format", "json"},
                              Dir());
  ASSERT_EQ(works.exit_code, std::optional<int>(0)) << works.err;
  EXPECT_THAT(works.out, HasSubstr("\"fake\""));

  const std::string line =
      ExpectOneLineFailure({"status", "--server", server, "--timeout", "20"}, server);
  EXPECT_THAT(line, AllOf(HasSubstr("TLS"), HasSubstr("--tls")));
}

TEST_F(CliConnectTest, AnUntrustedCertificateSuggestsTheCaFlag) {
  SKIP_WITHOUT_CERTIFICATES();
  std::unique_ptr<FakeServer> tls = TlsServer();
  const std::string server = tls->Address();
  // The system's roots do not include the test CA.
  const std::string line = ExpectOneLineFailure(
      {"status", "--server", server, "--tls", "--tls-server-name", "localhost", "--timeout", "20"},
      server);
  EXPECT_THAT(line, AllOf(HasSubstr("TLS handshake failed: certificate verify failed"),
                          HasSubstr("--tls-ca")));
}

TEST_F(CliConnectTest, ACertificateForAnotherNameSuggestsTheServerNameFlag) {
  SKIP_WITHOUT_CERTIFICATES();
  std::unique_ptr<FakeServer> tls = TlsServer();
  const std::string server = tls->Address();
  // The certificate is for "localhost"; the address is 127.0.0.1.
  const std::string line = ExpectOneLineFailure(
      {"status", "--server", server, "--tls-ca", Ca(), "--timeout", "20"}, server);
  EXPECT_THAT(line, AllOf(HasSubstr("TLS handshake failed"), HasSubstr("127.0.0.1"),
                          HasSubstr("--tls-server-name")));
}

TEST_F(CliConnectTest, TailWithTlsAgainstAPlaintextServerEndsAtOnce) {
  SKIP_WITHOUT_CERTIFICATES();
  std::unique_ptr<FakeServer> plaintext = PlaintextServer();
  const std::string server = plaintext->Address();
  // No retrying can fix the client's flags: it ends instead of waiting out --timeout.
  const std::string line = ExpectOneLineFailure(
      {"tail", "--server", server, "--stream", "s", "--tls-ca", Ca(), "--timeout", "20"}, server);
  EXPECT_THAT(line, AllOf(HasSubstr("TLS handshake failed"), HasSubstr("--tls")));
}

}  // namespace
}  // namespace walfeed
