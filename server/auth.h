// Bearer-token authorization for walfeed-server: the tokens file format, its
// parser, and the check each RPC makes (TokenAuthorizer). Plain Abseil, no gRPC:
// the service reads the `authorization` metadata, calls Authorize, and maps the
// absl status codes onto grpc::Status one to one.
//
// Tokens file (auth.tokens_file in the config; deploy/tokens.example):
//
//   # comment; blank lines are ignored, and so is everything after a '#'
//   <token> <right>[,<right>...] <stream>[,<stream>...]
//
//   - fields are separated by spaces or tabs; exactly three per line;
//   - token: 16 to 256 characters of A-Z a-z 0-9 - . _ ~ + / followed by
//     optional '=' padding (RFC 6750's b64token, so it fits an HTTP header
//     as is); generate one with `openssl rand -base64 32`. Each token appears
//     once in the file;
//   - right: `subscribe` (Subscribe and Ack), `status` (GetStatus) or `admin`
//     (RemoveConsumer, ResetConsumer);
//   - stream: a configured stream's name, or `*` for every stream.
//
//   e.g.  EXAMPLE-ONLY-not-a-real-token-1  subscribe,status  orders,inventory
//
// Clients send the gRPC metadata `authorization: Bearer <token>`.
//
// The file's contents never appear in an error message, whatever the line
// holds: a malformed line is reported by file, line number and field, because
// a line with its fields in the wrong order could put the token where a right
// or a stream name was expected.
//
// Presented tokens are compared with every configured token in time that does
// not depend on the tokens' contents, so response timing tells a caller nothing
// about how close a guess was.
//
// A TokenAuthorizer is immutable after Load/Parse: its const methods may be
// called from any number of threads. To reload the file, build a new one and
// swap it in (e.g. behind a std::shared_ptr).
#ifndef WALFEED_SERVER_AUTH_H_
#define WALFEED_SERVER_AUTH_H_

#include <array>
#include <cstddef>
#include <string>
#include <vector>

#include "absl/container/flat_hash_set.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"

namespace walfeed::server {

// What a token may do. Each right covers whole RPCs.
enum class Right {
  kSubscribe,  // Subscribe and Ack.
  kStatus,     // GetStatus.
  kAdmin,      // RemoveConsumer and ResetConsumer.
};

// "subscribe", "status" or "admin", as written in the tokens file.
absl::string_view RightName(Right right);

// Token length bounds, in characters.
inline constexpr size_t kMinTokenLength = 16;
inline constexpr size_t kMaxTokenLength = 256;

// What one token grants.
class TokenGrant {
 public:
  // True when the token has `right` on `stream` (by name or through `*`).
  bool Allows(Right right, absl::string_view stream) const;
  // True when the token has `right` on at least one stream.
  bool AllowsSomeStream(Right right) const;
  // The tokens-file line that defines the token: names the caller in server
  // logs without the secret.
  int line() const { return line_; }

 private:
  friend class TokenAuthorizer;
  int line_ = 0;
  bool Has(Right right) const;

  bool subscribe_ = false;
  bool status_ = false;
  bool admin_ = false;
  bool all_streams_ = false;
  absl::flat_hash_set<std::string> streams_;
};

class TokenAuthorizer {
 public:
  // Reads and parses the tokens file at `path` (Parse with source_name = path).
  static absl::StatusOr<TokenAuthorizer> Load(const std::string& path);
  // Parses tokens-file text. InvalidArgument "<source_name>:<line>: ..." for a
  // malformed line, a repeated token, or a file without any token (which would
  // refuse every call; to allow every call, configure no tokens file instead).
  static absl::StatusOr<TokenAuthorizer> Parse(absl::string_view text,
                                               absl::string_view source_name);

  // The grant of the token in `authorization` (the value of the `authorization`
  // metadata, "Bearer <token>"; the scheme is case-insensitive). Unauthenticated
  // when it is empty, not of that form, or names no configured token; the
  // message says how to pass a token and never repeats the one presented. The
  // pointer stays valid as long as this authorizer.
  absl::StatusOr<const TokenGrant*> Authenticate(absl::string_view authorization) const;

  // OK when the token in `authorization` has `right` on `stream`. An empty
  // `stream` means "some stream": GetStatus for every stream passes when the
  // token may see at least one, and the service then keeps only the streams for
  // which Authenticate(...)->Allows(Right::kStatus, name) holds.
  // Unauthenticated as Authenticate; PermissionDenied, naming the right and the
  // stream, for a valid token without the right.
  absl::Status Authorize(absl::string_view authorization, Right right,
                         absl::string_view stream) const;

  // OK when every stream the file names (other than `*`) is one of
  // `configured_streams`; otherwise InvalidArgument naming the file, the line and
  // the configured streams. For startup, so a misspelt stream name is an error
  // rather than a token that is quietly refused.
  absl::Status CheckStreamsConfigured(absl::Span<const std::string> configured_streams) const;

  // The number of tokens.
  size_t size() const { return entries_.size(); }

 private:
  struct Entry {
    // The token, zero-padded to the longest allowed, so every comparison reads
    // the same number of bytes.
    std::array<unsigned char, kMaxTokenLength> padded{};
    size_t length = 0;
    TokenGrant grant;
    // Streams named on the line, in order (for CheckStreamsConfigured).
    std::vector<std::string> named_streams;
  };

  TokenAuthorizer() = default;

  std::string source_;
  std::vector<Entry> entries_;
};

}  // namespace walfeed::server

#endif  // WALFEED_SERVER_AUTH_H_
