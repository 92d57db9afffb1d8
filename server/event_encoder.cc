#include "server/event_encoder.h"

#include <memory>
#include <utility>

#include "google/protobuf/arena.h"
#include "server/event_convert.h"
#include "walfeed/v1/change_stream.pb.h"

namespace walfeed::server {

BufferedEvent EventEncoder::Encode(const replication::ChangeEvent& event, FormMask wanted) {
  BufferedEvent encoded;
  encoded.id = event.id;
  wanted &= static_cast<FormMask>(~1u);  // The full text form is `serialized`.
  auto forms = wanted != 0 ? std::make_shared<EventForms>() : nullptr;
  if (rows_.WriteForms(event, wanted, &encoded.serialized, &encoded.key, forms.get())) {
    encoded.forms = std::move(forms);
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
