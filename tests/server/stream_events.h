// Events for the stream layer's unit tests: INSERTs into a named table, as the
// reader would hand them over, and as the stream buffer holds them.
#ifndef WALFEED_TESTS_SERVER_STREAM_EVENTS_H_
#define WALFEED_TESTS_SERVER_STREAM_EVENTS_H_

#include <memory>
#include <string>
#include <vector>

#include "replication/event_id.h"
#include "replication/relation_cache.h"
#include "replication/transaction_assembler.h"
#include "server/event_encoder.h"
#include "walfeed/v1/change_stream.pb.h"

namespace walfeed::testing {

inline replication::EventId Id(uint64_t commit_lsn, uint32_t index) {
  return replication::EventId{replication::Lsn(commit_lsn), index};
}

inline replication::ChangeEvent InsertInto(replication::EventId id, const std::string& table) {
  auto relation = std::make_shared<replication::RelationInfo>();
  relation->relation_id = 16384;
  relation->schema = "public";
  relation->table = table;
  replication::ChangeEvent event;
  event.id = id;
  event.op = replication::ChangeEvent::Op::kInsert;
  event.relation = std::move(relation);
  return event;
}

inline server::BufferedEvent Buffered(replication::EventId id, const std::string& table = "t") {
  server::EventEncoder encoder;
  return encoder.Encode(InsertInto(id, table));
}

// The ids of the events in a serialized SubscribeResponse events frame.
inline std::vector<std::string> FrameIds(const std::string& frame) {
  walfeed::v1::SubscribeResponse response;
  std::vector<std::string> ids;
  if (!response.ParseFromString(frame)) return {"<unparseable>"};
  for (const auto& event : response.events().events()) ids.push_back(event.id());
  return ids;
}

}  // namespace walfeed::testing

#endif  // WALFEED_TESTS_SERVER_STREAM_EVENTS_H_
