// RowEventWriter: the wire bytes of a walfeed.v1.ChangeEvent for an INSERT,
// UPDATE or DELETE, written straight from the replication event. The bytes are
// exactly what ToProto + SerializeToString give (tests/server/
// row_event_writer_test.cc compares the two over many random events), but no
// message is built: no arena, no per-column objects, no size pass over them, no
// second UTF-8 check by protobuf. Each column's constant part (name, type OID,
// type name, key flag, type modifier) is encoded once per relation version and
// reused. The other forms (compact, typed values) come out of the same pass.
//
// Runs on the reader thread, one writer per stream (in EventEncoder).
#ifndef WALFEED_SERVER_ROW_EVENT_WRITER_H_
#define WALFEED_SERVER_ROW_EVENT_WRITER_H_

#include <array>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "replication/relation_cache.h"
#include "replication/transaction_assembler.h"
#include "server/event_forms.h"
#include "server/filter.h"
#include "server/wire_out.h"
#include "walfeed/v1/change_stream.pb.h"

namespace walfeed::server {

class RowEventWriter {
 public:
  // Sets `*out` to the event's wire bytes and `*key` to what FilterKey::Of gives
  // for the message. False, leaving both alone, for events this writer does not
  // cover: TRUNCATE, MESSAGE, and a row event without a relation (which the
  // assembler never emits); ToProto serializes those.
  bool Write(const replication::ChangeEvent& event, std::string* out, FilterKey* key);
  // Write's `full` and `key`, and the same event in every other form in
  // `wanted` (EventForm: compact, typed values) into `*forms`, with the
  // compact forms' shape. One pass: each value is looked at, and converted to
  // its typed form, once for all forms.
  bool WriteForms(const replication::ChangeEvent& event, FormMask wanted, std::string* full,
                  FilterKey* key, EventForms* forms);

 private:
  // What a relation version contributes to every event of it.
  struct Relation {
    std::shared_ptr<const replication::RelationInfo> info;  // Keeps the key alive.
    std::string schema;                                     // As sent.
    std::string table;
    std::string schema_table_fields;           // ChangeEvent fields 7 and 8, encoded.
    std::vector<std::string> column_prefixes;  // ColumnValue fields 1-4, encoded.
    std::vector<std::string> column_suffixes;  // ColumnValue field 9, encoded.
    std::vector<uint32_t> typed_oids;          // typed::TypedOid per column.
    uint32_t ref = 0;                          // Its RelationShape's ref, from 1.
    std::shared_ptr<const std::string> shape;  // That RelationShape, serialized.
  };
  // The outputs of one WriteForms call, by EventForm::index() (null: not
  // wanted; [0] is the full text form, always written).
  using Outputs = std::array<WireOut*, EventForm::kCount>;

  const Relation& Get(const std::shared_ptr<const replication::RelationInfo>& info);
  // Whether `event` is a row event this writer covers.
  static bool Covers(const replication::ChangeEvent& event);
  // At most the bytes AppendColumns writes for `tuple` in the full form.
  static size_t ColumnsBound(const Relation& relation,
                             const replication::pgoutput::TupleData& tuple, bool keys_only);
  // Field `field` (new_values or old_values) of every output.
  void AppendColumns(uint32_t field, const Relation& relation,
                     const replication::pgoutput::TupleData& tuple, bool keys_only,
                     const Outputs& outputs, bool typed);

  // Reused for each value's typed form.
  walfeed::v1::TypedValue typed_;
  std::string typed_bytes_;
  // By RelationInfo address: a relation's new version is a new object, and the
  // entry's shared_ptr keeps the address from being reused while it is cached.
  absl::flat_hash_map<const replication::RelationInfo*, Relation> relations_;
  // Never reused while the process runs, so no session can mistake one
  // relation version for another, even after the cache above is cleared.
  uint32_t next_ref_ = 1;
};

}  // namespace walfeed::server

#endif  // WALFEED_SERVER_ROW_EVENT_WRITER_H_
