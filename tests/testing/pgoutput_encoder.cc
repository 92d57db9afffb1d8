// Test-only pgoutput encoder, message equality and message descriptions. The
// Encode* functions mirror PostgreSQL's logicalrep_write_* field for field; see
// the header for what they deliberately do not check.
#include "tests/testing/pgoutput_encoder.h"

#include <optional>
#include <tuple>
#include <type_traits>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/types/variant.h"

namespace walfeed::testing {

namespace pgoutput = ::walfeed::replication::pgoutput;
using ::walfeed::replication::Lsn;

ByteWriter& ByteWriter::Uint8(uint8_t value) {
  bytes_.push_back(value);
  return *this;
}

ByteWriter& ByteWriter::Int16(int16_t value) {
  const auto bits = static_cast<uint16_t>(value);
  bytes_.push_back(static_cast<uint8_t>(bits >> 8));
  bytes_.push_back(static_cast<uint8_t>(bits));
  return *this;
}

ByteWriter& ByteWriter::Uint32(uint32_t value) {
  for (int shift = 24; shift >= 0; shift -= 8) {
    bytes_.push_back(static_cast<uint8_t>(value >> shift));
  }
  return *this;
}

ByteWriter& ByteWriter::Int32(int32_t value) { return Uint32(static_cast<uint32_t>(value)); }

ByteWriter& ByteWriter::Uint64(uint64_t value) {
  for (int shift = 56; shift >= 0; shift -= 8) {
    bytes_.push_back(static_cast<uint8_t>(value >> shift));
  }
  return *this;
}

ByteWriter& ByteWriter::Int64(int64_t value) { return Uint64(static_cast<uint64_t>(value)); }

ByteWriter& ByteWriter::Lsn(replication::Lsn lsn) { return Uint64(lsn.value()); }

ByteWriter& ByteWriter::CString(absl::string_view text) {
  Bytes(text);
  return Uint8(0);
}

ByteWriter& ByteWriter::Bytes(absl::string_view bytes) {
  bytes_.insert(bytes_.end(), bytes.begin(), bytes.end());
  return *this;
}

ByteWriter& ByteWriter::Bytes(absl::Span<const uint8_t> bytes) {
  bytes_.insert(bytes_.end(), bytes.begin(), bytes.end());
  return *this;
}

namespace {

void WriteOptionalXid(const std::optional<uint32_t>& xid, ByteWriter& out) {
  if (xid.has_value()) out.Uint32(*xid);
}

// logicalrep_write_tuple: Int16 count, then per column a kind byte and, for text
// and binary values, an Int32 length and the bytes.
void WriteTuple(const pgoutput::TupleData& tuple, ByteWriter& out) {
  out.Int16(static_cast<int16_t>(tuple.columns.size()));
  for (const pgoutput::TupleValue& value : tuple.columns) {
    out.Uint8(static_cast<uint8_t>(value.kind));
    if (value.kind == pgoutput::TupleValue::Kind::kText ||
        value.kind == pgoutput::TupleValue::Kind::kBinary) {
      out.Int32(static_cast<int32_t>(value.data.size())).Bytes(value.data);
    }
  }
}

void WritePrepareFields(char tag, const pgoutput::PrepareFields& m, ByteWriter& out) {
  out.Uint8(static_cast<uint8_t>(tag))
      .Uint8(m.flags)
      .Lsn(m.prepare_lsn)
      .Lsn(m.end_lsn)
      .Int64(m.prepare_time)
      .Uint32(m.xid)
      .CString(m.gid);
}

}  // namespace

std::vector<uint8_t> EncodeBegin(const pgoutput::Begin& m) {
  return ByteWriter().Uint8('B').Lsn(m.final_lsn).Int64(m.commit_time).Uint32(m.xid).Take();
}

std::vector<uint8_t> EncodeCommit(const pgoutput::Commit& m) {
  return ByteWriter()
      .Uint8('C')
      .Uint8(m.flags)
      .Lsn(m.commit_lsn)
      .Lsn(m.end_lsn)
      .Int64(m.commit_time)
      .Take();
}

std::vector<uint8_t> EncodeOrigin(const pgoutput::Origin& m) {
  return ByteWriter().Uint8('O').Lsn(m.origin_lsn).CString(m.name).Take();
}

std::vector<uint8_t> EncodeRelation(const pgoutput::Relation& m) {
  ByteWriter out;
  out.Uint8('R');
  WriteOptionalXid(m.xid, out);
  out.Uint32(m.relation_id)
      .CString(m.namespace_name)
      .CString(m.relation_name)
      .Uint8(static_cast<uint8_t>(m.replica_identity))
      .Int16(static_cast<int16_t>(m.columns.size()));
  for (const pgoutput::RelationColumn& column : m.columns) {
    out.Uint8(column.flags)
        .CString(column.name)
        .Uint32(column.type_oid)
        .Int32(column.type_modifier);
  }
  return out.Take();
}

std::vector<uint8_t> EncodeType(const pgoutput::Type& m) {
  ByteWriter out;
  out.Uint8('Y');
  WriteOptionalXid(m.xid, out);
  out.Uint32(m.type_oid).CString(m.namespace_name).CString(m.type_name);
  return out.Take();
}

std::vector<uint8_t> EncodeInsert(const pgoutput::Insert& m) {
  ByteWriter out;
  out.Uint8('I');
  WriteOptionalXid(m.xid, out);
  out.Uint32(m.relation_id).Uint8('N');
  WriteTuple(m.new_tuple, out);
  return out.Take();
}

std::vector<uint8_t> EncodeUpdate(const pgoutput::Update& m) {
  ByteWriter out;
  out.Uint8('U');
  WriteOptionalXid(m.xid, out);
  out.Uint32(m.relation_id);
  if (m.old_kind != pgoutput::OldTupleKind::kNone) {
    out.Uint8(static_cast<uint8_t>(m.old_kind));
    WriteTuple(m.old_tuple, out);
  }
  out.Uint8('N');
  WriteTuple(m.new_tuple, out);
  return out.Take();
}

std::vector<uint8_t> EncodeDelete(const pgoutput::Delete& m) {
  ByteWriter out;
  out.Uint8('D');
  WriteOptionalXid(m.xid, out);
  out.Uint32(m.relation_id).Uint8(static_cast<uint8_t>(m.old_kind));
  WriteTuple(m.old_tuple, out);
  return out.Take();
}

std::vector<uint8_t> EncodeTruncate(const pgoutput::Truncate& m) {
  ByteWriter out;
  out.Uint8('T');
  WriteOptionalXid(m.xid, out);
  out.Int32(static_cast<int32_t>(m.relation_ids.size())).Uint8(m.options);
  for (uint32_t relation_id : m.relation_ids) out.Uint32(relation_id);
  return out.Take();
}

std::vector<uint8_t> EncodeMessage(const pgoutput::LogicalMessage& m) {
  ByteWriter out;
  out.Uint8('M');
  WriteOptionalXid(m.xid, out);
  out.Uint8(m.flags)
      .Lsn(m.lsn)
      .CString(m.prefix)
      .Int32(static_cast<int32_t>(m.content.size()))
      .Bytes(m.content);
  return out.Take();
}

std::vector<uint8_t> EncodeStreamStart(const pgoutput::StreamStart& m) {
  return ByteWriter().Uint8('S').Uint32(m.xid).Uint8(m.first_segment ? 1 : 0).Take();
}

std::vector<uint8_t> EncodeStreamStop(const pgoutput::StreamStop&) {
  return ByteWriter().Uint8('E').Take();
}

std::vector<uint8_t> EncodeStreamCommit(const pgoutput::StreamCommit& m) {
  return ByteWriter()
      .Uint8('c')
      .Uint32(m.xid)
      .Uint8(m.flags)
      .Lsn(m.commit_lsn)
      .Lsn(m.end_lsn)
      .Int64(m.commit_time)
      .Take();
}

std::vector<uint8_t> EncodeStreamAbort(const pgoutput::StreamAbort& m) {
  ByteWriter out;
  out.Uint8('A').Uint32(m.xid).Uint32(m.subxid);
  if (m.abort_lsn.has_value()) {
    out.Lsn(*m.abort_lsn).Int64(m.abort_time.value_or(0));
  }
  return out.Take();
}

std::vector<uint8_t> EncodeBeginPrepare(const pgoutput::BeginPrepare& m) {
  return ByteWriter()
      .Uint8('b')
      .Lsn(m.prepare_lsn)
      .Lsn(m.end_lsn)
      .Int64(m.prepare_time)
      .Uint32(m.xid)
      .CString(m.gid)
      .Take();
}

std::vector<uint8_t> EncodePrepare(const pgoutput::Prepare& m) {
  ByteWriter out;
  WritePrepareFields('P', m, out);
  return out.Take();
}

std::vector<uint8_t> EncodeStreamPrepare(const pgoutput::StreamPrepare& m) {
  ByteWriter out;
  WritePrepareFields('p', m, out);
  return out.Take();
}

std::vector<uint8_t> EncodeCommitPrepared(const pgoutput::CommitPrepared& m) {
  return ByteWriter()
      .Uint8('K')
      .Uint8(m.flags)
      .Lsn(m.commit_lsn)
      .Lsn(m.end_lsn)
      .Int64(m.commit_time)
      .Uint32(m.xid)
      .CString(m.gid)
      .Take();
}

std::vector<uint8_t> EncodeRollbackPrepared(const pgoutput::RollbackPrepared& m) {
  return ByteWriter()
      .Uint8('r')
      .Uint8(m.flags)
      .Lsn(m.prepare_end_lsn)
      .Lsn(m.rollback_end_lsn)
      .Int64(m.prepare_time)
      .Int64(m.rollback_time)
      .Uint32(m.xid)
      .CString(m.gid)
      .Take();
}

namespace {

// Overload set used by Encode() to dispatch on the alternative.
struct EncodeVisitor {
  std::vector<uint8_t> operator()(const pgoutput::Begin& m) { return EncodeBegin(m); }
  std::vector<uint8_t> operator()(const pgoutput::Commit& m) { return EncodeCommit(m); }
  std::vector<uint8_t> operator()(const pgoutput::Origin& m) { return EncodeOrigin(m); }
  std::vector<uint8_t> operator()(const pgoutput::Relation& m) { return EncodeRelation(m); }
  std::vector<uint8_t> operator()(const pgoutput::Type& m) { return EncodeType(m); }
  std::vector<uint8_t> operator()(const pgoutput::Insert& m) { return EncodeInsert(m); }
  std::vector<uint8_t> operator()(const pgoutput::Update& m) { return EncodeUpdate(m); }
  std::vector<uint8_t> operator()(const pgoutput::Delete& m) { return EncodeDelete(m); }
  std::vector<uint8_t> operator()(const pgoutput::Truncate& m) { return EncodeTruncate(m); }
  std::vector<uint8_t> operator()(const pgoutput::LogicalMessage& m) { return EncodeMessage(m); }
  std::vector<uint8_t> operator()(const pgoutput::StreamStart& m) { return EncodeStreamStart(m); }
  std::vector<uint8_t> operator()(const pgoutput::StreamStop& m) { return EncodeStreamStop(m); }
  std::vector<uint8_t> operator()(const pgoutput::StreamCommit& m) { return EncodeStreamCommit(m); }
  std::vector<uint8_t> operator()(const pgoutput::StreamAbort& m) { return EncodeStreamAbort(m); }
  std::vector<uint8_t> operator()(const pgoutput::BeginPrepare& m) { return EncodeBeginPrepare(m); }
  std::vector<uint8_t> operator()(const pgoutput::Prepare& m) { return EncodePrepare(m); }
  std::vector<uint8_t> operator()(const pgoutput::StreamPrepare& m) {
    return EncodeStreamPrepare(m);
  }
  std::vector<uint8_t> operator()(const pgoutput::CommitPrepared& m) {
    return EncodeCommitPrepared(m);
  }
  std::vector<uint8_t> operator()(const pgoutput::RollbackPrepared& m) {
    return EncodeRollbackPrepared(m);
  }
};

// Each message type as a tuple of references to its fields, so that equality is
// one tuple comparison per type. A field added to pgoutput.h must be added here.
auto Fields(const pgoutput::Begin& m) { return std::tie(m.final_lsn, m.commit_time, m.xid); }
auto Fields(const pgoutput::Commit& m) {
  return std::tie(m.flags, m.commit_lsn, m.end_lsn, m.commit_time);
}
auto Fields(const pgoutput::Origin& m) { return std::tie(m.origin_lsn, m.name); }
auto Fields(const pgoutput::RelationColumn& m) {
  return std::tie(m.flags, m.name, m.type_oid, m.type_modifier);
}
auto Fields(const pgoutput::Type& m) {
  return std::tie(m.xid, m.type_oid, m.namespace_name, m.type_name);
}
auto Fields(const pgoutput::Insert& m) { return std::tie(m.xid, m.relation_id, m.new_tuple); }
auto Fields(const pgoutput::Update& m) {
  return std::tie(m.xid, m.relation_id, m.old_kind, m.old_tuple, m.new_tuple);
}
auto Fields(const pgoutput::Delete& m) {
  return std::tie(m.xid, m.relation_id, m.old_kind, m.old_tuple);
}
auto Fields(const pgoutput::Truncate& m) { return std::tie(m.xid, m.options, m.relation_ids); }
auto Fields(const pgoutput::LogicalMessage& m) {
  return std::tie(m.xid, m.flags, m.lsn, m.prefix, m.content);
}
auto Fields(const pgoutput::StreamStart& m) { return std::tie(m.xid, m.first_segment); }
auto Fields(const pgoutput::StreamStop&) { return std::tie(); }
auto Fields(const pgoutput::StreamCommit& m) {
  return std::tie(m.xid, m.flags, m.commit_lsn, m.end_lsn, m.commit_time);
}
auto Fields(const pgoutput::StreamAbort& m) {
  return std::tie(m.xid, m.subxid, m.abort_lsn, m.abort_time);
}
auto Fields(const pgoutput::BeginPrepare& m) {
  return std::tie(m.prepare_lsn, m.end_lsn, m.prepare_time, m.xid, m.gid);
}
auto Fields(const pgoutput::PrepareFields& m) {
  return std::tie(m.flags, m.prepare_lsn, m.end_lsn, m.prepare_time, m.xid, m.gid);
}
auto Fields(const pgoutput::CommitPrepared& m) {
  return std::tie(m.flags, m.commit_lsn, m.end_lsn, m.commit_time, m.xid, m.gid);
}
auto Fields(const pgoutput::RollbackPrepared& m) {
  return std::tie(m.flags, m.prepare_end_lsn, m.rollback_end_lsn, m.prepare_time, m.rollback_time,
                  m.xid, m.gid);
}

bool Equal(const pgoutput::Relation& a, const pgoutput::Relation& b) {
  if (std::tie(a.xid, a.relation_id, a.namespace_name, a.relation_name, a.replica_identity) !=
          std::tie(b.xid, b.relation_id, b.namespace_name, b.relation_name, b.replica_identity) ||
      a.columns.size() != b.columns.size()) {
    return false;
  }
  for (size_t i = 0; i < a.columns.size(); ++i) {
    if (Fields(a.columns[i]) != Fields(b.columns[i])) return false;
  }
  return true;
}

template <typename T>
bool Equal(const T& a, const T& b) {
  return Fields(a) == Fields(b);
}

std::string Quote(absl::string_view bytes) {
  return absl::StrCat("\"", absl::CHexEscape(bytes), "\"");
}

std::string Xid(const std::optional<uint32_t>& xid) {
  return xid.has_value() ? absl::StrCat(*xid) : "-";
}

std::string DescribeTuple(const pgoutput::TupleData& tuple) {
  return absl::StrCat("[",
                      absl::StrJoin(tuple.columns, ", ",
                                    [](std::string* out, const pgoutput::TupleValue& value) {
                                      absl::StrAppend(
                                          out, std::string(1, static_cast<char>(value.kind)));
                                      if (value.kind == pgoutput::TupleValue::Kind::kText ||
                                          value.kind == pgoutput::TupleValue::Kind::kBinary) {
                                        absl::StrAppend(out, Quote(value.data));
                                      }
                                    }),
                      "]");
}

std::string DescribeOld(pgoutput::OldTupleKind kind, const pgoutput::TupleData& tuple) {
  if (kind == pgoutput::OldTupleKind::kNone) return "old=none";
  return absl::StrCat("old=", std::string(1, static_cast<char>(kind)), DescribeTuple(tuple));
}

std::string DescribePrepare(absl::string_view name, const pgoutput::PrepareFields& m) {
  return absl::StrCat(name, "{flags=", m.flags, ", prepare_lsn=", m.prepare_lsn.ToString(),
                      ", end_lsn=", m.end_lsn.ToString(), ", prepare_time=", m.prepare_time,
                      ", xid=", m.xid, ", gid=", Quote(m.gid), "}");
}

struct DescribeVisitor {
  std::string operator()(const pgoutput::Begin& m) {
    return absl::StrCat("Begin{final_lsn=", m.final_lsn.ToString(), ", commit_time=", m.commit_time,
                        ", xid=", m.xid, "}");
  }
  std::string operator()(const pgoutput::Commit& m) {
    return absl::StrCat("Commit{flags=", m.flags, ", commit_lsn=", m.commit_lsn.ToString(),
                        ", end_lsn=", m.end_lsn.ToString(), ", commit_time=", m.commit_time, "}");
  }
  std::string operator()(const pgoutput::Origin& m) {
    return absl::StrCat("Origin{origin_lsn=", m.origin_lsn.ToString(), ", name=", Quote(m.name),
                        "}");
  }
  std::string operator()(const pgoutput::Relation& m) {
    std::string columns =
        absl::StrJoin(m.columns, ", ", [](std::string* out, const pgoutput::RelationColumn& c) {
          absl::StrAppend(out, "{flags=", c.flags, ", name=", Quote(c.name),
                          ", type_oid=", c.type_oid, ", typmod=", c.type_modifier, "}");
        });
    return absl::StrCat("Relation{xid=", Xid(m.xid), ", relation_id=", m.relation_id,
                        ", namespace=", Quote(m.namespace_name), ", name=", Quote(m.relation_name),
                        ", replica_identity=", std::string(1, m.replica_identity), ", columns=[",
                        columns, "]}");
  }
  std::string operator()(const pgoutput::Type& m) {
    return absl::StrCat("Type{xid=", Xid(m.xid), ", type_oid=", m.type_oid,
                        ", namespace=", Quote(m.namespace_name), ", name=", Quote(m.type_name),
                        "}");
  }
  std::string operator()(const pgoutput::Insert& m) {
    return absl::StrCat("Insert{xid=", Xid(m.xid), ", relation_id=", m.relation_id,
                        ", new=", DescribeTuple(m.new_tuple), "}");
  }
  std::string operator()(const pgoutput::Update& m) {
    return absl::StrCat("Update{xid=", Xid(m.xid), ", relation_id=", m.relation_id, ", ",
                        DescribeOld(m.old_kind, m.old_tuple), ", new=", DescribeTuple(m.new_tuple),
                        "}");
  }
  std::string operator()(const pgoutput::Delete& m) {
    return absl::StrCat("Delete{xid=", Xid(m.xid), ", relation_id=", m.relation_id, ", ",
                        DescribeOld(m.old_kind, m.old_tuple), "}");
  }
  std::string operator()(const pgoutput::Truncate& m) {
    return absl::StrCat("Truncate{xid=", Xid(m.xid), ", options=", m.options, ", relation_ids=[",
                        absl::StrJoin(m.relation_ids, ", "), "]}");
  }
  std::string operator()(const pgoutput::LogicalMessage& m) {
    return absl::StrCat("Message{xid=", Xid(m.xid), ", flags=", m.flags, ", lsn=", m.lsn.ToString(),
                        ", prefix=", Quote(m.prefix), ", content=", Quote(m.content), "}");
  }
  std::string operator()(const pgoutput::StreamStart& m) {
    return absl::StrCat("StreamStart{xid=", m.xid,
                        ", first_segment=", m.first_segment ? "true" : "false", "}");
  }
  std::string operator()(const pgoutput::StreamStop&) { return "StreamStop{}"; }
  std::string operator()(const pgoutput::StreamCommit& m) {
    return absl::StrCat("StreamCommit{xid=", m.xid, ", flags=", m.flags,
                        ", commit_lsn=", m.commit_lsn.ToString(),
                        ", end_lsn=", m.end_lsn.ToString(), ", commit_time=", m.commit_time, "}");
  }
  std::string operator()(const pgoutput::StreamAbort& m) {
    return absl::StrCat(
        "StreamAbort{xid=", m.xid, ", subxid=", m.subxid,
        ", abort_lsn=", m.abort_lsn.has_value() ? m.abort_lsn->ToString() : "-",
        ", abort_time=", m.abort_time.has_value() ? absl::StrCat(*m.abort_time) : "-", "}");
  }
  std::string operator()(const pgoutput::BeginPrepare& m) {
    return absl::StrCat("BeginPrepare{prepare_lsn=", m.prepare_lsn.ToString(),
                        ", end_lsn=", m.end_lsn.ToString(), ", prepare_time=", m.prepare_time,
                        ", xid=", m.xid, ", gid=", Quote(m.gid), "}");
  }
  std::string operator()(const pgoutput::Prepare& m) { return DescribePrepare("Prepare", m); }
  std::string operator()(const pgoutput::StreamPrepare& m) {
    return DescribePrepare("StreamPrepare", m);
  }
  std::string operator()(const pgoutput::CommitPrepared& m) {
    return absl::StrCat("CommitPrepared{flags=", m.flags, ", commit_lsn=", m.commit_lsn.ToString(),
                        ", end_lsn=", m.end_lsn.ToString(), ", commit_time=", m.commit_time,
                        ", xid=", m.xid, ", gid=", Quote(m.gid), "}");
  }
  std::string operator()(const pgoutput::RollbackPrepared& m) {
    return absl::StrCat(
        "RollbackPrepared{flags=", m.flags, ", prepare_end_lsn=", m.prepare_end_lsn.ToString(),
        ", rollback_end_lsn=", m.rollback_end_lsn.ToString(), ", prepare_time=", m.prepare_time,
        ", rollback_time=", m.rollback_time, ", xid=", m.xid, ", gid=", Quote(m.gid), "}");
  }
};

}  // namespace

std::vector<uint8_t> Encode(const pgoutput::Message& message) {
  return absl::visit(EncodeVisitor{}, message);
}

std::vector<uint8_t> EncodeXLogData(Lsn data_start, Lsn wal_end, int64_t send_time,
                                    absl::Span<const uint8_t> payload) {
  return ByteWriter()
      .Uint8('w')
      .Lsn(data_start)
      .Lsn(wal_end)
      .Int64(send_time)
      .Bytes(payload)
      .Take();
}

std::vector<uint8_t> EncodeKeepalive(Lsn wal_end, int64_t send_time, bool reply_requested) {
  return ByteWriter()
      .Uint8('k')
      .Lsn(wal_end)
      .Int64(send_time)
      .Uint8(reply_requested ? 1 : 0)
      .Take();
}

bool MessagesEqual(const pgoutput::Message& a, const pgoutput::Message& b) {
  if (a.index() != b.index()) return false;
  return absl::visit(
      [&b](const auto& left) {
        using T = std::decay_t<decltype(left)>;
        return Equal(left, absl::get<T>(b));
      },
      a);
}

std::string DescribeMessage(const pgoutput::Message& message) {
  return absl::visit(DescribeVisitor{}, message);
}

namespace {

// True for the message types whose optional xid leads them inside a stream block.
template <typename T, typename = void>
struct HasStreamXid : std::false_type {};
template <typename T>
struct HasStreamXid<T, std::void_t<decltype(T::xid)>>
    : std::is_same<decltype(T::xid), std::optional<uint32_t>> {};

// The optional xid of `message`, or nullptr when its type has none.
const std::optional<uint32_t>* StreamXid(const pgoutput::Message& message) {
  return absl::visit(
      [](const auto& m) -> const std::optional<uint32_t>* {
        using T = std::decay_t<decltype(m)>;
        if constexpr (HasStreamXid<T>::value) {
          return &m.xid;
        } else {
          return nullptr;
        }
      },
      message);
}

pgoutput::TupleValue Text(absl::string_view text) {
  return {pgoutput::TupleValue::Kind::kText, std::string(text)};
}
pgoutput::TupleValue Binary(absl::string_view bytes) {
  return {pgoutput::TupleValue::Kind::kBinary, std::string(bytes)};
}
pgoutput::TupleValue Null() { return {pgoutput::TupleValue::Kind::kNull, ""}; }
pgoutput::TupleValue Unchanged() { return {pgoutput::TupleValue::Kind::kUnchangedToast, ""}; }

// Adds `message` and, when it carries a stream xid, its in-stream twin.
template <typename T>
void AddSample(std::string name, T message, std::vector<NamedMessage>& out) {
  if constexpr (HasStreamXid<T>::value) {
    T streamed = message;
    streamed.xid = 0x000004D2;  // 1234: any valid xid; tests check it comes back.
    out.push_back({name + "InStream", std::move(streamed)});
  }
  out.push_back({std::move(name), std::move(message)});
}

}  // namespace

std::vector<NamedMessage> SampleMessages() {
  using pgoutput::Begin;
  using pgoutput::BeginPrepare;
  using pgoutput::Commit;
  using pgoutput::CommitPrepared;
  using pgoutput::Delete;
  using pgoutput::Insert;
  using pgoutput::LogicalMessage;
  using pgoutput::OldTupleKind;
  using pgoutput::Origin;
  using pgoutput::Prepare;
  using pgoutput::PrepareFields;
  using pgoutput::Relation;
  using pgoutput::RollbackPrepared;
  using pgoutput::StreamAbort;
  using pgoutput::StreamCommit;
  using pgoutput::StreamPrepare;
  using pgoutput::StreamStart;
  using pgoutput::StreamStop;
  using pgoutput::Truncate;
  using pgoutput::Type;
  using pgoutput::Update;
  constexpr int64_t kTime = 774000000123456;  // 2024-07-11, PostgreSQL epoch micros.
  const std::string kBinaryWithNuls("\x00\x01\xff\x00", 4);
  std::vector<NamedMessage> out;

  AddSample("Begin", Begin{Lsn(0x16B3748), kTime, 742}, out);
  AddSample("BeginExtremes", Begin{Lsn(UINT64_MAX), INT64_MIN, UINT32_MAX}, out);
  AddSample("Commit", Commit{0, Lsn(0x16B3748), Lsn(0x16B3778), kTime}, out);
  AddSample("Origin", Origin{Lsn(0x3000060), "pg_16395"}, out);
  AddSample("OriginEmptyName", Origin{Lsn(0), ""}, out);

  Relation relation;
  relation.relation_id = 16385;
  relation.namespace_name = "public";
  relation.relation_name = "accounts";
  relation.replica_identity = 'd';
  relation.columns = {
      {1, "id", 23, -1}, {0, "name", 1043, 68}, {0, "balance", 1700, 655366}, {0, "", 25, -1}};
  AddSample("Relation", relation, out);
  Relation catalog_full;
  catalog_full.relation_id = 2;
  catalog_full.namespace_name = "";  // pg_catalog
  catalog_full.relation_name = "t";
  catalog_full.replica_identity = 'f';
  catalog_full.columns = {{1, "a", 16418, -1}};
  AddSample("RelationFullIdentity", catalog_full, out);
  Relation no_columns;
  no_columns.relation_id = UINT32_MAX;
  no_columns.relation_name = "empty";
  no_columns.replica_identity = 'n';
  AddSample("RelationNoColumns", no_columns, out);
  Relation index_identity = relation;
  index_identity.replica_identity = 'i';
  AddSample("RelationIndexIdentity", index_identity, out);

  AddSample("Type", Type{std::nullopt, 16418, "", "int4"}, out);
  AddSample("TypeEnum", Type{std::nullopt, 16500, "app", "mood"}, out);

  Insert insert;
  insert.relation_id = 16385;
  insert.new_tuple.columns = {Text("1"), Text(""), Null(), Unchanged(), Binary(kBinaryWithNuls)};
  AddSample("InsertAllKinds", insert, out);
  Insert insert_empty;
  insert_empty.relation_id = 16385;
  AddSample("InsertNoColumns", insert_empty, out);

  Update update;
  update.relation_id = 16385;
  update.old_kind = OldTupleKind::kNone;
  update.new_tuple.columns = {Text("1"), Text("bob"), Unchanged()};
  AddSample("UpdateNoOldTuple", update, out);
  Update update_key = update;
  update_key.old_kind = OldTupleKind::kKey;
  update_key.old_tuple.columns = {Text("2"), Null(), Null()};
  AddSample("UpdateOldKey", update_key, out);
  Update update_full = update;
  update_full.old_kind = OldTupleKind::kFull;
  update_full.old_tuple.columns = {Text("1"), Text("alice"), Binary(kBinaryWithNuls)};
  AddSample("UpdateOldRow", update_full, out);

  Delete delete_key;
  delete_key.relation_id = 16385;
  delete_key.old_kind = OldTupleKind::kKey;
  delete_key.old_tuple.columns = {Text("2"), Null(), Null()};
  AddSample("DeleteOldKey", delete_key, out);
  Delete delete_full = delete_key;
  delete_full.old_kind = OldTupleKind::kFull;
  delete_full.old_tuple.columns = {Text("2"), Text(""), Binary("")};
  AddSample("DeleteOldRow", delete_full, out);

  Truncate truncate;
  truncate.relation_ids = {16385};
  AddSample("Truncate", truncate, out);
  Truncate truncate_many;
  truncate_many.options = Truncate::kCascade | Truncate::kRestartIdentity;
  truncate_many.relation_ids = {16385, 16390, UINT32_MAX};
  AddSample("TruncateCascadeRestartIdentity", truncate_many, out);

  LogicalMessage message;
  message.flags = LogicalMessage::kTransactional;
  message.lsn = Lsn(0x16B37A0);
  message.prefix = "walfeed";
  message.content = "hello";
  AddSample("MessageTransactional", message, out);
  LogicalMessage binary_message;
  binary_message.flags = 0;
  binary_message.lsn = Lsn(0x16B37A0);
  binary_message.prefix = "";
  binary_message.content = kBinaryWithNuls;
  AddSample("MessageNonTransactionalBinary", binary_message, out);

  AddSample("StreamStartFirstSegment", StreamStart{1234, true}, out);
  AddSample("StreamStartLaterSegment", StreamStart{1234, false}, out);
  AddSample("StreamStop", StreamStop{}, out);
  AddSample("StreamCommit", StreamCommit{1234, 0, Lsn(0x2000000), Lsn(0x2000030), kTime}, out);
  AddSample("StreamAbort", StreamAbort{1234, 1234, std::nullopt, std::nullopt}, out);
  AddSample("StreamAbortSubtransaction", StreamAbort{1234, 1240, std::nullopt, std::nullopt}, out);
  AddSample("StreamAbortParallel", StreamAbort{1234, 1234, Lsn(0x2000100), kTime}, out);

  AddSample("BeginPrepare", BeginPrepare{Lsn(0x3000000), Lsn(0x3000040), kTime, 900, "gid-1"}, out);
  Prepare prepare;
  prepare.prepare_lsn = Lsn(0x3000000);
  prepare.end_lsn = Lsn(0x3000040);
  prepare.prepare_time = kTime;
  prepare.xid = 900;
  prepare.gid = "gid-1";
  AddSample("Prepare", prepare, out);
  StreamPrepare stream_prepare;
  static_cast<PrepareFields&>(stream_prepare) = prepare;
  stream_prepare.gid = "";
  AddSample("StreamPrepare", stream_prepare, out);
  AddSample("CommitPrepared",
            CommitPrepared{0, Lsn(0x3000100), Lsn(0x3000140), kTime, 900, "gid-1"}, out);
  AddSample("RollbackPrepared",
            RollbackPrepared{0, Lsn(0x3000040), Lsn(0x3000180), kTime, kTime + 5, 900, "gid-1"},
            out);
  return out;
}

std::vector<pgoutput::DecodeOptions> ValidDecodeOptions(const pgoutput::Message& message) {
  const std::optional<uint32_t>* xid = StreamXid(message);
  const bool is_stream_message =
      absl::string_view("SEcAp").find(pgoutput::Tag(message)) != absl::string_view::npos;
  const auto* abort = absl::get_if<pgoutput::StreamAbort>(&message);
  std::vector<pgoutput::DecodeOptions> out;
  for (uint32_t version = 1; version <= 4; ++version) {
    for (bool in_stream_block : {false, true}) {
      for (bool streaming_parallel : {false, true}) {
        if (in_stream_block && version < 2) continue;
        if (streaming_parallel && version < 4) continue;
        if (is_stream_message && version < 2) continue;
        if (xid != nullptr && xid->has_value() != in_stream_block) continue;
        if (abort != nullptr && abort->abort_lsn.has_value() != streaming_parallel) continue;
        out.push_back({version, in_stream_block, streaming_parallel});
      }
    }
  }
  return out;
}

}  // namespace walfeed::testing
