// libpq helpers against a real server: parameters, NULLs, error classification,
// replication connections.
#include "replication/pg/pg_conn.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "replication/pg/replication_connection.h"
#include "replication/retry.h"
#include "replication/sql_text.h"
#include "tests/testing/pg_cluster.h"
#include "tests/testing/status_matchers.h"

namespace walfeed::replication::pg {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;
using ::walfeed::testing::IsOk;
using ::walfeed::testing::PgCluster;
using ::walfeed::testing::StatusIs;

TEST(PgConnUnitTest, ClassifiesSqlStates) {
  EXPECT_EQ(CodeForSqlState("42704"), absl::StatusCode::kNotFound);
  EXPECT_EQ(CodeForSqlState("42501"), absl::StatusCode::kPermissionDenied);
  EXPECT_EQ(CodeForSqlState("28P01"), absl::StatusCode::kPermissionDenied);
  EXPECT_EQ(CodeForSqlState("55006"), absl::StatusCode::kUnavailable);  // slot busy
  EXPECT_EQ(CodeForSqlState("57P01"), absl::StatusCode::kUnavailable);  // shutdown
  EXPECT_EQ(CodeForSqlState("08006"), absl::StatusCode::kUnavailable);
  EXPECT_EQ(CodeForSqlState("XX000"), absl::StatusCode::kUnavailable);
  EXPECT_EQ(CodeForSqlState(""), absl::StatusCode::kUnavailable);
  EXPECT_EQ(CodeForSqlState("42601"), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(CodeForSqlState("53400"), absl::StatusCode::kResourceExhausted);
}

// Connection failures are classified by the SQLSTATE libpq's verbose message
// carries, so a server speaking another language is classified the same.
TEST(PgConnUnitTest, ConnectionFailuresAreClassifiedBySqlStateNotWording) {
  const absl::Status english = StatusFromConnectionMessage(
      "connection to server at \"db\" (10.0.0.5), port 5432 failed: FATAL:  28P01: password "
      "authentication failed for user \"walfeed\"\nLOCATION:  auth_failed, auth.c:335\n",
      "connecting to PostgreSQL");
  EXPECT_THAT(english, StatusIs(absl::StatusCode::kPermissionDenied,
                                HasSubstr("password authentication failed for user")));
  EXPECT_THAT(english,
              StatusIs(absl::StatusCode::kPermissionDenied, HasSubstr("(SQLSTATE 28P01)")));
  EXPECT_EQ(english.message(),
            "connecting to PostgreSQL: connection to server at \"db\" (10.0.0.5), port 5432 "
            "failed: FATAL:  password authentication failed for user \"walfeed\" (SQLSTATE "
            "28P01)");
  EXPECT_EQ(SqlStateOf(english), "28P01");

  // The same refusal from a server with lc_messages = 'de_DE': no English word.
  EXPECT_THAT(StatusFromConnectionMessage(
                  "Verbindung zum Server auf \"db\" fehlgeschlagen: SCHWERWIEGEND:  28P01: "
                  "Passwort-Authentifizierung für Benutzer »walfeed« fehlgeschlagen\n",
                  "connecting to PostgreSQL"),
              StatusIs(absl::StatusCode::kPermissionDenied, HasSubstr("SQLSTATE 28P01")));
  EXPECT_THAT(StatusFromConnectionMessage("FATAL:  3D000: database \"x\" does not exist", "c"),
              StatusIs(absl::StatusCode::kNotFound));
  // Too many connections and a starting server are worth waiting for.
  EXPECT_THAT(StatusFromConnectionMessage("FATAL:  53300: sorry, too many clients already", "c"),
              StatusIs(absl::StatusCode::kUnavailable));
  EXPECT_THAT(StatusFromConnectionMessage("FATAL:  57P03: the database system is starting up", "c"),
              StatusIs(absl::StatusCode::kUnavailable));
  // Several hosts: the last attempt decides.
  EXPECT_THAT(StatusFromConnectionMessage(
                  "connection to server at \"a\" failed: Connection refused\n"
                  "connection to server at \"b\" failed: FATAL:  28000: no pg_hba.conf entry",
                  "c"),
              StatusIs(absl::StatusCode::kPermissionDenied));
  // ... also when an earlier host refused for good and the last is only down.
  EXPECT_THAT(StatusFromConnectionMessage(
                  "connection to server at \"a\" failed: FATAL:  28P01: password authentication "
                  "failed for user \"w\"\nconnection to server at \"b\" failed: Connection refused",
                  "c"),
              StatusIs(absl::StatusCode::kUnavailable, HasSubstr("Connection refused")));
  // A later line of the same attempt (DETAIL, HINT) never carries the code.
  EXPECT_THAT(StatusFromConnectionMessage("could not connect\nDETAIL:  ABCDE: looks like a code",
                                          "c"),
              StatusIs(absl::StatusCode::kUnavailable));
  // libpq's own failures have no SQLSTATE, whatever their wording says.
  EXPECT_THAT(StatusFromConnectionMessage(
                  "connection to server at \"db\", port 5432 failed: password authentication "
                  "failed (ECONNRESET)",
                  "c"),
              StatusIs(absl::StatusCode::kUnavailable));
  EXPECT_THAT(StatusFromConnectionMessage("", "c"), StatusIs(absl::StatusCode::kUnavailable));
}

TEST(PgConnUnitTest, AConninfoLibpqRejectsIsAConfigurationErrorThatQuotesNoValue) {
  EXPECT_THAT(CheckConninfo("host=db dbname=shop"), IsOk());
  EXPECT_THAT(CheckConninfo("postgresql://walfeed@db:5432/shop"), IsOk());
  EXPECT_THAT(CheckConninfo(""), IsOk()) << "libpq's defaults";
  EXPECT_THAT(CheckConninfo("host=db bogus=1"),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("invalid connection option \"bogus\"")));
  const absl::Status malformed = CheckConninfo("host=db password='s3cret");
  EXPECT_THAT(malformed, StatusIs(absl::StatusCode::kInvalidArgument,
                                  HasSubstr("not a valid libpq connection string")));
  EXPECT_THAT(std::string(malformed.message()), Not(HasSubstr("s3cret")));
  EXPECT_THAT(Connect("host=db bogus=1", ConnectionKind::kSql).status(),
              StatusIs(absl::StatusCode::kInvalidArgument))
      << "definite, not retried as UNAVAILABLE";
}

// A new leader ends a walsender on its slot only under its own stream's name,
// so names must be stable across instances, distinct per stream, and what
// PostgreSQL stores (printable ASCII within 63 bytes).
TEST(PgConnUnitTest, AStreamsWalsenderNameIsItsOwnAndFitsPostgres) {
  EXPECT_EQ(StreamWalsenderName("walfeed", "orders"), "walfeed walfeed/orders");
  EXPECT_NE(StreamWalsenderName("walfeed", "orders"), StreamWalsenderName("walfeed", "orders2"));
  EXPECT_NE(StreamWalsenderName("walfeed", "orders"), StreamWalsenderName("cdc", "orders"));
  const std::string long_a(60, 'a');
  const std::string a = StreamWalsenderName("walfeed", long_a + "1");
  const std::string b = StreamWalsenderName("walfeed", long_a + "2");
  EXPECT_LE(a.size(), 63u);
  EXPECT_LE(b.size(), 63u);
  EXPECT_NE(a, b) << "cut to the same prefix, told apart by the hash";
  EXPECT_EQ(a, StreamWalsenderName("walfeed", long_a + "1")) << "deterministic";
  // The hash is FNV-1a of the whole name, the same in every process (a
  // per-process seed would let two instances of one stream disagree).
  EXPECT_EQ(a, "walfeed walfeed/" + std::string(30, 'a') + "~06a5b771f44eec17");
  const std::string odd = StreamWalsenderName("sch\xc3\xa9ma", "orders");
  EXPECT_EQ(odd.find_first_not_of(
                " !\"#$%&'()*+,-./0123456789:;<=>?@ABCDEFGHIJKLMNOPQRSTUVWXYZ[\\]^_`"
                "abcdefghijklmnopqrstuvwxyz{|}~"),
            std::string::npos)
      << odd;
}

TEST(PgConnUnitTest, Quoting) {
  EXPECT_EQ(QuoteIdentifier("My\"Slot"), "\"My\"\"Slot\"");
  EXPECT_EQ(QuoteLiteral("it's \\ fine"), "'it''s \\ fine'");
  EXPECT_EQ(QuoteIdentifierList({"pub", "My\"Pub"}), "\"pub\", \"My\"\"Pub\"");
  EXPECT_EQ(QuoteIdentifierList({}), "");
}

TEST(PgConnUnitTest, InlinesParametersAsEscapeStringLiterals) {
  EXPECT_EQ(*InlineParameters("SELECT 1", {}), "SELECT 1");
  EXPECT_EQ(*InlineParameters("WHERE a = $1 AND b = $2", {std::string("x"), std::nullopt}),
            "WHERE a = E'x' AND b = NULL");
  // Backslashes and single quotes doubled; every other byte as it is.
  EXPECT_EQ(*InlineParameters("$1", {std::string("it's \\ \"$2\" caf\xc3\xa9")}),
            "E'it''s \\\\ \"$2\" caf\xc3\xa9'");
  EXPECT_EQ(*InlineParameters("$1", {std::string("")}), "E''");
  // Two digits are one reference; a value is used as often as it is referred to.
  std::vector<std::optional<std::string>> twelve(12, std::string("v"));
  twelve[11] = "twelve";
  EXPECT_EQ(*InlineParameters("$12 $1$1", twelve), "E'twelve' E'v'E'v'");
  // Inside quoted text a reference is text, and quotes doubled inside stay inside.
  EXPECT_EQ(*InlineParameters("SELECT '$1', 'it''s $1', \"$1\", $1::text", {std::string("v")}),
            "SELECT '$1', 'it''s $1', \"$1\", E'v'::text");
  // A lone $ is left alone.
  EXPECT_EQ(*InlineParameters("SELECT $ 1, $x", {std::string("v")}), "SELECT $ 1, $x");

  EXPECT_THAT(InlineParameters("$2", {std::string("a")}),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("refers to $2 but 1 parameter(s)")));
  EXPECT_THAT(InlineParameters("$0", {std::string("a")}),
              StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(InlineParameters("$99999999999999999999", {std::string("a")}),
              StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(InlineParameters("$1", {std::string("a\0b", 3)}),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("NUL byte")));
}

class PgConnTest : public ::testing::Test {
 protected:
  void SetUp() override { WALFEED_START_PG_OR_SKIP(pg_, PgCluster::Options{}); }
  std::unique_ptr<PgCluster> pg_;
};

TEST_F(PgConnTest, ExecWithParametersAndNulls) {
  absl::StatusOr<PgConnPtr> conn = Connect(pg_->ConnInfo(), ConnectionKind::kSql);
  ASSERT_THAT(conn, IsOk());
  absl::StatusOr<PgResultPtr> result =
      Exec(conn->get(),
           "SELECT $1::text, $2::text, current_setting('application_name'), true, false, "
           "NULL::bool",
           {std::string("a'b"), std::nullopt});
  ASSERT_THAT(result, IsOk());
  EXPECT_EQ(Value(result->get(), 0, 0), "a'b");
  EXPECT_EQ(Value(result->get(), 0, 1), std::nullopt);
  EXPECT_EQ(TextValue(result->get(), 0, 1), "");
  EXPECT_EQ(Value(result->get(), 0, 2), "walfeed");
  EXPECT_TRUE(BoolValue(result->get(), 0, 3));
  EXPECT_FALSE(BoolValue(result->get(), 0, 4));
  EXPECT_FALSE(BoolValue(result->get(), 0, 5));
}

TEST_F(PgConnTest, ConninfoApplicationNameWins) {
  absl::StatusOr<PgConnPtr> conn =
      Connect(pg_->ConnInfo() + " application_name=mine", ConnectionKind::kSql);
  ASSERT_THAT(conn, IsOk());
  EXPECT_EQ(Value(Exec(conn->get(), "SHOW application_name")->get(), 0, 0), "mine");
  conn = Connect(pg_->ConnInfo() + " application_name=mine", ConnectionKind::kSql, "theirs");
  ASSERT_THAT(conn, IsOk());
  EXPECT_EQ(Value(Exec(conn->get(), "SHOW application_name")->get(), 0, 0), "mine");
}

// PostgreSQL shows a stream's walsender under exactly the name the leader
// compares with, long and non-ASCII names included.
TEST_F(PgConnTest, AStreamsWalsenderShowsTheNameTheLeaderLooksFor) {
  for (const std::string& name : {StreamWalsenderName("walfeed", "orders"),
                                  StreamWalsenderName("walfeed", std::string(70, 's')),
                                  StreamWalsenderName("sch\xc3\xa9ma", "orders")}) {
    absl::StatusOr<std::unique_ptr<PgReplicationConnection>> conn =
        PgReplicationConnection::Connect(pg_->ConnInfo(), name);
    ASSERT_THAT(conn, IsOk());
    absl::StatusOr<std::string> shown =
        pg_->QueryValue(absl::StrCat("SELECT application_name FROM pg_stat_activity WHERE pid = ",
                                     PQbackendPID((*conn)->pg())));
    ASSERT_THAT(shown, IsOk());
    EXPECT_EQ(*shown, name);
  }
}

// What libpq ended up using for a connection's option.
std::string OptionOf(PGconn* conn, const std::string& keyword) {
  std::string value;
  PQconninfoOption* options = PQconninfo(conn);
  for (PQconninfoOption* o = options; o != nullptr && o->keyword != nullptr; ++o) {
    if (keyword == o->keyword && o->val != nullptr) value = o->val;
  }
  PQconninfoFree(options);
  return value;
}

TEST_F(PgConnTest, SilenceIsBoundedByDefaultAndTheConninfoMayChangeIt) {
  absl::StatusOr<PgConnPtr> conn = Connect(pg_->ConnInfo(), ConnectionKind::kSql);
  ASSERT_THAT(conn, IsOk());
  EXPECT_EQ(OptionOf(conn->get(), "connect_timeout"), "10");
  EXPECT_EQ(OptionOf(conn->get(), "keepalives_idle"), "10");
  EXPECT_EQ(OptionOf(conn->get(), "tcp_user_timeout"), "30000");
  conn = Connect(pg_->ConnInfo() + " connect_timeout=3 keepalives_idle=60",
                 ConnectionKind::kReplication);
  ASSERT_THAT(conn, IsOk());
  EXPECT_EQ(OptionOf(conn->get(), "connect_timeout"), "3");
  EXPECT_EQ(OptionOf(conn->get(), "keepalives_idle"), "60");
  EXPECT_EQ(OptionOf(conn->get(), "keepalives_count"), "3");
}

TEST_F(PgConnTest, ClassifiesServerErrors) {
  absl::StatusOr<PgConnPtr> conn = Connect(pg_->ConnInfo(), ConnectionKind::kSql);
  ASSERT_THAT(conn, IsOk());
  EXPECT_THAT(Exec(conn->get(), "SELECT * FROM missing_table"),
              StatusIs(absl::StatusCode::kNotFound, HasSubstr("SQLSTATE 42P01")));
  EXPECT_THAT(Exec(conn->get(), "SELEC 1"), StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(Connect(pg_->ConnInfo("no_such_db"), ConnectionKind::kSql),
              StatusIs(absl::StatusCode::kNotFound, HasSubstr("no_such_db")));
  EXPECT_THAT(Connect(pg_->ConnInfo("no_such_db"), ConnectionKind::kSql),
              StatusIs(absl::StatusCode::kNotFound, HasSubstr("SQLSTATE 3D000")));
  // An unknown role is refused by authentication (class 28): definite.
  EXPECT_THAT(Connect(absl::StrCat(pg_->ConnInfo(), " user=no_such_role"), ConnectionKind::kSql),
              StatusIs(absl::StatusCode::kPermissionDenied, HasSubstr("SQLSTATE 28000")));
  EXPECT_THAT(
      Connect(absl::StrCat(pg_->ConnInfo(), " user=no_such_role"), ConnectionKind::kReplication),
      StatusIs(absl::StatusCode::kPermissionDenied, HasSubstr("SQLSTATE 28000")));
}

// libpq's handling of several hosts is kept: a first host that accepts the TCP
// connection but never answers costs connect_timeout, then the next one serves.
TEST_F(PgConnTest, ASilentFirstHostFallsThroughToTheNext) {
  const int silent = socket(AF_INET, SOCK_STREAM, 0);
  ASSERT_GE(silent, 0);
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(bind(silent, reinterpret_cast<sockaddr*>(&address), sizeof(address)), 0);
  ASSERT_EQ(listen(silent, 4), 0);  // Never accepted: the kernel completes the handshake.
  socklen_t length = sizeof(address);
  ASSERT_EQ(getsockname(silent, reinterpret_cast<sockaddr*>(&address), &length), 0);
  const absl::Time start = absl::Now();
  absl::StatusOr<PgConnPtr> conn = Connect(
      absl::StrCat(pg_->ConnInfo(), " host=127.0.0.1,127.0.0.1 port=", ntohs(address.sin_port),
                   ",", pg_->port(), " connect_timeout=2"),
      ConnectionKind::kSql);
  EXPECT_THAT(conn, IsOk());
  EXPECT_LT(absl::Now() - start, absl::Seconds(10));
  close(silent);
}

TEST_F(PgConnTest, ConnectionRefusedIsTransient) {
  const std::string conninfo = pg_->ConnInfo();
  ASSERT_THAT(pg_->Stop("fast"), IsOk());
  absl::StatusOr<PgConnPtr> conn = Connect(conninfo, ConnectionKind::kSql);
  EXPECT_TRUE(IsTransient(conn.status())) << conn.status();
}

TEST_F(PgConnTest, ReplicationConnectionRunsReplicationCommands) {
  absl::StatusOr<PgConnPtr> conn = Connect(pg_->ConnInfo(), ConnectionKind::kReplication);
  ASSERT_THAT(conn, IsOk());
  absl::StatusOr<PgResultPtr> result = ExecSimple(conn->get(), "IDENTIFY_SYSTEM");
  ASSERT_THAT(result, IsOk());
  EXPECT_EQ(Value(result->get(), 0, 3), "postgres");  // dbname: a logical walsender.
}

// A logical walsender runs SQL only over the simple query protocol: Exec on
// such a channel inlines the parameters, with the same results as PQexecParams
// on an ordinary connection, and the same errors.
TEST_F(PgConnTest, ExecOnAWalsenderInlinesParameters) {
  absl::StatusOr<PgConnPtr> sql = Connect(pg_->ConnInfo(), ConnectionKind::kSql);
  absl::StatusOr<PgConnPtr> walsender = Connect(pg_->ConnInfo(), ConnectionKind::kReplication);
  ASSERT_THAT(sql, IsOk());
  ASSERT_THAT(walsender, IsOk());
  const SqlChannel channel(walsender->get(), ConnectionKind::kReplication);
  // Every byte from 1 to 255 that is valid UTF-8 on its own, then a multi-byte
  // character, backslashes and quotes in runs, and what looks like a reference.
  std::string awkward;
  for (int c = 1; c < 128; ++c) awkward += static_cast<char>(c);
  awkward += "caf\xc3\xa9 \\\\'' '\\ $1 E'x'";
  const char kQuery[] =
      "SELECT $1::text, $2::text, $1 = ANY(ARRAY[$3, $1]), length($1), $3::text IS NULL";
  const std::vector<std::optional<std::string>> params = {awkward, std::string("x"),
                                                          std::nullopt};
  absl::StatusOr<PgResultPtr> want = Exec(sql->get(), kQuery, params);
  absl::StatusOr<PgResultPtr> got = Exec(channel, kQuery, params);
  ASSERT_THAT(want, IsOk());
  ASSERT_THAT(got, IsOk());
  EXPECT_EQ(Value(got->get(), 0, 0), awkward);
  for (int column = 0; column < 5; ++column) {
    EXPECT_EQ(Value(got->get(), 0, column), Value(want->get(), 0, column)) << column;
  }
  // Untyped, as a parameter is: the server infers the type from the context.
  absl::StatusOr<PgResultPtr> typed =
      Exec(channel, "SELECT pg_typeof(x)::text FROM (SELECT 1 + $1 AS x) s", {std::string("41")});
  ASSERT_THAT(typed, IsOk());
  EXPECT_EQ(Value(typed->get(), 0, 0), "integer");

  const char kBad[] = "SELECT * FROM no_such_table WHERE a = $1";
  const absl::Status error = Exec(channel, kBad, {std::string("v")}).status();
  EXPECT_THAT(error, StatusIs(absl::StatusCode::kNotFound, HasSubstr(kBad)));
  EXPECT_EQ(error, Exec(sql->get(), kBad, {std::string("v")}).status());
  EXPECT_THAT(Exec(channel, "SELECT $2", {std::string("v")}),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("refers to $2")));
  // The walsender still serves replication commands afterwards.
  EXPECT_THAT(ExecSimple(walsender->get(), "IDENTIFY_SYSTEM"), IsOk());
}

// The read window's default follows it (StreamReader::ReadWindow).
TEST_F(PgConnTest, AReplicationConnectionKnowsItsTransport) {
  absl::StatusOr<std::unique_ptr<PgReplicationConnection>> tcp =
      PgReplicationConnection::Connect(pg_->ConnInfo());
  ASSERT_THAT(tcp, IsOk());
  EXPECT_FALSE((*tcp)->unix_socket());
  absl::StatusOr<std::unique_ptr<PgReplicationConnection>> local =
      PgReplicationConnection::Connect(pg_->UnixSocketConnInfo());
  ASSERT_THAT(local, IsOk());
  EXPECT_TRUE((*local)->unix_socket());
}

}  // namespace
}  // namespace walfeed::replication::pg
