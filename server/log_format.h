// How walfeed-server writes its log: one line per entry, whatever the message
// holds (libpq's multi-line errors, a client's bytes), as text or as JSON, and
// gRPC's and protobuf's own log lines through the same sink and format.
//
//   text: 2026-12-02T08:01:02.345+0000 info [stream] stream demo: streaming from 0/16B3748
//   json: {"time":"2026-12-02T08:01:02.345+0000","level":"info","logger":"stream",
//          "message":"stream demo: streaming from 0/16B3748"}
//
// In text, control characters are escaped (\n, \r, \t, \xNN); in JSON, the
// message is a JSON string, with bytes that are not UTF-8 replaced by U+FFFD.
#ifndef WALFEED_SERVER_LOG_FORMAT_H_
#define WALFEED_SERVER_LOG_FORMAT_H_

#include <memory>
#include <string>

#include "absl/strings/string_view.h"
#include "server/config.h"
#include "spdlog/formatter.h"

namespace walfeed::server {

// `message` as one line of text: control characters escaped.
std::string EscapeLine(absl::string_view message);
// `text` as the contents of a JSON string (no quotes): valid UTF-8 and JSON.
std::string JsonEscape(absl::string_view text);

class OneLineFormatter : public spdlog::formatter {
 public:
  explicit OneLineFormatter(LogFormat format) : format_(format) {}
  void format(const spdlog::details::log_msg& msg, spdlog::memory_buf_t& dest) override;
  std::unique_ptr<spdlog::formatter> clone() const override {
    return std::make_unique<OneLineFormatter>(format_);
  }

 private:
  const LogFormat format_;
};

// Sets the format and level of every logger (they share the default logger's
// sinks), and routes gRPC's and protobuf's log lines into loggers "grpc" and
// "protobuf", at most kForeignLinesPerMinute a minute each (a client sending
// invalid UTF-8 in every request must not flood the log); what is dropped is
// counted in the next line that passes. `level` must pass CheckLogLevel.
void ConfigureLogging(LogFormat format, const std::string& level);
inline constexpr int kForeignLinesPerMinute = 20;

}  // namespace walfeed::server

#endif  // WALFEED_SERVER_LOG_FORMAT_H_
