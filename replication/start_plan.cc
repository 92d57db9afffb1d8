#include "replication/start_plan.h"

#include <algorithm>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "replication/error_reason.h"
#include "replication/sql_text.h"
#include "replication/status_macros.h"

namespace walfeed::replication {
namespace {

std::string Quoted(absl::string_view name) { return absl::StrCat("\"", name, "\""); }

// "Consumers received changes up to <id>": what walfeed knows was delivered, so
// the reader of an error can tell how far the loss starts.
std::string DeliveredUpTo(const StreamCheckpoint& stored) {
  EventId newest;
  for (const auto& [name, id] : stored.consumers) newest = std::max(newest, id);
  if (stored.consumers.empty()) return "";
  return absl::StrCat(" (consumers acked up to ", newest.ToString(), ")");
}

absl::Status SlotMissing(const SlotCheck& check, Lsn stored, absl::string_view delivered) {
  return reason::WithReason(
      absl::DataLossError(absl::StrCat(
          "replication slot ", Quoted(check.slot_name), " of stream ", Quoted(check.stream),
          " no longer exists, but walfeed had confirmed it up to ", stored.ToString(), delivered,
          ": it was dropped outside walfeed (or invalidated and removed), so changes committed "
          "after ",
          stored.ToString(),
          " that consumers have not received may be lost. walfeed does not recreate a slot "
          "silently. ",
          RecoveryHint(check.stream, check.checkpoint_schema))),
      reason::kSlotLost, {{"stream", check.stream}, {"slot", check.slot_name}});
}

absl::Status SlotLost(const SlotCheck& check, Lsn stored) {
  return reason::WithReason(
      absl::DataLossError(absl::StrCat(
          "replication slot ", Quoted(check.slot_name), " of stream ", Quoted(check.stream),
          " was invalidated (wal_status = lost): PostgreSQL removed WAL it still needed, so "
          "changes after ",
          stored.ToString(),
          " that consumers have not received are lost. To recover: raise max_slot_wal_keep_size "
          "(or set it to -1) so a lagging consumer cannot lose data again, drop the slot "
          "(SELECT pg_drop_replication_slot('",
          check.slot_name, "')), then ", RecoveryHint(check.stream, check.checkpoint_schema))),
      reason::kSlotLost, {{"stream", check.stream}, {"slot", check.slot_name}});
}

absl::Status CheckBound(const SlotCheck& check, const SlotIdentity& identity, Lsn stored,
                        absl::string_view delivered) {
  if (!check.slot) return SlotMissing(check, stored, delivered);
  const SlotState& slot = *check.slot;
  if (slot.wal_status == "lost") return SlotLost(check, stored);
  const SlotIdentity now = IdentityOf(slot, check.system_identifier);
  if (now != identity) {
    return reason::WithReason(
        absl::DataLossError(absl::StrCat(
            "replication slot ", Quoted(check.slot_name), " of stream ", Quoted(check.stream),
            " is not the slot walfeed was streaming from: walfeed bound it in cluster ",
            identity.system_identifier, ", database oid ", identity.database_oid, ", plugin ",
            Quoted(identity.plugin), ", but it is now in cluster ", now.system_identifier,
            ", database oid ", now.database_oid, ", plugin ", Quoted(now.plugin),
            ". The slot (or the whole database) was recreated, so changes after ",
            stored.ToString(), delivered,
            " may be lost. To recover: ", RecoveryHint(check.stream, check.checkpoint_schema),
            " Because positions of a different cluster cannot be compared, also delete the "
            "consumer checkpoints.")),
        reason::kSlotReplaced, {{"stream", check.stream}, {"slot", check.slot_name}});
  }
  if (slot.confirmed_flush > stored) {
    return reason::WithReason(
        absl::DataLossError(absl::StrCat(
            "replication slot ", Quoted(check.slot_name), " of stream ", Quoted(check.stream),
            " has confirmed_flush_lsn ", slot.confirmed_flush.ToString(),
            ", past the position walfeed stored and confirmed (", stored.ToString(),
            "): it was advanced (pg_replication_slot_advance, another client) or dropped and "
            "recreated outside walfeed, so changes committed between ",
            stored.ToString(), " and ", slot.confirmed_flush.ToString(),
            " were never delivered and cannot be read from this slot. To recover: ",
            RecoveryHint(check.stream, check.checkpoint_schema))),
        reason::kSlotReplaced, {{"stream", check.stream}, {"slot", check.slot_name}});
  }
  return absl::OkStatus();
}

EventId MinConsumer(const absl::flat_hash_map<std::string, EventId>& consumers) {
  if (consumers.empty()) return EventId{};
  EventId lowest = consumers.begin()->second;
  for (const auto& [name, id] : consumers) lowest = std::min(lowest, id);
  return lowest;
}

}  // namespace

SlotIdentity IdentityOf(const SlotState& slot, uint64_t system_identifier) {
  return SlotIdentity{system_identifier, slot.database_oid, slot.plugin};
}

std::string RecoveryHint(absl::string_view stream, absl::string_view checkpoint_schema) {
  const std::string schema = QuoteIdentifier(checkpoint_schema);
  return absl::StrCat(
      "re-sync what consumers may have missed from the tables themselves, then accept the "
      "slot as it is now by forgetting the stream's stored position (DELETE FROM ",
      schema, ".stream_checkpoints WHERE stream = ", QuoteLiteral(stream),
      ") and restart walfeed: it binds the existing slot, or creates one when "
      "create_missing is set. Consumer checkpoints are kept; to restart consumers from "
      "scratch also run DELETE FROM ",
      schema, ".consumer_checkpoints WHERE stream = ", QuoteLiteral(stream), ".");
}

absl::StatusOr<StartPlan> PlanStart(const SlotCheck& check, const StreamCheckpoint& stored) {
  StartPlan plan;
  for (const auto& [name, id] : stored.consumers) {
    (stored.detached.contains(name) ? plan.detached : plan.consumers)[name] = id;
  }
  plan.deliver_after = MinConsumer(plan.consumers);
  const std::string delivered = DeliveredUpTo(stored);

  if (stored.slot_bound()) {
    if (stored.slot_name != check.slot_name) {
      return reason::WithReason(
          absl::FailedPreconditionError(absl::StrCat(
              "stream ", Quoted(check.stream), " is configured with slot ", Quoted(check.slot_name),
              " but its checkpoint is bound to slot ", Quoted(stored.slot_name), " at ",
              stored.confirmed_lsn.ToString(),
              ": another slot has another position, so switching would skip or repeat changes. "
              "Configure slot ",
              Quoted(stored.slot_name), " again, or, to move the stream to the new slot, ",
              RecoveryHint(check.stream, check.checkpoint_schema))),
          reason::kSlotReplaced, {{"stream", check.stream}, {"slot", check.slot_name}});
    }
    WALFEED_RETURN_IF_ERROR(
        CheckBound(check, stored.slot_identity, stored.confirmed_lsn, delivered));
    plan.start = stored.confirmed_lsn;
    plan.identity = stored.slot_identity;
    return plan;
  }

  // Not bound: walfeed never streamed from a slot for this stream (or an operator
  // forgot the stored position to accept the slot as it is).
  if (!check.slot) {
    if (stored.confirmed_lsn.valid()) {
      return SlotMissing(check, stored.confirmed_lsn, delivered);
    }
    return reason::WithReason(
        absl::NotFoundError(absl::StrCat(
            "replication slot ", Quoted(check.slot_name), " of stream ", Quoted(check.stream),
            " does not exist: create it (SELECT pg_create_logical_replication_slot('",
            check.slot_name, "', 'pgoutput')) or set create_missing so walfeed creates it")),
        reason::kSlotNotFound, {{"stream", check.stream}, {"slot", check.slot_name}});
  }
  if (check.slot->wal_status == "lost") return SlotLost(check, stored.confirmed_lsn);
  if (stored.confirmed_lsn.valid() && check.slot->confirmed_flush > stored.confirmed_lsn) {
    WALFEED_RETURN_IF_ERROR(CheckBound(check, IdentityOf(*check.slot, check.system_identifier),
                                       stored.confirmed_lsn, delivered));
  }
  plan.start = std::max(stored.confirmed_lsn, check.slot->confirmed_flush);
  plan.identity = IdentityOf(*check.slot, check.system_identifier);
  plan.bind = true;
  if (!stored.consumers.empty()) {
    std::vector<std::string> names;
    for (const auto& [name, id] : stored.consumers) names.push_back(absl::StrCat(name, " at ", id.ToString()));
    std::sort(names.begin(), names.end());
    plan.warnings.push_back(absl::StrCat(
        "stream ", Quoted(check.stream), " binds slot ", Quoted(check.slot_name), " at ",
        plan.start.ToString(),
        " while consumer checkpoints exist from before: ", absl::StrJoin(names, ", "),
        "; each consumer skips events at or below its checkpoint"));
  }
  return plan;
}

absl::Status CheckResume(const SlotCheck& check, const SlotIdentity& identity, Lsn durable) {
  return CheckBound(check, identity, durable, "");
}

absl::Status ExplainStartFailure(const absl::Status& status, const SlotCheck& check,
                                 Lsn durable) {
  const std::string sqlstate = SqlStateOf(status);
  if (sqlstate == "42704") return SlotMissing(check, durable, "");
  if (sqlstate == "55000" && absl::StrContains(status.message(), "replication slot")) {
    return SlotLost(check, durable);
  }
  return status;
}

}  // namespace walfeed::replication
