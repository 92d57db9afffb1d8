// Walsender framing: the CopyData messages of a logical replication connection.
//
//   server -> us  'w' XLogData:  Int64 dataStart | Int64 walEnd | Int64 sendTime | payload
//                 'k' keepalive: Int64 walEnd | Int64 sendTime | Byte1 replyRequested
//   us -> server  'r' status:    Int64 write | Int64 flush | Int64 apply | Int64 clock
//                                | Byte1 replyRequested                     (34 bytes)
//
// For a logical walsender, XLogData's dataStart == walEnd == the decoder's write
// position for that one message (0/0 for Relation/Type; not monotonic), so neither
// is ever a progress or ack position. A keepalive's walEnd is the end of the last
// WAL record the walsender fully decoded: the only server position walfeed ever
// confirms without a commit, and only when everything before it was acked (see
// AckTracker). Times are microseconds since 2000-01-01 00:00:00 UTC.
#ifndef WALFEED_REPLICATION_COPY_DATA_H_
#define WALFEED_REPLICATION_COPY_DATA_H_

#include <array>
#include <cstdint>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "absl/types/variant.h"
#include "replication/lsn.h"

namespace walfeed::replication::copy_data {

// Microseconds from the Unix epoch to PostgreSQL's epoch (2000-01-01).
inline constexpr int64_t kPostgresEpochUnixMicros = int64_t{946684800} * 1000000;

int64_t ToPostgresMicros(absl::Time time);
absl::Time FromPostgresMicros(int64_t micros);

struct XLogData {
  Lsn data_start;
  Lsn wal_end;
  int64_t send_time = 0;  // PostgreSQL-epoch microseconds.
  // One pgoutput message; a view into the decoded frame.
  absl::Span<const uint8_t> payload;
};

struct PrimaryKeepalive {
  Lsn wal_end;
  int64_t send_time = 0;  // PostgreSQL-epoch microseconds.
  bool reply_requested = false;
};

using ServerMessage = absl::variant<XLogData, PrimaryKeepalive>;

// Decodes one CopyData payload sent by the walsender. Unknown tags, short
// frames, trailing bytes and a reply flag other than 0/1 are DataLoss errors.
absl::StatusOr<ServerMessage> Decode(absl::Span<const uint8_t> frame);

inline constexpr size_t kStandbyStatusUpdateSize = 34;

struct StandbyStatusUpdate {
  Lsn write;
  Lsn flush;  // What the slot may confirm: only durably acked positions, or 0/0.
  Lsn apply;
  int64_t client_time = 0;  // PostgreSQL-epoch microseconds.
  bool reply_requested = false;
};

std::array<uint8_t, kStandbyStatusUpdateSize> Encode(const StandbyStatusUpdate& update);

}  // namespace walfeed::replication::copy_data

#endif  // WALFEED_REPLICATION_COPY_DATA_H_
