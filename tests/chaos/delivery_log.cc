#include "tests/chaos/delivery_log.h"

#include <time.h>

#include <fstream>
#include <sstream>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "google/protobuf/io/coded_stream.h"
#include "google/protobuf/io/zero_copy_stream_impl_lite.h"

namespace walfeed::chaos {
namespace {

std::string ColumnText(const google::protobuf::RepeatedPtrField<walfeed::v1::ColumnValue>& row,
                       const std::string& name) {
  for (const walfeed::v1::ColumnValue& column : row) {
    if (column.name() == name) return column.text();
  }
  return "";
}

}  // namespace

std::string Signature(const walfeed::v1::ChangeEvent& event) {
  using walfeed::v1::Operation;
  switch (event.op()) {
    case walfeed::v1::OPERATION_INSERT:
      return absl::StrCat(event.table(), ":I:", ColumnText(event.new_values(), "seq"));
    case walfeed::v1::OPERATION_UPDATE:
      return absl::StrCat(event.table(), ":U:", ColumnText(event.new_values(), "seq"));
    case walfeed::v1::OPERATION_DELETE:
      // REPLICA IDENTITY FULL: the old row carries the deleted version's seq.
      return absl::StrCat(event.table(), ":D:", ColumnText(event.old_values(), "seq"));
    case walfeed::v1::OPERATION_MESSAGE:
      if (event.message().prefix() == kChangePrefix) {
        return absl::StrCat("msg:M:", event.message().content());
      }
      if (event.message().prefix() == kMarkPrefix) {
        return absl::StrCat("mark:", event.message().content());
      }
      return "-";
    default:
      return "-";
  }
}

uint64_t PayloadHash(const walfeed::v1::ChangeEvent& event) {
  std::string bytes;
  {
    google::protobuf::io::StringOutputStream stream(&bytes);
    google::protobuf::io::CodedOutputStream coded(&stream);
    coded.SetSerializationDeterministic(true);
    event.SerializeToCodedStream(&coded);
  }
  uint64_t hash = 1469598103934665603ull;
  for (unsigned char c : bytes) {
    hash ^= c;
    hash *= 1099511628211ull;
  }
  return hash;
}

int64_t MonotonicNanos() {
  timespec now;
  clock_gettime(CLOCK_MONOTONIC, &now);
  return int64_t{now.tv_sec} * 1000000000 + now.tv_nsec;
}

absl::StatusOr<std::vector<LogRecord>> ReadLog(const std::string& path) {
  std::ifstream in(path);
  if (!in) return absl::NotFoundError(absl::StrCat("cannot read ", path));
  std::stringstream buffer;
  buffer << in.rdbuf();
  const std::string text = buffer.str();
  std::vector<LogRecord> records;
  size_t start = 0;
  for (size_t end; (end = text.find('\n', start)) != std::string::npos; start = end + 1) {
    const std::string line = text.substr(start, end - start);
    std::vector<std::string> f = absl::StrSplit(line, ' ');
    LogRecord r;
    if (f.empty() || f[0].size() != 1) {
      return absl::DataLossError(absl::StrCat(path, ": bad line: ", line));
    }
    r.kind = f[0][0];
    auto need = [&](size_t n) { return f.size() >= n; };
    auto mono = [&] { return absl::SimpleAtoi(f[1], &r.mono_ns); };
    bool ok = false;
    switch (r.kind) {
      case 'P':
        ok = need(3) && mono();
        break;
      case 'S':
        ok = need(5) && mono();
        if (ok) {
          r.session = f[2];
          r.checkpoint = f[3] == "-" ? "" : f[3];
          r.start_after = f[4] == "-" ? "" : f[4];
        }
        break;
      case 'E':
        ok = need(5) && absl::SimpleHexAtoi(f[3], &r.hash);
        if (ok) {
          r.session = f[1];
          r.id = f[2];
          r.signature = f[4];
        }
        break;
      case 'A':
        ok = need(4) && mono();
        if (ok) {
          r.id = f[2];
          r.checkpoint = f[3];
        }
        break;
      case 'R':
        ok = need(3) && mono();
        if (ok) r.code = f[2];
        break;
      case 'X':
        ok = need(3) && mono();
        if (ok) {
          r.code = f[2];
          const size_t at = line.find(' ', line.find(' ', 2) + 1);
          r.message = at == std::string::npos ? "" : line.substr(at + 1);
        }
        break;
      default:
        break;
    }
    if (!ok) return absl::DataLossError(absl::StrCat(path, ": bad line: ", line));
    records.push_back(std::move(r));
  }
  return records;
}

}  // namespace walfeed::chaos
