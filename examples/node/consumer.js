#!/usr/bin/env node
// A walfeed consumer: appends every change event to a file, then acks it.
//
//   node consumer.js --server HOST:PORT --stream S --consumer C --out FILE [--ack-every N]
//
// Built on the walfeed package (client/node), which runs the loop: subscribe,
// reconnect with backoff on what the API documents as retryable, ack by
// policy. Each event becomes one line "<id>\t<canonical JSON>"
// (examples/README.md defines the JSON). A batch is written and fsynced before
// it is acked, so a crash can only repeat events, never lose them: the server
// resumes after the last durable ack.
'use strict';
const fs = require('fs');
const { parseArgs } = require('util');
const walfeed = require('../../client/node');

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

async function main() {
  const { values } = parseArgs({ options: {
    server: { type: 'string' }, stream: { type: 'string' }, consumer: { type: 'string' },
    out: { type: 'string' }, 'ack-every': { type: 'string', default: '1' } } });
  for (const name of ['server', 'stream', 'consumer', 'out']) {
    if (!values[name]) throw new Error(`--${name} is required`);
  }
  const fd = openOutput(values.out);
  // The example's lines are PostgreSQL's text in the full form, byte for byte
  // the same in every language; a new consumer would take the defaults (typed
  // values as JavaScript values, compact events) and read change.row.
  const subscriber = new walfeed.Subscriber({
    server: values.server, stream: values.stream, consumer: values.consumer,
    valueForm: 'text', compact: false, ack: walfeed.AckPolicy.everyBatches(Number(values['ack-every'])),
    onStarted: (session, checkpoint) => console.error(`started session=${session} checkpoint=${checkpoint}`),
    onAcked: (id) => console.error(`acked ${id}`),
    onRetry: (failure, delayMs) => console.error(
      `retry in ${Math.round(delayMs)}ms: ${failure.reason || failure.code}: ${failure.message}`),
  });
  await subscriber.run((batch) => {
    fs.writeSync(fd, batch.map((c) => `${c.id}\t${canonical(c.event)}\n`).join(''));
    fs.fsyncSync(fd); // Durable first; the subscriber acks after this returns.
  });
}

main().catch((err) => {
  console.error(`walfeed consumer: ${err.message}`);
  process.exit(err instanceof walfeed.WalfeedError ? 1 : 2);
});
