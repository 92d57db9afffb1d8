// ChangeWriter: commits numbered changes into PostgreSQL on its own thread and
// keeps the ledger the verifier checks deliveries against.
//
// Every change carries a fresh sequence number, so its event is identified by
// content (delivery_log.h's Signature): inserts and updates write `seq`, deletes
// remove a row whose REPLICA IDENTITY FULL old row carries its seq, transactional
// logical messages carry it as content. Transactions mix small ones (1-6 changes
// on both tables, all operations) and large ones (hundreds to thousands of rows).
//
// Each transaction also inserts its number into chaos_txn (not published), so a
// COMMIT whose outcome was lost with the connection (PostgreSQL restarting) is
// settled exactly afterwards by looking the number up, never guessed.
#ifndef WALFEED_TESTS_CHAOS_CHANGE_WRITER_H_
#define WALFEED_TESTS_CHAOS_CHANGE_WRITER_H_

#include <atomic>
#include <cstdint>
#include <map>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"

struct pg_conn;

namespace walfeed::chaos {

// The tables and publication the writer uses; CreateSchema makes them.
inline constexpr char kPublishedTables[] = "public.chaos_a, public.chaos_b";
absl::Status CreateSchema(const std::string& conninfo);

struct CommittedTxn {
  int64_t number = 0;
  std::vector<std::string> signatures;  // In statement order.
};

class ChangeWriter {
 public:
  ChangeWriter(std::string conninfo, uint64_t seed);
  ~ChangeWriter();
  ChangeWriter(const ChangeWriter&) = delete;
  ChangeWriter& operator=(const ChangeWriter&) = delete;

  void Start();
  // Stops, then settles every transaction whose outcome is unknown (reconnecting
  // until PostgreSQL answers). Error if it cannot.
  absl::Status Stop();

  // Committed transactions in commit order (final after Stop).
  std::vector<CommittedTxn> committed() const;
  uint64_t committed_changes() const;
  uint64_t unknown_outcomes_settled() const { return settled_; }

 private:
  struct Pending {
    CommittedTxn txn;
    std::string sql;
    // Row-model changes to apply if it committed: table -> id -> seq (-1: deleted).
    std::map<std::string, std::map<int64_t, int64_t>> model;
  };

  void Run();
  Pending Generate();
  bool EnsureConnected();
  void Apply(Pending pending) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // 1: committed, 0: not, -1: cannot tell yet.
  int LookUp(int64_t number);

  const std::string conninfo_;
  std::mt19937_64 rng_;
  std::thread thread_;
  absl::Notification stop_;
  pg_conn* conn_ = nullptr;
  int64_t next_txn_ = 1;
  int64_t next_seq_ = 1;
  int64_t next_id_ = 1;
  // Live rows per table: id -> seq of the current version.
  std::map<std::string, std::map<int64_t, int64_t>> rows_;
  std::vector<Pending> unknown_;
  std::atomic<uint64_t> settled_{0};

  mutable absl::Mutex mu_;
  std::vector<CommittedTxn> committed_ ABSL_GUARDED_BY(mu_);
  uint64_t changes_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace walfeed::chaos

#endif  // WALFEED_TESTS_CHAOS_CHANGE_WRITER_H_
