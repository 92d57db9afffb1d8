// LeaderLock: which walfeed-server instance streams a stream, decided by
// PostgreSQL: a session-level advisory lock in the checkpoint store's
// database, held on a connection of its own for as long as the instance leads.
//
// Why it is safe (docs/operations.md, "Active/standby", has the whole argument):
// * One holder at a time: pg_try_advisory_lock. The holder's session ends and
//   PostgreSQL frees the lock: at once when the process dies (its socket
//   closes), and within kServerTimeout of the last query otherwise, because
//   the holder's session sets idle_session_timeout (a lease: a network cut, a
//   stalled proxy or a frozen process all stop the queries).
// * The holder gives up before PostgreSQL frees the lock: Check() runs a query
//   every few hundred milliseconds with a deadline (kCheckTimeout) well inside
//   kServerTimeout, so a holder that cannot renew its lease stops serving
//   before another instance can acquire the lock.
// * The slot has a single reader anyway (PostgreSQL lets one walsender hold
//   it), and checkpoints only move forward in SQL: a deposed instance can
//   neither read the slot alongside the new leader nor move a checkpoint back.
//
// The lock session's application_name names the instance ("walfeed leader
// <id> <advertise>"): standbys read it to tell clients where the active
// instance is, and an instance recognises its own stale session (after its
// connection dropped) and ends it instead of waiting for PostgreSQL to notice.
#ifndef WALFEED_REPLICATION_PG_LEADER_LOCK_H_
#define WALFEED_REPLICATION_PG_LEADER_LOCK_H_

#include <functional>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "replication/pg/pg_conn.h"

namespace walfeed::replication::pg {

class LeaderLock {
 public:
  // How long Check() waits for PostgreSQL to answer.
  static constexpr absl::Duration kCheckTimeout = absl::Milliseconds(1500);
  // PostgreSQL ends the holder's session when no query arrived for this long
  // (idle_session_timeout), which frees the lock.
  static constexpr absl::Duration kServerTimeout = absl::Seconds(5);

  struct Options {
    std::string conninfo;   // The checkpoint store's database.
    std::string key;        // What is led, e.g. "walfeed/orders" (schema/stream).
    std::string instance;   // This process, unique per start (a random id).
    // Where clients reach this instance ("" when unknown), asked on connect.
    std::function<std::string()> advertise;
    std::string slot_name;  // The stream's slot (see TryAcquire).
    // The application_name of the stream's walsenders (StreamWalsenderName).
    std::string walsender_name;
  };
  explicit LeaderLock(Options options) : options_(std::move(options)) {}
  LeaderLock(const LeaderLock&) = delete;
  LeaderLock& operator=(const LeaderLock&) = delete;

  // Tries once. True when this instance holds the lock (now or already). On
  // acquiring it, a walsender still holding the slot under the stream's own
  // walsender_name belongs to a deposed instance: it is terminated, so the new
  // leader need not wait for wal_sender_timeout. Any other walsender on the
  // slot (another stream's, misconfigured onto the same slot, or a foreign
  // client) is left alone: the stream's start refuses to share the slot.
  // Errors: the database's (transient ones are retried by the caller).
  absl::StatusOr<bool> TryAcquire();
  // OK while the lock is held and PostgreSQL answered within kCheckTimeout;
  // otherwise the lock counts as lost (the connection is closed) and the error
  // says why.
  absl::Status Check();
  // Gives the lock up (closes the session).
  void Release();
  bool held() const { return held_; }
  // The advertised address of the instance holding the lock, "" when none or
  // unknown; as of the last TryAcquire that did not get it.
  const std::string& holder() const { return holder_; }

 private:
  absl::Status Connect();
  // The session name standbys read: "walfeed leader <instance> <advertise>",
  // within PostgreSQL's 63 bytes.
  std::string SessionName() const;
  std::string Advertise() const;

  const Options options_;
  PgConnPtr conn_;
  bool held_ = false;
  std::string holder_;
};

}  // namespace walfeed::replication::pg

#endif  // WALFEED_REPLICATION_PG_LEADER_LOCK_H_
