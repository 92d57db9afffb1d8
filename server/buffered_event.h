// BufferedEvent: one change event as the stream layer holds it between the
// reader and the sessions: serialized once, with what filters look at beside it.
#ifndef WALFEED_SERVER_BUFFERED_EVENT_H_
#define WALFEED_SERVER_BUFFERED_EVENT_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "replication/event_id.h"
#include "server/filter.h"

namespace walfeed::server {

using replication::EventId;

struct BufferedEvent {
  EventId id;
  size_t bytes = 0;        // What the event costs in the buffer.
  std::string serialized;  // walfeed.v1.ChangeEvent, wire format.
  FilterKey key;
  // The compact form (SubscribeRequest.event_form), for row events converted
  // while a compact session was possible: the event without its columns'
  // metadata, naming `shape` by its ref. Empty otherwise (and after the spill:
  // such events go out in the full form, which every client reads).
  std::string compact;
  uint32_t shape_ref = 0;
  // Serialized walfeed.v1.RelationShape, shared by the events of one relation
  // version.
  std::shared_ptr<const std::string> shape;
};

// What `event` costs in memory, roughly: its serialized bytes, the struct, and
// the table names beyond what sizeof counts. The same whether the event was
// encoded or read back from the spill, so windows count it the same either way.
inline size_t BufferedBytes(const BufferedEvent& event) {
  size_t bytes = event.serialized.size() + event.compact.size() + sizeof(BufferedEvent);
  for (const auto& [schema, table] : event.key.tables) bytes += schema.size() + table.size();
  bytes += event.key.audience.size();
  return bytes;
}

}  // namespace walfeed::server

#endif  // WALFEED_SERVER_BUFFERED_EVENT_H_
