// Command go-consumer is a walfeed consumer: it appends every change event to a
// file, then acks it.
//
//	go-consumer --server HOST:PORT --stream S --consumer C --out FILE [--ack-every N]
//
// Each event becomes one line "<id>\t<canonical JSON>" (examples/README.md
// defines the JSON). A batch is written and fsynced before it is acked, so a
// crash can only repeat events, never lose them: the server resumes after the
// last durable ack. The stubs come from protoc-gen-go and protoc-gen-go-grpc
// (see examples/build.sh); the google.rpc error details from Debian's genproto.
package main

import (
	"bytes"
	"context"
	"flag"
	"fmt"
	"io"
	"log"
	"math"
	"math/rand"
	"os"
	"strings"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	walfeedv1 "walfeed/gen/go/walfeed/v1"
)

// Escapes of canonical JSON strings: only these and the other control
// characters; encoding/json would also escape <, >, & and U+2028/U+2029.
var escapes = map[rune]string{'"': `\"`, '\\': `\\`, '\b': `\b`, '\f': `\f`, '\n': `\n`, '\r': `\r`, '\t': `\t`}

func quote(s string) string {
	var b strings.Builder
	b.WriteByte('"')
	for _, r := range s {
		if escaped, ok := escapes[r]; ok {
			b.WriteString(escaped)
		} else if r < 0x20 {
			fmt.Fprintf(&b, `\u%04x`, r)
		} else {
			b.WriteRune(r)
		}
	}
	return b.String() + `"`
}

// canonical renders the event as canonical JSON: sorted keys, no spaces.
func canonical(e *walfeedv1.ChangeEvent) string {
	columns := func(values []*walfeedv1.ColumnValue) string {
		parts := make([]string, len(values))
		for i, v := range values {
			parts[i] = fmt.Sprintf(`{"kind":%s,"name":%s,"text":%s}`,
				quote(v.GetKind().String()), quote(v.GetName()), quote(v.GetText()))
		}
		return "[" + strings.Join(parts, ",") + "]"
	}
	return fmt.Sprintf(`{"new_values":%s,"old_values":%s,"op":%s,"schema":%s,"table":%s}`,
		columns(e.GetNewValues()), columns(e.GetOldValues()), quote(e.GetOp().String()),
		quote(e.GetSchema()), quote(e.GetTable()))
}

// codeNames are the canonical status code names, as Python and Node print them
// (codes.Code's String is CamelCase, and says "Canceled").
var codeNames = []string{"OK", "CANCELLED", "UNKNOWN", "INVALID_ARGUMENT", "DEADLINE_EXCEEDED",
	"NOT_FOUND", "ALREADY_EXISTS", "PERMISSION_DENIED", "RESOURCE_EXHAUSTED",
	"FAILED_PRECONDITION", "ABORTED", "OUT_OF_RANGE", "UNIMPLEMENTED", "INTERNAL", "UNAVAILABLE",
	"DATA_LOSS", "UNAUTHENTICATED"}

// failure is why a subscription ended: the code's name, walfeed's reason (""
// if none), the server's retry delay (nil if it gave none) and the message.
type failure struct {
	code, reason, message string
	retryDelay            *time.Duration
}

// failureOf reads the details every walfeed error carries in its
// grpc-status-details-bin trailer: a google.rpc.Status whose details hold a
// google.rpc.ErrorInfo (domain "walfeed.v1", reason: an ErrorReason value's name
// without ERROR_REASON_) and, when a retry is right, a google.rpc.RetryInfo.
// grpc-go decodes the Status; importing errdetails lets it unpack the two.
func failureOf(err error) failure {
	s := status.Convert(err)
	f := failure{code: "UNKNOWN", message: s.Message()}
	if int(s.Code()) < len(codeNames) {
		f.code = codeNames[s.Code()]
	}
	for _, detail := range s.Details() {
		switch d := detail.(type) {
		case *errdetails.ErrorInfo:
			if d.GetDomain() == "walfeed.v1" {
				f.reason = d.GetReason()
			}
		case *errdetails.RetryInfo:
			delay := time.Duration(d.GetRetryDelay().GetSeconds())*time.Second +
				time.Duration(d.GetRetryDelay().GetNanos())
			f.retryDelay = &delay
		}
	}
	return f
}

// nextDelay is the retry policy, the same in the Python and Node examples: after
// a RetryInfo, its delay plus a jittered backoff; UNAVAILABLE or CANCELLED
// without walfeed's details are gRPC's own (the connection was lost or refused;
// the consumer never cancels a call it still reads, so a CANCELLED is the
// transport's, e.g. a proxy resetting the stream), retried with the backoff;
// anything else needs a human: false, give up.
func nextDelay(f failure, attempt int) (time.Duration, bool) {
	if f.retryDelay == nil && (f.reason != "" || (f.code != "UNAVAILABLE" && f.code != "CANCELLED")) {
		return 0, false
	}
	// Capped exponential backoff with full jitter: up to 100ms, 200ms, ... 3.2s, then 5s.
	limit := 5 * time.Second
	if attempt < 6 {
		limit = time.Duration(100<<attempt) * time.Millisecond
	}
	delay := time.Duration(rand.Int63n(int64(limit)))
	if f.retryDelay != nil {
		delay += *f.retryDelay
	}
	return delay, true
}

// drainFor: after an Ack refused with ABORTED (the session is no longer the
// consumer's active one: reset, taken over, being removed), the Subscribe
// stream's own status follows at once and says which. Frames are dropped until
// it comes; if they still come this long after, the Ack's error stands.
const drainFor = 10 * time.Second

// openOutput opens path for appending, first cutting off a line torn by a crash.
func openOutput(path string) (*os.File, error) {
	if data, err := os.ReadFile(path); err == nil && len(data) > 0 && data[len(data)-1] != '\n' {
		if err := os.Truncate(path, int64(bytes.LastIndexByte(data, '\n')+1)); err != nil {
			return nil, err // The torn events were never acked: they come again.
		}
	}
	return os.OpenFile(path, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o644)
}

// consume runs one subscription until the server ends it, and returns its status.
func consume(client walfeedv1.ChangeStreamClient, stream, consumer string, ackEvery int,
	out *os.File, onStarted func()) error {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel() // Ends the subscription if an Ack failed.
	// WaitForReady: while the server is unreachable, the call waits for the
	// connection to come back instead of failing at once.
	sub, err := client.Subscribe(ctx, &walfeedv1.SubscribeRequest{Stream: stream, Consumer: consumer},
		grpc.WaitForReady(true))
	if err != nil {
		return err
	}
	// ackTo: the newest id this process may ack (the last event written, or a
	// position the server passed: events our filters left out); acked: the last one acked.
	var session, ackTo, acked string
	pending := 0
	var refused error // An Ack refused with ABORTED: see drainFor.
	var giveUpAt time.Time
	for {
		resp, err := sub.Recv()
		if err == io.EOF && refused != nil {
			return refused
		} else if err == io.EOF {
			return status.Error(codes.Unavailable, "the stream ended") // Never expected.
		} else if err != nil {
			return err
		}
		if refused != nil { // Dropped, never written: the stream's status decides.
			if time.Now().After(giveUpAt) {
				return refused
			}
			continue
		}
		if started := resp.GetStarted(); started != nil { // Always first: names the session acks go to.
			session = started.GetSessionId()
			log.Printf("started session=%s checkpoint=%s", session, started.GetCheckpoint())
			onStarted()
			continue
		}
		if batch := resp.GetEvents(); batch != nil {
			var lines strings.Builder
			for _, e := range batch.GetEvents() {
				lines.WriteString(e.GetId() + "\t" + canonical(e) + "\n")
			}
			if _, err := out.WriteString(lines.String()); err != nil {
				log.Fatalf("walfeed consumer: %v", err)
			}
			if err := out.Sync(); err != nil { // Durable first ...
				log.Fatalf("walfeed consumer: %v", err)
			}
			ackTo = batch.GetEvents()[len(batch.GetEvents())-1].GetId()
			if batch.GetPassed() != "" {
				ackTo = batch.GetPassed()
			}
			pending++
		} else if p := resp.GetProgress(); p != nil && p.GetPassed() != "" && p.GetPassed() != acked {
			// Idle, and everything written: what the server passed since (events a
			// filter left out) is ackable too, so the checkpoint keeps up.
			ackTo = p.GetPassed()
			pending++
		}
		// ... then ack, cumulatively: every --ack-every batches, and when idle.
		if pending > 0 && (pending >= ackEvery || resp.GetProgress() != nil) {
			if _, err := client.Ack(ctx, &walfeedv1.AckRequest{Stream: stream, Consumer: consumer,
				SessionId: session, EventId: ackTo}); status.Code(err) == codes.Aborted {
				refused, giveUpAt = err, time.Now().Add(drainFor)
				continue
			} else if err != nil {
				return err // Decides by itself.
			}
			log.Printf("acked %s", ackTo)
			acked = ackTo
			pending = 0
		}
	}
}

func main() {
	server := flag.String("server", "", "HOST:PORT (plaintext)")
	stream := flag.String("stream", "", "the stream's name")
	consumer := flag.String("consumer", "", "the durable consumer name")
	outPath := flag.String("out", "", "file the events are appended to")
	ackEvery := flag.Int("ack-every", 1, "ack every N batches")
	flag.Parse()
	log.SetFlags(0)
	rand.Seed(time.Now().UnixNano())
	if *server == "" || *stream == "" || *consumer == "" || *outPath == "" {
		log.Fatal("walfeed consumer: --server, --stream, --consumer and --out are required")
	}
	// Reconnect at most 5 s after the server is back (gRPC's default grows to 120 s).
	reconnect := backoff.DefaultConfig
	reconnect.MaxDelay = 5 * time.Second
	conn, err := grpc.Dial(*server, grpc.WithInsecure(), grpc.WithConnectParams(
		grpc.ConnectParams{Backoff: reconnect, MinConnectTimeout: 20 * time.Second}),
		// No receive limit: gRPC's 4 MiB default would fail on a large row's event forever.
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(math.MaxInt32)))
	if err != nil {
		log.Fatalf("walfeed consumer: %v", err)
	}
	client := walfeedv1.NewChangeStreamClient(conn)
	out, err := openOutput(*outPath)
	if err != nil {
		log.Fatalf("walfeed consumer: %v", err)
	}
	attempt := 0
	for {
		f := failureOf(consume(client, *stream, *consumer, *ackEvery, out, func() { attempt = 0 }))
		delay, retry := nextDelay(f, attempt)
		if !retry {
			reason := ""
			if f.reason != "" {
				reason = " " + f.reason
			}
			log.Fatalf("walfeed consumer: %s%s: %s", f.code, reason, f.message)
		}
		// The next Subscribe resumes after the server's durable checkpoint.
		attempt++
		what := f.reason
		if what == "" {
			what = f.code
		}
		log.Printf("retry in %dms: %s: %s", delay.Milliseconds(), what, f.message)
		time.Sleep(delay)
	}
}
