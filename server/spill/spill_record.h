// The spill's record format: one buffered event as bytes on disk, and back.
//
//   u32 body_length   little-endian, bytes after this 8-byte header
//   u32 crc32c        of the body (Castagnoli)
//   body:
//     u64 commit_lsn, u32 index           the event's id
//     u8  operation, u16 table_count      its FilterKey ...
//     table_count × (u16 len, schema, u16 len, table)
//     u16 len, audience                   only when bit 7 of operation is set
//     the serialized walfeed.v1.ChangeEvent (the rest of the body)
//
// The checksum covers every byte a session would act on, so a torn or flipped
// record is found before it is served, never after. Decoding is a pure function
// of bytes: whatever is on disk, it returns a Status, never crashes.
#ifndef WALFEED_SERVER_SPILL_SPILL_RECORD_H_
#define WALFEED_SERVER_SPILL_SPILL_RECORD_H_

#include <cstddef>
#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "server/buffered_event.h"

namespace walfeed::server::spill {

inline constexpr size_t kRecordHeaderBytes = 8;
// The longest body the format allows (the length is checked before anything is
// allocated for it, so a damaged header costs at most this much).
inline constexpr uint32_t kMaxBodyBytes = (uint32_t{1} << 31) - 1;

// CRC-32C (Castagnoli) of `bytes`, continuing from `crc` (0 to start): the
// CPU's crc32 instruction where there is one (SSE 4.2), a table otherwise.
uint32_t Crc32c(absl::string_view bytes, uint32_t crc = 0);
// The table version alone (tests compare the two).
uint32_t Crc32cPortable(absl::string_view bytes, uint32_t crc = 0);

// Appends `event`'s record to `*out`. InvalidArgument when it does not fit the
// format (a table name over 64 KiB, a body over kMaxBodyBytes).
absl::Status EncodeRecord(const BufferedEvent& event, std::string* out);

// The body length a header announces. `header` must hold kRecordHeaderBytes.
// DataLoss for a length no record can have.
absl::Status BodyLength(absl::string_view header, uint32_t* length);

// Decodes one whole record (header and body, nothing after it) into `*event`
// (bytes = BufferedBytes, as when it was encoded). DataLoss when the checksum does not match or the
// body is malformed; the message says which.
absl::Status DecodeRecord(absl::string_view record, BufferedEvent* event);

}  // namespace walfeed::server::spill

#endif  // WALFEED_SERVER_SPILL_SPILL_RECORD_H_
