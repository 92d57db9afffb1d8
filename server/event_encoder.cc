#include "server/event_encoder.h"

#include <memory>
#include <utility>

#include "google/protobuf/arena.h"
#include "server/event_convert.h"
#include "walfeed/v1/change_stream.pb.h"

namespace walfeed::server {

BufferedEvent EventEncoder::Encode(const replication::ChangeEvent& event, bool compact) {
  BufferedEvent encoded;
  encoded.id = event.id;
  auto form = compact ? std::make_shared<CompactForm>() : nullptr;
  if (rows_.WriteBoth(event, &encoded.serialized, &encoded.key,
                      form ? &form->serialized : nullptr, form ? &form->shape_ref : nullptr,
                      form ? &form->shape : nullptr)) {
    encoded.compact = std::move(form);
  } else {
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
