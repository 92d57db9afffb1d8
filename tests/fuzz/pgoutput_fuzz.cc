// libFuzzer target for pgoutput::Decode.
//
// Input layout: byte 0 selects the DecodeOptions, the rest is one pgoutput
// message. Byte 0's bits 0-1 are protocol version minus 1, bit 2 is
// in_stream_block and bit 3 is streaming_parallel; the other bits are ignored.
// Combinations PostgreSQL cannot produce (a stream block under protocol 1) are
// kept on purpose so that option validation is fuzzed too.
//
// Beyond "no crash, no sanitizer report", the target checks two properties and
// aborts when either fails:
//  * a rejection is DataLoss, or InvalidArgument for impossible options;
//  * an accepted message re-encodes, with the PostgreSQL-mirroring test encoder,
//    to exactly the input bytes, and decodes again to an equal message. The
//    decoder is strict enough to be a bijection on what it accepts, so any
//    leniency (a flag bit ignored, a byte skipped) shows up here.
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/escaping.h"
#include "absl/types/span.h"
#include "replication/pgoutput.h"
#include "tests/testing/pgoutput_encoder.h"

namespace {

namespace pgoutput = ::walfeed::replication::pgoutput;

[[noreturn]] void Fail(const char* what, absl::Span<const uint8_t> input,
                       const std::string& detail) {
  std::fprintf(
      stderr, "pgoutput_fuzz: %s\n  input: %s\n  %s\n", what,
      absl::CHexEscape(absl::string_view(reinterpret_cast<const char*>(input.data()), input.size()))
          .c_str(),
      detail.c_str());
  std::abort();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  pgoutput::DecodeOptions options;
  options.protocol_version = static_cast<uint32_t>(data[0] & 0x3) + 1;
  options.in_stream_block = (data[0] & 0x4) != 0;
  options.streaming_parallel = (data[0] & 0x8) != 0;
  const absl::Span<const uint8_t> input(data + 1, size - 1);

  absl::StatusOr<pgoutput::Message> decoded = pgoutput::Decode(input, options);
  if (!decoded.ok()) {
    const absl::StatusCode code = decoded.status().code();
    if (code != absl::StatusCode::kDataLoss && code != absl::StatusCode::kInvalidArgument) {
      Fail("rejection is neither DataLoss nor InvalidArgument", input, decoded.status().ToString());
    }
    return 0;
  }

  const std::vector<uint8_t> encoded = walfeed::testing::Encode(*decoded);
  if (absl::Span<const uint8_t>(encoded) != input) {
    Fail("accepted message does not re-encode to its input", input,
         walfeed::testing::DescribeMessage(*decoded));
  }
  if (pgoutput::Tag(*decoded) != static_cast<char>(input[0])) {
    Fail("Tag() differs from the tag byte", input, walfeed::testing::DescribeMessage(*decoded));
  }
  absl::StatusOr<pgoutput::Message> again = pgoutput::Decode(encoded, options);
  if (!again.ok() || !walfeed::testing::MessagesEqual(*again, *decoded)) {
    Fail("decode(encode(message)) != message", input,
         walfeed::testing::DescribeMessage(*decoded) + " vs " +
             (again.ok() ? walfeed::testing::DescribeMessage(*again) : again.status().ToString()));
  }
  return 0;
}
