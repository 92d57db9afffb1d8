'use strict';
// walfeed's error details and which errors a subscriber retries (the same
// policy as the Python and C++ clients; docs/clients.md, "Errors"):
//   - a google.rpc.RetryInfo: subscribe again after its delay plus a jittered backoff;
//   - UNAVAILABLE or CANCELLED without walfeed's details: gRPC's own (the
//     connection was lost or refused, a proxy reset the stream): the backoff;
//   - anything else needs a human: WalfeedError.
// The google.rpc messages are decoded by protobufjs from proto/google/rpc.
const path = require('path');
const grpc = require('@grpc/grpc-js');
const protobuf = require('protobufjs');
const { PROTO_DIR } = require('./api');

const rpc = new protobuf.Root().loadSync(['status.proto', 'error_details.proto'].map(
  (file) => path.join(PROTO_DIR, 'google', 'rpc', file)), { keepCase: true });
const RpcStatus = rpc.lookupType('google.rpc.Status');
const ErrorInfo = rpc.lookupType('google.rpc.ErrorInfo');
const RetryInfo = rpc.lookupType('google.rpc.RetryInfo');

class WalfeedError extends Error {
  constructor(failure) {
    super(`${failure.code}${failure.reason ? ` ${failure.reason}` : ''}: ${failure.message}`);
    this.code = failure.code;
    this.reason = failure.reason;
    this.details = failure.message;
  }
}

// Why a call failed: the code's name, walfeed's reason ('' if none), the
// server's retry delay in ms (null if it gave none) and the message.
function failureOf(err) {
  const failure = { code: grpc.status[err.code] ?? 'UNKNOWN', message: err.details ?? err.message,
    reason: '', retryDelayMs: null };
  for (const bin of err.metadata?.get?.('grpc-status-details-bin') ?? []) {
    let details;
    try {
      details = RpcStatus.decode(bin).details;
    } catch {
      continue; // Not a google.rpc.Status: as if there were no details.
    }
    for (const any of details) {
      const type = any.type_url.slice(any.type_url.lastIndexOf('/') + 1);
      try {
        if (type === 'google.rpc.ErrorInfo') {
          const info = ErrorInfo.decode(any.value);
          if (info.domain === 'walfeed.v1') failure.reason = info.reason;
        } else if (type === 'google.rpc.RetryInfo') {
          const delay = RetryInfo.toObject(RetryInfo.decode(any.value), { longs: Number }).retry_delay;
          failure.retryDelayMs = (delay?.seconds ?? 0) * 1000 + (delay?.nanos ?? 0) / 1e6;
        }
      } catch {
        // A malformed detail: as if it were absent.
      }
    }
  }
  return failure;
}

// Milliseconds to wait before subscribing again (attempt counts from 0), or
// null: give up. Capped exponential backoff with full jitter on top of what
// the server asked for.
function nextDelayMs(failure, attempt, capMs = 5000) {
  if (failure.retryDelayMs === null &&
      (failure.reason || (failure.code !== 'UNAVAILABLE' && failure.code !== 'CANCELLED'))) {
    return null;
  }
  return (failure.retryDelayMs ?? 0) + Math.random() * Math.min(capMs, 100 * 2 ** attempt);
}

module.exports = { WalfeedError, failureOf, nextDelayMs };
