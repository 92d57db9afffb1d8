// ToGrpc: every error leaves the server with its reason (google.rpc.ErrorInfo)
// and, where a retry is right, a RetryInfo; the reasons the code attaches are
// exactly the proto's ErrorReason values; and the C++ client reads them back.
#include "server/error_details.h"

#include <set>
#include <string>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "google/rpc/error_details.pb.h"
#include "google/rpc/status.pb.h"
#include "gtest/gtest.h"
#include "replication/error_reason.h"
#include "walfeed/error_details.h"
#include "walfeed/v1/change_stream.pb.h"

namespace walfeed::server {
namespace {

namespace reason = replication::reason;
using ::testing::Pair;
using ::testing::UnorderedElementsAre;

struct Details {
  google::rpc::Status status;
  google::rpc::ErrorInfo info;
  std::optional<google::rpc::RetryInfo> retry;
  int infos = 0;
};

Details Parse(const grpc::Status& status) {
  Details parsed;
  EXPECT_TRUE(parsed.status.ParseFromString(status.error_details()));
  for (const google::protobuf::Any& any : parsed.status.details()) {
    google::rpc::RetryInfo retry;
    if (any.UnpackTo(&parsed.info)) {
      ++parsed.infos;
    } else if (any.UnpackTo(&retry)) {
      parsed.retry = retry;
    } else {
      ADD_FAILURE() << "unexpected detail " << any.type_url();
    }
  }
  return parsed;
}

TEST(ErrorDetailsTest, TheCodesReasonsAreExactlyTheProtosErrorReasonValues) {
  std::set<std::string> from_code;
  for (absl::string_view name : reason::AllReasons()) {
    EXPECT_TRUE(from_code.insert(std::string(name)).second) << name << " listed twice";
    walfeed::v1::ErrorReason value;
    EXPECT_TRUE(walfeed::v1::ErrorReason_Parse(absl::StrCat("ERROR_REASON_", name), &value))
        << name << " is not documented in change_stream.proto's ErrorReason";
  }
  std::set<std::string> from_proto;
  const google::protobuf::EnumDescriptor* e = walfeed::v1::ErrorReason_descriptor();
  for (int i = 0; i < e->value_count(); ++i) {
    if (e->value(i)->number() != 0) from_proto.insert(e->value(i)->name().substr(13));
  }
  EXPECT_EQ(from_code, from_proto);
}

TEST(ErrorDetailsTest, AReasonAndItsMetadataTravelInErrorInfo) {
  const grpc::Status sent = ToGrpc(reason::WithReason(
      absl::AbortedError("session s1 was superseded"), reason::kSessionSuperseded,
      {{"stream", "orders"}, {"consumer", "billing"}}));
  EXPECT_EQ(sent.error_code(), grpc::StatusCode::ABORTED);
  EXPECT_EQ(sent.error_message(), "session s1 was superseded");
  const Details details = Parse(sent);
  EXPECT_EQ(details.status.code(), static_cast<int>(grpc::StatusCode::ABORTED));
  EXPECT_EQ(details.status.message(), "session s1 was superseded");
  EXPECT_EQ(details.infos, 1);
  EXPECT_EQ(details.info.reason(), "SESSION_SUPERSEDED");
  EXPECT_EQ(details.info.domain(), "walfeed.v1");
  EXPECT_THAT(details.info.metadata(),
              UnorderedElementsAre(Pair("stream", "orders"), Pair("consumer", "billing")));
  EXPECT_FALSE(details.retry.has_value()) << "a takeover is definite";
  EXPECT_EQ(details.status.details(0).type_url(), "type.googleapis.com/google.rpc.ErrorInfo");
}

TEST(ErrorDetailsTest, RetryableReasonsCarryTheirDelayAndDefiniteOnesNone) {
  for (absl::string_view name : reason::AllReasons()) {
    const grpc::Status sent = ToGrpc(reason::WithReason(absl::UnavailableError("x"), name));
    const Details details = Parse(sent);
    EXPECT_EQ(details.info.reason(), name);
    const std::optional<absl::Duration> delay = RetryDelayFor(name);
    ASSERT_EQ(details.retry.has_value(), delay.has_value()) << name;
    if (delay) {
      EXPECT_EQ(absl::Seconds(details.retry->retry_delay().seconds()) +
                    absl::Nanoseconds(details.retry->retry_delay().nanos()),
                *delay)
          << name;
    }
  }
  EXPECT_EQ(RetryDelayFor(reason::kStreamNotReady), absl::Seconds(1));
  EXPECT_EQ(RetryDelayFor(reason::kConsumerReset), absl::ZeroDuration());
  EXPECT_EQ(RetryDelayFor(reason::kSlotLost), std::nullopt);
  EXPECT_EQ(RetryDelayFor(reason::kSessionSuperseded), std::nullopt);
}

TEST(ErrorDetailsTest, ErrorsMadeWithoutAReasonGetOneFromTheirCode) {
  EXPECT_EQ(Parse(ToGrpc(absl::InvalidArgumentError("bad"))).info.reason(), "INVALID_REQUEST");
  EXPECT_EQ(Parse(ToGrpc(absl::UnauthenticatedError("who"))).info.reason(), "UNAUTHENTICATED");
  EXPECT_EQ(Parse(ToGrpc(absl::PermissionDeniedError("no"))).info.reason(), "PERMISSION_DENIED");
  EXPECT_EQ(Parse(ToGrpc(absl::InternalError("oops"))).info.reason(), "OTHER");
  EXPECT_TRUE(ToGrpc(absl::OkStatus()).ok());
  EXPECT_TRUE(ToGrpc(absl::OkStatus()).error_details().empty());
}

TEST(ErrorDetailsTest, TheClientReadsTheReasonAndTheDelayBack) {
  const absl::Status received =
      walfeed::StatusFromGrpc(ToGrpc(reason::WithReason(absl::AbortedError("consumer c was reset"),
                                                        reason::kConsumerReset)),
                              "Subscribe");
  EXPECT_EQ(received.code(), absl::StatusCode::kAborted);
  EXPECT_EQ(received.message(), "Subscribe: consumer c was reset");
  EXPECT_EQ(walfeed::ErrorReason(received), "CONSUMER_RESET");
  EXPECT_EQ(walfeed::RetryDelay(received), absl::ZeroDuration());

  const absl::Status plain = walfeed::StatusFromGrpc(
      grpc::Status(grpc::StatusCode::UNAVAILABLE, "connection reset"), "Subscribe");
  EXPECT_EQ(walfeed::ErrorReason(plain), "");
  EXPECT_EQ(walfeed::RetryDelay(plain), std::nullopt);
  const absl::Status garbage = walfeed::StatusFromGrpc(
      grpc::Status(grpc::StatusCode::UNAVAILABLE, "x", "\xff\xff not a proto"), "Ack");
  EXPECT_EQ(garbage.code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(walfeed::ErrorReason(garbage), "");
}

}  // namespace
}  // namespace walfeed::server
