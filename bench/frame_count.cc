#include "frame_count.h"

#include <cstddef>

namespace walfeed::bench {
namespace {

// Reads bytes across the pieces; every read fails cleanly at the end.
class Cursor {
 public:
  explicit Cursor(const std::vector<std::string_view>& pieces) : pieces_(pieces) {}

  uint64_t consumed() const { return consumed_; }
  bool AtEnd() {
    while (piece_ < pieces_.size() && offset_ == pieces_[piece_].size()) NextPiece();
    return piece_ == pieces_.size();
  }

  bool Byte(uint8_t* out) {
    if (AtEnd()) return false;
    *out = static_cast<uint8_t>(pieces_[piece_][offset_++]);
    ++consumed_;
    return true;
  }

  bool Varint(uint64_t* out) {
    uint64_t value = 0;
    for (int shift = 0; shift < 64; shift += 7) {
      uint8_t b;
      if (!Byte(&b)) return false;
      value |= static_cast<uint64_t>(b & 0x7f) << shift;
      if ((b & 0x80) == 0) {
        *out = value;
        return true;
      }
    }
    return false;  // More than ten bytes: not a varint.
  }

  bool Copy(uint64_t n, std::string* out) {
    out->clear();
    while (n > 0) {
      if (AtEnd()) return false;
      const uint64_t here = pieces_[piece_].size() - offset_;
      const uint64_t step = n < here ? n : here;
      out->append(pieces_[piece_].data() + offset_, step);
      offset_ += step;
      consumed_ += step;
      n -= step;
    }
    return true;
  }

  bool Skip(uint64_t n) {
    while (n > 0) {
      if (AtEnd()) return false;
      const uint64_t here = pieces_[piece_].size() - offset_;
      const uint64_t step = n < here ? n : here;
      offset_ += step;
      consumed_ += step;
      n -= step;
    }
    return true;
  }

 private:
  void NextPiece() {
    ++piece_;
    offset_ = 0;
  }

  const std::vector<std::string_view>& pieces_;
  size_t piece_ = 0;
  size_t offset_ = 0;
  uint64_t consumed_ = 0;
};

// Skips one field's payload of the given wire type.
bool SkipPayload(Cursor& in, uint64_t wire_type) {
  uint64_t n;
  switch (wire_type) {
    case 0: return in.Varint(&n);
    case 1: return in.Skip(8);
    case 2: return in.Varint(&n) && in.Skip(n);
    case 5: return in.Skip(4);
    default: return false;  // Groups are not used by walfeed.v1.
  }
}

}  // namespace

FrameCount CountFrameEvents(const std::vector<std::string_view>& pieces) {
  FrameCount result;
  Cursor in(pieces);
  while (!in.AtEnd()) {
    uint64_t tag;
    if (!in.Varint(&tag)) return result;
    if (tag != ((2 << 3) | 2)) {  // Not SubscribeResponse.events.
      if (!SkipPayload(in, tag & 7)) return result;
      continue;
    }
    result.events = true;
    uint64_t length;
    if (!in.Varint(&length)) return result;
    const uint64_t end = in.consumed() + length;
    while (in.consumed() < end) {
      uint64_t inner;
      if (!in.Varint(&inner)) return result;
      if (inner != ((1 << 3) | 2)) {  // Not EventBatch.events.
        if (!SkipPayload(in, inner & 7)) return result;
        continue;
      }
      ++result.count;
      uint64_t event_length;
      if (!in.Varint(&event_length)) return result;
      const uint64_t event_end = in.consumed() + event_length;
      // Protobuf writes fields in number order: the id (field 1) comes first.
      uint64_t first_tag, id_length;
      if (event_length > 0 && in.Varint(&first_tag) && first_tag == ((1 << 3) | 2) &&
          in.Varint(&id_length) && in.consumed() + id_length <= event_end) {
        if (!in.Copy(id_length, &result.last_id)) return result;
      } else {
        result.last_id.clear();
      }
      if (in.consumed() > event_end || !in.Skip(event_end - in.consumed())) return result;
    }
    if (in.consumed() != end) return result;
  }
  result.valid = true;
  return result;
}

}  // namespace walfeed::bench
