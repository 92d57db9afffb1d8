// Parses walfeed-server's YAML config into ServerConfig (see config.h for the
// rules). yaml-cpp builds the node tree; everything after that is a walk over a
// fixed schema, so the walk's depth is bounded whatever the input (aliases that
// point back at their own ancestors cannot make it loop).
#include "server/config.h"

#include <arpa/inet.h>
#include <netinet/in.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <initializer_list>
#include <memory>
#include <utility>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/ascii.h"
#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "replication/status_macros.h"
#include "yaml-cpp/yaml.h"

namespace walfeed::server {
namespace {

using replication::StreamConfig;

// Far above any real config; stops a wrong path (a log file, /dev/zero) from
// being read into memory whole.
constexpr size_t kMaxConfigBytes = size_t{1} << 20;
constexpr size_t kMaxConninfoFileBytes = size_t{64} << 10;
constexpr size_t kMaxPemFileBytes = size_t{1} << 20;

// A value from the config quoted for an error message: escaped, so a control
// character is visible, and cut short, so a stray paste cannot flood the log.
// Never used on secrets.
std::string Quote(absl::string_view text, size_t max_shown = 80) {
  const bool cut = text.size() > max_shown;
  return absl::StrCat("\"", absl::CHexEscape(text.substr(0, max_shown)), cut ? "\"..." : "\"");
}

// A file path, shown whole unless absurdly long: a cut path does not say which
// file was meant.
std::string QuotePath(absl::string_view path) { return Quote(path, 4096); }

std::string Child(absl::string_view path, absl::string_view key) {
  return path.empty() ? std::string(key) : absl::StrCat(path, ".", key);
}

std::string Element(absl::string_view path, size_t index) {
  return absl::StrCat(path, "[", index, "]");
}

// What a node is, for "expected X, found Y". Says nothing about the content,
// so it is safe for secret-bearing keys.
absl::string_view KindOf(const YAML::Node& node) {
  switch (node.Type()) {
    case YAML::NodeType::Null:
      return "no value";
    case YAML::NodeType::Scalar:
      return "a single value";
    case YAML::NodeType::Sequence:
      return "a list";
    case YAML::NodeType::Map:
      return "a mapping";
    case YAML::NodeType::Undefined:
      break;
  }
  return "nothing";
}

// yaml-cpp's description of an exception without what some messages append
// after ": " (an escape character, a key): that piece of input could belong to
// a conninfo.
absl::string_view FixedPart(const YAML::Exception& e) {
  absl::string_view what = e.msg;
  return what.substr(0, what.find(": "));
}

absl::Status WithPrefix(const absl::Status& status, absl::string_view prefix) {
  return absl::Status(status.code(), absl::StrCat(prefix, status.message()));
}

// The directory part of `path` ("" for a bare name), with a trailing '/'.
std::string DirectoryOf(absl::string_view path) {
  const size_t slash = path.rfind('/');
  return slash == absl::string_view::npos ? std::string() : std::string(path.substr(0, slash + 1));
}

// "host:port" split into host (brackets removed) and port, or why not.
struct HostPort {
  std::string host;
  int port = 0;
  bool ipv6 = false;
};

absl::StatusOr<HostPort> SplitHostPort(absl::string_view listen) {
  constexpr absl::string_view kForm =
      "expected host:port, e.g. 127.0.0.1:50051 (local only), 0.0.0.0:50051 (every IPv4 "
      "interface) or [::]:50051 (every interface)";
  HostPort out;
  absl::string_view port;
  if (absl::StartsWith(listen, "[")) {
    const size_t close = listen.find(']');
    if (close == absl::string_view::npos || listen.substr(close + 1, 1) != ":") {
      return absl::InvalidArgumentError(absl::StrCat(Quote(listen), ": ", kForm));
    }
    out.host = std::string(listen.substr(1, close - 1));
    out.ipv6 = true;
    port = listen.substr(close + 2);
    in6_addr unused;
    if (inet_pton(AF_INET6, out.host.c_str(), &unused) != 1) {
      return absl::InvalidArgumentError(absl::StrCat(Quote(listen), ": ", Quote(out.host),
                                                     " in brackets is not an IPv6 address"));
    }
  } else {
    const size_t colon = listen.rfind(':');
    if (colon == absl::string_view::npos) {
      return absl::InvalidArgumentError(absl::StrCat(Quote(listen), " has no port: ", kForm));
    }
    out.host = std::string(listen.substr(0, colon));
    port = listen.substr(colon + 1);
    if (absl::StrContains(out.host, ':')) {
      return absl::InvalidArgumentError(
          absl::StrCat(Quote(listen), ": an IPv6 address needs brackets, as in [::1]:50051"));
    }
    if (out.host.empty()) {
      return absl::InvalidArgumentError(absl::StrCat(Quote(listen), " has no host: ", kForm));
    }
    for (char c : out.host) {
      if (!absl::ascii_isalnum(c) && c != '.' && c != '-' && c != '_') {
        return absl::InvalidArgumentError(
            absl::StrCat(Quote(listen), ": the host must be a DNS name or an IP address; ", kForm));
      }
    }
  }
  // Port 0 asks the OS for a free port (tests read back the one it chose).
  bool digits = !port.empty() && port.size() <= 5;
  for (char c : port) digits = digits && absl::ascii_isdigit(c);
  if (!digits || !absl::SimpleAtoi(port, &out.port) || out.port > 65535) {
    return absl::InvalidArgumentError(
        absl::StrCat(Quote(listen), ": the port must be a number from 0 to 65535"));
  }
  return out;
}

// A mapping's entries after checking that every key is a distinct, known string.
class Fields {
 public:
  Fields(YAML::Node node, std::string path) : node_(std::move(node)), path_(std::move(path)) {}

  // The value of `key` (one of the allowed keys), or nullopt when absent.
  std::optional<YAML::Node> Get(absl::string_view key) const {
    auto it = values_.find(key);
    if (it == values_.end()) return std::nullopt;
    return it->second;
  }
  bool Has(absl::string_view key) const { return values_.contains(key); }

  const YAML::Node& node() const { return node_; }
  const std::string& path() const { return path_; }
  std::string PathOf(absl::string_view key) const { return Child(path_, key); }

 private:
  friend class Parser;
  YAML::Node node_;
  std::string path_;
  absl::flat_hash_map<std::string, YAML::Node> values_;
};

class Parser {
 public:
  explicit Parser(absl::string_view source_name)
      : source_(source_name.empty() ? "<config>" : std::string(source_name)),
        base_dir_(DirectoryOf(source_name)) {}

  absl::StatusOr<ServerConfig> Parse(absl::string_view text) const;

 private:
  // InvalidArgument "<source>:<line>: <path>: <message>" ("<path>: " left out
  // for the document itself). The line is the node's when yaml-cpp knows it.
  absl::Status Error(const YAML::Node& at, absl::string_view path,
                     absl::string_view message) const {
    if (path.empty()) return absl::InvalidArgumentError(absl::StrCat(Where(at), message));
    return absl::InvalidArgumentError(absl::StrCat(Where(at), path, ": ", message));
  }
  std::string Where(const YAML::Node& at) const {
    const YAML::Mark mark = at.Mark();
    if (mark.is_null()) return absl::StrCat(source_, ": ");
    return absl::StrCat(source_, ":", mark.line + 1, ": ");
  }
  absl::Status Missing(const Fields& fields, absl::string_view key, absl::string_view what) const {
    return Error(fields.node(), fields.PathOf(key), absl::StrCat("missing; ", what));
  }

  absl::StatusOr<Fields> Map(const YAML::Node& node, const std::string& path,
                             std::initializer_list<absl::string_view> allowed) const;

  // Value readers. `path` names the key in errors. Only Bool, Integer, Duration
  // and the non-secret strings quote the value they reject.
  absl::StatusOr<std::string> Scalar(const YAML::Node& node, const std::string& path,
                                     absl::string_view expected) const;
  absl::StatusOr<std::string> NonEmptyString(const YAML::Node& node, const std::string& path,
                                             absl::string_view expected) const;
  absl::StatusOr<std::string> FilePath(const YAML::Node& node, const std::string& path) const;
  absl::StatusOr<bool> Bool(const YAML::Node& node, const std::string& path) const;
  absl::StatusOr<uint64_t> Integer(const YAML::Node& node, const std::string& path, uint64_t min,
                                   uint64_t max) const;
  absl::StatusOr<absl::Duration> Duration(const YAML::Node& node, const std::string& path,
                                          absl::Duration min, absl::Duration max) const;
  absl::StatusOr<std::vector<std::string>> StringList(const YAML::Node& node,
                                                      const std::string& path) const;

  // The conninfo from whichever of conninfo, conninfo_file and conninfo_env
  // `fields` holds; nullopt when it holds none.
  absl::StatusOr<std::optional<std::string>> Conninfo(const Fields& fields) const;

  absl::Status ParseTls(const YAML::Node& node, ServerConfig& config) const;
  absl::Status ParseAuth(const YAML::Node& node, ServerConfig& config) const;
  absl::Status ParseCheckpoint(const YAML::Node& node, ServerConfig& config) const;
  absl::Status ParseDefaults(const YAML::Node& node, ServerConfig& config) const;
  // retention_bytes and laggard_policy, in defaults or a stream.
  absl::Status ParseRetention(const Fields& fields, RetentionOptions& retention) const;
  absl::Status ParseStreams(const YAML::Node& node, ServerConfig& config) const;
  absl::StatusOr<StreamConfig> ParseStream(const YAML::Node& node, const std::string& path,
                                           ServerConfig& config) const;

  // Relative paths are taken relative to the config file.
  std::string Resolve(const std::string& path) const {
    if (absl::StartsWith(path, "/")) return path;
    return base_dir_ + path;
  }

  const std::string source_;
  const std::string base_dir_;
};

absl::StatusOr<Fields> Parser::Map(const YAML::Node& node, const std::string& path,
                                   std::initializer_list<absl::string_view> allowed) const {
  if (!node.IsMap()) {
    return Error(node, path,
                 absl::StrCat("expected a mapping (key: value lines), found ", KindOf(node)));
  }
  Fields fields(node, path);
  for (const auto& entry : node) {
    const YAML::Node& key = entry.first;
    if (!key.IsScalar()) {
      return Error(key, path, absl::StrCat("keys must be plain names, found ", KindOf(key)));
    }
    const std::string& name = key.Scalar();
    // The key as it appears in a path: escaped and cut short, like any value.
    const std::string key_path = Child(path, absl::CHexEscape(name.substr(0, 64)));
    bool known = false;
    for (absl::string_view a : allowed) known = known || a == name;
    if (!known) {
      return Error(key, key_path,
                   absl::StrCat("unknown key; expected one of ", absl::StrJoin(allowed, ", ")));
    }
    // yaml-cpp keeps both entries of a repeated key; which one wins would be an
    // accident of the implementation, so refuse it.
    if (!fields.values_.emplace(name, entry.second).second) {
      return Error(key, key_path, "key appears twice in the same mapping");
    }
  }
  return fields;
}

absl::StatusOr<std::string> Parser::Scalar(const YAML::Node& node, const std::string& path,
                                           absl::string_view expected) const {
  if (node.IsScalar()) return node.Scalar();
  return Error(node, path, absl::StrCat("expected ", expected, ", found ", KindOf(node)));
}

absl::StatusOr<std::string> Parser::NonEmptyString(const YAML::Node& node, const std::string& path,
                                                   absl::string_view expected) const {
  WALFEED_ASSIGN_OR_RETURN(std::string value, Scalar(node, path, expected));
  if (absl::StripAsciiWhitespace(value).empty()) {
    return Error(node, path, absl::StrCat("is empty; expected ", expected));
  }
  return value;
}

absl::StatusOr<std::string> Parser::FilePath(const YAML::Node& node,
                                             const std::string& path) const {
  WALFEED_ASSIGN_OR_RETURN(std::string value, NonEmptyString(node, path, "a file path"));
  return Resolve(value);
}

absl::StatusOr<bool> Parser::Bool(const YAML::Node& node, const std::string& path) const {
  WALFEED_ASSIGN_OR_RETURN(std::string value, Scalar(node, path, "true or false"));
  // YAML 1.2's core schema: yes/no/on/off are strings there, and accepting
  // them here would make `plaintext: no` mean something in walfeed that it does
  // not mean in other YAML tools.
  if (value == "true" || value == "True" || value == "TRUE") return true;
  if (value == "false" || value == "False" || value == "FALSE") return false;
  return Error(node, path, absl::StrCat("expected true or false, found ", Quote(value)));
}

absl::StatusOr<uint64_t> Parser::Integer(const YAML::Node& node, const std::string& path,
                                         uint64_t min, uint64_t max) const {
  const std::string expected = absl::StrCat("an integer from ", min, " to ", max);
  WALFEED_ASSIGN_OR_RETURN(std::string value, Scalar(node, path, expected));
  // Digits only: SimpleAtoi would also take a sign, surrounding spaces or a
  // "0x" prefix, none of which a reader of the file would expect to work.
  bool digits = !value.empty() && value.size() <= 20;
  for (char c : value) digits = digits && absl::ascii_isdigit(c);
  uint64_t parsed = 0;
  if (!digits || !absl::SimpleAtoi(value, &parsed) || parsed < min || parsed > max) {
    return Error(node, path, absl::StrCat("expected ", expected, ", found ", Quote(value)));
  }
  return parsed;
}

absl::StatusOr<absl::Duration> Parser::Duration(const YAML::Node& node, const std::string& path,
                                                absl::Duration min, absl::Duration max) const {
  const std::string range =
      absl::StrCat("from ", absl::FormatDuration(min), " to ", absl::FormatDuration(max));
  const std::string expected = absl::StrCat("a duration such as 500ms, 10s or 1m30s, ", range);
  WALFEED_ASSIGN_OR_RETURN(std::string value, Scalar(node, path, expected));
  absl::Duration parsed;
  if (!absl::ParseDuration(value, &parsed)) {
    return Error(node, path, absl::StrCat("expected ", expected, ", found ", Quote(value)));
  }
  if (parsed < min || parsed > max) {
    return Error(node, path, absl::StrCat("must be ", range, ", found ", Quote(value)));
  }
  return parsed;
}

absl::StatusOr<std::vector<std::string>> Parser::StringList(const YAML::Node& node,
                                                            const std::string& path) const {
  if (!node.IsSequence()) {
    return Error(node, path, absl::StrCat("expected a list such as [a, b], found ", KindOf(node)));
  }
  std::vector<std::string> out;
  for (size_t i = 0; i < node.size(); ++i) {
    WALFEED_ASSIGN_OR_RETURN(std::string value, Scalar(node[i], Element(path, i), "a string"));
    out.push_back(std::move(value));
  }
  return out;
}

absl::StatusOr<std::optional<std::string>> Parser::Conninfo(const Fields& fields) const {
  std::vector<absl::string_view> set;
  for (absl::string_view key : {"conninfo", "conninfo_file", "conninfo_env"}) {
    if (fields.Has(key)) set.push_back(key);
  }
  if (set.empty()) return std::optional<std::string>();
  if (set.size() > 1) {
    return Error(fields.node(), fields.path(),
                 absl::StrCat("set only one of conninfo, conninfo_file and conninfo_env; found ",
                              absl::StrJoin(set, " and ")));
  }

  if (std::optional<YAML::Node> node = fields.Get("conninfo")) {
    // Never quoted back: it may carry a password.
    return Scalar(*node, fields.PathOf("conninfo"), "a libpq connection string");
  }

  if (std::optional<YAML::Node> node = fields.Get("conninfo_file")) {
    const std::string path = fields.PathOf("conninfo_file");
    WALFEED_ASSIGN_OR_RETURN(std::string file, FilePath(*node, path));
    absl::StatusOr<std::string> contents = ReadSmallFile(file, kMaxConninfoFileBytes);
    if (!contents.ok()) {
      return WithPrefix(contents.status(), absl::StrCat(Where(*node), path, ": "));
    }
    // Secret files are usually written with a trailing newline.
    std::string conninfo(absl::StripAsciiWhitespace(*contents));
    if (conninfo.empty()) {
      return Error(*node, path, absl::StrCat("file ", QuotePath(file), " is empty"));
    }
    return conninfo;
  }

  const YAML::Node node = *fields.Get("conninfo_env");
  const std::string path = fields.PathOf("conninfo_env");
  WALFEED_ASSIGN_OR_RETURN(std::string variable,
                           NonEmptyString(node, path, "an environment variable name"));
  bool valid = !absl::ascii_isdigit(variable[0]);
  for (char c : variable) valid = valid && (absl::ascii_isalnum(c) || c == '_');
  if (!valid) {
    return Error(node, path,
                 absl::StrCat(Quote(variable),
                              " is not an environment variable name (letters, digits and "
                              "underscores, not starting with a digit)"));
  }
  const char* value = std::getenv(variable.c_str());
  if (value == nullptr) {
    return Error(node, path, absl::StrCat("environment variable ", variable, " is not set"));
  }
  std::string conninfo(absl::StripAsciiWhitespace(value));
  if (conninfo.empty()) {
    return Error(node, path, absl::StrCat("environment variable ", variable, " is empty"));
  }
  return conninfo;
}

absl::Status Parser::ParseTls(const YAML::Node& node, ServerConfig& config) const {
  WALFEED_ASSIGN_OR_RETURN(Fields fields,
                           Map(node, "tls", {"cert_file", "key_file", "client_ca_file"}));
  TlsConfig tls;
  std::optional<YAML::Node> cert = fields.Get("cert_file");
  if (!cert) return Missing(fields, "cert_file", "the PEM certificate chain to serve");
  WALFEED_ASSIGN_OR_RETURN(tls.cert_file, FilePath(*cert, fields.PathOf("cert_file")));
  std::optional<YAML::Node> key = fields.Get("key_file");
  if (!key) return Missing(fields, "key_file", "the PEM private key of cert_file");
  WALFEED_ASSIGN_OR_RETURN(tls.key_file, FilePath(*key, fields.PathOf("key_file")));
  if (std::optional<YAML::Node> ca = fields.Get("client_ca_file")) {
    WALFEED_ASSIGN_OR_RETURN(tls.client_ca_file, FilePath(*ca, fields.PathOf("client_ca_file")));
  }
  config.tls = std::move(tls);
  return absl::OkStatus();
}

absl::Status Parser::ParseAuth(const YAML::Node& node, ServerConfig& config) const {
  WALFEED_ASSIGN_OR_RETURN(Fields fields, Map(node, "auth", {"tokens_file"}));
  std::optional<YAML::Node> tokens = fields.Get("tokens_file");
  if (!tokens) {
    return Missing(fields, "tokens_file",
                   "the bearer-tokens file; remove the whole auth block to allow every call");
  }
  WALFEED_ASSIGN_OR_RETURN(config.tokens_file, FilePath(*tokens, fields.PathOf("tokens_file")));
  return absl::OkStatus();
}

absl::Status Parser::ParseCheckpoint(const YAML::Node& node, ServerConfig& config) const {
  WALFEED_ASSIGN_OR_RETURN(
      Fields fields,
      Map(node, "checkpoint", {"schema", "conninfo", "conninfo_file", "conninfo_env"}));
  if (std::optional<YAML::Node> schema = fields.Get("schema")) {
    WALFEED_ASSIGN_OR_RETURN(config.checkpoint.schema,
                             NonEmptyString(*schema, fields.PathOf("schema"), "a schema name"));
    if (absl::Status valid = replication::CheckCheckpointSchema(config.checkpoint.schema);
        !valid.ok()) {
      return Error(*schema, fields.PathOf("schema"), valid.message());
    }
  }
  WALFEED_ASSIGN_OR_RETURN(std::optional<std::string> conninfo, Conninfo(fields));
  // An explicitly empty conninfo means the default: each stream's own database.
  if (conninfo) config.checkpoint.conninfo = std::string(absl::StripAsciiWhitespace(*conninfo));
  return absl::OkStatus();
}

absl::Status Parser::ParseDefaults(const YAML::Node& node, ServerConfig& config) const {
  WALFEED_ASSIGN_OR_RETURN(Fields fields,
                           Map(node, "defaults",
                               {"max_batch_events", "max_batch_bytes", "max_unacked_events",
                                "max_unacked_bytes", "progress_interval", "buffer_bytes",
                                "read_coalesce", "retention_bytes", "laggard_policy"}));
  StreamDefaults& d = config.defaults;
  // The ranges are SessionLimits' (session_limits.h), shared with requests.
  if (std::optional<YAML::Node> n = fields.Get("max_batch_events")) {
    WALFEED_ASSIGN_OR_RETURN(uint64_t v,
                             Integer(*n, fields.PathOf("max_batch_events"), 1, kBatchEventsMax));
    d.max_batch_events = static_cast<uint32_t>(v);
  }
  if (std::optional<YAML::Node> n = fields.Get("max_batch_bytes")) {
    // gRPC clients refuse messages over 4 MiB unless raised, so large values
    // need matching client settings; 64 MiB is the most walfeed accepts.
    WALFEED_ASSIGN_OR_RETURN(uint64_t v,
                             Integer(*n, fields.PathOf("max_batch_bytes"), 1, kBatchBytesMax));
    d.max_batch_bytes = static_cast<uint32_t>(v);
  }
  if (std::optional<YAML::Node> n = fields.Get("max_unacked_events")) {
    WALFEED_ASSIGN_OR_RETURN(uint64_t v,
                             Integer(*n, fields.PathOf("max_unacked_events"), 1, kUnackedEventsMax));
    d.max_unacked_events = static_cast<uint32_t>(v);
  }
  if (std::optional<YAML::Node> n = fields.Get("max_unacked_bytes")) {
    WALFEED_ASSIGN_OR_RETURN(d.max_unacked_bytes,
                             Integer(*n, fields.PathOf("max_unacked_bytes"), 1, kUnackedBytesMax));
  }
  if (std::optional<YAML::Node> n = fields.Get("progress_interval")) {
    WALFEED_ASSIGN_OR_RETURN(
        d.progress_interval,
        Duration(*n, fields.PathOf("progress_interval"), kProgressIntervalMin, kProgressIntervalMax));
  }
  if (std::optional<YAML::Node> n = fields.Get("buffer_bytes")) {
    WALFEED_ASSIGN_OR_RETURN(d.buffer_bytes,
                             Integer(*n, fields.PathOf("buffer_bytes"), 1, uint64_t{64} << 30));
  }
  if (std::optional<YAML::Node> n = fields.Get("read_coalesce")) {
    // Every change that arrives within the window waits for it: beyond 100ms
    // this would be a delay, not batching.
    WALFEED_ASSIGN_OR_RETURN(d.read_coalesce, Duration(*n, fields.PathOf("read_coalesce"),
                                                       absl::ZeroDuration(), absl::Milliseconds(100)));
  }
  return ParseRetention(fields, d);
}

absl::Status Parser::ParseRetention(const Fields& fields, RetentionOptions& retention) const {
  if (std::optional<YAML::Node> n = fields.Get("retention_bytes")) {
    WALFEED_ASSIGN_OR_RETURN(
        retention.retention_bytes,
        Integer(*n, fields.PathOf("retention_bytes"), kRetentionBytesMin, kRetentionBytesMax));
  }
  if (std::optional<YAML::Node> n = fields.Get("laggard_policy")) {
    WALFEED_ASSIGN_OR_RETURN(std::string policy,
                             Scalar(*n, fields.PathOf("laggard_policy"), "hold or detach"));
    if (policy == "hold") {
      retention.laggard_policy = LaggardPolicy::kHold;
    } else if (policy == "detach") {
      retention.laggard_policy = LaggardPolicy::kDetach;
    } else {
      return Error(*n, fields.PathOf("laggard_policy"),
                   absl::StrCat("expected hold (the stream waits for its slowest consumer) or "
                                "detach (the slowest consumer is detached), found ",
                                Quote(policy)));
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<StreamConfig> Parser::ParseStream(const YAML::Node& node, const std::string& path,
                                                 ServerConfig& config) const {
  WALFEED_ASSIGN_OR_RETURN(Fields fields,
                           Map(node, path,
                               {"name", "conninfo", "conninfo_file", "conninfo_env", "slot",
                                "publications", "tables", "create_missing",
                                "publish_via_partition_root", "snapshot", "snapshot_connections",
                                "retention_bytes",
                                "laggard_policy"}));
  StreamConfig stream;
  std::optional<YAML::Node> name = fields.Get("name");
  if (!name) return Missing(fields, "name", "the stream's name as clients see it");
  WALFEED_ASSIGN_OR_RETURN(stream.name, Scalar(*name, fields.PathOf("name"), "a stream name"));

  WALFEED_ASSIGN_OR_RETURN(std::optional<std::string> conninfo, Conninfo(fields));
  if (!conninfo) {
    return Error(node, path,
                 "missing conninfo; set one of conninfo (a libpq connection string), "
                 "conninfo_file (a file holding one) or conninfo_env (an environment variable "
                 "holding one)");
  }
  stream.conninfo = std::move(*conninfo);

  std::optional<YAML::Node> slot = fields.Get("slot");
  if (!slot) return Missing(fields, "slot", "the logical replication slot to stream from");
  WALFEED_ASSIGN_OR_RETURN(stream.slot_name, Scalar(*slot, fields.PathOf("slot"), "a slot name"));

  std::optional<YAML::Node> publications = fields.Get("publications");
  if (!publications) {
    return Missing(fields, "publications", "a list of the publications to stream");
  }
  WALFEED_ASSIGN_OR_RETURN(stream.publication_names,
                           StringList(*publications, fields.PathOf("publications")));

  if (std::optional<YAML::Node> tables = fields.Get("tables")) {
    WALFEED_ASSIGN_OR_RETURN(stream.tables, StringList(*tables, fields.PathOf("tables")));
  }
  if (std::optional<YAML::Node> create = fields.Get("create_missing")) {
    WALFEED_ASSIGN_OR_RETURN(stream.create_missing, Bool(*create, fields.PathOf("create_missing")));
  }
  if (std::optional<YAML::Node> via_root = fields.Get("publish_via_partition_root")) {
    WALFEED_ASSIGN_OR_RETURN(stream.publish_via_partition_root,
                             Bool(*via_root, fields.PathOf("publish_via_partition_root")));
  }
  if (std::optional<YAML::Node> snapshot = fields.Get("snapshot")) {
    WALFEED_ASSIGN_OR_RETURN(std::string mode,
                             Scalar(*snapshot, fields.PathOf("snapshot"), "none or initial"));
    if (mode == "initial") {
      stream.initial_snapshot = true;
    } else if (mode != "none") {
      return Error(*snapshot, fields.PathOf("snapshot"),
                   absl::StrCat("expected none (the stream starts with the changes after the "
                                "slot is created) or initial (every published table's rows "
                                "first, when walfeed creates the slot), found ",
                                Quote(mode)));
    }
  }
  if (std::optional<YAML::Node> n = fields.Get("snapshot_connections")) {
    WALFEED_ASSIGN_OR_RETURN(uint64_t connections,
                             Integer(*n, fields.PathOf("snapshot_connections"), 1, 32));
    stream.snapshot_connections = static_cast<uint32_t>(connections);
  }
  if (fields.Get("retention_bytes") || fields.Get("laggard_policy")) {
    RetentionOptions own = config.defaults;
    WALFEED_RETURN_IF_ERROR(ParseRetention(fields, own));
    config.retention[stream.name] = own;
  }
  // The naming rules are StreamConfig's; its messages name the field (slot_name
  // is `slot` here, publication_names `publications`) but never the conninfo.
  if (absl::Status status = stream.Validate(); !status.ok()) {
    return Error(node, path, status.message());
  }
  return stream;
}

absl::Status Parser::ParseStreams(const YAML::Node& node, ServerConfig& config) const {
  if (!node.IsSequence() || node.size() == 0) {
    return Error(node, "streams",
                 absl::StrCat("expected a list of at least one stream (- name: ...), found ",
                              node.IsSequence() ? "an empty list" : KindOf(node)));
  }
  absl::flat_hash_map<std::string, size_t> first_index;
  // Two streams on one slot confirm each other's events away. Only the same
  // conninfo is caught here (no secret is shown): another spelling of the same
  // database is refused when the second stream starts (the checkpoint store
  // knows which stream each slot is bound to).
  absl::flat_hash_map<std::pair<std::string, std::string>, size_t> slot_index;
  for (size_t i = 0; i < node.size(); ++i) {
    const std::string path = Element("streams", i);
    WALFEED_ASSIGN_OR_RETURN(StreamConfig stream, ParseStream(node[i], path, config));
    auto [it, inserted] = first_index.emplace(stream.name, i);
    if (!inserted) {
      return Error(node[i], Child(path, "name"),
                   absl::StrCat("duplicate stream name ", Quote(stream.name), " (also ",
                                Element("streams", it->second), ".name)"));
    }
    auto [slot, new_slot] = slot_index.emplace(std::make_pair(stream.conninfo, stream.slot_name), i);
    if (!new_slot) {
      return Error(node[i], Child(path, "slot"),
                   absl::StrCat("slot ", Quote(stream.slot_name), " is also the slot of ",
                                Element("streams", slot->second),
                                " on the same database: each stream needs a slot of its own "
                                "(two streams reading one slot would confirm each other's "
                                "events away)"));
    }
    config.streams.push_back(std::move(stream));
  }
  return absl::OkStatus();
}

absl::StatusOr<ServerConfig> Parser::Parse(absl::string_view text) const {
  std::vector<YAML::Node> documents;
  try {
    documents = YAML::LoadAll(std::string(text));
  } catch (const YAML::Exception& e) {
    const std::string where =
        e.mark.is_null() ? source_
                         : absl::StrCat(source_, ":", e.mark.line + 1, ":", e.mark.column + 1);
    return absl::InvalidArgumentError(absl::StrCat(where, ": not valid YAML: ", FixedPart(e)));
  }
  if (documents.size() > 1) {
    return absl::InvalidArgumentError(absl::StrCat(
        source_, ": holds ", documents.size(), " YAML documents (--- separators); expected one"));
  }
  if (documents.empty() || documents[0].IsNull()) {
    return absl::InvalidArgumentError(
        absl::StrCat(source_, ": the config is empty; it needs at least listen and streams"));
  }
  const YAML::Node& root = documents[0];
  WALFEED_ASSIGN_OR_RETURN(Fields top, Map(root, "",
                                           {"listen", "plaintext", "tls", "auth", "checkpoint",
                                            "shutdown_timeout", "state_dir", "defaults",
                                            "streams", "metrics_listen", "log",
                                            "advertise_address"}));
  ServerConfig config;

  std::optional<YAML::Node> listen = top.Get("listen");
  if (!listen) return Missing(top, "listen", "host:port to serve on, e.g. 127.0.0.1:50051");
  WALFEED_ASSIGN_OR_RETURN(config.listen, Scalar(*listen, "listen", "host:port"));
  if (absl::StatusOr<HostPort> split = SplitHostPort(config.listen); !split.ok()) {
    return Error(*listen, "listen", split.status().message());
  }

  if (std::optional<YAML::Node> plaintext = top.Get("plaintext")) {
    WALFEED_ASSIGN_OR_RETURN(config.plaintext, Bool(*plaintext, "plaintext"));
  }
  std::optional<YAML::Node> tls = top.Get("tls");
  if (tls) WALFEED_RETURN_IF_ERROR(ParseTls(*tls, config));
  if (config.plaintext && tls) {
    return Error(*top.Get("plaintext"), "plaintext",
                 "true conflicts with the tls block; remove one of them");
  }
  if (!config.plaintext && !tls) {
    return Error(root, "tls",
                 "no tls block: configure tls (cert_file, key_file) or set plaintext: true to "
                 "serve unencrypted");
  }

  if (std::optional<YAML::Node> auth = top.Get("auth")) {
    WALFEED_RETURN_IF_ERROR(ParseAuth(*auth, config));
  }
  if (std::optional<YAML::Node> checkpoint = top.Get("checkpoint")) {
    WALFEED_RETURN_IF_ERROR(ParseCheckpoint(*checkpoint, config));
  }
  if (std::optional<YAML::Node> timeout = top.Get("shutdown_timeout")) {
    WALFEED_ASSIGN_OR_RETURN(
        config.shutdown_timeout,
        Duration(*timeout, "shutdown_timeout", absl::Milliseconds(1), absl::Hours(1)));
  }
  if (std::optional<YAML::Node> advertise = top.Get("advertise_address")) {
    WALFEED_ASSIGN_OR_RETURN(config.advertise_address,
                             Scalar(*advertise, "advertise_address", "host:port"));
    if (absl::Status valid = CheckAdvertiseAddress(config.advertise_address); !valid.ok()) {
      return Error(*advertise, "advertise_address", valid.message());
    }
  }
  if (std::optional<YAML::Node> metrics = top.Get("metrics_listen")) {
    WALFEED_ASSIGN_OR_RETURN(config.metrics_listen,
                             Scalar(*metrics, "metrics_listen", "host:port"));
    if (absl::Status valid = CheckMetricsListen(config.metrics_listen); !valid.ok()) {
      return Error(*metrics, "metrics_listen", valid.message());
    }
  }
  if (std::optional<YAML::Node> log = top.Get("log")) {
    WALFEED_ASSIGN_OR_RETURN(Fields fields, Map(*log, "log", {"format", "level"}));
    if (std::optional<YAML::Node> n = fields.Get("format")) {
      WALFEED_ASSIGN_OR_RETURN(const std::string text,
                               Scalar(*n, fields.PathOf("format"), "text or json"));
      absl::StatusOr<LogFormat> format = ParseLogFormat(text);
      if (!format.ok()) return Error(*n, fields.PathOf("format"), format.status().message());
      config.log.format = *format;
    }
    if (std::optional<YAML::Node> n = fields.Get("level")) {
      WALFEED_ASSIGN_OR_RETURN(config.log.level,
                               Scalar(*n, fields.PathOf("level"), "a log level"));
      if (absl::Status valid = CheckLogLevel(config.log.level); !valid.ok()) {
        return Error(*n, fields.PathOf("level"), valid.message());
      }
    }
  }
  if (std::optional<YAML::Node> state_dir = top.Get("state_dir")) {
    WALFEED_ASSIGN_OR_RETURN(config.state_dir, FilePath(*state_dir, "state_dir"));
  }
  // Before the streams: a stream's own retention settings start from these.
  if (std::optional<YAML::Node> defaults = top.Get("defaults")) {
    WALFEED_RETURN_IF_ERROR(ParseDefaults(*defaults, config));
  }
  std::optional<YAML::Node> streams = top.Get("streams");
  if (!streams) return Missing(top, "streams", "a list of at least one stream");
  WALFEED_RETURN_IF_ERROR(ParseStreams(*streams, config));
  return config;
}

}  // namespace

absl::StatusOr<std::string> ReadSmallFile(const std::string& path, size_t max_bytes) {
  // "e": close-on-exec, so a child process never inherits a secret's descriptor.
  std::unique_ptr<std::FILE, int (*)(std::FILE*)> file(std::fopen(path.c_str(), "rbe"),
                                                       &std::fclose);
  if (file == nullptr) {
    return absl::ErrnoToStatus(errno, absl::StrCat("cannot open ", QuotePath(path)));
  }
  std::string contents;
  char buffer[8192];
  while (true) {
    const size_t n = std::fread(buffer, 1, sizeof(buffer), file.get());
    if (n == 0) break;
    if (contents.size() + n > max_bytes) {
      return absl::InvalidArgumentError(
          absl::StrCat(QuotePath(path), " is larger than ", max_bytes, " bytes"));
    }
    contents.append(buffer, n);
  }
  if (std::ferror(file.get())) {
    return absl::ErrnoToStatus(errno, absl::StrCat("cannot read ", QuotePath(path)));
  }
  return contents;
}

absl::StatusOr<ServerConfig> LoadConfig(const std::string& path) {
  WALFEED_ASSIGN_OR_RETURN(std::string text, ReadSmallFile(path, kMaxConfigBytes));
  return ParseConfig(text, path);
}

absl::StatusOr<ServerConfig> ParseConfig(absl::string_view yaml_text,
                                         absl::string_view source_name) {
  Parser parser(source_name);
  try {
    return parser.Parse(yaml_text);
  } catch (const YAML::Exception& e) {
    // The walk checks node types before every access, so this is a bug in it;
    // still a config error for the caller rather than a crash at startup.
    return absl::InternalError(
        absl::StrCat(source_name, ": reading the config failed (", FixedPart(e), ")"));
  }
}

absl::StatusOr<TlsFiles> ReadTlsFiles(const TlsConfig& tls) {
  auto read_pem = [](absl::string_view key,
                     const std::string& path) -> absl::StatusOr<std::string> {
    absl::StatusOr<std::string> pem = ReadSmallFile(path, kMaxPemFileBytes);
    if (!pem.ok()) return WithPrefix(pem.status(), absl::StrCat(key, ": "));
    if (!absl::StrContains(*pem, "-----BEGIN ")) {
      return absl::InvalidArgumentError(absl::StrCat(
          key, ": ", QuotePath(path), " is not a PEM file (it has no \"-----BEGIN \" line)"));
    }
    return pem;
  };
  TlsFiles files;
  WALFEED_ASSIGN_OR_RETURN(files.cert_chain, read_pem("tls.cert_file", tls.cert_file));
  WALFEED_ASSIGN_OR_RETURN(files.private_key, read_pem("tls.key_file", tls.key_file));
  if (tls.RequiresClientCertificates()) {
    WALFEED_ASSIGN_OR_RETURN(files.client_ca, read_pem("tls.client_ca_file", tls.client_ca_file));
  }
  return files;
}

absl::StatusOr<LogFormat> ParseLogFormat(absl::string_view text) {
  if (text == "text") return LogFormat::kText;
  if (text == "json") return LogFormat::kJson;
  return absl::InvalidArgumentError(absl::StrCat(
      Quote(text), " is not a log format: text (one line per entry) or json (one JSON object "
                   "per line)"));
}

absl::Status CheckLogLevel(absl::string_view level) {
  for (absl::string_view known : {"trace", "debug", "info", "warn", "error"}) {
    if (level == known) return absl::OkStatus();
  }
  return absl::InvalidArgumentError(
      absl::StrCat(Quote(level), " is not a log level: trace, debug, info, warn or error"));
}

absl::Status CheckAdvertiseAddress(absl::string_view address) {
  return SplitHostPort(address).status();
}

absl::Status CheckListen(absl::string_view listen) { return SplitHostPort(listen).status(); }

absl::Status CheckMetricsListen(absl::string_view listen) {
  WALFEED_ASSIGN_OR_RETURN(const HostPort split, SplitHostPort(listen));
  in_addr v4;
  if (split.ipv6 || split.host == "localhost" || inet_pton(AF_INET, split.host.c_str(), &v4) == 1) {
    return absl::OkStatus();
  }
  return absl::InvalidArgumentError(absl::StrCat(
      Quote(listen), ": the metrics endpoint needs an IP address, not a name: e.g. "
                     "127.0.0.1:9464 (local only) or 0.0.0.0:9464 (every IPv4 interface)"));
}

bool ListensBeyondLoopback(const std::string& listen) {
  absl::StatusOr<HostPort> split = SplitHostPort(listen);
  if (!split.ok()) return true;  // Unknown: assume the worst for a warning.
  const std::string host = absl::AsciiStrToLower(split->host);
  if (host == "localhost" || host == "localhost.") return false;
  in_addr v4;
  if (!split->ipv6 && inet_pton(AF_INET, host.c_str(), &v4) == 1) {
    return (ntohl(v4.s_addr) >> 24) != 127;
  }
  in6_addr v6;
  if (split->ipv6 && inet_pton(AF_INET6, host.c_str(), &v6) == 1) {
    if (IN6_IS_ADDR_LOOPBACK(&v6)) return false;
    if (IN6_IS_ADDR_V4MAPPED(&v6)) return v6.s6_addr[12] != 127;
  }
  return true;
}

}  // namespace walfeed::server
