#include "flag_args.h"

#include <cstdio>
#include <cstdlib>

namespace walfeed::bench {

bool FlagArgs::Next() {
  if (next_ >= argc_) return false;
  flag_ = argv_[next_++];
  if (next_ >= argc_) Fail(flag_ + " needs a value");
  value_ = argv_[next_++];
  return true;
}

void FlagArgs::Fail(const std::string& why) const {
  std::fprintf(stderr, "%s: %s\nusage: %s %s\n", program_.c_str(), why.c_str(), program_.c_str(),
               usage_.c_str());
  std::exit(2);
}

}  // namespace walfeed::bench
