'use strict';
// Column values as JavaScript values. With valueForm 'typed' (the Subscriber's
// default) the server sends each value of a built-in type in its native form
// (walfeed.v1.TypedValue); this turns it into:
//
//   int2/int4/int8/oid -> number, or BigInt beyond Number.MAX_SAFE_INTEGER
//   float4/float8 -> number (NaN, ±Infinity, -0)     bool -> boolean
//   numeric -> string (exact decimal text; JavaScript has no decimal type)
//   text, varchar, ... -> string    bytea -> Buffer   uuid -> string (canonical)
//   date -> CivilDate {year, month, day} (astronomical year: 1 BC is 0)
//   timestamp, timestamptz -> Timestamp (a Date, plus .micros: BigInt
//     microseconds since 1970 exactly, since a Date holds milliseconds)
//   time, timetz -> TimeOfDay {micros, utcOffsetSeconds (null for time)}
//   interval -> Interval {months, days, micros}    json/jsonb -> JSON.parse
//   arrays -> arrays (nested per dimension), NULL elements null
//
// infinity / -infinity are INFINITY / MINUS_INFINITY; a timestamp beyond the
// year 9999 keeps PostgreSQL's text (the server sends it). Values without a
// typed form (enums, ranges, user types) are their text; text that is not
// UTF-8 is a Buffer; NULL is null and an unchanged TOAST value UNCHANGED.

const UNCHANGED = Symbol('UNCHANGED');
const INFINITY = Symbol('INFINITY');
const MINUS_INFINITY = Symbol('MINUS_INFINITY');

class CivilDate {
  constructor(year, month, day) { Object.assign(this, { year, month, day }); }
  toString() {
    const pad = (n, w) => String(n).padStart(w, '0');
    return `${this.year < 0 ? '-' : ''}${pad(Math.abs(this.year), 4)}-${pad(this.month, 2)}-${pad(this.day, 2)}`;
  }
}

class Timestamp extends Date {
  constructor(micros) {
    super(Number(micros / 1000n) - (micros % 1000n < 0n ? 1 : 0));
    this.micros = micros;
  }
}

class TimeOfDay {
  constructor(micros, utcOffsetSeconds = null) { Object.assign(this, { micros, utcOffsetSeconds }); }
}

class Interval {
  constructor(months, days, micros) { Object.assign(this, { months, days, micros }); }
}

// A 64-bit integer that proto-loader gave as a string.
function int64(text) {
  const big = BigInt(text);
  return big >= BigInt(Number.MIN_SAFE_INTEGER) && big <= BigInt(Number.MAX_SAFE_INTEGER) ? Number(big) : big;
}

function uuidText(bytes) {
  const hex = Buffer.from(bytes).toString('hex');
  return `${hex.slice(0, 8)}-${hex.slice(8, 12)}-${hex.slice(12, 16)}-${hex.slice(16, 20)}-${hex.slice(20)}`;
}

// The JavaScript value of a walfeed.v1.TypedValue; `text` is the column's text
// (kept when the typed form could not hold the value).
function typedValue(value, text = '') {
  switch (value.value) {
    case 'int_value': return int64(value.int_value);
    case 'float_value': return value.float_value;
    case 'bool_value': return value.bool_value;
    case 'decimal_value': return value.decimal_value;
    case 'string_value': return value.string_value;
    case 'bytes_value': return Buffer.from(value.bytes_value);
    case 'uuid_value': return uuidText(value.uuid_value);
    case 'date_value': return new CivilDate(value.date_value.year, value.date_value.month, value.date_value.day);
    case 'timestamp_value':
      return new Timestamp(BigInt(value.timestamp_value.seconds) * 1000000n +
                           BigInt(Math.floor(value.timestamp_value.nanos / 1000)));
    case 'time_value': return new TimeOfDay(int64(value.time_value));
    case 'timetz_value':
      return new TimeOfDay(int64(value.timetz_value.micros), value.timetz_value.utc_offset_seconds);
    case 'interval_value':
      return new Interval(value.interval_value.months, value.interval_value.days,
                          int64(value.interval_value.micros));
    case 'json_value': return JSON.parse(value.json_value);
    case 'array_value': return value.array_value.elements.map((element) => typedValue(element));
    case 'null_value': return null;
    case 'special_value':
      if (value.special_value === 'SPECIAL_VALUE_INFINITY') return INFINITY;
      if (value.special_value === 'SPECIAL_VALUE_MINUS_INFINITY') return MINUS_INFINITY;
      return text; // OUT_OF_RANGE: the server kept the text.
    default: return text;
  }
}

// The JavaScript value of a walfeed.v1.ColumnValue (see the table above).
function columnValue(column) {
  switch (column.kind) {
    case 'VALUE_KIND_NULL': return null;
    case 'VALUE_KIND_UNCHANGED_TOAST': return UNCHANGED;
    case 'VALUE_KIND_RAW': return Buffer.from(column.raw);
    default: return column.typed ? typedValue(column.typed, column.text) : column.text;
  }
}

module.exports = {
  CivilDate, INFINITY, Interval, MINUS_INFINITY, TimeOfDay, Timestamp, UNCHANGED, columnValue, typedValue,
};
