// The "replication" logger the stream's reader logs to: the one the server
// registered under that name, or a clone of the default logger (tests).
#ifndef WALFEED_REPLICATION_PG_REPLICATION_LOG_H_
#define WALFEED_REPLICATION_PG_REPLICATION_LOG_H_

#include <memory>

#include "spdlog/spdlog.h"

namespace walfeed::replication::pg {

std::shared_ptr<spdlog::logger> ReplicationLogger();

}  // namespace walfeed::replication::pg

#endif  // WALFEED_REPLICATION_PG_REPLICATION_LOG_H_
