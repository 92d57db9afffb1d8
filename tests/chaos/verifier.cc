#include "tests/chaos/verifier.h"

#include <algorithm>
#include <optional>
#include <set>
#include <unordered_map>
#include <unordered_set>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "tests/chaos/delivery_log.h"
#include "walfeed/event_id.h"

namespace walfeed::chaos {
namespace {

// Enough examples to act on without flooding the report.
constexpr size_t kMaxViolationsPerCheck = 20;

struct Seen {
  uint64_t hash = 0;
  std::string signature;
};

class Reporter {
 public:
  explicit Reporter(std::vector<std::string>* out) : out_(out) {}
  void Add(const std::string& check, const std::string& what) {
    if (++counts_[check] <= kMaxViolationsPerCheck) out_->push_back(absl::StrCat(check, ": ", what));
  }
  void Summarize() {
    for (const auto& [check, n] : counts_) {
      if (n > kMaxViolationsPerCheck) {
        out_->push_back(absl::StrCat(check, ": ", n - kMaxViolationsPerCheck, " more"));
      }
    }
  }

 private:
  std::vector<std::string>* out_;
  std::map<std::string, uint64_t> counts_;
};

std::optional<EventId> ParseOrNone(const std::string& text) {
  if (text.empty()) return std::nullopt;
  absl::StatusOr<EventId> id = EventId::Parse(text);
  if (!id.ok()) return std::nullopt;
  return *id;
}

}  // namespace

Verdict Verify(const std::vector<CommittedTxn>& ledger, const std::vector<ConsumerLogs>& logs) {
  Verdict verdict;
  Reporter report(&verdict.violations);
  std::unordered_set<std::string> committed;
  for (const CommittedTxn& txn : ledger) {
    for (const std::string& s : txn.signatures) committed.insert(s);
  }
  verdict.committed_changes = committed.size();

  // One id is one change, for every consumer.
  std::unordered_map<std::string, Seen> by_id;
  std::unordered_map<std::string, std::string> id_of;  // signature -> id

  for (const ConsumerLogs& consumer : logs) {
    ConsumerFigures& fig = verdict.consumers[consumer.name];
    std::vector<std::vector<LogRecord>> files;
    for (const std::string& path : consumer.paths) {
      absl::StatusOr<std::vector<LogRecord>> records = ReadLog(path);
      if (!records.ok()) {
        report.Add("log", records.status().ToString());
        files.emplace_back();
        continue;
      }
      files.push_back(std::move(*records));
    }
    // Every checkpoint the server confirmed as durable, with when it was known.
    std::vector<std::pair<int64_t, EventId>> durable;
    for (const auto& records : files) {
      for (const LogRecord& r : records) {
        if (r.kind == 'A') {
          ++fig.acks;
          if (auto c = ParseOrNone(r.checkpoint)) durable.emplace_back(r.mono_ns, *c);
        } else if (r.kind == 'S') {
          if (auto c = ParseOrNone(r.checkpoint)) durable.emplace_back(r.mono_ns, *c);
        }
      }
    }
    std::unordered_map<std::string, Seen> mine;
    std::unordered_set<std::string> delivered_signatures;
    for (size_t f = 0; f < files.size(); ++f) {
      const std::vector<LogRecord>& records = files[f];
      const std::string where = absl::StrCat(consumer.name, " process ", f);
      int64_t boundary = 0;  // The latest process start or retry: a new Subscribe follows.
      std::string session;
      std::optional<EventId> start;
      std::optional<EventId> previous;
      uint64_t session_duplicates = 0;
      int64_t session_start = 0;
      auto close_session = [&] {
        if (!session.empty()) fig.session_duplicates.emplace_back(session_start, session_duplicates);
        fig.largest_window = std::max(fig.largest_window, session_duplicates);
        if (consumer.window > 0 && session_duplicates > consumer.window) {
          report.Add("window", absl::StrCat(where, " session ", session, " redelivered ",
                                            session_duplicates, " events, more than its window ",
                                            consumer.window));
        }
        session_duplicates = 0;
      };
      for (const LogRecord& r : records) {
        switch (r.kind) {
          case 'P':
          case 'R':
            boundary = r.mono_ns;
            break;
          case 'S': {
            close_session();
            ++fig.sessions;
            session = r.session;
            session_start = r.mono_ns;
            // Where the server said this session's events start; not the
            // checkpoint it reported, which may have moved on since (see
            // ConsumerFigures::started_below_checkpoint).
            start = ParseOrNone(r.start_after);
            previous = start;
            if (const std::optional<EventId> reported = ParseOrNone(r.checkpoint);
                reported && (!start || *start < *reported)) {
              ++fig.started_below_checkpoint;
            }
            // Acks confirmed before this session was asked for must be below its
            // start; otherwise acked events could come back.
            for (const auto& [when, checkpoint] : durable) {
              if (when < boundary && (!start || *start < checkpoint)) {
                report.Add("acked-once",
                           absl::StrCat(where, " session ", session, " started after ",
                                        r.start_after.empty() ? "(none)" : r.start_after,
                                        ", below ", checkpoint.ToString(),
                                        ", confirmed durable before it was requested"));
                break;
              }
            }
            break;
          }
          case 'E': {
            ++fig.delivered;
            const std::optional<EventId> id = ParseOrNone(r.id);
            if (!id) {
              report.Add("order", absl::StrCat(where, " malformed id ", r.id));
              break;
            }
            if (r.session != session) {
              report.Add("order", absl::StrCat(where, " event ", r.id, " of session ", r.session,
                                               " outside it"));
            }
            if (previous && !(*previous < *id)) {
              const bool below_start = start && *id <= *start;
              report.Add("order", absl::StrCat(where, " session ", session, ": ", r.id, " after ",
                                               previous->ToString(),
                                               below_start ? " (at or below its start_after)" : ""));
            }
            previous = id;
            auto [it, fresh] = mine.emplace(r.id, Seen{r.hash, r.signature});
            if (!fresh) {
              ++fig.duplicates;
              ++session_duplicates;
            }
            auto [global, first] = by_id.emplace(r.id, Seen{r.hash, r.signature});
            if (!first && (global->second.hash != r.hash || global->second.signature != r.signature)) {
              report.Add("identical",
                         absl::StrFormat("%s id %s delivered as %s/%016x, before as %s/%016x",
                                         where, r.id, r.signature, r.hash,
                                         global->second.signature, global->second.hash));
            }
            if (r.signature != "-" && r.signature.rfind("mark:", 0) != 0) {
              delivered_signatures.insert(r.signature);
              auto [known, inserted] = id_of.emplace(r.signature, r.id);
              if (!inserted && known->second != r.id) {
                report.Add("identical", absl::StrCat(where, " change ", r.signature, " as ", r.id,
                                                     " and as ", known->second));
              }
              if (committed.count(r.signature) == 0) {
                report.Add("phantom", absl::StrCat(where, " delivered ", r.signature, " (", r.id,
                                                   ") that was never committed"));
              }
            }
            break;
          }
          default:
            break;
        }
      }
      close_session();
      const bool killed = f < consumer.killed.size() && consumer.killed[f];
      const LogRecord* last = records.empty() ? nullptr : &records.back();
      if (!killed && (last == nullptr || last->kind != 'X')) {
        report.Add("ends", absl::StrCat(where, " has no end record but was not killed"));
      } else if (last != nullptr && last->kind == 'X' && last->code != "OK" &&
                 last->code != "ABORTED") {
        report.Add("ends", absl::StrCat(where, " ended ", last->code, ": ", last->message));
      }
    }
    fig.distinct = mine.size();
    for (const CommittedTxn& txn : ledger) {
      for (const std::string& s : txn.signatures) {
        if (delivered_signatures.count(s) == 0) {
          ++fig.lost;
          report.Add("lost", absl::StrCat(consumer.name, " never received ", s, " (transaction ",
                                          txn.number, ")"));
        }
      }
    }
  }

  // The writer commits one transaction at a time, so commit order is its order:
  // each transaction's ids share one commit LSN, greater than the one before,
  // with indexes 0.. in statement order.
  std::optional<uint64_t> previous_lsn;
  for (const CommittedTxn& txn : ledger) {
    std::optional<uint64_t> lsn;
    for (size_t i = 0; i < txn.signatures.size(); ++i) {
      auto it = id_of.find(txn.signatures[i]);
      if (it == id_of.end()) continue;  // Reported as lost.
      const std::optional<EventId> id = ParseOrNone(it->second);
      if (!id) continue;
      if (id->index() != i) {
        report.Add("ledger-order", absl::StrCat("transaction ", txn.number, " change ",
                                                txn.signatures[i], " has id ", it->second,
                                                ", expected index ", i));
      }
      if (lsn && *lsn != id->commit_lsn()) {
        report.Add("ledger-order", absl::StrCat("transaction ", txn.number, " spans commit LSNs"));
      }
      lsn = id->commit_lsn();
    }
    if (!lsn) continue;
    if (previous_lsn && *lsn <= *previous_lsn) {
      report.Add("ledger-order", absl::StrCat("transaction ", txn.number,
                                              " has a commit LSN not after the one before"));
    }
    previous_lsn = lsn;
  }
  report.Summarize();
  return verdict;
}

}  // namespace walfeed::chaos
