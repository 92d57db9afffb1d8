// encode_forms: what each event form costs the server to make, per event, on
// the reader thread (EventEncoder::Encode): the default full text form alone,
// and with the typed and compact forms a session may ask for. The text form
// alone is the baseline each other figure is a ratio of, measured in the same
// run, interleaved, so the machine's drift hits all alike.
//
//   build/bench/encode_forms [--events N] [--reps R]
//
// The events are INSERTs of an 8-column row of common types (int8 key, text,
// int4, numeric, timestamptz, bool, text[], jsonb) with varied values.
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "replication/relation_cache.h"
#include "replication/transaction_assembler.h"
#include "server/event_encoder.h"
#include "server/event_forms.h"

namespace {

using walfeed::replication::ChangeEvent;
using walfeed::replication::ColumnInfo;
using walfeed::replication::RelationInfo;
using walfeed::server::EventEncoder;
using walfeed::server::EventForm;
using walfeed::server::FormMask;
using walfeed::server::MaskOf;
using walfeed::server::ValueForm;
using Kind = walfeed::replication::pgoutput::TupleValue::Kind;

std::vector<ChangeEvent> MakeEvents(size_t count) {
  auto relation = std::make_shared<RelationInfo>();
  relation->schema = "public";
  relation->table = "orders";
  relation->columns = {
      ColumnInfo{"id", 20, -1, true, "int8"},         ColumnInfo{"customer", 25, -1, false, "text"},
      ColumnInfo{"qty", 23, -1, false, "int4"},       ColumnInfo{"price", 1700, 655366, false, "numeric"},
      ColumnInfo{"created", 1184, -1, false, "timestamptz"},
      ColumnInfo{"active", 16, -1, false, "bool"},    ColumnInfo{"tags", 1009, -1, false, "_text"},
      ColumnInfo{"payload", 3802, -1, false, "jsonb"}};
  std::vector<ChangeEvent> events(count);
  for (size_t i = 0; i < count; ++i) {
    ChangeEvent& event = events[i];
    event.id.index = static_cast<uint32_t>(i);
    event.op = ChangeEvent::Op::kInsert;
    event.relation = relation;
    for (const std::string& text :
         {absl::StrCat(1000000 + i), absl::StrCat("customer-", i % 977), absl::StrCat(i % 50),
          absl::StrCat(i % 10000, ".", i % 100 < 10 ? "0" : "", i % 100),
          absl::StrCat("2026-12-0", 1 + i % 9, " 1", i % 10, ":2", i % 10, ":3", i % 10, ".",
                       100000 + i % 900000, "+00"),
          std::string(i % 2 ? "t" : "f"), absl::StrCat("{red,\"big box\",n", i % 7, "}"),
          absl::StrCat("{\"k\": ", i, ", \"note\": \"x\"}")}) {
      event.new_tuple.columns.push_back({Kind::kText, text});
    }
  }
  return events;
}

double NsPerEvent(const std::vector<ChangeEvent>& events, FormMask mask) {
  EventEncoder encoder;
  size_t bytes = 0;
  const auto start = std::chrono::steady_clock::now();
  for (const ChangeEvent& event : events) bytes += encoder.Encode(event, mask).bytes;
  const auto elapsed = std::chrono::steady_clock::now() - start;
  if (bytes == 0) std::abort();  // Keeps the work observable.
  return std::chrono::duration<double, std::nano>(elapsed).count() / events.size();
}

}  // namespace

int main(int argc, char** argv) {
  size_t events = 200000;
  int reps = 5;
  for (int i = 1; i + 1 < argc; i += 2) {
    if (std::strcmp(argv[i], "--events") == 0) events = std::strtoul(argv[i + 1], nullptr, 10);
    if (std::strcmp(argv[i], "--reps") == 0) reps = std::atoi(argv[i + 1]);
  }
  const std::vector<ChangeEvent> input = MakeEvents(events);
  struct Case {
    const char* name;
    FormMask mask;
  };
  const Case cases[] = {
      {"full text (default)", 0},
      {"+ full typed", MaskOf(EventForm{false, ValueForm::kTyped})},
      {"+ full both", MaskOf(EventForm{false, ValueForm::kBoth})},
      {"+ compact text", MaskOf(EventForm{true, ValueForm::kText})},
      {"+ compact typed", MaskOf(EventForm{true, ValueForm::kTyped})},
      {"+ all five", 0x3e},
  };
  std::vector<std::vector<double>> samples(std::size(cases));
  for (int rep = 0; rep < reps; ++rep) {
    for (size_t c = 0; c < std::size(cases); ++c) samples[c].push_back(NsPerEvent(input, cases[c].mask));
  }
  std::printf("%-22s %12s %10s\n", "forms made", "ns/event", "x text");
  double baseline = 0;
  for (size_t c = 0; c < std::size(cases); ++c) {
    std::sort(samples[c].begin(), samples[c].end());
    const double median = samples[c][samples[c].size() / 2];
    if (c == 0) baseline = median;
    std::printf("%-22s %12.0f %10.2f\n", cases[c].name, median, median / baseline);
  }
  return 0;
}
