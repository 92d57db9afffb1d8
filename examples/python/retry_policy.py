"""The example consumers' retry policy, read from the details of walfeed's errors.

Every error of a walfeed server carries, in the standard grpc-status-details-bin
trailer, a google.rpc.Status whose details hold a google.rpc.ErrorInfo (domain
"walfeed.v1", reason: an ErrorReason value's name without ERROR_REASON_, e.g.
"SESSION_SUPERSEDED") and, when a retry is right, a google.rpc.RetryInfo. The
google.rpc stubs are generated from proto/google/rpc (examples/build.sh).

The policy, the same in the Node and Go examples:
  - a RetryInfo: subscribe again after its delay plus a jittered backoff;
  - UNAVAILABLE or CANCELLED without walfeed's details: made by gRPC itself (the
    connection was lost or refused), retried with the backoff. The consumers never
    cancel a call they still read, so a CANCELLED is the transport's: a peer or a
    proxy resetting the stream (RST_STREAM CANCEL) reaches Python as CANCELLED;
  - anything else needs a human: the consumer exits with code 1.
"""
import random
import sys

from google.protobuf.message import DecodeError
from google.rpc import error_details_pb2, status_pb2

DOMAIN = "walfeed.v1"

# After an Ack refused with ABORTED (the session is no longer the consumer's
# active one: reset, taken over, being removed), the Subscribe stream's own
# status follows at once and says which. Frames are dropped until it comes; if
# they still come this long after, the Ack's error stands.
DRAIN_SECONDS = 10.0


class Failure:
    """Why a subscription ended: code name, walfeed reason ("" if none), the
    server's retry delay in seconds (None if it gave none) and the message."""

    def __init__(self, code, message, reason="", retry_delay=None):
        self.code, self.message, self.reason, self.retry_delay = code, message, reason, retry_delay

    @classmethod
    def of(cls, error):
        """The Failure a grpc.RpcError describes."""
        failure = cls(error.code().name, error.details() or "")
        for key, value in error.trailing_metadata() or ():
            if key != "grpc-status-details-bin":
                continue
            try:
                details = status_pb2.Status.FromString(value).details
            except DecodeError:
                continue  # Not a google.rpc.Status: as if there were no details.
            for detail in details:
                info, retry = error_details_pb2.ErrorInfo(), error_details_pb2.RetryInfo()
                if detail.Unpack(info) and info.domain == DOMAIN:
                    failure.reason = info.reason
                elif detail.Unpack(retry):
                    failure.retry_delay = retry.retry_delay.ToTimedelta().total_seconds()
        return failure


def next_delay(failure, attempt):
    """Seconds to wait before subscribing again, or None: give up."""
    if failure.retry_delay is None and (
            failure.reason or failure.code not in ("UNAVAILABLE", "CANCELLED")):
        return None
    # Capped exponential backoff with full jitter (up to 0.1 s, 0.2 s, ... 3.2 s,
    # then 5 s) on top of what the server asked for.
    return (failure.retry_delay or 0.0) + random.uniform(0, min(5.0, 0.1 * 2 ** attempt))


def retry_or_exit(failure, attempt):
    """Logs the retry and returns its delay, or logs why and exits with code 1."""
    delay = next_delay(failure, attempt)
    if delay is None:
        reason = f" {failure.reason}" if failure.reason else ""
        sys.exit(f"walfeed consumer: {failure.code}{reason}: {failure.message}")
    print(f"retry in {delay * 1000:.0f}ms: {failure.reason or failure.code}: {failure.message}",
          file=sys.stderr, flush=True)
    return delay

