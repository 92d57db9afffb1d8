#!/usr/bin/env node
// A walfeed consumer: appends every change event to a file, then acks it.
//
//   node consumer.js --server HOST:PORT --stream S --consumer C --out FILE [--ack-every N]
//
// Each event becomes one line "<id>\t<canonical JSON>" (examples/README.md defines
// the JSON). A batch is written and fsynced before it is acked, so a crash can
// only repeat events, never lose them: the server resumes after the last durable
// ack. The API is loaded from the .proto at run time; nothing is generated.
'use strict';
const fs = require('fs');
const path = require('path');
const { parseArgs } = require('util');
const grpc = require('@grpc/grpc-js');
const protoLoader = require('@grpc/proto-loader');
const protobuf = require('protobufjs');

// keepCase: fields keep their proto names (new_values, session_id): without it
// proto-loader expects camelCase and silently drops snake_case request fields.
// oneofs: each response says which frame it holds (`frame`). The import
// google/protobuf/timestamp.proto is bundled with protobufjs.
const PROTO_DIR = process.env.WALFEED_PROTO_DIR || path.join(__dirname, '..', '..', 'proto');
const definition = protoLoader.loadSync('walfeed/v1/change_stream.proto', {
  includeDirs: [PROTO_DIR], keepCase: true, oneofs: true, longs: String, enums: String, defaults: true,
});
const { ChangeStream } = grpc.loadPackageDefinition(definition).walfeed.v1;

// Every walfeed error carries, in the grpc-status-details-bin trailer, a
// google.rpc.Status whose details hold a google.rpc.ErrorInfo (domain
// "walfeed.v1", reason: an ErrorReason value's name without ERROR_REASON_) and,
// when a retry is right, a google.rpc.RetryInfo. protobufjs decodes them from
// proto/google/rpc (its imports, google/protobuf/*.proto, are bundled with it).
const rpc = new protobuf.Root().loadSync(['status.proto', 'error_details.proto'].map(
  (file) => path.join(PROTO_DIR, 'google', 'rpc', file)), { keepCase: true });
const RpcStatus = rpc.lookupType('google.rpc.Status');
const ErrorInfo = rpc.lookupType('google.rpc.ErrorInfo');
const RetryInfo = rpc.lookupType('google.rpc.RetryInfo');

// Why a subscription ended: the code's name, walfeed's reason ('' if none), the
// server's retry delay in ms (null if it gave none) and the message.
function failureOf(err) {
  const failure = { code: grpc.status[err.code] ?? 'UNKNOWN', message: err.details ?? err.message,
    reason: '', retryDelayMs: null };
  for (const bin of err.metadata?.get('grpc-status-details-bin') ?? []) {
    let details;
    try {
      details = RpcStatus.decode(bin).details;
    } catch {
      continue; // Not a google.rpc.Status: as if there were no details.
    }
    for (const any of details) {
      const type = any.type_url.slice(any.type_url.lastIndexOf('/') + 1);
      if (type === 'google.rpc.ErrorInfo') {
        const info = ErrorInfo.decode(any.value);
        if (info.domain === 'walfeed.v1') failure.reason = info.reason;
      } else if (type === 'google.rpc.RetryInfo') {
        const delay = RetryInfo.toObject(RetryInfo.decode(any.value), { longs: Number }).retry_delay;
        failure.retryDelayMs = (delay?.seconds ?? 0) * 1000 + (delay?.nanos ?? 0) / 1e6;
      }
    }
  }
  return failure;
}

// The retry policy, the same in the Python and Go examples: after a RetryInfo,
// its delay plus a jittered backoff; UNAVAILABLE or CANCELLED without walfeed's
// details are gRPC's own (the connection was lost or refused; the consumer never
// cancels a call it still reads, so a CANCELLED is the transport's, e.g. a proxy
// resetting the stream), retried with the backoff; anything else needs a human:
// null, give up.
function nextDelayMs(failure, attempt) {
  if (failure.retryDelayMs === null &&
      (failure.reason || (failure.code !== 'UNAVAILABLE' && failure.code !== 'CANCELLED'))) {
    return null;
  }
  // Capped exponential backoff with full jitter: up to 100 ms, 200 ms, ... 3.2 s, then 5 s.
  return (failure.retryDelayMs ?? 0) + Math.random() * Math.min(5000, 100 * 2 ** attempt);
}

// After an Ack refused with ABORTED (the session is no longer the consumer's
// active one: reset, taken over, being removed), the Subscribe stream's own
// status follows at once and says which. Frames are dropped until it comes; if
// they still come this long after, the Ack's error stands.
const DRAIN_MS = 10000;

// The event as canonical JSON: keys inserted in sorted order, no spaces.
function canonical(e) {
  const columns = (values) => values.map((v) => ({ kind: v.kind, name: v.name, text: v.text }));
  return JSON.stringify({
    new_values: columns(e.new_values), old_values: columns(e.old_values),
    op: e.op, schema: e.schema, table: e.table,
  });
}

// Opens FILE for appending, first cutting off a line torn by a crash.
function openOutput(file) {
  if (fs.existsSync(file)) {
    const data = fs.readFileSync(file);
    if (data.length && data[data.length - 1] !== 0x0a) {
      fs.truncateSync(file, data.lastIndexOf(0x0a) + 1); // Those events were never acked.
    }
  }
  return fs.openSync(file, 'a');
}

// One subscription, until the server ends it (the iterator throws its status).
async function consume(client, args, fd, onStarted) {
  const ack = (request) => new Promise((resolve, reject) =>
    client.Ack(request, (err, response) => (err ? reject(err) : resolve(response))));
  // waitForReady: while the server is unreachable, the call waits for the
  // channel to reconnect instead of failing at once.
  const call = client.Subscribe({ stream: args.stream, consumer: args.consumer },
    new grpc.Metadata({ waitForReady: true }));
  let session = '';
  // ackTo: the newest id this process may ack (the last event written, or a
  // position the server passed: events our filters left out); acked: the last one acked.
  let ackTo = '';
  let acked = '';
  let pending = 0;
  let refused = null; // An Ack refused with ABORTED: see DRAIN_MS.
  let giveUpAt = 0;
  try {
    for await (const response of call) {
      if (refused) { // Dropped, never written: the stream's status decides.
        if (Date.now() > giveUpAt) throw refused;
        continue;
      }
      if (response.frame === 'started') { // Always first: names the session acks go to.
        session = response.started.session_id;
        console.error(`started session=${session} checkpoint=${response.started.checkpoint}`);
        onStarted();
        continue;
      }
      if (response.frame === 'events') {
        const events = response.events.events;
        fs.writeSync(fd, events.map((e) => `${e.id}\t${canonical(e)}\n`).join(''));
        fs.fsyncSync(fd); // Durable first ...
        ackTo = response.events.passed || events[events.length - 1].id;
        pending += 1;
      } else if (response.frame === 'progress' && response.progress.passed &&
                 response.progress.passed !== acked) {
        // Idle, and everything written: what the server passed since (events a
        // filter left out) is ackable too, so the checkpoint keeps up.
        ackTo = response.progress.passed;
        pending += 1;
      }
      // ... then ack, cumulatively: every --ack-every batches, and when idle.
      if (pending && (pending >= args.ackEvery || response.frame === 'progress')) {
        try {
          await ack({ stream: args.stream, consumer: args.consumer, session_id: session,
            event_id: ackTo });
        } catch (err) {
          if (err.code !== grpc.status.ABORTED) throw err; // Decides by itself.
          refused = err;
          giveUpAt = Date.now() + DRAIN_MS;
          continue;
        }
        console.error(`acked ${ackTo}`);
        acked = ackTo;
        pending = 0;
      }
    }
    if (refused) throw refused;
  } finally {
    call.cancel(); // Ends the subscription if an Ack failed; harmless otherwise.
  }
}

async function main() {
  const { values } = parseArgs({ options: {
    server: { type: 'string' }, stream: { type: 'string' }, consumer: { type: 'string' },
    out: { type: 'string' }, 'ack-every': { type: 'string', default: '1' } } });
  const args = { ...values, ackEvery: Number(values['ack-every']) };
  for (const name of ['server', 'stream', 'consumer', 'out']) {
    if (!args[name]) throw new Error(`--${name} is required`);
  }
  // Reconnect at most 5 s after the server is back (gRPC's default grows to 120 s).
  // No receive limit (-1): gRPC's 4 MiB default would fail on a large row's event forever.
  const client = new ChangeStream(args.server, grpc.credentials.createInsecure(),
    { 'grpc.max_reconnect_backoff_ms': 5000, 'grpc.max_receive_message_length': -1 });
  const fd = openOutput(args.out);
  let attempt = 0;
  for (;;) {
    let failure = { code: 'UNAVAILABLE', message: 'the stream ended', reason: '',
      retryDelayMs: null }; // Never expected: the server always ends with a status.
    try {
      await consume(client, args, fd, () => { attempt = 0; });
    } catch (err) {
      failure = failureOf(err); // Not a gRPC error (a failed write): UNKNOWN, given up.
    }
    const delayMs = nextDelayMs(failure, attempt);
    if (delayMs === null) {
      const reason = failure.reason ? ` ${failure.reason}` : '';
      console.error(`walfeed consumer: ${failure.code}${reason}: ${failure.message}`);
      process.exit(1);
    }
    // The next Subscribe resumes after the server's durable checkpoint.
    attempt += 1;
    console.error(`retry in ${Math.round(delayMs)}ms: ${failure.reason || failure.code}: ${failure.message}`);
    await new Promise((resolve) => setTimeout(resolve, delayMs));
  }
}

main().catch((err) => { console.error(`walfeed consumer: ${err.message}`); process.exit(2); });
