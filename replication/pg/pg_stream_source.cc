#include "replication/pg/pg_stream_source.h"

#include <algorithm>
#include <chrono>
#include <system_error>
#include <utility>

#include "absl/cleanup/cleanup.h"
#include "absl/random/random.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "replication/pg/pg_backfill_database.h"
#include "replication/pg/slot_report.h"
#include "replication/pg/table_checks.h"
#include "replication/retry.h"
#include "replication/status_macros.h"
#include "spdlog/spdlog.h"

namespace walfeed::replication::pg {

absl::StatusOr<PreparedSource> PgStreamSource::Prepare() {
  // Begun first, so that they overlap opening the checkpoint store; at
  // start-up they were begun with the lead's attempt (early_reads_).
  StartReads reads = [this] {
    absl::MutexLock lock(&lead_mu_);
    if (!early_reads_) return StartReads::Begin(options_.config, options_.checkpoint_schema);
    StartReads taken = std::move(*early_reads_);
    early_reads_.reset();  // Moved from: waits for nothing.
    return taken;
  }();
  if (!committer_) {
    absl::StatusOr<std::unique_ptr<PgCheckpointStore>> store = PgCheckpointStore::Open(
        {options_.checkpoint_conninfo.empty() ? options_.config.conninfo
                                              : options_.checkpoint_conninfo,
         options_.checkpoint_schema});
    if (!store.ok()) return store.status();
    store_ = std::move(*store);
    committer_ = std::make_unique<GroupCommitter>(store_.get());
    confirmed_store_ =
        std::make_unique<CommittedConfirmedStore>(committer_.get(), options_.config.name);
  }
  const StreamConfig& config = options_.config;
  std::vector<InitialSnapshotTable> initial;
  SnapshotSteps steps;
  steps.before_slot = [this, &initial] { return RecordInitialSnapshot(&initial); };
  steps.import = [this, &config, &initial](const std::string& name) {
    // One connection per table at most: each reads another table at once.
    const size_t connections =
        std::clamp<size_t>(initial.size(), 1, config.snapshot_connections);
    return exported_->Import(config.conninfo, name, static_cast<int>(connections));
  };
  absl::StatusOr<PreparedStream> prepared =
      PrepareStream(config, committer_.get(), options_.checkpoint_schema, std::move(reads),
                    config.initial_snapshot ? &steps : nullptr);
  if (!prepared.ok()) return prepared.status();
  prepared_ = *prepared;
  // Before the stream's runners see this start (its generation): what the
  // store's load just found, or true when the initial snapshot may have
  // created the tables since.
  backfill_tables_->store(store_->backfill_tables() || prepared->provisioned.created_slot);
  // The table warnings, when the start-up's reads could not look for them on
  // their connection (provisioning.h, TableChecks): looked for now, beside the
  // stream's start.
  // Not again while an earlier Prepare's check still runs (replacing its
  // future would wait for it); its queries are bounded by timeouts.
  const bool checking = table_warnings_.valid() &&
                        table_warnings_.wait_for(std::chrono::seconds(0)) !=
                            std::future_status::ready;
  if (prepared->provisioned.report.table_checks_deferred && !checking) {
    try {
      table_warnings_ = std::async(std::launch::async, [config] {
        absl::StatusOr<std::vector<std::string>> warnings = PublishedTableWarnings(config);
        if (!warnings.ok()) {
          spdlog::warn("stream {}: {}", config.name, TableChecksFailedWarning(warnings.status()));
          return;
        }
        for (const std::string& warning : *warnings) {
          spdlog::warn("stream {}: {}", config.name, warning);
        }
      });
    } catch (const std::system_error& e) {
      spdlog::warn("stream {}: the published tables were not checked (no thread: {})",
                   config.name, e.what());
    }
  }
  PreparedSource result;
  result.plan = prepared->plan;
  result.warnings = prepared->provisioned.report.warnings;
  result.warnings.insert(result.warnings.end(), prepared->plan.warnings.begin(),
                         prepared->plan.warnings.end());
  if (prepared->provisioned.created_publication) result.notes.push_back("created publication(s)");
  if (prepared->provisioned.created_slot) {
    result.notes.push_back(absl::StrCat("created slot ", options_.config.slot_name, " at ",
                                        prepared->provisioned.consistent_point.ToString()));
  }
  if (config.initial_snapshot && prepared->provisioned.created_slot) {
    if (prepared->provisioned.imported_snapshot) {
      result.notes.push_back(absl::StrCat(
          "initial snapshot: ", initial.size(), " table(s) read under the slot's exported "
          "snapshot by ", exported_->connections(), " connection(s), for every consumer"));
      result.initial_snapshot = std::move(initial);
    } else {
      exported_->Release();
      result.warnings.push_back(absl::StrCat(
          "initial snapshot: the slot's exported snapshot could not be imported (",
          prepared->provisioned.snapshot_error, "); its ", initial.size(),
          " table(s) are read with watermarks instead (consistent, but a row changed meanwhile "
          "may come both as a change and as a READ event)"));
    }
  } else if (config.initial_snapshot && !prepared->provisioned.created_slot &&
             !noted_existing_slot_) {
    result.notes.push_back(absl::StrCat(
        "snapshot: initial applies when walfeed creates the slot; slot ", config.slot_name,
        " existed, so no initial snapshot was started now (backfill a table with "
        "`walfeed backfill start`)"));
  }
  noted_existing_slot_ = true;
  return result;
}

absl::Status PgStreamSource::Run(const StartPlan& plan, AckTracker* tracker, StreamSink* sink) {
  if (!prepared_ || !confirmed_store_) {
    return absl::FailedPreconditionError("PgStreamSource::Run before a successful Prepare");
  }
  ReaderOptions reader_options =
      ReaderOptionsFor(options_.config, *prepared_, options_.checkpoint_schema);
  // The kept connection is this run's alone: a later run connects anew, and
  // one this run never took (stopped before its first session) is closed when
  // it returns, not held by the finished reader until the next run.
  const absl::Cleanup release_kept = [kept = std::move(prepared_->walsender)] {
    if (kept) (void)kept->Take();
  };
  reader_options.expected_slot = plan.identity;
  reader_options.deliver_after = plan.deliver_after;
  reader_options.max_feedback_interval = options_.max_feedback_interval;
  reader_options.min_persist_interval = options_.min_persist_interval;
  reader_options.read_coalesce = options_.read_coalesce;
  std::shared_ptr<StreamReader> reader;
  {
    absl::MutexLock lock(&mu_);
    if (stopped_) return absl::OkStatus();
    if (interrupted_) {
      interrupted_ = false;
      return absl::OkStatus();
    }
    reader = std::make_shared<StreamReader>(std::move(reader_options), tracker, sink,
                                            confirmed_store_.get());
    if (reader_) retired_.AddEarlier(reader_->stats());
    reader_ = reader;
  }
  absl::Status result = reader->Run(plan.start);
  absl::MutexLock lock(&mu_);
  interrupted_ = false;  // What interrupted this run is done.
  return result;
}

void PgStreamSource::Interrupt() {
  std::shared_ptr<StreamReader> reader;
  {
    absl::MutexLock lock(&mu_);
    interrupted_ = true;
    reader = reader_;
  }
  if (reader) reader->Stop();
}

void PgStreamSource::Stop() {
  std::shared_ptr<StreamReader> reader;
  {
    absl::MutexLock lock(&mu_);
    stopped_ = true;
    reader = reader_;
  }
  if (reader) reader->Stop();
}

void PgStreamSource::Wake() {
  std::shared_ptr<StreamReader> reader;
  {
    absl::MutexLock lock(&mu_);
    reader = reader_;
  }
  if (reader) reader->Wake();
}

ReaderStats PgStreamSource::stats() const {
  std::shared_ptr<StreamReader> reader;
  {
    absl::MutexLock lock(&mu_);
    reader = reader_;
  }
  return reader ? reader->stats() : ReaderStats{};
}

ReaderStats PgStreamSource::totals() const {
  std::shared_ptr<StreamReader> reader;
  ReaderStats totals;
  {
    absl::MutexLock lock(&mu_);
    reader = reader_;
    totals = retired_;
  }
  if (!reader) return totals;
  ReaderStats current = reader->stats();
  current.AddEarlier(totals);
  return current;
}

std::unique_ptr<BackfillDatabase> PgStreamSource::NewBackfillDatabase() {
  return std::make_unique<PgBackfillDatabase>(options_.config.conninfo,
                                              options_.checkpoint_conninfo,
                                              options_.checkpoint_schema, exported_,
                                              backfill_tables_);
}

absl::Status PgStreamSource::RecordInitialSnapshot(std::vector<InitialSnapshotTable>* tables) {
  const StreamConfig& config = options_.config;
  PgBackfillDatabase db(config.conninfo, options_.checkpoint_conninfo,
                        options_.checkpoint_schema);
  tables->clear();
  // What the stream needs from a running record: the table's oid and key.
  auto add = [&](const BackfillRecord& record, const BackfillTable& plan) {
    tables->push_back(InitialSnapshotTable{record.id, plan.relation->relation_id,
                                           plan.key_columns});
  };
  WALFEED_ASSIGN_OR_RETURN(std::vector<BackfillDatabase::Loaded> loaded, db.Load(config.name));
  for (const BackfillDatabase::Loaded& entry : loaded) {
    // An earlier Prepare stored them and then failed to create the slot.
    if (entry.record.initial_snapshot && entry.record.state == BackfillState::kRunning &&
        entry.chunks.empty()) {
      WALFEED_ASSIGN_OR_RETURN(BackfillTable plan,
                               db.Plan(config.publication_names, entry.record.table, ""));
      add(entry.record, plan);
    }
  }
  if (!tables->empty()) return absl::OkStatus();
  WALFEED_ASSIGN_OR_RETURN(std::vector<TableName> published,
                           db.PublishedTables(config.publication_names));
  for (const TableName& table : published) {
    BackfillRecord record;
    record.stream = config.name;
    record.table = table;
    record.chunk_rows = kDefaultChunkRows;
    record.initial_snapshot = true;
    absl::StatusOr<BackfillTable> plan = db.Plan(config.publication_names, table, "");
    if (plan.ok()) {
      record.key_columns = plan->key_columns;
    } else if (IsTransient(plan.status())) {
      return plan.status();
    } else {
      // No usable key: on record as failed, with the statement that adds one.
      record.state = BackfillState::kFailed;
      record.error = std::string(plan.status().message());
    }
    WALFEED_ASSIGN_OR_RETURN(BackfillRecord created, db.Create(std::move(record)));
    if (plan.ok()) add(created, *plan);
  }
  return absl::OkStatus();
}

absl::StatusOr<SlotReport> PgStreamSource::ReadSlot() {
  return ReadSlotReport(options_.config.conninfo, options_.config.slot_name);
}

namespace {
std::string NewInstanceId() {
  return absl::StrFormat("%08x", absl::Uniform<uint32_t>(absl::BitGen()));
}
}  // namespace

PgStreamSource::PgStreamSource(SourceOptions options)
    : options_(std::move(options)),
      lead_(LeaderLock::Options{
          options_.checkpoint_conninfo.empty() ? options_.config.conninfo
                                               : options_.checkpoint_conninfo,
          absl::StrCat(options_.checkpoint_schema, "/", options_.config.name),
          options_.instance_id.empty() ? NewInstanceId() : options_.instance_id,
          options_.advertise_address, options_.config.slot_name,
          StreamWalsenderName(options_.checkpoint_schema, options_.config.name)}) {}

absl::StatusOr<bool> PgStreamSource::TryLead() {
  absl::MutexLock lock(&lead_mu_);
  if (!lead_tried_) {
    lead_tried_ = true;
    // Read-only, so harmless without the lead; what they read is as fresh as
    // when Prepare() begins them, since nothing confirms the slot past what
    // the checkpoint store holds, which Prepare() loads after taking the lead.
    early_reads_.emplace(StartReads::Begin(options_.config, options_.checkpoint_schema));
  }
  absl::StatusOr<bool> leads = lead_.TryAcquire();
  if (!leads.ok() || !*leads) early_reads_.reset();  // Abandoned: no preflight begins.
  absl::MutexLock state(&mu_);
  leader_ = leads.ok() ? lead_.holder() : "";
  return leads;
}

absl::Status PgStreamSource::CheckLead() {
  absl::MutexLock lock(&lead_mu_);
  return lead_.Check();
}

void PgStreamSource::Resign() {
  {
    absl::MutexLock lock(&lead_mu_);
    lead_.Release();
  }
  // Prepared but not run (the lead was lost in between): a standby holds no
  // WAL sender. Resign() is called on the thread that prepares and runs, or
  // once that thread has been joined.
  if (prepared_) prepared_->walsender.reset();
}

std::string PgStreamSource::Leader() {
  absl::MutexLock lock(&mu_);
  return leader_;
}

std::unique_ptr<StreamSource> MakePgStreamSource(SourceOptions options) {
  return std::make_unique<PgStreamSource>(std::move(options));
}

}  // namespace walfeed::replication::pg
