// Command go-effect-once is a walfeed consumer whose effects land in
// PostgreSQL exactly once (the Go twin of examples/python/effect_once.py).
//
//	go-effect-once --server HOST:PORT --stream S --consumer C --dest-dsn DSN [--crash-after-commit N]
//
// Each event becomes one row of applied_effects in the destination database
// (DSN, for lib/pq: its default is sslmode=require, so say sslmode=disable for
// a server without TLS). Per batch: one destination transaction applies the
// new events and moves the watermark (walfeed.Watermark), COMMIT, and only
// then the batch is acked. Every Subscribe starts after the stored watermark.
// applied_effects has no unique constraint on purpose: an event applied twice
// would show as two rows.
//
// --crash-after-commit N exits with code 137 right after the N-th destination
// COMMIT, before its ack: the window in which walfeed redelivers what the
// destination already has.
package main

import (
	"context"
	"database/sql"
	"flag"
	"log"
	"os"
	"time"

	_ "github.com/lib/pq"

	"walfeed/client/go/walfeed"
)

const createEffects = `CREATE TABLE IF NOT EXISTS applied_effects (
  event_id   text NOT NULL,
  commit_lsn numeric(20) NOT NULL,
  idx        bigint NOT NULL,
  seq        text,
  applied_at timestamptz NOT NULL DEFAULT now())`

// effect is the side effect of one event: a row in applied_effects.
func effect(tx *sql.Tx, c walfeed.Change) error {
	var seq sql.NullString
	values := c.Event.GetNewValues()
	if len(values) == 0 {
		values = c.Event.GetOldValues()
	}
	for _, v := range values {
		if v.GetName() == "id" {
			seq = sql.NullString{String: v.GetText(), Valid: true}
		}
	}
	_, err := tx.Exec("INSERT INTO applied_effects (event_id, commit_lsn, idx, seq) VALUES ($1, $2, $3, $4)",
		c.ID, int64(c.Event.GetCommitLsn()), int64(c.Event.GetIndex()), seq)
	return err
}

func main() {
	server := flag.String("server", "", "HOST:PORT (plaintext)")
	stream := flag.String("stream", "", "the stream's name")
	consumer := flag.String("consumer", "", "the durable consumer name")
	dsn := flag.String("dest-dsn", "", "the destination's DSN (lib/pq)")
	crashAfter := flag.Int("crash-after-commit", 0, "exit 137 after the N-th destination commit, before its ack")
	flag.Parse()
	log.SetFlags(0)
	if *server == "" || *stream == "" || *consumer == "" || *dsn == "" {
		log.Fatal("walfeed consumer: --server, --stream, --consumer and --dest-dsn are required")
	}
	ctx := context.Background()
	db, err := sql.Open("postgres", *dsn)
	if err != nil {
		log.Fatalf("walfeed consumer: %v", err)
	}
	if _, err := db.ExecContext(ctx, createEffects); err != nil {
		log.Fatalf("walfeed consumer: %v", err)
	}
	wm, err := walfeed.NewWatermark(ctx, db, *stream, *consumer, "")
	if err != nil {
		log.Fatalf("walfeed consumer: %v", err)
	}
	var sub *walfeed.Subscriber
	sub, err = walfeed.NewSubscriber(walfeed.Options{
		Server: *server, Stream: *stream, Consumer: *consumer, ValueForm: "text", Full: true,
		Ack: walfeed.EveryBatches(1), StartAfterFunc: wm.Resume,
		OnStarted: func(session, checkpoint string) {
			log.Printf("started session=%s checkpoint=%s start_after=%s", session, checkpoint,
				sub.LastStartAfter())
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
	commits := 0
	err = sub.Run(ctx, func(ctx context.Context, batch walfeed.Batch) error {
		tx, err := db.BeginTx(ctx, nil)
		if err != nil {
			return err
		}
		applied, skipped, err := wm.Apply(ctx, tx, batch, effect)
		if err != nil {
			tx.Rollback()
			return err
		}
		if err := tx.Commit(); err != nil { // Effects and watermark together, or neither.
			return err
		}
		commits++
		log.Printf("committed %s applied=%d skipped=%d", batch[len(batch)-1].ID, applied, skipped)
		if commits == *crashAfter {
			log.Printf("crashing after commit %d, before its ack", commits)
			os.Exit(137) // No ack: like a SIGKILL right here.
		}
		return nil // The subscriber acks the batch: only after the COMMIT.
	})
	log.Fatalf("walfeed consumer: %v", err)
}
