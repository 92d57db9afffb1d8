"""Watermark: exactly-once effects in PostgreSQL on top of
walfeed's at-least-once delivery (the Python twin of walfeed::PgWatermark,
client/include/walfeed/pg_watermark.h; same table, so the two can share it).

walfeed redelivers every event after a consumer's last durable ack. Since ids
are totally ordered by (commit LSN, index) and each consumer gets its events in
increasing id order, "which events did I already apply?" is always "every id up
to some id": one row per (consumer, stream) in the destination database.

The pattern, per batch, with a psycopg2 connection to the destination:

    wm = Watermark(conn, stream="orders", consumer="billing")   # creates table + row
    start_after = wm.resume()        # "" when nothing was applied yet
    ... Subscribe(start_after=start_after) ...
    for each events batch:
        with conn.cursor() as cur:   # psycopg2 opens the transaction implicitly
            wm.apply(cur, batch, effect)   # effect(cur, event) for new events only
        conn.commit()                # effects and watermark commit together ...
        Ack(batch[-1].id)            # ... and only then is walfeed acked

Why each crash window is safe:
  - before COMMIT: neither the effects nor the watermark are stored and nothing
    was acked; the events come again and are applied once;
  - after COMMIT, before the ack: a restart subscribes after resume() and does
    not even receive them; if they come anyway (subscribing after the server's
    checkpoint), apply() skips every id at or below the stored one;
  - COMMIT's outcome unknown (connection lost): the stored id says what
    happened, so the next apply() does the right thing either way.
The row lock (SELECT ... FOR UPDATE, held to the end of the transaction)
serializes two processes applying for the same (consumer, stream).

Rules: ack walfeed only after the destination committed, and resume after the
stored id. start_after is then never below the server's checkpoint, which the
server requires (a destination restored from an old backup gets OUT_OF_RANGE).
"""
import psycopg2
import psycopg2.errors
from psycopg2 import sql

# The same shape as walfeed::PgWatermark's table. commit_lsn and idx are the id's
# numeric parts, so ordering never depends on the text: "0/9:0" > "0/10:0" as text.
_CREATE = """CREATE TABLE IF NOT EXISTS {table} (
  consumer   text NOT NULL,
  stream     text NOT NULL,
  last_id    text,          -- "0/1A2B3C8:4", NULL until something is applied
  commit_lsn pg_lsn,        -- the id's parts, for numeric ordering
  idx        bigint CHECK (idx BETWEEN 0 AND 4294967295),  -- a uint32
  updated_at timestamptz NOT NULL DEFAULT now(),
  PRIMARY KEY (consumer, stream))"""


def lsn_text(lsn):
    """A uint64 LSN in PostgreSQL's X/Y text form (what pg_lsn parses)."""
    return f"{lsn >> 32:X}/{lsn & 0xFFFFFFFF:X}"


class Watermark:
    """The last applied event id of one (consumer, stream), in table `table`."""

    def __init__(self, conn, stream, consumer, table="walfeed_watermark"):
        """Creates the table (if missing) and this consumer's row, and commits.

        Call it outside a transaction: it commits whatever `conn` has open.
        """
        if not stream or not consumer:
            raise ValueError("watermark: stream and consumer must be set")
        self.conn, self.stream, self.consumer = conn, stream, consumer
        self.table = sql.Identifier(*table.split(".", 1))
        create = sql.SQL(_CREATE).format(table=self.table)
        try:
            with conn.cursor() as cur:
                cur.execute("SELECT to_regclass(%s) IS NOT NULL", (table,))
                if not cur.fetchone()[0]:  # Looked up first only to spare a NOTICE.
                    cur.execute(create)
            conn.commit()
        except (psycopg2.errors.UniqueViolation, psycopg2.errors.DuplicateTable):
            # Two processes created it at once: it exists now, IF NOT EXISTS is a no-op.
            conn.rollback()
            with conn.cursor() as cur:
                cur.execute(create)
            conn.commit()
        # The row exists before any apply(), so apply() can always lock it.
        with conn.cursor() as cur:
            cur.execute(sql.SQL("INSERT INTO {} (consumer, stream) VALUES (%s, %s) "
                                "ON CONFLICT DO NOTHING").format(self.table),
                        (consumer, stream))
        conn.commit()

    def resume(self):
        """The stored id, for Subscribe's start_after; "" when nothing was applied."""
        with self.conn.cursor() as cur:
            cur.execute(sql.SQL("SELECT last_id FROM {} WHERE consumer = %s AND stream = %s")
                        .format(self.table), (self.consumer, self.stream))
            row = cur.fetchone()
        self.conn.commit()  # Leave no transaction open (the SELECT began one).
        return row[0] if row and row[0] is not None else ""

    def apply(self, cur, events, effect):
        """Applies a batch inside the caller's transaction; returns (applied, skipped).

        Locks the watermark row, skips every event at or below the stored
        (commit_lsn, index), calls effect(cur, event) for the others in order and
        stores the newest applied id. Nothing is durable until the caller commits;
        if effect raises, roll back (the events come again).
        """
        if cur.connection.autocommit:
            raise ValueError("watermark: apply needs a transaction (autocommit is on): "
                             "the effects and the stored id must commit together")
        lock = sql.SQL("SELECT (commit_lsn - '0/0'::pg_lsn)::numeric, idx FROM {} "
                       "WHERE consumer = %s AND stream = %s FOR UPDATE").format(self.table)
        key = (self.consumer, self.stream)
        cur.execute(lock, key)
        row = cur.fetchone()
        if row is None:  # Deleted since __init__: make it again, then lock it.
            cur.execute(sql.SQL("INSERT INTO {} (consumer, stream) VALUES (%s, %s) "
                                "ON CONFLICT DO NOTHING").format(self.table), key)
            cur.execute(lock, key)
            row = cur.fetchone()
        # Compared as numbers: (commit LSN as a uint64, index in the transaction).
        stored = (int(row[0]), int(row[1])) if row and row[0] is not None else None
        applied = skipped = 0
        newest = None
        for event in events:
            if stored is not None and (event.commit_lsn, event.index) <= stored:
                skipped += 1
                continue
            effect(cur, event)
            applied += 1
            newest = event
        if newest is not None:
            cur.execute(sql.SQL("UPDATE {} SET last_id = %s, commit_lsn = %s::pg_lsn, "
                                "idx = %s, updated_at = now() "
                                "WHERE consumer = %s AND stream = %s").format(self.table),
                        (newest.id, lsn_text(newest.commit_lsn), newest.index) + key)
        return applied, skipped
