// ServerConfig: walfeed-server's configuration, read from one YAML file, and the
// helpers that load and check it (LoadConfig, ParseConfig, ReadTlsFiles,
// ListensBeyondLoopback).
//
// deploy/walfeed.example.yaml documents every key. In short:
//
//   listen: "127.0.0.1:50051"        host:port ([::1]:50051 for IPv6)
//   plaintext: false                 true only when serving without tls
//   tls: {cert_file, key_file, client_ca_file}   client_ca_file => mTLS
//   auth: {tokens_file}              absent => every call is allowed
//   checkpoint: {schema, conninfo | conninfo_file | conninfo_env}
//   shutdown_timeout: 10s
//   state_dir: /var/lib/walfeed      absent => nothing spills to disk
//   defaults: {max_batch_events, max_batch_bytes, max_unacked_events,
//              max_unacked_bytes, progress_interval, buffer_bytes, read_coalesce,
//              retention_bytes, laggard_policy}
//   streams: [{name, conninfo | conninfo_file | conninfo_env, slot,
//              publications, tables, create_missing, retention_bytes,
//              laggard_policy}]
//
// Parsing is strict, because a silently ignored key in a server config is a
// setting the operator believes is in force and is not: unknown or repeated keys,
// a value of the wrong type, or one outside its bounds is an error naming the
// full key path (`streams[0].slots: unknown key; expected one of ...`), prefixed
// with `<file>:<line>:` when the position is known. Booleans are only
// true/false (not yes/no/on/off), and keys with an empty value are errors rather
// than "unset", so commenting out the only key of a block (say auth.tokens_file)
// cannot quietly turn a feature off.
//
// Secrets. A stream's conninfo may hold a password, so it can come from a file
// (conninfo_file, e.g. a mounted Kubernetes secret) or an environment variable
// (conninfo_env) instead of the config text. No error message ever quotes a
// conninfo, the contents of a conninfo file, an environment variable's value or
// the contents of a TLS key.
//
// Relative paths (tls.*, auth.tokens_file, conninfo_file, state_dir) are resolved against
// the directory of the config file, so a config and its files can move together.
//
// What is checked here: the shape, the bounds, listen's form, and every stream
// through StreamConfig::Validate (the naming rules PostgreSQL applies live there,
// not here). What is not: the TLS files and the tokens file are read by the
// caller (ReadTlsFiles, TokenAuthorizer::Load), and checkpoint.schema's rules are
// PgCheckpointStore::Open's, which reports them when the store is opened.
#ifndef WALFEED_SERVER_CONFIG_H_
#define WALFEED_SERVER_CONFIG_H_

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "replication/checkpoint_store.h"
#include "replication/stream_config.h"
#include "server/retention_options.h"
#include "server/session_limits.h"

namespace walfeed::server {

// Serving over TLS. Paths are already resolved against the config file's
// directory; the files are read by ReadTlsFiles, not at parse time.
struct TlsConfig {
  // PEM certificate chain presented to clients.
  std::string cert_file;
  // PEM private key of cert_file.
  std::string key_file;
  // PEM CA bundle for client certificates. Empty: no client certificates. Set:
  // every client must present a certificate signed by one of these CAs (mTLS).
  std::string client_ca_file;

  bool RequiresClientCertificates() const { return !client_ca_file.empty(); }
};

// The PEM contents of a TlsConfig's files, as gRPC's SSL credentials take them.
struct TlsFiles {
  std::string cert_chain;
  std::string private_key;
  std::string client_ca;  // Empty when no client_ca_file is configured.
};

// Where consumer and stream checkpoints are stored (PgCheckpointStore).
struct CheckpointConfig {
  // Schema of the checkpoint tables; checked by PgCheckpointStore::Open.
  std::string schema = std::string(replication::kDefaultCheckpointSchema);
  // libpq conninfo of the checkpoint database. Empty: each stream keeps its
  // checkpoints in its own source database (so any walfeed instance that can
  // reach the source can take the stream over).
  std::string conninfo;
};

// The server's values of the per-subscription knobs a SubscribeRequest may leave
// at 0 (SessionLimits, defined once), and each stream's buffer and read window.
struct StreamDefaults : SessionLimits, RetentionOptions {
  // Bytes of decoded events each stream's buffer holds for its subscribers.
  uint64_t buffer_bytes = uint64_t{64} << 20;
  // How long each stream's reader lets data accumulate after a read that brought
  // some (ReaderOptions::read_coalesce); 0 reads as soon as anything arrives.
  // Unset: 1 ms, waited only while 8,000 frames/s or more arrive (over a
  // Unix-domain socket shortened while a backlog is read), and over TCP 8 ms
  // at any rate while a backlog is read (ReaderOptions::read_coalesce).
  std::optional<absl::Duration> read_coalesce;
};

// How walfeed-server logs (the `log` block; --log-format and --log-level
// override it).
enum class LogFormat { kText, kJson };
struct LogConfig {
  LogFormat format = LogFormat::kText;
  std::string level = "info";  // trace, debug, info, warn or error.
};
// "text"/"json" and the level names above; InvalidArgument naming the choices.
absl::StatusOr<LogFormat> ParseLogFormat(absl::string_view text);
absl::Status CheckLogLevel(absl::string_view level);
// An advertise_address value: host:port.
absl::Status CheckAdvertiseAddress(absl::string_view address);
// The same form for the gRPC listen address (--listen).
absl::Status CheckListen(absl::string_view listen);
// A metrics_listen value: host:port where the host is an IP address (IPv6 in
// brackets) or localhost, since the metrics endpoint does not resolve names.
absl::Status CheckMetricsListen(absl::string_view listen);

struct ServerConfig {
  // host:port; host is a name, an IPv4 address or a bracketed IPv6 address.
  std::string listen;
  // Serve without TLS. Only ever true when the config says so explicitly.
  bool plaintext = false;
  // Set exactly when plaintext is false.
  std::optional<TlsConfig> tls;
  // Path of the bearer-tokens file (see server/auth.h), resolved. Empty: no
  // authentication, every call is allowed; the caller should warn about it.
  std::string tokens_file;
  CheckpointConfig checkpoint;
  // How long a graceful shutdown waits for calls to finish before cancelling.
  absl::Duration shutdown_timeout = absl::Seconds(10);
  StreamDefaults defaults;
  // At least one, names unique, each already passed StreamConfig::Validate().
  std::vector<replication::StreamConfig> streams;
  // Where streams spill what does not fit in buffer_bytes (resolved). Empty:
  // nothing spills, a stream keeps at most buffer_bytes for its consumers.
  std::string state_dir;
  // host:port where clients reach this instance, which standbys name in their
  // errors and status (active/standby). Empty: the listen address, with the
  // host name for a wildcard host.
  std::string advertise_address;
  // host:port serving Prometheus metrics at /metrics; empty: not served.
  std::string metrics_listen;
  LogConfig log;
  // Streams whose retention_bytes or laggard_policy differ from the defaults.
  absl::flat_hash_map<std::string, RetentionOptions> retention;

  // The stream's retention: its own settings, or the defaults.
  RetentionOptions RetentionFor(const std::string& stream) const {
    auto it = retention.find(stream);
    return it != retention.end() ? it->second : static_cast<const RetentionOptions&>(defaults);
  }

  bool auth_enabled() const { return !tokens_file.empty(); }
};

// Reads and parses the config file at `path` (ParseConfig with source_name =
// path). NotFound / PermissionDenied when the file cannot be read; otherwise
// InvalidArgument as ParseConfig.
absl::StatusOr<ServerConfig> LoadConfig(const std::string& path);

// Parses config text. `source_name` is the file the text came from: it prefixes
// every error message, and relative paths in the config are resolved against its
// directory (a bare name such as "test.yaml" leaves them relative to the working
// directory). Reads conninfo_file files and conninfo_env variables. Every
// failure is InvalidArgument naming the key path, except a conninfo file that
// cannot be read (NotFound, PermissionDenied, ...).
absl::StatusOr<ServerConfig> ParseConfig(absl::string_view yaml_text,
                                         absl::string_view source_name);

// Reads the PEM files a TlsConfig names. Errors name the key (tls.key_file, ...)
// and the path, never the contents; a file without a "-----BEGIN " line is
// refused as not PEM.
absl::StatusOr<TlsFiles> ReadTlsFiles(const TlsConfig& tls);

// True unless `listen`'s host is a loopback address (127.0.0.0/8, ::1, an
// IPv4-mapped 127.x address) or "localhost". Names other than localhost count as
// beyond loopback, since what they resolve to is not known here. For the
// caller's startup warning about plaintext or unauthenticated serving.
bool ListensBeyondLoopback(const std::string& listen);

// Reads a whole file of at most `max_bytes`. Errors carry the errno's status code
// and name `path`; they never include the contents. Shared with auth.cc.
absl::StatusOr<std::string> ReadSmallFile(const std::string& path, size_t max_bytes);

}  // namespace walfeed::server

#endif  // WALFEED_SERVER_CONFIG_H_
