// CreateChannel and FollowActiveServiceConfig: how a Subscriber (or any other
// caller on the same server) dials walfeed: TLS, keepalive, the reconnect
// backoff and the message size, from SubscriberOptions.
#include "walfeed/subscriber.h"

#include <grpcpp/grpcpp.h>

#include <algorithm>
#include <fstream>
#include <sstream>

#include "absl/strings/str_cat.h"

namespace walfeed {
namespace {

// The PEM text itself, or the file's contents; "" when neither is set.
absl::StatusOr<std::string> Pem(const std::string& pem, const std::string& file,
                                absl::string_view what) {
  if (!pem.empty() || file.empty()) return pem;
  std::ifstream in(file, std::ios::binary);
  std::stringstream text;
  text << in.rdbuf();
  if (!in.good() && !in.eof()) {
    return absl::InvalidArgumentError(absl::StrCat("cannot read the ", what, " file ", file));
  }
  if (text.str().empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat("the ", what, " file ", file, " is missing, unreadable or empty"));
  }
  return text.str();
}

int Millis(absl::Duration d) {
  return static_cast<int>(std::min<int64_t>(absl::ToInt64Milliseconds(d), INT32_MAX));
}

}  // namespace

absl::StatusOr<std::shared_ptr<grpc::Channel>> CreateChannel(const SubscriberOptions& options) {
  if (options.channel) return options.channel;
  grpc::ChannelArguments args;
  if (options.keepalive.time > absl::ZeroDuration()) {
    args.SetInt(GRPC_ARG_KEEPALIVE_TIME_MS, Millis(options.keepalive.time));
    args.SetInt(GRPC_ARG_KEEPALIVE_TIMEOUT_MS, Millis(options.keepalive.timeout));
    // Idle subscriptions send no data for long stretches; pings must go on.
    args.SetInt(GRPC_ARG_HTTP2_MAX_PINGS_WITHOUT_DATA, 0);
  }
  args.SetMaxReceiveMessageSize(options.max_receive_message_bytes);
  // The channel's own reconnect backoff gates fail-fast calls, so it must not
  // be slower than ours (gRPC's default grows to 120 s). The minimum (which
  // gRPC also uses as the connect timeout) keeps its 20 s default: a short one
  // would abort TLS handshakes to distant servers.
  args.SetInt(GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS, Millis(options.backoff.base));
  args.SetInt(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS, Millis(options.backoff.cap));
  if (options.follow_active) {
    args.SetServiceConfigJSON(FollowActiveServiceConfig(options.stream));
  }
  std::shared_ptr<grpc::ChannelCredentials> credentials;
  const TlsOptions& tls = options.tls;
  if (tls.enabled) {
    grpc::SslCredentialsOptions ssl;
    absl::StatusOr<std::string> roots = Pem(tls.root_certs_pem, tls.root_certs_file, "TLS CA");
    absl::StatusOr<std::string> chain =
        Pem(tls.cert_chain_pem, tls.cert_chain_file, "TLS client certificate");
    absl::StatusOr<std::string> key = Pem(tls.private_key_pem, tls.private_key_file, "TLS key");
    for (const auto* part : {&roots, &chain, &key}) {
      if (!part->ok()) return part->status();
    }
    if (chain->empty() != key->empty()) {
      return absl::InvalidArgumentError(
          "mutual TLS needs both a client certificate and its private key");
    }
    ssl.pem_root_certs = *roots;
    ssl.pem_cert_chain = *chain;
    ssl.pem_private_key = *key;
    credentials = grpc::SslCredentials(ssl);
    if (!tls.server_name_override.empty()) {
      args.SetSslTargetNameOverride(tls.server_name_override);
    }
  } else {
    const bool stray = !tls.root_certs_pem.empty() || !tls.root_certs_file.empty() ||
                       !tls.cert_chain_pem.empty() || !tls.cert_chain_file.empty() ||
                       !tls.private_key_pem.empty() || !tls.private_key_file.empty();
    if (stray) {
      // Silently dialing plaintext with certificates configured would be a trap.
      return absl::InvalidArgumentError("TLS files or PEM are set but tls.enabled is false");
    }
    credentials = grpc::InsecureChannelCredentials();
  }
  return grpc::CreateCustomChannel(options.server, credentials, args);
}

std::string FollowActiveServiceConfig(const std::string& stream) {
  // Stream names are 1-63 of A-Z a-z 0-9 _ . - (nothing to escape in JSON).
  return absl::StrCat(R"({"loadBalancingConfig": [{"round_robin": {}}], )",
                      R"("healthCheckConfig": {"serviceName": "walfeed.v1.ChangeStream)",
                      stream.empty() ? "" : "/", stream, R"("}})");
}

}  // namespace walfeed
