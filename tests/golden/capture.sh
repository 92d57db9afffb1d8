#!/usr/bin/env bash
# Regenerates the golden pgoutput vectors (pg15_*.hex) from a throwaway PostgreSQL 15.
#
# Starts a private cluster in a temporary directory on a free loopback port, creates a
# schema and a workload that make the server send every pgoutput message type, and
# records each slot's raw CopyData stream with golden_capture_frames up to the WAL
# position taken right after that workload (like pg_recvlogical --endpos). The
# cluster is stopped and deleted on exit, whatever happens. See README.md for what
# each file contains and what golden_test checks.
#
# Usage: capture.sh [--capture-bin PATH] [--build-dir DIR] [--out-dir DIR]
#   --capture-bin  an already built golden_capture_frames (default: build it with
#                  cmake --build DIR --target golden_capture_frames)
#   --build-dir    configured CMake build directory (default: <repo>/build)
#   --out-dir      where the .hex files go (default: this directory)
# Environment: PG_BIN (default /usr/lib/postgresql/15/bin), WALFEED_BUILD_LOCK (lock
# file that serialises builds on shared machines, default /tmp/walfeed-build.lock).
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
repo=$(cd "$here/../.." && pwd)
pg_bin=${PG_BIN:-/usr/lib/postgresql/15/bin}
build_dir="$repo/build"
out_dir="$here"
capture_bin=""

while [ $# -gt 0 ]; do
  case "$1" in
    --capture-bin) capture_bin=$2; shift 2 ;;
    --build-dir) build_dir=$2; shift 2 ;;
    --out-dir) out_dir=$2; shift 2 ;;
    -h|--help) sed -n '2,17p' "$0"; exit 0 ;;
    *) echo "capture.sh: unknown argument $1" >&2; exit 2 ;;
  esac
done
mkdir -p "$out_dir"
out_dir=$(cd "$out_dir" && pwd)

if [ -z "$capture_bin" ]; then
  echo "capture.sh: building golden_capture_frames in $build_dir"
  flock "${WALFEED_BUILD_LOCK:-/tmp/walfeed-build.lock}" \
    cmake --build "$build_dir" --target golden_capture_frames -j2
  capture_bin="$build_dir/tests/golden/golden_capture_frames"
fi
[ -x "$capture_bin" ] || { echo "capture.sh: $capture_bin is not executable" >&2; exit 1; }
[ -x "$pg_bin/initdb" ] || { echo "capture.sh: no initdb in $pg_bin (set PG_BIN)" >&2; exit 1; }

# initdb and postgres refuse to run as root: use the postgres OS user then.
as_pg() {
  if [ "$(id -u)" = 0 ]; then runuser -u postgres -- "$@"; else "$@"; fi
}

workdir=$(mktemp -d /tmp/walfeed-golden.XXXXXX)
data="$workdir/data"
started=""
cleanup() {
  local rc=$?
  if [ -n "$started" ]; then
    as_pg "$pg_bin/pg_ctl" -D "$data" -m immediate -w stop >/dev/null 2>&1 || true
  fi
  if [ $rc -ne 0 ] && [ -f "$workdir/server.log" ]; then
    echo "capture.sh: failed (exit $rc); server log tail:" >&2
    tail -n 30 "$workdir/server.log" >&2 || true
  fi
  rm -rf "$workdir"
  exit $rc
}
trap cleanup EXIT
trap 'exit 130' INT TERM
if [ "$(id -u)" = 0 ]; then chown postgres: "$workdir"; fi

as_pg "$pg_bin/initdb" -D "$data" -U postgres -A trust -E UTF8 --locale=C --no-sync \
  >"$workdir/initdb.log" 2>&1 || { cat "$workdir/initdb.log" >&2; exit 1; }
# Settings that pin what the walsender prints (value text comes from each type's
# output function in the walsender's session) and keep background WAL out.
cat >>"$data/postgresql.conf" <<EOF
listen_addresses = '127.0.0.1'
unix_socket_directories = '$workdir'
wal_level = logical
max_replication_slots = 10
max_wal_senders = 10
max_prepared_transactions = 5
logical_decoding_work_mem = 64kB
wal_sender_timeout = 60s
autovacuum = off
fsync = off
TimeZone = 'UTC'
DateStyle = 'ISO, MDY'
IntervalStyle = 'postgres'
extra_float_digits = 1
lc_messages = 'C'
EOF

# First loopback port from 55440 with no listener that the server manages to bind.
port=""
for candidate in $(seq 55440 55499); do
  if (exec 3<>"/dev/tcp/127.0.0.1/$candidate") 2>/dev/null; then continue; fi
  if as_pg "$pg_bin/pg_ctl" -D "$data" -l "$workdir/server.log" -w -t 60 \
       -o "-p $candidate" start >/dev/null; then
    port=$candidate
    started=1
    break
  fi
done
[ -n "$port" ] || { echo "capture.sh: could not start a server on 55440-55499" >&2; exit 1; }
echo "capture.sh: cluster in $data on 127.0.0.1:$port"

psql_admin() {
  "$pg_bin/psql" -X -q -v ON_ERROR_STOP=1 -h 127.0.0.1 -p "$port" -U postgres "$@"
}
psql_db() { psql_admin -d golden "$@"; }
wal_lsn() { psql_db -At -c 'SELECT pg_current_wal_lsn()'; }
dsn="host=127.0.0.1 port=$port user=postgres dbname=golden"

# capture NAME SLOT ENDPOS DESCRIPTION OPTION...
capture() {
  local name=$1 slot=$2 endpos=$3 description=$4
  shift 4
  local opts=()
  for o in "$@"; do opts+=(--option "$o"); done
  "$capture_bin" --dsn "$dsn" --slot "$slot" --endpos "$endpos" --timeout 60 \
    --out "$out_dir/$name" \
    --comment "walfeed golden vectors: $description" \
    --comment "regenerate with capture.sh (README.md); golden_test.cc pins the contents" \
    "${opts[@]}"
}

psql_admin -d postgres -c 'CREATE DATABASE golden'

# --- Schema. Everything exists before the slots (a publication must predate the
# changes it publishes).
psql_db -o /dev/null <<'SQL'
CREATE TYPE mood AS ENUM ('sad', 'ok', 'happy');
CREATE DOMAIN posint AS integer CHECK (VALUE > 0);

-- DEFAULT replica identity (the primary key).
CREATE TABLE accounts (
  id integer PRIMARY KEY,
  name text NOT NULL,
  email varchar(40),
  balance numeric(12, 2),
  active boolean,
  opened timestamptz,
  note text
);

-- REPLICA IDENTITY FULL, no primary key.
CREATE TABLE full_audit (id integer, item text, qty integer, note text);
ALTER TABLE full_audit REPLICA IDENTITY FULL;

-- body is stored out of line uncompressed, so an UPDATE of title sends it as 'u'.
CREATE TABLE docs (id integer PRIMARY KEY, title text, body text);
ALTER TABLE docs ALTER COLUMN body SET STORAGE EXTERNAL;

-- User types (Type messages), a dropped and a generated column (both omitted).
CREATE TABLE typed (
  id integer PRIMARY KEY,
  dropped_col text,
  m mood,
  p posint,
  moods mood[],
  ints integer[],
  doc jsonb,
  span interval,
  doubled integer GENERATED ALWAYS AS (id * 2) STORED
);
ALTER TABLE typed DROP COLUMN dropped_col;

-- Two tables truncated together.
CREATE TABLE events (id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY, kind text);
CREATE TABLE event_tags (
  event_id bigint REFERENCES events,
  tag text,
  PRIMARY KEY (event_id, tag)
);

CREATE TABLE unpublished (id integer PRIMARY KEY, v text);
CREATE TABLE orders (id integer PRIMARY KEY, item text);
CREATE TABLE bulk (id integer PRIMARY KEY, v text);

CREATE PUBLICATION golden_pub
  FOR TABLE accounts, full_audit, docs, typed, events, event_tags;
CREATE PUBLICATION golden_2pc_pub FOR TABLE orders;
CREATE PUBLICATION golden_stream_pub FOR TABLE bulk;

SELECT pg_replication_origin_create('golden_origin');
SELECT pg_create_logical_replication_slot('golden_text', 'pgoutput');
SELECT pg_create_logical_replication_slot('golden_binary', 'pgoutput');
SQL

# --- Workload A: every message type of a plain (non-streamed) stream. One
# transaction per numbered step; golden_test.cc expects exactly this order.
psql_db -o /dev/null <<'SQL'
-- A1 multi-row insert: NULLs vs empty strings, multibyte text, typmods.
BEGIN;
INSERT INTO accounts VALUES
  (1, 'alice', 'alice@example.com', 1234.5, true, '2024-02-29 12:34:56.789+02', 'first'),
  (2, '', NULL, 0, false, '1999-12-31 23:59:59+00', ''),
  (3, 'Zoë Ångström – 日本語 🚀', 'zoe@example.org', -0.01, NULL, NULL, NULL);
COMMIT;
-- A2 update of non-key columns: no old tuple.
UPDATE accounts SET balance = 99.99, note = 'updated' WHERE id = 1;
-- A3 update of the primary key: 'K' old key.
UPDATE accounts SET id = 20 WHERE id = 2;
-- A4 delete: 'K' old key.
DELETE FROM accounts WHERE id = 3;
-- A5 REPLICA IDENTITY FULL: insert, update ('O'), delete ('O').
INSERT INTO full_audit VALUES (1, 'widget', 5, NULL), (2, 'gadget', 7, 'x');
UPDATE full_audit SET qty = qty + 1 WHERE id = 1;
DELETE FROM full_audit WHERE id = 2;
-- A6 out-of-line TOAST: 10240 chars inserted, then unchanged ('u') on update.
INSERT INTO docs
  SELECT 1, 'draft', string_agg(md5(i::text), '' ORDER BY i) FROM generate_series(1, 320) i;
UPDATE docs SET title = 'final' WHERE id = 1;
-- A7 user types: Type messages for mood, posint (as int4) and _mood.
INSERT INTO typed (id, m, p, moods, ints, doc, span) VALUES
  (1, 'happy', 5, '{sad,happy}', '{1,2,3}', '{"b": [1, 2], "a": null}', '1 day 02:03:04'),
  (2, NULL, NULL, '{}', '{NULL,4}', '"text"', '-3 months');
-- A8 a table outside the publication: nothing is sent.
INSERT INTO unpublished VALUES (1, 'invisible');
-- A9 transactional message next to an insert.
BEGIN;
INSERT INTO events (kind) VALUES ('created');
SELECT pg_logical_emit_message(true, 'walfeed.golden', 'transactional payload');
INSERT INTO event_tags VALUES (1, 'a'), (1, 'b');
COMMIT;
-- A10 non-transactional messages (text, and bytes with a NUL).
SELECT pg_logical_emit_message(false, 'walfeed.golden', 'non-transactional payload');
SELECT pg_logical_emit_message(false, 'walfeed.bytes', '\x00ff0a'::bytea);
-- A11 rolled back: only the non-transactional message is sent.
BEGIN;
SELECT pg_logical_emit_message(true, 'walfeed.golden', 'never sent');
INSERT INTO accounts (id, name) VALUES (99, 'never sent');
SELECT pg_logical_emit_message(false, 'walfeed.golden', 'sent despite rollback');
ROLLBACK;
-- A12 truncate of two tables, CASCADE + RESTART IDENTITY (options 3).
TRUNCATE events, event_tags RESTART IDENTITY CASCADE;
-- A13 after a truncate the Relation is sent again; identity restarted at 1.
INSERT INTO events (kind) VALUES ('after truncate');
SQL

# A14 a transaction carrying a replication origin (Begin, Origin, ...); the origin's
# timestamp becomes the commit time.
psql_db -o /dev/null <<'SQL'
SELECT pg_replication_origin_session_setup('golden_origin');
BEGIN;
SELECT pg_replication_origin_xact_setup('0/ABCDEF12', '2021-02-03 04:05:06+00');
INSERT INTO accounts (id, name) VALUES (5, 'from origin');
COMMIT;
SELECT pg_replication_origin_session_reset();
SQL

psql_db -o /dev/null <<'SQL'
-- A15 DDL mid-stream: the next insert brings a new Relation with 8 columns.
ALTER TABLE accounts ADD COLUMN tier smallint DEFAULT 1;
INSERT INTO accounts (id, name, tier) VALUES (4, 'dave', 3);
SQL
endpos_a=$(wal_lsn)

capture pg15_text.hex golden_text "$endpos_a" "workload A, text mode, protocol 1" \
  proto_version=1 publication_names=golden_pub messages=true
capture pg15_binary.hex golden_binary "$endpos_a" "workload A, binary mode, protocol 2" \
  proto_version=2 publication_names=golden_pub messages=true binary=true

# --- Workload B: two-phase commit on a TWO_PHASE slot.
psql_db -o /dev/null -c \
  "SELECT pg_create_logical_replication_slot('golden_two_phase', 'pgoutput', false, true)"
psql_db -o /dev/null <<'SQL'
-- B1 prepared, then committed.
BEGIN;
INSERT INTO orders VALUES (1, 'book');
PREPARE TRANSACTION 'golden_gid_1';
COMMIT PREPARED 'golden_gid_1';
-- B2 prepared, then rolled back.
BEGIN;
INSERT INTO orders VALUES (2, 'pen');
UPDATE orders SET item = 'pencil' WHERE id = 2;
PREPARE TRANSACTION 'golden_gid_2';
ROLLBACK PREPARED 'golden_gid_2';
-- B3 an ordinary commit.
INSERT INTO orders VALUES (3, 'plain');
SQL
endpos_b=$(wal_lsn)
capture pg15_two_phase.hex golden_two_phase "$endpos_b" \
  "workload B, two-phase slot, protocol 3" \
  proto_version=3 publication_names=golden_2pc_pub two_phase=on

# --- Workload C: transactions larger than logical_decoding_work_mem (64kB),
# streamed while in progress.
psql_db -o /dev/null -c \
  "SELECT pg_create_logical_replication_slot('golden_streaming', 'pgoutput')"
psql_db -o /dev/null <<'SQL'
-- C1 committed: 1000 rows, a transactional message, a rolled-back savepoint of 500
-- rows, one more row.
BEGIN;
INSERT INTO bulk SELECT i, 'c' FROM generate_series(1, 1000) i;
SELECT pg_logical_emit_message(true, 'walfeed.stream', 'inside a streamed transaction');
SAVEPOINT sp;
INSERT INTO bulk SELECT i, 's' FROM generate_series(1001, 1500) i;
ROLLBACK TO SAVEPOINT sp;
INSERT INTO bulk VALUES (2000, 'last');
COMMIT;
-- C2 rolled back: 1000 rows.
BEGIN;
INSERT INTO bulk SELECT i, 'a' FROM generate_series(3001, 4000) i;
ROLLBACK;
-- C3 small: an ordinary Begin/Commit.
INSERT INTO bulk VALUES (5000, 'small');
SQL
endpos_c=$(wal_lsn)
capture pg15_streaming.hex golden_streaming "$endpos_c" \
  "workload C, streaming on, protocol 2, logical_decoding_work_mem 64kB" \
  proto_version=2 publication_names=golden_stream_pub messages=true streaming=on

echo "capture.sh: wrote"
for f in pg15_text.hex pg15_binary.hex pg15_two_phase.hex pg15_streaming.hex; do
  printf '  %s  %s frames (%s XLogData, %s keepalive)\n' "$out_dir/$f" \
    "$(grep -vc '^#' "$out_dir/$f")" "$(grep -c '^77' "$out_dir/$f")" \
    "$(grep -c '^6b' "$out_dir/$f")"
done
