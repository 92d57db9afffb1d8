// PgCheckpointStore against a throwaway PostgreSQL 15 cluster (GroupCommitter's
// own tests, on a fake store, are tests/replication/group_committer_test.cc).
#include "replication/pg/checkpoint_store.h"
#include "replication/group_committer.h"

#include <algorithm>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/testing/pg_cluster.h"
#include "tests/testing/status_matchers.h"

namespace walfeed::replication::pg {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;
using ::testing::Not;
using ::testing::Pair;
using ::testing::SizeIs;
using ::testing::UnorderedElementsAre;
using ::walfeed::testing::IsOk;
using ::walfeed::testing::PgCluster;
using ::walfeed::testing::StatusIs;

EventId Id(uint64_t commit_lsn, uint32_t index) { return EventId{Lsn(commit_lsn), index}; }

// ---------------------------------------------------------------------------------
// PgCheckpointStore against PostgreSQL.

TEST(PgCheckpointStoreOptionsTest, RejectsSchemasTheReaderCouldNotFilterSafely) {
  for (const std::string& schema : {std::string(), std::string(64, 'a'), std::string("pg_walfeed"),
                                    std::string("public"), std::string("information_schema")}) {
    PgCheckpointStore::Options options;
    options.conninfo = "host=/nonexistent";
    options.schema = schema;
    EXPECT_THAT(PgCheckpointStore::Open(options), StatusIs(absl::StatusCode::kInvalidArgument))
        << schema;
  }
}

class PgCheckpointStoreTest : public ::testing::Test {
 protected:
  void SetUp() override { WALFEED_START_PG_OR_SKIP(pg_, PgCluster::Options{}); }

  std::unique_ptr<PgCheckpointStore> OpenStore(std::string schema = "walfeed") {
    PgCheckpointStore::Options options;
    options.conninfo = pg_->ConnInfo();
    options.schema = std::move(schema);
    absl::StatusOr<std::unique_ptr<PgCheckpointStore>> store = PgCheckpointStore::Open(options);
    EXPECT_THAT(store, IsOk());
    return store.ok() ? std::move(store).value() : nullptr;
  }

  std::unique_ptr<PgCluster> pg_;
};

TEST_F(PgCheckpointStoreTest, LoadOfUnknownStreamIsEmpty) {
  auto store = OpenStore();
  ASSERT_NE(store, nullptr);
  absl::StatusOr<StreamCheckpoint> checkpoint = store->Load("never-written");
  ASSERT_THAT(checkpoint, IsOk());
  EXPECT_EQ(checkpoint->confirmed_lsn, Lsn::kInvalid);
  EXPECT_FALSE(checkpoint->slot_bound());
  EXPECT_THAT(checkpoint->consumers, IsEmpty());
}

// Load() also says whether the backfill tables exist in the schema: without
// them the stream's backfill runner has nothing to resume and opens no
// connection to find that out (PgStreamSource).
TEST_F(PgCheckpointStoreTest, LoadSaysWhetherTheBackfillTablesExist) {
  auto store = OpenStore();
  ASSERT_NE(store, nullptr);
  ASSERT_THAT(store->Load("s"), IsOk());
  EXPECT_FALSE(store->backfill_tables());
  ASSERT_THAT(pg_->Exec("CREATE TABLE walfeed.backfill_chunks (backfill_id bigint)"), IsOk());
  EXPECT_FALSE(store->backfill_tables()) << "as of the last Load()";
  ASSERT_THAT(store->Load("s"), IsOk());
  EXPECT_TRUE(store->backfill_tables());
}

TEST_F(PgCheckpointStoreTest, CommitThenLoadRoundTrips) {
  auto store = OpenStore();
  ASSERT_NE(store, nullptr);
  // Names that would break a naive array literal, and the extremes of an id.
  const std::vector<std::pair<std::string, EventId>> acks = {
      {"plain", Id(0x16B374D848, 0)},
      {"quote\"and\\backslash", Id(0x1, 4294967295u)},
      {"NULL", Id(0xFFFFFFFFFFFFFFFF, 7)},
      {"{braces},comma and space", Id(0xA0000000, 1)},
      {"ünïcødé", Id(0x9, 2)},
  };
  ASSERT_THAT(store->Commit("orders", acks, Lsn(0x16B374D848)), IsOk());

  absl::StatusOr<StreamCheckpoint> checkpoint = store->Load("orders");
  ASSERT_THAT(checkpoint, IsOk());
  EXPECT_EQ(checkpoint->confirmed_lsn, Lsn(0x16B374D848));
  EXPECT_FALSE(checkpoint->slot_bound());  // Confirming does not bind a slot.
  EXPECT_THAT(checkpoint->consumers, SizeIs(acks.size()));
  for (const auto& [consumer, id] : acks) EXPECT_EQ(checkpoint->consumers.at(consumer), id);

  // pg_lsn prints as X/Y and sorts as a number (0/9 < 0/A0000000 < 16/B374D848).
  EXPECT_EQ(*pg_->QueryValue("SELECT confirmed_lsn::text FROM walfeed.stream_checkpoints"),
            "16/B374D848");
  EXPECT_THAT(*pg_->Query("SELECT commit_lsn::text FROM walfeed.consumer_checkpoints "
                          "ORDER BY commit_lsn"),
              ElementsAre("0/1", "0/9", "0/A0000000", "16/B374D848", "FFFFFFFF/FFFFFFFF"));
}

TEST_F(PgCheckpointStoreTest, StoredValuesNeverMoveBackwards) {
  auto store = OpenStore();
  ASSERT_NE(store, nullptr);
  ASSERT_THAT(store->Commit("s", {{"c", Id(0x200, 5)}}, Lsn(0x300)), IsOk());
  // Lower index, lower LSN with a higher index, lower confirmed: all ignored.
  ASSERT_THAT(store->Commit("s", {{"c", Id(0x200, 4)}}, Lsn(0x2FF)), IsOk());
  ASSERT_THAT(store->Commit("s", {{"c", Id(0x1FF, 99)}}, std::nullopt), IsOk());
  absl::StatusOr<StreamCheckpoint> checkpoint = store->Load("s");
  ASSERT_THAT(checkpoint, IsOk());
  EXPECT_EQ(checkpoint->consumers.at("c"), Id(0x200, 5));
  EXPECT_EQ(checkpoint->confirmed_lsn, Lsn(0x300));

  // The same consumer twice in one Commit counts with its highest id.
  ASSERT_THAT(store->Commit("s", {{"c", Id(0x200, 9)}, {"c", Id(0x200, 6)}}, Lsn(0x400)), IsOk());
  checkpoint = store->Load("s");
  ASSERT_THAT(checkpoint, IsOk());
  EXPECT_EQ(checkpoint->consumers.at("c"), Id(0x200, 9));
  EXPECT_EQ(checkpoint->confirmed_lsn, Lsn(0x400));
}

TEST_F(PgCheckpointStoreTest, StreamsAreIsolated) {
  auto store = OpenStore();
  ASSERT_NE(store, nullptr);
  ASSERT_THAT(store->Commit("a", {{"c", Id(0x10, 1)}}, Lsn(0x10)), IsOk());
  ASSERT_THAT(store->Commit("b", {{"c", Id(0x20, 2)}, {"d", Id(0x20, 3)}}, Lsn(0x20)), IsOk());
  ASSERT_THAT(store->RemoveConsumer("a", "c"), IsOk());

  absl::StatusOr<StreamCheckpoint> a = store->Load("a");
  absl::StatusOr<StreamCheckpoint> b = store->Load("b");
  ASSERT_THAT(a, IsOk());
  ASSERT_THAT(b, IsOk());
  EXPECT_THAT(a->consumers, IsEmpty());
  EXPECT_EQ(a->confirmed_lsn, Lsn(0x10));
  EXPECT_THAT(b->consumers, UnorderedElementsAre(Pair("c", Id(0x20, 2)), Pair("d", Id(0x20, 3))));
  EXPECT_EQ(b->confirmed_lsn, Lsn(0x20));
}

TEST_F(PgCheckpointStoreTest, RemoveConsumer) {
  auto store = OpenStore();
  ASSERT_NE(store, nullptr);
  ASSERT_THAT(store->Commit("s", {{"gone", Id(0x10, 0)}, {"kept", Id(0x10, 1)}}, std::nullopt),
              IsOk());
  ASSERT_THAT(store->RemoveConsumer("s", "gone"), IsOk());
  EXPECT_THAT(store->RemoveConsumer("s", "gone"), IsOk());  // Idempotent.
  absl::StatusOr<StreamCheckpoint> checkpoint = store->Load("s");
  ASSERT_THAT(checkpoint, IsOk());
  EXPECT_THAT(checkpoint->consumers, UnorderedElementsAre(Pair("kept", Id(0x10, 1))));

  // A removed consumer that comes back starts from its new ack, however low.
  ASSERT_THAT(store->Commit("s", {{"gone", Id(0x1, 0)}}, std::nullopt), IsOk());
  checkpoint = store->Load("s");
  ASSERT_THAT(checkpoint, IsOk());
  EXPECT_EQ(checkpoint->consumers.at("gone"), Id(0x1, 0));
}

TEST_F(PgCheckpointStoreTest, DetachKeepsTheCheckpointUntilAHigherAckClearsIt) {
  auto store = OpenStore();
  ASSERT_NE(store, nullptr);
  ASSERT_THAT(store->Commit("s", {{"slow", Id(0x10, 0)}, {"fast", Id(0x20, 0)}}, std::nullopt),
              IsOk());
  ASSERT_THAT(store->DetachConsumer("s", "slow"), IsOk());
  EXPECT_THAT(store->DetachConsumer("s", "slow"), IsOk());     // Idempotent.
  EXPECT_THAT(store->DetachConsumer("s", "unknown"), IsOk());  // Nothing to mark.
  absl::StatusOr<StreamCheckpoint> checkpoint = store->Load("s");
  ASSERT_THAT(checkpoint, IsOk());
  EXPECT_EQ(checkpoint->consumers.at("slow"), Id(0x10, 0)) << "the checkpoint is kept";
  EXPECT_THAT(checkpoint->detached, UnorderedElementsAre("slow"));

  // A lower or equal ack changes nothing; a higher one (the operator's reset)
  // re-attaches it.
  ASSERT_THAT(store->Commit("s", {{"slow", Id(0x10, 0)}}, std::nullopt), IsOk());
  EXPECT_THAT(store->Load("s")->detached, UnorderedElementsAre("slow"));
  ASSERT_THAT(store->Commit("s", {{"slow", Id(0x30, 0)}}, std::nullopt), IsOk());
  checkpoint = store->Load("s");
  ASSERT_THAT(checkpoint, IsOk());
  EXPECT_TRUE(checkpoint->detached.empty());
  EXPECT_EQ(checkpoint->consumers.at("slow"), Id(0x30, 0));
}

// Tables from before the laggard policy get the column when walfeed opens them.
TEST_F(PgCheckpointStoreTest, AddsTheDetachedColumnToAnOlderTable) {
  ASSERT_NE(OpenStore(), nullptr);
  ASSERT_THAT(pg_->Exec("ALTER TABLE walfeed.consumer_checkpoints DROP COLUMN detached_at"),
              IsOk());
  auto store = OpenStore();
  ASSERT_NE(store, nullptr);
  ASSERT_THAT(store->Commit("s", {{"c", Id(0x10, 0)}}, std::nullopt), IsOk());
  ASSERT_THAT(store->DetachConsumer("s", "c"), IsOk());
  EXPECT_THAT(store->Load("s")->detached, UnorderedElementsAre("c"));
}

TEST_F(PgCheckpointStoreTest, BindSlotRecordsIdentityAndReplacesConfirmed) {
  auto store = OpenStore();
  ASSERT_NE(store, nullptr);
  ASSERT_THAT(store->Commit("s", {{"c", Id(0x50, 0)}}, Lsn(0x900)), IsOk());
  const SlotIdentity identity{18446744073709551615u, 4294967295u, "pgoutput"};
  ASSERT_THAT(store->BindSlot("s", "walfeed_s", identity, Lsn(0x800)), IsOk());

  absl::StatusOr<StreamCheckpoint> checkpoint = store->Load("s");
  ASSERT_THAT(checkpoint, IsOk());
  EXPECT_EQ(checkpoint->slot_name, "walfeed_s");
  EXPECT_EQ(checkpoint->slot_identity, identity);
  EXPECT_EQ(checkpoint->confirmed_lsn, Lsn(0x800));       // Replaced, although lower.
  EXPECT_EQ(checkpoint->consumers.at("c"), Id(0x50, 0));  // Kept.

  // Confirming keeps the binding and is cumulative again.
  ASSERT_THAT(store->Commit("s", {}, Lsn(0x850)), IsOk());
  checkpoint = store->Load("s");
  ASSERT_THAT(checkpoint, IsOk());
  EXPECT_EQ(checkpoint->slot_name, "walfeed_s");
  EXPECT_EQ(checkpoint->confirmed_lsn, Lsn(0x850));
}

TEST_F(PgCheckpointStoreTest, SchemaCreationIsIdempotentUnderConcurrentOpens) {
  constexpr int kOpeners = 4;
  std::vector<absl::StatusOr<std::unique_ptr<PgCheckpointStore>>> stores(kOpeners);
  std::vector<std::thread> threads;
  for (int i = 0; i < kOpeners; ++i) {
    threads.emplace_back([this, i, &stores] {
      PgCheckpointStore::Options options;
      options.conninfo = pg_->ConnInfo();
      options.schema = "Walfeed Concurrent";  // Quoted: exact case and a space.
      stores[i] = PgCheckpointStore::Open(options);
    });
  }
  for (std::thread& t : threads) t.join();
  for (int i = 0; i < kOpeners; ++i) {
    ASSERT_THAT(stores[i], IsOk());
    EXPECT_EQ((*stores[i])->schema(), "Walfeed Concurrent");
    EXPECT_THAT((*stores[i])->Commit("s", {{absl::StrCat("c", i), Id(0x10, i)}}, std::nullopt),
                IsOk());
  }
  absl::StatusOr<StreamCheckpoint> checkpoint = (*stores[0])->Load("s");
  ASSERT_THAT(checkpoint, IsOk());
  EXPECT_THAT(checkpoint->consumers, SizeIs(kOpeners));
  EXPECT_EQ(*pg_->QueryValue("SELECT count(*) FROM pg_tables "
                             "WHERE schemaname = 'Walfeed Concurrent'"),
            "2");
}

// A creator that is not walfeed (so does not take walfeed's advisory lock) commits
// the schema while Open is creating it: Open's insert into the catalog then fails
// with unique_violation, and Open retries instead of failing.
TEST_F(PgCheckpointStoreTest, OpenRetriesAfterLosingACreationRace) {
  absl::StatusOr<PgConnPtr> foreign = Connect(pg_->ConnInfo(), ConnectionKind::kSql);
  ASSERT_THAT(foreign, IsOk());
  ASSERT_THAT(Exec(foreign->get(), "BEGIN"), IsOk());
  ASSERT_THAT(Exec(foreign->get(), "CREATE SCHEMA walfeed_race"), IsOk());

  absl::StatusOr<std::unique_ptr<PgCheckpointStore>> store;
  std::thread opener([this, &store] {
    PgCheckpointStore::Options options;
    options.conninfo = pg_->ConnInfo();
    options.schema = "walfeed_race";
    store = PgCheckpointStore::Open(options);
  });
  // Wait (with a deadline) until Open is blocked behind the uncommitted schema.
  const absl::Time deadline = absl::Now() + absl::Seconds(30);
  bool blocked = false;
  while (!blocked && absl::Now() < deadline) {
    absl::StatusOr<std::string> waiting = pg_->QueryValue(
        "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' "
        "AND query LIKE 'CREATE SCHEMA IF NOT EXISTS%'");
    blocked = waiting.ok() && *waiting == "1";
  }
  EXPECT_TRUE(blocked) << "Open never blocked on the foreign CREATE SCHEMA";
  ASSERT_THAT(Exec(foreign->get(), "COMMIT"), IsOk());
  opener.join();

  ASSERT_THAT(store, IsOk());
  EXPECT_THAT((*store)->Commit("s", {{"c", Id(0x10, 0)}}, std::nullopt), IsOk());
}

TEST_F(PgCheckpointStoreTest, OpensWithAnExistingSchemaAndExistingTables) {
  ASSERT_THAT(pg_->Exec("CREATE SCHEMA walfeed"), IsOk());
  auto first = OpenStore();
  ASSERT_NE(first, nullptr);
  ASSERT_THAT(first->Commit("s", {{"c", Id(0x10, 0)}}, Lsn(0x10)), IsOk());
  auto second = OpenStore();  // Everything exists now.
  ASSERT_NE(second, nullptr);
  absl::StatusOr<StreamCheckpoint> checkpoint = second->Load("s");
  ASSERT_THAT(checkpoint, IsOk());
  EXPECT_EQ(checkpoint->consumers.at("c"), Id(0x10, 0));
}

// An administrator created the tables; walfeed's role may not create anything.
TEST_F(PgCheckpointStoreTest, RoleWithoutCreatePrivilegeUsesExistingTables) {
  ASSERT_NE(OpenStore(), nullptr);  // As the superuser.
  ASSERT_THAT(pg_->Exec("CREATE ROLE app LOGIN; "
                        "REVOKE CREATE ON DATABASE postgres FROM PUBLIC; "
                        "GRANT USAGE ON SCHEMA walfeed TO app; "
                        "GRANT SELECT, INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA walfeed "
                        "TO app"),
              IsOk());
  PgCheckpointStore::Options options;
  options.conninfo = pg_->ConnInfo() + " user=app";
  absl::StatusOr<std::unique_ptr<PgCheckpointStore>> store = PgCheckpointStore::Open(options);
  ASSERT_THAT(store, IsOk());
  EXPECT_THAT((*store)->Commit("s", {{"c", Id(0x10, 0)}}, Lsn(0x10)), IsOk());

  // Without the tables the same role gets a definite error that names the schema.
  options.schema = "walfeed_other";
  EXPECT_THAT(PgCheckpointStore::Open(options),
              StatusIs(absl::StatusCode::kPermissionDenied, HasSubstr("walfeed_other")));
}

TEST_F(PgCheckpointStoreTest, ErrorsNameTheOperationNotTheStatement) {
  auto store = OpenStore();
  ASSERT_NE(store, nullptr);
  ASSERT_THAT(pg_->Exec("DROP TABLE walfeed.consumer_checkpoints"), IsOk());
  absl::Status status = store->Commit("s", {{"c", Id(0x10, 0)}}, std::nullopt);
  EXPECT_THAT(status, StatusIs(absl::StatusCode::kNotFound,
                               HasSubstr("committing checkpoints of stream \"s\"")));
  EXPECT_THAT(std::string(status.message()), Not(HasSubstr("INSERT")));
  EXPECT_EQ(SqlStateOf(status), "42P01");
}

TEST_F(PgCheckpointStoreTest, SurvivesAnImmediateRestart) {
  auto store = OpenStore();
  ASSERT_NE(store, nullptr);
  ASSERT_THAT(store->Commit("s", {{"c", Id(0x10, 1)}}, Lsn(0x10)), IsOk());
  ASSERT_THAT(pg_->Restart("immediate"), IsOk());

  // The store's connection died with the server; the next call reconnects.
  EXPECT_THAT(store->Commit("s", {{"d", Id(0x20, 2)}}, Lsn(0x20)), IsOk());
  EXPECT_EQ(store->connects(), 2u);
  absl::StatusOr<StreamCheckpoint> checkpoint = store->Load("s");
  ASSERT_THAT(checkpoint, IsOk());
  EXPECT_THAT(checkpoint->consumers,
              UnorderedElementsAre(Pair("c", Id(0x10, 1)), Pair("d", Id(0x20, 2))));
  EXPECT_EQ(checkpoint->confirmed_lsn, Lsn(0x20));
}

// pgoutput does publish the store's own rows under FOR ALL TABLES; this is why the
// stream reader must drop changes to the store's schema (see the header).
TEST_F(PgCheckpointStoreTest, CheckpointWritesAreDecodedUnderForAllTables) {
  auto store = OpenStore();
  ASSERT_NE(store, nullptr);
  ASSERT_THAT(pg_->Exec("CREATE PUBLICATION everything FOR ALL TABLES"), IsOk());
  ASSERT_THAT(pg_->Exec("SELECT pg_create_logical_replication_slot('peek', 'pgoutput')"), IsOk());
  ASSERT_THAT(store->Commit("s", {{"c", Id(0x10, 0)}}, Lsn(0x10)), IsOk());

  // Relation messages ('R') naming the store's schema and table.
  EXPECT_EQ(*pg_->QueryValue(
                "SELECT count(*) FROM pg_logical_slot_peek_binary_changes('peek', NULL, NULL, "
                "'proto_version', '1', 'publication_names', 'everything') "
                "WHERE get_byte(data, 0) = ascii('R') "
                "AND position(convert_to('walfeed', 'UTF8') IN data) > 0 "
                "AND position(convert_to('consumer_checkpoints', 'UTF8') IN data) > 0"),
            "1");
  // And the changes themselves: Insert ('I') into both tables.
  EXPECT_EQ(*pg_->QueryValue(
                "SELECT count(*) FROM pg_logical_slot_peek_binary_changes('peek', NULL, NULL, "
                "'proto_version', '1', 'publication_names', 'everything') "
                "WHERE get_byte(data, 0) = ascii('I')"),
            "2");
}

// GroupCommitter over the real store: concurrent acks all become durable.
TEST_F(PgCheckpointStoreTest, GroupCommitterOverPostgres) {
  auto store = OpenStore();
  ASSERT_NE(store, nullptr);
  GroupCommitter committer(store.get());
  std::vector<std::thread> threads;
  for (int t = 0; t < 16; ++t) {
    threads.emplace_back([&committer, t] {
      for (uint32_t i = 0; i < 20; ++i) {
        EXPECT_THAT(committer.AckDurably("s", absl::StrCat("c", t), Id(0x100 + i, i)), IsOk());
      }
    });
  }
  for (std::thread& t : threads) t.join();
  EXPECT_THAT(committer.SetConfirmed("s", Lsn(0x113)), IsOk());

  absl::StatusOr<StreamCheckpoint> checkpoint = committer.Load("s");
  ASSERT_THAT(checkpoint, IsOk());
  ASSERT_THAT(checkpoint->consumers, SizeIs(16));
  for (const auto& [consumer, id] : checkpoint->consumers) EXPECT_EQ(id, Id(0x113, 19));
  EXPECT_EQ(checkpoint->confirmed_lsn, Lsn(0x113));
  EXPECT_EQ(committer.stats().acks_committed, 16u * 20u);
  EXPECT_EQ(committer.stats().failed_commits, 0u);
}

}  // namespace
}  // namespace walfeed::replication::pg
