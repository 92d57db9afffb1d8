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
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "replication/pgoutput.h"
#include "replication/transaction_assembler.h"
#include "server/event_encoder.h"
#include "tests/testing/pgoutput_encoder.h"

namespace {

using walfeed::replication::Lsn;
using walfeed::replication::TransactionAssembler;
namespace pgoutput = walfeed::replication::pgoutput;
using Kind = pgoutput::TupleValue::Kind;

constexpr uint32_t kRelation = 16384;
constexpr int kPerTransaction = 10;

pgoutput::TupleData Row(std::vector<std::string> values) {
  pgoutput::TupleData row;
  for (std::string& value : values) row.columns.push_back({Kind::kText, std::move(value)});
  return row;
}

pgoutput::Relation RelationOf(char identity,
                              const std::vector<std::pair<const char*, uint32_t>>& columns) {
  pgoutput::Relation relation;
  relation.relation_id = kRelation;
  relation.namespace_name = "public";
  relation.relation_name = "bench_t";
  relation.replica_identity = identity;
  for (const auto& [name, oid] : columns) relation.columns.push_back({1, name, oid, -1});
  return relation;
}

// The messages of `events` row events, as the walsender writes them (the
// tests' pgoutput encoder): the Relation, then transactions.
std::vector<std::vector<uint8_t>> Messages(bool update, size_t events) {
  std::vector<std::vector<uint8_t>> out;
  out.push_back(walfeed::testing::Encode(
      update ? RelationOf('f', {{"id", 23}, {"k", 23}, {"pad", 25}, {"note", 25}})
             : RelationOf('d', {{"id", 20}, {"payload", 25}, {"n", 23}})));
  uint64_t lsn = 0x4E473E0;
  for (size_t i = 0; i < events; i += kPerTransaction) {
    const Lsn commit(lsn + 0x1000);
    const int64_t time = 800000000000000 + static_cast<int64_t>(i);
    out.push_back(walfeed::testing::Encode(
        pgoutput::Begin{commit, time, static_cast<uint32_t>(1000 + i)}));
    for (size_t j = i; j < std::min(events, i + kPerTransaction); ++j) {
      if (update) {
        pgoutput::Update change;
        change.relation_id = kRelation;
        change.old_kind = pgoutput::OldTupleKind::kFull;
        change.old_tuple =
            Row({absl::StrCat(j), absl::StrCat(j % 1000), std::string(40, 'x'), "before"});
        change.new_tuple = change.old_tuple;
        change.new_tuple.columns[3].data = absl::StrCat("after ", j);
        out.push_back(walfeed::testing::Encode(change));
      } else {
        pgoutput::Insert change;
        change.relation_id = kRelation;
        change.new_tuple =
            Row({absl::StrCat(j), absl::StrCat("row number ", j), absl::StrCat(j % 100)});
        out.push_back(walfeed::testing::Encode(change));
      }
    }
    out.push_back(walfeed::testing::Encode(
        pgoutput::Commit{0, commit, Lsn(commit.value() + 0x30), time}));
    lsn = commit.value() + 0x30;
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
