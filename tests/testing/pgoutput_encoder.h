// Test-only pgoutput and walsender encoder: the writing half that walfeed itself
// never needs.
//
// There is one Encode* function per PostgreSQL logicalrep_write_* function. Each
// writes the fields in the same order and widths as PostgreSQL 15-17 does, so a
// decoder test can build its input from a typed message and compare the decoded
// result with that message. The encoder checks nothing: it writes whatever flags,
// kinds and tags it is given, so tests can also use it to build malformed input.
// The optional xid of DML, Relation, Type, Truncate and Message is written only
// when set (PostgreSQL writes it only inside a stream block). A Stream Abort's
// abort_lsn decides whether abort_lsn and abort_time are written (streaming =
// parallel). An Update's old tuple is written only when old_kind is not kNone.
//
// MessagesEqual and DescribeMessage exist because the message structs define no
// operator== of their own; tests and the fuzz target compare messages with them.
#ifndef WALFEED_TESTS_TESTING_PGOUTPUT_ENCODER_H_
#define WALFEED_TESTS_TESTING_PGOUTPUT_ENCODER_H_

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "replication/lsn.h"
#include "replication/pgoutput.h"

namespace walfeed::testing {

// Appends big-endian fields to a byte vector, the way PostgreSQL's pq_send*
// functions do. Tests use it to write malformed messages field by field.
class ByteWriter {
 public:
  ByteWriter& Uint8(uint8_t value);
  ByteWriter& Int16(int16_t value);
  ByteWriter& Uint32(uint32_t value);
  ByteWriter& Int32(int32_t value);
  ByteWriter& Uint64(uint64_t value);
  ByteWriter& Int64(int64_t value);
  ByteWriter& Lsn(replication::Lsn lsn);
  // The bytes followed by a NUL (pq_sendstring).
  ByteWriter& CString(absl::string_view text);
  // The bytes as they are, with no length and no NUL (pq_sendbytes).
  ByteWriter& Bytes(absl::string_view bytes);
  ByteWriter& Bytes(absl::Span<const uint8_t> bytes);

  const std::vector<uint8_t>& bytes() const { return bytes_; }
  std::vector<uint8_t> Take() { return std::move(bytes_); }

 private:
  std::vector<uint8_t> bytes_;
};

// One function per logicalrep_write_*.
std::vector<uint8_t> EncodeBegin(const replication::pgoutput::Begin& m);
std::vector<uint8_t> EncodeCommit(const replication::pgoutput::Commit& m);
std::vector<uint8_t> EncodeOrigin(const replication::pgoutput::Origin& m);
std::vector<uint8_t> EncodeRelation(const replication::pgoutput::Relation& m);
std::vector<uint8_t> EncodeType(const replication::pgoutput::Type& m);
std::vector<uint8_t> EncodeInsert(const replication::pgoutput::Insert& m);
std::vector<uint8_t> EncodeUpdate(const replication::pgoutput::Update& m);
std::vector<uint8_t> EncodeDelete(const replication::pgoutput::Delete& m);
std::vector<uint8_t> EncodeTruncate(const replication::pgoutput::Truncate& m);
std::vector<uint8_t> EncodeMessage(const replication::pgoutput::LogicalMessage& m);
std::vector<uint8_t> EncodeStreamStart(const replication::pgoutput::StreamStart& m);
std::vector<uint8_t> EncodeStreamStop(const replication::pgoutput::StreamStop& m);
std::vector<uint8_t> EncodeStreamCommit(const replication::pgoutput::StreamCommit& m);
std::vector<uint8_t> EncodeStreamAbort(const replication::pgoutput::StreamAbort& m);
std::vector<uint8_t> EncodeBeginPrepare(const replication::pgoutput::BeginPrepare& m);
std::vector<uint8_t> EncodePrepare(const replication::pgoutput::Prepare& m);
std::vector<uint8_t> EncodeStreamPrepare(const replication::pgoutput::StreamPrepare& m);
std::vector<uint8_t> EncodeCommitPrepared(const replication::pgoutput::CommitPrepared& m);
std::vector<uint8_t> EncodeRollbackPrepared(const replication::pgoutput::RollbackPrepared& m);

// Dispatches to the Encode* function of the message's type.
std::vector<uint8_t> Encode(const replication::pgoutput::Message& message);

// A walsender XLogData ('w') CopyData frame carrying `payload`.
std::vector<uint8_t> EncodeXLogData(replication::Lsn data_start, replication::Lsn wal_end,
                                    int64_t send_time, absl::Span<const uint8_t> payload);

// A walsender primary keepalive ('k') CopyData frame.
std::vector<uint8_t> EncodeKeepalive(replication::Lsn wal_end, int64_t send_time,
                                     bool reply_requested);

// A message with a stable CamelCase name, for parameterized tests and seed files.
struct NamedMessage {
  std::string name;
  replication::pgoutput::Message message;
};

// Samples of every message type and of every shape the decoder tells apart: all
// four tuple kinds (including an empty text value and binary bytes with NULs), an
// Update with no old tuple, an old key and an old row, a Stream Abort with and
// without its abort position, and each xid-carrying message both outside a
// stream block (xid unset) and inside one (xid set, name ending in "InStream").
std::vector<NamedMessage> SampleMessages();

// Every DecodeOptions (protocol 1-4, in or out of a stream block, parallel
// streaming or not) under which PostgreSQL could send `message` as encoded:
// stream messages need protocol 2, a set optional xid needs in_stream_block (and
// an unset one needs it clear), and a Stream Abort's abort_lsn needs
// streaming_parallel (protocol 4). Never empty.
std::vector<replication::pgoutput::DecodeOptions> ValidDecodeOptions(
    const replication::pgoutput::Message& message);

// Field-by-field equality of two messages (same alternative, same values).
bool MessagesEqual(const replication::pgoutput::Message& a,
                   const replication::pgoutput::Message& b);

// A one-line human-readable rendering for test failures, e.g.
// Insert{xid=-, relation_id=16384, new=[t"1", n, u, b"\x00\xff"]}.
std::string DescribeMessage(const replication::pgoutput::Message& message);

}  // namespace walfeed::testing

#endif  // WALFEED_TESTS_TESTING_PGOUTPUT_ENCODER_H_
