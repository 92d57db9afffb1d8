#include "replication/byte_reader.h"

#include "absl/strings/str_cat.h"

namespace walfeed::replication {

absl::Status ByteReader::Truncated(size_t need, absl::string_view what) const {
  return absl::DataLossError(absl::StrCat("truncated message: reading ", what,
                                          " needs ", need, " bytes at offset ", offset_,
                                          " but only ", remaining(), " remain"));
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
