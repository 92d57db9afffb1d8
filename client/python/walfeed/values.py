"""Column values as Python values.

With value_form TYPED (the Subscriber's default) the server sends each value
of a built-in type in its native form (walfeed.v1.TypedValue); this turns it
into the Python value:

    int2/int4/int8/oid -> int         float4/float8 -> float (nan, inf, -0.0)
    bool -> bool                      numeric -> decimal.Decimal (exact)
    text, varchar, ... -> str         bytea -> bytes        uuid -> uuid.UUID
    date -> datetime.date             timestamptz -> datetime (UTC, aware)
    timestamp -> datetime (naive)     time -> datetime.time
    timetz -> datetime.time (aware)   interval -> Interval(months, days, microseconds)
    json/jsonb -> json.loads(text)    arrays -> lists (nested per dimension)

What Python's types cannot hold stays explicit: infinity and -infinity dates
and timestamps become INFINITY and MINUS_INFINITY; dates outside years 1-9999
a CivilDate(year, month, day) (astronomical year: 1 BC is 0); time 24:00:00 a
datetime.timedelta(hours=24); a timestamp beyond the year 9999 keeps
PostgreSQL's text (the server sends it). Values without a typed form (enums,
ranges, user types) are their text; text that is not UTF-8 is bytes; NULL is
None and an unchanged TOAST value UNCHANGED.
"""
import datetime
import decimal
import json
import uuid
from typing import NamedTuple

from walfeed.v1 import change_stream_pb2 as pb


class _Marker:
    def __init__(self, name):
        self._name = name

    def __repr__(self):
        return self._name


#: An unchanged TOAST value: PostgreSQL did not send it, and it did not change.
UNCHANGED = _Marker("UNCHANGED")
#: A date or timestamp of 'infinity'.
INFINITY = _Marker("INFINITY")
#: A date or timestamp of '-infinity'.
MINUS_INFINITY = _Marker("MINUS_INFINITY")


class Interval(NamedTuple):
    """A PostgreSQL interval: months, days and microseconds do not convert
    into each other (a month is not a fixed number of days)."""
    months: int
    days: int
    microseconds: int


class CivilDate(NamedTuple):
    """A date outside datetime.date's years 1-9999 (astronomical year)."""
    year: int
    month: int
    day: int


_EPOCH = datetime.datetime(1970, 1, 1)
_MICROS_PER_DAY = 86_400_000_000


def _time(micros, tzinfo=None):
    if micros >= _MICROS_PER_DAY:
        return datetime.timedelta(microseconds=micros)  # 24:00:00
    seconds, micro = divmod(micros, 1_000_000)
    minutes, second = divmod(seconds, 60)
    hour, minute = divmod(minutes, 60)
    return datetime.time(hour, minute, second, micro, tzinfo=tzinfo)


def typed_value(value, text="", type_oid=0):
    """The Python value of a walfeed.v1.TypedValue. `text` is the column's text
    (kept when the typed form could not hold the value); `type_oid` tells a
    timestamptz (1184, timezone-aware) from a timestamp."""
    which = value.WhichOneof("value")
    if which == "int_value":
        return value.int_value
    if which == "float_value":
        return value.float_value
    if which == "bool_value":
        return value.bool_value
    if which == "decimal_value":
        return decimal.Decimal(value.decimal_value)
    if which == "string_value":
        return value.string_value
    if which == "bytes_value":
        return value.bytes_value
    if which == "uuid_value":
        return uuid.UUID(bytes=value.uuid_value)
    if which == "date_value":
        d = value.date_value
        if 1 <= d.year <= 9999:
            return datetime.date(d.year, d.month, d.day)
        return CivilDate(d.year, d.month, d.day)
    if which == "timestamp_value":
        t = value.timestamp_value
        moment = _EPOCH + datetime.timedelta(seconds=t.seconds, microseconds=t.nanos // 1000)
        # timestamptz and its array (1185) are instants; timestamp is a wall clock.
        return moment.replace(tzinfo=datetime.timezone.utc) if type_oid in (1184, 1185) else moment
    if which == "time_value":
        return _time(value.time_value)
    if which == "timetz_value":
        zone = datetime.timezone(datetime.timedelta(seconds=value.timetz_value.utc_offset_seconds))
        return _time(value.timetz_value.micros, zone)
    if which == "interval_value":
        i = value.interval_value
        return Interval(i.months, i.days, i.micros)
    if which == "json_value":
        return json.loads(value.json_value)
    if which == "array_value":
        return [typed_value(element, "", type_oid) for element in value.array_value.elements]
    if which == "null_value":
        return None
    if which == "special_value":
        if value.special_value == pb.SPECIAL_VALUE_INFINITY:
            return INFINITY
        if value.special_value == pb.SPECIAL_VALUE_MINUS_INFINITY:
            return MINUS_INFINITY
        return text  # OUT_OF_RANGE: the server kept the text.
    return text


def column_value(column, type_oid=0):
    """The Python value of a walfeed.v1.ColumnValue (see the module's table)."""
    if column.kind == pb.VALUE_KIND_NULL:
        return None
    if column.kind == pb.VALUE_KIND_UNCHANGED_TOAST:
        return UNCHANGED
    if column.kind == pb.VALUE_KIND_RAW:
        return column.raw
    if column.HasField("typed"):
        return typed_value(column.typed, column.text, type_oid or column.type_oid)
    return column.text
