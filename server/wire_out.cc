#include "server/wire_out.h"

#include <algorithm>

namespace walfeed::server {

void WireOut::Grow(size_t n) {
  const size_t written = size();
  // At least doubled, as std::string grows: pieces reserved one at a time
  // still cost amortized constant copies.
  out_->resize(std::max(written + n, 2 * out_->size()));
  next_ = out_->data() + written;
  end_ = out_->data() + out_->size();
}

}  // namespace walfeed::server
