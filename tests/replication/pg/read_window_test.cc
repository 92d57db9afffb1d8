// ReadWindow's rules on turns in simulated time: the busy threshold, the TCP
// backlog window and its hysteresis, the Unix-socket adaptation, and a
// configured window that none of them touch. How the reader uses the window is
// tested on recorded frames in stream_reader_unit_test.cc.
#include "replication/pg/read_window.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace walfeed::replication::pg {
namespace {

using ::testing::HasSubstr;

const absl::Time kStart = absl::FromUnixSeconds(1'800'000'000);

// Turns of `frames` frames (100 bytes each) every `every`, for `count` turns
// after `*now`, none following a window.
void Turns(ReadWindow* window, absl::Time* now, int count, absl::Duration every, int frames,
           std::optional<absl::Duration> lag = std::nullopt) {
  for (int i = 0; i < count; ++i) {
    *now += every;
    window->AfterTurn(*now, frames, static_cast<size_t>(frames) * 100, false, lag);
  }
}

TEST(ReadWindowTest, UnsetItIsWaitedOnlyWhileTheStreamIsBusy) {
  for (const bool unix_socket : {false, true}) {
    ReadWindow window(std::nullopt, unix_socket, kStart, "s");
    absl::Time now = kStart;
    EXPECT_EQ(window.length(), unix_socket ? kUnixReadWindow : kTcpReadWindow);
    Turns(&window, &now, 50, absl::Milliseconds(1), 4);  // 4,000 frames/s.
    EXPECT_FALSE(window.applies()) << unix_socket;
    Turns(&window, &now, 50, absl::Milliseconds(1), 20);  // 20,000 frames/s.
    EXPECT_TRUE(window.applies()) << unix_socket;
    // Quiet for a second: the first transaction after it is not held back.
    now += absl::Seconds(1);
    window.AfterTurn(now, 3, 300, false, absl::Microseconds(200));
    EXPECT_FALSE(window.applies()) << unix_socket;
  }
}

TEST(ReadWindowTest, OverTcpABacklogGetsTheLongWindowUntilCaughtUp) {
  ReadWindow window(std::nullopt, /*unix_socket=*/false, kStart, "s");
  absl::Time now = kStart;
  // Sent 25 ms after its commit: a backlog, at any rate.
  Turns(&window, &now, 1, absl::Milliseconds(20), 1, kBacklogLag + absl::Milliseconds(5));
  EXPECT_EQ(window.length(), kTcpBacklogReadWindow);
  EXPECT_TRUE(window.applies());
  // Between the thresholds it stays; a turn that began no transaction changes nothing.
  Turns(&window, &now, 1, absl::Milliseconds(20), 1, kCaughtUpLag + absl::Milliseconds(1));
  Turns(&window, &now, 1, absl::Milliseconds(20), 1);
  EXPECT_EQ(window.length(), kTcpBacklogReadWindow);
  // Caught up: the short window, waited only while busy.
  Turns(&window, &now, 1, absl::Milliseconds(20), 1, kCaughtUpLag - absl::Milliseconds(1));
  EXPECT_EQ(window.length(), kTcpReadWindow);
  EXPECT_FALSE(window.applies());
  // Between the thresholds from below it stays short.
  Turns(&window, &now, 1, absl::Milliseconds(20), 1, kBacklogLag - absl::Milliseconds(1));
  EXPECT_EQ(window.length(), kTcpReadWindow);
}

TEST(ReadWindowTest, OverAUnixSocketItShrinksWhileTurnsFillTheSendBuffer) {
  ReadWindow window(std::nullopt, /*unix_socket=*/true, kStart, "s");
  absl::Time now = kStart;
  Turns(&window, &now, 20, absl::Microseconds(500), 30);  // Busy.
  // Each turn after a window brings half the walsender's send buffer.
  const int half = static_cast<int>(kUnixSendBuffer / 2 / (kUnixMessageCharge + 100)) + 1;
  absl::Duration before = window.length();
  for (int i = 0; i < 20; ++i) {
    now += window.length();
    window.AfterTurn(now, half, static_cast<size_t>(half) * 100, /*after_window=*/true,
                     std::nullopt);
    EXPECT_EQ(window.length(), std::max(before / 2, kUnixMinReadWindow));
    before = window.length();
  }
  EXPECT_EQ(window.length(), kUnixMinReadWindow);
  // Small turns after it double it back, up to the whole window.
  for (int i = 0; i < 20; ++i) {
    now += window.length();
    window.AfterTurn(now, 20, 2000, /*after_window=*/true, std::nullopt);
  }
  EXPECT_EQ(window.length(), kUnixReadWindow);
  // A turn that did not follow a window is not judged.
  for (int i = 0; i < 5; ++i) {
    now += absl::Microseconds(200);
    window.AfterTurn(now, half, static_cast<size_t>(half) * 100, false, std::nullopt);
  }
  EXPECT_EQ(window.length(), kUnixReadWindow);
}

TEST(ReadWindowTest, AUnixWindowIsWholeAgainAfterAQuietSpell) {
  ReadWindow window(std::nullopt, /*unix_socket=*/true, kStart, "s");
  absl::Time now = kStart;
  const int half = static_cast<int>(kUnixSendBuffer / 2 / (kUnixMessageCharge + 100)) + 1;
  for (int i = 0; i < 3; ++i) {
    now += window.length();
    window.AfterTurn(now, half, static_cast<size_t>(half) * 100, true, std::nullopt);
  }
  ASSERT_LT(window.length(), kUnixReadWindow);
  // A stall of a few milliseconds inside a backlog is not quiet.
  now += absl::Milliseconds(3);
  window.AfterTurn(now, half, static_cast<size_t>(half) * 100, false, std::nullopt);
  EXPECT_LT(window.length(), kUnixReadWindow);
  now += absl::Milliseconds(100);
  window.AfterTurn(now, 1, 100, false, std::nullopt);
  EXPECT_EQ(window.length(), kUnixReadWindow);
}

TEST(ReadWindowTest, AConfiguredWindowIsFixedAndAlwaysWaited) {
  for (const bool unix_socket : {false, true}) {
    ReadWindow window(absl::Milliseconds(3), unix_socket, kStart, "s");
    absl::Time now = kStart;
    Turns(&window, &now, 10, absl::Seconds(1), 1, absl::Seconds(30));  // Slow, far behind.
    EXPECT_EQ(window.length(), absl::Milliseconds(3));
    EXPECT_TRUE(window.applies());
    now += window.length();
    window.AfterTurn(now, 5000, 500000, true, absl::Microseconds(10));
    EXPECT_EQ(window.length(), absl::Milliseconds(3));
    EXPECT_EQ(window.Describe(), "3ms");
  }
  ReadWindow zero(absl::ZeroDuration(), false, kStart, "s");
  EXPECT_EQ(zero.length(), absl::ZeroDuration());
}

TEST(ReadWindowTest, DescribeNamesTheRulesInForce) {
  EXPECT_EQ(ReadWindow(std::nullopt, false, kStart, "s").Describe(),
            "1ms while 8000 frames/s or more arrive, 8ms while a backlog is read: TCP");
  EXPECT_THAT(ReadWindow(std::nullopt, true, kStart, "s").Describe(),
              HasSubstr("less while a backlog is read: Unix socket"));
}

// A wall clock stepped back neither grows the count nor breaks the decay.
TEST(ReadWindowTest, AClockSteppedBackDoesNotMakeAStreamBusy) {
  ReadWindow window(std::nullopt, false, kStart, "s");
  absl::Time now = kStart;
  Turns(&window, &now, 10, absl::Milliseconds(10), 2);
  window.AfterTurn(now - absl::Seconds(5), 2, 200, false, std::nullopt);
  EXPECT_FALSE(window.applies());
}

}  // namespace
}  // namespace walfeed::replication::pg
