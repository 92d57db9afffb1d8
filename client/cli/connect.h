// Why the `walfeed` CLI could not reach walfeed-server, said in one line with
// what to check: "cannot connect to 127.0.0.1:5999: connection refused (is
// walfeed-server running there?)", "...: TLS handshake failed: certificate
// verify failed (...: pass its CA with --tls-ca FILE)".
//
// gRPC reports a failed connection as UNAVAILABLE with a message meant for
// gRPC's developers ("failed to connect to all addresses; last error: ...").
// The CLI opens a plain TCP connection of its own to the same address
// (ProbeEndpoint) to tell "nothing answers there" (refused, unreachable, no such
// host, no answer) from "something answers but the handshake fails" (TLS on one
// side only, an untrusted certificate, a certificate for another name), and
// takes the handshake's reason from gRPC's message. ParseTarget and
// DescribeConnectFailure are pure (unit-tested in cli_format_test).
#ifndef WALFEED_CLIENT_CLI_CONNECT_H_
#define WALFEED_CLIENT_CLI_CONNECT_H_

#include <optional>
#include <string>

#include "absl/strings/string_view.h"
#include "absl/time/time.h"

namespace walfeed::cli {

// Where a gRPC target ("host:port", "[::1]:port", "dns:///host:port",
// "ipv4:1.2.3.4:port", "unix:/path", ...) points.
struct Endpoint {
  std::string host;       // A name or an address; empty for a unix socket.
  std::string port;       // gRPC's default, 443, when the target has none.
  std::string unix_path;  // Set for "unix:" targets.
};

// nullopt for targets the CLI cannot probe (other schemes, several addresses
// are reduced to the first).
std::optional<Endpoint> ParseTarget(absl::string_view target);

// What a plain connect() to the endpoint found.
struct Probe {
  enum class Result {
    kNotProbed,    // The target's scheme is not one ParseTarget knows.
    kConnected,    // Something accepts connections there.
    kRefused,      // Nothing listens (ECONNREFUSED; no socket file for unix:).
    kNoSuchHost,   // The name does not resolve.
    kUnreachable,  // No route to the host or its network.
    kTimedOut,     // No answer within the probe's timeout.
    kOtherError,
  };
  Result result = Result::kNotProbed;
  std::string detail;  // strerror/gai_strerror text for the failures.
};

// Connects to (then closes) each address `endpoint` resolves to until one
// accepts, within `timeout` in all. A connection counts over any error; a
// refusal over a timeout, a timeout over unreachable.
Probe ProbeEndpoint(const std::optional<Endpoint>& endpoint, absl::Duration timeout);

struct ConnectFailure {
  // "cannot connect to <server>: <what happened> (<what to check>)": one line.
  std::string message;
  // The client's own TLS settings cannot work with this server (TLS spoken to
  // a plaintext server, an untrusted certificate, a certificate for another
  // name): retrying cannot help.
  bool definite = false;
  // Something accepted the connection but the handshake failed or did not
  // finish: the hint is about TLS settings (and mute if they worked before).
  bool handshake = false;
};

// The explanation of a connection that gRPC could not make. `server` is the
// address as the user gave it, `tls` whether the client used TLS, `probe` what
// ProbeEndpoint found, `grpc_error` the failed call's message (empty when the
// call ran out of time while still connecting).
ConnectFailure DescribeConnectFailure(const std::string& server, bool tls, const Probe& probe,
                                      absl::string_view grpc_error);

}  // namespace walfeed::cli

#endif  // WALFEED_CLIENT_CLI_CONNECT_H_
