#include "replication/relation_cache.h"

#include <utility>

#include "absl/strings/str_cat.h"

namespace walfeed::replication {
namespace {

struct BuiltinType {
  uint32_t oid;
  const char* name;
};

// Common built-in column types and their array types, as PostgreSQL's pg_type.dat
// defines them (each row: the type, then its array type "_name"). Checked against
// the pg_type catalog of a PostgreSQL 15 server; built-in OIDs never change. Looked
// up only when a Relation message is applied, so a linear scan is plenty.
// clang-format off
constexpr BuiltinType kBuiltinTypes[] = {
    {16, "bool"},           {1000, "_bool"},
    {17, "bytea"},          {1001, "_bytea"},
    {18, "char"},           {1002, "_char"},
    {19, "name"},           {1003, "_name"},
    {20, "int8"},           {1016, "_int8"},
    {21, "int2"},           {1005, "_int2"},
    {23, "int4"},           {1007, "_int4"},
    {25, "text"},           {1009, "_text"},
    {26, "oid"},            {1028, "_oid"},
    {114, "json"},          {199, "_json"},
    {142, "xml"},           {143, "_xml"},
    {600, "point"},         {1017, "_point"},
    {650, "cidr"},          {651, "_cidr"},
    {700, "float4"},        {1021, "_float4"},
    {701, "float8"},        {1022, "_float8"},
    {774, "macaddr8"},      {775, "_macaddr8"},
    {790, "money"},         {791, "_money"},
    {829, "macaddr"},       {1040, "_macaddr"},
    {869, "inet"},          {1041, "_inet"},
    {1042, "bpchar"},       {1014, "_bpchar"},
    {1043, "varchar"},      {1015, "_varchar"},
    {1082, "date"},         {1182, "_date"},
    {1083, "time"},         {1183, "_time"},
    {1114, "timestamp"},    {1115, "_timestamp"},
    {1184, "timestamptz"},  {1185, "_timestamptz"},
    {1186, "interval"},     {1187, "_interval"},
    {1266, "timetz"},       {1270, "_timetz"},
    {1560, "bit"},          {1561, "_bit"},
    {1562, "varbit"},       {1563, "_varbit"},
    {1700, "numeric"},      {1231, "_numeric"},
    {2950, "uuid"},         {2951, "_uuid"},
    {3220, "pg_lsn"},       {3221, "_pg_lsn"},
    {3614, "tsvector"},     {3643, "_tsvector"},
    {3615, "tsquery"},      {3645, "_tsquery"},
    {3802, "jsonb"},        {3807, "_jsonb"},
    {3904, "int4range"},    {3905, "_int4range"},
    {3906, "numrange"},     {3907, "_numrange"},
    {3908, "tsrange"},      {3909, "_tsrange"},
    {3910, "tstzrange"},    {3911, "_tstzrange"},
    {3912, "daterange"},    {3913, "_daterange"},
    {3926, "int8range"},    {3927, "_int8range"},
    {4072, "jsonpath"},     {4073, "_jsonpath"},
};
// clang-format on

// pgoutput writes pg_catalog as the empty string (logicalrep_write_namespace).
constexpr absl::string_view kPgCatalog = "pg_catalog";

bool IsReplicaIdentity(char c) { return c == 'd' || c == 'n' || c == 'f' || c == 'i'; }

}  // namespace

absl::string_view BuiltinTypeName(uint32_t type_oid) {
  for (const BuiltinType& type : kBuiltinTypes) {
    if (type.oid == type_oid) return type.name;
  }
  return "";
}

absl::Status RelationCache::Apply(const pgoutput::Relation& relation) {
  if (relation.relation_id == 0) {
    return absl::DataLossError(absl::StrCat("Relation message for \"", relation.relation_name,
                                            "\" has relation OID 0 (InvalidOid)"));
  }
  if (!IsReplicaIdentity(relation.replica_identity)) {
    return absl::DataLossError(absl::StrCat(
        "Relation message for relation ", relation.relation_id, " has replica identity byte ",
        static_cast<int>(static_cast<unsigned char>(relation.replica_identity)),
        "; PostgreSQL only sends 'd', 'n', 'f' or 'i'"));
  }
  auto info = std::make_shared<RelationInfo>();
  info->relation_id = relation.relation_id;
  info->schema =
      relation.namespace_name.empty() ? std::string(kPgCatalog) : relation.namespace_name;
  info->table = relation.relation_name;
  info->replica_identity = relation.replica_identity;
  info->columns.reserve(relation.columns.size());
  for (const pgoutput::RelationColumn& column : relation.columns) {
    info->columns.push_back(ColumnInfo{column.name, column.type_oid, column.type_modifier,
                                       column.is_key(), TypeName(column.type_oid)});
  }
  relations_[relation.relation_id] = std::move(info);
  return absl::OkStatus();
}

absl::Status RelationCache::Apply(const pgoutput::Type& type) {
  if (type.type_oid == 0) {
    return absl::DataLossError(
        absl::StrCat("Type message for \"", type.type_name, "\" has type OID 0 (InvalidOid)"));
  }
  types_[type.type_oid] = TypeInfo{type.namespace_name, type.type_name};
  return absl::OkStatus();
}

absl::StatusOr<std::shared_ptr<const RelationInfo>> RelationCache::Find(
    uint32_t relation_id) const {
  auto it = relations_.find(relation_id);
  if (it == relations_.end()) {
    return absl::DataLossError(
        absl::StrCat("change for relation ", relation_id,
                     " that was never described by a Relation message in this session"));
  }
  return it->second;
}

std::string RelationCache::TypeName(uint32_t type_oid) const {
  auto it = types_.find(type_oid);
  if (it != types_.end()) {
    const TypeInfo& type = it->second;
    if (type.namespace_name.empty() || type.namespace_name == kPgCatalog) return type.name;
    return absl::StrCat(type.namespace_name, ".", type.name);
  }
  return std::string(BuiltinTypeName(type_oid));
}

void RelationCache::Reset() {
  relations_.clear();
  types_.clear();
}

}  // namespace walfeed::replication
