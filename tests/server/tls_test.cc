// TLS and mutual TLS on walfeed-server's port, with certificates made by openssl
// for each run: a client that trusts the server's CA is served; a plaintext client
// is not; with client_ca_file set, a client without a certificate (or with one
// from another CA) is refused and one signed by the client CA is served.
#include <cstdlib>
#include <fstream>
#include <sstream>

#include <grpcpp/grpcpp.h>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "replication/pg/pg_stream_source.h"
#include "server/config.h"
#include "server/walfeed_server.h"
#include "tests/testing/pg_cluster.h"
#include "tests/testing/status_matchers.h"
#include "walfeed/v1/change_stream.grpc.pb.h"

namespace walfeed::server {
namespace {

using ::walfeed::testing::IsOk;
using ::walfeed::testing::PgCluster;

std::string ReadFile(const std::string& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

// A CA and a certificate it signed for `cn` (with SAN localhost), in `dir`.
void MakeCertificates(const std::string& dir, const std::string& ca, const std::string& leaf) {
  const std::string script = absl::StrCat(
      "set -e; cd '", dir, "'; ",
      "[ -f ", ca, ".key ] || openssl req -x509 -newkey rsa:2048 -nodes -days 2 -subj /CN=", ca,
      " -keyout ", ca, ".key -out ", ca, ".crt 2>/dev/null; ",
      "openssl req -newkey rsa:2048 -nodes -subj /CN=localhost -keyout ", leaf, ".key -out ",
      leaf, ".csr 2>/dev/null; ",
      "printf 'subjectAltName=DNS:localhost\\n' > ", leaf, ".ext; ",
      "openssl x509 -req -in ", leaf, ".csr -CA ", ca, ".crt -CAkey ", ca,
      ".key -CAcreateserial -days 2 -extfile ", leaf, ".ext -out ", leaf, ".crt 2>/dev/null");
  ASSERT_EQ(std::system(absl::StrCat("bash -c \"", script, "\"").c_str()), 0) << script;
}

class TlsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    WALFEED_START_PG_OR_SKIP(pg_, PgCluster::Options{});
    char pattern[] = "/tmp/walfeed-tls-XXXXXX";
    ASSERT_NE(mkdtemp(pattern), nullptr);
    dir_ = pattern;
    MakeCertificates(dir_, "server-ca", "server");
    MakeCertificates(dir_, "client-ca", "client");
    MakeCertificates(dir_, "other-ca", "stranger");
  }
  void TearDown() override {
    server_.reset();
    if (!dir_.empty()) (void)std::system(absl::StrCat("rm -rf '", dir_, "'").c_str());
  }

  void StartServer(bool mutual) {
    std::string yaml = absl::StrCat(
        "listen: \"127.0.0.1:0\"\n"
        "tls:\n"
        "  cert_file: ", dir_, "/server.crt\n"
        "  key_file: ", dir_, "/server.key\n",
        mutual ? absl::StrCat("  client_ca_file: ", dir_, "/client-ca.crt\n") : "",
        "streams:\n"
        "  - name: s\n"
        "    conninfo: \"", pg_->ConnInfo(), "\"\n"
        "    slot: walfeed_s\n"
        "    publications: [walfeed_s]\n"
        "    create_missing: true\n");
    absl::StatusOr<ServerConfig> config = ParseConfig(yaml, dir_ + "/walfeed.yaml");
    ASSERT_THAT(config, IsOk());
    absl::StatusOr<std::unique_ptr<WalfeedServer>> server =
        WalfeedServer::Start(*config, replication::pg::MakePgStreamSource);
    ASSERT_THAT(server, IsOk());
    server_ = std::move(*server);
  }

  // GetStatus over `credentials`; the call's status.
  grpc::Status Call(const std::shared_ptr<grpc::ChannelCredentials>& credentials) {
    grpc::ChannelArguments args;
    args.SetSslTargetNameOverride("localhost");
    auto channel = grpc::CreateCustomChannel(absl::StrCat("127.0.0.1:", server_->port()),
                                             credentials, args);
    auto stub = walfeed::v1::ChangeStream::NewStub(channel);
    grpc::ClientContext context;
    context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(20));
    walfeed::v1::GetStatusRequest request;
    walfeed::v1::GetStatusResponse response;
    return stub->GetStatus(&context, request, &response);
  }

  std::shared_ptr<grpc::ChannelCredentials> Tls(const std::string& client) {
    grpc::SslCredentialsOptions options;
    options.pem_root_certs = ReadFile(dir_ + "/server-ca.crt");
    if (!client.empty()) {
      options.pem_private_key = ReadFile(dir_ + "/" + client + ".key");
      options.pem_cert_chain = ReadFile(dir_ + "/" + client + ".crt");
    }
    return grpc::SslCredentials(options);
  }

  std::unique_ptr<PgCluster> pg_;
  std::string dir_;
  std::unique_ptr<WalfeedServer> server_;
};

TEST_F(TlsTest, ServesTlsClientsAndRefusesPlaintext) {
  StartServer(/*mutual=*/false);
  EXPECT_TRUE(Call(Tls("")).ok());
  EXPECT_EQ(Call(grpc::InsecureChannelCredentials()).error_code(),
            grpc::StatusCode::UNAVAILABLE);
}

TEST_F(TlsTest, MutualTlsRequiresACertificateFromTheClientCa) {
  StartServer(/*mutual=*/true);
  EXPECT_TRUE(Call(Tls("client")).ok());
  EXPECT_EQ(Call(Tls("")).error_code(), grpc::StatusCode::UNAVAILABLE);
  EXPECT_EQ(Call(Tls("stranger")).error_code(), grpc::StatusCode::UNAVAILABLE);
}

}  // namespace
}  // namespace walfeed::server
