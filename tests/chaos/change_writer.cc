#include "tests/chaos/change_writer.h"

#include <libpq-fe.h>

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "tests/chaos/delivery_log.h"
#include "tests/testing/wait.h"

namespace walfeed::chaos {
namespace {

bool ExecOk(PGconn* conn, const std::string& sql) {
  PGresult* result = PQexec(conn, sql.c_str());
  const ExecStatusType status = PQresultStatus(result);
  PQclear(result);
  return status == PGRES_COMMAND_OK || status == PGRES_TUPLES_OK;
}

}  // namespace

absl::Status CreateSchema(const std::string& conninfo) {
  PGconn* conn = PQconnectdb(conninfo.c_str());
  const bool ok =
      PQstatus(conn) == CONNECTION_OK &&
      ExecOk(conn,
             "CREATE TABLE chaos_a (id bigint PRIMARY KEY, seq bigint NOT NULL, pad text);"
             "CREATE TABLE chaos_b (id bigint PRIMARY KEY, seq bigint NOT NULL, pad text);"
             "ALTER TABLE chaos_a REPLICA IDENTITY FULL;"
             "ALTER TABLE chaos_b REPLICA IDENTITY FULL;"
             "CREATE TABLE chaos_txn (n bigint PRIMARY KEY);"
             "CREATE TABLE chaos_filler (id bigserial PRIMARY KEY, pad text)");
  const std::string error = PQerrorMessage(conn);
  PQfinish(conn);
  if (!ok) return absl::InternalError(absl::StrCat("creating the chaos tables: ", error));
  return absl::OkStatus();
}

ChangeWriter::ChangeWriter(std::string conninfo, uint64_t seed)
    : conninfo_(std::move(conninfo)), rng_(seed) {}

ChangeWriter::~ChangeWriter() {
  (void)Stop();
  if (conn_ != nullptr) PQfinish(conn_);
}

void ChangeWriter::Start() { thread_ = std::thread([this] { Run(); }); }

absl::Status ChangeWriter::Stop() {
  if (!stop_.HasBeenNotified()) stop_.Notify();
  if (thread_.joinable()) thread_.join();
  // Settle in transaction order: the ledger stays in commit order because the
  // writer only has one transaction in flight, and an unknown one is always the
  // last before a reconnect.
  bool settled = testing::WaitUntil(
      [&] {
        while (!unknown_.empty()) {
          const int found = LookUp(unknown_.front().txn.number);
          if (found < 0) return false;
          absl::MutexLock lock(&mu_);
          if (found == 1) Apply(std::move(unknown_.front()));
          unknown_.erase(unknown_.begin());
          ++settled_;
        }
        return true;
      },
      absl::Seconds(60), absl::Milliseconds(50));
  if (!settled) return absl::DeadlineExceededError("could not settle unknown commit outcomes");
  return absl::OkStatus();
}

std::vector<CommittedTxn> ChangeWriter::committed() const {
  absl::MutexLock lock(&mu_);
  return committed_;
}

uint64_t ChangeWriter::committed_changes() const {
  absl::MutexLock lock(&mu_);
  return changes_;
}

bool ChangeWriter::EnsureConnected() {
  if (conn_ != nullptr && PQstatus(conn_) == CONNECTION_OK) return true;
  if (conn_ != nullptr) PQfinish(conn_);
  conn_ = PQconnectdb(conninfo_.c_str());
  // PostgreSQL's "terminating connection due to immediate shutdown" notices are
  // expected here; the outcome is settled through chaos_txn, not the notice.
  PQsetNoticeProcessor(conn_, [](void*, const char*) {}, nullptr);
  return PQstatus(conn_) == CONNECTION_OK;
}

int ChangeWriter::LookUp(int64_t number) {
  if (!EnsureConnected()) return -1;
  PGresult* result =
      PQexec(conn_, absl::StrCat("SELECT count(*) FROM chaos_txn WHERE n = ", number).c_str());
  int found = -1;
  if (PQresultStatus(result) == PGRES_TUPLES_OK && PQntuples(result) == 1) {
    found = std::string(PQgetvalue(result, 0, 0)) == "1" ? 1 : 0;
  }
  PQclear(result);
  return found;
}

ChangeWriter::Pending ChangeWriter::Generate() {
  Pending p;
  p.txn.number = next_txn_++;
  std::string sql = "BEGIN;";
  auto live = [&](const std::string& table) {
    // Rows as this transaction sees them: committed rows plus its own changes.
    std::map<int64_t, int64_t> rows = rows_[table];
    for (const auto& [id, seq] : p.model[table]) {
      if (seq < 0) {
        rows.erase(id);
      } else {
        rows[id] = seq;
      }
    }
    return rows;
  };
  const bool large = rng_() % 40 == 0;
  if (large) {
    const std::string table = rng_() % 2 ? "chaos_a" : "chaos_b";
    const int64_t n = 100 + static_cast<int64_t>(rng_() % 1400);
    const int64_t id0 = next_id_;
    const int64_t seq0 = next_seq_;
    next_id_ += n;
    next_seq_ += n;
    absl::StrAppend(&sql, "INSERT INTO ", table, " SELECT ", id0, " + g, ", seq0,
                    " + g, repeat('x', 40) FROM generate_series(0, ", n - 1, ") g;");
    for (int64_t g = 0; g < n; ++g) {
      p.txn.signatures.push_back(absl::StrCat(table, ":I:", seq0 + g));
      p.model[table][id0 + g] = seq0 + g;
    }
  } else {
    const int changes = 1 + static_cast<int>(rng_() % 6);
    for (int c = 0; c < changes; ++c) {
      const std::string table = rng_() % 2 ? "chaos_a" : "chaos_b";
      const int64_t seq = next_seq_++;
      std::map<int64_t, int64_t> rows = live(table);
      const int pick = static_cast<int>(rng_() % 10);
      if (pick < 2) {
        absl::StrAppend(&sql, "SELECT pg_logical_emit_message(true, '", kChangePrefix, "', '",
                        seq, "');");
        p.txn.signatures.push_back(absl::StrCat("msg:M:", seq));
      } else if (pick < 5 || rows.size() < 20) {
        const int64_t id = next_id_++;
        absl::StrAppend(&sql, "INSERT INTO ", table, " VALUES (", id, ", ", seq, ", 'v", seq,
                        "');");
        p.txn.signatures.push_back(absl::StrCat(table, ":I:", seq));
        p.model[table][id] = seq;
      } else {
        auto it = rows.begin();
        std::advance(it, static_cast<long>(rng_() % rows.size()));
        if (pick < 8) {
          absl::StrAppend(&sql, "UPDATE ", table, " SET seq = ", seq, ", pad = 'u", seq,
                          "' WHERE id = ", it->first, ";");
          p.txn.signatures.push_back(absl::StrCat(table, ":U:", seq));
          p.model[table][it->first] = seq;
        } else {
          --next_seq_;  // A delete is named by the version it removes.
          absl::StrAppend(&sql, "DELETE FROM ", table, " WHERE id = ", it->first, ";");
          p.txn.signatures.push_back(absl::StrCat(table, ":D:", it->second));
          p.model[table][it->first] = -1;
        }
      }
    }
  }
  absl::StrAppend(&sql, "INSERT INTO chaos_txn VALUES (", p.txn.number, ");COMMIT;");
  p.sql = std::move(sql);
  return p;
}

void ChangeWriter::Apply(Pending pending) {
  for (const auto& [table, changes] : pending.model) {
    for (const auto& [id, seq] : changes) {
      if (seq < 0) {
        rows_[table].erase(id);
      } else {
        rows_[table][id] = seq;
      }
    }
  }
  changes_ += pending.txn.signatures.size();
  committed_.push_back(std::move(pending.txn));
}

void ChangeWriter::Run() {
  while (!stop_.HasBeenNotified()) {
    if (!unknown_.empty() || !EnsureConnected()) {
      // PostgreSQL is away (a restart): settle the unknown outcome first, so the
      // row model is right before the next transaction is generated. Pace the
      // retries on the stop notification.
      if (!unknown_.empty()) {
        const int found = LookUp(unknown_.front().txn.number);
        if (found >= 0) {
          absl::MutexLock lock(&mu_);
          if (found == 1) Apply(std::move(unknown_.front()));
          unknown_.erase(unknown_.begin());
          ++settled_;
          continue;
        }
      }
      stop_.WaitForNotificationWithTimeout(absl::Milliseconds(20));
      continue;
    }
    Pending pending = Generate();
    PGresult* result = PQexec(conn_, pending.sql.c_str());
    const bool ok = PQresultStatus(result) == PGRES_COMMAND_OK;
    PQclear(result);
    if (ok) {
      absl::MutexLock lock(&mu_);
      Apply(std::move(pending));
    } else {
      // The transaction may or may not have committed (the connection died
      // around COMMIT), or failed on a live connection: roll back what is left
      // and let the lookup decide.
      if (PQstatus(conn_) == CONNECTION_OK) (void)ExecOk(conn_, "ROLLBACK");
      unknown_.push_back(std::move(pending));
    }
    // Pacing, not waiting for a condition: a load of a few hundred changes per
    // second keeps faults frequent relative to the data on two shared cores.
    stop_.WaitForNotificationWithTimeout(absl::Milliseconds(static_cast<int>(5 + rng_() % 25)));
  }
}

}  // namespace walfeed::chaos
