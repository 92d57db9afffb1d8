// Early-return helpers for absl::Status / absl::StatusOr.
//
// The Abseil release Debian 12 ships (20220623) has no ASSIGN_OR_RETURN, so the
// project keeps these two small macros. They only ever return the error they were
// given; they never log and never add context (callers add context where they
// know something the callee did not).
#ifndef WALFEED_REPLICATION_STATUS_MACROS_H_
#define WALFEED_REPLICATION_STATUS_MACROS_H_

#include <utility>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

#define WALFEED_STATUS_CONCAT_INNER_(a, b) a##b
#define WALFEED_STATUS_CONCAT_(a, b) WALFEED_STATUS_CONCAT_INNER_(a, b)

// Returns from the current function if `expr` (an absl::Status) is not OK.
#define WALFEED_RETURN_IF_ERROR(expr)                  \
  do {                                                 \
    ::absl::Status walfeed_status_ = (expr);           \
    if (!walfeed_status_.ok()) return walfeed_status_; \
  } while (false)

// `lhs` = the value of `rexpr` (an absl::StatusOr<T>), or returns its error.
// `lhs` may be a declaration (`auto x`) or an existing variable.
#define WALFEED_ASSIGN_OR_RETURN(lhs, rexpr) \
  WALFEED_ASSIGN_OR_RETURN_IMPL_(            \
      WALFEED_STATUS_CONCAT_(walfeed_statusor_, __LINE__), lhs, rexpr)

#define WALFEED_ASSIGN_OR_RETURN_IMPL_(statusor, lhs, rexpr) \
  auto statusor = (rexpr);                                   \
  if (!statusor.ok()) return statusor.status();              \
  lhs = std::move(statusor).value()

#endif  // WALFEED_REPLICATION_STATUS_MACROS_H_
