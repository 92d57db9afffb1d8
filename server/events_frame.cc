#include "server/events_frame.h"

#include <cstdint>

#include "google/protobuf/io/coded_stream.h"
#include "google/protobuf/wire_format_lite.h"
#include "walfeed/v1/change_stream.pb.h"

namespace walfeed::server {
namespace {

using google::protobuf::internal::WireFormatLite;
using google::protobuf::io::CodedOutputStream;

uint32_t LengthDelimitedTag(int field_number) {
  return WireFormatLite::MakeTag(field_number, WireFormatLite::WIRETYPE_LENGTH_DELIMITED);
}

// Bytes of a length-delimited field (tag, length, payload) of `size` payload bytes.
size_t FieldSize(uint32_t tag, size_t size) {
  return CodedOutputStream::VarintSize32(tag) +
         CodedOutputStream::VarintSize32(static_cast<uint32_t>(size)) + size;
}

// Writes tag and length at `out` and returns the position after them.
uint8_t* WriteHeader(uint32_t tag, size_t size, uint8_t* out) {
  out = CodedOutputStream::WriteVarint32ToArray(tag, out);
  return CodedOutputStream::WriteVarint32ToArray(static_cast<uint32_t>(size), out);
}

}  // namespace

void ComposeEventsFrame(absl::Span<const std::string* const> events, std::string* frame,
                        absl::string_view passed,
                        absl::Span<const std::string* const> relations) {
  const uint32_t event_tag = LengthDelimitedTag(walfeed::v1::EventBatch::kEventsFieldNumber);
  const uint32_t passed_tag = LengthDelimitedTag(walfeed::v1::EventBatch::kPassedFieldNumber);
  const uint32_t relation_tag =
      LengthDelimitedTag(walfeed::v1::EventBatch::kRelationsFieldNumber);
  const uint32_t batch_tag =
      LengthDelimitedTag(walfeed::v1::SubscribeResponse::kEventsFieldNumber);
  size_t batch_size = 0;
  for (const std::string* event : events) batch_size += FieldSize(event_tag, event->size());
  if (!passed.empty()) batch_size += FieldSize(passed_tag, passed.size());
  for (const std::string* relation : relations) {
    batch_size += FieldSize(relation_tag, relation->size());
  }
  frame->resize(FieldSize(batch_tag, batch_size));
  uint8_t* out = reinterpret_cast<uint8_t*>(frame->data());
  out = WriteHeader(batch_tag, batch_size, out);
  for (const std::string* event : events) {
    out = WriteHeader(event_tag, event->size(), out);
    out = CodedOutputStream::WriteRawToArray(event->data(), static_cast<int>(event->size()), out);
  }
  if (!passed.empty()) {
    out = WriteHeader(passed_tag, passed.size(), out);
    out = CodedOutputStream::WriteRawToArray(passed.data(), static_cast<int>(passed.size()), out);
  }
  for (const std::string* relation : relations) {
    out = WriteHeader(relation_tag, relation->size(), out);
    out = CodedOutputStream::WriteRawToArray(relation->data(), static_cast<int>(relation->size()),
                                             out);
  }
}

}  // namespace walfeed::server
