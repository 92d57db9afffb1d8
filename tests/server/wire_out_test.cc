#include "server/wire_out.h"

#include <string>

#include "gtest/gtest.h"

namespace walfeed::server {
namespace {

TEST(WireOutTest, AppendsAfterWhatTheStringHeldAndCutsToWhatWasWritten) {
  std::string out = "ab";
  {
    WireOut wire(&out);
    wire.Reserve(100);
    EXPECT_GE(out.size(), 102u);  // Reserved, not written yet.
    wire.Byte('c');
    wire.Bytes("de");
    wire.Bytes("");
    EXPECT_EQ(wire.size(), 5u);
    wire.Finish();
    EXPECT_EQ(out, "abcde");
    wire.Reserve(1);  // Writing may go on after Finish.
    wire.Byte('f');
  }  // The destructor finishes too.
  EXPECT_EQ(out, "abcdef");
}

TEST(WireOutTest, WritesVarintsAsProtobufDoes) {
  const struct {
    uint64_t value;
    std::string bytes;
  } cases[] = {
      {0, std::string(1, '\0')},
      {1, "\x01"},
      {127, "\x7f"},
      {128, "\x80\x01"},
      {300, "\xac\x02"},
      {16383, "\xff\x7f"},
      {16384, std::string("\x80\x80\x01", 3)},
      {~uint64_t{0}, "\xff\xff\xff\xff\xff\xff\xff\xff\xff\x01"},
  };
  for (const auto& c : cases) {
    std::string out;
    WireOut wire(&out);
    wire.Reserve(WireOut::kMaxVarint);
    wire.Varint(c.value);
    wire.Finish();
    EXPECT_EQ(out, c.bytes) << c.value;
  }
}

// Pieces reserved one at a time, each past the room: every byte survives the
// string's reallocations, in order.
TEST(WireOutTest, GrowsWhileKeepingWhatWasWritten) {
  std::string out;
  std::string expected;
  WireOut wire(&out);
  for (int i = 0; i < 2000; ++i) {
    const std::string piece(static_cast<size_t>(i % 37), static_cast<char>('a' + i % 26));
    wire.Reserve(1 + piece.size());
    wire.Byte(static_cast<char>(i));
    wire.Bytes(piece);
    expected.push_back(static_cast<char>(i));
    expected += piece;
  }
  wire.Finish();
  EXPECT_EQ(out, expected);
  EXPECT_LE(out.capacity(), 2 * expected.size() + 64);  // Doubling, not worse.
}

}  // namespace
}  // namespace walfeed::server
