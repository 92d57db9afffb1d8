#include "server/log_format.h"

#include <memory>
#include <sstream>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "spdlog/sinks/ostream_sink.h"
#include "spdlog/spdlog.h"

namespace walfeed::server {
namespace {

using ::testing::EndsWith;
using ::testing::HasSubstr;
using ::testing::MatchesRegex;
using ::testing::StartsWith;

TEST(EscapeLineTest, ControlCharactersAreEscapedSoAnEntryStaysOneLine) {
  EXPECT_EQ(EscapeLine("plain text, unicode ü"), "plain text, unicode ü");
  EXPECT_EQ(EscapeLine("ERROR:  x\nDETAIL:  y\r\n"), "ERROR:  x\\nDETAIL:  y\\r\\n");
  EXPECT_EQ(EscapeLine(std::string("a\tb\x01\x1b\x7f", 6)), "a\\tb\\x01\\x1B\\x7F");
}

TEST(JsonEscapeTest, QuotesBackslashesAndControlsAreEscaped) {
  EXPECT_EQ(JsonEscape(R"(say "hi" \ bye)"), R"(say \"hi\" \\ bye)");
  EXPECT_EQ(JsonEscape("a\nb\tc\x01"), "a\\nb\\tc\\u0001");
  EXPECT_EQ(JsonEscape("ü € 𝄞"), "ü € 𝄞");
}

TEST(JsonEscapeTest, BytesThatAreNotUtf8BecomeReplacementCharacters) {
  const std::string replacement = "\xEF\xBF\xBD";
  EXPECT_EQ(JsonEscape("a\xFF" "b"), "a" + replacement + "b");
  EXPECT_EQ(JsonEscape("\xC3"), replacement) << "a truncated sequence";
  EXPECT_EQ(JsonEscape("\xC0\xAF"), replacement + replacement) << "an overlong form";
  EXPECT_EQ(JsonEscape("\xED\xA0\x80"), replacement + replacement + replacement)
      << "a UTF-16 surrogate";
  EXPECT_EQ(JsonEscape("\xF4\x90\x80\x80"), replacement + replacement + replacement + replacement)
      << "past U+10FFFF";
}

// Formats one entry through a logger whose sink uses the formatter.
std::string Format(LogFormat format, const std::string& logger_name, const std::string& message) {
  std::ostringstream out;
  auto sink = std::make_shared<spdlog::sinks::ostream_sink_mt>(out);
  sink->set_formatter(std::make_unique<OneLineFormatter>(format));
  spdlog::logger logger(logger_name, sink);
  logger.warn("{}", message);
  logger.flush();
  return out.str();
}

TEST(OneLineFormatterTest, TextIsTimeLevelLoggerAndTheEscapedMessage) {
  const std::string line = Format(LogFormat::kText, "stream", "first\nsecond");
  EXPECT_THAT(line, MatchesRegex("[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9:.]+[+-][0-9]{4} warning "
                                 "\\[stream\\] first\\\\nsecond\n"));
}

TEST(OneLineFormatterTest, JsonIsOneObjectPerLine) {
  const std::string line = Format(LogFormat::kJson, "grpc", "bad \"byte\" \xFF\nnext");
  EXPECT_THAT(line, StartsWith("{\"time\":\""));
  EXPECT_THAT(line, HasSubstr("\",\"level\":\"warning\",\"logger\":\"grpc\",\"message\":\"bad "
                              "\\\"byte\\\" \xEF\xBF\xBD\\nnext\"}"));
  EXPECT_THAT(line, EndsWith("}\n"));
  EXPECT_EQ(std::count(line.begin(), line.end(), '\n'), 1);
}

}  // namespace
}  // namespace walfeed::server
