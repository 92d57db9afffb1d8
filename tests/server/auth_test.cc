// TokenAuthorizer: the tokens file format (and its errors, which must never
// contain a token), Authenticate/Authorize outcomes, filtering for GetStatus, the
// configured-streams check and the example file.
#include "server/auth.h"

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/testing/status_matchers.h"

namespace walfeed::server {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;
using ::testing::Not;
using ::testing::StartsWith;
using ::walfeed::testing::IsOk;
using ::walfeed::testing::StatusIs;

constexpr absl::StatusCode kInvalid = absl::StatusCode::kInvalidArgument;
constexpr absl::StatusCode kUnauthenticated = absl::StatusCode::kUnauthenticated;
constexpr absl::StatusCode kDenied = absl::StatusCode::kPermissionDenied;

constexpr absl::string_view kOrdersToken = "orders-token-0123456789";
constexpr absl::string_view kMonitorToken = "monitor-token-abcdefghij";
constexpr absl::string_view kBothToken = "Zm9vYmFyYmF6cXV4cXV1eA==";

constexpr absl::string_view kTokens =
    "# subscribers\n"
    "orders-token-0123456789 subscribe orders\n"
    "\n"
    "   \t  # indented comment\n"
    "monitor-token-abcdefghij\tstatus\t*   # trailing comment\n"
    "Zm9vYmFyYmF6cXV4cXV1eA== subscribe,status orders,inventory\r\n";

std::string Bearer(absl::string_view token) { return absl::StrCat("Bearer ", token); }

TokenAuthorizer MustParse(absl::string_view text) {
  absl::StatusOr<TokenAuthorizer> authorizer = TokenAuthorizer::Parse(text, "tokens");
  EXPECT_THAT(authorizer, IsOk());
  return *std::move(authorizer);
}

TEST(AuthTest, ParsesTokensCommentsAndBlankLines) {
  const TokenAuthorizer authorizer = MustParse(kTokens);
  EXPECT_EQ(authorizer.size(), 3u);
  absl::StatusOr<const TokenGrant*> grant = authorizer.Authenticate(Bearer(kMonitorToken));
  ASSERT_THAT(grant, IsOk());
  EXPECT_EQ((*grant)->line(), 5);
}

TEST(AuthTest, AuthorizesRightsPerStream) {
  const TokenAuthorizer authorizer = MustParse(kTokens);
  EXPECT_THAT(authorizer.Authorize(Bearer(kOrdersToken), Right::kSubscribe, "orders"), IsOk());
  EXPECT_THAT(authorizer.Authorize(Bearer(kOrdersToken), Right::kSubscribe, "inventory"),
              StatusIs(kDenied, HasSubstr("this token does not grant \"subscribe\" (needed for "
                                          "Subscribe and Ack) on stream \"inventory\"")));
  EXPECT_THAT(authorizer.Authorize(Bearer(kOrdersToken), Right::kStatus, "orders"),
              StatusIs(kDenied, HasSubstr("does not grant \"status\" (needed for GetStatus) on "
                                          "stream \"orders\"")));

  EXPECT_THAT(authorizer.Authorize(Bearer(kOrdersToken), Right::kAdmin, "orders"),
              StatusIs(kDenied, HasSubstr("does not grant \"admin\" (needed for RemoveConsumer, "
                                          "ResetConsumer and backfills) on stream \"orders\"")));

  EXPECT_THAT(authorizer.Authorize(Bearer(kMonitorToken), Right::kStatus, "anything"), IsOk());
  EXPECT_THAT(authorizer.Authorize(Bearer(kMonitorToken), Right::kSubscribe, "orders"),
              StatusIs(kDenied, HasSubstr("\"subscribe\"")));

  for (absl::string_view stream : {"orders", "inventory"}) {
    for (Right right : {Right::kSubscribe, Right::kStatus}) {
      EXPECT_THAT(authorizer.Authorize(Bearer(kBothToken), right, stream), IsOk());
    }
  }
  EXPECT_THAT(authorizer.Authorize(Bearer(kBothToken), Right::kStatus, "payments"),
              StatusIs(kDenied));
}

TEST(AuthTest, EmptyStreamMeansSomeStreamAndGrantsFilter) {
  const TokenAuthorizer authorizer = MustParse(kTokens);
  EXPECT_THAT(authorizer.Authorize(Bearer(kOrdersToken), Right::kStatus, ""),
              StatusIs(kDenied, HasSubstr("does not grant \"status\" (needed for GetStatus) on "
                                          "any stream")));
  EXPECT_THAT(authorizer.Authorize(Bearer(kBothToken), Right::kStatus, ""), IsOk());
  EXPECT_THAT(authorizer.Authorize(Bearer(kMonitorToken), Right::kStatus, ""), IsOk());

  // GetStatus for every stream: keep what the grant allows.
  absl::StatusOr<const TokenGrant*> both = authorizer.Authenticate(Bearer(kBothToken));
  ASSERT_THAT(both, IsOk());
  std::vector<std::string> visible;
  for (const char* stream : {"inventory", "orders", "payments"}) {
    if ((*both)->Allows(Right::kStatus, stream)) visible.push_back(stream);
  }
  EXPECT_THAT(visible, ::testing::ElementsAre("inventory", "orders"));
  absl::StatusOr<const TokenGrant*> monitor = authorizer.Authenticate(Bearer(kMonitorToken));
  ASSERT_THAT(monitor, IsOk());
  EXPECT_TRUE((*monitor)->Allows(Right::kStatus, "payments"));
  EXPECT_TRUE((*monitor)->AllowsSomeStream(Right::kStatus));
  EXPECT_FALSE((*monitor)->AllowsSomeStream(Right::kSubscribe));
}

TEST(AuthTest, UnauthenticatedSaysHowToPassAToken) {
  const TokenAuthorizer authorizer = MustParse(kTokens);
  const std::string how = "send the gRPC metadata \"authorization: Bearer <token>\"";
  EXPECT_THAT(authorizer.Authorize("", Right::kSubscribe, "orders"),
              StatusIs(kUnauthenticated, AllOf(HasSubstr("missing credentials"), HasSubstr(how))));
  EXPECT_THAT(authorizer.Authorize("   ", Right::kSubscribe, "orders"),
              StatusIs(kUnauthenticated, HasSubstr("missing credentials")));
  for (std::string bad :
       {std::string(kOrdersToken), absl::StrCat("Basic ", kOrdersToken), std::string("Bearer"),
        std::string("Bearer   "), absl::StrCat("Bearer:", kOrdersToken)}) {
    SCOPED_TRACE(bad);
    absl::Status status = authorizer.Authorize(bad, Right::kSubscribe, "orders");
    EXPECT_THAT(status,
                StatusIs(kUnauthenticated,
                         AllOf(HasSubstr("not of the form \"Bearer <token>\""), HasSubstr(how))));
    EXPECT_THAT(std::string(status.message()), Not(HasSubstr(std::string(kOrdersToken))));
  }
  for (std::string unknown :
       {std::string("not-a-configured-token-123"), std::string(kOrdersToken.substr(1)),
        absl::StrCat(kOrdersToken, "x"), std::string(kOrdersToken.substr(0, 16)),
        std::string(kMaxTokenLength + 1, 'a'), std::string("short")}) {
    SCOPED_TRACE(unknown);
    absl::Status status = authorizer.Authorize(Bearer(unknown), Right::kSubscribe, "orders");
    EXPECT_THAT(status, StatusIs(kUnauthenticated, AllOf(HasSubstr("the bearer token is not valid"),
                                                         HasSubstr(how))));
    EXPECT_THAT(std::string(status.message()), Not(HasSubstr(unknown)));
  }
}

TEST(AuthTest, BearerSchemeIsCaseInsensitiveAndWhitespaceTolerant) {
  const TokenAuthorizer authorizer = MustParse(kTokens);
  for (std::string header :
       {absl::StrCat("bearer ", kOrdersToken), absl::StrCat("BEARER ", kOrdersToken),
        absl::StrCat("  Bearer \t ", kOrdersToken, "  ")}) {
    SCOPED_TRACE(header);
    EXPECT_THAT(authorizer.Authorize(header, Right::kSubscribe, "orders"), IsOk());
  }
}

TEST(AuthTest, DeniedMessagesEscapeClientStreamNames) {
  const TokenAuthorizer authorizer = MustParse(kTokens);
  absl::Status status =
      authorizer.Authorize(Bearer(kOrdersToken), Right::kSubscribe, std::string("a\nb\0c", 5));
  EXPECT_THAT(status, StatusIs(kDenied, HasSubstr("on stream \"a\\nb\\x00")));
  status = authorizer.Authorize(Bearer(kOrdersToken), Right::kSubscribe, std::string(1000, 's'));
  EXPECT_THAT(status, StatusIs(kDenied, HasSubstr("\"...")));
  EXPECT_LT(status.message().size(), 300u);
}

TEST(AuthTest, MalformedLinesNameTheLineButNeverTheToken) {
  constexpr absl::string_view kSecret = "SECRET-token-value-0123456789";
  const struct {
    std::string line;
    const char* why;
  } kCases[] = {
      {absl::StrCat(kSecret, " subscribe"),
       "expected 3 fields \"<token> <rights> <streams>\", "
       "found 2"},
      {absl::StrCat(kSecret, " subscribe orders extra"), "found 4"},
      {absl::StrCat(kSecret), "found 1"},
      {"SECRET-short subscribe orders", "the token (field 1) is shorter than 16 characters"},
      {absl::StrCat(std::string(kMaxTokenLength + 1, 'S'), " subscribe orders"),
       "longer than 256 characters"},
      {absl::StrCat(kSecret, "\"quote subscribe orders"), "may hold only A-Z a-z 0-9"},
      {absl::StrCat(kSecret, "=x subscribe orders"), "may hold only"},
      {absl::StrCat(kSecret, " subscribe,root orders"),
       "right 2 of the rights (field 2) is not a right"},
      {absl::StrCat(kSecret, " subscribe, orders"), "right 2 of the rights (field 2)"},
      // Fields swapped: the token lands where a right belongs, and is still not shown.
      {absl::StrCat("orders-and-more-x subscribe ", kSecret), "not a configured stream"},
      {absl::StrCat("subscribe-and-more ", kSecret, " orders"), "right 1 of the rights"},
      {absl::StrCat(kSecret, " status orders,,inventory"),
       "stream 2 of the streams (field 3) is empty"},
      {absl::StrCat(kSecret, " status orders,"), "stream 2 of the streams (field 3) is empty"},
  };
  for (const auto& c : kCases) {
    SCOPED_TRACE(c.why);
    const std::string text =
        absl::StrCat("# header\n\nvalid-token-0000000000 status *\n", c.line, "\n");
    absl::StatusOr<TokenAuthorizer> parsed = TokenAuthorizer::Parse(text, "tokens.txt");
    absl::Status status = parsed.status();
    if (parsed.ok()) {
      // The swapped-fields line parses; the configured-streams check catches it.
      status = parsed->CheckStreamsConfigured({"orders"});
    }
    EXPECT_THAT(status, StatusIs(kInvalid, AllOf(StartsWith("tokens.txt:4: "), HasSubstr(c.why))));
    EXPECT_THAT(std::string(status.message()), Not(HasSubstr(std::string(kSecret))));
    EXPECT_THAT(std::string(status.message()), Not(HasSubstr("SECRET")));
  }
}

TEST(AuthTest, RepeatedTokenNamesBothLines) {
  const std::string text =
      "dup-token-0123456789ab subscribe orders\n"
      "other-token-0123456789 status *\n"
      "dup-token-0123456789ab status inventory\n";
  absl::StatusOr<TokenAuthorizer> parsed = TokenAuthorizer::Parse(text, "t");
  EXPECT_THAT(parsed,
              StatusIs(kInvalid, AllOf(StartsWith("t:3: "), HasSubstr("already defined on line 1"),
                                       Not(HasSubstr("dup-token")))));
}

TEST(AuthTest, AFileWithoutTokensIsAnError) {
  EXPECT_THAT(TokenAuthorizer::Parse("# nothing\n\n", "t"),
              StatusIs(kInvalid, AllOf(StartsWith("t: no tokens"),
                                       HasSubstr("configure no tokens file to allow every call"))));
  EXPECT_THAT(TokenAuthorizer::Parse("", "t"), StatusIs(kInvalid, HasSubstr("no tokens")));
}

TEST(AuthTest, CheckStreamsConfigured) {
  const TokenAuthorizer authorizer = MustParse(kTokens);
  EXPECT_THAT(authorizer.CheckStreamsConfigured({"orders", "inventory"}), IsOk());
  EXPECT_THAT(authorizer.CheckStreamsConfigured({"orders", "payments"}),
              StatusIs(kInvalid, AllOf(StartsWith("tokens:6: "),
                                       HasSubstr("stream 2 of the streams (field 3) is not a "
                                                 "configured stream; configured: orders, "
                                                 "payments"))));
}

TEST(AuthTest, LoadReadsTheFile) {
  const std::string dir = absl::StrCat(::testing::TempDir(), "/auth_test_", getpid());
  std::filesystem::create_directories(dir);
  const std::string path = dir + "/tokens";
  {
    std::ofstream out(path);
    out << kTokens;
  }
  absl::StatusOr<TokenAuthorizer> loaded = TokenAuthorizer::Load(path);
  ASSERT_THAT(loaded, IsOk());
  EXPECT_EQ(loaded->size(), 3u);
  EXPECT_THAT(TokenAuthorizer::Load(dir + "/missing"),
              StatusIs(absl::StatusCode::kNotFound,
                       AllOf(StartsWith("tokens file: cannot open"), HasSubstr("missing"))));
  std::filesystem::remove_all(dir);
}

TEST(AuthTest, ExampleFileParses) {
  absl::StatusOr<TokenAuthorizer> example = TokenAuthorizer::Load(WALFEED_EXAMPLE_TOKENS);
  ASSERT_THAT(example, IsOk());
  EXPECT_EQ(example->size(), 4u);
  // The streams of deploy/walfeed.example.yaml.
  EXPECT_THAT(example->CheckStreamsConfigured({"orders", "inventory"}), IsOk());
  EXPECT_THAT(example->Authorize("Bearer EXAMPLE-ONLY-orders-consumer-0000000001",
                                 Right::kSubscribe, "orders"),
              IsOk());
  EXPECT_THAT(example->Authorize("Bearer EXAMPLE-ONLY-monitoring-00000000000003", Right::kSubscribe,
                                 "orders"),
              StatusIs(kDenied));
  EXPECT_THAT(example->Authorize("Bearer EXAMPLE-ONLY-operator-0000000000000004", Right::kAdmin,
                                 "inventory"),
              IsOk());
}

// admin (RemoveConsumer) is a right of its own: subscribe and status do not
// imply it, and it implies neither of them.
TEST(AuthTest, AdminIsARightOfItsOwn) {
  absl::StatusOr<TokenAuthorizer> authorizer = TokenAuthorizer::Parse(
      "admin-token-00000000000001 admin orders\n"
      "everything-but-admin-00002 subscribe,status *\n",
      "tokens");
  ASSERT_THAT(authorizer, IsOk());
  const std::string admin = "Bearer admin-token-00000000000001";
  const std::string others = "Bearer everything-but-admin-00002";
  EXPECT_THAT(authorizer->Authorize(admin, Right::kAdmin, "orders"), IsOk());
  EXPECT_THAT(authorizer->Authorize(admin, Right::kAdmin, "inventory"), StatusIs(kDenied));
  EXPECT_THAT(authorizer->Authorize(admin, Right::kSubscribe, "orders"), StatusIs(kDenied));
  EXPECT_THAT(authorizer->Authorize(admin, Right::kStatus, "orders"), StatusIs(kDenied));
  EXPECT_THAT(authorizer->Authorize(others, Right::kAdmin, "orders"), StatusIs(kDenied));
  EXPECT_THAT(TokenAuthorizer::Parse("admin-token-00000000000001 root orders\n", "tokens"),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("subscribe, status and admin")));
}

TEST(AuthTest, RightNames) {
  EXPECT_EQ(RightName(Right::kSubscribe), "subscribe");
  EXPECT_EQ(RightName(Right::kStatus), "status");
  EXPECT_EQ(RightName(Right::kAdmin), "admin");
}

}  // namespace
}  // namespace walfeed::server
