// TransactionAssembler: turns one replication connection's decoded pgoutput messages
// into change events with deterministic ids "<commit_lsn>:<index>".
//
//   Begin ─► TransactionBegun
//   Relation / Type ─► RelationCache (never an event, never an index)
//   Origin ─► checked and dropped (never an index)
//   Insert / Update / Delete / Truncate / transactional Message ─► ChangeEvent, index 0..n-1
//   Commit ─► last ChangeEvent (last_in_transaction, count n) ─► TransactionCommitted
//   non-transactional Message ─► NonTransactionalMessage (not an event: no commit LSN)
//
// With streaming off, PostgreSQL sends a transaction only once it has committed, and
// Begin already carries the commit record's LSN (final_lsn == the Commit's
// commit_lsn), so every event can be given its final id the moment it arrives. The
// assembler streams: it never holds a transaction whole, only ONE event. Event i is
// released when event i+1 arrives, and at Commit the held event is released marked
// last_in_transaction with the transaction's event count. That single event of delay
// is what lets the last event say it is last (the ack mapping needs that: acking the
// last event confirms end_lsn, any other confirms commit_lsn), at a memory cost of
// one row whatever the transaction's size.
//
// The assembler checks what it relies on and fails closed with a Status naming the
// broken invariant and the LSNs involved: DataLoss when the message sequence is not
// one PostgreSQL can send (Commit without Begin, Commit LSN differing from Begin's,
// transactions out of commit order, a change outside a transaction, a change for a
// relation never described in this session, a tuple whose column count differs from
// its relation's), FailedPrecondition for streamed or two-phase transactions, which
// walfeed never asks for and whose ids could not be assigned as they arrive. After an
// error every Process call fails until Reset(): the stream has lost its footing and
// must be restarted, not resumed.
//
// Not thread-safe: one instance belongs to one stream's reader thread.
#ifndef WALFEED_REPLICATION_TRANSACTION_ASSEMBLER_H_
#define WALFEED_REPLICATION_TRANSACTION_ASSEMBLER_H_

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "absl/types/variant.h"
#include "replication/event_id.h"
#include "replication/lsn.h"
#include "replication/pgoutput.h"
#include "replication/relation_cache.h"

namespace walfeed::replication {

// One row change, TRUNCATE or transactional logical message of a committed
// transaction. Which fields are meaningful depends on `op`; the others stay empty.
struct ChangeEvent {
  // kRead is never assembled from the stream: it is a row a backfill read
  // (server side), shaped like an insert.
  enum class Op { kInsert, kUpdate, kDelete, kTruncate, kMessage, kRead };

  EventId id;               // (Begin.final_lsn, index within the transaction).
  uint32_t xid = 0;         // From Begin.
  int64_t commit_time = 0;  // From Begin: PostgreSQL-epoch microseconds.
  Op op = Op::kInsert;

  // kInsert, kUpdate, kDelete: the relation as described when this change arrived.
  // Never changes afterwards, even if a later Relation message alters the table.
  std::shared_ptr<const RelationInfo> relation;
  // kUpdate: kNone, kKey or kFull. kDelete: kKey or kFull. In a kKey tuple the
  // non-key columns are 'n' placeholders, not NULLs.
  pgoutput::OldTupleKind old_kind = pgoutput::OldTupleKind::kNone;
  pgoutput::TupleData old_tuple;  // kUpdate with old_kind != kNone, kDelete.
  pgoutput::TupleData new_tuple;  // kInsert, kUpdate. Same column count as `relation`.

  // kTruncate: every relation of the one TRUNCATE message, in the order sent.
  std::vector<std::shared_ptr<const RelationInfo>> truncated_relations;
  uint8_t truncate_options = 0;  // pgoutput::Truncate::kCascade | kRestartIdentity.

  // kMessage (pg_logical_emit_message with transactional = true).
  Lsn message_lsn;  // End of the message's WAL record.
  std::string message_prefix;
  std::string message_content;  // Arbitrary bytes.

  // Set on the last event of its transaction only: true, the number of events in the
  // transaction (its index + 1) and the Commit's end_lsn. On every other event:
  // false, 0 and 0/0.
  bool last_in_transaction = false;
  uint32_t transaction_event_count = 0;
  Lsn end_lsn;
};

absl::string_view OpName(ChangeEvent::Op op);  // "INSERT", "UPDATE", ...

// A transaction's Begin. Its ChangeEvents follow, then TransactionCommitted.
struct TransactionBegun {
  Lsn commit_lsn;  // Begin.final_lsn: the id prefix of all its events.
  uint32_t xid = 0;
  int64_t commit_time = 0;
};

// A transaction's Commit; comes after its last ChangeEvent (if any). event_count may
// be 0: PostgreSQL 14 and earlier send Begin/Commit for transactions that publish
// nothing.
struct TransactionCommitted {
  Lsn commit_lsn;  // Start of the commit record; == TransactionBegun::commit_lsn.
  Lsn end_lsn;     // End of the commit record: what confirms the whole transaction.
  int64_t commit_time = 0;
  uint32_t xid = 0;
  uint32_t event_count = 0;
};

// pg_logical_emit_message with transactional = false. Not a ChangeEvent: it belongs
// to no commit (it is sent even if its transaction later aborts), so it has no commit
// LSN to anchor an id, and its own LSN can equal the next transaction's commit LSN.
// The caller may count or ignore it.
struct NonTransactionalMessage {
  Lsn lsn;  // End of the message's WAL record.
  std::string prefix;
  std::string content;
};

class TransactionAssembler {
 public:
  using Output =
      absl::variant<TransactionBegun, ChangeEvent, TransactionCommitted, NonTransactionalMessage>;

  // `start_lsn`: the LSN passed to START_REPLICATION for this session (0/0 when the
  // server picks, i.e. starts at the slot's confirmed_flush_lsn). See Reset().
  explicit TransactionAssembler(Lsn start_lsn = Lsn::kInvalid);
  TransactionAssembler(const TransactionAssembler&) = delete;
  TransactionAssembler& operator=(const TransactionAssembler&) = delete;

  // Consumes one decoded message and appends what it completes to `*out` (possibly
  // nothing: the first change of a transaction is held until the next one or Commit).
  // On error nothing is appended, the state is unchanged, and every later call
  // returns the same error (prefixed as such) until Reset().
  absl::Status Process(pgoutput::Message message, std::vector<Output>* out);

  // Starts a new walsender session: drops an open transaction and its held event,
  // clears the relation cache and any earlier error. `start_lsn` is the LSN passed to
  // START_REPLICATION for the new session.
  //
  // The last commit LSN seen is deliberately NOT kept. PostgreSQL resumes at
  // max(start_lsn, confirmed_flush_lsn) and re-sends every transaction committing at
  // or after it (postgres-replication.md §4.2), which normally includes transactions
  // this process already emitted but which were not yet acked; rejecting them as
  // "out of order" would turn every reconnect into an error. What does hold on every
  // session is that no transaction commits before `start_lsn` (the bound is
  // inclusive: confirming a commit_lsn re-delivers that transaction), so that is the
  // floor checked until the session's first Commit; from then on each transaction
  // must commit strictly after the previous one. Events re-sent with ids the caller
  // already has are the caller's to drop (ids are deterministic).
  //
  // Events of the dropped open transaction that were already appended to an output
  // stay valid; the transaction will be re-sent whole with the same ids.
  void Reset(Lsn start_lsn);

  // Changes to relations in `schema` are dropped before they take an index, as if
  // the table were not published. walfeed's checkpoint store lives there, so its own
  // writes never reach consumers even under FOR ALL TABLES; the store writes in
  // transactions of their own, so those become transactions without events. ""
  // (the default) drops nothing.
  void set_excluded_schema(std::string schema);

  bool in_transaction() const { return open_.has_value(); }
  // The open transaction's commit LSN (Begin.final_lsn), 0/0 outside a transaction.
  Lsn current_commit_lsn() const { return open_ ? open_->commit_lsn : Lsn::kInvalid; }
  // Events of the open transaction so far (including the held one); 0 outside.
  uint32_t current_event_count() const { return open_ ? open_->event_count : 0; }
  // Commit LSN of the last transaction committed in this session, 0/0 before one.
  Lsn last_commit_lsn() const { return last_commit_lsn_; }
  const RelationCache& relations() const { return relations_; }

 private:
  struct Visitor;

  struct OpenTransaction {
    Lsn commit_lsn;  // Begin.final_lsn; always valid.
    uint32_t xid = 0;
    int64_t commit_time = 0;
    uint32_t event_count = 0;  // Events indexed so far; the next one gets this index.
  };

  absl::Status OnBegin(const pgoutput::Begin& begin, std::vector<Output>* out);
  absl::Status OnCommit(const pgoutput::Commit& commit, std::vector<Output>* out);
  absl::Status OnOrigin(const pgoutput::Origin& origin);
  absl::Status OnInsert(pgoutput::Insert insert, std::vector<Output>* out);
  absl::Status OnUpdate(pgoutput::Update update, std::vector<Output>* out);
  absl::Status OnDelete(pgoutput::Delete del, std::vector<Output>* out);
  absl::Status OnTruncate(const pgoutput::Truncate& truncate, std::vector<Output>* out);
  absl::Status OnMessage(pgoutput::LogicalMessage message, std::vector<Output>* out);

  // OK if a change described by `what` may take the next index of the open
  // transaction: one is open and the index does not overflow.
  absl::Status CheckChangeAllowed(absl::string_view what) const;
  // The current description of `relation_id`; the error names `what` and the id.
  absl::StatusOr<std::shared_ptr<const RelationInfo>> FindRelation(uint32_t relation_id,
                                                                   absl::string_view what) const;
  // OK if `tuple` (the `which` tuple of `what`) has exactly `relation`'s column count.
  absl::Status CheckColumnCount(const RelationInfo& relation, const pgoutput::TupleData& tuple,
                                absl::string_view what, absl::string_view which) const;
  // Fills id/xid/commit_time, takes the next index and holds `event`, releasing the
  // previously held one into `*out`. Call only after CheckChangeAllowed() passed.
  void Emit(ChangeEvent event, std::vector<Output>* out);
  bool Excluded(const RelationInfo& relation) const;
  // The id the next change of the open transaction would get, for error messages.
  std::string NextIdForError() const;

  std::string excluded_schema_;  // See set_excluded_schema(); "" = none.
  // LSN passed to START_REPLICATION for this session (0/0: none). Every Begin of the
  // session must have final_lsn >= start_lsn_ (PostgreSQL skips earlier commits).
  Lsn start_lsn_;
  // Commit LSN of the session's last Commit, 0/0 before it. Every later Begin must
  // have final_lsn > last_commit_lsn_ (transactions arrive in commit order).
  Lsn last_commit_lsn_;
  // Set between Begin and Commit.
  std::optional<OpenTransaction> open_;
  // The open transaction's latest event, not yet released: set iff open_ is set and
  // open_->event_count > 0, and then its index is open_->event_count - 1.
  std::optional<ChangeEvent> held_;
  // Relations and types described in this session.
  RelationCache relations_;
  // The first error Process returned since construction or Reset(); OK if none.
  absl::Status error_;
};

}  // namespace walfeed::replication

#endif  // WALFEED_REPLICATION_TRANSACTION_ASSEMBLER_H_
