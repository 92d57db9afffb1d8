#!/usr/bin/python3
"""A walfeed consumer whose effects land in PostgreSQL exactly once.

    PYTHONPATH=<stubs>:examples/python /usr/bin/python3 effect_once.py \
        --server HOST:PORT --stream S --consumer C --dest-dsn DSN [--crash-after-commit N]

Each event becomes one row of applied_effects in the destination database
(DSN). Per batch: one destination transaction applies the new events and moves
the transactional watermark (watermark.py), COMMIT, and only then the batch's
last id is acked to walfeed. A (re)start subscribes with start_after = the
stored watermark. applied_effects has no unique constraint on purpose: an event
applied twice would show as two rows.

--crash-after-commit N ends the process with os._exit(137) right after the N-th
destination COMMIT, before its ack: the window in which walfeed redelivers what
the destination already has (tests/clients/client_interop_test.cc uses it).
"""
import argparse
import os
import sys
import time

import grpc
import psycopg2
from walfeed.v1 import change_stream_pb2 as pb
from walfeed.v1 import change_stream_pb2_grpc as pb_grpc

from retry_policy import DRAIN_SECONDS, Failure, retry_or_exit
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


def consume(stub, args, dest, wm, on_started):
    """One subscription, until the server ends it (grpc.RpcError)."""
    start_after = wm.resume()  # Everything up to here is in the destination already.
    call = stub.Subscribe(pb.SubscribeRequest(stream=args.stream, consumer=args.consumer,
                                              start_after=start_after),
                          wait_for_ready=True)
    session = None
    refused, give_up_at = None, 0.0  # An Ack refused with ABORTED, as in consumer.py.
    try:
        for response in call:
            if refused:  # Dropped, never applied: the stream's status decides.
                if time.monotonic() > give_up_at:
                    raise refused
                continue
            frame = response.WhichOneof("frame")
            if frame == "started":
                session = response.started.session_id
                log(f"started session={session} checkpoint={response.started.checkpoint} "
                    f"start_after={start_after}")
                on_started()
                continue
            if frame != "events":
                continue
            events = response.events.events
            try:
                with dest.cursor() as cur:  # psycopg2 BEGINs implicitly.
                    applied, skipped = wm.apply(cur, events, effect)
                dest.commit()  # Effects and watermark together, or neither.
            except Exception:
                dest.rollback()
                raise
            args.commits += 1
            log(f"committed {events[-1].id} applied={applied} skipped={skipped}")
            if args.commits == args.crash_after_commit:
                log(f"crashing after commit {args.commits}, before its ack")
                os._exit(137)  # No cleanup, no ack: like a SIGKILL right here.
            # Only after the destination commit: a cumulative ack.
            try:
                stub.Ack(pb.AckRequest(stream=args.stream, consumer=args.consumer,
                                       session_id=session, event_id=events[-1].id))
            except grpc.RpcError as error:
                if error.code() != grpc.StatusCode.ABORTED:
                    raise
                refused, give_up_at = error, time.monotonic() + DRAIN_SECONDS
                continue
            log(f"acked {events[-1].id}")
        if refused:
            raise refused
    finally:
        call.cancel()


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--server", required=True, help="HOST:PORT (plaintext)")
    parser.add_argument("--stream", required=True)
    parser.add_argument("--consumer", required=True)
    parser.add_argument("--dest-dsn", required=True, help="libpq DSN of the destination")
    parser.add_argument("--crash-after-commit", type=int, default=0, metavar="N",
                        help="os._exit(137) after the N-th destination commit, before its ack")
    args = parser.parse_args()
    args.commits = 0

    dest = psycopg2.connect(args.dest_dsn)
    with dest.cursor() as cur:
        cur.execute(CREATE_EFFECTS)
    dest.commit()
    wm = Watermark(dest, stream=args.stream, consumer=args.consumer)

    # As in consumer.py: 5 s reconnect backoff cap, no receive limit (a row's event
    # can exceed gRPC's 4 MiB default, which would fail on it forever).
    channel = grpc.insecure_channel(args.server, options=[("grpc.max_reconnect_backoff_ms", 5000),
                                                          ("grpc.max_receive_message_length", -1)])
    stub = pb_grpc.ChangeStreamStub(channel)
    attempt = 0
    def live():
        nonlocal attempt
        attempt = 0
    while True:  # consumer.py's retry loop (retry_policy.py).
        try:
            consume(stub, args, dest, wm, on_started=live)
            failure = Failure("UNAVAILABLE", "the stream ended")  # Never expected.
        except grpc.RpcError as error:
            failure = Failure.of(error)
        delay = retry_or_exit(failure, attempt)
        attempt += 1
        time.sleep(delay)


if __name__ == "__main__":
    main()
