"""Subscriber: a durable walfeed consumer's whole loop.

    sub = walfeed.Subscriber("localhost:50051", "orders", "billing")
    def handle(batch):
        for change in batch:
            print(change.id, change.op, change.table, change.row)
    sub.run(handle)

run() subscribes, calls handle(batch) for every batch of events, in id order,
and acks what handle returned from, as the ack policy says. It reconnects by
itself, with capped jittered backoff, on every error the API documents as
retryable (errors.py) and resumes right after the consumer's durable
checkpoint; it raises WalfeedError on the others. handle raising ends run()
with that exception, unacked: those events come again to the next run.
Delivery is at-least-once; ids are deterministic, so a consumer that stores
the newest id it applied with its effects (Watermark) applies each once.
"""
import threading
import time

import grpc

from walfeed.errors import Failure
from walfeed.ids import EventId
from walfeed.values import column_value
from walfeed.v1 import change_stream_pb2 as pb
from walfeed.v1 import change_stream_pb2_grpc as pb_grpc

# After an Ack refused with ABORTED (the session is no longer the consumer's
# active one), the Subscribe stream's own status follows at once and says why.
# Frames are dropped until it comes; if they still come this long after, the
# Ack's error stands.
_DRAIN_SECONDS = 10.0

_VALUE_FORMS = {"text": pb.VALUE_FORM_TEXT, "typed": pb.VALUE_FORM_TYPED,
                "both": pb.VALUE_FORM_BOTH}


class AckPolicy:
    """When run() acks: every(n) handled events, every_batches(n),
    interval(seconds) (checked as frames arrive; an idle stream brings a
    progress frame every 5 s), or manual() (only Subscriber.ack). Every policy
    but manual also acks when the stream goes idle, up to what the server
    passed (events the subscription's filters left out), so a consumer that
    filters everything never holds the stream back."""

    def __init__(self, events=None, seconds=None, batches=None):
        self.events, self.seconds, self.batches = events, seconds, batches

    @property
    def automatic(self):
        return self.events is not None or self.seconds is not None or self.batches is not None

    @classmethod
    def every_batches(cls, batches=1):
        if batches < 1:
            raise ValueError("AckPolicy.every_batches: batches must be at least 1")
        return cls(batches=batches)

    @classmethod
    def every(cls, events=1):
        if events < 1:
            raise ValueError("AckPolicy.every: events must be at least 1")
        return cls(events=events)

    @classmethod
    def interval(cls, seconds):
        if seconds <= 0:
            raise ValueError("AckPolicy.interval: seconds must be positive")
        return cls(seconds=seconds)

    @classmethod
    def manual(cls):
        return cls()


class Change:
    """One event: its id, operation ("INSERT", "UPDATE", "DELETE", "TRUNCATE",
    "MESSAGE", "READ"), table, and rows as dicts of Python values (values.py).
    `event` is the walfeed.v1.ChangeEvent itself."""

    __slots__ = ("event", "id", "op", "schema", "table", "row", "old", "transaction_end")

    def __init__(self, event, shape):
        self.event = event
        self.id = event.id
        self.op = pb.Operation.Name(event.op)[len("OPERATION_"):]
        self.schema, self.table = (shape.schema, shape.table) if shape else (event.schema, event.table)
        #: True on the last event of its transaction.
        self.transaction_end = event.last_in_transaction
        self.row = _row(event.new_values, shape, keys_only=False) if event.new_values else None
        keys_only = event.old_values_kind == pb.OLD_VALUES_KEY
        self.old = _row(event.old_values, shape, keys_only) if event.old_values else None

    @property
    def event_id(self):
        return EventId.parse(self.id)

    @property
    def commit_time(self):
        return self.event.commit_time.ToDatetime()

    def __repr__(self):
        return f"Change({self.id} {self.op} {self.schema}.{self.table} row={self.row} old={self.old})"


def _row(values, shape, keys_only):
    if shape is None:  # The full form: every column names itself.
        return {v.name: column_value(v) for v in values}
    columns = [c for c in shape.columns if c.key] if keys_only else shape.columns
    return {c.name: column_value(v, c.type_oid) for c, v in zip(columns, values)}


class Batch(list):
    """The changes of one events frame, in id order (a list of Change)."""

    def transactions(self):
        """The batch's changes grouped by transaction (the last group may go on
        in the next batch: its last change has transaction_end False)."""
        groups, current = [], []
        for change in self:
            current.append(change)
            if change.transaction_end:
                groups.append(current)
                current = []
        if current:
            groups.append(current)
        return groups


class Subscriber:
    """A durable consumer of one stream. See the module's docstring.

    server: "host:port". credentials: grpc.ssl_channel_credentials(...) for
    TLS (None: plaintext). token: a bearer token for the server's auth.
    value_form: "typed" (default), "both" or "text". compact: receive column
    metadata once per table version (default) instead of in every event.
    tables / operations: the subscription's filters ("schema.table" globs;
    "INSERT", "UPDATE", ...). start_after: an id to start after instead of the
    server's checkpoint, or a function returning one, called before every
    Subscribe (a destination's watermark: Watermark.resume); the id a session
    started after is `last_start_after`. on_started(session_id,
    checkpoint), on_acked(event_id) and on_retry(failure, delay) are called
    from run()'s thread.
    """

    def __init__(self, server, stream, consumer, *, ack=None, value_form="typed", compact=True,
                 tables=(), operations=(), start_after="", credentials=None, token=None,
                 max_backoff=5.0, on_started=None, on_acked=None, on_retry=None):
        if value_form not in _VALUE_FORMS:
            raise ValueError(f"value_form must be one of {sorted(_VALUE_FORMS)}")
        self.stream, self.consumer = stream, consumer
        self.ack_policy = ack or AckPolicy.every(1)
        self._start_after = start_after
        self.last_start_after = ""
        self._request = pb.SubscribeRequest(
            stream=stream, consumer=consumer,
            tables=list(tables), operations=[pb.Operation.Value("OPERATION_" + o) for o in operations],
            value_form=_VALUE_FORMS[value_form],
            event_form=pb.EVENT_FORM_COMPACT if compact else pb.EVENT_FORM_FULL)
        # Reconnect at most max_backoff after the server is back (gRPC's default
        # grows to 120 s). No receive limit: an event is as large as its row, and
        # under gRPC's 4 MiB default the first larger one would fail forever.
        options = [("grpc.max_reconnect_backoff_ms", int(max_backoff * 1000)),
                   ("grpc.max_receive_message_length", -1)]
        self._channel = (grpc.secure_channel(server, credentials, options) if credentials
                         else grpc.insecure_channel(server, options))
        self._stub = pb_grpc.ChangeStreamStub(self._channel)
        self._metadata = (("authorization", f"Bearer {token}"),) if token else ()
        self._max_backoff = max_backoff
        self._on_started, self._on_acked, self._on_retry = on_started, on_acked, on_retry
        self._stopping = threading.Event()
        self._call = None
        self._session = None
        self._lock = threading.Lock()

    def stop(self):
        """Ends run() (from another thread or from handle): it returns after
        the batch being handled, if any."""
        self._stopping.set()
        with self._lock:
            if self._call is not None:
                self._call.cancel()

    def ack(self, event_id):
        """Acks everything up to and including `event_id` (an id string or
        EventId) in the current session; for AckPolicy.manual(), and callable
        from handle."""
        self._send_ack(str(event_id))

    def _send_ack(self, event_id):
        self._stub.Ack(pb.AckRequest(stream=self.stream, consumer=self.consumer,
                                     session_id=self._session, event_id=event_id),
                       metadata=self._metadata)
        if self._on_acked:
            self._on_acked(event_id)

    def run(self, handle):
        """Consumes until stop(); raises WalfeedError when the server ends the
        subscription in a way no retry fixes, or what handle raised."""
        attempt = 0
        while not self._stopping.is_set():
            try:
                if self._subscribe_once(handle):
                    attempt = 0
                failure = Failure("UNAVAILABLE", "the stream ended")
            except grpc.RpcError as error:
                if self._stopping.is_set():
                    return
                failure = Failure.of(error)
            if self._stopping.is_set():
                return
            delay = failure.next_delay(attempt, self._max_backoff)
            if delay is None:
                raise failure.error()
            if self._on_retry:
                self._on_retry(failure, delay)
            attempt += 1
            self._stopping.wait(delay)

    def _subscribe_once(self, handle):
        """One session until the server ends it (grpc.RpcError); True if it
        started (so the backoff starts over)."""
        # wait_for_ready: while the server is unreachable the call waits for
        # the channel to reconnect instead of failing at once.
        start_after = self._start_after() if callable(self._start_after) else self._start_after
        self._request.start_after = self.last_start_after = start_after or ""
        call = self._stub.Subscribe(self._request, wait_for_ready=True, metadata=self._metadata)
        with self._lock:
            self._call = call
        if self._stopping.is_set():
            call.cancel()
        policy = self.ack_policy
        shapes = {}
        started = False
        # ack_to: the newest id handled (or passed); acked: the newest acked.
        ack_to, acked, last_ack = None, None, time.monotonic()
        unacked = batches = 0  # Events and frames handled since the last ack.
        refused, give_up_at = None, 0.0
        try:
            for response in call:
                if refused:  # Dropped: the stream's own status decides.
                    if time.monotonic() > give_up_at:
                        raise refused
                    continue
                frame = response.WhichOneof("frame")
                if frame == "started":
                    started, shapes = True, {}  # Shapes belong to the session.
                    self._session = response.started.session_id
                    if self._on_started:
                        self._on_started(self._session, response.started.checkpoint)
                    continue
                idle = frame == "progress"
                if frame == "events":
                    for shape in response.events.relations:
                        shapes[shape.ref] = shape
                    batch = Batch(Change(e, shapes.get(e.relation_ref) if e.relation_ref else None)
                                  for e in response.events.events)
                    handle(batch)
                    ack_to = response.events.passed or batch[-1].id
                    unacked += len(batch)
                    batches += 1
                elif idle and response.progress.passed not in ("", acked):
                    ack_to = response.progress.passed
                    batches += 1
                if self._stopping.is_set():
                    break
                if not batches or not policy.automatic:
                    continue
                due = (idle or (policy.events is not None and unacked >= policy.events) or
                       (policy.batches is not None and batches >= policy.batches) or
                       (policy.seconds is not None and
                        time.monotonic() - last_ack >= policy.seconds))
                if not due:
                    continue
                try:
                    self._send_ack(ack_to)
                except grpc.RpcError as error:
                    if error.code() != grpc.StatusCode.ABORTED:
                        raise
                    refused, give_up_at = error, time.monotonic() + _DRAIN_SECONDS
                    continue
                acked, unacked, batches, last_ack = ack_to, 0, 0, time.monotonic()
            if refused:
                raise refused
            if self._stopping.is_set() and batches and policy.automatic:
                self._send_ack(ack_to)  # What was handled before stop().
        finally:
            call.cancel()
            with self._lock:
                self._call = None
        return started
