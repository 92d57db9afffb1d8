#include "replication/byte_reader.h"

#include <cstdint>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/testing/status_matchers.h"

namespace walfeed::replication {
namespace {

using ::testing::HasSubstr;
using ::walfeed::testing::IsOk;
using ::walfeed::testing::StatusIs;

TEST(ByteReaderTest, ReadsBigEndianIntegers) {
  const std::vector<uint8_t> bytes = {0x01, 0xFF, 0xFE, 0x80, 0x00, 0x00, 0x01,
                                      0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x01, 0x02};
  ByteReader reader(bytes);
  EXPECT_EQ(*reader.ReadUint8("a"), 1);
  EXPECT_EQ(*reader.ReadInt16("b"), -2);
  EXPECT_EQ(*reader.ReadUint32("c"), 0x80000001u);
  EXPECT_EQ(*reader.ReadUint64("d"), 0x102u);
  EXPECT_EQ(reader.remaining(), 0u);
  EXPECT_THAT(reader.ExpectEnd("msg"), IsOk());
}

TEST(ByteReaderTest, SignedReadsKeepTheSign) {
  const std::vector<uint8_t> bytes = {0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF,
                                      0xFF, 0xFF, 0xFF, 0xFE};
  ByteReader reader(bytes);
  EXPECT_EQ(*reader.ReadInt64("x"), -1);
  EXPECT_EQ(*reader.ReadInt32("y"), -2);
}

TEST(ByteReaderTest, TruncationIsAnErrorThatNamesTheField) {
  const std::vector<uint8_t> bytes = {0x00, 0x01, 0x02};
  ByteReader reader(bytes);
  EXPECT_THAT(reader.ReadUint32("relation id"),
              StatusIs(absl::StatusCode::kDataLoss,
                       HasSubstr("relation id needs 4 bytes at offset 0 but only 3")));
  EXPECT_EQ(reader.offset(), 0u);  // A failed read consumes nothing.
  EXPECT_THAT(reader.ReadBytes(4, "value"), StatusIs(absl::StatusCode::kDataLoss));
  EXPECT_EQ(*reader.ReadBytes(3, "value"), absl::string_view("\x00\x01\x02", 3));
  EXPECT_THAT(reader.ReadUint8("tag"), StatusIs(absl::StatusCode::kDataLoss));
}

TEST(ByteReaderTest, CStrings) {
  const std::vector<uint8_t> bytes = {'a', 'b', 0, 0, 'c'};
  ByteReader reader(bytes);
  EXPECT_EQ(*reader.ReadCString("first"), "ab");
  EXPECT_EQ(*reader.ReadCString("empty"), "");
  EXPECT_THAT(reader.ReadCString("relation name"),
              StatusIs(absl::StatusCode::kDataLoss,
                       HasSubstr("relation name at offset 4 has no terminating NUL")));
}

TEST(ByteReaderTest, TrailingBytesAreAnError) {
  const std::vector<uint8_t> bytes = {1, 2};
  ByteReader reader(bytes);
  ASSERT_THAT(reader.ReadUint8("a"), IsOk());
  EXPECT_THAT(reader.ExpectEnd("Begin"),
              StatusIs(absl::StatusCode::kDataLoss, HasSubstr("Begin has 1 unexpected")));
}

TEST(ByteReaderTest, EmptyInput) {
  ByteReader reader(absl::Span<const uint8_t>{});
  EXPECT_THAT(reader.ReadUint8("tag"), StatusIs(absl::StatusCode::kDataLoss));
  EXPECT_THAT(reader.ReadCString("s"), StatusIs(absl::StatusCode::kDataLoss));
  EXPECT_THAT(reader.ExpectEnd("m"), IsOk());
}

TEST(ByteReaderTest, HugeLengthDoesNotOverflow) {
  const std::vector<uint8_t> bytes = {1, 2, 3};
  ByteReader reader(bytes);
  ASSERT_THAT(reader.ReadUint8("a"), IsOk());
  EXPECT_THAT(reader.ReadBytes(SIZE_MAX, "value"), StatusIs(absl::StatusCode::kDataLoss));
}

}  // namespace
}  // namespace walfeed::replication
