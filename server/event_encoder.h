// EventEncoder: a replication event, converted once to the API's ChangeEvent and
// serialized, ready for the stream buffer (with its filter key and its cost in
// the buffer). Row events are written straight to wire bytes (RowEventWriter);
// TRUNCATE and MESSAGE go through ToProto. Runs on the reader thread; one
// encoder per stream.
#ifndef WALFEED_SERVER_EVENT_ENCODER_H_
#define WALFEED_SERVER_EVENT_ENCODER_H_

#include <cstddef>
#include <memory>

#include "replication/transaction_assembler.h"
#include "server/row_event_writer.h"
#include "server/stream_buffer.h"

namespace walfeed::server {

class EventEncoder {
 public:
  // `wanted`: the other forms a row event also gets (BufferedEvent::forms);
  // the full text form is always made.
  BufferedEvent Encode(const replication::ChangeEvent& event, FormMask wanted = 0);

 private:
  // The converted message lives only until it is serialized: built on an arena
  // whose first block is reused, its messages and short strings cost no
  // allocation (strings longer than 15 bytes still do).
  static constexpr size_t kBlockBytes = 64 << 10;
  const std::unique_ptr<char[]> block_{new char[kBlockBytes]};
  RowEventWriter rows_;
};

}  // namespace walfeed::server

#endif  // WALFEED_SERVER_EVENT_ENCODER_H_
