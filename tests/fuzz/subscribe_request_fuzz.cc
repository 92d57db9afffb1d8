// libFuzzer target for what the server does with a client's request before any
// stream state is involved (server/change_stream_service.cc): parse it, check it,
// compile its filter. The same input bytes are read three ways:
//  1. as a walfeed.v1.SubscribeRequest: SessionOptionsFor() over the default
//     SessionLimits, EventId::Parse(start_after), and the compiled EventFilter run
//     over change events whose tables come from the request (its own patterns with
//     the wildcards filled in, its other strings) and that take every operation;
//  2. as an AckRequest and as a ResetConsumerRequest: EventId::Parse of their
//     event_id and to;
//  3. as a table pattern list, one pattern per '\n'-separated line, for
//     EventFilter::Create and matching. Long patterns full of '*' and '?' are rare
//     in the wire form of case 1 and mutate well here, and only here do patterns
//     and names that are not valid UTF-8 arrive (protobuf refuses such strings).
//
// Beyond "no crash, no sanitizer report", the target checks these properties and
// aborts when one fails:
//  * SessionOptionsFor accepts exactly the requests whose every field is in the
//    range session_limits.h and subscribe_options.h document; a rejection is
//    INVALID_ARGUMENT with reason INVALID_REQUEST whose message starts with the
//    name of a field that is out of range; on success each limit is within its
//    range: the requested value (max_batch_bytes capped at kBatchBytesCap), or the
//    default for 0.
//  * EventId::Parse accepts exactly "X/Y:N" (1-8 hex digits per half, N 1-10
//    decimal digits and at most 2^32-1), with the value the text spells, and an
//    accepted id round-trips: Parse(ToString()) is the id and ToString() is stable.
//  * GlobMatchesTable agrees with a plain reference matcher (below) written from
//    filter.h's definition, wherever that definition is unambiguous: pattern and
//    name valid UTF-8. In particular a name made from a pattern by putting some
//    text in place of each '*' and one character in place of each '?' matches it.
//  * MatchesTable is "some pattern matches" (or true without patterns), and
//    Matches() on a replication event and on the converted proto event both give
//    the documented decision: the operation passes, then the table (none for a
//    message, any of a TRUNCATE's tables). An unknown operation never passes.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/ascii.h"
#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "google/protobuf/repeated_field.h"
#include "google/protobuf/stubs/logging.h"
#include "replication/error_reason.h"
#include "replication/event_id.h"
#include "replication/lsn.h"
#include "replication/relation_cache.h"
#include "replication/transaction_assembler.h"
#include "server/filter.h"
#include "server/session.h"
#include "server/session_limits.h"
#include "server/subscribe_options.h"
#include "walfeed/v1/change_stream.pb.h"

namespace {

namespace server = ::walfeed::server;
namespace v1 = ::walfeed::v1;
using ::walfeed::replication::EventId;

// Work bounds, so that one input stays in the millisecond range: names are at
// most this long (PostgreSQL's are at most 63 bytes a part), at most this many
// names are tried per filter (the first patterns filled in, then other strings
// of the input), and the reference matcher is skipped above this many cells.
constexpr size_t kMaxNameBytes = 256;
constexpr size_t kMaxNames = 24;
constexpr size_t kMaxInstantiatedPatterns = 6;  // 3 names each, leaving room for others.
constexpr size_t kMaxReferenceCells = size_t{1} << 16;

absl::string_view g_input;  // For Fail(): the input being run.

[[noreturn]] void Fail(const char* what, const std::string& detail) {
  std::fprintf(stderr, "subscribe_request_fuzz: %s\n  %s\n  input: %s\n", what, detail.c_str(),
               absl::CHexEscape(g_input).c_str());
  std::abort();
}

std::string Quote(absl::string_view text) { return "\"" + absl::CHexEscape(text) + "\""; }

// ---------------------------------------------------------------------------
// UTF-8 and the reference glob matcher.

// The length of the character starting at text[i] when text is structurally valid
// UTF-8 from i on (lead byte, then as many continuation bytes as it announces), or 0.
size_t Utf8CharLength(absl::string_view text, size_t i) {
  const auto lead = static_cast<unsigned char>(text[i]);
  size_t length;
  if (lead < 0x80) {
    length = 1;
  } else if (lead >= 0xC0 && lead < 0xE0) {
    length = 2;
  } else if (lead >= 0xE0 && lead < 0xF0) {
    length = 3;
  } else if (lead >= 0xF0 && lead < 0xF8) {
    length = 4;
  } else {
    return 0;
  }
  if (i + length > text.size()) return 0;
  for (size_t k = 1; k < length; ++k) {
    if ((static_cast<unsigned char>(text[i + k]) & 0xC0) != 0x80) return 0;
  }
  return length;
}

// `text` as its characters, or false if it is not structurally valid UTF-8.
bool SplitUtf8(absl::string_view text, std::vector<absl::string_view>* chars) {
  chars->clear();
  for (size_t i = 0; i < text.size();) {
    const size_t length = Utf8CharLength(text, i);
    if (length == 0) return false;
    chars->push_back(text.substr(i, length));
    i += length;
  }
  return true;
}

bool ValidUtf8(absl::string_view text) {
  std::vector<absl::string_view> chars;
  return SplitUtf8(text, &chars);
}

// filter.h's definition, as directly as it can be written: over characters, '*'
// is any run of them, '?' exactly one, anything else itself. Dynamic programming:
// matched[j] says whether the pattern's first i characters match the name's first
// j. Returns 0 or 1, or -1 when the definition is not applied here (pattern or
// name not valid UTF-8, or too large).
int ReferenceGlob(absl::string_view pattern, absl::string_view name) {
  std::vector<absl::string_view> p;
  std::vector<absl::string_view> n;
  if (!SplitUtf8(pattern, &p) || !SplitUtf8(name, &n)) return -1;
  if ((p.size() + 1) * (n.size() + 1) > kMaxReferenceCells) return -1;
  std::vector<char> matched(n.size() + 1, 0);
  matched[0] = 1;
  for (const absl::string_view pc : p) {
    std::vector<char> next(n.size() + 1, 0);
    for (size_t j = 0; j <= n.size(); ++j) {
      if (pc == "*") {
        next[j] = matched[j] || (j > 0 && next[j - 1]);
      } else if (j > 0) {
        next[j] = matched[j - 1] && (pc == "?" || pc == n[j - 1]);
      }
    }
    matched = std::move(next);
  }
  return matched[n.size()];
}

// ---------------------------------------------------------------------------
// Names and events made from the input.

struct Name {
  std::string schema;
  std::string table;
  std::string Qualified() const { return schema + "." + table; }
};

// "a.b.c" -> ("a", "b.c"); without a '.', the table of schema "public". Both
// splits give the same "schema.table" string, which is all the filter sees.
Name NameFrom(absl::string_view text) {
  text = text.substr(0, kMaxNameBytes);
  const size_t dot = text.find('.');
  if (dot == absl::string_view::npos) return Name{"public", std::string(text)};
  return Name{std::string(text.substr(0, dot)), std::string(text.substr(dot + 1))};
}

// One character for the k-th '?': ASCII, then 2-, 3- and 4-byte UTF-8, so that
// '?' is seen to take a whole character.
absl::string_view QuestionFill(size_t k) {
  static constexpr absl::string_view kFills[] = {"x", "\xC3\xA9", "\xE2\x82\xAC",
                                                 "\xF0\x9F\x98\x80"};
  return kFills[k % 4];
}

// Text for the k-th '*': 0 to 3 bytes of the input, bytes >= 0x80 replaced so
// that it stays valid UTF-8. May contain '*', '?' and '.', which in a name are
// ordinary characters.
std::string StarFill(size_t k) {
  std::string fill;
  if (g_input.empty()) return fill;
  const size_t start = (k * 7) % g_input.size();
  for (size_t i = 0; i < k % 4 && start + i < g_input.size(); ++i) {
    const char c = g_input[start + i];
    fill.push_back(static_cast<unsigned char>(c) < 0x80 ? c : 'z');
  }
  return fill;
}

// `pattern` with its wildcards filled in: with `plain`, every '*' matches nothing
// and every '?' an 'x'; otherwise with StarFill and QuestionFill.
std::string Instantiate(absl::string_view pattern, bool plain) {
  std::string name;
  size_t k = 0;
  for (const char c : pattern) {
    if (c == '*') {
      if (!plain) name += StarFill(k);
      ++k;
    } else if (c == '?') {
      absl::StrAppend(&name, plain ? absl::string_view("x") : QuestionFill(k));
      ++k;
    } else {
      name.push_back(c);
    }
  }
  return name;
}

// The names to try a filter with `patterns` on: each of the first patterns filled
// in two ways (asserted to match it when valid UTF-8) and with one character more
// (mostly not matching), then `others`.
std::vector<Name> NamesToTry(const google::protobuf::RepeatedPtrField<std::string>& patterns,
                             const std::vector<absl::string_view>& others) {
  std::vector<Name> names;
  for (int i = 0; i < patterns.size() && static_cast<size_t>(i) < kMaxInstantiatedPatterns; ++i) {
    const std::string& pattern = patterns.Get(i);
    for (bool plain : {true, false}) {
      const std::string name = Instantiate(pattern, plain);
      if (name.size() > kMaxNameBytes || name.find('.') == std::string::npos) continue;
      const Name split = NameFrom(name);
      if (ValidUtf8(pattern) && ValidUtf8(name) &&
          !server::GlobMatchesTable(pattern, split.schema, split.table)) {
        Fail("a name made by filling in a pattern's wildcards does not match it",
             "pattern " + Quote(pattern) + ", name " + Quote(name));
      }
      names.push_back(split);
      if (!plain) names.push_back(NameFrom(name + "q"));
    }
  }
  for (const absl::string_view other : others) names.push_back(NameFrom(other));
  if (names.size() > kMaxNames) names.resize(kMaxNames);
  return names;
}

std::shared_ptr<const walfeed::replication::RelationInfo> Relation(const Name& name, uint32_t oid) {
  auto relation = std::make_shared<walfeed::replication::RelationInfo>();
  relation->relation_id = oid;
  relation->schema = name.schema;
  relation->table = name.table;
  return relation;
}

// ---------------------------------------------------------------------------
// The filter.

using ReplicationOp = walfeed::replication::ChangeEvent::Op;

struct ProtoOp {
  v1::Operation proto;
  ReplicationOp replication;
};
constexpr ProtoOp kOps[] = {
    {v1::OPERATION_INSERT, ReplicationOp::kInsert},
    {v1::OPERATION_UPDATE, ReplicationOp::kUpdate},
    {v1::OPERATION_DELETE, ReplicationOp::kDelete},
    {v1::OPERATION_TRUNCATE, ReplicationOp::kTruncate},
    {v1::OPERATION_MESSAGE, ReplicationOp::kMessage},
    {v1::OPERATION_READ, ReplicationOp::kRead},
};

// The fields for which Create(tables, operations) must fail: "tables" if there
// are too many patterns or one is empty, too long or has no '.', "operations"
// if an operation is not a specified Operation. Empty: Create must succeed.
std::vector<std::string> FilterErrors(const google::protobuf::RepeatedPtrField<std::string>& tables,
                                      const google::protobuf::RepeatedField<int>& operations) {
  std::vector<std::string> fields;
  if (tables.size() > server::EventFilter::kMaxTablePatterns) fields.push_back("tables");
  for (const std::string& pattern : tables) {
    if (!fields.empty()) break;
    if (pattern.empty() || pattern.find('.') == std::string::npos ||
        pattern.size() > server::EventFilter::kMaxTablePatternBytes) {
      fields.push_back("tables");
      break;
    }
  }
  for (const int op : operations) {
    if (op < v1::OPERATION_INSERT || op > v1::OPERATION_READ) {
      fields.push_back("operations");
      break;
    }
  }
  return fields;
}

// Runs `filter`, made from `tables` and `operations`, over events naming `names`
// with every operation, and checks each decision.
void ExerciseFilter(const server::EventFilter& filter,
                    const google::protobuf::RepeatedPtrField<std::string>& tables,
                    const google::protobuf::RepeatedField<int>& operations,
                    const std::vector<Name>& names) {
  // MatchesTable, against GlobMatchesTable and the reference.
  std::vector<char> table_matches;
  for (const Name& name : names) {
    bool any = tables.empty();
    for (const std::string& pattern : tables) {
      const bool glob = server::GlobMatchesTable(pattern, name.schema, name.table);
      const int reference = ReferenceGlob(pattern, name.Qualified());
      if (reference >= 0 && glob != (reference == 1)) {
        Fail(glob ? "GlobMatchesTable matches where the definition does not"
                  : "GlobMatchesTable does not match where the definition does",
             "pattern " + Quote(pattern) + ", name " + Quote(name.Qualified()));
      }
      any = any || glob;
    }
    if (filter.MatchesTable(name.schema, name.table) != any) {
      Fail("MatchesTable is not \"some pattern matches\"", "name " + Quote(name.Qualified()));
    }
    table_matches.push_back(any);
  }

  // Matches, on replication events and on proto events.
  std::vector<std::shared_ptr<const walfeed::replication::RelationInfo>> relations;
  for (size_t i = 0; i < names.size(); ++i) {
    relations.push_back(Relation(names[i], static_cast<uint32_t>(16384 + i)));
  }
  for (const ProtoOp& op : kOps) {
    bool op_passes = operations.empty();
    for (const int wanted : operations) op_passes = op_passes || wanted == op.proto;
    // Each name alone, and (for TRUNCATE) all of them in one statement, those
    // that do not match first, so that "any of its tables" is seen to look past
    // the first. A message has no table: one event.
    size_t cases = names.size();
    if (op.replication == ReplicationOp::kTruncate) cases = names.size() + 1;
    if (op.replication == ReplicationOp::kMessage) cases = 1;
    for (size_t i = 0; i < cases; ++i) {
      const bool all = op.replication == ReplicationOp::kTruncate && i == names.size();
      bool tables_pass = tables.empty() || op.replication == ReplicationOp::kMessage;
      if (!tables_pass) {
        for (size_t k = 0; k < names.size(); ++k) {
          if ((all || k == i) && table_matches[k]) tables_pass = true;
        }
      }
      const bool expected = op_passes && tables_pass;

      walfeed::replication::ChangeEvent event;
      event.op = op.replication;
      v1::ChangeEvent proto;
      proto.set_op(op.proto);
      if (op.replication == ReplicationOp::kTruncate) {
        for (const bool matching : {false, true}) {
          for (size_t k = 0; k < names.size(); ++k) {
            if ((!all && k != i) || static_cast<bool>(table_matches[k]) != matching) continue;
            event.truncated_relations.push_back(relations[k]);
            v1::TableName* table = proto.mutable_truncate()->add_tables();
            table->set_schema(names[k].schema);
            table->set_table(names[k].table);
          }
        }
      } else if (op.replication == ReplicationOp::kMessage) {
        event.message_prefix = "walfeed";
        proto.mutable_message()->set_prefix("walfeed");
      } else {
        event.relation = relations[i];
        proto.set_schema(names[i].schema);
        proto.set_table(names[i].table);
      }
      auto what = [&] {
        std::string text = v1::Operation_Name(op.proto);
        if (all) return text + " on all names";
        if (op.replication == ReplicationOp::kMessage) return text;
        return text + " on " + Quote(names[i].Qualified());
      };
      if (filter.Matches(event) != expected) {
        Fail("Matches(replication event) differs from the documented decision", what());
      }
      if (filter.Matches(proto) != expected) {
        Fail("Matches(proto event) differs from the documented decision", what());
      }
    }
  }

  // An operation that is not one never passes, whatever the lists.
  for (const int op : {0, 7, -1, 0x7fffffff}) {
    server::FilterKey key;
    key.op = static_cast<v1::Operation>(op);
    if (!names.empty()) key.tables.emplace_back(names[0].schema, names[0].table);
    if (filter.Matches(key)) Fail("an unknown operation passes", std::to_string(op));
  }
}

// ---------------------------------------------------------------------------
// Event ids.

// Whether `text` is a valid event id by its documented grammar, and its value.
bool ReferenceEventId(absl::string_view text, uint64_t* lsn, uint32_t* index) {
  auto hex_digit = [](char c, uint64_t* value) {
    const size_t at = absl::string_view("0123456789abcdef").find(absl::ascii_tolower(c));
    if (at == absl::string_view::npos) return false;
    *value = at;
    return true;
  };
  size_t i = 0;
  uint64_t halves[2] = {0, 0};
  for (int half = 0; half < 2; ++half) {
    size_t digits = 0;
    uint64_t d;
    while (i < text.size() && hex_digit(text[i], &d)) {
      halves[half] = halves[half] * 16 + d;
      ++i;
      ++digits;
    }
    if (digits < 1 || digits > 8) return false;
    const char separator = half == 0 ? '/' : ':';
    if (i >= text.size() || text[i] != separator) return false;
    ++i;
  }
  const absl::string_view decimal = text.substr(i);
  if (decimal.empty() || decimal.size() > 10) return false;
  uint64_t value = 0;
  for (const char c : decimal) {
    if (c < '0' || c > '9') return false;
    value = value * 10 + static_cast<uint64_t>(c - '0');
  }
  if (value > UINT32_MAX) return false;
  *lsn = (halves[0] << 32) | halves[1];
  *index = static_cast<uint32_t>(value);
  return true;
}

void CheckEventId(absl::string_view text) {
  const absl::StatusOr<EventId> id = EventId::Parse(text);
  uint64_t lsn = 0;
  uint32_t index = 0;
  const bool valid = ReferenceEventId(text, &lsn, &index);
  if (!id.ok()) {
    if (valid) Fail("EventId::Parse rejects a valid id", Quote(text));
    if (id.status().code() != absl::StatusCode::kInvalidArgument) {
      Fail("EventId::Parse rejects with a code other than INVALID_ARGUMENT",
           id.status().ToString());
    }
    return;
  }
  if (!valid) Fail("EventId::Parse accepts an invalid id", Quote(text));
  if (id->commit_lsn.value() != lsn || id->index != index) {
    Fail("EventId::Parse reads another value than the text spells", Quote(text));
  }
  const std::string printed = id->ToString();
  const absl::StatusOr<EventId> again = EventId::Parse(printed);
  if (!again.ok() || *again != *id) {
    Fail("an accepted event id does not round-trip through ToString",
         Quote(text) + " -> " + Quote(printed));
  }
  if (again->ToString() != printed) Fail("ToString is not stable", Quote(printed));
}

// ---------------------------------------------------------------------------
// SubscribeRequest.

struct Knob {
  const char* field;
  uint64_t requested;
  uint64_t max;
  uint64_t default_value;
  uint64_t got;
};

void CheckSubscribeRequest(const v1::SubscribeRequest& request) {
  if (!request.start_after().empty()) CheckEventId(request.start_after());

  const server::SessionLimits defaults;
  const absl::StatusOr<server::SessionOptions> options =
      server::SessionOptionsFor(request, defaults);

  // Which fields are out of range, by the documented ranges.
  std::vector<std::string> bad_fields = FilterErrors(request.tables(), request.operations());
  const server::SessionLimits* limits = options.ok() ? &options->limits : nullptr;
  const Knob knobs[] = {
      {"max_batch_events", request.max_batch_events(), server::kBatchEventsMax,
       defaults.max_batch_events, limits ? limits->max_batch_events : 0},
      {"max_batch_bytes", request.max_batch_bytes(), server::kBatchBytesMax,
       defaults.max_batch_bytes, limits ? limits->max_batch_bytes : 0},
      {"max_unacked_events", request.max_unacked_events(), server::kUnackedEventsMax,
       defaults.max_unacked_events, limits ? limits->max_unacked_events : 0},
      {"max_unacked_bytes", request.max_unacked_bytes(), server::kUnackedBytesMax,
       defaults.max_unacked_bytes, limits ? limits->max_unacked_bytes : 0},
  };
  for (const Knob& knob : knobs) {
    if (knob.requested > knob.max) bad_fields.push_back(knob.field);
  }
  const uint32_t progress_ms = request.progress_interval_ms();
  if (progress_ms != 0 && (absl::Milliseconds(progress_ms) < server::kProgressIntervalMin ||
                           absl::Milliseconds(progress_ms) > server::kProgressIntervalMax)) {
    bad_fields.push_back("progress_interval_ms");
  }
  if (request.start() != v1::START_POSITION_UNSPECIFIED &&
      request.start() != v1::START_POSITION_EARLIEST &&
      request.start() != v1::START_POSITION_LATEST) {
    bad_fields.push_back("start");
  }
  if (request.event_form() != v1::EVENT_FORM_UNSPECIFIED &&
      request.event_form() != v1::EVENT_FORM_FULL &&
      request.event_form() != v1::EVENT_FORM_COMPACT) {
    bad_fields.push_back("event_form");
  }
  if (request.value_form() != v1::VALUE_FORM_UNSPECIFIED &&
      request.value_form() != v1::VALUE_FORM_TEXT && request.value_form() != v1::VALUE_FORM_TYPED &&
      request.value_form() != v1::VALUE_FORM_BOTH) {
    bad_fields.push_back("value_form");
  }

  if (!options.ok()) {
    const absl::Status& status = options.status();
    if (bad_fields.empty()) Fail("SessionOptionsFor rejects a valid request", status.ToString());
    if (status.code() != absl::StatusCode::kInvalidArgument) {
      Fail("SessionOptionsFor rejects with a code other than INVALID_ARGUMENT", status.ToString());
    }
    if (walfeed::replication::reason::ReasonOf(status) !=
        walfeed::replication::reason::kInvalidRequest) {
      Fail("SessionOptionsFor rejects without reason INVALID_REQUEST", status.ToString());
    }
    bool names_bad_field = false;
    for (const std::string& field : bad_fields) {
      names_bad_field = names_bad_field || absl::StartsWith(status.message(), field);
    }
    if (!names_bad_field) {
      Fail("SessionOptionsFor's error does not start with a field that is out of range",
           status.ToString());
    }
    return;
  }
  if (!bad_fields.empty()) {
    Fail("SessionOptionsFor accepts a field out of range", bad_fields.front());
  }

  for (const Knob& knob : knobs) {
    uint64_t expected = knob.requested != 0 ? knob.requested : knob.default_value;
    uint64_t max = knob.max;
    if (absl::string_view(knob.field) == "max_batch_bytes") {
      expected = std::min<uint64_t>(expected, server::kBatchBytesCap);
      max = std::min<uint64_t>(max, server::kBatchBytesCap);
    }
    if (knob.got < 1 || knob.got > max) {
      Fail("a limit is out of its documented range",
           std::string(knob.field) + " = " + std::to_string(knob.got));
    }
    if (knob.got != expected) {
      Fail("a limit is neither the requested value nor the default",
           std::string(knob.field) + " = " + std::to_string(knob.got) + ", expected " +
               std::to_string(expected));
    }
  }
  const absl::Duration interval = options->limits.progress_interval;
  if (interval < server::kProgressIntervalMin || interval > server::kProgressIntervalMax) {
    Fail("progress_interval is out of its documented range", absl::FormatDuration(interval));
  }
  if (interval !=
      (progress_ms != 0 ? absl::Milliseconds(progress_ms) : defaults.progress_interval)) {
    Fail("progress_interval is neither the requested value nor the default",
         absl::FormatDuration(interval));
  }
  if (options->ephemeral != request.ephemeral()) Fail("ephemeral is not as requested", "");
  if (options->start_latest != (request.start() == v1::START_POSITION_LATEST)) {
    Fail("start_latest is not as requested", "");
  }
  if (options->form.compact != (request.event_form() == v1::EVENT_FORM_COMPACT)) {
    Fail("compact is not as requested", "");
  }
  const server::ValueForm values = request.value_form() == v1::VALUE_FORM_TYPED ? server::ValueForm::kTyped
                                   : request.value_form() == v1::VALUE_FORM_BOTH
                                       ? server::ValueForm::kBoth
                                       : server::ValueForm::kText;
  if (options->form.values != values) Fail("value_form is not as requested", "");

  std::vector<absl::string_view> others = {request.stream(), request.consumer(),
                                           request.start_after()};
  for (const std::string& pattern : request.tables()) others.push_back(pattern);
  ExerciseFilter(options->filter, request.tables(), request.operations(),
                 NamesToTry(request.tables(), others));
}

// ---------------------------------------------------------------------------
// The input as a pattern list.

void CheckPatternList(absl::string_view input) {
  google::protobuf::RepeatedPtrField<std::string> tables;
  for (const absl::string_view line : absl::StrSplit(input, '\n')) {
    tables.Add(std::string(line));
  }
  const google::protobuf::RepeatedField<int> no_operations;
  const absl::StatusOr<server::EventFilter> filter =
      server::EventFilter::Create(tables, no_operations);
  const bool valid = FilterErrors(tables, no_operations).empty();
  if (!filter.ok()) {
    if (valid) Fail("EventFilter::Create rejects valid patterns", filter.status().ToString());
    if (filter.status().code() != absl::StatusCode::kInvalidArgument ||
        !absl::StartsWith(filter.status().message(), "tables")) {
      Fail("EventFilter::Create's rejection is not INVALID_ARGUMENT naming tables",
           filter.status().ToString());
    }
    return;
  }
  if (!valid) Fail("EventFilter::Create accepts patterns it must refuse", "");
  std::vector<absl::string_view> others;
  for (const std::string& line : tables) others.push_back(line);
  ExerciseFilter(*filter, tables, no_operations, NamesToTry(tables, others));
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const absl::string_view input(reinterpret_cast<const char*>(data), size);
  g_input = input;
  // A string field that is not valid UTF-8 fails the parse, as it does in the
  // server; protobuf's log line saying so would be most of the output.
  const google::protobuf::LogSilencer quiet;

  v1::SubscribeRequest subscribe;
  if (subscribe.ParseFromArray(data, static_cast<int>(size))) CheckSubscribeRequest(subscribe);

  v1::AckRequest ack;
  if (ack.ParseFromArray(data, static_cast<int>(size))) CheckEventId(ack.event_id());

  v1::ResetConsumerRequest reset;
  if (reset.ParseFromArray(data, static_cast<int>(size)) && !reset.to().empty()) {
    CheckEventId(reset.to());
  }

  CheckPatternList(input);
  return 0;
}
