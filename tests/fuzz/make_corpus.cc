// Writes the seed corpora for the fuzz targets, so that every message type and
// shape starts out covered:
//   <root>/pgoutput/seed_<Sample>    option byte + one sample pgoutput message
//   <root>/copy_data/seed_<Sample>   an XLogData frame carrying that message
//   <root>/copy_data/seed_Keepalive* keepalives with and without reply request
//   <root>/subscribe_request/seed_*  serialized SubscribeRequests (defaults, patterns,
//                                    operations, every knob at its bounds and just
//                                    outside), an AckRequest, a ResetConsumerRequest
//                                    and a plain-text pattern list
// and, given the golden capture directory, frames a real PostgreSQL 15 sent:
//   <root>/copy_data/golden_<file>_<n>  the first frame of each kind in a capture
//   <root>/pgoutput/golden_<file>_<n>   its payload, with the option byte the
//                                        capture's proto_version and stream state give
// The generated files are committed; re-run this after adding samples or
// captures. It is a plain program (no gtest) so that it builds with either
// compiler.
//
//   walfeed_fuzz_corpus_gen <tests/fuzz/corpus> [<tests/golden>]
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <set>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "replication/lsn.h"
#include "replication/pgoutput.h"
#include "server/session_limits.h"
#include "tests/testing/pgoutput_encoder.h"
#include "walfeed/v1/change_stream.pb.h"

namespace {

namespace pgoutput = ::walfeed::replication::pgoutput;
using ::walfeed::replication::Lsn;

// The inverse of the option byte mapping in pgoutput_fuzz.cc.
uint8_t OptionByte(const pgoutput::DecodeOptions& options) {
  return static_cast<uint8_t>(((options.protocol_version - 1) & 0x3) |
                              (options.in_stream_block ? 0x4 : 0) |
                              (options.streaming_parallel ? 0x8 : 0));
}

bool WriteFile(const std::filesystem::path& path, const std::vector<uint8_t>& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(reinterpret_cast<const char*>(bytes.data()),
            static_cast<std::streamsize>(bytes.size()));
  return static_cast<bool>(out);
}

// The protocol version in a capture's "# command:" header line, or 0.
uint32_t ProtocolVersion(absl::string_view command) {
  constexpr absl::string_view kKey = "\"proto_version\" '";
  const size_t at = command.find(kKey);
  uint32_t version = 0;
  if (at == absl::string_view::npos ||
      !absl::SimpleAtoi(command.substr(at + kKey.size(), 1), &version)) {
    return 0;
  }
  return version;
}

// Seeds from one golden capture: the first frame of each (frame kind, pgoutput
// tag, inside a stream block) combination. Returns the number of files written,
// or -1 on error.
int WriteGoldenSeeds(const std::filesystem::path& capture,
                     const std::filesystem::path& pgoutput_dir,
                     const std::filesystem::path& copy_data_dir) {
  std::ifstream in(capture);
  if (!in) return -1;
  const std::string stem = capture.stem().string();
  uint32_t version = 0;
  bool in_stream_block = false;
  std::set<std::tuple<char, char, bool>> seen;
  int written = 0;
  int index = 0;
  for (std::string line; std::getline(in, line);) {
    if (absl::StartsWith(line, "# command:")) version = ProtocolVersion(line);
    if (line.empty() || line[0] == '#') continue;
    const std::string frame = absl::HexStringToBytes(line);
    if (frame.empty() || version == 0) return -1;
    const char kind = frame[0];
    const char tag = kind == 'w' && frame.size() > 25 ? frame[25] : 0;
    const bool inside = in_stream_block;
    if (tag == 'S') in_stream_block = true;
    if (tag == 'E') in_stream_block = false;
    if (!seen.insert({kind, tag, inside}).second) continue;

    const std::string name = absl::StrCat("golden_", stem, "_", index++);
    const std::vector<uint8_t> frame_bytes(frame.begin(), frame.end());
    if (!WriteFile(copy_data_dir / name, frame_bytes)) return -1;
    ++written;
    if (tag != 0) {
      pgoutput::DecodeOptions options;
      options.protocol_version = version;
      options.in_stream_block = inside;
      std::vector<uint8_t> seed = {OptionByte(options)};
      seed.insert(seed.end(), frame.begin() + 25, frame.end());
      if (!WriteFile(pgoutput_dir / name, seed)) return -1;
      ++written;
    }
  }
  return written;
}

// Seeds for subscribe_request_fuzz: one file per interesting request, so that
// every accept and reject path of SessionOptionsFor starts out covered. Returns
// the number of files written, or -1 on error.
int WriteSubscribeRequestSeeds(const std::filesystem::path& dir) {
  namespace v1 = ::walfeed::v1;
  namespace server = ::walfeed::server;
  std::vector<std::pair<std::string, std::string>> seeds;  // (name, bytes)
  auto add = [&seeds](const std::string& name, const google::protobuf::Message& message) {
    seeds.emplace_back(name, message.SerializeAsString());
  };

  v1::SubscribeRequest base;
  base.set_stream("orders");
  base.set_consumer("billing");
  add("seed_Minimal", base);
  add("seed_Empty", v1::SubscribeRequest());

  v1::SubscribeRequest typical = base;
  typical.set_start_after("0/1A2B3C8:0");
  typical.add_tables("public.orders");
  typical.add_tables("sales.*");
  typical.add_operations(v1::OPERATION_INSERT);
  typical.add_operations(v1::OPERATION_UPDATE);
  add("seed_Typical", typical);

  v1::SubscribeRequest patterns = base;
  patterns.add_tables("public.?rders");
  patterns.add_tables("*.*_audit");
  patterns.add_tables("caf\xC3\xA9.t?ble");  // "café.t?ble"
  patterns.add_tables("\"odd.schema\".*");
  patterns.add_tables("*a*a*a*a*a*a*a*a*.b");
  patterns.add_operations(v1::OPERATION_DELETE);
  patterns.add_operations(v1::OPERATION_TRUNCATE);
  patterns.add_operations(v1::OPERATION_MESSAGE);
  add("seed_Patterns", patterns);

  v1::SubscribeRequest low = base;
  low.set_max_batch_events(1);
  low.set_max_batch_bytes(1);
  low.set_max_unacked_events(1);
  low.set_max_unacked_bytes(1);
  low.set_progress_interval_ms(
      static_cast<uint32_t>(absl::ToInt64Milliseconds(server::kProgressIntervalMin)));
  add("seed_KnobsLowest", low);

  v1::SubscribeRequest high = base;
  high.set_max_batch_events(static_cast<uint32_t>(server::kBatchEventsMax));
  high.set_max_batch_bytes(static_cast<uint32_t>(server::kBatchBytesMax));
  high.set_max_unacked_events(static_cast<uint32_t>(server::kUnackedEventsMax));
  high.set_max_unacked_bytes(server::kUnackedBytesMax);
  high.set_progress_interval_ms(
      static_cast<uint32_t>(absl::ToInt64Milliseconds(server::kProgressIntervalMax)));
  high.set_start(v1::START_POSITION_LATEST);
  add("seed_KnobsHighest", high);

  v1::SubscribeRequest ephemeral;
  ephemeral.set_stream("orders");
  ephemeral.set_ephemeral(true);
  ephemeral.set_start_after("FFFFFFFF/FFFFFFFF:4294967295");
  ephemeral.set_start(v1::START_POSITION_EARLIEST);
  add("seed_EphemeralLargestId", ephemeral);

  // Each knob just outside its range, one per file.
  v1::SubscribeRequest over = base;
  over.set_max_batch_events(static_cast<uint32_t>(server::kBatchEventsMax + 1));
  add("seed_MaxBatchEventsOver", over);
  over = base;
  over.set_max_batch_bytes(static_cast<uint32_t>(server::kBatchBytesMax + 1));
  add("seed_MaxBatchBytesOver", over);
  over = base;
  over.set_max_unacked_events(static_cast<uint32_t>(server::kUnackedEventsMax + 1));
  add("seed_MaxUnackedEventsOver", over);
  over = base;
  over.set_max_unacked_bytes(server::kUnackedBytesMax + 1);
  add("seed_MaxUnackedBytesOver", over);
  over = base;
  over.set_progress_interval_ms(
      static_cast<uint32_t>(absl::ToInt64Milliseconds(server::kProgressIntervalMin) - 1));
  add("seed_ProgressIntervalUnder", over);
  over = base;
  over.set_progress_interval_ms(
      static_cast<uint32_t>(absl::ToInt64Milliseconds(server::kProgressIntervalMax) + 1));
  add("seed_ProgressIntervalOver", over);
  over = base;
  over.set_start(static_cast<v1::StartPosition>(3));
  add("seed_StartUnknown", over);
  over = base;
  over.add_operations(v1::OPERATION_UNSPECIFIED);
  add("seed_OperationUnspecified", over);
  over = base;
  over.add_operations(static_cast<v1::Operation>(v1::OPERATION_READ + 1));
  add("seed_OperationUnknown", over);
  over = base;
  over.add_tables("orders");
  add("seed_TableWithoutDot", over);
  over = base;
  over.add_tables("");
  add("seed_TableEmpty", over);
  over = base;
  over.set_start_after("0/0:4294967296");
  add("seed_StartAfterIndexOverflow", over);

  v1::AckRequest ack;
  ack.set_stream("orders");
  ack.set_consumer("billing");
  ack.set_session_id("00112233445566778899aabbccddeeff");
  ack.set_event_id("16/B374D848:7");
  add("seed_Ack", ack);

  v1::ResetConsumerRequest reset;
  reset.set_stream("orders");
  reset.set_consumer("billing");
  reset.set_to("0/16B3748:00042");
  add("seed_ResetConsumer", reset);

  // Not a message: the input read as a pattern list.
  seeds.emplace_back("seed_PatternList",
                     "public.*\nsales.order_??\n*.*\n*a*a*a*a*b.c\ncaf\xC3\xA9.*");

  for (const auto& [name, bytes] : seeds) {
    if (!WriteFile(dir / name, std::vector<uint8_t>(bytes.begin(), bytes.end()))) return -1;
  }
  return static_cast<int>(seeds.size());
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2 && argc != 3) {
    std::fprintf(stderr, "usage: %s <tests/fuzz/corpus> [<tests/golden>]\n", argv[0]);
    return 2;
  }
  const std::filesystem::path root(argv[1]);
  const std::filesystem::path pgoutput_dir = root / "pgoutput";
  const std::filesystem::path copy_data_dir = root / "copy_data";
  std::filesystem::create_directories(pgoutput_dir);
  std::filesystem::create_directories(copy_data_dir);
  const std::filesystem::path subscribe_dir = root / "subscribe_request";
  std::filesystem::create_directories(subscribe_dir);

  int written = 0;
  // Fixed, made-up positions and times: the seeds must be reproducible.
  const Lsn kPosition(0x16B3748);
  const int64_t kSendTime = 774000000000000;
  for (const walfeed::testing::NamedMessage& sample : walfeed::testing::SampleMessages()) {
    const std::vector<uint8_t> message = walfeed::testing::Encode(sample.message);
    // The highest valid protocol is the one a modern walsender would use.
    const pgoutput::DecodeOptions options =
        walfeed::testing::ValidDecodeOptions(sample.message).back();
    std::vector<uint8_t> seed = {OptionByte(options)};
    seed.insert(seed.end(), message.begin(), message.end());
    const std::string name = "seed_" + sample.name;
    if (!WriteFile(pgoutput_dir / name, seed) ||
        !WriteFile(copy_data_dir / name,
                   walfeed::testing::EncodeXLogData(kPosition, kPosition, kSendTime, message))) {
      std::fprintf(stderr, "cannot write %s\n", name.c_str());
      return 1;
    }
    written += 2;
  }
  for (bool reply : {false, true}) {
    const std::string name = reply ? "seed_KeepaliveReplyRequested" : "seed_Keepalive";
    if (!WriteFile(copy_data_dir / name,
                   walfeed::testing::EncodeKeepalive(kPosition, kSendTime, reply))) {
      std::fprintf(stderr, "cannot write %s\n", name.c_str());
      return 1;
    }
    ++written;
  }
  const int subscribe_seeds = WriteSubscribeRequestSeeds(subscribe_dir);
  if (subscribe_seeds < 0) {
    std::fprintf(stderr, "cannot write the seeds under %s\n", subscribe_dir.c_str());
    return 1;
  }
  written += subscribe_seeds;
  if (argc == 3) {
    std::vector<std::filesystem::path> captures;
    for (const auto& entry : std::filesystem::directory_iterator(argv[2])) {
      if (entry.path().extension() == ".hex") captures.push_back(entry.path());
    }
    std::sort(captures.begin(), captures.end());
    for (const std::filesystem::path& capture : captures) {
      const int files = WriteGoldenSeeds(capture, pgoutput_dir, copy_data_dir);
      if (files < 0) {
        std::fprintf(stderr, "cannot turn %s into seeds\n", capture.c_str());
        return 1;
      }
      written += files;
    }
  }
  std::printf("wrote %d seed files under %s\n", written, root.c_str());
  return 0;
}
