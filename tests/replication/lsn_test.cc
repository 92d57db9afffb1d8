#include "replication/lsn.h"

#include "absl/random/random.h"
#include "absl/strings/str_format.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/testing/status_matchers.h"

namespace walfeed::replication {
namespace {

using ::testing::HasSubstr;
using ::walfeed::testing::IsOk;
using ::walfeed::testing::StatusIs;

TEST(LsnTest, PinsTextToNumber) {
  absl::StatusOr<Lsn> lsn = Lsn::Parse("16/B374D848");
  ASSERT_THAT(lsn, IsOk());
  EXPECT_EQ(lsn->value(), 97500059720u);
  EXPECT_EQ(Lsn(97500059720u).ToString(), "16/B374D848");
}

TEST(LsnTest, ParsesZeroPaddedLowHalfAndLowerCase) {
  EXPECT_EQ(Lsn::Parse("0/01A2B3C8")->value(), 0x1A2B3C8u);
  EXPECT_EQ(Lsn::Parse("0/1a2b3c8")->value(), 0x1A2B3C8u);
  EXPECT_EQ(Lsn::Parse("FFFFFFFF/FFFFFFFF")->value(), UINT64_MAX);
  EXPECT_EQ(Lsn::Parse("0/0")->value(), 0u);
}

TEST(LsnTest, FormatsUpperCaseWithoutPadding) {
  EXPECT_EQ(Lsn(0x1A2B3C8).ToString(), "0/1A2B3C8");
  EXPECT_EQ(Lsn(uint64_t{1} << 32).ToString(), "1/0");
  EXPECT_EQ(Lsn::kInvalid.ToString(), "0/0");
  EXPECT_FALSE(Lsn::kInvalid.valid());
}

TEST(LsnTest, FormatsAsPrintfUpperHexOfEachHalf) {
  // Every digit count of either half, against printf's "%X/%X".
  absl::BitGen gen;
  for (int digits = 0; digits <= 8; ++digits) {
    const uint32_t top =
        digits == 0 ? 0 : static_cast<uint32_t>(~uint64_t{0} >> (64 - 4 * digits));
    for (int i = 0; i < 200; ++i) {
      const uint32_t high = absl::Uniform<uint32_t>(absl::IntervalClosed, gen, 0, top);
      const uint32_t low = absl::Uniform<uint32_t>(gen);
      const Lsn lsn((uint64_t{high} << 32) | low);
      EXPECT_EQ(lsn.ToString(), absl::StrFormat("%X/%X", high, low));
      char text[Lsn::kMaxTextSize];
      EXPECT_EQ(std::string(text, lsn.FormatTo(text)), lsn.ToString());
    }
  }
  EXPECT_EQ(Lsn(UINT64_MAX).ToString(), "FFFFFFFF/FFFFFFFF");
}

TEST(LsnTest, RejectsJunkAndQuotesIt) {
  for (const char* junk : {"", "/", "0/", "/0", "0", "0//0", " 0/0", "0/0 ", "0x1/0",
                           "+1/0", "-1/0", "123456789/0", "0/123456789", "G/0",
                           "0/1:2", "1/2/3"}) {
    EXPECT_THAT(Lsn::Parse(junk),
                StatusIs(absl::StatusCode::kInvalidArgument,
                         HasSubstr("\"" + std::string(junk) + "\"")))
        << junk;
  }
}

TEST(LsnTest, OrdersAsIntegersNotStrings) {
  // As strings "0/9" > "0/10"; as LSNs 0/9 < 0/10, and 1/0 > 0/FFFFFFFF.
  EXPECT_LT(*Lsn::Parse("0/9"), *Lsn::Parse("0/10"));
  EXPECT_GT(*Lsn::Parse("1/0"), *Lsn::Parse("0/FFFFFFFF"));
  EXPECT_EQ(*Lsn::Parse("0/00000010"), *Lsn::Parse("0/10"));
}

TEST(LsnTest, RoundTripsEveryBitPattern) {
  for (uint64_t v : {uint64_t{0}, uint64_t{1}, uint64_t{0xFFFFFFFF}, uint64_t{1} << 32,
                     uint64_t{0x123456789ABCDEF0}, UINT64_MAX}) {
    EXPECT_EQ(Lsn::Parse(Lsn(v).ToString())->value(), v);
  }
}

}  // namespace
}  // namespace walfeed::replication
