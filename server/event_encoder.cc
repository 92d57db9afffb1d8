#include "server/event_encoder.h"

#include "google/protobuf/arena.h"
#include "server/event_convert.h"
#include "walfeed/v1/change_stream.pb.h"

namespace walfeed::server {

BufferedEvent EventEncoder::Encode(const replication::ChangeEvent& event, bool compact) {
  BufferedEvent encoded;
  encoded.id = event.id;
  if (!rows_.WriteBoth(event, &encoded.serialized, &encoded.key,
                       compact ? &encoded.compact : nullptr, &encoded.shape_ref, &encoded.shape)) {
    google::protobuf::Arena arena(block_.get(), kBlockBytes);
    auto* converted = google::protobuf::Arena::CreateMessage<walfeed::v1::ChangeEvent>(&arena);
    ToProto(event, converted);
    converted->SerializeToString(&encoded.serialized);
    encoded.key = FilterKey::Of(*converted);
  }
  encoded.bytes = BufferedBytes(encoded);
  return encoded;
}

}  // namespace walfeed::server
