#include "replication/retry.h"

#include "gtest/gtest.h"

namespace walfeed::replication {
namespace {

TEST(RetryTest, ClassifiesTransientCodes) {
  EXPECT_TRUE(IsTransient(absl::UnavailableError("connection lost")));
  EXPECT_TRUE(IsTransient(absl::AbortedError("serialization")));
  EXPECT_TRUE(IsTransient(absl::ResourceExhaustedError("slot in use")));
  EXPECT_FALSE(IsTransient(absl::NotFoundError("slot missing")));
  EXPECT_FALSE(IsTransient(absl::DataLossError("slot lost")));
  EXPECT_FALSE(IsTransient(absl::FailedPreconditionError("wal_level")));
  EXPECT_FALSE(IsTransient(absl::OkStatus()));
}

TEST(RetryTest, BackoffStaysWithinBoundsAndGrows) {
  Backoff backoff(absl::Milliseconds(100), absl::Seconds(10), /*seed=*/42);
  absl::Duration previous = absl::Milliseconds(100);
  absl::Duration largest;
  for (int i = 0; i < 200; ++i) {
    const absl::Duration d = backoff.Next();
    EXPECT_GE(d, absl::Milliseconds(100));
    EXPECT_LE(d, absl::Seconds(10));
    EXPECT_LE(d, previous * 3);
    previous = d;
    largest = std::max(largest, d);
  }
  EXPECT_GT(largest, absl::Seconds(5));  // It does reach the cap region.
  backoff.Reset();
  EXPECT_LE(backoff.Next(), absl::Milliseconds(300));
}

TEST(RetryTest, SameSeedSameDelays) {
  Backoff a(absl::Milliseconds(10), absl::Seconds(1), 7);
  Backoff b(absl::Milliseconds(10), absl::Seconds(1), 7);
  for (int i = 0; i < 20; ++i) EXPECT_EQ(a.Next(), b.Next());
}

}  // namespace
}  // namespace walfeed::replication
