#include "server/metrics/process_collector.h"

#include <dirent.h>
#include <sys/resource.h>
#include <unistd.h>

#include <fstream>
#include <sstream>

#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"
#include "server/metrics/family_builder.h"

namespace walfeed::server::metrics {
namespace {

std::string ReadAll(const char* path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

// Boot time (Unix seconds) from /proc/stat's btime line; 0 if unreadable.
double BootTime() {
  for (absl::string_view line : absl::StrSplit(ReadAll("/proc/stat"), '\n')) {
    if (absl::ConsumePrefix(&line, "btime ")) {
      double seconds = 0;
      if (absl::SimpleAtod(line, &seconds)) return seconds;
    }
  }
  return 0;
}

int OpenFds() {
  DIR* dir = opendir("/proc/self/fd");
  if (dir == nullptr) return -1;
  int count = 0;
  while (const dirent* entry = readdir(dir)) {
    if (entry->d_name[0] != '.') ++count;
  }
  closedir(dir);
  return count - 1;  // The directory stream's own descriptor.
}

}  // namespace

std::vector<prometheus::MetricFamily> ProcessCollector::Collect() const {
  FamilyBuilder out;
  out.Gauge("walfeed_build_info", "The running walfeed-server's version (always 1).",
            {{"version", version_}}, 1);
  // /proc/self/stat: the fields after the command name (which may hold spaces
  // and parentheses) start at field 3, state; see proc(5).
  const std::string stat = ReadAll("/proc/self/stat");
  const size_t close = stat.rfind(')');
  if (close != std::string::npos) {
    std::vector<absl::string_view> fields =
        absl::StrSplit(absl::string_view(stat).substr(close + 2), ' ', absl::SkipEmpty());
    auto field = [&](size_t number) {  // proc(5)'s 1-based numbering.
      double value = 0;
      if (number - 3 < fields.size()) (void)absl::SimpleAtod(fields[number - 3], &value);
      return value;
    };
    const double ticks = static_cast<double>(sysconf(_SC_CLK_TCK));
    const double page = static_cast<double>(sysconf(_SC_PAGESIZE));
    out.Counter("process_cpu_seconds_total", "User and system CPU time spent, in seconds.", {},
                (field(14) + field(15)) / ticks);
    out.Gauge("process_threads", "Threads in the process.", {}, field(20));
    out.Gauge("process_start_time_seconds", "Start time of the process (Unix time).", {},
              BootTime() + field(22) / ticks);
    out.Gauge("process_virtual_memory_bytes", "Virtual memory size in bytes.", {}, field(23));
    out.Gauge("process_resident_memory_bytes", "Resident memory size in bytes.", {},
              field(24) * page);
  }
  if (const int fds = OpenFds(); fds >= 0) {
    out.Gauge("process_open_fds", "Open file descriptors.", {}, fds);
  }
  rlimit limit{};
  if (getrlimit(RLIMIT_NOFILE, &limit) == 0) {
    out.Gauge("process_max_fds", "The limit on open file descriptors.", {},
              static_cast<double>(limit.rlim_cur));
  }
  return out.Take();
}

}  // namespace walfeed::server::metrics
