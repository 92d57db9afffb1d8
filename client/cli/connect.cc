#include "client/cli/connect.h"

#include <netdb.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <system_error>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "absl/strings/strip.h"
#include "absl/time/clock.h"

namespace walfeed::cli {
namespace {

using Result = Probe::Result;

// "Connection refused" -> "connection refused".
std::string Lowered(std::string text) {
  if (!text.empty()) text[0] = absl::ascii_tolower(static_cast<unsigned char>(text[0]));
  return text;
}

std::string ErrnoText(int error) {
  return Lowered(std::error_code(error, std::generic_category()).message());
}

Probe FromErrno(int error) {
  switch (error) {
    case 0:
      return {Result::kConnected, ""};
    case ECONNREFUSED:
      return {Result::kRefused, ""};
    case ENOENT:  // A unix socket path with nothing there.
      return {Result::kRefused, "no socket at that path"};
    case ETIMEDOUT:
      return {Result::kTimedOut, ""};
    case ENETUNREACH:
    case EHOSTUNREACH:
    case ENETDOWN:
    case EHOSTDOWN:
      return {Result::kUnreachable, ErrnoText(error)};
    default:
      return {Result::kOtherError, ErrnoText(error)};
  }
}

// Higher is more telling: one address that accepts decides, and a refusal says
// more than a timeout or an unreachable (e.g. IPv6) sibling address.
int Rank(Result result) {
  switch (result) {
    case Result::kConnected:
      return 5;
    case Result::kRefused:
      return 4;
    case Result::kTimedOut:
      return 3;
    case Result::kUnreachable:
      return 2;
    default:
      return 1;
  }
}

// One non-blocking connect, closed again at once.
Probe ConnectOnce(int family, const sockaddr* address, socklen_t length, absl::Time deadline) {
  const int fd = socket(family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (fd < 0) return {Result::kOtherError, ErrnoText(errno)};
  int error = connect(fd, address, length) == 0 ? 0 : errno;
  if (error == EINPROGRESS) {
    pollfd poll_fd{fd, POLLOUT, 0};
    int ready = 0;
    do {
      const int64_t left = absl::ToInt64Milliseconds(deadline - absl::Now());
      ready = poll(&poll_fd, 1, static_cast<int>(std::clamp<int64_t>(left, 0, 60'000)));
    } while (ready < 0 && errno == EINTR);
    if (ready == 0) {
      error = ETIMEDOUT;
    } else if (ready < 0) {
      error = errno;
    } else {
      socklen_t size = sizeof(error);
      if (getsockopt(fd, SOL_SOCKET, SO_ERROR, &error, &size) != 0) error = errno;
    }
  }
  close(fd);
  return FromErrno(error);
}

// The reason at the end of gRPC's message: "failed to connect to all
// addresses; last error: UNKNOWN: ipv4:127.0.0.1:5902: Ssl handshake failed:
// ..." -> "Ssl handshake failed: ...".
std::string GrpcReason(absl::string_view message) {
  if (const size_t last = message.rfind("last error: "); last != absl::string_view::npos) {
    message.remove_prefix(last + std::strlen("last error: "));
  }
  // A status code name ("UNKNOWN: ", "UNAVAILABLE: ").
  if (const size_t colon = message.find(": "); colon != absl::string_view::npos && colon > 0) {
    const absl::string_view word = message.substr(0, colon);
    if (std::all_of(word.begin(), word.end(), [](char c) {
          return absl::ascii_isupper(static_cast<unsigned char>(c)) || c == '_';
        })) {
      message.remove_prefix(colon + 2);
    }
  }
  // The address the reason is about ("ipv4:127.0.0.1:5902: ").
  for (absl::string_view scheme : {"ipv4:", "ipv6:", "unix:", "unix-abstract:"}) {
    if (absl::StartsWith(message, scheme)) {
      if (const size_t colon = message.find(": "); colon != absl::string_view::npos) {
        message.remove_prefix(colon + 2);
      }
      break;
    }
  }
  return std::string(absl::StripAsciiWhitespace(message));
}

// OpenSSL's reason in "... error:0A00010B:SSL routines::wrong version number":
// "wrong version number". The whole text when it has no such part.
std::string SslReason(const std::string& reason) {
  const size_t routines = reason.find("routines:");
  if (routines == std::string::npos) return reason;
  const size_t last = reason.rfind(':');
  return std::string(absl::StripSuffix(absl::StripAsciiWhitespace(reason.substr(last + 1)), "."));
}

bool ContainsAny(absl::string_view text, std::initializer_list<absl::string_view> needles) {
  return std::any_of(needles.begin(), needles.end(),
                     [text](absl::string_view needle) { return absl::StrContains(text, needle); });
}

constexpr char kRefusedHint[] = " (is walfeed-server running there?)";

}  // namespace

std::optional<Endpoint> ParseTarget(absl::string_view target) {
  Endpoint endpoint;
  if (absl::ConsumePrefix(&target, "unix:")) {
    absl::ConsumePrefix(&target, "//");  // "unix:///run/w.sock" or "unix:/run/w.sock".
    if (target.empty()) return std::nullopt;
    endpoint.unix_path = std::string(target);
    return endpoint;
  }
  if (absl::ConsumePrefix(&target, "dns:")) {
    if (absl::ConsumePrefix(&target, "//")) {  // "dns:///host:port", "dns://resolver/host:port".
      const size_t slash = target.find('/');
      if (slash == absl::string_view::npos) return std::nullopt;
      target.remove_prefix(slash + 1);
    }
  } else if (absl::ConsumePrefix(&target, "ipv4:") || absl::ConsumePrefix(&target, "ipv6:")) {
    target = target.substr(0, target.find(','));  // The first of a list.
  } else if (absl::StrContains(target, "://") || absl::StartsWith(target, "unix-abstract:") ||
             absl::StartsWith(target, "vsock:")) {
    return std::nullopt;
  }
  absl::string_view host = target;
  absl::string_view port;
  if (absl::ConsumePrefix(&host, "[")) {  // "[::1]:50051"
    const size_t close = host.find(']');
    if (close == absl::string_view::npos) return std::nullopt;
    absl::string_view rest = host.substr(close + 1);
    host = host.substr(0, close);
    if (!rest.empty() && !absl::ConsumePrefix(&rest, ":")) return std::nullopt;
    port = rest;
  } else if (const size_t colon = host.rfind(':');
             colon != absl::string_view::npos && host.find(':') == colon) {
    port = host.substr(colon + 1);
    host = host.substr(0, colon);
    if (port.empty()) return std::nullopt;
  }  // Else no port, or a bare IPv6 address.
  if (host.empty()) return std::nullopt;
  endpoint.host = std::string(host);
  endpoint.port = port.empty() ? "443" : std::string(port);
  return endpoint;
}

Probe ProbeEndpoint(const std::optional<Endpoint>& endpoint, absl::Duration timeout) {
  if (!endpoint) return {Result::kNotProbed, ""};
  const absl::Time deadline = absl::Now() + timeout;
  if (!endpoint->unix_path.empty()) {
    sockaddr_un address{};
    address.sun_family = AF_UNIX;
    if (endpoint->unix_path.size() >= sizeof(address.sun_path)) {
      return {Result::kOtherError, "the socket path is too long"};
    }
    std::memcpy(address.sun_path, endpoint->unix_path.data(), endpoint->unix_path.size());
    return ConnectOnce(AF_UNIX, reinterpret_cast<const sockaddr*>(&address), sizeof(address),
                       deadline);
  }
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* addresses = nullptr;
  if (const int error =
          getaddrinfo(endpoint->host.c_str(), endpoint->port.c_str(), &hints, &addresses);
      error != 0) {
    if (error == EAI_SYSTEM) return {Result::kOtherError, ErrnoText(errno)};
    const Result result = error == EAI_NONAME || error == EAI_AGAIN || error == EAI_FAIL ||
                                  error == EAI_NODATA || error == EAI_ADDRFAMILY
                              ? Result::kNoSuchHost
                              : Result::kOtherError;
    return {result, Lowered(gai_strerror(error))};
  }
  Probe best{Result::kOtherError, "the name has no address"};
  for (const addrinfo* a = addresses; a != nullptr; a = a->ai_next) {
    Probe probe = ConnectOnce(a->ai_family, a->ai_addr, a->ai_addrlen, deadline);
    if (a == addresses || Rank(probe.result) > Rank(best.result)) best = std::move(probe);
    if (best.result == Result::kConnected || absl::Now() >= deadline) break;
  }
  freeaddrinfo(addresses);
  return best;
}

ConnectFailure DescribeConnectFailure(const std::string& server, bool tls, const Probe& probe,
                                      absl::string_view grpc_error) {
  ConnectFailure failure;
  std::string what;  // What happened, then the hint in parentheses.
  const std::string reason = GrpcReason(grpc_error);
  const std::string lower = absl::AsciiStrToLower(reason);
  const bool refused_by_grpc = absl::StrContains(lower, "connection refused");
  switch (probe.result) {
    case Result::kRefused:
      what = absl::StrCat(probe.detail.empty() ? "connection refused" : probe.detail, kRefusedHint);
      break;
    case Result::kNoSuchHost:
      what = absl::StrCat("no such host: ", probe.detail, " (check the host name in --server)");
      break;
    case Result::kUnreachable:
      what = absl::StrCat(probe.detail, " (check the address in --server and the network)");
      break;
    case Result::kTimedOut:
      what = "no answer (is the address right? a firewall may be dropping the packets)";
      break;
    case Result::kOtherError:
      what = absl::StrCat(probe.detail, " (check --server)");
      break;
    case Result::kNotProbed:
    case Result::kConnected:
      break;
  }
  const bool tls_words = ContainsAny(lower, {"ssl", "tls", "certificate", "handshake"});
  if (!what.empty()) {
    // The probe found nothing to talk to.
  } else if (refused_by_grpc) {
    what = absl::StrCat("connection refused", kRefusedHint);
  } else if (probe.result == Result::kNotProbed && !tls_words && !reason.empty()) {
    what = reason;  // A target the CLI cannot probe: gRPC's own words.
  } else {
    // Something accepted the connection; the handshake failed or did not finish.
    failure.handshake = true;
    if (grpc_error.empty()) {
      // Still connecting when the time was up.
      what = tls ? "the TLS handshake did not finish in time (does the server use TLS? check "
                   "--tls, --tls-ca and --tls-server-name)"
                 : "the server accepted the connection but did not answer gRPC in time (is it "
                   "walfeed-server? if it uses TLS, add --tls or --tls-ca FILE)";
    } else if (!tls) {
      // A TLS server hangs up on the plaintext HTTP/2 preface.
      what = ContainsAny(lower, {"socket closed", "connection reset", "end of file", "eof"})
                 ? "the server closed the connection during the handshake (does it use TLS? then "
                   "add --tls, or --tls-ca FILE)"
                 : absl::StrCat("the gRPC handshake failed: ", reason,
                                " (does the server use TLS? then add --tls, or --tls-ca FILE)");
    } else if (ContainsAny(lower, {"wrong version number", "packet length too long", "http request",
                                   "unknown protocol", "record layer failure"})) {
      what = absl::StrCat("TLS handshake failed: ", SslReason(reason),
                          " (the server does not seem to use TLS: drop --tls and the --tls-* "
                          "flags, or turn TLS on in the server)");
      failure.definite = true;
    } else if (absl::StrContains(lower, "certificate verify failed")) {
      what =
          "TLS handshake failed: certificate verify failed (the server's certificate is not "
          "trusted: pass the CA that signed it with --tls-ca FILE; or it has expired)";
      failure.definite = true;
    } else if (const size_t peer = lower.find("peer name ");
               peer != std::string::npos && absl::StrContains(lower, "not in peer certificate")) {
      absl::string_view name = absl::string_view(reason).substr(peer + std::strlen("peer name "));
      name = name.substr(0, name.find(" is not in peer certificate"));
      what =
          absl::StrCat("TLS handshake failed: the server's certificate is not valid for \"", name,
                       "\" (connect by a name it is valid for, or pass that name with "
                       "--tls-server-name NAME)");
      failure.definite = true;
    } else if (ContainsAny(lower, {"socket closed", "connection reset", "end of file", "eof"})) {
      what =
          "TLS handshake failed: the server closed the connection (does it require a client "
          "certificate? pass --tls-cert and --tls-key; does it use TLS at all?)";
    } else {
      what = absl::StrCat(
          "TLS handshake failed: ", reason.empty() ? "no reason given" : SslReason(reason),
          " (does the server use TLS? check --tls, --tls-ca and --tls-server-name)");
    }
  }
  failure.message = absl::StrReplaceAll(absl::StrCat("cannot connect to ", server, ": ", what),
                                        {{"\r\n", " "}, {"\n", " "}, {"\r", " "}});
  return failure;
}

}  // namespace walfeed::cli
