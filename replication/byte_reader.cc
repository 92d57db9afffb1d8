#include "replication/byte_reader.h"

#include "absl/strings/str_cat.h"

namespace walfeed::replication {

absl::Status ByteReader::Truncated(size_t need, absl::string_view what) const {
  return absl::DataLossError(absl::StrCat("truncated message: reading ", what,
                                          " needs ", need, " bytes at offset ", offset_,
                                          " but only ", remaining(), " remain"));
}

absl::StatusOr<uint64_t> ByteReader::ReadBigEndian(size_t width, absl::string_view what) {
  if (remaining() < width) return Truncated(width, what);
  uint64_t value = 0;
  for (size_t i = 0; i < width; ++i) value = (value << 8) | bytes_[offset_ + i];
  offset_ += width;
  return value;
}

absl::StatusOr<uint8_t> ByteReader::ReadUint8(absl::string_view what) {
  absl::StatusOr<uint64_t> v = ReadBigEndian(1, what);
  if (!v.ok()) return v.status();
  return static_cast<uint8_t>(*v);
}

absl::StatusOr<int16_t> ByteReader::ReadInt16(absl::string_view what) {
  absl::StatusOr<uint64_t> v = ReadBigEndian(2, what);
  if (!v.ok()) return v.status();
  return static_cast<int16_t>(static_cast<uint16_t>(*v));
}

absl::StatusOr<uint32_t> ByteReader::ReadUint32(absl::string_view what) {
  absl::StatusOr<uint64_t> v = ReadBigEndian(4, what);
  if (!v.ok()) return v.status();
  return static_cast<uint32_t>(*v);
}

absl::StatusOr<int32_t> ByteReader::ReadInt32(absl::string_view what) {
  absl::StatusOr<uint32_t> v = ReadUint32(what);
  if (!v.ok()) return v.status();
  return static_cast<int32_t>(*v);
}

absl::StatusOr<uint64_t> ByteReader::ReadUint64(absl::string_view what) {
  return ReadBigEndian(8, what);
}

absl::StatusOr<int64_t> ByteReader::ReadInt64(absl::string_view what) {
  absl::StatusOr<uint64_t> v = ReadBigEndian(8, what);
  if (!v.ok()) return v.status();
  return static_cast<int64_t>(*v);
}

absl::StatusOr<absl::string_view> ByteReader::ReadBytes(size_t n, absl::string_view what) {
  if (remaining() < n) return Truncated(n, what);
  absl::string_view view(reinterpret_cast<const char*>(bytes_.data()) + offset_, n);
  offset_ += n;
  return view;
}

absl::StatusOr<absl::string_view> ByteReader::ReadCString(absl::string_view what) {
  for (size_t i = offset_; i < bytes_.size(); ++i) {
    if (bytes_[i] == 0) {
      absl::string_view view(reinterpret_cast<const char*>(bytes_.data()) + offset_,
                             i - offset_);
      offset_ = i + 1;
      return view;
    }
  }
  return absl::DataLossError(absl::StrCat("truncated message: ", what,
                                          " at offset ", offset_,
                                          " has no terminating NUL byte"));
}

absl::Status ByteReader::ExpectEnd(absl::string_view what) const {
  if (remaining() == 0) return absl::OkStatus();
  return absl::DataLossError(absl::StrCat(what, " has ", remaining(),
                                          " unexpected trailing bytes at offset ",
                                          offset_));
}

}  // namespace walfeed::replication
