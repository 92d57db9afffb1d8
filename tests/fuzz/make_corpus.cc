// Writes the seed corpora for the fuzz targets, so that every message type and
// shape starts out covered:
//   <root>/pgoutput/seed_<Sample>    option byte + one sample pgoutput message
//   <root>/copy_data/seed_<Sample>   an XLogData frame carrying that message
//   <root>/copy_data/seed_Keepalive* keepalives with and without reply request
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
#include <vector>

#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "replication/lsn.h"
#include "replication/pgoutput.h"
#include "tests/testing/pgoutput_encoder.h"

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
