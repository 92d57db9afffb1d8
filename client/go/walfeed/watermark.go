package walfeed

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strconv"
	"strings"

	walfeedv1 "walfeed/gen/go/walfeed/v1"
)

// Watermark is the last applied event id of one (consumer, stream), stored in
// the destination PostgreSQL database in the same transaction as the
// effects: exactly-once effects on top of at-least-once delivery. The Go twin
// of walfeed::PgWatermark (C++) and walfeed.watermark (Python), on the same
// table. It uses database/sql with $n placeholders: any PostgreSQL driver
// (lib/pq, pgx's stdlib) works.
//
//	wm, err := walfeed.NewWatermark(ctx, db, "orders", "billing", "")
//	sub, err := walfeed.NewSubscriber(walfeed.Options{..., StartAfterFunc: wm.Resume,
//		Ack: walfeed.EveryBatches(1)}) // acked once handle returns
//	handle := func(ctx context.Context, batch walfeed.Batch) error {
//		tx, err := db.BeginTx(ctx, nil)
//		...
//		if _, _, err := wm.Apply(ctx, tx, batch, effect); err != nil { tx.Rollback(); return err }
//		return tx.Commit() // effects and watermark together
//	}
//
// Ids order as (commit LSN, index), stored as numbers, so "0/9:0" < "0/10:0".
type Watermark struct {
	db               *sql.DB
	stream, consumer string
	table            string // Quoted.
}

// quoteIdent quotes a table name, "schema.table" or "table".
func quoteIdent(name string) string {
	parts := strings.SplitN(name, ".", 2)
	for i, part := range parts {
		parts[i] = `"` + strings.ReplaceAll(part, `"`, `""`) + `"`
	}
	return strings.Join(parts, ".")
}

// NewWatermark creates the table (if missing; "" is walfeed_watermark) and
// this consumer's row.
func NewWatermark(ctx context.Context, db *sql.DB, stream, consumer, table string) (*Watermark, error) {
	if stream == "" || consumer == "" {
		return nil, errors.New("walfeed watermark: stream and consumer must be set")
	}
	if table == "" {
		table = "walfeed_watermark"
	}
	w := &Watermark{db: db, stream: stream, consumer: consumer, table: quoteIdent(table)}
	var exists bool
	if err := db.QueryRowContext(ctx, "SELECT to_regclass($1) IS NOT NULL", table).Scan(&exists); err != nil {
		return nil, err
	}
	if !exists { // Looked up first only to spare a NOTICE.
		create := `CREATE TABLE IF NOT EXISTS ` + w.table + ` (
  consumer   text NOT NULL,
  stream     text NOT NULL,
  last_id    text,
  commit_lsn pg_lsn,
  idx        bigint CHECK (idx BETWEEN 0 AND 4294967295),
  updated_at timestamptz NOT NULL DEFAULT now(),
  PRIMARY KEY (consumer, stream))`
		if _, err := db.ExecContext(ctx, create); err != nil {
			// Two processes created it at once: it exists now.
			if _, again := db.ExecContext(ctx, create); again != nil {
				return nil, err
			}
		}
	}
	if _, err := db.ExecContext(ctx, "INSERT INTO "+w.table+" (consumer, stream) VALUES ($1, $2) "+
		"ON CONFLICT DO NOTHING", consumer, stream); err != nil {
		return nil, err
	}
	return w, nil
}

// Resume is the stored id, for Options.StartAfterFunc; "" when nothing was
// applied.
func (w *Watermark) Resume(ctx context.Context) (string, error) {
	var id sql.NullString
	err := w.db.QueryRowContext(ctx, "SELECT last_id FROM "+w.table+
		" WHERE consumer = $1 AND stream = $2", w.consumer, w.stream).Scan(&id)
	if errors.Is(err, sql.ErrNoRows) {
		return "", nil
	}
	return id.String, err
}

// Apply applies a batch inside the caller's transaction: it locks the row,
// skips every event at or below the stored (commit LSN, index), calls effect
// for the others in order and stores the newest applied id. Nothing is
// durable until the caller commits; if effect fails, roll back (the events
// come again).
func (w *Watermark) Apply(ctx context.Context, tx *sql.Tx, batch Batch,
	effect func(*sql.Tx, Change) error) (applied, skipped int, err error) {
	lock := "SELECT (commit_lsn - '0/0'::pg_lsn)::text, idx FROM " + w.table +
		" WHERE consumer = $1 AND stream = $2 FOR UPDATE"
	var lsn sql.NullString
	var idx sql.NullInt64
	err = tx.QueryRowContext(ctx, lock, w.consumer, w.stream).Scan(&lsn, &idx)
	if errors.Is(err, sql.ErrNoRows) { // Deleted since NewWatermark: make it again.
		if _, err = tx.ExecContext(ctx, "INSERT INTO "+w.table+" (consumer, stream) VALUES ($1, $2) "+
			"ON CONFLICT DO NOTHING", w.consumer, w.stream); err != nil {
			return 0, 0, err
		}
		err = tx.QueryRowContext(ctx, lock, w.consumer, w.stream).Scan(&lsn, &idx)
	}
	if err != nil {
		return 0, 0, err
	}
	var stored *EventID
	if lsn.Valid {
		value, perr := strconv.ParseUint(lsn.String, 10, 64)
		if perr != nil {
			return 0, 0, fmt.Errorf("walfeed watermark: stored LSN %q: %w", lsn.String, perr)
		}
		stored = &EventID{value, uint32(idx.Int64)}
	}
	var newest *walfeedv1.ChangeEvent
	for _, change := range batch {
		id := EventID{change.Event.GetCommitLsn(), change.Event.GetIndex()}
		if stored != nil && id.Compare(*stored) <= 0 {
			skipped++
			continue
		}
		if err := effect(tx, change); err != nil {
			return applied, skipped, err
		}
		applied++
		newest = change.Event
	}
	if newest != nil {
		_, err = tx.ExecContext(ctx, "UPDATE "+w.table+" SET last_id = $1, commit_lsn = $2::pg_lsn, "+
			"idx = $3, updated_at = now() WHERE consumer = $4 AND stream = $5",
			newest.GetId(), LSNText(newest.GetCommitLsn()), int64(newest.GetIndex()), w.consumer, w.stream)
	}
	return applied, skipped, err
}
