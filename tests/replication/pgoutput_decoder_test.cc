// Tests for pgoutput::Decode.
//
// Three kinds of evidence, as house rule 4 asks:
//  * round trips: every sample message (tests/testing's SampleMessages, which
//    covers every type and shape) is encoded with the PostgreSQL-mirroring test
//    encoder and decoded under every option set where PostgreSQL could send it;
//  * hand-written byte vectors that pin the wire layout independently of the
//    encoder (if both the encoder and the decoder drifted the same way, the round
//    trips would still pass, these would not);
//  * malformed input: every proper prefix, a trailing byte, and one test per
//    rejection rule, each checking that the error names the message and field.
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "absl/types/variant.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "replication/pgoutput.h"
#include "tests/testing/pgoutput_encoder.h"
#include "tests/testing/status_matchers.h"

namespace walfeed::replication::pgoutput {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;
using ::testing::StartsWith;
using ::walfeed::testing::ByteWriter;
using ::walfeed::testing::DescribeMessage;
using ::walfeed::testing::Encode;
using ::walfeed::testing::IsOk;
using ::walfeed::testing::MessagesEqual;
using ::walfeed::testing::NamedMessage;
using ::walfeed::testing::SampleMessages;
using ::walfeed::testing::StatusIs;
using ::walfeed::testing::ValidDecodeOptions;

MATCHER_P(DecodesTo, expected, "decodes to " + DescribeMessage(expected)) {
  const absl::StatusOr<Message>& decoded = arg;
  if (!decoded.ok()) {
    *result_listener << "status is " << decoded.status();
    return false;
  }
  *result_listener << "decoded " << DescribeMessage(*decoded);
  return MessagesEqual(*decoded, expected);
}

// Decode with a std::vector, which is what the tests build.
absl::StatusOr<Message> DecodeBytes(const std::vector<uint8_t>& bytes,
                                    const DecodeOptions& options) {
  return Decode(absl::MakeConstSpan(bytes), options);
}

DecodeOptions Proto(uint32_t version, bool in_stream_block = false,
                    bool streaming_parallel = false) {
  DecodeOptions options;
  options.protocol_version = version;
  options.in_stream_block = in_stream_block;
  options.streaming_parallel = streaming_parallel;
  return options;
}

std::string Describe(const DecodeOptions& options) {
  return "protocol " + std::to_string(options.protocol_version) +
         (options.in_stream_block ? ", in stream block" : "") +
         (options.streaming_parallel ? ", streaming parallel" : "");
}

// The name every error of a message starts with. Spelled out here, not taken from
// the decoder, so that a renamed message shows up as a test failure.
std::string NameOf(char tag) {
  switch (tag) {
    case 'B':
      return "Begin";
    case 'C':
      return "Commit";
    case 'O':
      return "Origin";
    case 'R':
      return "Relation";
    case 'Y':
      return "Type";
    case 'I':
      return "Insert";
    case 'U':
      return "Update";
    case 'D':
      return "Delete";
    case 'T':
      return "Truncate";
    case 'M':
      return "Message";
    case 'S':
      return "Stream Start";
    case 'E':
      return "Stream Stop";
    case 'c':
      return "Stream Commit";
    case 'A':
      return "Stream Abort";
    case 'b':
      return "Begin Prepare";
    case 'P':
      return "Prepare";
    case 'p':
      return "Stream Prepare";
    case 'K':
      return "Commit Prepared";
    case 'r':
      return "Rollback Prepared";
  }
  return "?";
}

// ---------------------------------------------------------------------------
// Round trips, prefixes and trailing bytes for every sample.

class SampleTest : public ::testing::TestWithParam<NamedMessage> {};

TEST_P(SampleTest, HasAtLeastOneValidOptionSet) {
  EXPECT_FALSE(ValidDecodeOptions(GetParam().message).empty());
}

TEST_P(SampleTest, RoundTripsUnderEveryValidOptionSet) {
  const Message& message = GetParam().message;
  const std::vector<uint8_t> bytes = Encode(message);
  ASSERT_FALSE(bytes.empty());
  EXPECT_EQ(static_cast<char>(bytes[0]), Tag(message));
  for (const DecodeOptions& options : ValidDecodeOptions(message)) {
    SCOPED_TRACE(Describe(options));
    absl::StatusOr<Message> decoded = DecodeBytes(bytes, options);
    EXPECT_THAT(decoded, DecodesTo(message));
    if (decoded.ok()) {
      EXPECT_EQ(Tag(*decoded), Tag(message));
      // Strict decoding means accepted bytes re-encode to themselves.
      EXPECT_EQ(Encode(*decoded), bytes);
    }
  }
}

TEST_P(SampleTest, EveryProperPrefixIsDataLossNamingTheMessage) {
  const Message& message = GetParam().message;
  const std::vector<uint8_t> bytes = Encode(message);
  for (const DecodeOptions& options : ValidDecodeOptions(message)) {
    SCOPED_TRACE(Describe(options));
    EXPECT_THAT(Decode(absl::Span<const uint8_t>(), options),
                StatusIs(absl::StatusCode::kDataLoss, HasSubstr("empty")));
    for (size_t length = 1; length < bytes.size(); ++length) {
      SCOPED_TRACE("prefix length " + std::to_string(length));
      EXPECT_THAT(Decode(absl::MakeConstSpan(bytes.data(), length), options),
                  StatusIs(absl::StatusCode::kDataLoss, StartsWith(NameOf(Tag(message)) + ": ")));
    }
  }
}

TEST_P(SampleTest, TrailingByteIsDataLoss) {
  const Message& message = GetParam().message;
  std::vector<uint8_t> bytes = Encode(message);
  bytes.push_back(0);
  for (const DecodeOptions& options : ValidDecodeOptions(message)) {
    SCOPED_TRACE(Describe(options));
    EXPECT_THAT(
        DecodeBytes(bytes, options),
        StatusIs(absl::StatusCode::kDataLoss, AllOf(StartsWith(NameOf(Tag(message)) + ": "),
                                                    HasSubstr("1 unexpected trailing bytes"))));
  }
}

INSTANTIATE_TEST_SUITE_P(AllMessages, SampleTest, ::testing::ValuesIn(SampleMessages()),
                         [](const ::testing::TestParamInfo<NamedMessage>& info) {
                           return info.param.name;
                         });

TEST(SampleMessagesTest, CoverEveryMessageTypeAndTag) {
  std::string tags;
  for (const NamedMessage& sample : SampleMessages()) {
    if (tags.find(Tag(sample.message)) == std::string::npos) tags += Tag(sample.message);
  }
  EXPECT_THAT(tags, ::testing::UnorderedElementsAreArray(std::string("BCORYIUDTMSEcAbPpKr")));
}

// ---------------------------------------------------------------------------
// Hand-written vectors: the layout, byte by byte, without the encoder.

TEST(PgoutputLayoutTest, Begin) {
  const std::vector<uint8_t> bytes = {
      'B',                                             // tag
      0x00, 0x00, 0x00, 0x00, 0x01, 0x6B, 0x37, 0x48,  // final_lsn 0/16B3748
      0x00, 0x02, 0xBF, 0xF2, 0xD0, 0xC8, 0x90, 0x40,  // commit_time
      0x00, 0x00, 0x02, 0xE6,                          // xid 742
  };
  Begin expected;
  expected.final_lsn = Lsn(0x16B3748);
  expected.commit_time = 0x0002BFF2D0C89040;
  expected.xid = 742;
  for (const DecodeOptions& options : {Proto(1), Proto(4, /*in_stream_block=*/true)}) {
    // Begin never carries a stream xid, even inside a stream block.
    EXPECT_THAT(DecodeBytes(bytes, options), DecodesTo(Message(expected)));
  }
  EXPECT_EQ(walfeed::testing::EncodeBegin(expected), bytes);
}

TEST(PgoutputLayoutTest, Insert) {
  const std::vector<uint8_t> bytes = {
      'I',                                             // tag
      0x00, 0x00, 0x40, 0x01,                          // relation id 16385
      'N',                                             // new tuple follows
      0x00, 0x04,                                      // 4 columns
      't',  0x00, 0x00, 0x00, 0x02, '4',  '2',         // text "42"
      'n',                                             // NULL
      'u',                                             // unchanged TOAST value
      'b',  0x00, 0x00, 0x00, 0x03, 0x00, 0xFF, 0x00,  // binary 00 FF 00
  };
  Insert expected;
  expected.relation_id = 16385;
  expected.new_tuple.columns = {{TupleValue::Kind::kText, "42"},
                                {TupleValue::Kind::kNull, ""},
                                {TupleValue::Kind::kUnchangedToast, ""},
                                {TupleValue::Kind::kBinary, std::string("\x00\xff\x00", 3)}};
  EXPECT_THAT(DecodeBytes(bytes, Proto(1)), DecodesTo(Message(expected)));
  EXPECT_EQ(walfeed::testing::EncodeInsert(expected), bytes);
}

TEST(PgoutputLayoutTest, InsertInsideStreamBlockStartsWithXid) {
  const std::vector<uint8_t> bytes = {
      'I',                           // tag
      0x00, 0x00, 0x04, 0xD2,        // xid 1234 (only inside a stream block)
      0x00, 0x00, 0x40, 0x01,        // relation id 16385
      'N',                           // new tuple follows
      0x00, 0x01,                    // 1 column
      't',  0x00, 0x00, 0x00, 0x00,  // text "" (empty string, not NULL)
  };
  Insert expected;
  expected.xid = 1234;
  expected.relation_id = 16385;
  expected.new_tuple.columns = {{TupleValue::Kind::kText, ""}};
  EXPECT_THAT(DecodeBytes(bytes, Proto(2, /*in_stream_block=*/true)), DecodesTo(Message(expected)));
  EXPECT_EQ(walfeed::testing::EncodeInsert(expected), bytes);
}

TEST(PgoutputLayoutTest, Relation) {
  const std::vector<uint8_t> bytes = {
      'R',                                     // tag
      0x00, 0x00, 0x40, 0x01,                  // relation id 16385
      'p',  'u',  'b',  'l',  'i', 'c', 0x00,  // namespace "public"
      't',  0x00,                              // relation name "t"
      'f',                                     // replica identity FULL
      0x00, 0x02,                              // 2 columns
      0x01, 'i',  'd',  0x00,                  // key column "id"
      0x00, 0x00, 0x00, 0x17,                  //   type int4 (23)
      0xFF, 0xFF, 0xFF, 0xFF,                  //   typmod -1
      0x00, 'v',  0x00,                        // non-key column "v"
      0x00, 0x00, 0x04, 0x13,                  //   type varchar (1043)
      0x00, 0x00, 0x00, 0x0E,                  //   typmod 14 (varchar(10))
  };
  Relation expected;
  expected.relation_id = 16385;
  expected.namespace_name = "public";
  expected.relation_name = "t";
  expected.replica_identity = 'f';
  expected.columns = {{1, "id", 23, -1}, {0, "v", 1043, 14}};
  EXPECT_THAT(DecodeBytes(bytes, Proto(1)), DecodesTo(Message(expected)));
  EXPECT_EQ(walfeed::testing::EncodeRelation(expected), bytes);
  const auto decoded = DecodeBytes(bytes, Proto(1));
  ASSERT_THAT(decoded, IsOk());
  EXPECT_TRUE(absl::get<Relation>(*decoded).columns[0].is_key());
  EXPECT_FALSE(absl::get<Relation>(*decoded).columns[1].is_key());
}

TEST(PgoutputLayoutTest, Commit) {
  const std::vector<uint8_t> bytes = {
      'C',                                             // tag
      0x00,                                            // flags
      0x00, 0x00, 0x00, 0x00, 0x01, 0x6B, 0x37, 0x48,  // commit_lsn 0/16B3748
      0x00, 0x00, 0x00, 0x00, 0x01, 0x6B, 0x37, 0x78,  // end_lsn 0/16B3778
      0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x07,  // commit_time 7
  };
  Commit expected;
  expected.commit_lsn = Lsn(0x16B3748);
  expected.end_lsn = Lsn(0x16B3778);
  expected.commit_time = 7;
  EXPECT_THAT(DecodeBytes(bytes, Proto(1)), DecodesTo(Message(expected)));
  EXPECT_EQ(walfeed::testing::EncodeCommit(expected), bytes);
}

TEST(PgoutputLayoutTest, StreamAbortParallelCarriesAbortPosition) {
  const std::vector<uint8_t> bytes = {
      'A',                                             // tag
      0x00, 0x00, 0x04, 0xD2,                          // xid 1234
      0x00, 0x00, 0x04, 0xD8,                          // subxid 1240
      0x00, 0x00, 0x00, 0x01, 0x00, 0x00, 0x00, 0x10,  // abort_lsn 1/10
      0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF,  // abort_time -1
  };
  StreamAbort expected;
  expected.xid = 1234;
  expected.subxid = 1240;
  expected.abort_lsn = Lsn((uint64_t{1} << 32) | 0x10);
  expected.abort_time = -1;
  EXPECT_THAT(DecodeBytes(bytes, Proto(4, false, /*streaming_parallel=*/true)),
              DecodesTo(Message(expected)));
  // Without parallel streaming the same bytes have 16 too many.
  EXPECT_THAT(DecodeBytes(bytes, Proto(4)),
              StatusIs(absl::StatusCode::kDataLoss,
                       HasSubstr("Stream Abort: message has 16 unexpected trailing bytes")));
  const std::vector<uint8_t> short_form(bytes.begin(), bytes.begin() + 9);
  EXPECT_THAT(DecodeBytes(short_form, Proto(4, false, true)),
              StatusIs(absl::StatusCode::kDataLoss,
                       HasSubstr("Stream Abort: truncated message: reading abort_lsn")));
  EXPECT_EQ(walfeed::testing::EncodeStreamAbort(expected), bytes);
}

// ---------------------------------------------------------------------------
// Tags, versions and options.

TEST(PgoutputDecodeTest, EmptyInputIsDataLoss) {
  EXPECT_THAT(Decode(absl::Span<const uint8_t>(), Proto(1)),
              StatusIs(absl::StatusCode::kDataLoss, HasSubstr("empty pgoutput message")));
}

TEST(PgoutputDecodeTest, UnknownTagIsDataLoss) {
  EXPECT_THAT(
      DecodeBytes({'Z', 0, 0}, Proto(4)),
      StatusIs(absl::StatusCode::kDataLoss, HasSubstr("unknown pgoutput message tag 'Z' (0x5A)")));
  EXPECT_THAT(DecodeBytes({0x00}, Proto(4)),
              StatusIs(absl::StatusCode::kDataLoss, HasSubstr("tag 0x00")));
  // 'w' is walsender framing, not a pgoutput message: a caller that forgot to
  // strip the XLogData header must fail loudly.
  EXPECT_THAT(DecodeBytes({'w'}, Proto(4)),
              StatusIs(absl::StatusCode::kDataLoss, HasSubstr("unknown")));
}

TEST(PgoutputDecodeTest, StreamMessagesNeedProtocolTwo) {
  for (const NamedMessage& sample : SampleMessages()) {
    const char tag = Tag(sample.message);
    if (std::string("SEcAp").find(tag) == std::string::npos) continue;
    if (const auto* abort = absl::get_if<StreamAbort>(&sample.message);
        abort != nullptr && abort->abort_lsn.has_value()) {
      continue;  // Only decodable with streaming_parallel, which itself needs 4.
    }
    SCOPED_TRACE(sample.name);
    EXPECT_THAT(
        DecodeBytes(Encode(sample.message), Proto(1)),
        StatusIs(absl::StatusCode::kDataLoss, AllOf(StartsWith(NameOf(tag) + ": "),
                                                    HasSubstr("needs protocol version 2 or later"),
                                                    HasSubstr("protocol version 1"))));
    EXPECT_THAT(DecodeBytes(Encode(sample.message), Proto(2)), IsOk());
  }
}

TEST(PgoutputDecodeTest, TwoPhaseMessagesDecodeUnderProtocolOne) {
  // A slot created with TWO_PHASE sends these whatever version was requested.
  for (const NamedMessage& sample : SampleMessages()) {
    const char tag = Tag(sample.message);
    if (std::string("bPKr").find(tag) == std::string::npos) continue;
    SCOPED_TRACE(sample.name);
    EXPECT_THAT(DecodeBytes(Encode(sample.message), Proto(1)), DecodesTo(sample.message));
  }
}

TEST(PgoutputDecodeTest, InconsistentOptionsAreInvalidArgument) {
  const std::vector<uint8_t> stop = {'E'};
  EXPECT_THAT(DecodeBytes(stop, Proto(0)),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("protocol version 0")));
  EXPECT_THAT(DecodeBytes(stop, Proto(5)),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("protocol version 5")));
  EXPECT_THAT(DecodeBytes(stop, Proto(1, /*in_stream_block=*/true)),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("in_stream_block")));
  EXPECT_THAT(DecodeBytes(stop, Proto(3, false, /*streaming_parallel=*/true)),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("streaming_parallel")));
}

TEST(PgoutputDecodeTest, StreamXidIsReadOnlyInsideAStreamBlock) {
  Truncate truncate;
  truncate.relation_ids = {16385};
  const std::vector<uint8_t> outside = Encode(truncate);
  truncate.xid = 99;
  const std::vector<uint8_t> inside = Encode(truncate);
  EXPECT_EQ(inside.size(), outside.size() + 4);
  EXPECT_THAT(DecodeBytes(inside, Proto(2, true)), DecodesTo(Message(truncate)));
  // Read outside a block, the xid is taken for the relation count and the rest
  // no longer fits.
  EXPECT_THAT(DecodeBytes(inside, Proto(2, false)),
              StatusIs(absl::StatusCode::kDataLoss, StartsWith("Truncate: ")));
  EXPECT_THAT(DecodeBytes(outside, Proto(2, true)),
              StatusIs(absl::StatusCode::kDataLoss, StartsWith("Truncate: ")));
}

// ---------------------------------------------------------------------------
// Flags.

TEST(PgoutputDecodeTest, UnusedFlagsMustBeZero) {
  Commit commit{1, Lsn(1), Lsn(2), 3};
  StreamCommit stream_commit{7, 1, Lsn(1), Lsn(2), 3};
  Prepare prepare;
  prepare.flags = 0x80;
  prepare.prepare_lsn = Lsn(1);
  prepare.end_lsn = Lsn(2);
  StreamPrepare stream_prepare;
  static_cast<PrepareFields&>(stream_prepare) = prepare;
  CommitPrepared commit_prepared{2, Lsn(1), Lsn(2), 3, 4, "g"};
  RollbackPrepared rollback_prepared{1, Lsn(1), Lsn(2), 3, 4, 5, "g"};
  const std::vector<std::pair<Message, std::string>> cases = {
      {commit, "Commit: flags 0x01 are not 0"},
      {stream_commit, "Stream Commit: flags 0x01 are not 0"},
      {prepare, "Prepare: flags 0x80 are not 0"},
      {stream_prepare, "Stream Prepare: flags 0x80 are not 0"},
      {commit_prepared, "Commit Prepared: flags 0x02 are not 0"},
      {rollback_prepared, "Rollback Prepared: flags 0x01 are not 0"},
  };
  for (const auto& [message, error] : cases) {
    EXPECT_THAT(DecodeBytes(Encode(message), Proto(4)),
                StatusIs(absl::StatusCode::kDataLoss, HasSubstr(error)));
  }
}

TEST(PgoutputDecodeTest, MessageFlagsAreZeroOrTransactional) {
  LogicalMessage message;
  message.lsn = Lsn(5);
  message.prefix = "p";
  for (uint8_t flags : {0, 1}) {
    message.flags = flags;
    EXPECT_THAT(DecodeBytes(Encode(message), Proto(1)), DecodesTo(Message(message)));
  }
  message.flags = 2;
  EXPECT_THAT(
      DecodeBytes(Encode(message), Proto(1)),
      StatusIs(absl::StatusCode::kDataLoss, HasSubstr("Message: flags 0x02 are not 0 or 1")));
  message.flags = 0xFF;
  EXPECT_THAT(DecodeBytes(Encode(message), Proto(1)),
              StatusIs(absl::StatusCode::kDataLoss, HasSubstr("Message: flags 0xFF")));
}

TEST(PgoutputDecodeTest, TruncateOptionsOnlyCascadeAndRestartIdentity) {
  Truncate truncate;
  truncate.relation_ids = {1, 2};
  for (uint8_t options : {0, 1, 2, 3}) {
    truncate.options = options;
    EXPECT_THAT(DecodeBytes(Encode(truncate), Proto(1)), DecodesTo(Message(truncate)));
  }
  for (uint8_t options : {4, 8, 0x80, 0xFF}) {
    truncate.options = options;
    EXPECT_THAT(DecodeBytes(Encode(truncate), Proto(1)),
                StatusIs(absl::StatusCode::kDataLoss, HasSubstr("Truncate: options 0x")));
  }
}

TEST(PgoutputDecodeTest, StreamStartFirstSegmentIsZeroOrOne) {
  const std::vector<uint8_t> bytes = ByteWriter().Uint8('S').Uint32(7).Uint8(2).Take();
  EXPECT_THAT(DecodeBytes(bytes, Proto(2)),
              StatusIs(absl::StatusCode::kDataLoss,
                       HasSubstr("Stream Start: first_segment 0x02 is not 0 or 1")));
}

TEST(PgoutputDecodeTest, RelationReplicaIdentityAndColumnFlags) {
  Relation relation;
  relation.relation_id = 1;
  relation.relation_name = "t";
  relation.columns = {{0, "a", 23, -1}, {0, "b", 23, -1}};
  for (char identity : {'d', 'n', 'f', 'i'}) {
    relation.replica_identity = identity;
    EXPECT_THAT(DecodeBytes(Encode(relation), Proto(1)), DecodesTo(Message(relation)));
  }
  relation.replica_identity = 'x';
  EXPECT_THAT(DecodeBytes(Encode(relation), Proto(1)),
              StatusIs(absl::StatusCode::kDataLoss,
                       HasSubstr("Relation: replica identity 'x' (0x78) is not")));
  relation.replica_identity = 'd';
  relation.columns[1].flags = 2;
  EXPECT_THAT(DecodeBytes(Encode(relation), Proto(1)),
              StatusIs(absl::StatusCode::kDataLoss,
                       HasSubstr("Relation: column 2 of 2: flags 0x02 are not 0 or 1")));
}

// ---------------------------------------------------------------------------
// Tuple tags and kinds.

TEST(PgoutputDecodeTest, InsertRequiresNewTupleTag) {
  const std::vector<uint8_t> bytes = ByteWriter().Uint8('I').Uint32(1).Uint8('K').Int16(0).Take();
  EXPECT_THAT(DecodeBytes(bytes, Proto(1)),
              StatusIs(absl::StatusCode::kDataLoss,
                       HasSubstr("Insert: tuple tag is 'K' (0x4B), expected 'N'")));
}

TEST(PgoutputDecodeTest, UpdateOldTupleTagThenNewTupleTag) {
  const std::vector<uint8_t> bad_first =
      ByteWriter().Uint8('U').Uint32(1).Uint8('X').Int16(0).Take();
  EXPECT_THAT(DecodeBytes(bad_first, Proto(1)),
              StatusIs(absl::StatusCode::kDataLoss,
                       HasSubstr("Update: tuple tag is 'X' (0x58), expected 'K'")));
  // An old tuple must be followed by 'N', not by a second old tuple.
  const std::vector<uint8_t> old_twice =
      ByteWriter().Uint8('U').Uint32(1).Uint8('K').Int16(0).Uint8('O').Int16(0).Take();
  EXPECT_THAT(DecodeBytes(old_twice, Proto(1)),
              StatusIs(absl::StatusCode::kDataLoss,
                       HasSubstr("Update: tuple tag is 'O' (0x4F), expected 'N'")));
  // An old tuple with no new tuple at all.
  const std::vector<uint8_t> no_new = ByteWriter().Uint8('U').Uint32(1).Uint8('O').Int16(0).Take();
  EXPECT_THAT(DecodeBytes(no_new, Proto(1)),
              StatusIs(absl::StatusCode::kDataLoss,
                       HasSubstr("Update: truncated message: reading tuple tag")));
}

TEST(PgoutputDecodeTest, DeleteRequiresOldKeyOrOldRow) {
  for (uint8_t tag : {uint8_t{'N'}, uint8_t{0}}) {
    const std::vector<uint8_t> bytes = ByteWriter().Uint8('D').Uint32(1).Uint8(tag).Int16(0).Take();
    EXPECT_THAT(DecodeBytes(bytes, Proto(1)),
                StatusIs(absl::StatusCode::kDataLoss,
                         HasSubstr("expected 'K' (old key) or 'O' (old row)")));
  }
}

TEST(PgoutputDecodeTest, UnknownTupleKindNamesTheColumn) {
  const std::vector<uint8_t> bytes =
      ByteWriter().Uint8('I').Uint32(1).Uint8('N').Int16(3).Uint8('n').Uint8('x').Uint8('n').Take();
  EXPECT_THAT(DecodeBytes(bytes, Proto(1)),
              StatusIs(absl::StatusCode::kDataLoss,
                       HasSubstr("Insert: new tuple column 2 of 3: kind 'x' (0x78) is not "
                                 "'n', 'u', 't' or 'b'")));
  const std::vector<uint8_t> old =
      ByteWriter().Uint8('U').Uint32(1).Uint8('O').Int16(1).Uint8(0x01).Take();
  EXPECT_THAT(DecodeBytes(old, Proto(1)),
              StatusIs(absl::StatusCode::kDataLoss,
                       HasSubstr("Update: old tuple column 1 of 1: kind 0x01")));
}

// ---------------------------------------------------------------------------
// Counts and lengths.

TEST(PgoutputDecodeTest, NegativeCountsAreDataLoss) {
  EXPECT_THAT(DecodeBytes(ByteWriter().Uint8('I').Uint32(1).Uint8('N').Int16(-1).Take(), Proto(1)),
              StatusIs(absl::StatusCode::kDataLoss,
                       HasSubstr("Insert: new tuple column count -1 is negative")));
  EXPECT_THAT(DecodeBytes(ByteWriter()
                              .Uint8('R')
                              .Uint32(1)
                              .CString("s")
                              .CString("t")
                              .Uint8('d')
                              .Int16(INT16_MIN)
                              .Take(),
                          Proto(1)),
              StatusIs(absl::StatusCode::kDataLoss,
                       HasSubstr("Relation: column count -32768 is negative")));
  EXPECT_THAT(
      DecodeBytes(ByteWriter().Uint8('T').Int32(-1).Uint8(0).Take(), Proto(1)),
      StatusIs(absl::StatusCode::kDataLoss, HasSubstr("Truncate: relation count -1 is negative")));
}

TEST(PgoutputDecodeTest, NegativeLengthsAreDataLoss) {
  EXPECT_THAT(
      DecodeBytes(ByteWriter().Uint8('I').Uint32(1).Uint8('N').Int16(1).Uint8('t').Int32(-1).Take(),
                  Proto(1)),
      StatusIs(absl::StatusCode::kDataLoss,
               HasSubstr("Insert: new tuple column 1 of 1: value length -1 is "
                         "negative")));
  EXPECT_THAT(
      DecodeBytes(ByteWriter().Uint8('M').Uint8(0).Uint64(1).CString("p").Int32(INT32_MIN).Take(),
                  Proto(1)),
      StatusIs(absl::StatusCode::kDataLoss,
               HasSubstr("Message: content length -2147483648 is negative")));
}

TEST(PgoutputDecodeTest, HugeLengthsWithFewBytesAreDataLossNotAllocations) {
  // Each of these would ask for gigabytes if the length were trusted.
  EXPECT_THAT(DecodeBytes(ByteWriter()
                              .Uint8('I')
                              .Uint32(1)
                              .Uint8('N')
                              .Int16(1)
                              .Uint8('b')
                              .Int32(0x7FFFFFFF)
                              .Bytes("abc")
                              .Take(),
                          Proto(1)),
              StatusIs(absl::StatusCode::kDataLoss,
                       AllOf(HasSubstr("Insert: new tuple column 1 of 1: truncated"),
                             HasSubstr("needs 2147483647 bytes"))));
  EXPECT_THAT(DecodeBytes(ByteWriter()
                              .Uint8('M')
                              .Uint8(1)
                              .Uint64(1)
                              .CString("p")
                              .Int32(0x7FFFFFFF)
                              .Bytes("abc")
                              .Take(),
                          Proto(1)),
              StatusIs(absl::StatusCode::kDataLoss, AllOf(HasSubstr("Message: truncated"),
                                                          HasSubstr("needs 2147483647 bytes"))));
  EXPECT_THAT(
      DecodeBytes(ByteWriter().Uint8('T').Int32(0x7FFFFFFF).Uint8(0).Uint32(1).Take(), Proto(1)),
      StatusIs(absl::StatusCode::kDataLoss,
               HasSubstr("Truncate: relation count 2147483647 needs")));
  EXPECT_THAT(
      DecodeBytes(ByteWriter().Uint8('I').Uint32(1).Uint8('N').Int16(0x7FFF).Uint8('n').Take(),
                  Proto(1)),
      StatusIs(absl::StatusCode::kDataLoss,
               HasSubstr("Insert: new tuple column count 32767 needs at least")));
  EXPECT_THAT(DecodeBytes(ByteWriter()
                              .Uint8('R')
                              .Uint32(1)
                              .CString("s")
                              .CString("t")
                              .Uint8('d')
                              .Int16(0x7FFF)
                              .Bytes("0123456789")
                              .Take(),
                          Proto(1)),
              StatusIs(absl::StatusCode::kDataLoss,
                       HasSubstr("Relation: column count 32767 needs at least 327670")));
}

TEST(PgoutputDecodeTest, MissingNulTerminatorIsDataLoss) {
  EXPECT_THAT(DecodeBytes(ByteWriter().Uint8('O').Uint64(1).Bytes("pg_1").Take(), Proto(1)),
              StatusIs(absl::StatusCode::kDataLoss,
                       HasSubstr("Origin: truncated message: origin name at offset 9 has no "
                                 "terminating NUL")));
  EXPECT_THAT(
      DecodeBytes(ByteWriter().Uint8('Y').Uint32(1).CString("ns").Bytes("typ").Take(), Proto(1)),
      StatusIs(absl::StatusCode::kDataLoss, HasSubstr("Type: truncated message: type name")));
  std::vector<uint8_t> prepare = Encode(Message(Prepare{{0, Lsn(1), Lsn(2), 3, 4, "gid"}}));
  prepare.pop_back();  // The gid's NUL.
  EXPECT_THAT(DecodeBytes(prepare, Proto(3)),
              StatusIs(absl::StatusCode::kDataLoss, HasSubstr("Prepare: truncated message: gid")));
}

TEST(PgoutputDecodeTest, TransactionLsnsMustBeValidLikePostgresReaders) {
  EXPECT_THAT(
      DecodeBytes(Encode(Message(Begin{Lsn(0), 1, 2})), Proto(1)),
      StatusIs(absl::StatusCode::kDataLoss, HasSubstr("Begin: final_lsn is 0/0 (invalid)")));
  EXPECT_THAT(DecodeBytes(Encode(Message(BeginPrepare{Lsn(1), Lsn(0), 1, 2, "g"})), Proto(3)),
              StatusIs(absl::StatusCode::kDataLoss, HasSubstr("Begin Prepare: end_lsn is 0/0")));
  EXPECT_THAT(DecodeBytes(Encode(Message(Prepare{{0, Lsn(0), Lsn(1), 1, 2, "g"}})), Proto(3)),
              StatusIs(absl::StatusCode::kDataLoss, HasSubstr("Prepare: prepare_lsn is 0/0")));
  EXPECT_THAT(
      DecodeBytes(Encode(Message(CommitPrepared{0, Lsn(0), Lsn(1), 1, 2, "g"})), Proto(3)),
      StatusIs(absl::StatusCode::kDataLoss, HasSubstr("Commit Prepared: commit_lsn is 0/0")));
  EXPECT_THAT(
      DecodeBytes(Encode(Message(RollbackPrepared{0, Lsn(1), Lsn(0), 1, 2, 3, "g"})), Proto(3)),
      StatusIs(absl::StatusCode::kDataLoss,
               HasSubstr("Rollback Prepared: rollback_end_lsn is 0/0")));
}

TEST(PgoutputTagTest, NamesEveryAlternative) {
  EXPECT_EQ(Tag(Begin{}), 'B');
  EXPECT_EQ(Tag(Commit{}), 'C');
  EXPECT_EQ(Tag(Origin{}), 'O');
  EXPECT_EQ(Tag(Relation{}), 'R');
  EXPECT_EQ(Tag(Type{}), 'Y');
  EXPECT_EQ(Tag(Insert{}), 'I');
  EXPECT_EQ(Tag(Update{}), 'U');
  EXPECT_EQ(Tag(Delete{}), 'D');
  EXPECT_EQ(Tag(Truncate{}), 'T');
  EXPECT_EQ(Tag(LogicalMessage{}), 'M');
  EXPECT_EQ(Tag(StreamStart{}), 'S');
  EXPECT_EQ(Tag(StreamStop{}), 'E');
  EXPECT_EQ(Tag(StreamCommit{}), 'c');
  EXPECT_EQ(Tag(StreamAbort{}), 'A');
  EXPECT_EQ(Tag(BeginPrepare{}), 'b');
  EXPECT_EQ(Tag(Prepare{}), 'P');
  EXPECT_EQ(Tag(StreamPrepare{}), 'p');
  EXPECT_EQ(Tag(CommitPrepared{}), 'K');
  EXPECT_EQ(Tag(RollbackPrepared{}), 'r');
}

}  // namespace
}  // namespace walfeed::replication::pgoutput
