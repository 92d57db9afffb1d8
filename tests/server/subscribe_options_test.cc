// SessionOptionsFor: a request's knobs merged over the server's defaults, each
// checked against its documented range.
#include "server/subscribe_options.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/testing/status_matchers.h"

namespace walfeed::server {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;
using ::walfeed::testing::IsOk;
using ::walfeed::testing::StatusIs;

TEST(SessionOptionsForTest, ZeroMeansTheServersDefault) {
  SessionLimits defaults;
  defaults.max_batch_events = 77;
  defaults.progress_interval = absl::Seconds(3);
  absl::StatusOr<SessionOptions> options = SessionOptionsFor({}, defaults);
  ASSERT_THAT(options.status(), IsOk());
  EXPECT_EQ(options->limits.max_batch_events, 77u);
  EXPECT_EQ(options->limits.progress_interval, absl::Seconds(3));
  EXPECT_FALSE(options->ephemeral);
  EXPECT_FALSE(options->start_latest);
  EXPECT_FALSE(options->form.compact);
  EXPECT_EQ(options->form.values, ValueForm::kText);
}

TEST(SessionOptionsForTest, ValuesInRangeAreTakenAndBatchBytesAreCapped) {
  walfeed::v1::SubscribeRequest request;
  request.set_max_batch_events(100000);
  request.set_max_batch_bytes(64u << 20);
  request.set_max_unacked_events(1);
  request.set_max_unacked_bytes(uint64_t{64} << 30);
  request.set_progress_interval_ms(10);
  request.set_ephemeral(true);
  request.set_start(walfeed::v1::START_POSITION_LATEST);
  request.set_event_form(walfeed::v1::EVENT_FORM_COMPACT);
  request.set_value_form(walfeed::v1::VALUE_FORM_BOTH);
  absl::StatusOr<SessionOptions> options = SessionOptionsFor(request, {});
  ASSERT_THAT(options.status(), IsOk());
  EXPECT_EQ(options->limits.max_batch_events, 100000u);
  EXPECT_EQ(options->limits.max_batch_bytes, kBatchBytesCap);
  EXPECT_EQ(options->limits.max_unacked_events, 1u);
  EXPECT_EQ(options->limits.max_unacked_bytes, uint64_t{64} << 30);
  EXPECT_EQ(options->limits.progress_interval, absl::Milliseconds(10));
  EXPECT_TRUE(options->ephemeral);
  EXPECT_TRUE(options->start_latest);
  EXPECT_TRUE(options->form.compact);
  EXPECT_EQ(options->form.values, ValueForm::kBoth);
}

TEST(SessionOptionsForTest, OutOfRangeValuesNameTheFieldAndTheRange) {
  struct Case {
    std::function<void(walfeed::v1::SubscribeRequest&)> set;
    std::string field;
  };
  const std::vector<Case> cases = {
      {[](auto& r) { r.set_progress_interval_ms(1); }, "progress_interval_ms: 1 is out of range"},
      {[](auto& r) { r.set_progress_interval_ms(3600001); }, "progress_interval_ms"},
      {[](auto& r) { r.set_max_batch_events(100001); }, "max_batch_events: 100001"},
      {[](auto& r) { r.set_max_batch_bytes((64u << 20) + 1); }, "max_batch_bytes"},
      {[](auto& r) { r.set_max_unacked_events(10000001); }, "max_unacked_events"},
      {[](auto& r) { r.set_max_unacked_bytes((uint64_t{64} << 30) + 1); }, "max_unacked_bytes"},
      {[](auto& r) { r.set_start(static_cast<walfeed::v1::StartPosition>(9)); },
       "start: 9 is not a StartPosition"},
      {[](auto& r) { r.set_event_form(static_cast<walfeed::v1::EventForm>(5)); },
       "event_form: 5 is not an EventForm"},
      {[](auto& r) { r.set_value_form(static_cast<walfeed::v1::ValueForm>(4)); },
       "value_form: 4 is not a ValueForm"},
      {[](auto& r) { r.add_tables("no_dot"); }, "tables[0]"},
  };
  for (const Case& c : cases) {
    walfeed::v1::SubscribeRequest request;
    c.set(request);
    EXPECT_THAT(SessionOptionsFor(request, {}).status(),
                StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr(c.field)))
        << request.ShortDebugString();
  }
  walfeed::v1::SubscribeRequest request;
  request.set_progress_interval_ms(1);
  EXPECT_THAT(SessionOptionsFor(request, {}).status(),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       AllOf(HasSubstr("use 10 to 3600000"), HasSubstr("0 for the server"))));
}

}  // namespace
}  // namespace walfeed::server
