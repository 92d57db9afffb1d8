#include "replication/transaction_assembler.h"

#include <charconv>
#include <cstring>
#include <limits>
#include <utility>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "replication/status_macros.h"

namespace walfeed::replication {
namespace {

// Why walfeed cannot accept streamed transactions, shared by the four stream messages.
constexpr absl::string_view kStreamingExplanation =
    ": PostgreSQL is streaming an in-progress transaction, but walfeed starts "
    "replication with streaming off because an event id needs the transaction's "
    "commit LSN before its first change is delivered. Remedy: START_REPLICATION must "
    "not enable the 'streaming' option (walfeed never does; look for a modified "
    "client or a proxy rewriting the command)";

// Why walfeed cannot accept two-phase transactions, shared by the five messages.
constexpr absl::string_view kTwoPhaseExplanation =
    ": the slot decodes two-phase transactions, whose rows arrive at PREPARE TRANSACTION "
    "before the commit LSN that walfeed's event ids need exists. walfeed never creates "
    "slots with TWO_PHASE nor requests two_phase. Remedy: this slot has two-phase "
    "decoding on (pg_replication_slots.two_phase is true: created with TWO_PHASE, or "
    "another client requested two_phase once), which PostgreSQL 17 and earlier cannot "
    "turn off: create a new slot without TWO_PHASE, point the stream at it and "
    "re-snapshot the published tables (changes between the two slots are not carried "
    "over)";

absl::Status StreamingRejected(absl::string_view what) {
  return absl::FailedPreconditionError(absl::StrCat("received ", what, kStreamingExplanation));
}

absl::Status TwoPhaseRejected(absl::string_view what, uint32_t xid, absl::string_view gid) {
  return absl::FailedPreconditionError(absl::StrCat("received ", what, " (xid ", xid, ", gid \"",
                                                    absl::CHexEscape(gid), "\")",
                                                    kTwoPhaseExplanation));
}

// A DML/Relation/Type/Truncate/Message carries an xid only inside a stream block.
absl::Status CheckNotStreamed(const std::optional<uint32_t>& xid, absl::string_view what) {
  if (!xid.has_value()) return absl::OkStatus();
  return StreamingRejected(absl::StrCat(what, " of streamed transaction ", *xid));
}

// A row change's name in error messages ("Update of relation 16385"),
// formatted on the stack: every row makes one and only an error reads it. A
// std::string from StrCat cost every row an allocation and a free.
class RowChangeName {
 public:
  template <size_t N>
  RowChangeName(const char (&verb)[N], uint32_t relation_id) {
    static_assert(N - 1 + std::numeric_limits<uint32_t>::digits10 + 1 <= sizeof(text_));
    std::memcpy(text_, verb, N - 1);
    const char* end = std::to_chars(text_ + N - 1, text_ + sizeof(text_), relation_id).ptr;
    size_ = static_cast<size_t>(end - text_);
  }
  absl::string_view view() const { return absl::string_view(text_, size_); }

 private:
  char text_[32];
  size_t size_;
};

std::string Describe(const RelationInfo& relation) {
  return absl::StrCat(relation.schema, ".", relation.table, " (", relation.relation_id, ")");
}

}  // namespace

absl::string_view OpName(ChangeEvent::Op op) {
  switch (op) {
    case ChangeEvent::Op::kInsert:
      return "INSERT";
    case ChangeEvent::Op::kUpdate:
      return "UPDATE";
    case ChangeEvent::Op::kDelete:
      return "DELETE";
    case ChangeEvent::Op::kTruncate:
      return "TRUNCATE";
    case ChangeEvent::Op::kMessage:
      return "MESSAGE";
    case ChangeEvent::Op::kRead:
      return "READ";
  }
  return "UNKNOWN";
}

// Routes each message kind to its handler; streamed and two-phase kinds are refused.
struct TransactionAssembler::Visitor {
  TransactionAssembler* self;
  std::vector<Output>* out;

  absl::Status operator()(pgoutput::Begin& m) const { return self->OnBegin(m, out); }
  absl::Status operator()(pgoutput::Commit& m) const { return self->OnCommit(m, out); }
  absl::Status operator()(pgoutput::Origin& m) const { return self->OnOrigin(m); }
  absl::Status operator()(pgoutput::Relation& m) const {
    WALFEED_RETURN_IF_ERROR(CheckNotStreamed(m.xid, "Relation"));
    return self->relations_.Apply(m);
  }
  absl::Status operator()(pgoutput::Type& m) const {
    WALFEED_RETURN_IF_ERROR(CheckNotStreamed(m.xid, "Type"));
    return self->relations_.Apply(m);
  }
  absl::Status operator()(pgoutput::Insert& m) const { return self->OnInsert(std::move(m), out); }
  absl::Status operator()(pgoutput::Update& m) const { return self->OnUpdate(std::move(m), out); }
  absl::Status operator()(pgoutput::Delete& m) const { return self->OnDelete(std::move(m), out); }
  absl::Status operator()(pgoutput::Truncate& m) const { return self->OnTruncate(m, out); }
  absl::Status operator()(pgoutput::LogicalMessage& m) const {
    return self->OnMessage(std::move(m), out);
  }
  absl::Status operator()(pgoutput::StreamStart& m) const {
    return StreamingRejected(absl::StrCat("Stream Start (xid ", m.xid, ")"));
  }
  absl::Status operator()(pgoutput::StreamStop&) const { return StreamingRejected("Stream Stop"); }
  absl::Status operator()(pgoutput::StreamCommit& m) const {
    return StreamingRejected(
        absl::StrCat("Stream Commit (xid ", m.xid, ", commit LSN ", m.commit_lsn.ToString(), ")"));
  }
  absl::Status operator()(pgoutput::StreamAbort& m) const {
    return StreamingRejected(absl::StrCat("Stream Abort (xid ", m.xid, ")"));
  }
  absl::Status operator()(pgoutput::BeginPrepare& m) const {
    return TwoPhaseRejected(absl::StrCat("Begin Prepare at ", m.prepare_lsn.ToString()), m.xid,
                            m.gid);
  }
  absl::Status operator()(pgoutput::Prepare& m) const {
    return TwoPhaseRejected(absl::StrCat("Prepare at ", m.prepare_lsn.ToString()), m.xid, m.gid);
  }
  absl::Status operator()(pgoutput::StreamPrepare& m) const {
    return TwoPhaseRejected(absl::StrCat("Stream Prepare at ", m.prepare_lsn.ToString()), m.xid,
                            m.gid);
  }
  absl::Status operator()(pgoutput::CommitPrepared& m) const {
    return TwoPhaseRejected(absl::StrCat("Commit Prepared at ", m.commit_lsn.ToString()), m.xid,
                            m.gid);
  }
  absl::Status operator()(pgoutput::RollbackPrepared& m) const {
    return TwoPhaseRejected(absl::StrCat("Rollback Prepared at ", m.rollback_end_lsn.ToString()),
                            m.xid, m.gid);
  }
};

TransactionAssembler::TransactionAssembler(Lsn start_lsn) : start_lsn_(start_lsn) {}

absl::Status TransactionAssembler::Process(pgoutput::Message message, std::vector<Output>* out) {
  if (!error_.ok()) {
    return absl::Status(error_.code(),
                        absl::StrCat("the stream stopped at an earlier error and must be "
                                     "restarted (Reset) before more messages: ",
                                     error_.message()));
  }
  absl::Status status = absl::visit(Visitor{this, out}, message);
  if (!status.ok()) error_ = status;
  return status;
}

void TransactionAssembler::set_excluded_schema(std::string schema) {
  excluded_schema_ = std::move(schema);
}

bool TransactionAssembler::Excluded(const RelationInfo& relation) const {
  return !excluded_schema_.empty() && relation.schema == excluded_schema_;
}

void TransactionAssembler::Reset(Lsn start_lsn) {
  start_lsn_ = start_lsn;
  last_commit_lsn_ = Lsn::kInvalid;
  open_.reset();
  held_.reset();
  relations_.Reset();
  error_ = absl::OkStatus();
}

absl::Status TransactionAssembler::OnBegin(const pgoutput::Begin& begin, std::vector<Output>* out) {
  const std::string final_lsn = begin.final_lsn.ToString();
  if (open_) {
    return absl::DataLossError(absl::StrCat(
        "Begin of transaction ", begin.xid, " committing at ", final_lsn, " while transaction ",
        open_->xid, " committing at ", open_->commit_lsn.ToString(),
        " has had no Commit; without streaming PostgreSQL sends one whole transaction "
        "at a time"));
  }
  if (!begin.final_lsn.valid()) {
    return absl::DataLossError(
        absl::StrCat("Begin of transaction ", begin.xid, " has final LSN 0/0 (InvalidXLogRecPtr)"));
  }
  if (last_commit_lsn_.valid() && begin.final_lsn <= last_commit_lsn_) {
    return absl::DataLossError(absl::StrCat(
        "Begin of transaction ", begin.xid, " committing at ", final_lsn,
        ", not after the previous transaction's commit at ", last_commit_lsn_.ToString(),
        "; PostgreSQL sends transactions in commit order, so commit LSNs strictly "
        "increase within a session"));
  }
  if (begin.final_lsn < start_lsn_) {
    return absl::DataLossError(absl::StrCat(
        "Begin of transaction ", begin.xid, " committing at ", final_lsn, ", before ",
        start_lsn_.ToString(),
        " where this session's replication started; PostgreSQL skips every transaction "
        "that commits before the start position"));
  }
  open_ = OpenTransaction{begin.final_lsn, begin.xid, begin.commit_time, 0};
  out->push_back(TransactionBegun{begin.final_lsn, begin.xid, begin.commit_time});
  return absl::OkStatus();
}

absl::Status TransactionAssembler::OnCommit(const pgoutput::Commit& commit,
                                            std::vector<Output>* out) {
  if (!open_) {
    return absl::DataLossError(absl::StrCat(
        "Commit at ", commit.commit_lsn.ToString(), " (end ", commit.end_lsn.ToString(),
        ") without a Begin",
        last_commit_lsn_.valid()
            ? absl::StrCat("; the last transaction committed at ", last_commit_lsn_.ToString())
            : std::string("; no transaction began in this session")));
  }
  if (commit.commit_lsn != open_->commit_lsn) {
    return absl::DataLossError(
        absl::StrCat("Commit LSN ", commit.commit_lsn.ToString(), " of transaction ", open_->xid,
                     " differs from its Begin's final LSN ", open_->commit_lsn.ToString(),
                     "; PostgreSQL sends the commit record's start LSN in both"));
  }
  if (commit.end_lsn <= commit.commit_lsn) {
    return absl::DataLossError(
        absl::StrCat("Commit of transaction ", open_->xid, " at ", commit.commit_lsn.ToString(),
                     " has end LSN ", commit.end_lsn.ToString(),
                     ", not after its start; the end of a commit record follows its start"));
  }
  if (held_) {
    held_->last_in_transaction = true;
    held_->transaction_event_count = open_->event_count;
    held_->end_lsn = commit.end_lsn;
    out->push_back(std::move(*held_));
    held_.reset();
  }
  out->push_back(TransactionCommitted{commit.commit_lsn, commit.end_lsn, commit.commit_time,
                                      open_->xid, open_->event_count});
  last_commit_lsn_ = commit.commit_lsn;
  open_.reset();
  return absl::OkStatus();
}

absl::Status TransactionAssembler::OnOrigin(const pgoutput::Origin& origin) {
  // Checked, then dropped: it names the node a change was replicated from, which is
  // not part of the event contract yet, and it must never take an index.
  if (!open_) {
    return absl::DataLossError(absl::StrCat(
        "Origin \"", absl::CHexEscape(origin.name), "\" (origin LSN ", origin.origin_lsn.ToString(),
        ") outside a transaction; PostgreSQL sends Origin right after Begin"));
  }
  return absl::OkStatus();
}

absl::Status TransactionAssembler::OnInsert(pgoutput::Insert insert, std::vector<Output>* out) {
  const RowChangeName name("Insert into relation ", insert.relation_id);
  const absl::string_view what = name.view();
  WALFEED_RETURN_IF_ERROR(CheckNotStreamed(insert.xid, what));
  WALFEED_RETURN_IF_ERROR(CheckChangeAllowed(what));
  WALFEED_ASSIGN_OR_RETURN(auto relation, FindRelation(insert.relation_id, what));
  if (Excluded(*relation)) return absl::OkStatus();
  WALFEED_RETURN_IF_ERROR(CheckColumnCount(*relation, insert.new_tuple, what, "new"));
  ChangeEvent event;
  event.op = ChangeEvent::Op::kInsert;
  event.relation = std::move(relation);
  event.new_tuple = std::move(insert.new_tuple);
  Emit(std::move(event), out);
  return absl::OkStatus();
}

absl::Status TransactionAssembler::OnUpdate(pgoutput::Update update, std::vector<Output>* out) {
  const RowChangeName name("Update of relation ", update.relation_id);
  const absl::string_view what = name.view();
  WALFEED_RETURN_IF_ERROR(CheckNotStreamed(update.xid, what));
  WALFEED_RETURN_IF_ERROR(CheckChangeAllowed(what));
  WALFEED_ASSIGN_OR_RETURN(auto relation, FindRelation(update.relation_id, what));
  if (Excluded(*relation)) return absl::OkStatus();
  if (update.old_kind != pgoutput::OldTupleKind::kNone) {
    WALFEED_RETURN_IF_ERROR(CheckColumnCount(*relation, update.old_tuple, what, "old"));
  }
  WALFEED_RETURN_IF_ERROR(CheckColumnCount(*relation, update.new_tuple, what, "new"));
  ChangeEvent event;
  event.op = ChangeEvent::Op::kUpdate;
  event.relation = std::move(relation);
  event.old_kind = update.old_kind;
  event.old_tuple = std::move(update.old_tuple);
  event.new_tuple = std::move(update.new_tuple);
  Emit(std::move(event), out);
  return absl::OkStatus();
}

absl::Status TransactionAssembler::OnDelete(pgoutput::Delete del, std::vector<Output>* out) {
  const RowChangeName name("Delete from relation ", del.relation_id);
  const absl::string_view what = name.view();
  WALFEED_RETURN_IF_ERROR(CheckNotStreamed(del.xid, what));
  WALFEED_RETURN_IF_ERROR(CheckChangeAllowed(what));
  WALFEED_ASSIGN_OR_RETURN(auto relation, FindRelation(del.relation_id, what));
  if (Excluded(*relation)) return absl::OkStatus();
  if (del.old_kind == pgoutput::OldTupleKind::kNone) {
    // pgoutput does not send a Delete it has no old key or row for.
    return absl::DataLossError(
        absl::StrCat(what, " at ", NextIdForError(), " carries no old tuple ('K' or 'O')"));
  }
  WALFEED_RETURN_IF_ERROR(CheckColumnCount(*relation, del.old_tuple, what, "old"));
  ChangeEvent event;
  event.op = ChangeEvent::Op::kDelete;
  event.relation = std::move(relation);
  event.old_kind = del.old_kind;
  event.old_tuple = std::move(del.old_tuple);
  Emit(std::move(event), out);
  return absl::OkStatus();
}

absl::Status TransactionAssembler::OnTruncate(const pgoutput::Truncate& truncate,
                                              std::vector<Output>* out) {
  const std::string what =
      absl::StrCat("Truncate of ", truncate.relation_ids.size(), " relation(s)");
  WALFEED_RETURN_IF_ERROR(CheckNotStreamed(truncate.xid, what));
  WALFEED_RETURN_IF_ERROR(CheckChangeAllowed(what));
  if (truncate.relation_ids.empty()) {
    // pgoutput_truncate sends nothing when no listed relation is published.
    return absl::DataLossError(absl::StrCat("Truncate listing no relation at ", NextIdForError()));
  }
  ChangeEvent event;
  event.op = ChangeEvent::Op::kTruncate;
  event.truncate_options = truncate.options;
  event.truncated_relations.reserve(truncate.relation_ids.size());
  for (uint32_t relation_id : truncate.relation_ids) {
    WALFEED_ASSIGN_OR_RETURN(auto relation, FindRelation(relation_id, what));
    if (!Excluded(*relation)) event.truncated_relations.push_back(std::move(relation));
  }
  if (event.truncated_relations.empty()) return absl::OkStatus();  // Only excluded ones.
  Emit(std::move(event), out);
  return absl::OkStatus();
}

absl::Status TransactionAssembler::OnMessage(pgoutput::LogicalMessage message,
                                             std::vector<Output>* out) {
  const std::string what = absl::StrCat(
      message.transactional() ? "transactional" : "non-transactional", " logical message \"",
      absl::CHexEscape(message.prefix), "\" (LSN ", message.lsn.ToString(), ")");
  WALFEED_RETURN_IF_ERROR(CheckNotStreamed(message.xid, what));
  if (!message.transactional()) {
    if (open_) {
      // Non-transactional messages are sent as they are decoded; a non-streamed
      // transaction is sent in one piece at its commit, so nothing interleaves it.
      return absl::DataLossError(
          absl::StrCat(what, " inside the transaction committing at ", open_->commit_lsn.ToString(),
                       "; PostgreSQL sends those only between transactions when streaming is off"));
    }
    out->push_back(NonTransactionalMessage{message.lsn, std::move(message.prefix),
                                           std::move(message.content)});
    return absl::OkStatus();
  }
  WALFEED_RETURN_IF_ERROR(CheckChangeAllowed(what));
  ChangeEvent event;
  event.op = ChangeEvent::Op::kMessage;
  event.message_lsn = message.lsn;
  event.message_prefix = std::move(message.prefix);
  event.message_content = std::move(message.content);
  Emit(std::move(event), out);
  return absl::OkStatus();
}

absl::Status TransactionAssembler::CheckChangeAllowed(absl::string_view what) const {
  if (!open_) {
    return absl::DataLossError(absl::StrCat(
        what, " outside a transaction (no Begin since ",
        last_commit_lsn_.valid() ? absl::StrCat("the commit at ", last_commit_lsn_.ToString())
                                 : std::string("this session started"),
        "); without streaming PostgreSQL sends changes only between Begin and Commit"));
  }
  if (open_->event_count == std::numeric_limits<uint32_t>::max()) {
    return absl::OutOfRangeError(
        absl::StrCat(what, ": the transaction committing at ", open_->commit_lsn.ToString(),
                     " has more changes than a 32-bit event index can number"));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::shared_ptr<const RelationInfo>> TransactionAssembler::FindRelation(
    uint32_t relation_id, absl::string_view what) const {
  absl::StatusOr<std::shared_ptr<const RelationInfo>> relation = relations_.Find(relation_id);
  if (!relation.ok()) {
    return absl::Status(
        relation.status().code(),
        absl::StrCat(relation.status().message(), " (", what, " at ", NextIdForError(), ")"));
  }
  return relation;
}

absl::Status TransactionAssembler::CheckColumnCount(const RelationInfo& relation,
                                                    const pgoutput::TupleData& tuple,
                                                    absl::string_view what,
                                                    absl::string_view which) const {
  if (tuple.columns.size() == relation.columns.size()) return absl::OkStatus();
  return absl::DataLossError(
      absl::StrCat(what, " at ", NextIdForError(), ": the ", which, " tuple has ",
                   tuple.columns.size(), " column(s) but the Relation message for ",
                   Describe(relation), " described ", relation.columns.size()));
}

void TransactionAssembler::Emit(ChangeEvent event, std::vector<Output>* out) {
  event.id = EventId{open_->commit_lsn, open_->event_count};
  event.xid = open_->xid;
  event.commit_time = open_->commit_time;
  ++open_->event_count;
  if (held_) out->push_back(std::move(*held_));
  held_ = std::move(event);
}

std::string TransactionAssembler::NextIdForError() const {
  if (!open_) return "no transaction";
  return EventId{open_->commit_lsn, open_->event_count}.ToString();
}

}  // namespace walfeed::replication
