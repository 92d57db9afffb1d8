// RelationCache: what pgoutput Relation and Type messages said about tables and types.
//
// pgoutput sends a row as bare values in column order; the column names, types and
// key flags come separately, in a Relation message sent before the first change of
// each relation in every walsender session and again after any invalidation of it
// (DDL, TRUNCATE, publication changes). Type messages describe non-built-in column
// types (OID >= 10000) and come before the Relation that uses them. This cache keeps
// the latest description of each relation and type for one replication session.
//
// A description is an immutable std::shared_ptr<const RelationInfo>. Apply() swaps in
// a new pointer and never modifies the old one, so an event built before an ALTER
// TABLE keeps the columns it was decoded with: a later Relation message can never
// re-attribute its values to other columns.
//
// Reset() must be called on every reconnect. PostgreSQL re-sends every description a
// new session needs, and an entry left over from an earlier session may describe a
// schema that has changed since.
//
// Not thread-safe: one instance belongs to one stream's reader thread. RelationInfo
// objects handed out are immutable and may be shared freely across threads.
#ifndef WALFEED_REPLICATION_RELATION_CACHE_H_
#define WALFEED_REPLICATION_RELATION_CACHE_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "replication/pgoutput.h"

namespace walfeed::replication {

struct ColumnInfo {
  std::string name;
  uint32_t type_oid = 0;       // atttypid; for a domain, the domain's own OID.
  int32_t type_modifier = -1;  // atttypmod; -1 when the type has none.
  bool is_key = false;         // Part of the replica identity (every column under FULL).
  // The type's name when the Relation was applied (see RelationCache::TypeName), ""
  // when neither a Type message nor the built-in table knew the OID. Resolved once so
  // that the frozen description stays self-contained.
  std::string type_name;
};

struct RelationInfo {
  uint32_t relation_id = 0;  // pg_class OID in the source cluster.
  std::string schema;        // Never empty: "" on the wire means "pg_catalog".
  std::string table;
  char replica_identity = 'd';      // 'd' default, 'n' nothing, 'f' full, 'i' index.
  std::vector<ColumnInfo> columns;  // Published live columns, in attribute order.
};

struct TypeInfo {
  std::string namespace_name;  // As sent: "" means pg_catalog.
  std::string name;            // For a domain, the base type's name.
};

class RelationCache {
 public:
  RelationCache() = default;
  RelationCache(const RelationCache&) = delete;
  RelationCache& operator=(const RelationCache&) = delete;

  // Replaces the description of relation.relation_id. Events already holding the old
  // description keep it. DataLoss if the message cannot be a PostgreSQL relation
  // (OID 0, a replica identity other than d/n/f/i); the cache is unchanged then.
  absl::Status Apply(const pgoutput::Relation& relation);

  // Records a non-built-in type. DataLoss for type OID 0; the cache is unchanged then.
  absl::Status Apply(const pgoutput::Type& type);

  // The current description of `relation_id`, or DataLoss naming the OID when no
  // Relation message for it arrived in this session.
  absl::StatusOr<std::shared_ptr<const RelationInfo>> Find(uint32_t relation_id) const;

  // The name of a column type: "schema.name" for a type described by a Type message
  // ("name" alone when its namespace is "" or pg_catalog), PostgreSQL's typname for a
  // common built-in type ("int4", "_text", "timestamptz"), otherwise "" (the caller
  // may look the OID up in the catalog).
  std::string TypeName(uint32_t type_oid) const;

  // Forgets every relation and type (start of a new walsender session).
  void Reset();

  size_t relation_count() const { return relations_.size(); }
  size_t type_count() const { return types_.size(); }

 private:
  // Latest description per relation OID from this session's Relation messages. Every
  // value is non-null and its key equals value->relation_id.
  absl::flat_hash_map<uint32_t, std::shared_ptr<const RelationInfo>> relations_;
  // Non-built-in types from this session's Type messages, keyed by type OID.
  absl::flat_hash_map<uint32_t, TypeInfo> types_;
};

// PostgreSQL's typname for a common built-in type OID (pg_type.dat: scalars such as
// "int4", their arrays such as "_int4"), or "" when the OID is not in the table.
// Built-in OIDs are fixed across clusters and versions, unlike user type OIDs.
absl::string_view BuiltinTypeName(uint32_t type_oid);

}  // namespace walfeed::replication

#endif  // WALFEED_REPLICATION_RELATION_CACHE_H_
