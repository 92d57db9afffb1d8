// The benchmark clients' command lines: "--flag value" pairs, checked, with a
// usage line on any mistake. No gRPC here, so a client that reads the slot
// directly (direct_live) shares it too.
#ifndef WALFEED_BENCH_FLAG_ARGS_H_
#define WALFEED_BENCH_FLAG_ARGS_H_

#include <string>
#include <utility>

#include "absl/strings/numbers.h"

namespace walfeed::bench {

// "--flag value" pairs of a benchmark client's command line. Any mistake prints
// "<program>: <why>" and the usage line, and exits with status 2.
class FlagArgs {
 public:
  FlagArgs(int argc, char** argv, std::string program, std::string usage)
      : argc_(argc), argv_(argv), program_(std::move(program)), usage_(std::move(usage)) {}

  // Moves to the next pair; false after the last.
  bool Next();
  bool Is(const char* flag) const { return flag_ == flag; }
  const std::string& flag() const { return flag_; }
  const std::string& text() const { return value_; }
  template <typename T>
  T Positive() const {
    T value{};
    if (!absl::SimpleAtoi(value_, &value) || value <= 0) Fail(flag_ + ": not a positive number");
    return value;
  }
  [[noreturn]] void Fail(const std::string& why) const;

 private:
  const int argc_;
  char** const argv_;
  const std::string program_;
  const std::string usage_;
  int next_ = 1;
  std::string flag_;
  std::string value_;
};

}  // namespace walfeed::bench

#endif  // WALFEED_BENCH_FLAG_ARGS_H_
