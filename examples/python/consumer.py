"""A walfeed consumer: appends every change event to a file, then acks it.

    PYTHONPATH=<walfeed package> /usr/bin/python3 consumer.py --server HOST:PORT \
        --stream S --consumer C --out FILE [--ack-every N]

Built on the walfeed package (client/python), which runs the loop: subscribe,
reconnect with backoff on what the API documents as retryable, ack by policy.
Each event becomes one line "<id>\\t<canonical JSON>" (examples/README.md defines
the JSON). A batch is written and fsynced before it is acked, so a crash can only
repeat events, never lose them: the server resumes after the last durable ack.
"""
import argparse
import json
import os
import sys

import walfeed
from walfeed.v1 import change_stream_pb2 as pb


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


def log(line):
    print(line, file=sys.stderr, flush=True)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--server", required=True, help="HOST:PORT (plaintext)")
    parser.add_argument("--stream", required=True)
    parser.add_argument("--consumer", required=True)
    parser.add_argument("--out", required=True, help="file the events are appended to")
    parser.add_argument("--ack-every", type=int, default=1, help="ack every N batches")
    args = parser.parse_args()
    out = open_output(args.out)

    def write(batch):
        for change in batch:
            out.write(f"{change.id}\t{canonical(change.event)}\n")
        out.flush()
        os.fsync(out.fileno())  # Durable first; the subscriber acks after this returns.

    # The example's lines are PostgreSQL's text in the full form, byte for byte
    # the same in every language; a new consumer would take the defaults
    # (typed values as Python values, compact events) and read change.row.
    subscriber = walfeed.Subscriber(
        args.server, args.stream, args.consumer, value_form="text", compact=False,
        ack=walfeed.AckPolicy.every_batches(args.ack_every),
        on_started=lambda session, checkpoint: log(
            f"started session={session} checkpoint={checkpoint}"),
        on_acked=lambda event_id: log(f"acked {event_id}"),
        on_retry=lambda failure, delay: log(
            f"retry in {delay * 1000:.0f}ms: {failure.reason or failure.code}: {failure.message}"))
    try:
        subscriber.run(write)
    except walfeed.WalfeedError as error:
        sys.exit(f"walfeed consumer: {error}")


if __name__ == "__main__":
    main()
