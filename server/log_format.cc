#include "server/log_format.h"

#include <grpc/support/log.h>

#include <chrono>
#include <cstdio>
#include <mutex>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "google/protobuf/stubs/logging.h"
#include "spdlog/spdlog.h"

namespace walfeed::server {
namespace {

// The length of the valid UTF-8 sequence at the start of `text`, or 0.
size_t Utf8SequenceLength(absl::string_view text) {
  const auto byte = [&](size_t i) { return static_cast<unsigned char>(text[i]); };
  const unsigned char lead = byte(0);
  size_t length = 0;
  uint32_t min = 0;
  if (lead < 0x80) return 1;
  if ((lead & 0xE0) == 0xC0) {
    length = 2;
    min = 0x80;
  } else if ((lead & 0xF0) == 0xE0) {
    length = 3;
    min = 0x800;
  } else if ((lead & 0xF8) == 0xF0) {
    length = 4;
    min = 0x10000;
  } else {
    return 0;
  }
  if (text.size() < length) return 0;
  uint32_t code = lead & (0x7F >> length);
  for (size_t i = 1; i < length; ++i) {
    if ((byte(i) & 0xC0) != 0x80) return 0;
    code = (code << 6) | (byte(i) & 0x3F);
  }
  // Overlong forms, UTF-16 surrogates and code points past U+10FFFF.
  if (code < min || (code >= 0xD800 && code <= 0xDFFF) || code > 0x10FFFF) return 0;
  return length;
}

std::string TimeText(std::chrono::system_clock::time_point when) {
  return absl::FormatTime("%Y-%m-%dT%H:%M:%E3S%z", absl::FromChrono(when), absl::LocalTimeZone());
}

// Foreign log lines (gRPC's, protobuf's): a minute's budget per source.
class ForeignLog {
 public:
  explicit ForeignLog(const char* name) : name_(name) {}

  void Write(spdlog::level::level_enum level, absl::string_view where, absl::string_view text) {
    std::string suppressed;
    {
      std::lock_guard<std::mutex> lock(mu_);
      const absl::Time now = absl::Now();
      if (now - window_start_ >= absl::Minutes(1)) {
        window_start_ = now;
        used_ = 0;
      }
      if (used_ >= kForeignLinesPerMinute) {
        ++dropped_;
        return;
      }
      ++used_;
      if (dropped_ > 0) {
        suppressed = absl::StrCat(" (", dropped_, " earlier lines dropped: more than ",
                                  kForeignLinesPerMinute, " a minute)");
        dropped_ = 0;
      }
    }
    Logger()->log(level, "{}: {}{}", std::string(where), std::string(text), suppressed);
  }

 private:
  // Made on first use (after ConfigureLogging), not registered with spdlog:
  // registering from two threads at once throws. It shares the default
  // logger's sinks (and so their format) and follows its level.
  std::shared_ptr<spdlog::logger> Logger() {
    std::lock_guard<std::mutex> lock(mu_);
    if (!logger_) logger_ = spdlog::default_logger()->clone(name_);
    logger_->set_level(spdlog::default_logger()->level());
    return logger_;
  }

  const std::string name_;
  std::shared_ptr<spdlog::logger> logger_;  // Guarded by mu_.
  std::mutex mu_;
  absl::Time window_start_ = absl::InfinitePast();
  int used_ = 0;
  uint64_t dropped_ = 0;
};

ForeignLog& GrpcLog() {
  static ForeignLog* log = new ForeignLog("grpc");
  return *log;
}
ForeignLog& ProtobufLog() {
  static ForeignLog* log = new ForeignLog("protobuf");
  return *log;
}

void RouteGrpcLog(gpr_log_func_args* args) {
  const spdlog::level::level_enum level = args->severity == GPR_LOG_SEVERITY_ERROR ? spdlog::level::err
                                          : args->severity == GPR_LOG_SEVERITY_INFO
                                              ? spdlog::level::info
                                              : spdlog::level::debug;
  GrpcLog().Write(level, absl::StrCat(args->file, ":", args->line), args->message);
}

void RouteProtobufLog(google::protobuf::LogLevel level, const char* file, int line,
                      const std::string& message) {
  // Protobuf's errors here are about a peer's bytes (a request that is not
  // valid UTF-8 is rejected anyway): warnings, not the server's errors.
  const spdlog::level::level_enum mapped = level == google::protobuf::LOGLEVEL_INFO
                                               ? spdlog::level::info
                                               : spdlog::level::warn;
  ProtobufLog().Write(mapped, absl::StrCat(file, ":", line), message);
}

}  // namespace

std::string EscapeLine(absl::string_view message) {
  std::string out;
  out.reserve(message.size());
  for (char c : message) {
    const auto byte = static_cast<unsigned char>(c);
    if (c == '\n') {
      out += "\\n";
    } else if (c == '\r') {
      out += "\\r";
    } else if (c == '\t') {
      out += "\\t";
    } else if (byte < 0x20 || byte == 0x7F) {
      out += absl::StrFormat("\\x%02X", byte);
    } else {
      out += c;
    }
  }
  return out;
}

std::string JsonEscape(absl::string_view text) {
  std::string out;
  out.reserve(text.size() + 2);
  while (!text.empty()) {
    const size_t length = Utf8SequenceLength(text);
    if (length == 0) {
      out += "\xEF\xBF\xBD";  // U+FFFD for a byte that starts no valid sequence.
      text.remove_prefix(1);
      continue;
    }
    const char c = text[0];
    if (length > 1) {
      out.append(text.data(), length);
    } else if (c == '"' || c == '\\') {
      out += '\\';
      out += c;
    } else if (c == '\n') {
      out += "\\n";
    } else if (c == '\r') {
      out += "\\r";
    } else if (c == '\t') {
      out += "\\t";
    } else if (static_cast<unsigned char>(c) < 0x20 || c == 0x7F) {
      out += absl::StrFormat("\\u%04x", static_cast<unsigned char>(c));
    } else {
      out += c;
    }
    text.remove_prefix(length);
  }
  return out;
}

void OneLineFormatter::format(const spdlog::details::log_msg& msg, spdlog::memory_buf_t& dest) {
  const absl::string_view message(msg.payload.data(), msg.payload.size());
  const absl::string_view level(spdlog::level::to_string_view(msg.level).data(),
                                spdlog::level::to_string_view(msg.level).size());
  const absl::string_view logger(msg.logger_name.data(), msg.logger_name.size());
  std::string line;
  if (format_ == LogFormat::kJson) {
    line = absl::StrCat("{\"time\":\"", TimeText(msg.time), "\",\"level\":\"", level,
                        "\",\"logger\":\"", JsonEscape(logger), "\",\"message\":\"",
                        JsonEscape(message), "\"}\n");
  } else {
    line = absl::StrCat(TimeText(msg.time), " ", level, " [", EscapeLine(logger), "] ",
                        EscapeLine(message), "\n");
  }
  dest.append(line.data(), line.data() + line.size());
}

void ConfigureLogging(LogFormat format, const std::string& level) {
  spdlog::set_formatter(std::make_unique<OneLineFormatter>(format));
  spdlog::set_level(spdlog::level::from_str(level));
  gpr_set_log_function(RouteGrpcLog);
  google::protobuf::SetLogHandler(RouteProtobufLog);
}

}  // namespace walfeed::server
