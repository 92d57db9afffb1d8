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

// The compact form (SubscribeRequest.event_form) of a row event: the event
// without its columns' metadata, naming `shape` by `shape_ref`.
struct CompactForm {
  std::string serialized;
  uint32_t shape_ref = 0;
  // Serialized walfeed.v1.RelationShape, shared by the events of one relation
  // version.
  std::shared_ptr<const std::string> shape;
};

struct BufferedEvent {
  EventId id;
  size_t bytes = 0;        // What the event costs in the buffer.
  std::string serialized;  // walfeed.v1.ChangeEvent, wire format.
  FilterKey key;
  // For row events converted while a compact session was possible; null
  // otherwise (and after the spill: such events go out in the full form, which
  // every client reads). A pointer, so events without it cost 16 bytes, not 56.
  std::shared_ptr<const CompactForm> compact;
};

// What `event` costs in memory, roughly: its serialized bytes, the struct, and
// the table names beyond what sizeof counts. The same whether the event was
// encoded or read back from the spill, so windows count it the same either way.
inline size_t BufferedBytes(const BufferedEvent& event) {
  size_t bytes = event.serialized.size() + sizeof(BufferedEvent);
  if (event.compact) bytes += event.compact->serialized.size() + sizeof(CompactForm);
  for (const auto& [schema, table] : event.key.tables) bytes += schema.size() + table.size();
  bytes += event.key.audience.size();
  return bytes;
}

}  // namespace walfeed::server

#endif  // WALFEED_SERVER_BUFFERED_EVENT_H_
