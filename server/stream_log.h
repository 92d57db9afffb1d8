// The "stream" logger the stream layer writes to (one per process, cloned from
// the default logger so it follows its sinks and format).
#ifndef WALFEED_SERVER_STREAM_LOG_H_
#define WALFEED_SERVER_STREAM_LOG_H_

#include <memory>

#include "spdlog/spdlog.h"

namespace walfeed::server {

inline std::shared_ptr<spdlog::logger> StreamLogger() {
  static const std::shared_ptr<spdlog::logger> logger = [] {
    std::shared_ptr<spdlog::logger> existing = spdlog::get("stream");
    return existing ? existing : spdlog::default_logger()->clone("stream");
  }();
  return logger;
}

}  // namespace walfeed::server

#endif  // WALFEED_SERVER_STREAM_LOG_H_
