// libFuzzer target for copy_data::Decode, the first decoder every walsender byte
// meets, followed by pgoutput::Decode on the payload of each accepted XLogData.
//
// Input layout: one whole CopyData frame. Properties checked (abort on failure):
//  * a rejection is DataLoss;
//  * an accepted keepalive or XLogData re-encodes to exactly the input;
//  * the XLogData payload goes through pgoutput::Decode under the option sets a
//    real stream uses (protocol 1; protocol 4 inside a stream block; protocol 4
//    parallel), and any accepted message re-encodes to the payload.
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "absl/types/variant.h"
#include "replication/copy_data.h"
#include "replication/pgoutput.h"
#include "tests/testing/pgoutput_encoder.h"

namespace {

namespace copy_data = ::walfeed::replication::copy_data;
namespace pgoutput = ::walfeed::replication::pgoutput;

[[noreturn]] void Fail(const char* what) {
  std::fprintf(stderr, "copy_data_fuzz: %s\n", what);
  std::abort();
}

void CheckPayload(absl::Span<const uint8_t> payload) {
  for (const pgoutput::DecodeOptions& options :
       {pgoutput::DecodeOptions{1, false, false}, pgoutput::DecodeOptions{4, true, false},
        pgoutput::DecodeOptions{4, false, true}}) {
    absl::StatusOr<pgoutput::Message> message = pgoutput::Decode(payload, options);
    if (!message.ok()) {
      if (message.status().code() != absl::StatusCode::kDataLoss) {
        Fail("pgoutput rejection is not DataLoss");
      }
      continue;
    }
    const std::vector<uint8_t> encoded = walfeed::testing::Encode(*message);
    if (absl::Span<const uint8_t>(encoded) != payload) {
      Fail("accepted pgoutput payload does not re-encode to itself");
    }
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const absl::Span<const uint8_t> frame(data, size);
  absl::StatusOr<copy_data::ServerMessage> decoded = copy_data::Decode(frame);
  if (!decoded.ok()) {
    if (decoded.status().code() != absl::StatusCode::kDataLoss) {
      Fail("copy_data rejection is not DataLoss");
    }
    return 0;
  }
  if (const auto* keepalive = absl::get_if<copy_data::PrimaryKeepalive>(&*decoded)) {
    const std::vector<uint8_t> encoded = walfeed::testing::EncodeKeepalive(
        keepalive->wal_end, keepalive->send_time, keepalive->reply_requested);
    if (absl::Span<const uint8_t>(encoded) != frame) Fail("keepalive does not re-encode");
    return 0;
  }
  const auto& xlog = absl::get<copy_data::XLogData>(*decoded);
  const std::vector<uint8_t> encoded =
      walfeed::testing::EncodeXLogData(xlog.data_start, xlog.wal_end, xlog.send_time, xlog.payload);
  if (absl::Span<const uint8_t>(encoded) != frame) Fail("XLogData does not re-encode");
  CheckPayload(xlog.payload);
  return 0;
}
