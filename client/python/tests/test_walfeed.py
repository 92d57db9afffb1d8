"""Unit tests of the walfeed Python package's pure parts: ids, error details,
typed values as Python values, and events resolved into Changes (full and
compact forms). The loop itself is tested against a real server by
tests/clients/client_interop_test.cc (examples/python/consumer.py runs on it)."""
import datetime
import decimal
import math
import unittest
import uuid

import walfeed
from walfeed.errors import Failure
from walfeed.subscriber import Batch, Change
from walfeed.v1 import change_stream_pb2 as pb


class IdsTest(unittest.TestCase):
    def test_parse_print_and_order_as_numbers(self):
        a, b = walfeed.EventId.parse("0/9:0"), walfeed.EventId.parse("0/10:0")
        self.assertLess(a, b)  # As text "0/9" > "0/10".
        self.assertEqual(str(walfeed.EventId.parse("16/B374D848:7")), "16/B374D848:7")
        self.assertEqual(walfeed.parse_lsn("1/0"), 1 << 32)
        self.assertEqual(walfeed.lsn_text(0x1A2B3C8), "0/1A2B3C8")
        for bad in ("", "0/1", "0/1:", "0/1:x", "1:0", "0/1:4294967296", "/1:0", "123456789/0:0"):
            with self.assertRaises(ValueError, msg=bad):
                walfeed.EventId.parse(bad)


def _status(code, message, reason=None, retry_seconds=None):
    """A google.rpc.Status with walfeed's details, serialized by hand."""
    def field(number, payload):
        return _varint(number << 3 | 2) + _varint(len(payload)) + payload

    def varint_field(number, value):
        return _varint(number << 3) + _varint(value)

    details = b""
    if reason:
        info = field(1, reason.encode()) + field(2, b"walfeed.v1")
        details += field(3, field(1, b"type.googleapis.com/google.rpc.ErrorInfo") + field(2, info))
    if retry_seconds is not None:
        retry = field(1, varint_field(1, retry_seconds))
        details += field(3, field(1, b"type.googleapis.com/google.rpc.RetryInfo") + field(2, retry))
    return varint_field(1, code) + field(2, message.encode()) + details


def _varint(value):
    out = b""
    while value >= 0x80:
        out += bytes([value & 0x7F | 0x80])
        value >>= 7
    return out + bytes([value])


class FailureTest(unittest.TestCase):
    def test_reads_reason_and_retry_delay_from_the_details(self):
        failure = Failure("UNAVAILABLE", "stopping")
        failure._read_status(_status(14, "stopping", "SERVER_STOPPING", 2))
        self.assertEqual(failure.reason, "SERVER_STOPPING")
        self.assertEqual(failure.retry_delay, 2)
        self.assertTrue(failure.retryable())
        self.assertGreaterEqual(failure.next_delay(0), 2)

    def test_what_no_retry_fixes_and_what_grpc_made(self):
        taken = Failure("ABORTED", "superseded")
        taken._read_status(_status(10, "superseded", "SESSION_SUPERSEDED"))
        self.assertIsNone(taken.next_delay(0))
        self.assertIsInstance(taken.error(), walfeed.WalfeedError)
        self.assertTrue(Failure("UNAVAILABLE", "connection refused").retryable())
        self.assertTrue(Failure("CANCELLED", "reset by peer").retryable())
        self.assertFalse(Failure("NOT_FOUND", "no stream").retryable())
        self.assertLessEqual(Failure("UNAVAILABLE", "x").next_delay(30, cap=5.0), 5.0)

    def test_malformed_details_are_as_if_absent(self):
        for junk in (b"\xff", b"\x1a\x05ab", b"\x1a\x02\x0a\xff"):
            failure = Failure("UNAVAILABLE", "x")
            failure._read_status(junk)
            self.assertEqual((failure.reason, failure.retry_delay), ("", None))


def typed(**kwargs):
    return pb.TypedValue(**kwargs)


class ValuesTest(unittest.TestCase):
    def test_scalars(self):
        self.assertEqual(walfeed.typed_value(typed(int_value=-(1 << 63))), -(1 << 63))
        self.assertTrue(math.isnan(walfeed.typed_value(typed(float_value=float("nan")))))
        self.assertEqual(walfeed.typed_value(typed(bool_value=False)), False)
        self.assertEqual(walfeed.typed_value(typed(decimal_value="-12.3400")),
                         decimal.Decimal("-12.3400"))
        self.assertTrue(walfeed.typed_value(typed(decimal_value="NaN")).is_nan())
        self.assertEqual(walfeed.typed_value(typed(bytes_value=b"\x00\xff")), b"\x00\xff")
        u = uuid.UUID("a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11")
        self.assertEqual(walfeed.typed_value(typed(uuid_value=u.bytes)), u)
        self.assertEqual(walfeed.typed_value(typed(json_value='{"a": [1, 2.5]}')), {"a": [1, 2.5]})

    def test_dates_times_and_their_edges(self):
        date = pb.CivilDate(year=2024, month=2, day=29)
        self.assertEqual(walfeed.typed_value(typed(date_value=date)), datetime.date(2024, 2, 29))
        bc = pb.CivilDate(year=0, month=1, day=1)
        self.assertEqual(walfeed.typed_value(typed(date_value=bc)), walfeed.CivilDate(0, 1, 1))
        self.assertIs(walfeed.typed_value(typed(special_value=pb.SPECIAL_VALUE_INFINITY)),
                      walfeed.INFINITY)
        stamp = typed(timestamp_value={"seconds": -1, "nanos": 999999000})
        self.assertEqual(walfeed.typed_value(stamp, type_oid=1114),
                         datetime.datetime(1969, 12, 31, 23, 59, 59, 999999))
        aware = walfeed.typed_value(stamp, type_oid=1184)
        self.assertEqual(aware.tzinfo, datetime.timezone.utc)
        out_of_range = typed(special_value=pb.SPECIAL_VALUE_OUT_OF_RANGE)
        self.assertEqual(walfeed.typed_value(out_of_range, "294276-12-31 23:59:59.999999"),
                         "294276-12-31 23:59:59.999999")
        self.assertEqual(walfeed.typed_value(typed(time_value=14706000001)),
                         datetime.time(4, 5, 6, 1))
        self.assertEqual(walfeed.typed_value(typed(time_value=86400000000)),
                         datetime.timedelta(hours=24))
        tz = walfeed.typed_value(typed(timetz_value={"micros": 0, "utc_offset_seconds": -27000}))
        self.assertEqual(tz.utcoffset(), datetime.timedelta(seconds=-27000))
        interval = typed(interval_value={"months": 14, "days": -3, "micros": 1})
        self.assertEqual(walfeed.typed_value(interval), walfeed.Interval(14, -3, 1))

    def test_arrays_nest_and_keep_nulls(self):
        inner = pb.TypedArray(elements=[typed(int_value=1), typed(null_value=True)])
        outer = typed(array_value=pb.TypedArray(elements=[typed(array_value=inner)]))
        self.assertEqual(walfeed.typed_value(outer), [[1, None]])

    def test_column_kinds(self):
        self.assertIsNone(walfeed.column_value(pb.ColumnValue(kind=pb.VALUE_KIND_NULL)))
        self.assertIs(walfeed.column_value(pb.ColumnValue(kind=pb.VALUE_KIND_UNCHANGED_TOAST)),
                      walfeed.UNCHANGED)
        self.assertEqual(walfeed.column_value(pb.ColumnValue(kind=pb.VALUE_KIND_RAW, raw=b"\xe9")),
                         b"\xe9")
        self.assertEqual(walfeed.column_value(pb.ColumnValue(kind=pb.VALUE_KIND_TEXT, text="sad")),
                         "sad")  # No typed form: the text.


class ChangeTest(unittest.TestCase):
    def test_full_and_compact_forms_give_the_same_rows(self):
        full = pb.ChangeEvent(
            id="0/10:0", op=pb.OPERATION_UPDATE, schema="public", table="t",
            new_values=[pb.ColumnValue(name="id", type_oid=23, key=True, kind=pb.VALUE_KIND_TEXT,
                                       typed=typed(int_value=2)),
                        pb.ColumnValue(name="v", type_oid=25, kind=pb.VALUE_KIND_NULL)],
            old_values=[pb.ColumnValue(name="id", type_oid=23, key=True, kind=pb.VALUE_KIND_TEXT,
                                       typed=typed(int_value=1))],
            old_values_kind=pb.OLD_VALUES_KEY, last_in_transaction=True)
        shape = pb.RelationShape(ref=7, schema="public", table="t", columns=[
            pb.ColumnShape(name="v0", type_oid=25),  # Not a key: old keys skip it.
            pb.ColumnShape(name="id", type_oid=23, key=True)])
        compact = pb.ChangeEvent(
            id="0/10:0", op=pb.OPERATION_UPDATE, relation_ref=7,
            new_values=[pb.ColumnValue(kind=pb.VALUE_KIND_NULL),
                        pb.ColumnValue(kind=pb.VALUE_KIND_TEXT, typed=typed(int_value=2))],
            old_values=[pb.ColumnValue(kind=pb.VALUE_KIND_TEXT, typed=typed(int_value=1))],
            old_values_kind=pb.OLD_VALUES_KEY)
        a, b = Change(full, None), Change(compact, shape)
        self.assertEqual((a.op, a.table, a.row, a.old), ("UPDATE", "t", {"id": 2, "v": None}, {"id": 1}))
        self.assertEqual((b.schema, b.table, b.row, b.old),
                         ("public", "t", {"v0": None, "id": 2}, {"id": 1}))
        self.assertEqual(a.event_id, walfeed.EventId(0x10, 0))

    def test_transactions_group_by_their_last_event(self):
        events = [pb.ChangeEvent(id=f"0/1:{i}", op=pb.OPERATION_INSERT,
                                 last_in_transaction=i in (1, 2)) for i in range(4)]
        batch = Batch(Change(e, None) for e in events)
        self.assertEqual([[c.id for c in t] for t in batch.transactions()],
                         [["0/1:0", "0/1:1"], ["0/1:2"], ["0/1:3"]])

    def test_policies_refuse_nonsense(self):
        for make in (lambda: walfeed.AckPolicy.every(0), lambda: walfeed.AckPolicy.interval(0),
                     lambda: walfeed.AckPolicy.every_batches(0)):
            with self.assertRaises(ValueError):
                make()
        self.assertFalse(walfeed.AckPolicy.manual().automatic)
        with self.assertRaises(ValueError):
            walfeed.Subscriber("127.0.0.1:1", "s", "c", value_form="binary")


if __name__ == "__main__":
    unittest.main()
