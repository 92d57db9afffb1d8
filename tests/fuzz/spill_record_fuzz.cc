// libFuzzer target for spill::DecodeRecord, which reads back what the server
// wrote to its spill files (a damaged disk or another process may have changed
// any byte). Input: one whole record. Properties checked (abort on failure):
//  * a rejection is DataLoss;
//  * an accepted record re-encodes to exactly the input (the format has one
//    encoding per event), with the cost a freshly encoded event would have.
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "server/spill/spill_record.h"

namespace {

namespace spill = ::walfeed::server::spill;

[[noreturn]] void Fail(const char* what) {
  std::fprintf(stderr, "spill_record_fuzz: %s\n", what);
  std::abort();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const absl::string_view input(reinterpret_cast<const char*>(data), size);
  walfeed::server::BufferedEvent event;
  const absl::Status decoded = spill::DecodeRecord(input, &event);
  if (!decoded.ok()) {
    if (decoded.code() != absl::StatusCode::kDataLoss) Fail("a rejection that is not DataLoss");
    return 0;
  }
  std::string again;
  if (!spill::EncodeRecord(event, &again).ok()) Fail("an accepted record does not re-encode");
  if (again != input) Fail("an accepted record re-encodes differently");
  if (event.bytes != walfeed::server::BufferedBytes(event)) Fail("the cost is not recomputed");
  return 0;
}
