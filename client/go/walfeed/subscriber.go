// Package walfeed is the Go client of walfeed: PostgreSQL change streams over
// gRPC.
//
//	sub, err := walfeed.NewSubscriber(walfeed.Options{Server: "localhost:50051",
//		Stream: "orders", Consumer: "billing", Ack: walfeed.EveryEvents(100)})
//	err = sub.Run(ctx, func(ctx context.Context, batch walfeed.Batch) error {
//		for _, c := range batch { fmt.Println(c.ID, c.Op, c.Table, c.Row, c.Old) }
//		return nil
//	})
//
// Run subscribes, calls handle for every batch of events, in id order, and
// acks what handle returned nil for, as the ack policy says. It reconnects by
// itself with capped jittered backoff on every error the API documents as
// retryable (NextDelay) and resumes right after the consumer's durable
// checkpoint; it returns a Failure on the others, handle's error as is (those
// events come again), or ctx's error when ctx ends.
package walfeed

import (
	"context"
	"errors"
	"io"
	"math"
	"strings"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	walfeedv1 "walfeed/gen/go/walfeed/v1"
)

// drainFor: after an Ack refused with ABORTED (the session is no longer the
// consumer's active one), the Subscribe stream's own status follows at once
// and says why. Frames are dropped until it comes; if they still come this
// long after, the Ack's error stands.
const drainFor = 10 * time.Second

// AckPolicy says when Run acks. Every automatic policy also acks when the
// stream goes idle, up to what the server passed (events the filters left
// out), so a consumer whose filters match nothing never holds the stream back.
type AckPolicy struct {
	events, batches int
	interval        time.Duration
	manual          bool
}

// EveryEvents acks after every n handled events.
func EveryEvents(n int) AckPolicy { return AckPolicy{events: n} }

// EveryBatches acks after every n handled batches.
func EveryBatches(n int) AckPolicy { return AckPolicy{batches: n} }

// EveryInterval acks at most this often (checked as frames arrive; an idle
// stream brings a progress frame every 5 s).
func EveryInterval(d time.Duration) AckPolicy { return AckPolicy{interval: d} }

// Manual acks only when Subscriber.Ack is called.
func Manual() AckPolicy { return AckPolicy{manual: true} }

func (p AckPolicy) automatic() bool { return p.events > 0 || p.batches > 0 || p.interval > 0 }

// Options configure a Subscriber. Server, Stream and Consumer are required.
type Options struct {
	Server, Stream, Consumer string
	Ack                      AckPolicy // Zero value: EveryEvents(1).
	// ValueForm is "typed" (default), "both" or "text".
	ValueForm string
	// Full: column metadata in every event instead of once per table version.
	Full bool
	// Tables ("schema.table" globs) and Operations ("INSERT", ...) filter.
	Tables, Operations []string
	// StartAfter: an id to start after instead of the server's checkpoint.
	StartAfter string
	// StartAfterFunc, if set, gives StartAfter before every Subscribe (a
	// destination's watermark: Watermark.Resume); an error ends Run with it.
	StartAfterFunc func(context.Context) (string, error)
	// Credentials: TLS (credentials.NewTLS); nil is plaintext.
	Credentials credentials.TransportCredentials
	// Token: a bearer token for the server's auth.
	Token string
	// MaxBackoff caps the retry and reconnect backoff; 0 is 5 s.
	MaxBackoff time.Duration
	// Called from Run's goroutine.
	OnStarted func(session, checkpoint string)
	OnAcked   func(id string)
	OnRetry   func(f Failure, delay time.Duration)
}

// Change is one event: its id, operation ("INSERT", "UPDATE", "DELETE",
// "TRUNCATE", "MESSAGE", "READ"), table, the new row and the old row (or its
// key) as maps of Go values (Value), and the ChangeEvent itself.
type Change struct {
	ID, Op, Schema, Table string
	Row, Old              map[string]any // nil when the event has no such row.
	TransactionEnd        bool           // The last event of its transaction.
	Event                 *walfeedv1.ChangeEvent
}

// Batch is the changes of one events frame, in id order.
type Batch []Change

// Transactions groups the batch's changes by transaction (the last group may
// go on in the next batch: its last change has TransactionEnd false).
func (b Batch) Transactions() []Batch {
	var groups []Batch
	start := 0
	for i, c := range b {
		if c.TransactionEnd {
			groups = append(groups, b[start:i+1])
			start = i + 1
		}
	}
	if start < len(b) {
		groups = append(groups, b[start:])
	}
	return groups
}

func row(values []*walfeedv1.ColumnValue, columns []*walfeedv1.ColumnShape) map[string]any {
	if len(values) == 0 {
		return nil
	}
	out := make(map[string]any, len(values))
	for i, v := range values {
		name := v.GetName()
		if columns != nil && i < len(columns) {
			name = columns[i].GetName()
		}
		out[name] = Value(v)
	}
	return out
}

// NewChange resolves an event against its RelationShape (nil for the full
// form, whose columns name themselves).
func NewChange(e *walfeedv1.ChangeEvent, shape *walfeedv1.RelationShape) Change {
	c := Change{ID: e.GetId(), Op: strings.TrimPrefix(e.GetOp().String(), "OPERATION_"),
		Schema: e.GetSchema(), Table: e.GetTable(), TransactionEnd: e.GetLastInTransaction(), Event: e}
	var columns, keys []*walfeedv1.ColumnShape
	if shape != nil {
		c.Schema, c.Table = shape.GetSchema(), shape.GetTable()
		columns, keys = shape.GetColumns(), shape.GetColumns()
		if e.GetOldValuesKind() == walfeedv1.OldValues_OLD_VALUES_KEY {
			keys = nil
			for _, column := range columns {
				if column.GetKey() {
					keys = append(keys, column)
				}
			}
		}
	}
	c.Row = row(e.GetNewValues(), columns)
	c.Old = row(e.GetOldValues(), keys)
	return c
}

// Subscriber is a durable consumer of one stream.
type Subscriber struct {
	opts    Options
	conn    *grpc.ClientConn
	client  walfeedv1.ChangeStreamClient
	request *walfeedv1.SubscribeRequest
	session string
	// The id the latest Subscribe started after ("" for the checkpoint).
	lastStartAfter string
}

// LastStartAfter is the id the latest Subscribe started after ("": after the
// server's checkpoint); for OnStarted.
func (s *Subscriber) LastStartAfter() string { return s.lastStartAfter }

var valueForms = map[string]walfeedv1.ValueForm{"": walfeedv1.ValueForm_VALUE_FORM_TYPED,
	"typed": walfeedv1.ValueForm_VALUE_FORM_TYPED, "both": walfeedv1.ValueForm_VALUE_FORM_BOTH,
	"text": walfeedv1.ValueForm_VALUE_FORM_TEXT}

// NewSubscriber checks the options and opens the channel (it connects lazily).
func NewSubscriber(opts Options) (*Subscriber, error) {
	if opts.Server == "" || opts.Stream == "" || opts.Consumer == "" {
		return nil, errors.New("walfeed: Options.Server, Stream and Consumer are required")
	}
	form, ok := valueForms[opts.ValueForm]
	if !ok {
		return nil, errors.New(`walfeed: Options.ValueForm must be "typed", "both" or "text"`)
	}
	if opts.Ack == (AckPolicy{}) {
		opts.Ack = EveryEvents(1)
	}
	if opts.MaxBackoff <= 0 {
		opts.MaxBackoff = 5 * time.Second
	}
	request := &walfeedv1.SubscribeRequest{Stream: opts.Stream, Consumer: opts.Consumer,
		StartAfter: opts.StartAfter, Tables: opts.Tables, ValueForm: form,
		EventForm: walfeedv1.EventForm_EVENT_FORM_COMPACT}
	if opts.Full {
		request.EventForm = walfeedv1.EventForm_EVENT_FORM_FULL
	}
	for _, op := range opts.Operations {
		value, ok := walfeedv1.Operation_value["OPERATION_"+op]
		if !ok {
			return nil, errors.New("walfeed: unknown operation " + op)
		}
		request.Operations = append(request.Operations, walfeedv1.Operation(value))
	}
	security := grpc.WithInsecure() // Debian's grpc-go predates credentials/insecure.
	if opts.Credentials != nil {
		security = grpc.WithTransportCredentials(opts.Credentials)
	}
	// Reconnect at most MaxBackoff after the server is back (gRPC's default
	// grows to 120 s). No receive limit: an event is as large as its row, and
	// under gRPC's 4 MiB default the first larger one would fail forever.
	reconnect := backoff.DefaultConfig
	reconnect.MaxDelay = opts.MaxBackoff
	conn, err := grpc.Dial(opts.Server, security,
		grpc.WithConnectParams(grpc.ConnectParams{Backoff: reconnect, MinConnectTimeout: 20 * time.Second}),
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(math.MaxInt32)))
	if err != nil {
		return nil, err
	}
	return &Subscriber{opts: opts, conn: conn, client: walfeedv1.NewChangeStreamClient(conn),
		request: request}, nil
}

// Close closes the channel.
func (s *Subscriber) Close() error { return s.conn.Close() }

func (s *Subscriber) outgoing(ctx context.Context) context.Context {
	if s.opts.Token == "" {
		return ctx
	}
	return metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer "+s.opts.Token)
}

// Ack acks everything up to and including id in the current session (for
// Manual; may be called from handle).
func (s *Subscriber) Ack(ctx context.Context, id string) error {
	_, err := s.client.Ack(s.outgoing(ctx), &walfeedv1.AckRequest{Stream: s.opts.Stream,
		Consumer: s.opts.Consumer, SessionId: s.session, EventId: id})
	if err == nil && s.opts.OnAcked != nil {
		s.opts.OnAcked(id)
	}
	return err
}

// handlerError marks handle's own error (or StartAfterFunc's), which Run
// returns as is.
type handlerError struct{ err error }

func (h handlerError) Error() string { return h.err.Error() }

// Run consumes until ctx ends or an error no retry fixes (see the package
// comment).
func (s *Subscriber) Run(ctx context.Context, handle func(context.Context, Batch) error) error {
	attempt := 0
	for {
		started, err := s.subscribeOnce(ctx, handle)
		if ctx.Err() != nil {
			return ctx.Err()
		}
		var handled handlerError
		if errors.As(err, &handled) {
			return handled.err
		}
		if started {
			attempt = 0
		}
		f := FailureOf(err)
		delay, retry := NextDelay(f, attempt, s.opts.MaxBackoff)
		if !retry {
			return f
		}
		if s.opts.OnRetry != nil {
			s.opts.OnRetry(f, delay)
		}
		attempt++
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(delay):
		}
	}
}

// subscribeOnce runs one session until the server ends it; started says
// whether it started (so the backoff starts over).
func (s *Subscriber) subscribeOnce(ctx context.Context, handle func(context.Context, Batch) error) (bool, error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel() // Ends the subscription if an Ack failed.
	// WaitForReady: while the server is unreachable, the call waits for the
	// connection to come back instead of failing at once.
	if s.opts.StartAfterFunc != nil {
		startAfter, err := s.opts.StartAfterFunc(ctx)
		if err != nil {
			return false, handlerError{err}
		}
		s.request.StartAfter = startAfter
	}
	s.lastStartAfter = s.request.StartAfter
	sub, err := s.client.Subscribe(s.outgoing(ctx), s.request, grpc.WaitForReady(true))
	if err != nil {
		return false, err
	}
	policy := s.opts.Ack
	shapes := map[uint32]*walfeedv1.RelationShape{}
	started := false
	var ackTo, acked string
	events, batches := 0, 0
	lastAck := time.Now()
	var refused error
	var giveUpAt time.Time
	for {
		resp, err := sub.Recv()
		if err == io.EOF && refused != nil {
			return started, refused
		} else if err == io.EOF {
			return started, status.Error(codes.Unavailable, "the stream ended") // Never expected.
		} else if err != nil {
			return started, err
		}
		if refused != nil { // Dropped: the stream's own status decides.
			if time.Now().After(giveUpAt) {
				return started, refused
			}
			continue
		}
		if st := resp.GetStarted(); st != nil {
			started = true
			shapes = map[uint32]*walfeedv1.RelationShape{} // Shapes belong to the session.
			s.session = st.GetSessionId()
			if s.opts.OnStarted != nil {
				s.opts.OnStarted(s.session, st.GetCheckpoint())
			}
			continue
		}
		idle := resp.GetProgress() != nil
		if frame := resp.GetEvents(); frame != nil {
			for _, shape := range frame.GetRelations() {
				shapes[shape.GetRef()] = shape
			}
			batch := make(Batch, len(frame.GetEvents()))
			for i, e := range frame.GetEvents() {
				batch[i] = NewChange(e, shapes[e.GetRelationRef()])
			}
			if err := handle(ctx, batch); err != nil {
				return started, handlerError{err}
			}
			ackTo = batch[len(batch)-1].ID
			if frame.GetPassed() != "" {
				ackTo = frame.GetPassed()
			}
			events += len(batch)
			batches++
		} else if p := resp.GetProgress(); p != nil && p.GetPassed() != "" && p.GetPassed() != acked {
			ackTo = p.GetPassed()
			batches++
		}
		if batches == 0 || !policy.automatic() {
			continue
		}
		due := idle || (policy.events > 0 && events >= policy.events) ||
			(policy.batches > 0 && batches >= policy.batches) ||
			(policy.interval > 0 && time.Since(lastAck) >= policy.interval)
		if !due {
			continue
		}
		if err := s.Ack(ctx, ackTo); status.Code(err) == codes.Aborted {
			refused, giveUpAt = err, time.Now().Add(drainFor)
			continue
		} else if err != nil {
			return started, err
		}
		acked, events, batches, lastAck = ackTo, 0, 0, time.Now()
	}
}
