// BufferedEvent: one change event as the stream layer holds it between the
// reader and the sessions: serialized once, with what filters look at beside it.
#ifndef WALFEED_SERVER_BUFFERED_EVENT_H_
#define WALFEED_SERVER_BUFFERED_EVENT_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "replication/event_id.h"
#include "server/event_forms.h"
#include "server/filter.h"

namespace walfeed::server {

using replication::EventId;

struct BufferedEvent {
  EventId id;
  size_t bytes = 0;        // What the event costs in the buffer.
  std::string serialized;  // walfeed.v1.ChangeEvent, wire format.
  FilterKey key;
  // Row events converted while a session wanted another form (compact, typed
  // values): those forms. Null otherwise, and after the spill (a session then
  // converts the full form itself: SessionFramer). A pointer, so events
  // without it cost 16 bytes.
  std::shared_ptr<const EventForms> forms;
};

// What `event` costs in memory, roughly: its serialized bytes, the struct, and
// the table names beyond what sizeof counts. The same whether the event was
// encoded or read back from the spill, so windows count it the same either way.
inline size_t BufferedBytes(const BufferedEvent& event) {
  size_t bytes = event.serialized.size() + sizeof(BufferedEvent);
  if (event.forms) bytes += event.forms->bytes();
  for (const auto& [schema, table] : event.key.tables) bytes += schema.size() + table.size();
  bytes += event.key.audience.size();
  return bytes;
}

}  // namespace walfeed::server

#endif  // WALFEED_SERVER_BUFFERED_EVENT_H_
