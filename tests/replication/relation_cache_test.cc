#include "replication/relation_cache.h"

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/testing/status_matchers.h"

namespace walfeed::replication {
namespace {

using ::testing::ElementsAre;
using ::testing::Field;
using ::testing::HasSubstr;
using ::walfeed::testing::IsOk;
using ::walfeed::testing::StatusIs;

pgoutput::RelationColumn Column(std::string name, uint32_t type_oid, bool key,
                                int32_t typmod = -1) {
  pgoutput::RelationColumn column;
  column.flags = key ? 1 : 0;
  column.name = std::move(name);
  column.type_oid = type_oid;
  column.type_modifier = typmod;
  return column;
}

pgoutput::Relation Relation(uint32_t id, std::string ns, std::string name,
                            std::vector<pgoutput::RelationColumn> columns, char identity = 'd') {
  pgoutput::Relation relation;
  relation.relation_id = id;
  relation.namespace_name = std::move(ns);
  relation.relation_name = std::move(name);
  relation.replica_identity = identity;
  relation.columns = std::move(columns);
  return relation;
}

pgoutput::Type Type(uint32_t oid, std::string ns, std::string name) {
  pgoutput::Type type;
  type.type_oid = oid;
  type.namespace_name = std::move(ns);
  type.type_name = std::move(name);
  return type;
}

TEST(RelationCacheTest, AppliesRelationAndFindsIt) {
  RelationCache cache;
  ASSERT_THAT(cache.Apply(Relation(16384, "public", "accounts",
                                   {Column("id", 23, true), Column("name", 1043, false, 68),
                                    Column("balance", 1700, false, 655366)})),
              IsOk());
  absl::StatusOr<std::shared_ptr<const RelationInfo>> info = cache.Find(16384);
  ASSERT_THAT(info, IsOk());
  const RelationInfo& r = **info;
  EXPECT_EQ(r.relation_id, 16384u);
  EXPECT_EQ(r.schema, "public");
  EXPECT_EQ(r.table, "accounts");
  EXPECT_EQ(r.replica_identity, 'd');
  ASSERT_EQ(r.columns.size(), 3u);
  EXPECT_EQ(r.columns[0].name, "id");
  EXPECT_EQ(r.columns[0].type_oid, 23u);
  EXPECT_EQ(r.columns[0].type_modifier, -1);
  EXPECT_TRUE(r.columns[0].is_key);
  EXPECT_EQ(r.columns[0].type_name, "int4");
  EXPECT_EQ(r.columns[1].name, "name");
  EXPECT_EQ(r.columns[1].type_modifier, 68);  // varchar(64): typmod = 64 + 4.
  EXPECT_FALSE(r.columns[1].is_key);
  EXPECT_EQ(r.columns[1].type_name, "varchar");
  EXPECT_EQ(r.columns[2].type_name, "numeric");
  EXPECT_EQ(cache.relation_count(), 1u);
}

TEST(RelationCacheTest, EmptyNamespaceMeansPgCatalog) {
  RelationCache cache;
  ASSERT_THAT(cache.Apply(Relation(1259, "", "pg_class", {Column("oid", 26, true)})), IsOk());
  EXPECT_EQ((*cache.Find(1259))->schema, "pg_catalog");
}

TEST(RelationCacheTest, KeepsEveryColumnFlaggedUnderReplicaIdentityFull) {
  // With REPLICA IDENTITY FULL PostgreSQL flags every column as key; the cache reports
  // what was sent and does not reinterpret it as a primary key.
  RelationCache cache;
  ASSERT_THAT(cache.Apply(Relation(16400, "public", "tfull",
                                   {Column("a", 23, true), Column("b", 25, true)}, 'f')),
              IsOk());
  const RelationInfo& r = **cache.Find(16400);
  EXPECT_EQ(r.replica_identity, 'f');
  EXPECT_THAT(r.columns,
              ElementsAre(Field(&ColumnInfo::is_key, true), Field(&ColumnInfo::is_key, true)));
}

TEST(RelationCacheTest, UnknownRelationIsDataLossNamingTheOid) {
  RelationCache cache;
  EXPECT_THAT(cache.Find(16384),
              StatusIs(absl::StatusCode::kDataLoss,
                       HasSubstr("change for relation 16384 that was never described by "
                                 "a Relation message")));
}

TEST(RelationCacheTest, ReplacementLeavesEarlierDescriptionIntact) {
  // ALTER TABLE ... DROP COLUMN b, ADD COLUMN d: the new Relation replaces the entry,
  // but whoever holds the old description still sees the old three columns.
  RelationCache cache;
  ASSERT_THAT(cache.Apply(Relation(
                  16384, "public", "t",
                  {Column("a", 23, true), Column("b", 25, false), Column("c", 25, false)})),
              IsOk());
  std::shared_ptr<const RelationInfo> before = *cache.Find(16384);

  ASSERT_THAT(cache.Apply(Relation(16384, "public", "t",
                                   {Column("a", 23, true), Column("c", 25, false),
                                    Column("d", 3802, false), Column("e", 16, false)})),
              IsOk());
  std::shared_ptr<const RelationInfo> after = *cache.Find(16384);

  EXPECT_NE(before.get(), after.get());
  EXPECT_THAT(before->columns,
              ElementsAre(Field(&ColumnInfo::name, "a"), Field(&ColumnInfo::name, "b"),
                          Field(&ColumnInfo::name, "c")));
  EXPECT_THAT(after->columns,
              ElementsAre(Field(&ColumnInfo::name, "a"), Field(&ColumnInfo::name, "c"),
                          Field(&ColumnInfo::name, "d"), Field(&ColumnInfo::name, "e")));
  EXPECT_EQ(cache.relation_count(), 1u);
}

TEST(RelationCacheTest, RenameReplacesNames) {
  RelationCache cache;
  ASSERT_THAT(cache.Apply(Relation(16384, "public", "t", {Column("a", 23, true)})), IsOk());
  ASSERT_THAT(cache.Apply(Relation(16384, "archive", "t_old", {Column("a2", 23, true)})), IsOk());
  const RelationInfo& r = **cache.Find(16384);
  EXPECT_EQ(r.schema, "archive");
  EXPECT_EQ(r.table, "t_old");
  EXPECT_EQ(r.columns[0].name, "a2");
}

TEST(RelationCacheTest, RelationWithNoColumnsIsAccepted) {
  // CREATE TABLE t () is legal, and a column list can leave nothing but the key.
  RelationCache cache;
  ASSERT_THAT(cache.Apply(Relation(16500, "public", "empty", {}, 'n')), IsOk());
  EXPECT_TRUE((*cache.Find(16500))->columns.empty());
}

TEST(RelationCacheTest, RejectsInvalidOidAndReplicaIdentity) {
  RelationCache cache;
  EXPECT_THAT(cache.Apply(Relation(0, "public", "t", {})),
              StatusIs(absl::StatusCode::kDataLoss, HasSubstr("relation OID 0")));
  EXPECT_THAT(cache.Apply(Relation(16384, "public", "t", {}, 'x')),
              StatusIs(absl::StatusCode::kDataLoss, HasSubstr("replica identity byte 120")));
  EXPECT_THAT(cache.Apply(Type(0, "public", "mood")),
              StatusIs(absl::StatusCode::kDataLoss, HasSubstr("type OID 0")));
  EXPECT_EQ(cache.relation_count(), 0u);
  EXPECT_EQ(cache.type_count(), 0u);
}

TEST(RelationCacheTest, ReplicaIdentityLettersPostgresSends) {
  RelationCache cache;
  uint32_t oid = 20000;
  for (char identity : {'d', 'n', 'f', 'i'}) {
    EXPECT_THAT(cache.Apply(Relation(++oid, "public", "t", {}, identity)), IsOk()) << identity;
    EXPECT_EQ((*cache.Find(oid))->replica_identity, identity);
  }
}

TEST(RelationCacheTest, TypeNamesFromTypeMessages) {
  RelationCache cache;
  ASSERT_THAT(cache.Apply(Type(16390, "public", "mood")), IsOk());
  ASSERT_THAT(cache.Apply(Type(16391, "public", "_mood")), IsOk());
  // A domain reports its base type's name and namespace ("" = pg_catalog).
  ASSERT_THAT(cache.Apply(Type(16418, "", "int4")), IsOk());
  ASSERT_THAT(cache.Apply(Type(16420, "pg_catalog", "text")), IsOk());
  ASSERT_THAT(cache.Apply(Type(16430, "my schema", "Point3D")), IsOk());
  EXPECT_EQ(cache.TypeName(16390), "public.mood");
  EXPECT_EQ(cache.TypeName(16391), "public._mood");
  EXPECT_EQ(cache.TypeName(16418), "int4");
  EXPECT_EQ(cache.TypeName(16420), "text");
  EXPECT_EQ(cache.TypeName(16430), "my schema.Point3D");
  EXPECT_EQ(cache.type_count(), 5u);

  // A later Type message for the same OID (ALTER TYPE ... RENAME) wins.
  ASSERT_THAT(cache.Apply(Type(16390, "public", "feeling")), IsOk());
  EXPECT_EQ(cache.TypeName(16390), "public.feeling");
}

TEST(RelationCacheTest, ColumnTypeNameIsResolvedWhenTheRelationArrives) {
  // PostgreSQL sends Type before the Relation that uses it.
  RelationCache cache;
  ASSERT_THAT(cache.Apply(Type(16390, "public", "mood")), IsOk());
  ASSERT_THAT(cache.Apply(Relation(
                  16384, "public", "t",
                  {Column("id", 20, true), Column("m", 16390, false), Column("x", 99999, false)})),
              IsOk());
  const RelationInfo& r = **cache.Find(16384);
  EXPECT_EQ(r.columns[0].type_name, "int8");
  EXPECT_EQ(r.columns[1].type_name, "public.mood");
  EXPECT_EQ(r.columns[2].type_name, "");  // Unknown: the caller may look it up.
}

TEST(RelationCacheTest, UnknownTypeOidHasNoName) {
  RelationCache cache;
  EXPECT_EQ(cache.TypeName(0), "");
  EXPECT_EQ(cache.TypeName(22), "");     // int2vector: not in the table.
  EXPECT_EQ(cache.TypeName(16390), "");  // A user type nobody described.
}

TEST(RelationCacheTest, BuiltinTypeNamesMatchPostgresCatalog) {
  // Captured from a PostgreSQL 15 server's pg_type (and identical in pg_type.dat):
  //   SELECT oid, typname FROM pg_type WHERE typname IN (<the types below>)
  //   UNION ALL SELECT t.oid, t.typname FROM pg_type t
  //     JOIN pg_type e ON e.typarray = t.oid WHERE e.typname IN (<same>) ORDER BY 1;
  // clang-format off
  const std::vector<std::pair<uint32_t, std::string>> kCatalog = {
      {16, "bool"},          {17, "bytea"},         {18, "char"},
      {19, "name"},          {20, "int8"},          {21, "int2"},
      {23, "int4"},          {25, "text"},          {26, "oid"},
      {114, "json"},         {142, "xml"},          {143, "_xml"},
      {199, "_json"},        {600, "point"},        {650, "cidr"},
      {651, "_cidr"},        {700, "float4"},       {701, "float8"},
      {774, "macaddr8"},     {775, "_macaddr8"},    {790, "money"},
      {791, "_money"},       {829, "macaddr"},      {869, "inet"},
      {1000, "_bool"},       {1001, "_bytea"},      {1002, "_char"},
      {1003, "_name"},       {1005, "_int2"},       {1007, "_int4"},
      {1009, "_text"},       {1014, "_bpchar"},     {1015, "_varchar"},
      {1016, "_int8"},       {1017, "_point"},      {1021, "_float4"},
      {1022, "_float8"},     {1028, "_oid"},        {1040, "_macaddr"},
      {1041, "_inet"},       {1042, "bpchar"},      {1043, "varchar"},
      {1082, "date"},        {1083, "time"},        {1114, "timestamp"},
      {1115, "_timestamp"},  {1182, "_date"},       {1183, "_time"},
      {1184, "timestamptz"}, {1185, "_timestamptz"}, {1186, "interval"},
      {1187, "_interval"},   {1231, "_numeric"},    {1266, "timetz"},
      {1270, "_timetz"},     {1560, "bit"},         {1561, "_bit"},
      {1562, "varbit"},      {1563, "_varbit"},     {1700, "numeric"},
      {2950, "uuid"},        {2951, "_uuid"},       {3220, "pg_lsn"},
      {3221, "_pg_lsn"},     {3614, "tsvector"},    {3615, "tsquery"},
      {3643, "_tsvector"},   {3645, "_tsquery"},    {3802, "jsonb"},
      {3807, "_jsonb"},      {3904, "int4range"},   {3905, "_int4range"},
      {3906, "numrange"},    {3907, "_numrange"},   {3908, "tsrange"},
      {3909, "_tsrange"},    {3910, "tstzrange"},   {3911, "_tstzrange"},
      {3912, "daterange"},   {3913, "_daterange"},  {3926, "int8range"},
      {3927, "_int8range"},  {4072, "jsonpath"},    {4073, "_jsonpath"},
  };
  // clang-format on
  RelationCache cache;
  for (const auto& [oid, name] : kCatalog) {
    EXPECT_EQ(BuiltinTypeName(oid), name) << oid;
    EXPECT_EQ(cache.TypeName(oid), name) << oid;
  }
}

TEST(RelationCacheTest, ResetForgetsRelationsAndTypes) {
  RelationCache cache;
  ASSERT_THAT(cache.Apply(Type(16390, "public", "mood")), IsOk());
  ASSERT_THAT(cache.Apply(Relation(16384, "public", "t", {Column("m", 16390, false)})), IsOk());
  std::shared_ptr<const RelationInfo> held = *cache.Find(16384);

  cache.Reset();

  EXPECT_EQ(cache.relation_count(), 0u);
  EXPECT_EQ(cache.type_count(), 0u);
  EXPECT_THAT(cache.Find(16384), StatusIs(absl::StatusCode::kDataLoss));
  EXPECT_EQ(cache.TypeName(16390), "");
  EXPECT_EQ(held->table, "t");  // Descriptions already handed out stay valid.
  EXPECT_EQ(held->columns[0].type_name, "public.mood");
}

}  // namespace
}  // namespace walfeed::replication
