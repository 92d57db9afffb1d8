#!/usr/bin/env node
// A walfeed consumer whose effects land in PostgreSQL exactly once (the Node
// twin of examples/python/effect_once.py).
//
//   node effect_once.js --server HOST:PORT --stream S --consumer C --dest-dsn DSN [--crash-after-commit N]
//
// Each event becomes one row of applied_effects in the destination database
// (DSN: a libpq key/value string or a postgres:// URL). Per batch: one
// destination transaction applies the new events and moves the watermark
// (walfeed.Watermark), COMMIT, and only then the batch is acked. Every
// Subscribe starts after the stored watermark. applied_effects has no unique
// constraint on purpose: an event applied twice would show as two rows.
//
// --crash-after-commit N exits with code 137 right after the N-th destination
// COMMIT, before its ack: the window in which walfeed redelivers what the
// destination already has.
'use strict';
const { parseArgs } = require('util');
const { Client } = require('pg');
const walfeed = require('../../client/node');

const CREATE_EFFECTS = `CREATE TABLE IF NOT EXISTS applied_effects (
  event_id   text NOT NULL,
  commit_lsn numeric(20) NOT NULL,
  idx        bigint NOT NULL,
  seq        text,
  applied_at timestamptz NOT NULL DEFAULT now())`;

// node-postgres reads URLs; a libpq key/value string becomes its fields.
function connectionOf(dsn) {
  if (/^postgres(ql)?:\/\//.test(dsn)) return { connectionString: dsn };
  const fields = Object.fromEntries(dsn.trim().split(/\s+/).map((pair) => pair.split('=', 2)));
  return { host: fields.host, port: Number(fields.port ?? 5432), user: fields.user,
    password: fields.password, database: fields.dbname };
}

async function main() {
  const { values } = parseArgs({ options: {
    server: { type: 'string' }, stream: { type: 'string' }, consumer: { type: 'string' },
    'dest-dsn': { type: 'string' }, 'crash-after-commit': { type: 'string', default: '0' } } });
  for (const name of ['server', 'stream', 'consumer', 'dest-dsn']) {
    if (!values[name]) throw new Error(`--${name} is required`);
  }
  const crashAfter = Number(values['crash-after-commit']);
  const dest = new Client(connectionOf(values['dest-dsn']));
  await dest.connect();
  await dest.query(CREATE_EFFECTS);
  const wm = await walfeed.Watermark.open(dest, values.stream, values.consumer);
  let commits = 0;
  const subscriber = new walfeed.Subscriber({
    server: values.server, stream: values.stream, consumer: values.consumer,
    valueForm: 'text', compact: false, ack: walfeed.AckPolicy.everyBatches(1),
    startAfter: () => wm.resume(), // Every Subscribe: after what the destination has.
    onStarted: (session, checkpoint) => console.error(
      `started session=${session} checkpoint=${checkpoint} start_after=${subscriber.lastStartAfter}`),
    onAcked: (id) => console.error(`acked ${id}`),
    onRetry: (failure, delayMs) => console.error(
      `retry in ${Math.round(delayMs)}ms: ${failure.reason || failure.code}: ${failure.message}`),
  });
  await subscriber.run(async (batch) => {
    let result;
    await dest.query('BEGIN');
    try {
      result = await wm.apply(dest, batch, async (change) => {
        const values = change.event.new_values.length ? change.event.new_values : change.event.old_values;
        const seq = values.find((v) => v.name === 'id')?.text ?? null;
        await dest.query('INSERT INTO applied_effects (event_id, commit_lsn, idx, seq) VALUES ($1, $2, $3, $4)',
          [change.id, change.event.commit_lsn, change.event.index, seq]);
      });
      await dest.query('COMMIT'); // Effects and watermark together, or neither.
    } catch (err) {
      await dest.query('ROLLBACK');
      throw err;
    }
    commits += 1;
    console.error(`committed ${batch[batch.length - 1].id} applied=${result.applied} skipped=${result.skipped}`);
    if (commits === crashAfter) {
      console.error(`crashing after commit ${commits}, before its ack`);
      process.exit(137); // No ack: like a SIGKILL right here.
    }
    // Returning lets the subscriber ack the batch: only after the COMMIT.
  });
}

main().catch((err) => {
  console.error(`walfeed consumer: ${err.message}`);
  process.exit(err instanceof walfeed.WalfeedError ? 1 : 2);
});
