'use strict';
// Watermark: the last applied event id of one (consumer, stream), stored in
// the destination PostgreSQL database in the same transaction as the effects:
// exactly-once effects on top of at-least-once delivery. The Node twin of
// walfeed::PgWatermark (C++) and walfeed.watermark (Python), on the same
// table. It takes any client with node-postgres's query(text, values) ->
// { rows } (a pg.Client, or a pool's client inside a transaction).
//
//   const wm = await Watermark.open(client, 'orders', 'billing');
//   const sub = new Subscriber({ ..., startAfter: () => wm.resume(), ack: AckPolicy.everyBatches(1) });
//   await sub.run(async (batch) => {
//     await client.query('BEGIN');
//     await wm.apply(client, batch, (change) => effect(change));   // skips what was applied
//     await client.query('COMMIT');   // effects and watermark together; then the ack
//   });
//
// Ids order as (commit LSN, index), stored as numbers, so "0/9:0" < "0/10:0".
const { EventId, lsnText } = require('./ids');

function quoteIdent(name) {
  return name.split('.', 2).map((part) => `"${part.replace(/"/g, '""')}"`).join('.');
}

class Watermark {
  constructor(client, stream, consumer, table) {
    Object.assign(this, { client, stream, consumer, table: quoteIdent(table) });
  }

  // Creates the table (if missing) and this consumer's row.
  static async open(client, stream, consumer, table = 'walfeed_watermark') {
    if (!stream || !consumer) throw new Error('walfeed watermark: stream and consumer must be set');
    const wm = new Watermark(client, stream, consumer, table);
    const { rows } = await client.query('SELECT to_regclass($1) IS NOT NULL AS present', [table]);
    if (!rows[0].present) { // Looked up first only to spare a NOTICE.
      const create = `CREATE TABLE IF NOT EXISTS ${wm.table} (
        consumer   text NOT NULL,
        stream     text NOT NULL,
        last_id    text,
        commit_lsn pg_lsn,
        idx        bigint CHECK (idx BETWEEN 0 AND 4294967295),
        updated_at timestamptz NOT NULL DEFAULT now(),
        PRIMARY KEY (consumer, stream))`;
      try {
        await client.query(create);
      } catch {
        await client.query(create); // Two processes created it at once: it exists now.
      }
    }
    await wm.insertRow(client);
    return wm;
  }

  insertRow(client) {
    return client.query(`INSERT INTO ${this.table} (consumer, stream) VALUES ($1, $2) ON CONFLICT DO NOTHING`,
      [this.consumer, this.stream]);
  }

  // The stored id, for the Subscriber's startAfter; '' when nothing was applied.
  async resume() {
    const { rows } = await this.client.query(`SELECT last_id FROM ${this.table} WHERE consumer = $1 AND stream = $2`,
      [this.consumer, this.stream]);
    return rows[0]?.last_id ?? '';
  }

  // Applies a batch inside the caller's transaction (BEGIN before, COMMIT
  // after, on `client`): locks the row, skips every event at or below the
  // stored (commit LSN, index), awaits effect(change) for the others in order
  // and stores the newest applied id. Returns { applied, skipped }.
  async apply(client, batch, effect) {
    const lock = `SELECT (commit_lsn - '0/0'::pg_lsn)::text AS lsn, idx FROM ${this.table} ` +
      'WHERE consumer = $1 AND stream = $2 FOR UPDATE';
    let { rows } = await client.query(lock, [this.consumer, this.stream]);
    if (!rows.length) { // Deleted since open(): make it again, then lock it.
      await this.insertRow(client);
      ({ rows } = await client.query(lock, [this.consumer, this.stream]));
    }
    const stored = rows[0]?.lsn != null ? new EventId(BigInt(rows[0].lsn), Number(rows[0].idx)) : null;
    let applied = 0;
    let skipped = 0;
    let newest = null;
    for (const change of batch) {
      const id = new EventId(BigInt(change.event.commit_lsn), change.event.index);
      if (stored && id.compare(stored) <= 0) {
        skipped += 1;
        continue;
      }
      await effect(change);
      applied += 1;
      newest = change.event;
    }
    if (newest) {
      await client.query(`UPDATE ${this.table} SET last_id = $1, commit_lsn = $2::pg_lsn, idx = $3, ` +
        'updated_at = now() WHERE consumer = $4 AND stream = $5',
      [newest.id, lsnText(BigInt(newest.commit_lsn)), newest.index, this.consumer, this.stream]);
    }
    return { applied, skipped };
  }
}

module.exports = { Watermark };
