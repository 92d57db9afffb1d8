// RowEventWriter: the wire bytes of a walfeed.v1.ChangeEvent for an INSERT,
// UPDATE or DELETE, written straight from the replication event. The bytes are
// exactly what ToProto + SerializeToString give (tests/server/
// row_event_writer_test.cc compares the two over many random events), but no
// message is built: no arena, no per-column objects, no size pass over them, no
// second UTF-8 check by protobuf. Each column's constant part (name, type OID,
// type name, key flag) is encoded once per relation version and reused.
//
// Runs on the reader thread, one writer per stream (in EventEncoder).
#ifndef WALFEED_SERVER_ROW_EVENT_WRITER_H_
#define WALFEED_SERVER_ROW_EVENT_WRITER_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "replication/relation_cache.h"
#include "replication/transaction_assembler.h"
#include "server/filter.h"

namespace walfeed::server {

class RowEventWriter {
 public:
  // Sets `*out` to the event's wire bytes and `*key` to what FilterKey::Of gives
  // for the message. False, leaving both alone, for events this writer does not
  // cover: TRUNCATE, MESSAGE, and a row event without a relation (which the
  // assembler never emits); ToProto serializes those.
  bool Write(const replication::ChangeEvent& event, std::string* out, FilterKey* key);
  // Write's `full` and `key`, and, when `compact` is not null, the same event
  // in the compact form (walfeed.v1.EventForm): its columns without their
  // metadata, naming the relation version's shape by `*ref`; `*shape` is that
  // serialized walfeed.v1.RelationShape. One pass: each value is looked at once.
  bool WriteBoth(const replication::ChangeEvent& event, std::string* full, FilterKey* key,
                 std::string* compact, uint32_t* ref, std::shared_ptr<const std::string>* shape);

 private:
  // What a relation version contributes to every event of it.
  struct Relation {
    std::shared_ptr<const replication::RelationInfo> info;  // Keeps the key alive.
    std::string schema;                                     // As sent.
    std::string table;
    std::string schema_table_fields;          // ChangeEvent fields 7 and 8, encoded.
    std::vector<std::string> column_prefixes;  // ColumnValue fields 1-4, encoded.
    uint32_t ref = 0;                           // Its RelationShape's ref, from 1.
    std::shared_ptr<const std::string> shape;   // That RelationShape, serialized.
  };

  const Relation& Get(const std::shared_ptr<const replication::RelationInfo>& info);
  // Whether `event` is a row event this writer covers.
  static bool Covers(const replication::ChangeEvent& event);
  // The event's bytes in the full form, and in the compact form (without
  // column metadata) when `compact` is not null.
  static void WriteForms(const replication::ChangeEvent& event, const Relation& relation,
                         std::string* out, std::string* compact);

  // By RelationInfo address: a relation's new version is a new object, and the
  // entry's shared_ptr keeps the address from being reused while it is cached.
  absl::flat_hash_map<const replication::RelationInfo*, Relation> relations_;
  // Never reused while the process runs, so no session can mistake one
  // relation version for another, even after the cache above is cleared.
  uint32_t next_ref_ = 1;
};

}  // namespace walfeed::server

#endif  // WALFEED_SERVER_ROW_EVENT_WRITER_H_
