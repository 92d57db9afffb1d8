package walfeed

import (
	"fmt"
	"math/rand"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/status"
)

// codeNames are the canonical status code names, as every walfeed client
// prints them (codes.Code's String is CamelCase, and says "Canceled").
var codeNames = []string{"OK", "CANCELLED", "UNKNOWN", "INVALID_ARGUMENT", "DEADLINE_EXCEEDED",
	"NOT_FOUND", "ALREADY_EXISTS", "PERMISSION_DENIED", "RESOURCE_EXHAUSTED",
	"FAILED_PRECONDITION", "ABORTED", "OUT_OF_RANGE", "UNIMPLEMENTED", "INTERNAL", "UNAVAILABLE",
	"DATA_LOSS", "UNAUTHENTICATED"}

// Failure is why a call failed: the code's name, walfeed's reason ("" if
// none, e.g. "SESSION_SUPERSEDED"), the server's retry delay (nil if it gave
// none) and the message.
type Failure struct {
	Code, Reason, Message string
	RetryDelay            *time.Duration
}

// Error makes a Failure no retry fixes the error Run returns.
func (f Failure) Error() string {
	reason := ""
	if f.Reason != "" {
		reason = " " + f.Reason
	}
	return fmt.Sprintf("%s%s: %s", f.Code, reason, f.Message)
}

// FailureOf reads the details every walfeed error carries in its
// grpc-status-details-bin trailer: a google.rpc.Status whose details hold a
// google.rpc.ErrorInfo (domain "walfeed.v1") and, when a retry is right, a
// google.rpc.RetryInfo.
func FailureOf(err error) Failure {
	s := status.Convert(err)
	f := Failure{Code: "UNKNOWN", Message: s.Message()}
	if int(s.Code()) < len(codeNames) {
		f.Code = codeNames[s.Code()]
	}
	for _, detail := range s.Details() {
		switch d := detail.(type) {
		case *errdetails.ErrorInfo:
			if d.GetDomain() == "walfeed.v1" {
				f.Reason = d.GetReason()
			}
		case *errdetails.RetryInfo:
			delay := time.Duration(d.GetRetryDelay().GetSeconds())*time.Second +
				time.Duration(d.GetRetryDelay().GetNanos())
			f.RetryDelay = &delay
		}
	}
	return f
}

// NextDelay is the retry policy of every walfeed client (docs/clients.md,
// "Errors"): after a RetryInfo, its delay plus a jittered backoff; UNAVAILABLE
// or CANCELLED without walfeed's details are gRPC's own (the connection was
// lost or refused, a proxy reset the stream), retried with the backoff;
// anything else needs a human: false. attempt counts from 0; the jitter is
// capped at max.
func NextDelay(f Failure, attempt int, max time.Duration) (time.Duration, bool) {
	if f.RetryDelay == nil && (f.Reason != "" || (f.Code != "UNAVAILABLE" && f.Code != "CANCELLED")) {
		return 0, false
	}
	limit := max
	if attempt < 20 && time.Duration(100<<attempt)*time.Millisecond < max {
		limit = time.Duration(100<<attempt) * time.Millisecond
	}
	delay := time.Duration(rand.Int63n(int64(limit) + 1))
	if f.RetryDelay != nil {
		delay += *f.RetryDelay
	}
	return delay, true
}
