// docs/clients.md's table of error reasons (between <!-- error-reasons --> and
// <!-- /error-reasons -->) against its sources:
//   - the ErrorReason enum in proto/walfeed/v1/change_stream.proto: the same
//     reasons in the same order (ERROR_REASON_UNSPECIFIED, never sent, aside),
//     and, where a value's comment starts with its status codes ("ABORTED:",
//     "UNAVAILABLE, retryable:"), the same codes;
//   - the server's RetryDelayFor (server/error_details.h): a reason is retried
//     in the table ("after 1 s", "at once (0 s)") exactly when the server sends
//     a RetryInfo with it, and with that delay; "retryable" in the proto likewise.
#include <fstream>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "absl/time/time.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "server/error_details.h"

namespace walfeed::server {
namespace {

std::string ReadSource(const std::string& relative) {
  std::ifstream in(absl::StrCat(WALFEED_SOURCE_DIR, "/", relative));
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

struct ProtoReason {
  std::string name;       // Without ERROR_REASON_.
  std::string codes;      // "UNAVAILABLE", "DATA_LOSS or FAILED_PRECONDITION"; "" if not stated.
  bool retryable = false;  // The comment says "retryable".
};

// Whether `text` is a list of status codes: "A", "A or B", "A, B or C".
bool IsCodeList(absl::string_view text) {
  if (text.empty()) return false;
  for (absl::string_view part : absl::StrSplit(absl::StrReplaceAll(text, {{" or ", ", "}}), ", ")) {
    if (part.empty()) return false;
    for (char c : part) {
      if (!absl::ascii_isupper(static_cast<unsigned char>(c)) && c != '_') return false;
    }
  }
  return true;
}

// The enum's values in order, each with what the first line of its comment says.
std::vector<ProtoReason> ProtoReasons() {
  const std::string proto = ReadSource("proto/walfeed/v1/change_stream.proto");
  const size_t begin = proto.find("enum ErrorReason {");
  const size_t end = proto.find("\n}", begin);
  std::vector<ProtoReason> reasons;
  std::string first_comment_line;
  bool in_comment = false;
  for (absl::string_view line :
       absl::StrSplit(absl::string_view(proto).substr(begin, end - begin), '\n')) {
    line = absl::StripAsciiWhitespace(line);
    if (absl::ConsumePrefix(&line, "// ")) {
      if (!in_comment) first_comment_line = std::string(line);
      in_comment = true;
      continue;
    }
    in_comment = false;
    if (!absl::ConsumePrefix(&line, "ERROR_REASON_")) continue;
    ProtoReason reason;
    reason.name = std::string(line.substr(0, line.find(' ')));
    absl::string_view head = first_comment_line;
    head = head.substr(0, head.find(':'));
    reason.retryable = absl::ConsumeSuffix(&head, ", retryable");
    if (IsCodeList(head)) reason.codes = std::string(head);
    if (reason.name != "UNSPECIFIED") reasons.push_back(reason);
  }
  return reasons;
}

struct DocRow {
  std::string name, codes, retry;
};

// The table's rows, backticks dropped.
std::vector<DocRow> DocRows() {
  const std::string doc = ReadSource("docs/clients.md");
  const size_t begin = doc.find("<!-- error-reasons -->");
  const size_t end = doc.find("<!-- /error-reasons -->");
  EXPECT_NE(begin, std::string::npos) << "docs/clients.md lacks <!-- error-reasons -->";
  EXPECT_NE(end, std::string::npos) << "docs/clients.md lacks <!-- /error-reasons -->";
  std::vector<DocRow> rows;
  if (begin == std::string::npos || end == std::string::npos) return rows;
  for (absl::string_view line :
       absl::StrSplit(absl::string_view(doc).substr(begin, end - begin), '\n')) {
    if (!absl::StartsWith(line, "| `")) continue;  // Header and separator rows.
    std::vector<std::string> cells = absl::StrSplit(line, '|');
    if (cells.size() < 5) continue;
    for (std::string& cell : cells) {
      cell = absl::StrReplaceAll(absl::StripAsciiWhitespace(cell), {{"`", ""}});
    }
    rows.push_back(DocRow{cells[1], cells[2], cells[3]});
  }
  return rows;
}

// How the table says the server's retry delay.
std::string RetryCell(std::optional<absl::Duration> delay) {
  if (!delay) return "no";
  if (*delay == absl::ZeroDuration()) return "at once (0 s)";
  if (*delay < absl::Seconds(1)) return absl::StrCat("after ", absl::ToInt64Milliseconds(*delay), " ms");
  return absl::StrCat("after ", absl::ToInt64Seconds(*delay), " s");
}

TEST(ErrorReasonsDocTest, TheTableMatchesTheProtoAndTheServer) {
  const std::vector<ProtoReason> proto = ProtoReasons();
  const std::vector<DocRow> doc = DocRows();
  ASSERT_GT(proto.size(), 20u) << "the ErrorReason enum was not found";
  std::vector<std::string> proto_names;
  std::vector<std::string> doc_names;
  for (const ProtoReason& reason : proto) proto_names.push_back(reason.name);
  for (const DocRow& row : doc) doc_names.push_back(row.name);
  ASSERT_EQ(doc_names, proto_names) << "docs/clients.md's reasons differ from the enum's";
  for (size_t i = 0; i < proto.size(); ++i) {
    const std::string& name = proto[i].name;
    if (!proto[i].codes.empty()) {
      EXPECT_EQ(doc[i].codes, proto[i].codes) << name;
    }
    const std::optional<absl::Duration> delay = RetryDelayFor(name);
    EXPECT_EQ(doc[i].retry, RetryCell(delay)) << name;
    EXPECT_EQ(proto[i].retryable, delay.has_value()) << name << ": the proto's comment";
  }
}

}  // namespace
}  // namespace walfeed::server
