// Golden replay: pgoutput streams captured from a real PostgreSQL 15, decoded.
//
// The .hex files next to this test were recorded by capture.sh from a throwaway
// PostgreSQL 15 cluster running a scripted workload: one raw walsender CopyData
// frame per line, walsender header included. No database is needed here. Every
// frame goes through copy_data::Decode and every XLogData payload through
// pgoutput::Decode, and the test pins what the server actually sent: the message
// sequence of every workload step, relation and type metadata, tuple kinds and
// values exactly as PostgreSQL prints (or sends) them, and the LSN relationships
// walfeed relies on (Begin.final_lsn == Commit.commit_lsn, header positions,
// ordering).
//
// Only what survives a re-capture is pinned: LSNs, OIDs of user objects, xids and
// times are compared with each other rather than with constants (except values the
// workload itself fixes, such as the replication origin's timestamp), and the
// number of keepalives, which varies from run to run, is never counted.
#include <cstdint>
#include <fstream>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/ascii.h"
#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/string_view.h"
#include "absl/strings/strip.h"
#include "absl/time/civil_time.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "absl/types/variant.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "replication/copy_data.h"
#include "replication/lsn.h"
#include "replication/pgoutput.h"
#include "tests/testing/status_matchers.h"

namespace walfeed::replication {
namespace {

namespace pg = ::walfeed::replication::pgoutput;
using ::testing::ElementsAre;
using ::testing::ElementsAreArray;
using ::testing::HasSubstr;
using ::walfeed::testing::IsOk;

// 2021-02-03 04:05:06 UTC in microseconds since 2000-01-01: the timestamp the
// workload gives its replication-origin transaction, which becomes its commit time.
constexpr int64_t kOriginCommitTime = 665640306000000;

// pg_type OIDs of built-in types (fixed in every cluster). Column lists below spell
// them as numbers: int2 21, int4 23, int8 20, text 25, bool 16, varchar 1043,
// numeric 1700, timestamptz 1184.
constexpr uint32_t kInt4 = 23;
constexpr uint32_t kInterval = 1186;
constexpr uint32_t kInt4Array = 1007;
constexpr uint32_t kJsonb = 3802;
// User objects get OIDs from here on (PostgreSQL's FirstNormalObjectId).
constexpr uint32_t kFirstNormalObjectId = 16384;

// ---------------------------------------------------------------------------------
// Loading a capture.

struct Frame {
  int line = 0;  // 1-based line in the .hex file, for failure messages.
  bool keepalive = false;
  Lsn wal_end;                   // XLogData walEnd, or the keepalive's walEnd.
  Lsn data_start;                // XLogData only.
  pg::Message message;           // XLogData only.
  bool in_stream_block = false;  // Decoded between Stream Start and Stream Stop.

  char tag() const { return keepalive ? 'k' : pg::Tag(message); }
  // The XLogData header position (dataStart == walEnd is checked separately).
  Lsn header() const { return wal_end; }
};

struct Capture {
  std::vector<std::string> comments;  // Header lines without the leading "# ".
  Lsn endpos;                         // From the "# endpos: X/Y" line.
  std::vector<Frame> frames;          // Every frame, in file order.
};

std::string FilePath(absl::string_view name) { return absl::StrCat(WALFEED_GOLDEN_DIR, "/", name); }

// Reads and decodes one .hex file. XLogData payloads are decoded with the given
// protocol version; Stream Start / Stop toggle in_stream_block as a consumer
// would. Any failure names the file, the line and the frame's hex.
absl::StatusOr<Capture> Load(absl::string_view name, uint32_t protocol_version) {
  std::ifstream in(FilePath(name));
  if (!in) return absl::NotFoundError(absl::StrCat("cannot open ", FilePath(name)));
  Capture capture;
  pg::DecodeOptions options;
  options.protocol_version = protocol_version;
  std::string line;
  int line_number = 0;
  auto fail = [&](absl::string_view what) {
    return absl::DataLossError(
        absl::StrCat(name, ":", line_number, ": ", what, "\n  frame: ", line));
  };
  while (std::getline(in, line)) {
    ++line_number;
    if (line.empty()) continue;
    if (line[0] == '#') {
      std::string comment(absl::StripAsciiWhitespace(absl::string_view(line).substr(1)));
      absl::string_view endpos_text = comment;
      if (absl::ConsumePrefix(&endpos_text, "endpos: ")) {
        absl::StatusOr<Lsn> endpos = Lsn::Parse(endpos_text);
        if (!endpos.ok()) return fail(endpos.status().ToString());
        capture.endpos = *endpos;
      }
      capture.comments.push_back(std::move(comment));
      continue;
    }
    if (line.size() % 2 != 0) return fail("odd number of hex digits");
    for (char c : line) {
      if (!absl::ascii_isxdigit(static_cast<unsigned char>(c))) return fail("not hex");
    }
    const std::string bytes = absl::HexStringToBytes(line);
    const absl::Span<const uint8_t> span(reinterpret_cast<const uint8_t*>(bytes.data()),
                                         bytes.size());
    absl::StatusOr<copy_data::ServerMessage> server = copy_data::Decode(span);
    if (!server.ok()) return fail(server.status().ToString());

    Frame frame;
    frame.line = line_number;
    if (const auto* keepalive = absl::get_if<copy_data::PrimaryKeepalive>(&*server)) {
      frame.keepalive = true;
      frame.wal_end = keepalive->wal_end;
    } else {
      const auto& data = absl::get<copy_data::XLogData>(*server);
      frame.data_start = data.data_start;
      frame.wal_end = data.wal_end;
      frame.in_stream_block = options.in_stream_block;
      absl::StatusOr<pg::Message> message = pg::Decode(data.payload, options);
      if (!message.ok()) return fail(message.status().ToString());
      frame.message = *std::move(message);
      if (absl::holds_alternative<pg::StreamStart>(frame.message)) {
        options.in_stream_block = true;
      } else if (absl::holds_alternative<pg::StreamStop>(frame.message)) {
        options.in_stream_block = false;
      }
    }
    capture.frames.push_back(std::move(frame));
  }
  if (!capture.endpos.valid()) {
    return absl::DataLossError(absl::StrCat(name, ": no \"# endpos: X/Y\" line"));
  }
  return capture;
}

// One transaction (Begin..Commit, Begin Prepare..Prepare), one stream block
// (Stream Start..Stream Stop) or one stand-alone message (a non-transactional
// Message, Stream Commit/Abort, Commit/Rollback Prepared). Keepalives are left out.
struct Unit {
  std::vector<const Frame*> frames;  // Point into the Capture, which must outlive this.
  std::string tags;

  template <typename T>
  const T& Get(size_t i) const {
    return absl::get<T>(frames.at(i)->message);
  }
  Lsn header(size_t i) const { return frames.at(i)->header(); }
};

std::vector<Unit> Units(const Capture& capture) {
  std::vector<Unit> units;
  bool open = false;
  for (const Frame& frame : capture.frames) {
    if (frame.keepalive) continue;
    const char tag = frame.tag();
    if (!open) {
      units.emplace_back();
      open = tag == 'B' || tag == 'b' || tag == 'S';
    } else {
      const char first = units.back().tags[0];
      const bool closes = ((first == 'B' || first == 'b') && (tag == 'C' || tag == 'P')) ||
                          (first == 'S' && tag == 'E');
      open = !closes;
    }
    units.back().frames.push_back(&frame);
    units.back().tags.push_back(tag);
  }
  return units;
}

std::vector<std::string> Tags(const std::vector<Unit>& units) {
  std::vector<std::string> tags;
  for (const Unit& unit : units) tags.push_back(unit.tags);
  return tags;
}

// ---------------------------------------------------------------------------------
// Compact renderings, so expectations read like the data and failures print it.

// Text as-is (multibyte UTF-8 included); quotes, backslashes and control bytes
// escaped.
std::string Printable(absl::string_view text) {
  std::string out;
  for (char c : text) {
    const auto byte = static_cast<unsigned char>(c);
    if (c == '"' || c == '\\') {
      absl::StrAppend(&out, "\\", std::string(1, c));
    } else if (byte < 0x20 || byte == 0x7f) {
      absl::StrAppendFormat(&out, "\\x%02x", byte);
    } else {
      out.push_back(c);
    }
  }
  return out;
}

// n | u | t"text" | b:hex
std::string Show(const pg::TupleValue& value) {
  switch (value.kind) {
    case pg::TupleValue::Kind::kNull:
      return "n";
    case pg::TupleValue::Kind::kUnchangedToast:
      return "u";
    case pg::TupleValue::Kind::kText:
      return absl::StrCat("t\"", Printable(value.data), "\"");
    case pg::TupleValue::Kind::kBinary:
      return absl::StrCat("b:", absl::BytesToHexString(value.data));
  }
  return "?";
}

std::string Show(const pg::TupleData& tuple) {
  std::vector<std::string> values;
  for (const pg::TupleValue& value : tuple.columns) values.push_back(Show(value));
  return absl::StrJoin(values, " ");
}

// Tuple kinds only, text and binary values both as 'v': what text and binary
// captures of the same WAL must share.
std::string Kinds(const pg::TupleData& tuple) {
  std::string kinds;
  for (const pg::TupleValue& value : tuple.columns) {
    const bool has_value =
        value.kind == pg::TupleValue::Kind::kText || value.kind == pg::TupleValue::Kind::kBinary;
    kinds.push_back(has_value ? 'v' : static_cast<char>(value.kind));
  }
  return kinds;
}

// "name:type_oid:typmod:flags ..." in column order.
std::string ShowColumns(const pg::Relation& relation) {
  std::vector<std::string> columns;
  for (const pg::RelationColumn& column : relation.columns) {
    columns.push_back(absl::StrCat(column.name, ":", column.type_oid, ":", column.type_modifier,
                                   ":", column.flags));
  }
  return absl::StrJoin(columns, " ");
}

// Every field except tuple values and times, for comparing two captures of the
// same WAL (text and binary mode).
struct SkeletonVisitor {
  std::string operator()(const pg::Begin& m) const {
    return absl::StrCat("B ", m.final_lsn.ToString(), " ", m.xid);
  }
  std::string operator()(const pg::Commit& m) const {
    return absl::StrCat("C ", m.flags, " ", m.commit_lsn.ToString(), " ", m.end_lsn.ToString());
  }
  std::string operator()(const pg::Origin& m) const {
    return absl::StrCat("O ", m.origin_lsn.ToString(), " ", m.name);
  }
  std::string operator()(const pg::Relation& m) const {
    return absl::StrCat("R ", m.relation_id, " ", m.namespace_name, ".", m.relation_name, " ",
                        std::string(1, m.replica_identity), " ", ShowColumns(m));
  }
  std::string operator()(const pg::Type& m) const {
    return absl::StrCat("Y ", m.type_oid, " ", m.namespace_name, ".", m.type_name);
  }
  std::string operator()(const pg::Insert& m) const {
    return absl::StrCat("I ", m.relation_id, " ", Kinds(m.new_tuple));
  }
  std::string operator()(const pg::Update& m) const {
    return absl::StrCat("U ", m.relation_id, " ", static_cast<int>(m.old_kind), " ",
                        Kinds(m.old_tuple), " ", Kinds(m.new_tuple));
  }
  std::string operator()(const pg::Delete& m) const {
    return absl::StrCat("D ", m.relation_id, " ", static_cast<int>(m.old_kind), " ",
                        Kinds(m.old_tuple));
  }
  std::string operator()(const pg::Truncate& m) const {
    return absl::StrCat("T ", m.options, " ", absl::StrJoin(m.relation_ids, ","));
  }
  std::string operator()(const pg::LogicalMessage& m) const {
    return absl::StrCat("M ", m.flags, " ", m.lsn.ToString(), " ", m.prefix, " ",
                        absl::BytesToHexString(m.content));
  }
  template <typename T>
  std::string operator()(const T& m) const {
    return std::string(1, pg::Tag(pg::Message(m)));
  }
};

std::string Skeleton(const Frame& frame) {
  return absl::StrCat(frame.header().ToString(), " ",
                      absl::visit(SkeletonVisitor{}, frame.message));
}

std::string Be16(uint16_t v) {
  return std::string{static_cast<char>(v >> 8), static_cast<char>(v & 0xff)};
}
std::string Be32(uint32_t v) { return Be16(v >> 16) + Be16(v & 0xffff); }
std::string Be64(uint64_t v) {
  return Be32(static_cast<uint32_t>(v >> 32)) + Be32(static_cast<uint32_t>(v));
}

std::string Hex(absl::string_view bytes) { return absl::BytesToHexString(bytes); }

// numeric's send format: ndigits, weight, sign, display scale, base-10000 digits.
constexpr uint16_t kNumericNegative = 0x4000;
std::string Numeric(int16_t weight, uint16_t sign, uint16_t dscale,
                    const std::vector<uint16_t>& digits) {
  std::string out = absl::StrCat(Be16(static_cast<uint16_t>(digits.size())),
                                 Be16(static_cast<uint16_t>(weight)), Be16(sign), Be16(dscale));
  for (uint16_t digit : digits) out += Be16(digit);
  return out;
}

// ---------------------------------------------------------------------------------
// Invariants every capture must satisfy, whatever the workload.

struct GoldenFile {
  const char* name;
  uint32_t protocol_version;
};

class GoldenFileTest : public ::testing::TestWithParam<GoldenFile> {
 protected:
  void SetUp() override {
    absl::StatusOr<Capture> capture = Load(GetParam().name, GetParam().protocol_version);
    ASSERT_THAT(capture, IsOk());
    capture_ = *std::move(capture);
    units_ = Units(capture_);
    ASSERT_FALSE(units_.empty());
  }

  Capture capture_;
  std::vector<Unit> units_;
};

bool IsCommitLike(char tag) {
  return tag == 'C' || tag == 'c' || tag == 'A' || tag == 'P' || tag == 'p' || tag == 'K' ||
         tag == 'r';
}

TEST_P(GoldenFileTest, HeaderRecordsServerAndCommand) {
  EXPECT_THAT(capture_.comments,
              ::testing::Contains(::testing::StartsWith("server: PostgreSQL 15.")));
  EXPECT_THAT(
      capture_.comments,
      ::testing::Contains(::testing::AllOf(
          ::testing::StartsWith("command: START_REPLICATION SLOT "),
          HasSubstr(absl::StrCat("\"proto_version\" '", GetParam().protocol_version, "'")))));
}

// dataStart == walEnd; Relation/Type (and a Begin followed by Origin) at 0/0, every
// other message at a real position; Begin at its first change; transaction ends at
// their end LSN.
TEST_P(GoldenFileTest, XLogDataHeaderPositions) {
  for (const Frame& frame : capture_.frames) {
    if (frame.keepalive) {
      EXPECT_TRUE(frame.wal_end.valid()) << "line " << frame.line;
      continue;
    }
    EXPECT_EQ(frame.data_start, frame.wal_end) << "line " << frame.line;
  }
  for (const Unit& unit : units_) {
    for (size_t i = 0; i < unit.frames.size(); ++i) {
      const Frame& frame = *unit.frames[i];
      const char tag = unit.tags[i];
      SCOPED_TRACE(absl::StrCat("line ", frame.line, " tag ", std::string(1, tag)));
      if (tag == 'R' || tag == 'Y') {
        EXPECT_EQ(frame.header(), Lsn::kInvalid);
      } else if (tag == 'B' || tag == 'b') {
        // Sent lazily with the first change, at that change's LSN, unless an Origin
        // follows (then 0/0 and the Origin carries the position).
        const size_t first_change = unit.tags.find_first_not_of("RYO", i + 1);
        ASSERT_NE(first_change, std::string::npos);
        if (unit.tags[i + 1] == 'O') {
          EXPECT_EQ(frame.header(), Lsn::kInvalid);
          EXPECT_EQ(unit.header(i + 1), unit.header(first_change));
        } else {
          EXPECT_EQ(frame.header(), unit.header(first_change));
        }
      } else {
        EXPECT_TRUE(frame.header().valid());
      }
      switch (tag) {
        case 'C':
          EXPECT_EQ(frame.header(), unit.Get<pg::Commit>(i).end_lsn);
          break;
        case 'c':
          EXPECT_EQ(frame.header(), unit.Get<pg::StreamCommit>(i).end_lsn);
          break;
        case 'P':
          EXPECT_EQ(frame.header(), unit.Get<pg::Prepare>(i).end_lsn);
          break;
        case 'K':
          EXPECT_EQ(frame.header(), unit.Get<pg::CommitPrepared>(i).end_lsn);
          break;
        case 'r':
          EXPECT_EQ(frame.header(), unit.Get<pg::RollbackPrepared>(i).rollback_end_lsn);
          break;
        case 'M':  // Transactional or not: the end of the message's own WAL record.
          EXPECT_EQ(frame.header(), unit.Get<pg::LogicalMessage>(i).lsn);
          break;
        default:
          break;
      }
    }
  }
}

// Begin.final_lsn == Commit.commit_lsn < Commit.end_lsn, same time; commits in
// strictly increasing LSN order, each after the previous one's end.
TEST_P(GoldenFileTest, TransactionsAreConsistentAndOrdered) {
  Lsn previous_commit;
  Lsn previous_end;
  for (const Unit& unit : units_) {
    SCOPED_TRACE(absl::StrCat("unit ", unit.tags, " at line ", unit.frames[0]->line));
    Lsn commit_lsn;
    Lsn end_lsn;
    if (unit.tags[0] == 'B') {
      ASSERT_EQ(unit.tags.back(), 'C');
      EXPECT_EQ(unit.tags.find_first_of("BCbPSEcAKr", 1), unit.tags.size() - 1);
      const auto& begin = unit.Get<pg::Begin>(0);
      const auto& commit = unit.Get<pg::Commit>(unit.tags.size() - 1);
      EXPECT_EQ(begin.final_lsn, commit.commit_lsn);
      EXPECT_EQ(begin.commit_time, commit.commit_time);
      EXPECT_EQ(commit.flags, 0);
      EXPECT_NE(begin.xid, 0u);
      commit_lsn = commit.commit_lsn;
      end_lsn = commit.end_lsn;
      // Changes lie before the commit record.
      for (size_t i = 1; i + 1 < unit.frames.size(); ++i) {
        EXPECT_LT(unit.header(i), commit_lsn) << "line " << unit.frames[i]->line;
      }
    } else if (unit.tags == "c") {
      commit_lsn = unit.Get<pg::StreamCommit>(0).commit_lsn;
      end_lsn = unit.Get<pg::StreamCommit>(0).end_lsn;
    } else if (unit.tags == "K") {
      commit_lsn = unit.Get<pg::CommitPrepared>(0).commit_lsn;
      end_lsn = unit.Get<pg::CommitPrepared>(0).end_lsn;
    } else {
      continue;
    }
    EXPECT_LT(commit_lsn, end_lsn);
    EXPECT_GT(commit_lsn, previous_commit);
    EXPECT_GE(commit_lsn, previous_end);
    previous_commit = commit_lsn;
    previous_end = end_lsn;
  }
}

// Every change names a relation announced earlier in the stream and carries
// exactly as many columns as that relation's latest Relation message.
TEST_P(GoldenFileTest, TuplesMatchTheirRelation) {
  std::map<uint32_t, size_t> columns_by_relation;
  for (const Frame& frame : capture_.frames) {
    if (frame.keepalive) continue;
    SCOPED_TRACE(absl::StrCat("line ", frame.line));
    const pg::Message& m = frame.message;
    auto expect_width = [&](uint32_t relation_id, const pg::TupleData& tuple) {
      auto it = columns_by_relation.find(relation_id);
      ASSERT_NE(it, columns_by_relation.end()) << "relation " << relation_id;
      EXPECT_EQ(tuple.columns.size(), it->second);
    };
    if (const auto* r = absl::get_if<pg::Relation>(&m)) {
      columns_by_relation[r->relation_id] = r->columns.size();
    } else if (const auto* i = absl::get_if<pg::Insert>(&m)) {
      expect_width(i->relation_id, i->new_tuple);
    } else if (const auto* u = absl::get_if<pg::Update>(&m)) {
      if (u->old_kind != pg::OldTupleKind::kNone) expect_width(u->relation_id, u->old_tuple);
      expect_width(u->relation_id, u->new_tuple);
    } else if (const auto* d = absl::get_if<pg::Delete>(&m)) {
      expect_width(d->relation_id, d->old_tuple);
    } else if (const auto* t = absl::get_if<pg::Truncate>(&m)) {
      for (uint32_t id : t->relation_ids) EXPECT_EQ(columns_by_relation.count(id), 1u);
    }
  }
}

// xids appear on changes exactly inside stream blocks.
TEST_P(GoldenFileTest, XidPrefixOnlyInsideStreamBlocks) {
  for (const Frame& frame : capture_.frames) {
    if (frame.keepalive) continue;
    std::optional<uint32_t> xid;
    bool carries_xid = true;
    absl::visit(
        [&](const auto& m) {
          using T = std::decay_t<decltype(m)>;
          if constexpr (std::is_same_v<T, pg::Relation> || std::is_same_v<T, pg::Type> ||
                        std::is_same_v<T, pg::Insert> || std::is_same_v<T, pg::Update> ||
                        std::is_same_v<T, pg::Delete> || std::is_same_v<T, pg::Truncate> ||
                        std::is_same_v<T, pg::LogicalMessage>) {
            xid = m.xid;
          } else {
            carries_xid = false;
          }
        },
        frame.message);
    if (!carries_xid) continue;
    EXPECT_EQ(xid.has_value(), frame.in_stream_block) << "line " << frame.line;
  }
}

// The capture stopped at the first frame that proved endpos was passed: a
// keepalive at or past it, or a transaction end at or past it.
TEST_P(GoldenFileTest, EndsAtEndpos) {
  auto passes_endpos = [&](const Frame& frame) {
    if (frame.keepalive) return frame.wal_end >= capture_.endpos;
    return IsCommitLike(frame.tag()) && frame.header() >= capture_.endpos;
  };
  ASSERT_FALSE(capture_.frames.empty());
  EXPECT_TRUE(passes_endpos(capture_.frames.back()));
  for (size_t i = 0; i + 1 < capture_.frames.size(); ++i) {
    EXPECT_FALSE(passes_endpos(capture_.frames[i])) << "line " << capture_.frames[i].line;
  }
}

INSTANTIATE_TEST_SUITE_P(AllCaptures, GoldenFileTest,
                         ::testing::Values(GoldenFile{"pg15_text.hex", 1},
                                           GoldenFile{"pg15_binary.hex", 2},
                                           GoldenFile{"pg15_two_phase.hex", 3},
                                           GoldenFile{"pg15_streaming.hex", 2}),
                         [](const ::testing::TestParamInfo<GoldenFile>& info) {
                           std::string name = info.param.name;
                           return name.substr(0, name.find('.'));
                         });

// ---------------------------------------------------------------------------------
// Workload A (capture.sh steps A1-A15), text mode, protocol 1.

// One entry per transaction or stand-alone message, in stream order. A8 (a table
// outside the publication) and the rolled-back part of A11 produce nothing.
const char* const kWorkloadATags[] = {
    "BRIIIC",    // A1 multi-row insert into accounts
    "BUC",       // A2 update of non-key columns
    "BUC",       // A3 update of the primary key
    "BDC",       // A4 delete
    "BRIIC",     // A5 full_audit insert
    "BUC",       // A5 update under REPLICA IDENTITY FULL
    "BDC",       // A5 delete under REPLICA IDENTITY FULL
    "BRIC",      // A6 docs insert with a 10240-char out-of-line value
    "BUC",       // A6 update leaving it unchanged ('u')
    "BYYYRIIC",  // A7 typed: Type mood, int4 (domain), _mood, then Relation
    "BRIMRIIC",  // A9 events insert, transactional message, event_tags inserts
    "M",         // A10 non-transactional message
    "M",         // A10 non-transactional message with bytes
    "M",         // A11 non-transactional message of a rolled-back transaction
    "BRRTC",     // A12 truncate events, event_tags (Relations re-sent first)
    "BRIC",      // A13 insert after truncate (Relation re-sent)
    "BOIC",      // A14 transaction with a replication origin
    "BRIC",      // A15 insert after ADD COLUMN (new Relation)
};

enum StepA : size_t {
  kA1Insert,
  kA2UpdateNonKey,
  kA3UpdateKey,
  kA4Delete,
  kA5FullInsert,
  kA5FullUpdate,
  kA5FullDelete,
  kA6ToastInsert,
  kA6ToastUpdate,
  kA7Types,
  kA9Transactional,
  kA10Message,
  kA10Bytes,
  kA11Message,
  kA12Truncate,
  kA13AfterTruncate,
  kA14Origin,
  kA15AddColumn,
};

class WorkloadATest : public ::testing::Test {
 protected:
  void SetUp() override {
    absl::StatusOr<Capture> capture = Load("pg15_text.hex", 1);
    ASSERT_THAT(capture, IsOk());
    capture_ = *std::move(capture);
    units_ = Units(capture_);
    ASSERT_THAT(Tags(units_), ElementsAreArray(kWorkloadATags));
  }
  const Unit& unit(StepA step) const { return units_.at(step); }

  Capture capture_;
  std::vector<Unit> units_;
};

constexpr absl::string_view kAccountsColumns =
    "id:23:-1:1 name:25:-1:0 email:1043:44:0 balance:1700:786438:0 active:16:-1:0 "
    "opened:1184:-1:0 note:25:-1:0";

TEST_F(WorkloadATest, MultiRowInsertWithNullsEmptyStringsAndUnicode) {
  const Unit& a1 = unit(kA1Insert);
  const auto& relation = a1.Get<pg::Relation>(1);
  EXPECT_GE(relation.relation_id, kFirstNormalObjectId);
  EXPECT_EQ(relation.xid, std::nullopt);
  EXPECT_EQ(relation.namespace_name, "public");
  EXPECT_EQ(relation.relation_name, "accounts");
  EXPECT_EQ(relation.replica_identity, 'd');
  // varchar(40) has typmod 44 (40 + VARHDRSZ), numeric(12,2) ((12 << 16) | 2) + 4.
  EXPECT_EQ(ShowColumns(relation), kAccountsColumns);
  EXPECT_TRUE(relation.columns[0].is_key());
  EXPECT_FALSE(relation.columns[1].is_key());

  for (size_t i = 2; i <= 4; ++i) {
    EXPECT_EQ(a1.Get<pg::Insert>(i).relation_id, relation.relation_id);
    EXPECT_EQ(a1.Get<pg::Insert>(i).xid, std::nullopt);
  }
  // Values exactly as the output functions print them under TimeZone=UTC,
  // DateStyle=ISO: numeric keeps its scale, bool is t/f, timestamptz in UTC.
  EXPECT_EQ(Show(a1.Get<pg::Insert>(2).new_tuple),
            "t\"1\" t\"alice\" t\"alice@example.com\" t\"1234.50\" t\"t\" "
            "t\"2024-02-29 10:34:56.789+00\" t\"first\"");
  // Empty strings are 't' with length 0; NULL is 'n'.
  EXPECT_EQ(Show(a1.Get<pg::Insert>(3).new_tuple),
            "t\"2\" t\"\" n t\"0.00\" t\"f\" t\"1999-12-31 23:59:59+00\" t\"\"");
  EXPECT_EQ(Show(a1.Get<pg::Insert>(4).new_tuple),
            "t\"3\" t\"Zoë Ångström – 日本語 🚀\" t\"zoe@example.org\" t\"-0.01\" n n n");
  EXPECT_EQ(a1.Get<pg::Insert>(4).new_tuple.columns[1].data.size(), 34u);  // UTF-8 bytes
  // Inserts in WAL order, inside the transaction.
  EXPECT_LT(a1.header(2), a1.header(3));
  EXPECT_LT(a1.header(3), a1.header(4));
}

TEST_F(WorkloadATest, UpdatesAndDeleteUnderDefaultIdentity) {
  const uint32_t accounts = unit(kA1Insert).Get<pg::Relation>(1).relation_id;

  // No key column changed: no old tuple at all.
  const auto& a2 = unit(kA2UpdateNonKey).Get<pg::Update>(1);
  EXPECT_EQ(a2.relation_id, accounts);
  EXPECT_EQ(a2.old_kind, pg::OldTupleKind::kNone);
  EXPECT_TRUE(a2.old_tuple.columns.empty());
  EXPECT_EQ(Show(a2.new_tuple),
            "t\"1\" t\"alice\" t\"alice@example.com\" t\"99.99\" t\"t\" "
            "t\"2024-02-29 10:34:56.789+00\" t\"updated\"");

  // Primary key changed: 'K' with every column, non-key ones 'n' (not NULLs).
  const auto& a3 = unit(kA3UpdateKey).Get<pg::Update>(1);
  EXPECT_EQ(a3.relation_id, accounts);
  EXPECT_EQ(a3.old_kind, pg::OldTupleKind::kKey);
  EXPECT_EQ(Show(a3.old_tuple), "t\"2\" n n n n n n");
  EXPECT_EQ(Show(a3.new_tuple),
            "t\"20\" t\"\" n t\"0.00\" t\"f\" t\"1999-12-31 23:59:59+00\" t\"\"");

  const auto& a4 = unit(kA4Delete).Get<pg::Delete>(1);
  EXPECT_EQ(a4.relation_id, accounts);
  EXPECT_EQ(a4.old_kind, pg::OldTupleKind::kKey);
  EXPECT_EQ(Show(a4.old_tuple), "t\"3\" n n n n n n");
}

TEST_F(WorkloadATest, ReplicaIdentityFull) {
  const auto& relation = unit(kA5FullInsert).Get<pg::Relation>(1);
  EXPECT_EQ(relation.relation_name, "full_audit");
  EXPECT_EQ(relation.replica_identity, 'f');
  // FULL flags every column as key, though the table has no primary key.
  EXPECT_EQ(ShowColumns(relation), "id:23:-1:1 item:25:-1:1 qty:23:-1:1 note:25:-1:1");
  EXPECT_EQ(Show(unit(kA5FullInsert).Get<pg::Insert>(2).new_tuple), "t\"1\" t\"widget\" t\"5\" n");
  EXPECT_EQ(Show(unit(kA5FullInsert).Get<pg::Insert>(3).new_tuple),
            "t\"2\" t\"gadget\" t\"7\" t\"x\"");

  const auto& update = unit(kA5FullUpdate).Get<pg::Update>(1);
  EXPECT_EQ(update.relation_id, relation.relation_id);
  EXPECT_EQ(update.old_kind, pg::OldTupleKind::kFull);
  EXPECT_EQ(Show(update.old_tuple), "t\"1\" t\"widget\" t\"5\" n");
  EXPECT_EQ(Show(update.new_tuple), "t\"1\" t\"widget\" t\"6\" n");

  const auto& del = unit(kA5FullDelete).Get<pg::Delete>(1);
  EXPECT_EQ(del.relation_id, relation.relation_id);
  EXPECT_EQ(del.old_kind, pg::OldTupleKind::kFull);
  EXPECT_EQ(Show(del.old_tuple), "t\"2\" t\"gadget\" t\"7\" t\"x\"");
}

TEST_F(WorkloadATest, UnchangedToastValueIsU) {
  const auto& relation = unit(kA6ToastInsert).Get<pg::Relation>(1);
  EXPECT_EQ(relation.relation_name, "docs");
  EXPECT_EQ(ShowColumns(relation), "id:23:-1:1 title:25:-1:0 body:25:-1:0");

  // The insert carries the whole out-of-line value: md5(1) || ... || md5(320).
  const pg::TupleData& inserted = unit(kA6ToastInsert).Get<pg::Insert>(2).new_tuple;
  ASSERT_EQ(inserted.columns.size(), 3u);
  EXPECT_EQ(Show(pg::TupleData{{inserted.columns[0], inserted.columns[1]}}), "t\"1\" t\"draft\"");
  const pg::TupleValue& body = inserted.columns[2];
  EXPECT_EQ(body.kind, pg::TupleValue::Kind::kText);
  EXPECT_EQ(body.data.size(), 10240u);
  EXPECT_TRUE(absl::StartsWith(body.data, "c4ca4238a0b923820dcc509a6f75849b"));
  EXPECT_TRUE(absl::EndsWith(body.data, "320722549d1751cf3f247855f937b982"));

  // Updating title leaves body untouched: 'u', no bytes, and no old tuple.
  const auto& update = unit(kA6ToastUpdate).Get<pg::Update>(1);
  EXPECT_EQ(update.relation_id, relation.relation_id);
  EXPECT_EQ(update.old_kind, pg::OldTupleKind::kNone);
  EXPECT_EQ(Show(update.new_tuple), "t\"1\" t\"final\" u");
}

TEST_F(WorkloadATest, TypeMessagesForUserTypes) {
  const Unit& a7 = unit(kA7Types);
  const auto& mood = a7.Get<pg::Type>(1);
  const auto& posint = a7.Get<pg::Type>(2);
  const auto& mood_array = a7.Get<pg::Type>(3);
  EXPECT_EQ(mood.namespace_name, "public");
  EXPECT_EQ(mood.type_name, "mood");
  // A domain is announced under its own OID with its base type's name; the base
  // type lives in pg_catalog, which is sent as "".
  EXPECT_EQ(posint.namespace_name, "");
  EXPECT_EQ(posint.type_name, "int4");
  EXPECT_EQ(mood_array.namespace_name, "public");
  EXPECT_EQ(mood_array.type_name, "_mood");
  for (const pg::Type* type : {&mood, &posint, &mood_array}) {
    EXPECT_GE(type->type_oid, kFirstNormalObjectId);
    EXPECT_EQ(type->xid, std::nullopt);
  }

  // Built-in types (int4[], jsonb, interval) get no Type message; the dropped and
  // the generated column are not sent.
  const auto& relation = a7.Get<pg::Relation>(4);
  EXPECT_EQ(relation.relation_name, "typed");
  EXPECT_EQ(ShowColumns(relation),
            absl::StrCat("id:23:-1:1 m:", mood.type_oid, ":-1:0 p:", posint.type_oid,
                         ":-1:0 moods:", mood_array.type_oid, ":-1:0 ints:", kInt4Array,
                         ":-1:0 doc:", kJsonb, ":-1:0 span:", kInterval, ":-1:0"));

  // jsonb prints normalised (keys sorted), intervals in IntervalStyle=postgres.
  EXPECT_EQ(Show(a7.Get<pg::Insert>(5).new_tuple),
            "t\"1\" t\"happy\" t\"5\" t\"{sad,happy}\" t\"{1,2,3}\" "
            "t\"{\\\"a\\\": null, \\\"b\\\": [1, 2]}\" t\"1 day 02:03:04\"");
  EXPECT_EQ(Show(a7.Get<pg::Insert>(6).new_tuple),
            "t\"2\" n n t\"{}\" t\"{NULL,4}\" t\"\\\"text\\\"\" t\"-3 mons\"");
}

TEST_F(WorkloadATest, LogicalMessages) {
  const Unit& a9 = unit(kA9Transactional);
  const auto& events = a9.Get<pg::Relation>(1);
  EXPECT_EQ(events.relation_name, "events");
  EXPECT_EQ(ShowColumns(events), "id:20:-1:1 kind:25:-1:0");
  EXPECT_EQ(Show(a9.Get<pg::Insert>(2).new_tuple), "t\"1\" t\"created\"");

  // Transactional: inside its transaction, after the insert before it, lsn = the end
  // of its own WAL record, which lies before the commit record.
  const auto& transactional = a9.Get<pg::LogicalMessage>(3);
  EXPECT_EQ(transactional.flags, pg::LogicalMessage::kTransactional);
  EXPECT_TRUE(transactional.transactional());
  EXPECT_EQ(transactional.xid, std::nullopt);
  EXPECT_EQ(transactional.prefix, "walfeed.golden");
  EXPECT_EQ(transactional.content, "transactional payload");
  EXPECT_GT(transactional.lsn, a9.header(2));
  EXPECT_LT(transactional.lsn, a9.Get<pg::Commit>(7).commit_lsn);

  const auto& event_tags = a9.Get<pg::Relation>(4);
  EXPECT_EQ(event_tags.relation_name, "event_tags");
  EXPECT_EQ(ShowColumns(event_tags), "event_id:20:-1:1 tag:25:-1:1");
  EXPECT_EQ(Show(a9.Get<pg::Insert>(5).new_tuple), "t\"1\" t\"a\"");
  EXPECT_EQ(Show(a9.Get<pg::Insert>(6).new_tuple), "t\"1\" t\"b\"");

  // Non-transactional: outside any Begin/Commit, in WAL order after the commit.
  const auto& text = unit(kA10Message).Get<pg::LogicalMessage>(0);
  const auto& bytes = unit(kA10Bytes).Get<pg::LogicalMessage>(0);
  const auto& after_rollback = unit(kA11Message).Get<pg::LogicalMessage>(0);
  EXPECT_EQ(text.flags, 0);
  EXPECT_EQ(text.prefix, "walfeed.golden");
  EXPECT_EQ(text.content, "non-transactional payload");
  EXPECT_EQ(bytes.flags, 0);
  EXPECT_EQ(bytes.prefix, "walfeed.bytes");
  EXPECT_EQ(bytes.content, std::string("\x00\xff\n", 3));
  EXPECT_EQ(after_rollback.flags, 0);
  EXPECT_EQ(after_rollback.content, "sent despite rollback");
  EXPECT_GT(text.lsn, a9.Get<pg::Commit>(7).end_lsn);
  EXPECT_LT(text.lsn, bytes.lsn);
  EXPECT_LT(bytes.lsn, after_rollback.lsn);
  EXPECT_LT(after_rollback.lsn, unit(kA12Truncate).Get<pg::Begin>(0).final_lsn);

  // Nothing of the rolled-back transaction (transactional message, insert) leaked.
  for (const Frame& frame : capture_.frames) {
    if (const auto* m = absl::get_if<pg::LogicalMessage>(&frame.message)) {
      EXPECT_NE(m->content, "never sent") << "line " << frame.line;
    }
    if (const auto* i = absl::get_if<pg::Insert>(&frame.message)) {
      EXPECT_NE(i->new_tuple.columns.at(0).data, "99") << "line " << frame.line;
    }
  }
}

TEST_F(WorkloadATest, TruncateOfTwoTablesThenNewRelation) {
  const uint32_t events = unit(kA9Transactional).Get<pg::Relation>(1).relation_id;
  const uint32_t event_tags = unit(kA9Transactional).Get<pg::Relation>(4).relation_id;
  const Unit& a12 = unit(kA12Truncate);
  EXPECT_EQ(a12.Get<pg::Relation>(1).relation_id, events);
  EXPECT_EQ(a12.Get<pg::Relation>(2).relation_id, event_tags);
  const auto& truncate = a12.Get<pg::Truncate>(3);
  EXPECT_EQ(truncate.xid, std::nullopt);
  EXPECT_EQ(truncate.options, pg::Truncate::kCascade | pg::Truncate::kRestartIdentity);
  EXPECT_EQ(truncate.options, 3);
  EXPECT_THAT(truncate.relation_ids, ElementsAre(events, event_tags));

  // The truncate gave events a new relfilenode: Relation again, identity restarted.
  const Unit& a13 = unit(kA13AfterTruncate);
  EXPECT_EQ(a13.Get<pg::Relation>(1).relation_id, events);
  EXPECT_EQ(ShowColumns(a13.Get<pg::Relation>(1)), "id:20:-1:1 kind:25:-1:0");
  EXPECT_EQ(Show(a13.Get<pg::Insert>(2).new_tuple), "t\"1\" t\"after truncate\"");
}

TEST_F(WorkloadATest, ReplicationOrigin) {
  const Unit& a14 = unit(kA14Origin);
  const auto& begin = a14.Get<pg::Begin>(0);
  const auto& origin = a14.Get<pg::Origin>(1);
  EXPECT_EQ(origin.name, "golden_origin");
  EXPECT_EQ(origin.origin_lsn, Lsn(0xABCDEF12));  // pg_replication_origin_xact_setup
  // The origin's timestamp replaces the commit time.
  EXPECT_EQ(begin.commit_time, kOriginCommitTime);
  EXPECT_EQ(a14.Get<pg::Commit>(3).commit_time, kOriginCommitTime);
  EXPECT_EQ(copy_data::FromPostgresMicros(begin.commit_time),
            absl::FromCivil(absl::CivilSecond(2021, 2, 3, 4, 5, 6), absl::UTCTimeZone()));
  // accounts' Relation was sent in A1 and not invalidated since: not repeated.
  EXPECT_EQ(a14.Get<pg::Insert>(2).relation_id, unit(kA1Insert).Get<pg::Relation>(1).relation_id);
  EXPECT_EQ(Show(a14.Get<pg::Insert>(2).new_tuple), "t\"5\" t\"from origin\" n n n n n");
}

TEST_F(WorkloadATest, AddColumnSendsNewRelation) {
  const Unit& a15 = unit(kA15AddColumn);
  const auto& relation = a15.Get<pg::Relation>(1);
  EXPECT_EQ(relation.relation_id, unit(kA1Insert).Get<pg::Relation>(1).relation_id);
  EXPECT_EQ(relation.relation_name, "accounts");
  EXPECT_EQ(ShowColumns(relation), absl::StrCat(kAccountsColumns, " tier:21:-1:0"));
  EXPECT_EQ(Show(a15.Get<pg::Insert>(2).new_tuple), "t\"4\" t\"dave\" n n n n n t\"3\"");
}

// ---------------------------------------------------------------------------------
// Workload A again, binary mode (protocol 2): the same WAL, values in send format.

class BinaryTest : public WorkloadATest {
 protected:
  void SetUp() override {
    WorkloadATest::SetUp();
    if (HasFatalFailure()) return;
    absl::StatusOr<Capture> binary = Load("pg15_binary.hex", 2);
    ASSERT_THAT(binary, IsOk());
    binary_ = *std::move(binary);
    binary_units_ = Units(binary_);
    ASSERT_THAT(Tags(binary_units_), ElementsAreArray(kWorkloadATags));
  }
  const Unit& binary_unit(StepA step) const { return binary_units_.at(step); }

  Capture binary_;
  std::vector<Unit> binary_units_;
};

// Everything but the value bytes and times is identical to the text capture: same
// LSNs, headers, relations, types, tuple shapes ('n' and 'u' where text has them).
TEST_F(BinaryTest, SameStreamAsTextMode) {
  std::vector<std::string> text;
  std::vector<std::string> binary;
  for (const Unit& unit : units_) {
    for (const Frame* frame : unit.frames) text.push_back(Skeleton(*frame));
  }
  for (const Unit& unit : binary_units_) {
    for (const Frame* frame : unit.frames) binary.push_back(Skeleton(*frame));
  }
  EXPECT_THAT(binary, ElementsAreArray(text));
}

TEST_F(BinaryTest, EveryValueIsBinaryAndTextTypesMatchTheirText) {
  for (size_t u = 0; u < units_.size(); ++u) {
    for (size_t i = 0; i < units_[u].frames.size(); ++i) {
      const auto* text = absl::get_if<pg::Insert>(&units_[u].frames[i]->message);
      if (text == nullptr) continue;
      const auto& binary = binary_units_[u].Get<pg::Insert>(i);
      ASSERT_EQ(binary.new_tuple.columns.size(), text->new_tuple.columns.size());
      for (size_t c = 0; c < text->new_tuple.columns.size(); ++c) {
        const pg::TupleValue& b = binary.new_tuple.columns[c];
        if (text->new_tuple.columns[c].kind == pg::TupleValue::Kind::kText) {
          EXPECT_EQ(b.kind, pg::TupleValue::Kind::kBinary);
        }
      }
    }
  }
  // text and varchar send their bytes unchanged.
  const auto& zoe = binary_unit(kA1Insert).Get<pg::Insert>(4).new_tuple;
  EXPECT_EQ(zoe.columns[1].data, "Zoë Ångström – 日本語 🚀");
  EXPECT_EQ(zoe.columns[2].data, "zoe@example.org");
}

TEST_F(BinaryTest, SendFormats) {
  // int4, text, varchar, numeric, bool, timestamptz (int64 microseconds since
  // 2000-01-01 UTC), text.
  EXPECT_EQ(Show(binary_unit(kA1Insert).Get<pg::Insert>(2).new_tuple),
            absl::StrCat("b:", Hex(Be32(1)), " b:", Hex("alice"), " b:", Hex("alice@example.com"),
                         " b:", Hex(Numeric(0, 0, 2, {1234, 5000})),
                         " b:01 b:", Hex(Be64(0x2b581944b3e08)), " b:", Hex("first")));
  // Empty strings are 'b' with length 0; 0.00 has no digits; 1999-12-31 23:59:59 is
  // one second before the PostgreSQL epoch.
  EXPECT_EQ(Show(binary_unit(kA1Insert).Get<pg::Insert>(3).new_tuple),
            absl::StrCat("b:", Hex(Be32(2)), " b: n b:", Hex(Numeric(0, 0, 2, {})),
                         " b:00 b:", Hex(Be64(static_cast<uint64_t>(int64_t{-1000000}))), " b:"));
  // -0.01: one digit (100) at weight -1, negative.
  EXPECT_EQ(binary_unit(kA1Insert).Get<pg::Insert>(4).new_tuple.columns[3].data,
            Numeric(-1, kNumericNegative, 2, {100}));
  // The unchanged TOAST value stays 'u' in binary mode.
  EXPECT_EQ(Show(binary_unit(kA6ToastUpdate).Get<pg::Update>(1).new_tuple),
            absl::StrCat("b:", Hex(Be32(1)), " b:", Hex("final"), " u"));
  // int8 identity column.
  EXPECT_EQ(Show(binary_unit(kA13AfterTruncate).Get<pg::Insert>(2).new_tuple),
            absl::StrCat("b:", Hex(Be64(1)), " b:", Hex("after truncate")));
  // smallint.
  EXPECT_EQ(binary_unit(kA15AddColumn).Get<pg::Insert>(2).new_tuple.columns[7].data, Be16(3));
}

TEST_F(BinaryTest, UserTypeSendFormats) {
  const Unit& a7 = binary_unit(kA7Types);
  const uint32_t mood = a7.Get<pg::Type>(1).type_oid;
  const pg::TupleData& row1 = a7.Get<pg::Insert>(5).new_tuple;
  const pg::TupleData& row2 = a7.Get<pg::Insert>(6).new_tuple;
  ASSERT_EQ(row1.columns.size(), 7u);
  ASSERT_EQ(row2.columns.size(), 7u);
  EXPECT_EQ(row1.columns[1].data, "happy");  // enum: the label
  EXPECT_EQ(row1.columns[2].data, Be32(5));  // domain over int4: int4
  // Arrays: ndim, has-nulls, element type OID, (length, lower bound) per dimension,
  // then (length, bytes) per element. The element OID of mood[] is the
  // cluster-specific enum OID announced by the Type message.
  EXPECT_EQ(row1.columns[3].data, absl::StrCat(Be32(1), Be32(0), Be32(mood), Be32(2), Be32(1),
                                               Be32(3), "sad", Be32(5), "happy"));
  EXPECT_EQ(row1.columns[4].data,
            absl::StrCat(Be32(1), Be32(0), Be32(kInt4), Be32(3), Be32(1), Be32(4), Be32(1), Be32(4),
                         Be32(2), Be32(4), Be32(3)));
  // jsonb: version byte 1, then the normalised text.
  EXPECT_EQ(row1.columns[5].data, "\x01{\"a\": null, \"b\": [1, 2]}");
  // interval: int64 microseconds, int32 days, int32 months.
  EXPECT_EQ(row1.columns[6].data, absl::StrCat(Be64(int64_t{7384} * 1000000), Be32(1), Be32(0)));

  EXPECT_EQ(Show(pg::TupleData{{row2.columns[1], row2.columns[2]}}), "n n");
  EXPECT_EQ(row2.columns[3].data, absl::StrCat(Be32(0), Be32(0), Be32(mood)));  // '{}'
  EXPECT_EQ(row2.columns[4].data,                                               // {NULL,4}
            absl::StrCat(Be32(1), Be32(1), Be32(kInt4), Be32(2), Be32(1), Be32(0xffffffff), Be32(4),
                         Be32(4)));
  EXPECT_EQ(row2.columns[5].data, "\x01\"text\"");
  EXPECT_EQ(row2.columns[6].data, absl::StrCat(Be64(0), Be32(0), Be32(static_cast<uint32_t>(-3))));
}

// ---------------------------------------------------------------------------------
// Workload B: a TWO_PHASE slot, protocol 3 with two_phase on.

TEST(TwoPhaseTest, PrepareCommitPreparedAndRollbackPrepared) {
  absl::StatusOr<Capture> capture = Load("pg15_two_phase.hex", 3);
  ASSERT_THAT(capture, IsOk());
  const std::vector<Unit> units = Units(*capture);
  ASSERT_THAT(Tags(units), ElementsAre("bRIP", "K", "bIUP", "r", "BIC"));

  // B1: Begin Prepare .. Prepare agree on everything; Commit Prepared follows.
  const auto& begin1 = units[0].Get<pg::BeginPrepare>(0);
  const auto& relation = units[0].Get<pg::Relation>(1);
  const auto& prepare1 = units[0].Get<pg::Prepare>(3);
  EXPECT_EQ(begin1.gid, "golden_gid_1");
  EXPECT_LT(begin1.prepare_lsn, begin1.end_lsn);
  EXPECT_EQ(prepare1.flags, 0);
  EXPECT_EQ(prepare1.prepare_lsn, begin1.prepare_lsn);
  EXPECT_EQ(prepare1.end_lsn, begin1.end_lsn);
  EXPECT_EQ(prepare1.prepare_time, begin1.prepare_time);
  EXPECT_EQ(prepare1.xid, begin1.xid);
  EXPECT_EQ(prepare1.gid, begin1.gid);
  EXPECT_EQ(relation.relation_name, "orders");
  EXPECT_EQ(ShowColumns(relation), "id:23:-1:1 item:25:-1:0");
  EXPECT_EQ(Show(units[0].Get<pg::Insert>(2).new_tuple), "t\"1\" t\"book\"");
  EXPECT_LT(units[0].header(2), begin1.prepare_lsn);

  const auto& commit1 = units[1].Get<pg::CommitPrepared>(0);
  EXPECT_EQ(commit1.flags, 0);
  EXPECT_EQ(commit1.gid, "golden_gid_1");
  EXPECT_EQ(commit1.xid, begin1.xid);
  EXPECT_GE(commit1.commit_lsn, prepare1.end_lsn);
  EXPECT_LT(commit1.commit_lsn, commit1.end_lsn);
  EXPECT_GE(commit1.commit_time, prepare1.prepare_time);

  // B2: prepared with an insert and an update, then rolled back.
  const auto& begin2 = units[2].Get<pg::BeginPrepare>(0);
  const auto& prepare2 = units[2].Get<pg::Prepare>(3);
  EXPECT_EQ(begin2.gid, "golden_gid_2");
  EXPECT_GT(begin2.prepare_lsn, commit1.end_lsn);
  EXPECT_EQ(prepare2.prepare_lsn, begin2.prepare_lsn);
  EXPECT_EQ(prepare2.end_lsn, begin2.end_lsn);
  EXPECT_EQ(prepare2.xid, begin2.xid);
  EXPECT_EQ(Show(units[2].Get<pg::Insert>(1).new_tuple), "t\"2\" t\"pen\"");
  const auto& update = units[2].Get<pg::Update>(2);
  EXPECT_EQ(update.relation_id, relation.relation_id);
  EXPECT_EQ(update.old_kind, pg::OldTupleKind::kNone);
  EXPECT_EQ(Show(update.new_tuple), "t\"2\" t\"pencil\"");

  const auto& rollback = units[3].Get<pg::RollbackPrepared>(0);
  EXPECT_EQ(rollback.flags, 0);
  EXPECT_EQ(rollback.gid, "golden_gid_2");
  EXPECT_EQ(rollback.xid, begin2.xid);
  EXPECT_EQ(rollback.prepare_end_lsn, prepare2.end_lsn);
  EXPECT_LT(rollback.prepare_end_lsn, rollback.rollback_end_lsn);
  EXPECT_EQ(rollback.prepare_time, prepare2.prepare_time);
  EXPECT_GE(rollback.rollback_time, rollback.prepare_time);

  // B3: an ordinary transaction on the same slot is plain Begin/Commit.
  const auto& commit3 = units[4].Get<pg::Commit>(2);
  EXPECT_GT(commit3.commit_lsn, rollback.rollback_end_lsn);
  EXPECT_EQ(Show(units[4].Get<pg::Insert>(1).new_tuple), "t\"3\" t\"plain\"");
}

// ---------------------------------------------------------------------------------
// Workload C: streaming on, protocol 2, logical_decoding_work_mem = 64kB. Block
// counts depend on the server's memory accounting, so only their shape is pinned.

struct StreamedTransaction {
  uint32_t xid = 0;
  int blocks = 0;
  std::vector<std::pair<uint32_t, pg::TupleData>> rows;  // (change xid, new tuple)
  std::vector<pg::LogicalMessage> messages;
  std::set<uint32_t> aborted_subxids;
  bool aborted = false;
  std::optional<pg::StreamCommit> commit;
  Lsn commit_header;
};

TEST(StreamingTest, CommittedAndAbortedLargeTransactions) {
  absl::StatusOr<Capture> capture = Load("pg15_streaming.hex", 2);
  ASSERT_THAT(capture, IsOk());
  const std::vector<Unit> units = Units(*capture);

  std::vector<uint32_t> order;  // Top-level xids in order of first appearance.
  std::map<uint32_t, StreamedTransaction> txns;
  std::vector<const Unit*> plain;  // Ordinary Begin..Commit units.
  for (const Unit& unit : units) {
    SCOPED_TRACE(absl::StrCat("unit at line ", unit.frames[0]->line));
    switch (unit.tags[0]) {
      case 'S': {
        ASSERT_EQ(unit.tags.back(), 'E');
        const auto& start = unit.Get<pg::StreamStart>(0);
        if (txns.count(start.xid) == 0) order.push_back(start.xid);
        StreamedTransaction& txn = txns[start.xid];
        txn.xid = start.xid;
        EXPECT_FALSE(txn.commit.has_value() || txn.aborted);
        EXPECT_EQ(start.first_segment, txn.blocks == 0);
        ++txn.blocks;
        for (size_t i = 1; i + 1 < unit.frames.size(); ++i) {
          ASSERT_TRUE(unit.frames[i]->in_stream_block);
          if (const auto* r = absl::get_if<pg::Relation>(&unit.frames[i]->message)) {
            ASSERT_TRUE(r->xid.has_value());
            EXPECT_GE(*r->xid, start.xid);  // The top xid or one of its subxids.
            EXPECT_EQ(r->relation_name, "bulk");
            EXPECT_EQ(ShowColumns(*r), "id:23:-1:1 v:25:-1:0");
          } else if (const auto* in = absl::get_if<pg::Insert>(&unit.frames[i]->message)) {
            ASSERT_TRUE(in->xid.has_value());
            EXPECT_GE(*in->xid, start.xid);
            txn.rows.emplace_back(*in->xid, in->new_tuple);
          } else if (const auto* m = absl::get_if<pg::LogicalMessage>(&unit.frames[i]->message)) {
            ASSERT_TRUE(m->xid.has_value());
            EXPECT_EQ(*m->xid, start.xid);
            txn.messages.push_back(*m);
          } else {
            ADD_FAILURE() << "unexpected " << unit.tags[i] << " in a stream block";
          }
        }
        break;
      }
      case 'A': {
        const auto& abort = unit.Get<pg::StreamAbort>(0);
        EXPECT_FALSE(unit.frames[0]->in_stream_block);
        EXPECT_EQ(abort.abort_lsn, std::nullopt);  // Only with streaming = parallel.
        EXPECT_EQ(abort.abort_time, std::nullopt);
        ASSERT_EQ(txns.count(abort.xid), 1u);
        if (abort.subxid == abort.xid) {
          txns[abort.xid].aborted = true;
        } else {
          txns[abort.xid].aborted_subxids.insert(abort.subxid);
        }
        break;
      }
      case 'c': {
        const auto& commit = unit.Get<pg::StreamCommit>(0);
        ASSERT_EQ(txns.count(commit.xid), 1u);
        txns[commit.xid].commit = commit;
        txns[commit.xid].commit_header = unit.header(0);
        break;
      }
      case 'B':
        plain.push_back(&unit);
        break;
      default:
        ADD_FAILURE() << "unexpected unit " << unit.tags;
    }
  }
  ASSERT_EQ(order.size(), 2u);

  // C1: committed in more than one block; rows of the rolled-back savepoint were
  // streamed under their subxid and then cancelled by a Stream Abort for it.
  const StreamedTransaction& c1 = txns[order[0]];
  EXPECT_GE(c1.blocks, 2);
  EXPECT_FALSE(c1.aborted);
  ASSERT_TRUE(c1.commit.has_value());
  EXPECT_EQ(c1.commit->flags, 0);
  EXPECT_LT(c1.commit->commit_lsn, c1.commit->end_lsn);
  EXPECT_EQ(c1.commit_header, c1.commit->end_lsn);
  ASSERT_EQ(c1.aborted_subxids.size(), 1u);
  const uint32_t savepoint = *c1.aborted_subxids.begin();
  EXPECT_GT(savepoint, c1.xid);
  std::vector<std::string> kept;
  int cancelled = 0;
  for (const auto& [xid, tuple] : c1.rows) {
    if (xid == savepoint) {
      EXPECT_EQ(Show(tuple), absl::StrCat("t\"", 1001 + cancelled, "\" t\"s\""));
      ++cancelled;
    } else {
      kept.push_back(Show(tuple));
    }
  }
  EXPECT_GE(cancelled, 1);
  EXPECT_LE(cancelled, 500);
  ASSERT_EQ(kept.size(), 1001u);
  for (int id = 1; id <= 1000; ++id) {
    EXPECT_EQ(kept[id - 1], absl::StrCat("t\"", id, "\" t\"c\""));
  }
  EXPECT_EQ(kept.back(), "t\"2000\" t\"last\"");
  ASSERT_EQ(c1.messages.size(), 1u);
  EXPECT_TRUE(c1.messages[0].transactional());
  EXPECT_EQ(c1.messages[0].prefix, "walfeed.stream");
  EXPECT_EQ(c1.messages[0].content, "inside a streamed transaction");
  EXPECT_LT(c1.messages[0].lsn, c1.commit->commit_lsn);

  // C2: streamed in more than one block, then aborted as a whole (subxid == xid);
  // the rows not yet streamed when it aborted are never sent.
  const StreamedTransaction& c2 = txns[order[1]];
  EXPECT_GT(c2.xid, c1.xid);
  EXPECT_GE(c2.blocks, 2);
  EXPECT_TRUE(c2.aborted);
  EXPECT_FALSE(c2.commit.has_value());
  EXPECT_TRUE(c2.aborted_subxids.empty());
  ASSERT_GE(c2.rows.size(), 1u);
  EXPECT_LE(c2.rows.size(), 1000u);
  for (size_t i = 0; i < c2.rows.size(); ++i) {
    EXPECT_EQ(c2.rows[i].first, c2.xid);
    EXPECT_EQ(Show(c2.rows[i].second), absl::StrCat("t\"", 3001 + i, "\" t\"a\""));
  }

  // C3: a small transaction is not streamed; no xid prefixes.
  ASSERT_EQ(plain.size(), 1u);
  ASSERT_EQ(plain[0]->tags, "BIC");
  EXPECT_EQ(plain[0]->Get<pg::Insert>(1).xid, std::nullopt);
  EXPECT_EQ(Show(plain[0]->Get<pg::Insert>(1).new_tuple), "t\"5000\" t\"small\"");
  EXPECT_GT(plain[0]->Get<pg::Begin>(0).final_lsn, c1.commit->end_lsn);
}

}  // namespace
}  // namespace walfeed::replication
