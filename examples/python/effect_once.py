#!/usr/bin/python3
"""A walfeed consumer whose effects land in PostgreSQL exactly once.

    PYTHONPATH=<walfeed package> /usr/bin/python3 effect_once.py \
        --server HOST:PORT --stream S --consumer C --dest-dsn DSN [--crash-after-commit N]

Each event becomes one row of applied_effects in the destination database
(DSN). Per batch: one destination transaction applies the new events and moves
the transactional watermark (walfeed.watermark), COMMIT, and only then the
batch's last id is acked to walfeed. Every Subscribe starts after the stored
watermark. applied_effects has no unique constraint on purpose: an event
applied twice would show as two rows.

--crash-after-commit N ends the process with os._exit(137) right after the N-th
destination COMMIT, before its ack: the window in which walfeed redelivers what
the destination already has (tests/clients/client_interop_test.cc uses it).
"""
import argparse
import os
import sys

import psycopg2
import walfeed
from walfeed.watermark import Watermark

CREATE_EFFECTS = """CREATE TABLE IF NOT EXISTS applied_effects (
  event_id   text NOT NULL,   -- deliberately not unique
  commit_lsn numeric(20) NOT NULL,
  idx        bigint NOT NULL,
  seq        text,            -- the row's "id" column, when it has one
  applied_at timestamptz NOT NULL DEFAULT now())"""


def effect(cur, event):
    """The side effect of one event: a row in applied_effects."""
    seq = next((v.text for v in event.new_values or event.old_values if v.name == "id"), None)
    cur.execute("INSERT INTO applied_effects (event_id, commit_lsn, idx, seq) "
                "VALUES (%s, %s, %s, %s)", (event.id, event.commit_lsn, event.index, seq))


def log(message):
    print(message, file=sys.stderr, flush=True)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--server", required=True, help="HOST:PORT (plaintext)")
    parser.add_argument("--stream", required=True)
    parser.add_argument("--consumer", required=True)
    parser.add_argument("--dest-dsn", required=True, help="libpq DSN of the destination")
    parser.add_argument("--crash-after-commit", type=int, default=0, metavar="N",
                        help="os._exit(137) after the N-th destination commit, before its ack")
    args = parser.parse_args()

    dest = psycopg2.connect(args.dest_dsn)
    with dest.cursor() as cur:
        cur.execute(CREATE_EFFECTS)
    dest.commit()
    wm = Watermark(dest, stream=args.stream, consumer=args.consumer)
    commits = 0

    def apply(batch):
        nonlocal commits
        events = [change.event for change in batch]
        try:
            with dest.cursor() as cur:  # psycopg2 BEGINs implicitly.
                applied, skipped = wm.apply(cur, events, effect)
            dest.commit()  # Effects and watermark together, or neither.
        except Exception:
            dest.rollback()
            raise
        commits += 1
        log(f"committed {events[-1].id} applied={applied} skipped={skipped}")
        if commits == args.crash_after_commit:
            log(f"crashing after commit {commits}, before its ack")
            os._exit(137)  # No cleanup, no ack: like a SIGKILL right here.
        # Returning lets the subscriber ack the batch: only after the COMMIT.

    # Every Subscribe starts after what the destination already has.
    subscriber = walfeed.Subscriber(
        args.server, args.stream, args.consumer, value_form="text", compact=False,
        ack=walfeed.AckPolicy.every_batches(1), start_after=wm.resume,
        on_started=lambda session, checkpoint: log(
            f"started session={session} checkpoint={checkpoint} "
            f"start_after={subscriber.last_start_after}"),
        on_acked=lambda event_id: log(f"acked {event_id}"),
        on_retry=lambda failure, delay: log(
            f"retry in {delay * 1000:.0f}ms: {failure.reason or failure.code}: {failure.message}"))
    try:
        subscriber.run(apply)
    except walfeed.WalfeedError as error:
        sys.exit(f"walfeed consumer: {error}")


if __name__ == "__main__":
    main()
