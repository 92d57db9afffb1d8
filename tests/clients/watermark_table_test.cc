// The walfeed_watermark table is defined in three places that must agree, so a
// C++ and a Python consumer can share it and readers of the docs build the same:
//   - walfeed::PgWatermark::Open (client/src/pg_watermark.cc): the reference;
//   - client/python/walfeed/watermark.py, its Python twin;
//   - docs/clients.md, "The idempotent consumer", between the markers
//     <!-- watermark-table --> and <!-- /watermark-table -->.
// Each creates the table in a database of its own in a throwaway PostgreSQL 15;
// then the columns (in order: name, type, NOT NULL, default) and the constraints
// (primary key, checks) PostgreSQL reports for them must be identical.
#include <stdio.h>
#include <sys/wait.h>

#include <cstring>
#include <fstream>
#include <memory>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include <libpq-fe.h>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/testing/pg_cluster.h"
#include "tests/testing/status_matchers.h"
#include "walfeed/pg_watermark.h"

namespace walfeed {
namespace {

using ::testing::Contains;
using ::walfeed::testing::IsOk;
using ::walfeed::testing::PgCluster;

constexpr char kBegin[] = "<!-- watermark-table -->";
constexpr char kEnd[] = "<!-- /watermark-table -->";

// The SQL docs/clients.md shows between the markers (the fence lines dropped).
absl::StatusOr<std::string> DocsCreateTable() {
  const std::string path = absl::StrCat(WALFEED_SOURCE_DIR, "/docs/clients.md");
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  const std::string doc = text.str();
  const size_t begin = doc.find(kBegin);
  const size_t end = doc.find(kEnd);
  if (begin == std::string::npos || end == std::string::npos || end < begin) {
    return absl::NotFoundError(absl::StrCat(path, " lacks ", kBegin, " ... ", kEnd));
  }
  std::string sql;
  for (absl::string_view line : absl::StrSplit(
           absl::string_view(doc).substr(begin + strlen(kBegin), end - begin - strlen(kBegin)),
           '\n')) {
    if (!absl::StartsWith(line, "```")) absl::StrAppend(&sql, line, "\n");
  }
  return sql;
}

// Just enough of a walfeed::SqlConnection over libpq for PgWatermark::Open.
class Libpq : public SqlConnection {
 public:
  explicit Libpq(const std::string& conninfo) : conn_(PQconnectdb(conninfo.c_str())) {}
  ~Libpq() override { PQfinish(conn_); }
  Libpq(const Libpq&) = delete;
  Libpq& operator=(const Libpq&) = delete;

  absl::StatusOr<std::vector<Row>> Execute(const std::string& sql,
                                           const std::vector<std::string>& params) override {
    std::vector<const char*> values;
    for (const std::string& p : params) values.push_back(p.c_str());
    PGresult* result = PQexecParams(conn_, sql.c_str(), static_cast<int>(values.size()), nullptr,
                                    values.data(), nullptr, nullptr, 0);
    absl::StatusOr<std::vector<Row>> out;
    const ExecStatusType status = PQresultStatus(result);
    if (status == PGRES_COMMAND_OK || status == PGRES_TUPLES_OK) {
      std::vector<Row> rows(PQntuples(result));
      for (int r = 0; r < PQntuples(result); ++r) {
        for (int c = 0; c < PQnfields(result); ++c) {
          rows[r].push_back(PQgetisnull(result, r, c)
                                ? std::nullopt
                                : std::optional<std::string>(PQgetvalue(result, r, c)));
        }
      }
      out = std::move(rows);
    } else {
      out = absl::InternalError(PQerrorMessage(conn_));
    }
    PQclear(result);
    return out;
  }
  bool InTransaction() override { return PQtransactionStatus(conn_) == PQTRANS_INTRANS; }

 private:
  PGconn* conn_;
};

// Runs client/python/walfeed/watermark.py's Watermark(...) against `conninfo`, which
// creates the table; the script's output on failure.
absl::Status CreateWithPython(const std::string& conninfo) {
  // The conninfo holds no single quote, so it can be quoted for the shell as is.
  const std::string command = absl::StrCat(
      "/usr/bin/python3 -c 'import sys, psycopg2; sys.path.insert(0, sys.argv[1]); "
      "import watermark; watermark.Watermark(psycopg2.connect(sys.argv[2]), \"s\", \"c\")' '",
      WALFEED_SOURCE_DIR, "/client/python/walfeed' '", conninfo, "' 2>&1");
  FILE* pipe = popen(command.c_str(), "r");
  if (pipe == nullptr) return absl::InternalError("popen failed");
  std::string output;
  char buffer[4096];
  for (size_t n; (n = fread(buffer, 1, sizeof(buffer), pipe)) > 0;) output.append(buffer, n);
  const int status = pclose(pipe);
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
    return absl::InternalError(absl::StrCat("watermark.py failed: ", output));
  }
  return absl::OkStatus();
}

// The table as PostgreSQL sees it: one line per column, then one per constraint.
std::vector<std::string> Describe(const PgCluster& pg, const std::string& db) {
  absl::StatusOr<std::vector<std::string>> columns = pg.Query(
      "SELECT a.attname || ' ' || format_type(a.atttypid, a.atttypmod)"
      "  || CASE WHEN a.attnotnull THEN ' NOT NULL' ELSE '' END"
      "  || coalesce(' DEFAULT ' || pg_get_expr(d.adbin, d.adrelid), '')"
      " FROM pg_attribute a"
      " LEFT JOIN pg_attrdef d ON d.adrelid = a.attrelid AND d.adnum = a.attnum"
      " WHERE a.attrelid = 'public.walfeed_watermark'::regclass"
      "   AND a.attnum > 0 AND NOT a.attisdropped ORDER BY a.attnum",
      db);
  absl::StatusOr<std::vector<std::string>> constraints = pg.Query(
      "SELECT conname || ': ' || pg_get_constraintdef(oid) FROM pg_constraint"
      " WHERE conrelid = 'public.walfeed_watermark'::regclass ORDER BY conname",
      db);
  EXPECT_THAT(columns, IsOk()) << db;
  EXPECT_THAT(constraints, IsOk()) << db;
  if (!columns.ok() || !constraints.ok()) return {};
  std::vector<std::string> lines = *columns;
  lines.insert(lines.end(), constraints->begin(), constraints->end());
  return lines;
}

TEST(WatermarkTableTest, DocsPythonAndCppCreateTheSameTable) {
  std::unique_ptr<PgCluster> pg;
  WALFEED_START_PG_OR_SKIP(pg, PgCluster::Options{});
  ASSERT_THAT(pg->Exec("CREATE DATABASE from_cpp"), IsOk());
  ASSERT_THAT(pg->Exec("CREATE DATABASE from_python"), IsOk());
  ASSERT_THAT(pg->Exec("CREATE DATABASE from_docs"), IsOk());

  Libpq cpp(pg->ConnInfo("from_cpp"));
  ASSERT_THAT(PgWatermark::Open(cpp, {"walfeed_watermark", "s", "c"}), IsOk());
  ASSERT_THAT(CreateWithPython(pg->ConnInfo("from_python")), IsOk());
  absl::StatusOr<std::string> docs_sql = DocsCreateTable();
  ASSERT_THAT(docs_sql, IsOk());
  ASSERT_THAT(pg->Exec(*docs_sql, "from_docs"), IsOk()) << *docs_sql;

  const std::vector<std::string> reference = Describe(*pg, "from_cpp");
  // The reference was read: the key every watermark lookup relies on is there.
  EXPECT_THAT(reference, Contains("walfeed_watermark_pkey: PRIMARY KEY (consumer, stream)"));
  EXPECT_EQ(Describe(*pg, "from_python"), reference)
      << "client/python/walfeed/watermark.py differs";
  EXPECT_EQ(Describe(*pg, "from_docs"), reference) << "docs/clients.md differs";
}

}  // namespace
}  // namespace walfeed
