// WireOut: protobuf wire bytes appended to a std::string through a cursor.
//
// Room is made once per piece (Reserve: one comparison when the string already
// has it), and the tags, lengths and values of the piece are then plain stores.
// Appending them to the string one by one checked its capacity, updated its
// length and wrote a terminator for each, which was about a third of the row
// writer's time on a W3 profile.
//
// Until Finish() (or the destructor), the string's size() also counts reserved
// bytes not written yet; Finish() cuts it to what was written. A string reserved
// once to a near-exact bound keeps that capacity: no more than std::string's own
// growth would have left.
#ifndef WALFEED_SERVER_WIRE_OUT_H_
#define WALFEED_SERVER_WIRE_OUT_H_

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>

#include "absl/strings/string_view.h"
#include "google/protobuf/io/coded_stream.h"

namespace walfeed::server {

class WireOut {
 public:
  // The most bytes a varint takes (a 64-bit value).
  static constexpr size_t kMaxVarint = 10;

  // Appends after what `out` holds.
  explicit WireOut(std::string* out)
      : out_(out), next_(out->data() + out->size()), end_(next_) {}
  WireOut(const WireOut&) = delete;
  WireOut& operator=(const WireOut&) = delete;
  ~WireOut() { Finish(); }

  // Room for `n` more bytes: the writes up to the next Reserve may add at most
  // `n` bytes in all. Writing past the room is undefined behaviour, as with any
  // buffer: every caller reserves each piece's bound before writing it.
  void Reserve(size_t n) {
    if (static_cast<size_t>(end_ - next_) < n) Grow(n);
  }

  void Byte(char byte) { *next_++ = byte; }
  void Varint(uint64_t value) {
    next_ = reinterpret_cast<char*>(google::protobuf::io::CodedOutputStream::WriteVarint64ToArray(
        value, reinterpret_cast<uint8_t*>(next_)));
  }
  void Bytes(absl::string_view bytes) {
    if (bytes.empty()) return;  // memcpy wants a valid pointer even for 0 bytes.
    std::memcpy(next_, bytes.data(), bytes.size());
    next_ += bytes.size();
  }

  // Bytes in the string that were written (including what it held before).
  size_t size() const { return static_cast<size_t>(next_ - out_->data()); }
  // Cuts the string to what was written. Writing may go on after it.
  void Finish() {
    out_->resize(size());
    end_ = next_;
  }

 private:
  void Grow(size_t n);

  std::string* const out_;
  char* next_;  // Where the next byte goes.
  char* end_;   // out_->data() + out_->size(): the end of the room.
};

}  // namespace walfeed::server

#endif  // WALFEED_SERVER_WIRE_OUT_H_
