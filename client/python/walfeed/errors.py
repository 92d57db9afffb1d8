"""walfeed's error details and which errors a subscriber retries.

Every error of a walfeed server carries, in the grpc-status-details-bin
trailer, a google.rpc.Status whose details hold a google.rpc.ErrorInfo
(domain "walfeed.v1", `reason` e.g. "SESSION_SUPERSEDED") and, when a retry is
right, a google.rpc.RetryInfo. The three messages are read here straight from
their wire format, so the package needs no google.rpc stubs (and cannot clash
with another package that registers them).

The policy (docs/clients.md, "Errors"):
  - a RetryInfo: subscribe again after its delay plus a jittered backoff;
  - UNAVAILABLE or CANCELLED without walfeed's details: made by gRPC itself
    (the connection was lost or refused, or a proxy reset the stream): retried
    with the backoff;
  - anything else needs a human: WalfeedError.
"""
import random

DOMAIN = "walfeed.v1"
_ERROR_INFO = "type.googleapis.com/google.rpc.ErrorInfo"
_RETRY_INFO = "type.googleapis.com/google.rpc.RetryInfo"


class WalfeedError(Exception):
    """A subscription ended in a way no retry can fix."""

    def __init__(self, code, message, reason=""):
        self.code, self.message, self.reason = code, message, reason
        super().__init__(f"{code}{' ' + reason if reason else ''}: {message}")


def _fields(data):
    """(field number, wire type, value) of a protobuf message's fields; value
    is an int for varints and bytes for length-delimited fields. Stops at
    anything else or at malformed bytes (the caller then sees fewer fields)."""
    pos = 0

    def varint():
        nonlocal pos
        shift = result = 0
        while pos < len(data) and shift < 64:
            byte = data[pos]
            pos += 1
            result |= (byte & 0x7F) << shift
            if byte < 0x80:
                return result
            shift += 7
        raise ValueError("truncated varint")

    try:
        while pos < len(data):
            key = varint()
            number, wire = key >> 3, key & 7
            if wire == 0:
                yield number, wire, varint()
            elif wire == 2:
                size = varint()
                if pos + size > len(data):
                    return
                yield number, wire, data[pos:pos + size]
                pos += size
            else:
                return
    except ValueError:
        return


class Failure:
    """Why a subscription ended: the code's name, walfeed's reason ("" if
    none), the server's retry delay in seconds (None if it gave none) and the
    message."""

    def __init__(self, code, message, reason="", retry_delay=None):
        self.code, self.message, self.reason, self.retry_delay = code, message, reason, retry_delay

    @classmethod
    def of(cls, error):
        """The Failure a grpc.RpcError describes."""
        failure = cls(error.code().name, error.details() or "")
        for key, value in error.trailing_metadata() or ():
            if key == "grpc-status-details-bin":
                failure._read_status(value)
        return failure

    def _read_status(self, status):
        for number, wire, detail in _fields(status):
            if number != 3 or wire != 2:  # google.rpc.Status.details: repeated Any.
                continue
            any_fields = {n: v for n, w, v in _fields(detail) if w == 2}
            type_url, value = any_fields.get(1, b"").decode(errors="replace"), any_fields.get(2, b"")
            if type_url == _ERROR_INFO:
                info = {n: v for n, w, v in _fields(value) if w == 2}
                if info.get(2, b"") == DOMAIN.encode():
                    self.reason = info.get(1, b"").decode(errors="replace")
            elif type_url == _RETRY_INFO:
                for n, w, duration in _fields(value):
                    if n == 1 and w == 2:
                        parts = {dn: dv for dn, dw, dv in _fields(duration) if dw == 0}
                        self.retry_delay = parts.get(1, 0) + parts.get(2, 0) / 1e9

    def retryable(self):
        return self.retry_delay is not None or (
            not self.reason and self.code in ("UNAVAILABLE", "CANCELLED"))

    def next_delay(self, attempt, cap=5.0):
        """Seconds to wait before subscribing again (attempt counts from 0), or
        None: give up. Capped exponential backoff with full jitter on top of
        what the server asked for."""
        if not self.retryable():
            return None
        return (self.retry_delay or 0.0) + random.uniform(0, min(cap, 0.1 * 2 ** attempt))

    def error(self):
        return WalfeedError(self.code, self.message, self.reason)
