// walfeed::PgWatermark: exactly-once effects in a PostgreSQL destination on top
// of walfeed's at-least-once delivery, by storing the last applied event id in
// the same transaction as the effects (a "transactional watermark").
//
// The watermark table (created by Open if missing) holds one row per (consumer,
// stream):
//
//   CREATE TABLE walfeed_watermark (
//     consumer   text NOT NULL,
//     stream     text NOT NULL,
//     last_id    text,          -- "0/1A2B3C8:4", NULL until something applied
//     commit_lsn pg_lsn,        -- its parts, so SQL can order ids correctly
//     idx        bigint CHECK (idx BETWEEN 0 AND 4294967295),  -- a uint32: not int4
//     updated_at timestamptz NOT NULL DEFAULT now(),
//     PRIMARY KEY (consumer, stream));
//
// The pattern:
//
//   MySqlConnection dest(...);  // a walfeed::SqlConnection over your driver
//   walfeed::PgWatermark watermark =
//       walfeed::PgWatermark::Open(dest, {"walfeed_watermark", "orders", "billing"}).value();
//   walfeed::SubscriberOptions options = ...;
//   options.start_after = watermark.Resume(dest).value();  // "" when nothing applied yet
//   options.ack = walfeed::AckPolicy::EveryEvents(1);       // acks follow the handler's OK
//   walfeed::Subscriber subscriber(options);
//   subscriber.Run([&](const walfeed::Batch& batch) -> absl::Status {
//     BEGIN on dest
//     absl::StatusOr<walfeed::PgWatermark::Result> applied = watermark.Apply(
//         dest, batch, [](walfeed::SqlConnection& conn, const walfeed::v1::ChangeEvent& event) {
//           ... write the effect of `event` on `conn` ...
//           return absl::OkStatus();
//         });
//     if (!applied.ok()) { ROLLBACK; return applied.status(); }
//     COMMIT; if it failed, return an error (nothing is acked)
//     return absl::OkStatus();  // Only now may walfeed be acked.
//   });
//
// Why each crash window is safe:
//   - before COMMIT: neither effects nor watermark are stored and nothing was
//     acked; the events come again and are applied once;
//   - after COMMIT, before the ack reached walfeed: the events come again (or
//     not at all, when the restart subscribes after Resume()), and Apply skips
//     every id at or below the stored one;
//   - COMMIT's outcome unknown (connection lost): the stored id says what
//     happened, so the next Apply does the right thing either way.
// Two processes applying for the same (consumer, stream) at once are serialized
// by a row lock (SELECT ... FOR UPDATE) held to the end of each transaction, so
// an event is applied once even while a takeover races. Under REPEATABLE READ or
// SERIALIZABLE such a race surfaces as ABORTED (SQLSTATE 40001): roll back and
// retry the batch.
//
// Rules: ack walfeed only after the destination committed (an automatic ack
// policy does that when the handler commits before returning OK; with
// AckPolicy::Manual, call Subscriber::Ack after COMMIT); start_after from
// Resume() is never below the server's checkpoint while every ack follows a
// commit, which is what the server requires.
#ifndef WALFEED_CLIENT_INCLUDE_WALFEED_PG_WATERMARK_H_
#define WALFEED_CLIENT_INCLUDE_WALFEED_PG_WATERMARK_H_

#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "walfeed/event_id.h"
#include "walfeed/subscriber.h"

namespace walfeed {

// The caller's connection to the destination PostgreSQL, as PgWatermark needs
// it: one statement at a time, with text parameters $1..$n, on the connection
// (and so in the transaction) the caller's effects use. The library does not
// pick a driver: implement it over libpq (client/README.md shows one in about 30
// lines), libpqxx or anything else that speaks PostgreSQL.
class SqlConnection {
 public:
  using Row = std::vector<std::optional<std::string>>;  // nullopt is NULL.

  virtual ~SqlConnection() = default;
  // The statement's rows (none for a command). Failures carry the canonical code
  // of their SQLSTATE: UNAVAILABLE for a lost connection (08..., 57P...),
  // ABORTED for a serialization failure or deadlock (40...: roll back, retry),
  // INVALID_ARGUMENT for a bad statement or name (42..., 3F...), INTERNAL else.
  virtual absl::StatusOr<std::vector<Row>> Execute(const std::string& sql,
                                                   const std::vector<std::string>& params) = 0;
  // Whether a transaction is open on the connection.
  virtual bool InTransaction() = 0;
};

class PgWatermark {
 public:
  struct Options {
    // The watermark table, "name" or "schema.name" (quoted as identifiers).
    std::string table = "walfeed_watermark";
    std::string stream;
    std::string consumer;
  };

  struct Result {
    int applied = 0;  // Events whose effect ran.
    int skipped = 0;  // Events at or below the stored id.
    // The stored id after the batch (uncommitted until the caller commits).
    std::optional<EventId> watermark;
  };

  // The effect of one event, run inside the caller's transaction with the same
  // connection. An error makes Apply return it: roll the transaction back.
  using Effect =
      std::function<absl::Status(SqlConnection& conn, const walfeed::v1::ChangeEvent& event)>;

  // Creates the table (CREATE TABLE IF NOT EXISTS; safe to race) and this
  // consumer's row. Call it outside a transaction (FAILED_PRECONDITION otherwise).
  static absl::StatusOr<PgWatermark> Open(SqlConnection& conn, Options options);

  // The stored id as Subscribe's start_after, "" when nothing was applied.
  absl::StatusOr<std::string> Resume(SqlConnection& conn) const;

  // Inside the caller's open transaction (FAILED_PRECONDITION otherwise): locks
  // the watermark row, skips events at or below the stored id, runs `effect` for
  // the others in id order, and stores the batch's newest applied id. Nothing
  // is durable until the caller commits.
  absl::StatusOr<Result> Apply(SqlConnection& conn, const Batch& batch,
                               const Effect& effect) const;

  const Options& options() const { return options_; }

 private:
  PgWatermark(Options options, std::string quoted_table)
      : options_(std::move(options)), table_(std::move(quoted_table)) {}

  Options options_;
  std::string table_;  // Quoted, ready for SQL.
};

}  // namespace walfeed

#endif  // WALFEED_CLIENT_INCLUDE_WALFEED_PG_WATERMARK_H_
