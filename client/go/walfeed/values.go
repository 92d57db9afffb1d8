package walfeed

import (
	"encoding/json"
	"time"

	walfeedv1 "walfeed/gen/go/walfeed/v1"
)

// Column values as Go values. With ValueForm "typed" (the Subscriber's
// default) the server sends each value of a built-in type in its native form
// (walfeedv1.TypedValue); Value turns it into:
//
//	int2/int4/int8/oid -> int64      float4/float8 -> float64 (NaN, ±Inf, -0)
//	bool -> bool                     numeric -> Decimal (the exact decimal text)
//	text, varchar, ... -> string     bytea -> []byte      uuid -> [16]byte
//	date -> CivilDate (astronomical year: 1 BC is 0)
//	timestamptz -> time.Time (UTC)   timestamp -> time.Time (its wall clock, in UTC)
//	time, timetz -> TimeOfDay        interval -> Interval
//	json/jsonb -> json.RawMessage    arrays -> []any (nested per dimension; NULL is nil)
//
// infinity and -infinity are Infinity and MinusInfinity; a timestamp beyond
// the year 9999 keeps PostgreSQL's text (the server sends it). Values without
// a typed form (enums, ranges, user types) are their text (string); text that
// is not UTF-8 is []byte; NULL is nil and an unchanged TOAST value Unchanged.

// Decimal is a numeric's exact decimal text ("-12.3400", "NaN", "Infinity").
type Decimal string

// Special is a value Go's types have no number for.
type Special int

const (
	// Unchanged is a TOASTed value the change did not touch (not sent).
	Unchanged Special = iota + 1
	// Infinity is a date or timestamp of 'infinity'.
	Infinity
	// MinusInfinity is a date or timestamp of '-infinity'.
	MinusInfinity
)

// CivilDate is a date of the proleptic Gregorian calendar.
type CivilDate struct {
	Year       int32 // Astronomical: 1 BC is 0.
	Month, Day uint32
}

// TimeOfDay is a time or timetz value.
type TimeOfDay struct {
	Micros           int64  // Since midnight, up to 24:00:00.
	UTCOffsetSeconds *int32 // timetz only: seconds east of UTC.
}

// Interval keeps PostgreSQL's three fields apart: a month is not a fixed
// number of days, nor a day always 24 h.
type Interval struct {
	Months, Days int32
	Micros       int64
}

// TypedValue is the Go value of a walfeedv1.TypedValue; text is the column's
// text, kept when the typed form could not hold the value.
func TypedValue(v *walfeedv1.TypedValue, text string) any {
	switch x := v.GetValue().(type) {
	case *walfeedv1.TypedValue_IntValue:
		return x.IntValue
	case *walfeedv1.TypedValue_FloatValue:
		return x.FloatValue
	case *walfeedv1.TypedValue_BoolValue:
		return x.BoolValue
	case *walfeedv1.TypedValue_DecimalValue:
		return Decimal(x.DecimalValue)
	case *walfeedv1.TypedValue_StringValue:
		return x.StringValue
	case *walfeedv1.TypedValue_BytesValue:
		return x.BytesValue
	case *walfeedv1.TypedValue_UuidValue:
		var id [16]byte
		copy(id[:], x.UuidValue)
		return id
	case *walfeedv1.TypedValue_DateValue:
		return CivilDate{x.DateValue.GetYear(), x.DateValue.GetMonth(), x.DateValue.GetDay()}
	case *walfeedv1.TypedValue_TimestampValue:
		return time.Unix(x.TimestampValue.GetSeconds(), int64(x.TimestampValue.GetNanos())).UTC()
	case *walfeedv1.TypedValue_TimeValue:
		return TimeOfDay{Micros: x.TimeValue}
	case *walfeedv1.TypedValue_TimetzValue:
		offset := x.TimetzValue.GetUtcOffsetSeconds()
		return TimeOfDay{Micros: x.TimetzValue.GetMicros(), UTCOffsetSeconds: &offset}
	case *walfeedv1.TypedValue_IntervalValue:
		return Interval{x.IntervalValue.GetMonths(), x.IntervalValue.GetDays(), x.IntervalValue.GetMicros()}
	case *walfeedv1.TypedValue_JsonValue:
		return json.RawMessage(x.JsonValue)
	case *walfeedv1.TypedValue_ArrayValue:
		elements := make([]any, len(x.ArrayValue.GetElements()))
		for i, element := range x.ArrayValue.GetElements() {
			elements[i] = TypedValue(element, "")
		}
		return elements
	case *walfeedv1.TypedValue_NullValue:
		return nil
	case *walfeedv1.TypedValue_SpecialValue:
		switch x.SpecialValue {
		case walfeedv1.SpecialValue_SPECIAL_VALUE_INFINITY:
			return Infinity
		case walfeedv1.SpecialValue_SPECIAL_VALUE_MINUS_INFINITY:
			return MinusInfinity
		}
	}
	return text // OUT_OF_RANGE, or a form this client does not know yet: the text.
}

// Value is the Go value of a walfeedv1.ColumnValue (see the table above).
func Value(c *walfeedv1.ColumnValue) any {
	switch c.GetKind() {
	case walfeedv1.ValueKind_VALUE_KIND_NULL:
		return nil
	case walfeedv1.ValueKind_VALUE_KIND_UNCHANGED_TOAST:
		return Unchanged
	case walfeedv1.ValueKind_VALUE_KIND_RAW:
		return c.GetRaw()
	}
	if c.GetTyped() != nil {
		return TypedValue(c.GetTyped(), c.GetText())
	}
	return c.GetText()
}
