// The table checks behind the preflight's warnings and its refusal to publish
// what is not a table: which configured publications exist, what they publish,
// and which published (or to-be-published) leaf tables lack a usable replica
// identity, so that their UPDATE and DELETE would fail on the primary.
//
// Provisioning runs them inside its preflight (provisioning.h). A stream's
// start-up defers them when they decide nothing (TableChecks) and runs
// PublishedTableWarnings() on the preflight's walsender after the preflight
// (StartReads, stream_start.cc); only where that connection is not kept (the
// slot is to be created) on a connection of its own, beside the live stream.
#ifndef WALFEED_REPLICATION_PG_TABLE_CHECKS_H_
#define WALFEED_REPLICATION_PG_TABLE_CHECKS_H_

#include <set>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "replication/pg/pg_conn.h"
#include "replication/stream_config.h"

namespace walfeed::replication::pg {

// Leaf tables without a usable replica identity, each with the reason.
using UnusableTables = std::set<std::pair<TableName, std::string>>;

// What existing publications publish.
struct PublishedTables {
  std::set<TableName> tables;
  UnusableTables unusable;  // Leaves of publications that publish UPDATE or DELETE.
};

// The queries below run on an ordinary connection or on a walsender (SqlChannel).

// config.tables parsed (entries that do not parse are left out: Validate()
// rejects them first).
std::vector<TableName> ConfigTables(const StreamConfig& config);

// Splits config.publication_names by whether they exist, in config order.
absl::Status FindPublications(const SqlChannel& conn, const StreamConfig& config,
                              std::vector<std::string>* existing,
                              std::vector<std::string>* missing);

// Before publications are created FOR TABLE config.tables (or FOR ALL TABLES):
// checks each listed table exists and is a table, and adds the leaves that
// would lack a replica identity to `unusable`. NotFound / FailedPrecondition
// name the entry to fix.
absl::Status CheckTablesToPublish(const SqlChannel& conn, const StreamConfig& config,
                                  UnusableTables* unusable);

// What `publications` (which exist) publish, added to `published`.
absl::Status ReadPublishedTables(const SqlChannel& conn,
                                 const std::vector<std::string>& publications,
                                 PublishedTables* published);

// The table warnings, appended to `warnings`: configured tables that `existing`
// does not publish (only when `all_exist`: walfeed never alters a publication,
// so it says what would), then tables whose UPDATE/DELETE would fail.
void AppendTableWarnings(const StreamConfig& config, const std::vector<std::string>& existing,
                         bool all_exist, const PublishedTables& published,
                         std::vector<std::string>* warnings);

// The warnings a report with table_checks_deferred left out: what Preflight()
// would have added to its warnings. On `conn`, an open connection of either
// kind (the stream's start-up walsender too): its queries time out after 5 s
// and lock waits after 2 s, and the session's own timeouts are back when it
// returns, so that the connection can go on to stream.
absl::StatusOr<std::vector<std::string>> PublishedTableWarnings(const SqlChannel& conn,
                                                                const StreamConfig& config);
// The warning when they could not be looked for (`why`).
std::string TableChecksFailedWarning(const absl::Status& why);
// The same on a connection of its own.
absl::StatusOr<std::vector<std::string>> PublishedTableWarnings(const StreamConfig& config);

}  // namespace walfeed::replication::pg

#endif  // WALFEED_REPLICATION_PG_TABLE_CHECKS_H_
