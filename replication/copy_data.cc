#include "replication/copy_data.h"

#include "absl/strings/str_cat.h"
#include "replication/byte_reader.h"
#include "replication/status_macros.h"

namespace walfeed::replication::copy_data {
namespace {

void PutUint64(uint64_t value, uint8_t* out) {
  for (int i = 7; i >= 0; --i) {
    out[i] = static_cast<uint8_t>(value & 0xff);
    value >>= 8;
  }
}

absl::StatusOr<ServerMessage> DecodeXLogData(ByteReader& reader) {
  XLogData data;
  WALFEED_ASSIGN_OR_RETURN(uint64_t start, reader.ReadUint64("XLogData dataStart"));
  WALFEED_ASSIGN_OR_RETURN(uint64_t end, reader.ReadUint64("XLogData walEnd"));
  WALFEED_ASSIGN_OR_RETURN(data.send_time, reader.ReadInt64("XLogData sendTime"));
  WALFEED_ASSIGN_OR_RETURN(absl::string_view payload,
                           reader.ReadBytes(reader.remaining(), "XLogData payload"));
  if (payload.empty()) return absl::DataLossError("XLogData frame has an empty payload");
  data.data_start = Lsn(start);
  data.wal_end = Lsn(end);
  data.payload = absl::MakeConstSpan(reinterpret_cast<const uint8_t*>(payload.data()),
                                     payload.size());
  return data;
}

absl::StatusOr<ServerMessage> DecodeKeepalive(ByteReader& reader) {
  PrimaryKeepalive keepalive;
  WALFEED_ASSIGN_OR_RETURN(uint64_t end, reader.ReadUint64("keepalive walEnd"));
  WALFEED_ASSIGN_OR_RETURN(keepalive.send_time, reader.ReadInt64("keepalive sendTime"));
  WALFEED_ASSIGN_OR_RETURN(uint8_t reply, reader.ReadUint8("keepalive replyRequested"));
  WALFEED_RETURN_IF_ERROR(reader.ExpectEnd("keepalive"));
  if (reply > 1) {
    return absl::DataLossError(
        absl::StrCat("keepalive replyRequested is ", reply, ", expected 0 or 1"));
  }
  keepalive.wal_end = Lsn(end);
  keepalive.reply_requested = reply == 1;
  return keepalive;
}

}  // namespace

int64_t ToPostgresMicros(absl::Time time) {
  return absl::ToUnixMicros(time) - kPostgresEpochUnixMicros;
}

absl::Time FromPostgresMicros(int64_t micros) {
  return absl::FromUnixMicros(micros) + absl::Microseconds(kPostgresEpochUnixMicros);
}

absl::StatusOr<ServerMessage> Decode(absl::Span<const uint8_t> frame) {
  ByteReader reader(frame);
  WALFEED_ASSIGN_OR_RETURN(uint8_t tag, reader.ReadUint8("CopyData tag"));
  switch (tag) {
    case 'w':
      return DecodeXLogData(reader);
    case 'k':
      return DecodeKeepalive(reader);
    default:
      return absl::DataLossError(absl::StrCat(
          "unknown walsender message tag 0x", absl::Hex(tag),
          ": expected 'w' (XLogData) or 'k' (keepalive)"));
  }
}

std::array<uint8_t, kStandbyStatusUpdateSize> Encode(const StandbyStatusUpdate& update) {
  std::array<uint8_t, kStandbyStatusUpdateSize> out{};
  out[0] = 'r';
  PutUint64(update.write.value(), &out[1]);
  PutUint64(update.flush.value(), &out[9]);
  PutUint64(update.apply.value(), &out[17]);
  PutUint64(static_cast<uint64_t>(update.client_time), &out[25]);
  out[33] = update.reply_requested ? 1 : 0;
  return out;
}

}  // namespace walfeed::replication::copy_data
