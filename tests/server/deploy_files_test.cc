// The deployment files say only what the server and the CLI accept: the
// configurations in deploy/compose and the Kubernetes ConfigMap parse, the
// Secret's tokens load, every walfeed-server command line in the compose file
// and the Deployment passes the binary's own --check-config, the compose
// consumer's walfeed command line is no usage error, and the Dockerfile's
// scripts exist and work here (runtime-packages.sh lists the libraries'
// packages). Docker itself cannot run on the build machines; this is what
// can be checked without it.
#include <fcntl.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "server/auth.h"
#include "server/config.h"
#include "tests/testing/status_matchers.h"
#include "yaml-cpp/yaml.h"

extern char** environ;

namespace walfeed::server {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;
using ::walfeed::testing::IsOk;

const std::string kRoot = WALFEED_SOURCE_DIR;

std::string Read(const std::string& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  EXPECT_TRUE(in.good() || in.eof()) << path;
  return text.str();
}

struct Outcome {
  int exit_code = -1;
  std::string output;
};

// Runs `argv` with stdout and stderr captured.
Outcome RunCommand(std::vector<std::string> argv) {
  const std::string out = ::testing::TempDir() + "deploy_files_test.out";
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, 1, out.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  posix_spawn_file_actions_adddup2(&actions, 1, 2);
  std::vector<char*> args;
  for (std::string& arg : argv) args.push_back(arg.data());
  args.push_back(nullptr);
  pid_t pid = -1;
  Outcome outcome;
  if (posix_spawnp(&pid, args[0], &actions, nullptr, args.data(), environ) != 0) {
    ADD_FAILURE() << "cannot run " << argv[0];
    return outcome;
  }
  posix_spawn_file_actions_destroy(&actions);
  int status = 0;
  waitpid(pid, &status, 0);
  outcome.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  outcome.output = Read(out);
  return outcome;
}

std::vector<std::string> Strings(const YAML::Node& list) {
  std::vector<std::string> out;
  for (const YAML::Node& item : list) out.push_back(item.as<std::string>());
  return out;
}

// Runs walfeed-server with `args` (a deployment's command line), its --config
// pointed at `config_text` written to a file, plus --check-config.
void ExpectServerAccepts(std::vector<std::string> args, const std::string& config_text,
                         const std::string& where) {
  SCOPED_TRACE(where);
  const std::string config = ::testing::TempDir() + "deploy_files_test.yaml";
  std::ofstream(config) << config_text;
  std::vector<std::string> argv = {WALFEED_SERVER_BINARY};
  for (size_t i = 0; i < args.size(); ++i) {
    if (args[i] == "--config" && i + 1 < args.size()) {
      argv.push_back("--config");
      argv.push_back(config);
      ++i;
      continue;
    }
    // Kubernetes expands $(VAR) from the container's environment.
    argv.push_back(absl::StrReplaceAll(args[i], {{"$(POD_IP)", "10.1.2.3"}}));
  }
  argv.push_back("--check-config");
  const Outcome outcome = RunCommand(argv);
  EXPECT_EQ(outcome.exit_code, 0) << outcome.output;
  EXPECT_THAT(outcome.output, HasSubstr("is valid"));
}

class DeployFilesTest : public ::testing::Test {
 protected:
  void SetUp() override {
    // The environment the deployments give the server.
    setenv("WALFEED_DEMO_CONNINFO", "host=db dbname=postgres", 1);
    setenv("WALFEED_ORDERS_CONNINFO", "host=db dbname=shop", 1);
  }
};

TEST_F(DeployFilesTest, TheComposeFileRunsWhatTheServerAndTheCliAccept) {
  const YAML::Node compose = YAML::LoadFile(kRoot + "/deploy/docker-compose.yml");
  const std::string config = Read(kRoot + "/deploy/compose/walfeed.yaml");
  ASSERT_THAT(ParseConfig(config, "compose/walfeed.yaml"), IsOk());
  const YAML::Node services = compose["services"];
  int servers = 0;
  for (const char* name : {"walfeed-1", "walfeed-2"}) {
    ASSERT_TRUE(services[name]) << name;
    ExpectServerAccepts(Strings(services[name]["command"]), config, name);
    ++servers;
  }
  EXPECT_EQ(servers, 2);
  EXPECT_THAT(compose["services"]["db"]["command"].as<std::vector<std::string>>(),
              ::testing::Contains("wal_level=logical"));

  // The consumer's command line: no usage error (exit 2). With nothing to
  // connect to it gives up at its --timeout instead (exit 1).
  std::vector<std::string> argv = {WALFEED_CLI_BINARY};
  for (const std::string& arg : Strings(services["consumer"]["command"])) argv.push_back(arg);
  argv.insert(argv.end(), {"--timeout", "1"});
  const Outcome consumer = RunCommand(argv);
  EXPECT_NE(consumer.exit_code, 2) << consumer.output;
  EXPECT_THAT(consumer.output, ::testing::Not(HasSubstr("Usage")));
}

TEST_F(DeployFilesTest, TheKubernetesManifestsRunWhatTheServerAccepts) {
  std::vector<YAML::Node> documents = YAML::LoadAllFromFile(kRoot + "/deploy/k8s/walfeed.yaml");
  std::string config;
  std::string tokens;
  std::vector<std::string> args;
  int replicas = 0;
  std::string readiness;
  for (const YAML::Node& doc : documents) {
    const std::string kind = doc["kind"].as<std::string>();
    if (kind == "ConfigMap") config = doc["data"]["walfeed.yaml"].as<std::string>();
    if (kind == "Secret") tokens = doc["stringData"]["tokens"].as<std::string>();
    if (kind == "Deployment") {
      replicas = doc["spec"]["replicas"].as<int>();
      const YAML::Node container = doc["spec"]["template"]["spec"]["containers"][0];
      args = Strings(container["args"]);
      readiness = container["readinessProbe"]["grpc"]["service"].as<std::string>();
    }
  }
  EXPECT_EQ(replicas, 2);
  absl::StatusOr<ServerConfig> parsed = ParseConfig(config, "k8s ConfigMap");
  ASSERT_THAT(parsed, IsOk());
  ASSERT_EQ(parsed->streams.size(), 1u);
  EXPECT_EQ(readiness, "walfeed.v1.ChangeStream/" + parsed->streams[0].name)
      << "readiness must be the stream's health service";
  absl::StatusOr<TokenAuthorizer> authorizer = TokenAuthorizer::Parse(tokens, "k8s Secret");
  ASSERT_THAT(authorizer, IsOk());
  std::vector<std::string> streams;
  for (const auto& stream : parsed->streams) streams.push_back(stream.name);
  EXPECT_THAT(authorizer->CheckStreamsConfigured(streams), IsOk());
  // The tokens file path in the config is where the Secret is mounted.
  EXPECT_EQ(parsed->tokens_file, "/etc/walfeed/secret/tokens");
  // --check-config reads the tokens file: the Secret's, where this test wrote it.
  const std::string tokens_file = ::testing::TempDir() + "deploy_files_test.tokens";
  std::ofstream(tokens_file) << tokens;
  ExpectServerAccepts(args,
                      absl::StrReplaceAll(config, {{"tokens_file: /etc/walfeed/secret/tokens",
                                                    absl::StrCat("tokens_file: ", tokens_file)}}),
                      "Deployment");
}

// --check-config finds what the server would refuse at start, or a stream
// would fail on at once, not only what the file's schema says.
TEST_F(DeployFilesTest, CheckConfigRefusesWhatTheServerWouldRefuse) {
  const std::string config = ::testing::TempDir() + "check_config_test.yaml";
  auto check = [&](const std::string& text, std::vector<std::string> extra = {}) {
    std::ofstream(config) << text;
    std::vector<std::string> argv = {WALFEED_SERVER_BINARY, "--config", config, "--check-config"};
    argv.insert(argv.end(), extra.begin(), extra.end());
    return RunCommand(argv);
  };
  const std::string stream = R"(streams:
  - name: orders
    conninfo: "host=db dbname=shop"
    slot: walfeed_orders
    publications: [walfeed_orders]
)";
  const std::string valid = absl::StrCat("listen: \"127.0.0.1:50051\"\nplaintext: true\n", stream);
  Outcome outcome = check(valid);
  EXPECT_EQ(outcome.exit_code, 0) << outcome.output;

  outcome = check(absl::StrCat(valid, "auth:\n  tokens_file: /nonexistent/walfeed-tokens\n"));
  EXPECT_EQ(outcome.exit_code, 2) << outcome.output;
  EXPECT_THAT(outcome.output, HasSubstr("auth.tokens_file: tokens file: cannot open"));

  outcome = check(absl::StrReplaceAll(valid, {{"dbname=shop", "dbname=shop bogus=1"}}));
  EXPECT_EQ(outcome.exit_code, 2) << outcome.output;
  EXPECT_THAT(outcome.output,
              HasSubstr("stream orders: the conninfo is not a valid libpq connection string: "
                        "invalid connection option \"bogus\""));

  outcome = check(valid, {"--listen", "nonsense"});
  EXPECT_EQ(outcome.exit_code, 2) << outcome.output;
  EXPECT_THAT(outcome.output, HasSubstr("--listen \"nonsense\" has no port"));
}

TEST_F(DeployFilesTest, TheDockerfileUsesTheTestedScripts) {
  const std::string dockerfile = Read(kRoot + "/Dockerfile");
  EXPECT_THAT(dockerfile, HasSubstr("bash deploy/install-deps.sh --build"));
  EXPECT_THAT(dockerfile, HasSubstr("-DWALFEED_BUILD_TESTS=OFF"));
  EXPECT_THAT(dockerfile, HasSubstr("bash deploy/runtime-packages.sh"));
  EXPECT_THAT(dockerfile, HasSubstr("USER walfeed"));
  const Outcome help = RunCommand({"bash", kRoot + "/deploy/install-deps.sh", "--help"});
  EXPECT_EQ(help.exit_code, 0) << help.output;
  EXPECT_THAT(help.output, HasSubstr("--build"));
  const Outcome packages = RunCommand({"bash", kRoot + "/deploy/runtime-packages.sh",
                                WALFEED_SERVER_BINARY, WALFEED_CLI_BINARY});
  EXPECT_EQ(packages.exit_code, 0) << packages.output;
  for (const char* package : {"libpq5", "libyaml-cpp0.7", "libsystemd0"}) {
    EXPECT_THAT(packages.output, HasSubstr(package));
  }
  // gRPC, Protobuf and Abseil are linked from their archives by default
  // (WALFEED_STATIC_DEPS): the image needs none of their packages then.
  if (WALFEED_STATIC_DEPS_LINKED) {
    for (const char* package : {"libprotobuf", "libgrpc", "libabsl"}) {
      EXPECT_THAT(packages.output, Not(HasSubstr(package)));
    }
  } else {
    EXPECT_THAT(packages.output, HasSubstr("libprotobuf32"));
  }
}

}  // namespace
}  // namespace walfeed::server
