#!/usr/bin/python3
"""A walfeed consumer: appends every change event to a file, then acks it.

    PYTHONPATH=<stubs> /usr/bin/python3 consumer.py --server HOST:PORT \
        --stream S --consumer C --out FILE [--ack-every N]

Each event becomes one line "<id>\\t<canonical JSON>" (examples/README.md defines
the JSON). A batch is written and fsynced before it is acked, so a crash can only
repeat events, never lose them: the server resumes after the last durable ack.
The stubs come from protoc + grpc_python_plugin (see examples/build.sh); the
retry policy, read from the error details walfeed attaches, is retry_policy.py.
"""
import argparse
import json
import os
import sys
import time

import grpc
from walfeed.v1 import change_stream_pb2 as pb
from walfeed.v1 import change_stream_pb2_grpc as pb_grpc

from retry_policy import DRAIN_SECONDS, Failure, retry_or_exit


def canonical(event):
    """The event as canonical JSON: sorted keys, no spaces, UTF-8 text."""
    def columns(values):
        return [{"kind": pb.ValueKind.Name(v.kind), "name": v.name, "text": v.text}
                for v in values]
    return json.dumps({"new_values": columns(event.new_values),
                       "old_values": columns(event.old_values),
                       "op": pb.Operation.Name(event.op),
                       "schema": event.schema, "table": event.table},
                      ensure_ascii=False, separators=(",", ":"), sort_keys=True)


def open_output(path):
    """Opens FILE for appending, first cutting off a line torn by a crash."""
    with open(path, "ab+") as f:
        f.seek(0)
        data = f.read()
        if data and not data.endswith(b"\n"):
            f.truncate(data.rfind(b"\n") + 1)  # Those events were never acked.
    return open(path, "a", encoding="utf-8")


def consume(stub, args, out, on_started):
    """One subscription, until the server ends it (grpc.RpcError)."""
    # wait_for_ready: while the server is unreachable, the call waits for the
    # channel to reconnect instead of failing at once.
    call = stub.Subscribe(pb.SubscribeRequest(stream=args.stream, consumer=args.consumer),
                          wait_for_ready=True)
    # ack_to: the newest id this process may ack (the last event written, or a
    # position the server passed: events our filters left out); acked: the last one acked.
    session, ack_to, acked, pending = None, None, None, 0
    refused, give_up_at = None, 0.0  # An Ack refused with ABORTED: see DRAIN_SECONDS.
    try:
        for response in call:
            if refused:  # Dropped, never written: the stream's status decides.
                if time.monotonic() > give_up_at:
                    raise refused
                continue
            frame = response.WhichOneof("frame")
            if frame == "started":  # Always first: names the session acks go to.
                session = response.started.session_id
                print(f"started session={session} checkpoint={response.started.checkpoint}",
                      file=sys.stderr, flush=True)
                on_started()
                continue
            if frame == "events":
                for event in response.events.events:
                    out.write(f"{event.id}\t{canonical(event)}\n")
                out.flush()
                os.fsync(out.fileno())  # Durable first ...
                ack_to = response.events.passed or response.events.events[-1].id
                pending += 1
            elif frame == "progress" and response.progress.passed not in ("", acked):
                # Idle, and everything written: what the server passed since (events a
                # filter left out) is ackable too, so the checkpoint keeps up.
                ack_to = response.progress.passed
                pending += 1
            # ... then ack, cumulatively: every --ack-every batches, and when idle.
            if pending and (pending >= args.ack_every or frame == "progress"):
                try:
                    stub.Ack(pb.AckRequest(stream=args.stream, consumer=args.consumer,
                                           session_id=session, event_id=ack_to))
                except grpc.RpcError as error:
                    if error.code() != grpc.StatusCode.ABORTED:
                        raise  # Decides by itself (e.g. a retryable checkpoint write).
                    refused, give_up_at = error, time.monotonic() + DRAIN_SECONDS
                    continue
                print(f"acked {ack_to}", file=sys.stderr, flush=True)
                acked, pending = ack_to, 0
        if refused:
            raise refused
    finally:
        call.cancel()  # Ends the subscription if an Ack failed; harmless otherwise.


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--server", required=True, help="HOST:PORT (plaintext)")
    parser.add_argument("--stream", required=True)
    parser.add_argument("--consumer", required=True)
    parser.add_argument("--out", required=True, help="file the events are appended to")
    parser.add_argument("--ack-every", type=int, default=1, help="ack every N batches")
    args = parser.parse_args()

    # Reconnect at most 5 s after the server is back (gRPC's default grows to 120 s).
    # No receive limit: gRPC's 4 MiB default would fail on a large row's event forever.
    channel = grpc.insecure_channel(args.server, options=[("grpc.max_reconnect_backoff_ms", 5000),
                                                          ("grpc.max_receive_message_length", -1)])
    stub = pb_grpc.ChangeStreamStub(channel)
    out = open_output(args.out)
    attempt = 0
    def live():
        nonlocal attempt
        attempt = 0
    while True:
        try:
            consume(stub, args, out, on_started=live)
            failure = Failure("UNAVAILABLE", "the stream ended")  # Never expected.
        except grpc.RpcError as error:
            failure = Failure.of(error)
        # Exits unless a retry can help. The next Subscribe resumes after the
        # server's durable checkpoint.
        delay = retry_or_exit(failure, attempt)
        attempt += 1
        time.sleep(delay)


if __name__ == "__main__":
    main()
