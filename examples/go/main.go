// Command go-consumer is a walfeed consumer: it appends every change event to a
// file, then acks it.
//
//	go-consumer --server HOST:PORT --stream S --consumer C --out FILE [--ack-every N]
//
// Each event becomes one line "<id>\t<canonical JSON>" (examples/README.md
// defines the JSON). A batch is written and fsynced before it is acked, so a
// crash can only repeat events, never lose them: the server resumes after the
// last durable ack. Built on the walfeed package (client/go/walfeed), which
// runs the loop: subscribe, reconnect with backoff on what the API documents
// as retryable, ack by policy. The stubs come from protoc-gen-go and
// protoc-gen-go-grpc (see examples/build.sh).
package main

import (
	"bytes"
	"context"
	"flag"
	"fmt"
	"log"
	"math/rand"
	"os"
	"strings"
	"time"

	"walfeed/client/go/walfeed"
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

// openOutput opens path for appending, first cutting off a line torn by a crash.
func openOutput(path string) (*os.File, error) {
	if data, err := os.ReadFile(path); err == nil && len(data) > 0 && data[len(data)-1] != '\n' {
		if err := os.Truncate(path, int64(bytes.LastIndexByte(data, '\n')+1)); err != nil {
			return nil, err // The torn events were never acked: they come again.
		}
	}
	return os.OpenFile(path, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o644)
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
	out, err := openOutput(*outPath)
	if err != nil {
		log.Fatalf("walfeed consumer: %v", err)
	}
	// The example's lines are PostgreSQL's text in the full form, byte for byte
	// the same in every language; a new consumer would take the defaults (typed
	// values as Go values, compact events) and read Change.Row.
	sub, err := walfeed.NewSubscriber(walfeed.Options{
		Server: *server, Stream: *stream, Consumer: *consumer,
		ValueForm: "text", Full: true, Ack: walfeed.EveryBatches(*ackEvery),
		OnStarted: func(session, checkpoint string) {
			log.Printf("started session=%s checkpoint=%s", session, checkpoint)
		},
		OnAcked: func(id string) { log.Printf("acked %s", id) },
		OnRetry: func(f walfeed.Failure, delay time.Duration) {
			what := f.Reason
			if what == "" {
				what = f.Code
			}
			log.Printf("retry in %dms: %s: %s", delay.Milliseconds(), what, f.Message)
		},
	})
	if err != nil {
		log.Fatalf("walfeed consumer: %v", err)
	}
	err = sub.Run(context.Background(), func(_ context.Context, batch walfeed.Batch) error {
		var lines strings.Builder
		for _, c := range batch {
			lines.WriteString(c.ID + "\t" + canonical(c.Event) + "\n")
		}
		if _, err := out.WriteString(lines.String()); err != nil {
			return err
		}
		return out.Sync() // Durable first; the subscriber acks after this returns.
	})
	log.Fatalf("walfeed consumer: %v", err)
}
