// pgoutput decoder: turns the bytes of one XLogData payload into one typed message.
//
// Each Decode* function below is the reading twin of one of PostgreSQL's
// logicalrep_write_* functions and reads the fields in the order the writer sends
// them. The decoder is deliberately stricter than PostgreSQL's own readers where
// those are lenient (Truncate option bits, Message flags, Stream Start's
// first-segment byte, Relation column flags, replica identity): a value no
// walsender writes means the stream is not what we think it is, and guessing would
// turn a protocol problem into silently wrong change events. Because of that
// strictness every accepted message re-encodes to exactly the bytes it came from,
// which the fuzz target checks.
//
// Errors are DataLoss statuses whose text starts with the message name and then
// names the field ("Insert: new tuple column 2 of 3: ..."). Context is added only
// on the error path so that decoding a valid message builds no strings.
#include <cstdint>
#include <optional>
#include <string>
#include <utility>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/string_view.h"
#include "replication/byte_reader.h"
#include "replication/pgoutput.h"
#include "replication/status_macros.h"

namespace walfeed::replication::pgoutput {
namespace {

// The first protocol version that defines each group of messages (PostgreSQL's
// LOGICALREP_PROTO_*_VERSION_NUM). Two-phase messages have no entry of their own:
// a slot created with TWO_PHASE sends them under any version.
constexpr uint32_t kMinProtocolVersion = 1;
constexpr uint32_t kStreamProtocolVersion = 2;
constexpr uint32_t kParallelStreamProtocolVersion = 4;
constexpr uint32_t kMaxProtocolVersion = 4;

// Relation column flag bit 0 (LOGICALREP_IS_REPLICA_IDENTITY); no other bit exists.
constexpr uint8_t kColumnFlagsMask = 1;

// The smallest encoding of one Relation column: flags byte, the NUL of an empty
// name, type OID and type modifier. Used to reject a column count that the bytes
// left cannot possibly hold before reserving space for it.
constexpr size_t kMinRelationColumnSize = 1 + 1 + 4 + 4;

struct MessageInfo {
  char tag;
  const char* name;
  uint32_t min_protocol_version;
};

// Stream Prepare ('p') needs protocol 2 like the other stream messages: it only
// ever closes a streamed transaction, and pgoutput refuses streaming below 2.
constexpr MessageInfo kMessages[] = {
    {'B', "Begin", kMinProtocolVersion},
    {'C', "Commit", kMinProtocolVersion},
    {'O', "Origin", kMinProtocolVersion},
    {'R', "Relation", kMinProtocolVersion},
    {'Y', "Type", kMinProtocolVersion},
    {'I', "Insert", kMinProtocolVersion},
    {'U', "Update", kMinProtocolVersion},
    {'D', "Delete", kMinProtocolVersion},
    {'T', "Truncate", kMinProtocolVersion},
    {'M', "Message", kMinProtocolVersion},
    {'S', "Stream Start", kStreamProtocolVersion},
    {'E', "Stream Stop", kStreamProtocolVersion},
    {'c', "Stream Commit", kStreamProtocolVersion},
    {'A', "Stream Abort", kStreamProtocolVersion},
    {'b', "Begin Prepare", kMinProtocolVersion},
    {'P', "Prepare", kMinProtocolVersion},
    {'p', "Stream Prepare", kStreamProtocolVersion},
    {'K', "Commit Prepared", kMinProtocolVersion},
    {'r', "Rollback Prepared", kMinProtocolVersion},
};

// kMessages is in the same order as the Message variant, so Tag() can index it.
static_assert(sizeof(kMessages) / sizeof(kMessages[0]) == absl::variant_size<Message>::value,
              "kMessages must list every Message alternative in variant order");

const MessageInfo* FindMessage(uint8_t tag) {
  for (const MessageInfo& info : kMessages) {
    if (static_cast<uint8_t>(info.tag) == tag) return &info;
  }
  return nullptr;
}

// "'x' (0x78)" for printable bytes, "0x05" otherwise: wire bytes are often
// letters, and seeing both forms makes a misaligned read obvious.
std::string DescribeByte(uint8_t byte) {
  if (absl::ascii_isprint(byte)) {
    return absl::StrFormat("'%c' (0x%02X)", static_cast<char>(byte), byte);
  }
  return absl::StrFormat("0x%02X", byte);
}

absl::Status WithPrefix(absl::string_view prefix, const absl::Status& status) {
  return absl::Status(status.code(), absl::StrCat(prefix, status.message()));
}

absl::StatusOr<Lsn> ReadLsn(ByteReader& reader, absl::string_view what) {
  WALFEED_ASSIGN_OR_RETURN(uint64_t value, reader.ReadUint64(what));
  return Lsn(value);
}

// PostgreSQL's readers reject an invalid LSN in these fields ("final_lsn not set in
// begin message" and friends): every transaction the walsender decodes has one.
absl::StatusOr<Lsn> ReadValidLsn(ByteReader& reader, absl::string_view what) {
  WALFEED_ASSIGN_OR_RETURN(Lsn lsn, ReadLsn(reader, what));
  if (!lsn.valid()) return absl::DataLossError(absl::StrCat(what, " is 0/0 (invalid)"));
  return lsn;
}

// Flags fields that PostgreSQL defines but has never set; its readers refuse
// anything else, and so do we.
absl::Status ReadZeroFlags(ByteReader& reader, uint8_t* flags) {
  WALFEED_ASSIGN_OR_RETURN(*flags, reader.ReadUint8("flags"));
  if (*flags != 0) {
    return absl::DataLossError(
        absl::StrCat("flags ", DescribeByte(*flags), " are not 0 (no flag is defined)"));
  }
  return absl::OkStatus();
}

// The Int32 xid that leads DML, Relation, Type, Truncate and Message inside a
// stream block; the writers only send it when streaming.
absl::Status ReadStreamXid(ByteReader& reader, const DecodeOptions& options,
                           std::optional<uint32_t>* xid) {
  if (!options.in_stream_block) return absl::OkStatus();
  WALFEED_ASSIGN_OR_RETURN(*xid, reader.ReadUint32("xid"));
  return absl::OkStatus();
}

// Reads an Int32 byte count and then that many bytes. The count is checked for
// sign and against the bytes left before anything is copied, so a hostile length
// can never drive an allocation.
absl::StatusOr<absl::string_view> ReadCountedBytes(ByteReader& reader,
                                                   absl::string_view length_what,
                                                   absl::string_view bytes_what) {
  WALFEED_ASSIGN_OR_RETURN(int32_t length, reader.ReadInt32(length_what));
  if (length < 0) {
    return absl::DataLossError(absl::StrCat(length_what, " ", length, " is negative"));
  }
  return reader.ReadBytes(static_cast<size_t>(length), bytes_what);
}

absl::Status ReadTupleValue(ByteReader& reader, TupleValue* value) {
  WALFEED_ASSIGN_OR_RETURN(uint8_t kind, reader.ReadUint8("kind"));
  switch (kind) {
    case static_cast<uint8_t>(TupleValue::Kind::kNull):
    case static_cast<uint8_t>(TupleValue::Kind::kUnchangedToast):
      value->kind = static_cast<TupleValue::Kind>(kind);
      return absl::OkStatus();
    case static_cast<uint8_t>(TupleValue::Kind::kText):
    case static_cast<uint8_t>(TupleValue::Kind::kBinary): {
      value->kind = static_cast<TupleValue::Kind>(kind);
      WALFEED_ASSIGN_OR_RETURN(absl::string_view data,
                               ReadCountedBytes(reader, "value length", "value"));
      value->data.assign(data.data(), data.size());
      return absl::OkStatus();
    }
    default:
      return absl::DataLossError(
          absl::StrCat("kind ", DescribeByte(kind), " is not 'n', 'u', 't' or 'b'"));
  }
}

// `label` ("new tuple", "old tuple") starts every error so that an Update's two
// tuples can be told apart.
absl::Status ReadTupleData(ByteReader& reader, absl::string_view label, TupleData* tuple) {
  absl::StatusOr<int16_t> count = reader.ReadInt16("column count");
  if (!count.ok()) return WithPrefix(absl::StrCat(label, ": "), count.status());
  if (*count < 0) {
    return absl::DataLossError(absl::StrCat(label, " column count ", *count, " is negative"));
  }
  // Every column is at least its kind byte.
  const size_t columns = static_cast<size_t>(*count);
  if (columns > reader.remaining()) {
    return absl::DataLossError(absl::StrCat(label, " column count ", columns,
                                            " needs at least as many bytes but only ",
                                            reader.remaining(), " remain"));
  }
  tuple->columns.resize(columns);
  for (size_t i = 0; i < columns; ++i) {
    absl::Status status = ReadTupleValue(reader, &tuple->columns[i]);
    if (!status.ok()) {
      return WithPrefix(absl::StrCat(label, " column ", i + 1, " of ", columns, ": "), status);
    }
  }
  return absl::OkStatus();
}

// The submessage byte that introduces a tuple in Insert/Update/Delete.
absl::StatusOr<uint8_t> ReadTupleTag(ByteReader& reader) { return reader.ReadUint8("tuple tag"); }

absl::Status ExpectNewTupleTag(uint8_t tag) {
  if (tag == 'N') return absl::OkStatus();
  return absl::DataLossError(
      absl::StrCat("tuple tag is ", DescribeByte(tag), ", expected 'N' (new tuple)"));
}

absl::StatusOr<Begin> DecodeBegin(ByteReader& reader) {
  Begin m;
  WALFEED_ASSIGN_OR_RETURN(m.final_lsn, ReadValidLsn(reader, "final_lsn"));
  WALFEED_ASSIGN_OR_RETURN(m.commit_time, reader.ReadInt64("commit_time"));
  WALFEED_ASSIGN_OR_RETURN(m.xid, reader.ReadUint32("xid"));
  return m;
}

absl::StatusOr<Commit> DecodeCommit(ByteReader& reader) {
  Commit m;
  WALFEED_RETURN_IF_ERROR(ReadZeroFlags(reader, &m.flags));
  WALFEED_ASSIGN_OR_RETURN(m.commit_lsn, ReadLsn(reader, "commit_lsn"));
  WALFEED_ASSIGN_OR_RETURN(m.end_lsn, ReadLsn(reader, "end_lsn"));
  WALFEED_ASSIGN_OR_RETURN(m.commit_time, reader.ReadInt64("commit_time"));
  return m;
}

absl::StatusOr<Origin> DecodeOrigin(ByteReader& reader) {
  Origin m;
  WALFEED_ASSIGN_OR_RETURN(m.origin_lsn, ReadLsn(reader, "origin_lsn"));
  WALFEED_ASSIGN_OR_RETURN(absl::string_view name, reader.ReadCString("origin name"));
  m.name = std::string(name);
  return m;
}

absl::Status ReadRelationColumn(ByteReader& reader, RelationColumn* column) {
  WALFEED_ASSIGN_OR_RETURN(column->flags, reader.ReadUint8("flags"));
  if ((column->flags & ~kColumnFlagsMask) != 0) {
    return absl::DataLossError(absl::StrCat("flags ", DescribeByte(column->flags),
                                            " are not 0 or 1 (replica identity key)"));
  }
  WALFEED_ASSIGN_OR_RETURN(absl::string_view name, reader.ReadCString("name"));
  column->name = std::string(name);
  WALFEED_ASSIGN_OR_RETURN(column->type_oid, reader.ReadUint32("type OID"));
  WALFEED_ASSIGN_OR_RETURN(column->type_modifier, reader.ReadInt32("type modifier"));
  return absl::OkStatus();
}

absl::StatusOr<Relation> DecodeRelation(ByteReader& reader, const DecodeOptions& options) {
  Relation m;
  WALFEED_RETURN_IF_ERROR(ReadStreamXid(reader, options, &m.xid));
  WALFEED_ASSIGN_OR_RETURN(m.relation_id, reader.ReadUint32("relation id"));
  WALFEED_ASSIGN_OR_RETURN(absl::string_view nspname, reader.ReadCString("namespace"));
  m.namespace_name = std::string(nspname);
  WALFEED_ASSIGN_OR_RETURN(absl::string_view relname, reader.ReadCString("relation name"));
  m.relation_name = std::string(relname);
  WALFEED_ASSIGN_OR_RETURN(uint8_t replident, reader.ReadUint8("replica identity"));
  switch (replident) {
    case 'd':
    case 'n':
    case 'f':
    case 'i':
      m.replica_identity = static_cast<char>(replident);
      break;
    default:
      return absl::DataLossError(absl::StrCat("replica identity ", DescribeByte(replident),
                                              " is not 'd', 'n', 'f' or 'i'"));
  }
  WALFEED_ASSIGN_OR_RETURN(int16_t count, reader.ReadInt16("column count"));
  if (count < 0) {
    return absl::DataLossError(absl::StrCat("column count ", count, " is negative"));
  }
  const size_t columns = static_cast<size_t>(count);
  if (columns > reader.remaining() / kMinRelationColumnSize) {
    return absl::DataLossError(absl::StrCat("column count ", columns, " needs at least ",
                                            columns * kMinRelationColumnSize, " bytes but only ",
                                            reader.remaining(), " remain"));
  }
  m.columns.resize(columns);
  for (size_t i = 0; i < columns; ++i) {
    absl::Status status = ReadRelationColumn(reader, &m.columns[i]);
    if (!status.ok()) {
      return WithPrefix(absl::StrCat("column ", i + 1, " of ", columns, ": "), status);
    }
  }
  return m;
}

absl::StatusOr<Type> DecodeType(ByteReader& reader, const DecodeOptions& options) {
  Type m;
  WALFEED_RETURN_IF_ERROR(ReadStreamXid(reader, options, &m.xid));
  WALFEED_ASSIGN_OR_RETURN(m.type_oid, reader.ReadUint32("type OID"));
  WALFEED_ASSIGN_OR_RETURN(absl::string_view nspname, reader.ReadCString("namespace"));
  m.namespace_name = std::string(nspname);
  WALFEED_ASSIGN_OR_RETURN(absl::string_view typname, reader.ReadCString("type name"));
  m.type_name = std::string(typname);
  return m;
}

absl::StatusOr<Insert> DecodeInsert(ByteReader& reader, const DecodeOptions& options) {
  Insert m;
  WALFEED_RETURN_IF_ERROR(ReadStreamXid(reader, options, &m.xid));
  WALFEED_ASSIGN_OR_RETURN(m.relation_id, reader.ReadUint32("relation id"));
  WALFEED_ASSIGN_OR_RETURN(uint8_t tag, ReadTupleTag(reader));
  WALFEED_RETURN_IF_ERROR(ExpectNewTupleTag(tag));
  WALFEED_RETURN_IF_ERROR(ReadTupleData(reader, "new tuple", &m.new_tuple));
  return m;
}

absl::StatusOr<Update> DecodeUpdate(ByteReader& reader, const DecodeOptions& options) {
  Update m;
  WALFEED_RETURN_IF_ERROR(ReadStreamXid(reader, options, &m.xid));
  WALFEED_ASSIGN_OR_RETURN(m.relation_id, reader.ReadUint32("relation id"));
  WALFEED_ASSIGN_OR_RETURN(uint8_t tag, ReadTupleTag(reader));
  if (tag == 'K' || tag == 'O') {
    m.old_kind = static_cast<OldTupleKind>(tag);
    WALFEED_RETURN_IF_ERROR(ReadTupleData(reader, "old tuple", &m.old_tuple));
    WALFEED_ASSIGN_OR_RETURN(tag, ReadTupleTag(reader));
    WALFEED_RETURN_IF_ERROR(ExpectNewTupleTag(tag));
  } else if (tag != 'N') {
    return absl::DataLossError(
        absl::StrCat("tuple tag is ", DescribeByte(tag),
                     ", expected 'K' (old key), 'O' (old row) or 'N' (new tuple)"));
  }
  WALFEED_RETURN_IF_ERROR(ReadTupleData(reader, "new tuple", &m.new_tuple));
  return m;
}

absl::StatusOr<Delete> DecodeDelete(ByteReader& reader, const DecodeOptions& options) {
  Delete m;
  WALFEED_RETURN_IF_ERROR(ReadStreamXid(reader, options, &m.xid));
  WALFEED_ASSIGN_OR_RETURN(m.relation_id, reader.ReadUint32("relation id"));
  WALFEED_ASSIGN_OR_RETURN(uint8_t tag, ReadTupleTag(reader));
  if (tag != 'K' && tag != 'O') {
    // pgoutput never sends a Delete without its old key or row.
    return absl::DataLossError(absl::StrCat("tuple tag is ", DescribeByte(tag),
                                            ", expected 'K' (old key) or 'O' (old row)"));
  }
  m.old_kind = static_cast<OldTupleKind>(tag);
  WALFEED_RETURN_IF_ERROR(ReadTupleData(reader, "old tuple", &m.old_tuple));
  return m;
}

absl::StatusOr<Truncate> DecodeTruncate(ByteReader& reader, const DecodeOptions& options) {
  Truncate m;
  WALFEED_RETURN_IF_ERROR(ReadStreamXid(reader, options, &m.xid));
  WALFEED_ASSIGN_OR_RETURN(int32_t count, reader.ReadInt32("relation count"));
  if (count < 0) {
    return absl::DataLossError(absl::StrCat("relation count ", count, " is negative"));
  }
  WALFEED_ASSIGN_OR_RETURN(m.options, reader.ReadUint8("options"));
  constexpr uint8_t kKnownOptions = Truncate::kCascade | Truncate::kRestartIdentity;
  if ((m.options & ~kKnownOptions) != 0) {
    return absl::DataLossError(
        absl::StrCat("options ", DescribeByte(m.options),
                     " has bits other than 1 (CASCADE) and 2 (RESTART IDENTITY)"));
  }
  const size_t relations = static_cast<size_t>(count);
  if (relations > reader.remaining() / 4) {
    return absl::DataLossError(absl::StrCat("relation count ", relations, " needs ", relations * 4,
                                            " bytes but only ", reader.remaining(), " remain"));
  }
  m.relation_ids.resize(relations);
  for (uint32_t& relation_id : m.relation_ids) {
    WALFEED_ASSIGN_OR_RETURN(relation_id, reader.ReadUint32("relation id"));
  }
  return m;
}

absl::StatusOr<LogicalMessage> DecodeLogicalMessage(ByteReader& reader,
                                                    const DecodeOptions& options) {
  LogicalMessage m;
  WALFEED_RETURN_IF_ERROR(ReadStreamXid(reader, options, &m.xid));
  WALFEED_ASSIGN_OR_RETURN(m.flags, reader.ReadUint8("flags"));
  if ((m.flags & ~LogicalMessage::kTransactional) != 0) {
    return absl::DataLossError(
        absl::StrCat("flags ", DescribeByte(m.flags), " are not 0 or 1 (transactional)"));
  }
  WALFEED_ASSIGN_OR_RETURN(m.lsn, ReadLsn(reader, "lsn"));
  WALFEED_ASSIGN_OR_RETURN(absl::string_view prefix, reader.ReadCString("prefix"));
  m.prefix = std::string(prefix);
  WALFEED_ASSIGN_OR_RETURN(absl::string_view content,
                           ReadCountedBytes(reader, "content length", "content"));
  m.content = std::string(content);
  return m;
}

absl::StatusOr<StreamStart> DecodeStreamStart(ByteReader& reader) {
  StreamStart m;
  WALFEED_ASSIGN_OR_RETURN(m.xid, reader.ReadUint32("xid"));
  WALFEED_ASSIGN_OR_RETURN(uint8_t first_segment, reader.ReadUint8("first_segment"));
  // PostgreSQL reads "== 1"; the writer only ever sends 0 or 1.
  if (first_segment > 1) {
    return absl::DataLossError(
        absl::StrCat("first_segment ", DescribeByte(first_segment), " is not 0 or 1"));
  }
  m.first_segment = first_segment == 1;
  return m;
}

absl::StatusOr<StreamCommit> DecodeStreamCommit(ByteReader& reader) {
  StreamCommit m;
  WALFEED_ASSIGN_OR_RETURN(m.xid, reader.ReadUint32("xid"));
  WALFEED_RETURN_IF_ERROR(ReadZeroFlags(reader, &m.flags));
  WALFEED_ASSIGN_OR_RETURN(m.commit_lsn, ReadLsn(reader, "commit_lsn"));
  WALFEED_ASSIGN_OR_RETURN(m.end_lsn, ReadLsn(reader, "end_lsn"));
  WALFEED_ASSIGN_OR_RETURN(m.commit_time, reader.ReadInt64("commit_time"));
  return m;
}

absl::StatusOr<StreamAbort> DecodeStreamAbort(ByteReader& reader, const DecodeOptions& options) {
  StreamAbort m;
  WALFEED_ASSIGN_OR_RETURN(m.xid, reader.ReadUint32("xid"));
  WALFEED_ASSIGN_OR_RETURN(m.subxid, reader.ReadUint32("subxid"));
  // The abort position is sent only for streaming = parallel, not for every
  // protocol-4 stream, so only the caller's option can say whether it is there.
  if (options.streaming_parallel) {
    WALFEED_ASSIGN_OR_RETURN(m.abort_lsn, ReadLsn(reader, "abort_lsn"));
    WALFEED_ASSIGN_OR_RETURN(m.abort_time, reader.ReadInt64("abort_time"));
  }
  return m;
}

absl::StatusOr<BeginPrepare> DecodeBeginPrepare(ByteReader& reader) {
  BeginPrepare m;
  WALFEED_ASSIGN_OR_RETURN(m.prepare_lsn, ReadValidLsn(reader, "prepare_lsn"));
  WALFEED_ASSIGN_OR_RETURN(m.end_lsn, ReadValidLsn(reader, "end_lsn"));
  WALFEED_ASSIGN_OR_RETURN(m.prepare_time, reader.ReadInt64("prepare_time"));
  WALFEED_ASSIGN_OR_RETURN(m.xid, reader.ReadUint32("xid"));
  WALFEED_ASSIGN_OR_RETURN(absl::string_view gid, reader.ReadCString("gid"));
  m.gid = std::string(gid);
  return m;
}

// Prepare and Stream Prepare share PostgreSQL's logicalrep_write_prepare_common.
absl::Status ReadPrepareFields(ByteReader& reader, PrepareFields* m) {
  WALFEED_RETURN_IF_ERROR(ReadZeroFlags(reader, &m->flags));
  WALFEED_ASSIGN_OR_RETURN(m->prepare_lsn, ReadValidLsn(reader, "prepare_lsn"));
  WALFEED_ASSIGN_OR_RETURN(m->end_lsn, ReadValidLsn(reader, "end_lsn"));
  WALFEED_ASSIGN_OR_RETURN(m->prepare_time, reader.ReadInt64("prepare_time"));
  WALFEED_ASSIGN_OR_RETURN(m->xid, reader.ReadUint32("xid"));
  WALFEED_ASSIGN_OR_RETURN(absl::string_view gid, reader.ReadCString("gid"));
  m->gid = std::string(gid);
  return absl::OkStatus();
}

absl::StatusOr<Prepare> DecodePrepare(ByteReader& reader) {
  Prepare m;
  WALFEED_RETURN_IF_ERROR(ReadPrepareFields(reader, &m));
  return m;
}

absl::StatusOr<StreamPrepare> DecodeStreamPrepare(ByteReader& reader) {
  StreamPrepare m;
  WALFEED_RETURN_IF_ERROR(ReadPrepareFields(reader, &m));
  return m;
}

absl::StatusOr<CommitPrepared> DecodeCommitPrepared(ByteReader& reader) {
  CommitPrepared m;
  WALFEED_RETURN_IF_ERROR(ReadZeroFlags(reader, &m.flags));
  WALFEED_ASSIGN_OR_RETURN(m.commit_lsn, ReadValidLsn(reader, "commit_lsn"));
  WALFEED_ASSIGN_OR_RETURN(m.end_lsn, ReadValidLsn(reader, "end_lsn"));
  WALFEED_ASSIGN_OR_RETURN(m.commit_time, reader.ReadInt64("commit_time"));
  WALFEED_ASSIGN_OR_RETURN(m.xid, reader.ReadUint32("xid"));
  WALFEED_ASSIGN_OR_RETURN(absl::string_view gid, reader.ReadCString("gid"));
  m.gid = std::string(gid);
  return m;
}

absl::StatusOr<RollbackPrepared> DecodeRollbackPrepared(ByteReader& reader) {
  RollbackPrepared m;
  WALFEED_RETURN_IF_ERROR(ReadZeroFlags(reader, &m.flags));
  WALFEED_ASSIGN_OR_RETURN(m.prepare_end_lsn, ReadValidLsn(reader, "prepare_end_lsn"));
  WALFEED_ASSIGN_OR_RETURN(m.rollback_end_lsn, ReadValidLsn(reader, "rollback_end_lsn"));
  WALFEED_ASSIGN_OR_RETURN(m.prepare_time, reader.ReadInt64("prepare_time"));
  WALFEED_ASSIGN_OR_RETURN(m.rollback_time, reader.ReadInt64("rollback_time"));
  WALFEED_ASSIGN_OR_RETURN(m.xid, reader.ReadUint32("xid"));
  WALFEED_ASSIGN_OR_RETURN(absl::string_view gid, reader.ReadCString("gid"));
  m.gid = std::string(gid);
  return m;
}

template <typename T>
absl::StatusOr<Message> ToMessage(absl::StatusOr<T> decoded) {
  if (!decoded.ok()) return decoded.status();
  return Message(std::move(*decoded));
}

// Reads everything after the tag byte.
absl::StatusOr<Message> DecodeBody(uint8_t tag, ByteReader& reader, const DecodeOptions& options) {
  switch (tag) {
    case 'B':
      return ToMessage(DecodeBegin(reader));
    case 'C':
      return ToMessage(DecodeCommit(reader));
    case 'O':
      return ToMessage(DecodeOrigin(reader));
    case 'R':
      return ToMessage(DecodeRelation(reader, options));
    case 'Y':
      return ToMessage(DecodeType(reader, options));
    case 'I':
      return ToMessage(DecodeInsert(reader, options));
    case 'U':
      return ToMessage(DecodeUpdate(reader, options));
    case 'D':
      return ToMessage(DecodeDelete(reader, options));
    case 'T':
      return ToMessage(DecodeTruncate(reader, options));
    case 'M':
      return ToMessage(DecodeLogicalMessage(reader, options));
    case 'S':
      return ToMessage(DecodeStreamStart(reader));
    case 'E':
      return Message(StreamStop{});
    case 'c':
      return ToMessage(DecodeStreamCommit(reader));
    case 'A':
      return ToMessage(DecodeStreamAbort(reader, options));
    case 'b':
      return ToMessage(DecodeBeginPrepare(reader));
    case 'P':
      return ToMessage(DecodePrepare(reader));
    case 'p':
      return ToMessage(DecodeStreamPrepare(reader));
    case 'K':
      return ToMessage(DecodeCommitPrepared(reader));
    case 'r':
      return ToMessage(DecodeRollbackPrepared(reader));
  }
  // Unreachable: Decode only calls this for tags found in kMessages.
  return absl::InternalError(absl::StrCat("no decoder for tag ", DescribeByte(tag)));
}

// Option combinations no walsender can produce are the caller's bug, not bad
// bytes, so they are InvalidArgument rather than DataLoss.
absl::Status ValidateOptions(const DecodeOptions& options) {
  if (options.protocol_version < kMinProtocolVersion ||
      options.protocol_version > kMaxProtocolVersion) {
    return absl::InvalidArgumentError(absl::StrCat(
        "pgoutput protocol version ", options.protocol_version, " is not supported (expected ",
        kMinProtocolVersion, " to ", kMaxProtocolVersion, ")"));
  }
  if (options.in_stream_block && options.protocol_version < kStreamProtocolVersion) {
    return absl::InvalidArgumentError(
        absl::StrCat("in_stream_block is set but protocol version ", options.protocol_version,
                     " has no streaming (needs ", kStreamProtocolVersion, ")"));
  }
  if (options.streaming_parallel && options.protocol_version < kParallelStreamProtocolVersion) {
    return absl::InvalidArgumentError(
        absl::StrCat("streaming_parallel is set but protocol version ", options.protocol_version,
                     " has no parallel streaming (needs ", kParallelStreamProtocolVersion, ")"));
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<Message> Decode(absl::Span<const uint8_t> bytes, const DecodeOptions& options) {
  WALFEED_RETURN_IF_ERROR(ValidateOptions(options));
  ByteReader reader(bytes);
  if (reader.remaining() == 0) {
    return absl::DataLossError("empty pgoutput message: no message tag");
  }
  WALFEED_ASSIGN_OR_RETURN(uint8_t tag, reader.ReadUint8("message tag"));
  const MessageInfo* info = FindMessage(tag);
  if (info == nullptr) {
    return absl::DataLossError(absl::StrCat("unknown pgoutput message tag ", DescribeByte(tag)));
  }
  if (options.protocol_version < info->min_protocol_version) {
    return absl::DataLossError(absl::StrCat(info->name, ": message ", DescribeByte(tag),
                                            " needs protocol version ", info->min_protocol_version,
                                            " or later, but the stream uses protocol version ",
                                            options.protocol_version));
  }
  absl::StatusOr<Message> message = DecodeBody(tag, reader, options);
  absl::Status status = message.ok() ? reader.ExpectEnd("message") : message.status();
  if (!status.ok()) return WithPrefix(absl::StrCat(info->name, ": "), status);
  return message;
}

char Tag(const Message& message) { return kMessages[message.index()].tag; }

}  // namespace walfeed::replication::pgoutput
