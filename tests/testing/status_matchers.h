// gMock matchers for absl::Status / absl::StatusOr.
//
// Debian 12's Abseil (20220623) predates absl/status/status_matchers.h, so the
// project keeps these two:
//   EXPECT_THAT(status_or_status, IsOk());
//   EXPECT_THAT(s, StatusIs(absl::StatusCode::kDataLoss, HasSubstr("truncated")));
#ifndef WALFEED_TESTS_TESTING_STATUS_MATCHERS_H_
#define WALFEED_TESTS_TESTING_STATUS_MATCHERS_H_

#include <ostream>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "gmock/gmock.h"

namespace walfeed::testing {

inline const absl::Status& GetStatus(const absl::Status& status) { return status; }
template <typename T>
const absl::Status& GetStatus(const absl::StatusOr<T>& status_or) {
  return status_or.status();
}

MATCHER(IsOk, "is OK") {
  const absl::Status& status = GetStatus(arg);
  if (!status.ok()) *result_listener << "status is " << status;
  return status.ok();
}

MATCHER_P2(StatusIs, code, message_matcher,
           "has code " + ::testing::PrintToString(code)) {
  const absl::Status& status = GetStatus(arg);
  *result_listener << "status is " << status;
  return status.code() == code &&
         ::testing::Matches(message_matcher)(std::string(status.message()));
}

MATCHER_P(StatusIs, code, "has code " + ::testing::PrintToString(code)) {
  const absl::Status& status = GetStatus(arg);
  *result_listener << "status is " << status;
  return status.code() == code;
}

}  // namespace walfeed::testing

#endif  // WALFEED_TESTS_TESTING_STATUS_MATCHERS_H_
