// StreamConfig: what one walfeed stream reads from PostgreSQL (server, slot,
// publications) and whether walfeed may create the slot and publications itself.
//
// Validate() rejects, before any connection is made, names PostgreSQL would
// refuse or silently change, so a typo surfaces as a configuration error that
// names the field rather than as a server error later. Names are taken literally
// (they are always quoted when sent), so "public.Orders" means the table whose
// name is exactly `Orders`; nothing is down-cased.
#ifndef WALFEED_REPLICATION_STREAM_CONFIG_H_
#define WALFEED_REPLICATION_STREAM_CONFIG_H_

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace walfeed::replication {

// Longest identifier PostgreSQL keeps (NAMEDATALEN - 1 bytes); longer names are
// truncated by the server for publications and tables, and refused for slots.
inline constexpr size_t kMaxIdentifierBytes = 63;

// A table named by schema and table, both exact (case-sensitive) names.
struct TableName {
  std::string schema;
  std::string table;

  // `"schema"."table"`, each part quoted, for SQL text.
  std::string Quoted() const;

  friend bool operator==(const TableName& a, const TableName& b) {
    return a.schema == b.schema && a.table == b.table;
  }
  friend bool operator<(const TableName& a, const TableName& b) {
    return a.schema != b.schema ? a.schema < b.schema : a.table < b.table;
  }
};

// Parses "schema.table": exactly one '.', both parts non-empty and at most 63
// bytes. Quoted forms (`"a.b".c`) are not accepted; errors quote the input.
absl::StatusOr<TableName> ParseTableName(absl::string_view text);

// The checkpoint store's schema: 1-63 bytes (PostgreSQL truncates longer
// names, and the reader would filter on another one than is written to), and
// walfeed's own (not public, information_schema or a pg_ schema), because
// every stream reader drops the changes made in it. InvalidArgument otherwise.
absl::Status CheckCheckpointSchema(absl::string_view schema);

struct StreamConfig {
  // The stream's name as clients see it: 1-63 of [A-Za-z0-9_.-].
  std::string name;
  // libpq connection string (key=value or postgresql:// URL) naming the database
  // the slot lives in. Used for SQL and, with replication=database, streaming.
  std::string conninfo;
  // The logical replication slot: PostgreSQL allows 1-63 of [a-z0-9_].
  std::string slot_name;
  // Publications streamed from the slot (at least one, each 1-63 bytes).
  std::vector<std::string> publication_names;
  // "schema.table" entries used only when walfeed creates a missing publication:
  // FOR TABLE these, or FOR ALL TABLES when empty. Existing publications are
  // never altered to match.
  std::vector<std::string> tables;
  // Create missing publications and the slot (publications first). When false,
  // a missing object is an error that says how to create it.
  bool create_missing = false;
  // For publications walfeed creates: publish changes to a partitioned table's
  // partitions under the partitioned (root) table's name and row type, which is
  // what a consumer subscribing to "public.measurements" means. PostgreSQL then
  // does not publish a TRUNCATE of a single partition. False: each partition
  // under its own name.
  bool publish_via_partition_root = true;
  // `snapshot: initial`: when walfeed creates the slot, every published table's
  // current rows become READ events for every consumer: read under the
  // snapshot the slot exports, so they join the stream exactly at its start
  // (docs/snapshots.md). False (`none`): the stream starts with the changes
  // after the slot's creation.
  bool initial_snapshot = false;
  // How many connections import that snapshot, each reading another table at
  // the same time (at most one per table).
  uint32_t snapshot_connections = 4;

  // OK, or InvalidArgument naming the offending field and the rule it breaks.
  absl::Status Validate() const;
};

}  // namespace walfeed::replication

#endif  // WALFEED_REPLICATION_STREAM_CONFIG_H_
