// pgoutput: PostgreSQL's logical replication protocol messages, as typed values.
//
// Decode() is a pure function from the bytes of one XLogData payload to one
// message. It does no I/O, keeps no state and logs nothing; the relation cache and
// transaction assembly live elsewhere. Every bounds violation, unknown tag, bad
// flag, negative or inconsistent count and trailing byte is a DataLoss status:
// the bytes come from the network and are never trusted.
//
// Layouts follow PostgreSQL's logicalrep_write_* (src/backend/replication/logical/
// proto.c) for protocol versions 1-4:
//   v1 (PG 10+)  Begin Commit Origin Relation Type Insert Update Delete Truncate Message
//   v2 (PG 14+)  + Stream Start/Stop/Commit/Abort; DML/Relation/Type/Truncate/Message
//                  inside a stream block carry the transaction's xid first
//   v3 (PG 15+)  + Begin Prepare, Prepare, Commit Prepared, Rollback Prepared,
//                  Stream Prepare
//   v4 (PG 16+)  + Stream Abort carries abort LSN and time when streaming = parallel
// A slot created with TWO_PHASE sends the v3 prepare messages whatever version was
// requested, so Begin Prepare, Prepare, Commit Prepared and Rollback Prepared decode
// under every version; Stream Prepare ends a streamed transaction and so needs >= 2.
// Options no server can produce (a version outside 1-4, a stream block under
// version 1, parallel streaming below 4) are the caller's bug: InvalidArgument.
#ifndef WALFEED_REPLICATION_PGOUTPUT_H_
#define WALFEED_REPLICATION_PGOUTPUT_H_

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "absl/types/variant.h"
#include "replication/lsn.h"

namespace walfeed::replication::pgoutput {

// One column value of a TupleData.
struct TupleValue {
  enum class Kind : char {
    kNull = 'n',
    kUnchangedToast = 'u',  // Stored out of line and not changed: value not sent.
    kText = 't',            // The type's output function text, in the server encoding.
    kBinary = 'b',          // The type's send function bytes (binary mode).
  };
  Kind kind = Kind::kNull;
  std::string data;  // Only for kText and kBinary; may be empty (the empty string).

  friend bool operator==(const TupleValue& a, const TupleValue& b) {
    return a.kind == b.kind && a.data == b.data;
  }
};

struct TupleData {
  std::vector<TupleValue> columns;
  friend bool operator==(const TupleData& a, const TupleData& b) {
    return a.columns == b.columns;
  }
};

// Which old row an Update or Delete carries.
enum class OldTupleKind : char {
  kNone = 0,    // Update only: no key column changed (DEFAULT/INDEX identity).
  kKey = 'K',   // Key columns; non-key columns are 'n' and are NOT real NULLs.
  kFull = 'O',  // Whole old row (REPLICA IDENTITY FULL).
};

struct Begin {
  Lsn final_lsn;            // == the Commit's commit_lsn.
  int64_t commit_time = 0;  // PostgreSQL-epoch microseconds.
  uint32_t xid = 0;
};

struct Commit {
  uint8_t flags = 0;  // Always 0 today; anything else is rejected.
  Lsn commit_lsn;     // Start of the commit record.
  Lsn end_lsn;        // End of the commit record.
  int64_t commit_time = 0;
};

struct Origin {
  Lsn origin_lsn;
  std::string name;
};

struct RelationColumn {
  uint8_t flags = 0;  // Bit 0: part of the replica identity key.
  std::string name;
  uint32_t type_oid = 0;
  int32_t type_modifier = -1;
  bool is_key() const { return (flags & 1) != 0; }
};

struct Relation {
  std::optional<uint32_t> xid;  // Only inside a stream block.
  uint32_t relation_id = 0;
  std::string namespace_name;  // "" means pg_catalog.
  std::string relation_name;
  char replica_identity = 'd';  // 'd' default, 'n' nothing, 'f' full, 'i' index.
  std::vector<RelationColumn> columns;
};

struct Type {
  std::optional<uint32_t> xid;
  uint32_t type_oid = 0;
  std::string namespace_name;
  std::string type_name;
};

struct Insert {
  std::optional<uint32_t> xid;
  uint32_t relation_id = 0;
  TupleData new_tuple;
};

struct Update {
  std::optional<uint32_t> xid;
  uint32_t relation_id = 0;
  OldTupleKind old_kind = OldTupleKind::kNone;
  TupleData old_tuple;  // Empty when old_kind == kNone.
  TupleData new_tuple;
};

struct Delete {
  std::optional<uint32_t> xid;
  uint32_t relation_id = 0;
  OldTupleKind old_kind = OldTupleKind::kKey;  // kKey or kFull.
  TupleData old_tuple;
};

struct Truncate {
  static constexpr uint8_t kCascade = 1;
  static constexpr uint8_t kRestartIdentity = 2;

  std::optional<uint32_t> xid;
  uint8_t options = 0;
  std::vector<uint32_t> relation_ids;
};

struct LogicalMessage {
  static constexpr uint8_t kTransactional = 1;

  std::optional<uint32_t> xid;
  uint8_t flags = 0;
  Lsn lsn;  // End of the message's WAL record.
  std::string prefix;
  std::string content;
  bool transactional() const { return (flags & kTransactional) != 0; }
};

struct StreamStart {
  uint32_t xid = 0;
  bool first_segment = false;
};

struct StreamStop {};

struct StreamCommit {
  uint32_t xid = 0;
  uint8_t flags = 0;
  Lsn commit_lsn;
  Lsn end_lsn;
  int64_t commit_time = 0;
};

struct StreamAbort {
  uint32_t xid = 0;
  uint32_t subxid = 0;
  // Present only with streaming = parallel (protocol 4).
  std::optional<Lsn> abort_lsn;
  std::optional<int64_t> abort_time;
};

struct BeginPrepare {
  Lsn prepare_lsn;
  Lsn end_lsn;
  int64_t prepare_time = 0;
  uint32_t xid = 0;
  std::string gid;
};

// Prepare ('P') and Stream Prepare ('p') share this layout.
struct PrepareFields {
  uint8_t flags = 0;
  Lsn prepare_lsn;
  Lsn end_lsn;
  int64_t prepare_time = 0;
  uint32_t xid = 0;
  std::string gid;
};
struct Prepare : PrepareFields {};
struct StreamPrepare : PrepareFields {};

struct CommitPrepared {
  uint8_t flags = 0;
  Lsn commit_lsn;
  Lsn end_lsn;
  int64_t commit_time = 0;
  uint32_t xid = 0;
  std::string gid;
};

struct RollbackPrepared {
  uint8_t flags = 0;
  Lsn prepare_end_lsn;
  Lsn rollback_end_lsn;
  int64_t prepare_time = 0;
  int64_t rollback_time = 0;
  uint32_t xid = 0;
  std::string gid;
};

using Message = absl::variant<Begin, Commit, Origin, Relation, Type, Insert, Update, Delete,
                              Truncate, LogicalMessage, StreamStart, StreamStop,
                              StreamCommit, StreamAbort, BeginPrepare, Prepare,
                              StreamPrepare, CommitPrepared, RollbackPrepared>;

struct DecodeOptions {
  // The proto_version sent in START_REPLICATION (1-4). Stream messages need >= 2.
  uint32_t protocol_version = 1;
  // True between Stream Start and Stream Stop: DML, Relation, Type, Truncate and
  // Message then begin with an Int32 xid. The caller tracks this (Decode is pure).
  bool in_stream_block = false;
  // streaming = 'parallel' (protocol 4): Stream Abort carries abort LSN and time.
  bool streaming_parallel = false;
};

// Decodes exactly one pgoutput message; the whole span must be consumed.
absl::StatusOr<Message> Decode(absl::Span<const uint8_t> bytes, const DecodeOptions& options);

// The message's one-byte tag as PostgreSQL names it ('B', 'C', ...), for logs.
char Tag(const Message& message);

}  // namespace walfeed::replication::pgoutput

#endif  // WALFEED_REPLICATION_PGOUTPUT_H_
