#include "replication/pg/replication_log.h"

namespace walfeed::replication::pg {

std::shared_ptr<spdlog::logger> ReplicationLogger() {
  static std::shared_ptr<spdlog::logger> logger = [] {
    std::shared_ptr<spdlog::logger> existing = spdlog::get("replication");
    return existing ? existing : spdlog::default_logger()->clone("replication");
  }();
  return logger;
}

}  // namespace walfeed::replication::pg
