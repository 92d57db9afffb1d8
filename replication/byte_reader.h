// ByteReader: bounds-checked big-endian reads over bytes that came off the network.
//
// Replication bytes are untrusted input, so every read either succeeds or returns
// a DataLoss status naming what was being read and at which offset; nothing ever
// reads past the end, returns a sentinel 0, or asserts. Views returned by
// ReadBytes/ReadCString point into the caller's buffer and live as long as it.
#ifndef WALFEED_REPLICATION_BYTE_READER_H_
#define WALFEED_REPLICATION_BYTE_READER_H_

#include <cstddef>
#include <cstdint>
#include <type_traits>

#include "absl/base/optimization.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"

namespace walfeed::replication {

class ByteReader {
 public:
  explicit ByteReader(absl::Span<const uint8_t> bytes) : bytes_(bytes) {}

  // `what` names the field in error messages ("relation id", "column count").
  // Inline: the decoders make several of these reads per column of every row,
  // and a call per read showed in the reader thread's profile.
  absl::StatusOr<uint8_t> ReadUint8(absl::string_view what) { return Read<uint8_t>(what); }
  absl::StatusOr<int16_t> ReadInt16(absl::string_view what) { return Read<int16_t>(what); }
  absl::StatusOr<uint32_t> ReadUint32(absl::string_view what) { return Read<uint32_t>(what); }
  absl::StatusOr<int32_t> ReadInt32(absl::string_view what) { return Read<int32_t>(what); }
  absl::StatusOr<uint64_t> ReadUint64(absl::string_view what) { return Read<uint64_t>(what); }
  absl::StatusOr<int64_t> ReadInt64(absl::string_view what) { return Read<int64_t>(what); }

  // Exactly `n` bytes.
  absl::StatusOr<absl::string_view> ReadBytes(size_t n, absl::string_view what) {
    if (ABSL_PREDICT_FALSE(remaining() < n)) return Truncated(n, what);
    absl::string_view view(reinterpret_cast<const char*>(bytes_.data()) + offset_, n);
    offset_ += n;
    return view;
  }

  // A NUL-terminated string; the view excludes the NUL, the reader skips it.
  absl::StatusOr<absl::string_view> ReadCString(absl::string_view what);

  // OK only if every byte was consumed: a message with trailing bytes is as
  // malformed as a truncated one.
  absl::Status ExpectEnd(absl::string_view what) const;

  size_t offset() const { return offset_; }
  size_t remaining() const { return bytes_.size() - offset_; }

 private:
  absl::Status Truncated(size_t need, absl::string_view what) const;
  // A big-endian integer of sizeof(T) bytes; a signed T takes the bits as
  // two's complement.
  template <typename T>
  absl::StatusOr<T> Read(absl::string_view what) {
    if (ABSL_PREDICT_FALSE(remaining() < sizeof(T))) return Truncated(sizeof(T), what);
    uint64_t value = 0;
    for (size_t i = 0; i < sizeof(T); ++i) value = (value << 8) | bytes_[offset_ + i];
    offset_ += sizeof(T);
    return static_cast<T>(static_cast<std::make_unsigned_t<T>>(value));
  }

  absl::Span<const uint8_t> bytes_;
  size_t offset_ = 0;  // Invariant: offset_ <= bytes_.size().
};

}  // namespace walfeed::replication

#endif  // WALFEED_REPLICATION_BYTE_READER_H_
