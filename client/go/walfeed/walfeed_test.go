package walfeed

import (
	"encoding/json"
	"math"
	"reflect"
	"testing"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	walfeedv1 "walfeed/gen/go/walfeed/v1"
)

func TestIdsParsePrintAndOrderAsNumbers(t *testing.T) {
	a, _ := ParseEventID("0/9:0")
	b, _ := ParseEventID("0/10:0")
	if a.Compare(b) >= 0 {
		t.Errorf("0/9:0 must sort before 0/10:0")
	}
	if id, err := ParseEventID("16/B374D848:7"); err != nil || id.String() != "16/B374D848:7" {
		t.Errorf("round trip: %v %v", id, err)
	}
	for _, bad := range []string{"", "0/1", "0/1:", "0/1:x", "1:0", "0/1:4294967296", "123456789/0:0", "0/1:+1"} {
		if _, err := ParseEventID(bad); err == nil {
			t.Errorf("%q parsed", bad)
		}
	}
}

func TestTheRetryPolicyFollowsTheErrorDetails(t *testing.T) {
	st, _ := status.New(codes.Unavailable, "stopping").WithDetails(
		&errdetails.ErrorInfo{Domain: "walfeed.v1", Reason: "SERVER_STOPPING"},
		&errdetails.RetryInfo{RetryDelay: durationpb.New(2 * time.Second)})
	f := FailureOf(st.Err())
	if f.Code != "UNAVAILABLE" || f.Reason != "SERVER_STOPPING" || f.RetryDelay == nil || *f.RetryDelay != 2*time.Second {
		t.Fatalf("details not read: %+v", f)
	}
	if delay, ok := NextDelay(f, 0, 5*time.Second); !ok || delay < 2*time.Second {
		t.Errorf("a RetryInfo is retried after its delay: %v %v", delay, ok)
	}
	taken, _ := status.New(codes.Aborted, "superseded").WithDetails(
		&errdetails.ErrorInfo{Domain: "walfeed.v1", Reason: "SESSION_SUPERSEDED"})
	if _, ok := NextDelay(FailureOf(taken.Err()), 0, time.Second); ok {
		t.Errorf("a takeover is not retried")
	}
	if delay, ok := NextDelay(FailureOf(status.Error(codes.Unavailable, "refused")), 30, 5*time.Second); !ok || delay > 5*time.Second {
		t.Errorf("gRPC's own UNAVAILABLE is retried within the cap: %v %v", delay, ok)
	}
	if _, ok := NextDelay(FailureOf(status.Error(codes.NotFound, "no stream")), 0, time.Second); ok {
		t.Errorf("NOT_FOUND is not retried")
	}
}

func TestTypedValuesBecomeGoValues(t *testing.T) {
	cases := []struct {
		in   *walfeedv1.TypedValue
		want any
	}{
		{&walfeedv1.TypedValue{Value: &walfeedv1.TypedValue_IntValue{IntValue: math.MinInt64}}, int64(math.MinInt64)},
		{&walfeedv1.TypedValue{Value: &walfeedv1.TypedValue_DecimalValue{DecimalValue: "-12.3400"}}, Decimal("-12.3400")},
		{&walfeedv1.TypedValue{Value: &walfeedv1.TypedValue_DateValue{DateValue: &walfeedv1.CivilDate{Year: 0, Month: 1, Day: 1}}}, CivilDate{0, 1, 1}},
		{&walfeedv1.TypedValue{Value: &walfeedv1.TypedValue_TimestampValue{TimestampValue: &timestamppb.Timestamp{Seconds: -1, Nanos: 999999000}}},
			time.Date(1969, 12, 31, 23, 59, 59, 999999000, time.UTC)},
		{&walfeedv1.TypedValue{Value: &walfeedv1.TypedValue_SpecialValue{SpecialValue: walfeedv1.SpecialValue_SPECIAL_VALUE_INFINITY}}, Infinity},
		{&walfeedv1.TypedValue{Value: &walfeedv1.TypedValue_IntervalValue{IntervalValue: &walfeedv1.Interval{Months: 14, Days: -3, Micros: 1}}}, Interval{14, -3, 1}},
		{&walfeedv1.TypedValue{Value: &walfeedv1.TypedValue_JsonValue{JsonValue: `{"a":1}`}}, json.RawMessage(`{"a":1}`)},
		{&walfeedv1.TypedValue{Value: &walfeedv1.TypedValue_ArrayValue{ArrayValue: &walfeedv1.TypedArray{Elements: []*walfeedv1.TypedValue{
			{Value: &walfeedv1.TypedValue_IntValue{IntValue: 1}}, {Value: &walfeedv1.TypedValue_NullValue{NullValue: true}}}}}}, []any{int64(1), nil}},
	}
	for _, c := range cases {
		if got := TypedValue(c.in, ""); !reflect.DeepEqual(got, c.want) {
			t.Errorf("TypedValue(%v) = %#v, want %#v", c.in, got, c.want)
		}
	}
	outOfRange := &walfeedv1.TypedValue{Value: &walfeedv1.TypedValue_SpecialValue{SpecialValue: walfeedv1.SpecialValue_SPECIAL_VALUE_OUT_OF_RANGE}}
	if got := TypedValue(outOfRange, "294276-12-31 23:59:59.999999"); got != "294276-12-31 23:59:59.999999" {
		t.Errorf("out of range keeps the text: %v", got)
	}
	if Value(&walfeedv1.ColumnValue{Kind: walfeedv1.ValueKind_VALUE_KIND_UNCHANGED_TOAST}) != Unchanged {
		t.Errorf("unchanged TOAST")
	}
}

func TestFullAndCompactEventsGiveTheSameRows(t *testing.T) {
	integer := func(n int64) *walfeedv1.ColumnValue {
		return &walfeedv1.ColumnValue{Kind: walfeedv1.ValueKind_VALUE_KIND_TEXT,
			Typed: &walfeedv1.TypedValue{Value: &walfeedv1.TypedValue_IntValue{IntValue: n}}}
	}
	named := func(v *walfeedv1.ColumnValue, name string) *walfeedv1.ColumnValue { v.Name = name; return v }
	full := &walfeedv1.ChangeEvent{Id: "0/10:0", Op: walfeedv1.Operation_OPERATION_UPDATE, Schema: "public", Table: "t",
		NewValues: []*walfeedv1.ColumnValue{named(integer(2), "id"), {Name: "v", Kind: walfeedv1.ValueKind_VALUE_KIND_NULL}},
		OldValues: []*walfeedv1.ColumnValue{named(integer(1), "id")}, OldValuesKind: walfeedv1.OldValues_OLD_VALUES_KEY,
		LastInTransaction: true}
	shape := &walfeedv1.RelationShape{Ref: 7, Schema: "public", Table: "t", Columns: []*walfeedv1.ColumnShape{
		{Name: "v0"}, {Name: "id", Key: true}}}
	compact := &walfeedv1.ChangeEvent{Id: "0/10:0", Op: walfeedv1.Operation_OPERATION_UPDATE, RelationRef: 7,
		NewValues: []*walfeedv1.ColumnValue{{Kind: walfeedv1.ValueKind_VALUE_KIND_NULL}, integer(2)},
		OldValues: []*walfeedv1.ColumnValue{integer(1)}, OldValuesKind: walfeedv1.OldValues_OLD_VALUES_KEY}
	a, b := NewChange(full, nil), NewChange(compact, shape)
	if a.Op != "UPDATE" || !reflect.DeepEqual(a.Row, map[string]any{"id": int64(2), "v": nil}) ||
		!reflect.DeepEqual(a.Old, map[string]any{"id": int64(1)}) {
		t.Errorf("full: %+v", a)
	}
	if b.Schema != "public" || !reflect.DeepEqual(b.Row, map[string]any{"v0": nil, "id": int64(2)}) ||
		!reflect.DeepEqual(b.Old, map[string]any{"id": int64(1)}) {
		t.Errorf("compact: %+v", b)
	}
	groups := Batch{b, a, b}.Transactions()
	if len(groups) != 2 || len(groups[0]) != 2 || len(groups[1]) != 1 {
		t.Errorf("transactions: %v", groups)
	}
	if _, err := NewSubscriber(Options{Server: "x:1", Stream: "s", Consumer: "c", ValueForm: "binary"}); err == nil {
		t.Errorf("a bad value form is refused")
	}
}
