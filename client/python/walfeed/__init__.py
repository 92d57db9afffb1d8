"""walfeed: PostgreSQL change streams over gRPC, the Python client.

    import walfeed
    sub = walfeed.Subscriber("localhost:50051", "orders", "billing")
    sub.run(lambda batch: [print(c.id, c.op, c.table, c.row) for c in batch])

See subscriber.py (the loop, ack policies, reconnects), values.py (typed
values as Python values), ids.py (event ids and LSNs) and watermark.py
(exactly-once effects in PostgreSQL; needs psycopg2).
"""
from walfeed.errors import Failure, WalfeedError
from walfeed.ids import EventId, lsn_text, parse_lsn
from walfeed.subscriber import AckPolicy, Batch, Change, Subscriber
from walfeed.values import (CivilDate, INFINITY, Interval, MINUS_INFINITY, UNCHANGED,
                            column_value, typed_value)

__all__ = ["AckPolicy", "Batch", "Change", "CivilDate", "EventId", "Failure", "INFINITY",
           "Interval", "MINUS_INFINITY", "Subscriber", "UNCHANGED", "WalfeedError",
           "column_value", "lsn_text", "parse_lsn", "typed_value"]
