// Tests for the walsender CopyData framing: XLogData and keepalive decoding, the
// 34-byte standby status update, and PostgreSQL-epoch time conversion. Frames are
// written out byte by byte so that the layout is pinned independently of the test
// encoder, which is checked against the same bytes.
#include "replication/copy_data.h"

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/civil_time.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "absl/types/variant.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/testing/pgoutput_encoder.h"
#include "tests/testing/status_matchers.h"

namespace walfeed::replication::copy_data {
namespace {

using ::testing::ElementsAre;
using ::testing::ElementsAreArray;
using ::testing::HasSubstr;
using ::walfeed::testing::IsOk;
using ::walfeed::testing::StatusIs;

absl::StatusOr<ServerMessage> DecodeBytes(const std::vector<uint8_t>& frame) {
  return Decode(absl::MakeConstSpan(frame));
}

const std::vector<uint8_t> kXLogData = {
    'w',                                             // tag
    0x00, 0x00, 0x00, 0x00, 0x01, 0x6B, 0x37, 0x48,  // dataStart 0/16B3748
    0x00, 0x00, 0x00, 0x01, 0x00, 0x00, 0x00, 0x20,  // walEnd 1/20
    0x00, 0x00, 0x00, 0x00, 0x00, 0x0F, 0x42, 0x40,  // sendTime 1000000 (00:00:01)
    'E',                                             // payload: pgoutput Stream Stop
};

const std::vector<uint8_t> kKeepalive = {
    'k',                                             // tag
    0x00, 0x00, 0x00, 0x02, 0x00, 0x00, 0x01, 0x00,  // walEnd 2/100
    0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFE,  // sendTime -2
    0x01,                                            // replyRequested
};

TEST(CopyDataDecodeTest, XLogData) {
  absl::StatusOr<ServerMessage> decoded = DecodeBytes(kXLogData);
  ASSERT_THAT(decoded, IsOk());
  const auto* data = absl::get_if<XLogData>(&*decoded);
  ASSERT_NE(data, nullptr);
  EXPECT_EQ(data->data_start, Lsn(0x16B3748));
  EXPECT_EQ(data->wal_end, Lsn((uint64_t{1} << 32) | 0x20));
  EXPECT_EQ(data->send_time, 1000000);
  EXPECT_THAT(data->payload, ElementsAre('E'));
  // The payload is a view into the frame, not a copy.
  EXPECT_EQ(data->payload.data(), kXLogData.data() + 25);

  EXPECT_EQ(walfeed::testing::EncodeXLogData(data->data_start, data->wal_end, data->send_time,
                                             data->payload),
            kXLogData);
}

TEST(CopyDataDecodeTest, Keepalive) {
  absl::StatusOr<ServerMessage> decoded = DecodeBytes(kKeepalive);
  ASSERT_THAT(decoded, IsOk());
  const auto* keepalive = absl::get_if<PrimaryKeepalive>(&*decoded);
  ASSERT_NE(keepalive, nullptr);
  EXPECT_EQ(keepalive->wal_end, Lsn((uint64_t{2} << 32) | 0x100));
  EXPECT_EQ(keepalive->send_time, -2);
  EXPECT_TRUE(keepalive->reply_requested);
  EXPECT_EQ(walfeed::testing::EncodeKeepalive(keepalive->wal_end, keepalive->send_time,
                                              keepalive->reply_requested),
            kKeepalive);

  std::vector<uint8_t> no_reply = kKeepalive;
  no_reply.back() = 0;
  decoded = DecodeBytes(no_reply);
  ASSERT_THAT(decoded, IsOk());
  EXPECT_FALSE(absl::get<PrimaryKeepalive>(*decoded).reply_requested);
}

TEST(CopyDataDecodeTest, KeepaliveReplyFlagOtherThanZeroOrOneIsDataLoss) {
  for (uint8_t flag : {2, 0x80, 0xFF}) {
    std::vector<uint8_t> frame = kKeepalive;
    frame.back() = flag;
    EXPECT_THAT(DecodeBytes(frame),
                StatusIs(absl::StatusCode::kDataLoss,
                         HasSubstr("replyRequested is " + std::to_string(flag))));
  }
}

TEST(CopyDataDecodeTest, UnknownTagIsDataLoss) {
  // 'r' is what we send, never what the server sends.
  for (uint8_t tag : {uint8_t{'r'}, uint8_t{'x'}, uint8_t{0}}) {
    std::vector<uint8_t> frame = kKeepalive;
    frame[0] = tag;
    EXPECT_THAT(DecodeBytes(frame),
                StatusIs(absl::StatusCode::kDataLoss, HasSubstr("unknown walsender message")));
  }
}

TEST(CopyDataDecodeTest, EmptyFrameIsDataLoss) {
  EXPECT_THAT(Decode(absl::Span<const uint8_t>()),
              StatusIs(absl::StatusCode::kDataLoss, HasSubstr("CopyData tag")));
}

TEST(CopyDataDecodeTest, EveryKeepalivePrefixIsDataLoss) {
  for (size_t length = 0; length < kKeepalive.size(); ++length) {
    SCOPED_TRACE("prefix length " + std::to_string(length));
    EXPECT_THAT(Decode(absl::MakeConstSpan(kKeepalive.data(), length)),
                StatusIs(absl::StatusCode::kDataLoss));
  }
}

TEST(CopyDataDecodeTest, EveryXLogDataHeaderPrefixIsDataLoss) {
  // Up to and including the bare 25-byte header (which has an empty payload).
  // Prefixes that cut into the payload are a shorter but well-framed payload;
  // spotting those is pgoutput::Decode's job.
  for (size_t length = 0; length < kXLogData.size(); ++length) {
    SCOPED_TRACE("prefix length " + std::to_string(length));
    EXPECT_THAT(Decode(absl::MakeConstSpan(kXLogData.data(), length)),
                StatusIs(absl::StatusCode::kDataLoss));
  }
}

TEST(CopyDataDecodeTest, KeepaliveTrailingByteIsDataLoss) {
  std::vector<uint8_t> frame = kKeepalive;
  frame.push_back(0);
  EXPECT_THAT(DecodeBytes(frame), StatusIs(absl::StatusCode::kDataLoss,
                                           HasSubstr("keepalive has 1 unexpected trailing bytes")));
}

TEST(CopyDataDecodeTest, EmptyXLogDataPayloadIsDataLoss) {
  const std::vector<uint8_t> header_only(kXLogData.begin(), kXLogData.begin() + 25);
  EXPECT_THAT(DecodeBytes(header_only),
              StatusIs(absl::StatusCode::kDataLoss, HasSubstr("empty payload")));
}

TEST(CopyDataEncodeTest, StandbyStatusUpdateIsThirtyFourBytes) {
  StandbyStatusUpdate update;
  update.write = Lsn(0x0102030405060708);
  update.flush = Lsn(0x1112131415161718);
  update.apply = Lsn(0x2122232425262728);
  update.client_time = -1;
  update.reply_requested = true;
  EXPECT_THAT(Encode(update),
              ElementsAreArray<uint8_t>({
                  'r',                                             // tag
                  0x01, 0x02, 0x03, 0x04, 0x05, 0x06, 0x07, 0x08,  // write
                  0x11, 0x12, 0x13, 0x14, 0x15, 0x16, 0x17, 0x18,  // flush
                  0x21, 0x22, 0x23, 0x24, 0x25, 0x26, 0x27, 0x28,  // apply
                  0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF,  // clientTime -1
                  0x01,                                            // replyRequested
              }));
  update.reply_requested = false;
  EXPECT_EQ(Encode(update).back(), 0);
  EXPECT_EQ(Encode(update).size(), kStandbyStatusUpdateSize);
}

TEST(CopyDataTimeTest, PostgresEpochIsTwoThousandUtc) {
  const absl::Time epoch =
      absl::FromCivil(absl::CivilSecond(2000, 1, 1, 0, 0, 0), absl::UTCTimeZone());
  EXPECT_EQ(ToPostgresMicros(epoch), 0);
  EXPECT_EQ(FromPostgresMicros(0), epoch);
  EXPECT_EQ(ToPostgresMicros(absl::UnixEpoch()), -kPostgresEpochUnixMicros);
  EXPECT_EQ(FromPostgresMicros(-kPostgresEpochUnixMicros), absl::UnixEpoch());
  const absl::Time later = epoch + absl::Hours(24) + absl::Microseconds(7);
  EXPECT_EQ(ToPostgresMicros(later), int64_t{86400000000} + 7);
  EXPECT_EQ(FromPostgresMicros(ToPostgresMicros(later)), later);
}

}  // namespace
}  // namespace walfeed::replication::copy_data
