// The tokens-file parser and the per-call token check (see auth.h).
#include "server/auth.h"

#include <utility>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/ascii.h"
#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "replication/status_macros.h"
#include "server/config.h"

namespace walfeed::server {
namespace {

// Far above any real tokens file; stops a wrong path from being read whole.
constexpr size_t kMaxTokensFileBytes = size_t{1} << 20;

constexpr absl::string_view kHowToPass =
    "send the gRPC metadata \"authorization: Bearer <token>\" with a token from the "
    "server's tokens file";

// A client-supplied stream name quoted for an error message: escaped and cut
// short, since it comes straight from the request.
std::string Quote(absl::string_view text) {
  constexpr size_t kMaxShown = 80;
  const bool cut = text.size() > kMaxShown;
  return absl::StrCat("\"", absl::CHexEscape(text.substr(0, kMaxShown)), cut ? "\"..." : "\"");
}

// RFC 6750 b64token: 1*( ALPHA / DIGIT / "-" / "." / "_" / "~" / "+" / "/" ) *"=".
bool IsB64Token(absl::string_view token) {
  size_t i = 0;
  while (i < token.size()) {
    const char c = token[i];
    if (!absl::ascii_isalnum(c) && c != '-' && c != '.' && c != '_' && c != '~' && c != '+' &&
        c != '/') {
      break;
    }
    ++i;
  }
  if (i == 0) return false;
  while (i < token.size() && token[i] == '=') ++i;
  return i == token.size();
}

}  // namespace

absl::string_view RightName(Right right) {
  switch (right) {
    case Right::kSubscribe:
      return "subscribe";
    case Right::kStatus:
      return "status";
    case Right::kAdmin:
      return "admin";
  }
  return "unknown";
}

bool TokenGrant::Has(Right right) const {
  switch (right) {
    case Right::kSubscribe:
      return subscribe_;
    case Right::kStatus:
      return status_;
    case Right::kAdmin:
      return admin_;
  }
  return false;
}

bool TokenGrant::Allows(Right right, absl::string_view stream) const {
  return Has(right) && (all_streams_ || streams_.contains(stream));
}

bool TokenGrant::AllowsSomeStream(Right right) const {
  return Has(right) && (all_streams_ || !streams_.empty());
}

absl::StatusOr<TokenAuthorizer> TokenAuthorizer::Load(const std::string& path) {
  absl::StatusOr<std::string> text = ReadSmallFile(path, kMaxTokensFileBytes);
  if (!text.ok()) {
    return absl::Status(text.status().code(),
                        absl::StrCat("tokens file: ", text.status().message()));
  }
  return Parse(*text, path);
}

absl::StatusOr<TokenAuthorizer> TokenAuthorizer::Parse(absl::string_view text,
                                                       absl::string_view source_name) {
  TokenAuthorizer authorizer;
  authorizer.source_ = source_name.empty() ? "<tokens>" : std::string(source_name);
  // Token -> line, only while parsing, to name both lines of a repeated token.
  absl::flat_hash_map<std::string, int> first_line;
  int line_number = 0;
  for (absl::string_view line : absl::StrSplit(text, '\n')) {
    ++line_number;
    // Nothing of the line is ever quoted back (see auth.h), only its number.
    auto error = [&](absl::string_view message) {
      return absl::InvalidArgumentError(
          absl::StrCat(authorizer.source_, ":", line_number, ": ", message));
    };
    // '#' cannot occur in a token or a stream name, so it always starts a comment.
    line = line.substr(0, line.find('#'));
    const std::vector<absl::string_view> fields =
        absl::StrSplit(line, absl::ByAnyChar(" \t\r\f\v"), absl::SkipEmpty());
    if (fields.empty()) continue;
    if (fields.size() != 3) {
      return error(
          absl::StrCat("expected 3 fields \"<token> <rights> <streams>\", found ", fields.size()));
    }

    const absl::string_view token = fields[0];
    if (token.size() < kMinTokenLength) {
      return error(absl::StrCat("the token (field 1) is shorter than ", kMinTokenLength,
                                " characters; generate one with `openssl rand -base64 32`"));
    }
    if (token.size() > kMaxTokenLength) {
      return error(
          absl::StrCat("the token (field 1) is longer than ", kMaxTokenLength, " characters"));
    }
    if (!IsB64Token(token)) {
      return error(
          "the token (field 1) may hold only A-Z a-z 0-9 - . _ ~ + / and trailing '=' padding");
    }
    auto [previous, inserted] = first_line.emplace(std::string(token), line_number);
    if (!inserted) {
      return error(absl::StrCat("the token is already defined on line ", previous->second,
                                "; each token appears once"));
    }

    Entry entry;
    entry.length = token.size();
    for (size_t i = 0; i < token.size(); ++i) {
      entry.padded[i] = static_cast<unsigned char>(token[i]);
    }
    TokenGrant& grant = entry.grant;
    grant.line_ = line_number;

    int index = 0;
    for (absl::string_view right : absl::StrSplit(fields[1], ',')) {
      ++index;
      if (right == "subscribe") {
        grant.subscribe_ = true;
      } else if (right == "status") {
        grant.status_ = true;
      } else if (right == "admin") {
        grant.admin_ = true;
      } else {
        return error(absl::StrCat("right ", index,
                                  " of the rights (field 2) is not a right; rights are a "
                                  "comma-separated list of subscribe, status and admin"));
      }
    }

    index = 0;
    for (absl::string_view stream : absl::StrSplit(fields[2], ',')) {
      ++index;
      if (stream.empty()) {
        return error(absl::StrCat("stream ", index,
                                  " of the streams (field 3) is empty; streams are a "
                                  "comma-separated list of stream names or *"));
      }
      if (stream == "*") {
        grant.all_streams_ = true;
      } else {
        grant.streams_.emplace(stream);
      }
      entry.named_streams.emplace_back(stream);
    }
    authorizer.entries_.push_back(std::move(entry));
  }
  if (authorizer.entries_.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat(authorizer.source_,
                     ": no tokens, so every call would be refused; add lines \"<token> <rights> "
                     "<streams>\", or configure no tokens file to allow every call"));
  }
  return authorizer;
}

absl::StatusOr<const TokenGrant*> TokenAuthorizer::Authenticate(
    absl::string_view authorization) const {
  const absl::string_view value = absl::StripAsciiWhitespace(authorization);
  if (value.empty()) {
    return absl::UnauthenticatedError(absl::StrCat("missing credentials: ", kHowToPass));
  }
  const size_t space = value.find_first_of(" \t");
  absl::string_view token;
  if (space != absl::string_view::npos &&
      absl::EqualsIgnoreCase(value.substr(0, space), "Bearer")) {
    token = absl::StripLeadingAsciiWhitespace(value.substr(space + 1));
  }
  if (token.empty()) {
    return absl::UnauthenticatedError(absl::StrCat(
        "the authorization metadata is not of the form \"Bearer <token>\": ", kHowToPass));
  }
  auto unknown = [] {
    return absl::UnauthenticatedError(
        absl::StrCat("the bearer token is not valid for this server: ", kHowToPass));
  };
  // No configured token is longer, so this rejects without comparing; it
  // reveals only the documented length limit.
  if (token.size() > kMaxTokenLength) return unknown();

  std::array<unsigned char, kMaxTokenLength> presented{};
  for (size_t i = 0; i < token.size(); ++i) presented[i] = static_cast<unsigned char>(token[i]);
  // Every entry is compared in full, with no early exit on the first differing
  // byte or on a match, so the time taken depends on the number of tokens only.
  // Zero padding cannot make a prefix match: the lengths are compared too.
  const TokenGrant* match = nullptr;
  for (const Entry& entry : entries_) {
    unsigned int diff = 0;
    for (size_t i = 0; i < kMaxTokenLength; ++i) diff |= entry.padded[i] ^ presented[i];
    const size_t length_diff = entry.length ^ token.size();
    match = (diff == 0 && length_diff == 0) ? &entry.grant : match;
  }
  if (match == nullptr) return unknown();
  return match;
}

absl::Status TokenAuthorizer::Authorize(absl::string_view authorization, Right right,
                                        absl::string_view stream) const {
  WALFEED_ASSIGN_OR_RETURN(const TokenGrant* grant, Authenticate(authorization));
  const absl::string_view covers =
      right == Right::kSubscribe ? "needed for Subscribe and Ack"
      : right == Right::kStatus  ? "needed for GetStatus"
                                 : "needed for RemoveConsumer, ResetConsumer and backfills";
  if (stream.empty()) {
    if (grant->AllowsSomeStream(right)) return absl::OkStatus();
    return absl::PermissionDeniedError(absl::StrCat(
        "this token does not grant \"", RightName(right), "\" (", covers, ") on any stream"));
  }
  if (grant->Allows(right, stream)) return absl::OkStatus();
  return absl::PermissionDeniedError(absl::StrCat("this token does not grant \"", RightName(right),
                                                  "\" (", covers, ") on stream ", Quote(stream)));
}

absl::Status TokenAuthorizer::CheckStreamsConfigured(
    absl::Span<const std::string> configured_streams) const {
  const absl::flat_hash_set<absl::string_view> configured(configured_streams.begin(),
                                                          configured_streams.end());
  for (const Entry& entry : entries_) {
    for (size_t i = 0; i < entry.named_streams.size(); ++i) {
      const std::string& stream = entry.named_streams[i];
      if (stream == "*" || configured.contains(stream)) continue;
      // The name is not quoted (see auth.h); the line and position find it.
      return absl::InvalidArgumentError(
          absl::StrCat(source_, ":", entry.grant.line(), ": stream ", i + 1,
                       " of the streams (field 3) is not a configured stream; configured: ",
                       absl::StrJoin(configured_streams, ", ")));
    }
  }
  return absl::OkStatus();
}

}  // namespace walfeed::server
