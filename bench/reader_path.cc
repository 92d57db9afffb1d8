// reader_path: what the reader thread spends per row event between the
// walsender's pgoutput bytes and the event's stored bytes: pgoutput::Decode,
// the TransactionAssembler, and EventEncoder::Encode (the default full text
// form), the part of walfeed-server's CPU per event that no socket, thread or
// client is in. Two shapes, as in the peer harness's W1 and W3: an INSERT of a
// 3-column row, and an UPDATE of a REPLICA IDENTITY FULL 4-column row (old and
// new tuple), 10 events per transaction, Begin and Commit included.
//
//   build/bench/reader_path [--events N] [--reps R]
//
// Prints ns/event, the median of R repetitions per shape, interleaved.
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "replication/pgoutput.h"
#include "replication/transaction_assembler.h"
#include "server/event_encoder.h"

namespace {

using walfeed::replication::TransactionAssembler;
namespace pgoutput = walfeed::replication::pgoutput;

// Big-endian fields, as the walsender's pq_send* functions write them.
class Writer {
 public:
  Writer& U8(uint8_t v) {
    bytes_.push_back(v);
    return *this;
  }
  Writer& I16(uint16_t v) { return U8(v >> 8).U8(v & 0xff); }
  Writer& I32(uint32_t v) { return I16(v >> 16).I16(v & 0xffff); }
  Writer& I64(uint64_t v) { return I32(v >> 32).I32(v & 0xffffffffu); }
  Writer& Str(absl::string_view s) {
    bytes_.insert(bytes_.end(), s.begin(), s.end());
    return *this;
  }
  Writer& CStr(absl::string_view s) { return Str(s).U8(0); }
  Writer& Tuple(const std::vector<std::string>& values) {
    I16(values.size());
    for (const std::string& v : values) U8('t').I32(v.size()).Str(v);
    return *this;
  }
  std::vector<uint8_t> Take() { return std::move(bytes_); }

 private:
  std::vector<uint8_t> bytes_;
};

constexpr uint32_t kRelation = 16384;
constexpr int kPerTransaction = 10;

struct Column {
  const char* name;
  uint32_t oid;
};

std::vector<uint8_t> RelationMessage(char identity, const std::vector<Column>& columns) {
  Writer w;
  w.U8('R').I32(kRelation).CStr("public").CStr("bench_t").U8(identity).I16(columns.size());
  for (const Column& c : columns) w.U8(1).CStr(c.name).I32(c.oid).I32(0xffffffffu);
  return w.Take();
}

// The messages of `events` row events: the Relation, then transactions.
std::vector<std::vector<uint8_t>> Messages(bool update, size_t events) {
  std::vector<std::vector<uint8_t>> out;
  if (update) {
    out.push_back(RelationMessage('f', {{"id", 23}, {"k", 23}, {"pad", 25}, {"note", 25}}));
  } else {
    out.push_back(RelationMessage('d', {{"id", 20}, {"payload", 25}, {"n", 23}}));
  }
  uint64_t lsn = 0x4E473E0;
  for (size_t i = 0; i < events; i += kPerTransaction) {
    const uint64_t commit = lsn + 0x1000;
    out.push_back(Writer().U8('B').I64(commit).I64(800000000000000 + i).I32(1000 + i).Take());
    for (size_t j = i; j < std::min(events, i + kPerTransaction); ++j) {
      if (update) {
        const std::vector<std::string> old_row = {absl::StrCat(j), absl::StrCat(j % 1000),
                                                  std::string(40, 'x'), "before"};
        std::vector<std::string> new_row = old_row;
        new_row[3] = absl::StrCat("after ", j);
        out.push_back(Writer().U8('U').I32(kRelation).U8('O').Tuple(old_row).U8('N')
                          .Tuple(new_row).Take());
      } else {
        out.push_back(Writer().U8('I').I32(kRelation).U8('N')
                          .Tuple({absl::StrCat(j), absl::StrCat("row number ", j),
                                  absl::StrCat(j % 100)})
                          .Take());
      }
    }
    out.push_back(Writer().U8('C').U8(0).I64(commit).I64(commit + 0x30)
                      .I64(800000000000000 + i).Take());
    lsn = commit + 0x30;
  }
  return out;
}

double NsPerEvent(const std::vector<std::vector<uint8_t>>& messages, size_t events) {
  TransactionAssembler assembler;
  walfeed::server::EventEncoder encoder;
  std::vector<TransactionAssembler::Output> outputs;
  size_t bytes = 0;
  const auto start = std::chrono::steady_clock::now();
  for (const std::vector<uint8_t>& message : messages) {
    auto decoded = pgoutput::Decode(message, pgoutput::DecodeOptions{});
    if (!decoded.ok()) std::abort();
    outputs.clear();
    if (!assembler.Process(*std::move(decoded), &outputs).ok()) std::abort();
    for (const TransactionAssembler::Output& output : outputs) {
      if (const auto* event = absl::get_if<walfeed::replication::ChangeEvent>(&output)) {
        bytes += encoder.Encode(*event).bytes;
      }
    }
  }
  const auto elapsed = std::chrono::steady_clock::now() - start;
  if (bytes == 0) std::abort();  // Keeps the work observable.
  return std::chrono::duration<double, std::nano>(elapsed).count() / events;
}

}  // namespace

int main(int argc, char** argv) {
  size_t events = 200000;
  int reps = 7;
  for (int i = 1; i + 1 < argc; i += 2) {
    if (std::strcmp(argv[i], "--events") == 0) events = std::strtoul(argv[i + 1], nullptr, 10);
    if (std::strcmp(argv[i], "--reps") == 0) reps = std::atoi(argv[i + 1]);
  }
  const char* names[] = {"insert, 3 columns", "update, full identity, 4 columns"};
  const std::vector<std::vector<uint8_t>> inputs[] = {Messages(false, events),
                                                      Messages(true, events)};
  std::vector<double> samples[2];
  for (int rep = 0; rep < reps; ++rep) {
    for (int c = 0; c < 2; ++c) samples[c].push_back(NsPerEvent(inputs[c], events));
  }
  std::printf("%-34s %10s\n", "row events", "ns/event");
  for (int c = 0; c < 2; ++c) {
    std::sort(samples[c].begin(), samples[c].end());
    std::printf("%-34s %10.0f\n", names[c], samples[c][samples[c].size() / 2]);
  }
  return 0;
}
