#include "tests/chaos/slot_loss.h"

#include <filesystem>
#include <fstream>
#include <iostream>
#include <memory>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "tests/chaos/change_writer.h"
#include "tests/chaos/delivery_log.h"
#include "tests/chaos/harness.h"
#include "tests/testing/pg_cluster.h"
#include "tests/testing/wait.h"

namespace walfeed::chaos {
namespace {

using ::walfeed::testing::PgCluster;
using ::walfeed::testing::WaitUntil;

constexpr absl::Duration kDeadline = absl::Seconds(60);

class Scenario {
 public:
  Scenario(std::string name, uint64_t seed, std::string dir)
      : name_(std::move(name)), seed_(seed), dir_(std::move(dir)) {}

  std::vector<std::string> failures;

  void Fail(const std::string& what) { failures.push_back(absl::StrCat(name_, ": ", what)); }

  bool Start(const PgCluster::Options& options) {
    absl::StatusOr<std::unique_ptr<PgCluster>> pg = PgCluster::Start(options);
    if (!pg.ok()) return Fail(pg.status().ToString()), false;
    pg_ = std::move(*pg);
    if (absl::Status s = CreateSchema(pg_->ConnInfo()); !s.ok()) return Fail(s.ToString()), false;
    config_ = absl::StrCat(dir_, "/", name_, ".yaml");
    std::ofstream(config_) << ServerYaml(pg_->ConnInfo(), dir_ + "/state");
    return StartServer();
  }

  bool StartServer() {
    absl::StatusOr<std::unique_ptr<ServerHandle>> server =
        ServerHandle::Start(config_, absl::StrCat(dir_, "/", name_, "-server-", ++servers_, ".log"));
    if (!server.ok()) return Fail(server.status().ToString()), false;
    server_ = std::move(*server);
    return true;
  }

  std::unique_ptr<ConsumerHandle> Consumer(const std::string& consumer, std::string* log) {
    ConsumerFlags flags;
    flags.server = absl::StrCat("127.0.0.1:", server_->port());
    flags.stream = kStream;
    flags.consumer = consumer;
    flags.log = *log = absl::StrCat(dir_, "/", name_, "-", consumer, "-", ++consumers_, ".log");
    flags.seed = seed_;
    flags.ack_events = 1;
    flags.max_unacked = 1000;
    absl::StatusOr<std::unique_ptr<ConsumerHandle>> handle =
        ConsumerHandle::Start(flags, *log + ".stderr");
    if (!handle.ok()) return Fail(handle.status().ToString()), nullptr;
    return std::move(*handle);
  }

  void Commit(int first, int count) {
    const absl::Status s = pg_->Exec(absl::StrCat(
        "INSERT INTO chaos_a SELECT g, g, 'x' FROM generate_series(", first, ", ",
        first + count - 1, ") g"));
    if (!s.ok()) Fail(s.ToString());
  }

  bool Mark(ConsumerHandle& consumer, int n) {
    if (!pg_->Exec(absl::StrCat("SELECT pg_logical_emit_message(true, '", kMarkPrefix, "', '", n,
                                "')"))
             .ok() ||
        !consumer.WaitForMark(n, kDeadline)) {
      return Fail(absl::StrCat("the consumer never reached marker ", n)), false;
    }
    return true;
  }

  // The consumer must end with DATA_LOSS naming the slot and `remedy`, having
  // been delivered nothing with a seq of `first_after` or more.
  void ExpectDataLoss(ConsumerHandle& consumer, const std::string& log, int first_after,
                      const std::string& remedy) {
    const std::optional<std::string> code = consumer.WaitForExitLine(kDeadline);
    if (code != "DATA_LOSS") {
      return Fail(absl::StrCat("subscriber ended ", code.value_or("(not at all)"),
                               ", not DATA_LOSS"));
    }
    absl::StatusOr<std::vector<LogRecord>> records = ReadLog(log);
    if (!records.ok()) return Fail(records.status().ToString());
    for (const LogRecord& r : *records) {
      int seq = 0;
      if (r.kind == 'E' && absl::StartsWith(r.signature, "chaos_a:I:") &&
          absl::SimpleAtoi(r.signature.substr(10), &seq) && seq >= first_after) {
        Fail(absl::StrCat("delivered ", r.signature, ", committed after the slot was lost"));
      }
      if (r.kind == 'X' && (!absl::StrContains(r.message, kSlot) ||
                            !absl::StrContains(r.message, remedy))) {
        Fail(absl::StrCat("DATA_LOSS without the slot or the remedy '", remedy, "': ", r.message));
      }
    }
  }

  void ExpectNoSlot() {
    absl::StatusOr<std::string> n = pg_->QueryValue("SELECT count(*) FROM pg_replication_slots");
    if (!n.ok() || *n != "0") Fail("the slot was recreated");
  }

  std::string name_;
  uint64_t seed_;
  std::string dir_;
  std::string config_;
  std::unique_ptr<PgCluster> pg_;
  std::unique_ptr<ServerHandle> server_;
  int servers_ = 0;
  int consumers_ = 0;
};

std::vector<std::string> Dropped(uint64_t seed, const std::string& dir) {
  Scenario s("slot-dropped", seed, dir);
  if (!s.Start({})) return s.failures;
  std::string log;
  std::unique_ptr<ConsumerHandle> live = s.Consumer("c", &log);
  if (!live) return s.failures;
  // A consumer starts at the oldest event still held: commit once it is live.
  if (!live->WaitForSessions(1, kDeadline)) return s.Fail("never subscribed"), s.failures;
  s.Commit(1, 100);
  if (!s.Mark(*live, 0)) return s.failures;
  // The walsender holds the slot: end it, and drop the slot once it is free.
  const bool dropped = WaitUntil(
      [&] {
        (void)s.pg_->Exec(absl::StrCat(
            "SELECT pg_terminate_backend(active_pid) FROM pg_replication_slots WHERE slot_name = '",
            kSlot, "' AND active_pid IS NOT NULL"));
        return s.pg_->Exec(absl::StrCat("SELECT pg_drop_replication_slot('", kSlot, "')")).ok();
      },
      kDeadline, absl::Milliseconds(5));
  if (!dropped) return s.Fail("could not drop the slot"), s.failures;
  s.Commit(1000, 100);  // Never to be delivered: there is no slot.
  s.ExpectDataLoss(*live, log, 1000, "DELETE FROM");
  std::string fresh_log;
  std::unique_ptr<ConsumerHandle> fresh = s.Consumer("c", &fresh_log);
  if (fresh) s.ExpectDataLoss(*fresh, fresh_log, 1, "DELETE FROM");
  std::unique_ptr<ConsumerHandle> other = s.Consumer("newcomer", &fresh_log);
  if (other) s.ExpectDataLoss(*other, fresh_log, 1, "DELETE FROM");
  s.ExpectNoSlot();
  return s.failures;
}

std::vector<std::string> Invalidated(uint64_t seed, const std::string& dir) {
  Scenario s("slot-invalidated", seed, dir);
  PgCluster::Options options;
  options.settings["max_slot_wal_keep_size"] = "1MB";
  options.settings["wal_keep_size"] = "0";
  if (!s.Start(options)) return s.failures;
  std::string log;
  std::unique_ptr<ConsumerHandle> live = s.Consumer("c", &log);
  if (!live) return s.failures;
  if (!live->WaitForSessions(1, kDeadline)) return s.Fail("never subscribed"), s.failures;
  // Delivered but never acked: the slot must keep this WAL, and cannot.
  (void)live->process().WriteLine("stall 600000");
  s.Commit(1, 100);
  if (!live->WaitForHandled(1, kDeadline)) return s.Fail("nothing delivered"), s.failures;
  s.server_->process().Kill();
  live->process().Kill();
  s.Commit(1000, 100);
  const bool lost = WaitUntil(
      [&] {
        (void)s.pg_->Exec(
            "INSERT INTO chaos_filler (pad) SELECT repeat('w', 1000) FROM generate_series(1, "
            "2000); SELECT pg_switch_wal(); CHECKPOINT");
        absl::StatusOr<std::string> status = s.pg_->QueryValue(absl::StrCat(
            "SELECT wal_status FROM pg_replication_slots WHERE slot_name = '", kSlot, "'"));
        return status.ok() && *status == "lost";
      },
      kDeadline, absl::Milliseconds(1));
  if (!lost) return s.Fail("the slot was never invalidated"), s.failures;
  if (!s.StartServer()) return s.failures;
  std::unique_ptr<ConsumerHandle> again = s.Consumer("c", &log);
  if (again) s.ExpectDataLoss(*again, log, 1, "max_slot_wal_keep_size");
  std::string other_log;
  std::unique_ptr<ConsumerHandle> other = s.Consumer("newcomer", &other_log);
  if (other) s.ExpectDataLoss(*other, other_log, 1, "max_slot_wal_keep_size");
  return s.failures;
}

}  // namespace

std::vector<std::string> RunSlotLossScenarios(uint64_t seed, const std::string& dir) {
  std::vector<std::string> failures = Dropped(seed, dir);
  std::cout << "scenario slot-dropped: " << (failures.empty() ? "DATA_LOSS as required" : "FAILED")
            << std::endl;
  std::vector<std::string> more = Invalidated(seed, dir);
  std::cout << "scenario slot-invalidated: " << (more.empty() ? "DATA_LOSS as required" : "FAILED")
            << std::endl;
  failures.insert(failures.end(), more.begin(), more.end());
  return failures;
}

}  // namespace walfeed::chaos
