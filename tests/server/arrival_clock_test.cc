#include "server/arrival_clock.h"

#include "gtest/gtest.h"

namespace walfeed::server {
namespace {

using replication::Lsn;

EventId Id(uint64_t commit, uint32_t index = 0) { return EventId{Lsn(commit), index}; }
absl::Time At(double seconds) { return absl::UnixEpoch() + absl::Seconds(seconds); }

TEST(ArrivalClockTest, NothingAfterThePositionMeansNoArrival) {
  ArrivalClock clock(absl::Milliseconds(250));
  EXPECT_FALSE(clock.FirstArrivalAfter(EventId{}, clock.newest()));
  clock.Arrived(Id(10), At(1));
  EXPECT_FALSE(clock.FirstArrivalAfter(Id(10), clock.newest()));
  EXPECT_EQ(clock.FirstArrivalAfter(EventId{}, clock.newest()), At(1));
}

TEST(ArrivalClockTest, TheFirstEventAfterAQuietSpellIsDatedExactly) {
  ArrivalClock clock(absl::Milliseconds(250));
  clock.Arrived(Id(10), At(1));
  clock.Arrived(Id(11), At(1.1));  // Within the interval: no sample.
  clock.Arrived(Id(20), At(600));  // After ten quiet minutes.
  clock.Arrived(Id(21), At(600.1));
  // A consumer at 11 waits for 20, which arrived at 600, not at 1.
  EXPECT_EQ(clock.FirstArrivalAfter(Id(11), clock.newest()), At(600));
  EXPECT_EQ(clock.FirstArrivalAfter(Id(20), clock.newest()), At(600));
}

TEST(ArrivalClockTest, AnEventBetweenSamplesIsDatedByTheSampleBelowIt) {
  ArrivalClock clock(absl::Milliseconds(250));
  clock.Arrived(Id(10), At(1));
  clock.Arrived(Id(11), At(1.2));
  clock.Arrived(Id(12), At(1.3));  // A sample.
  // 11 arrived at 1.2: reported as 1 (at most one interval early).
  const absl::Time first = *clock.FirstArrivalAfter(Id(10), clock.newest());
  EXPECT_LE(first, At(1.2));
  EXPECT_GT(first + absl::Milliseconds(250), At(1.2));
}

TEST(ArrivalClockTest, TrimKeepsTheSampleThatDatesTheEventsAboveTheFloor) {
  ArrivalClock clock(absl::Milliseconds(250));
  for (int i = 0; i < 10; ++i) clock.Arrived(Id(10 + i), At(i));
  clock.TrimThrough(Id(15));
  EXPECT_EQ(clock.samples(), 5u);  // 15 (dates 16's neighbours) .. 19.
  EXPECT_EQ(clock.FirstArrivalAfter(Id(15), clock.newest()), At(6));
}

TEST(ArrivalClockTest, ThinningBoundsMemoryAndKeepsEstimatesWithinTwoIntervals) {
  ArrivalClock clock(absl::Milliseconds(100), 64);
  // One event every 60 ms for 100 s: ~1,700 events, most of them samples at first.
  std::vector<std::pair<EventId, absl::Time>> events;
  for (int i = 1; i <= 1700; ++i) {
    events.emplace_back(Id(i), At(i * 0.06));
    clock.Arrived(events.back().first, events.back().second);
  }
  EXPECT_LE(clock.samples(), 64u);
  EXPECT_GT(clock.interval(), absl::Milliseconds(100));
  for (size_t i = 0; i + 1 < events.size(); i += 37) {
    const absl::Time truth = events[i + 1].second;
    const absl::Time estimate = *clock.FirstArrivalAfter(events[i].first, clock.newest());
    EXPECT_LE(estimate, truth) << i;
    EXPECT_LT(truth - estimate, 2 * clock.interval()) << i;
  }
}

// The stamp is the wall clock to a tick: behind it by at most a few ms (a
// tick is 1-10 ms; the bound leaves room for a preempted test), never ahead
// beyond the two clocks' rounding.
TEST(ArrivalClockTest, TheCoarseClockIsTheWallClockToATick) {
  for (int i = 0; i < 100; ++i) {
    const absl::Time before = absl::Now();
    const absl::Time coarse = ArrivalClock::CoarseNow();
    const absl::Time after = absl::Now();
    EXPECT_LE(coarse, after + absl::Microseconds(100));
    EXPECT_GT(coarse, before - absl::Milliseconds(50));
  }
}

}  // namespace
}  // namespace walfeed::server
