// A main() for builds without libFuzzer: runs LLVMFuzzerTestOneInput once over
// every file named on the command line or found (recursively) in a directory
// named there. It lets every compiler replay the committed corpus, crashers
// included, as an ordinary unit test; a regression shows up as an abort.
//
// An argument that names nothing, or a directory with no files, is an error:
// a replay that silently ran zero inputs would pass while testing nothing.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <system_error>
#include <vector>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size);

namespace {

bool ReadFile(const std::filesystem::path& path, std::vector<uint8_t>* out) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return false;
  out->assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  return !in.bad();
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: %s <corpus file or directory>...\n", argv[0]);
    return 2;
  }
  size_t total = 0;
  for (int i = 1; i < argc; ++i) {
    const std::filesystem::path root(argv[i]);
    std::vector<std::filesystem::path> files;
    std::error_code error;
    if (std::filesystem::is_directory(root, error)) {
      for (const auto& entry : std::filesystem::recursive_directory_iterator(root, error)) {
        if (entry.is_regular_file()) files.push_back(entry.path());
      }
      // Directory order is unspecified; a fixed order makes failures reproducible.
      std::sort(files.begin(), files.end());
    } else if (std::filesystem::is_regular_file(root, error)) {
      files.push_back(root);
    }
    if (files.empty()) {
      std::fprintf(stderr, "%s: no corpus files in %s\n", argv[0], argv[i]);
      return 1;
    }
    for (const std::filesystem::path& file : files) {
      std::vector<uint8_t> bytes;
      if (!ReadFile(file, &bytes)) {
        std::fprintf(stderr, "%s: cannot read %s\n", argv[0], file.c_str());
        return 1;
      }
      LLVMFuzzerTestOneInput(bytes.data(), bytes.size());
      ++total;
    }
  }
  std::printf("replayed %zu inputs without a failure\n", total);
  return 0;
}
