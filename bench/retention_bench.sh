#!/usr/bin/env bash
# retention_bench.sh: a fast consumer's throughput while a stopped consumer holds
# a large backlog on disk, against the same drain with no other consumer, in one
# run on one machine (the figures in docs/consumers.md come from it).
#
#   1. a throwaway PostgreSQL 15 (initdb on a free loopback port) with a table
#      t(id bigint, payload text) and a publication;
#   2. walfeed-server with state_dir, buffer_bytes 64 MiB, retention_bytes
#      $RETENTION_BYTES (default 4 GiB); consumer "fast" acks a warm-up row;
#   3. alone:  the server stops, $ROWS rows (payload $PAYLOAD bytes, 1,000 rows a
#      transaction) are inserted, the server starts, walfeed_drain "fast"
#      catches up to the end; events/s and the server's peak RSS are recorded;
#   4. held:   consumer "stuck" acks one marker row and stops; the same again:
#      it now holds every new event, which the server spills (peak RSS and CPU
#      are of this drain and the next); then stuck comes back and catches up,
#      mostly from disk (catchup_events_per_s);
#   5. prints one JSON line per phase and the ratio held/alone.
#
# Usage: bench/retention_bench.sh   (ROWS=1000000 PAYLOAD=1000 by default: about
# 1.1 GiB of events in the held phase; WALFEED_BUILD, default <repo>/build;
# PERF_DIR=<dir> records a perf profile of the server per phase)
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
BUILD="${WALFEED_BUILD:-$HERE/../build}"
SERVER_BIN="$BUILD/server/walfeed-server"
DRAIN_BIN="$BUILD/bench/walfeed_drain"
CLI_BIN="$BUILD/client/walfeed"
PGBIN="${PGBIN:-/usr/lib/postgresql/15/bin}"
ROWS="${ROWS:-1000000}"
PAYLOAD="${PAYLOAD:-1000}"
RETENTION_BYTES="${RETENTION_BYTES:-4294967296}"
for bin in "$SERVER_BIN" "$DRAIN_BIN" "$CLI_BIN" "$PGBIN/initdb"; do
  [ -x "$bin" ] || { echo "retention_bench.sh: $bin not found (build walfeed-server, walfeed_drain, walfeed)" >&2; exit 1; }
done

tmp="$(mktemp -d /tmp/walfeed-retention.XXXXXX)"
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }
pg_port="$(free_port)"
port="$(free_port)"
conninfo="host=127.0.0.1 port=$pg_port user=postgres dbname=postgres"
server_pid=""
sampler_pid=""

cleanup() {
  [ -n "$sampler_pid" ] && kill "$sampler_pid" 2>/dev/null || true
  [ -n "$server_pid" ] && kill -TERM "$server_pid" 2>/dev/null && wait "$server_pid" 2>/dev/null || true
  "${as_pg[@]}" "$PGBIN/pg_ctl" -D "$tmp/pg" -m immediate stop >/dev/null 2>&1 || true
  rm -rf "$tmp"
}
trap cleanup EXIT

# PostgreSQL refuses to run as root: as root, run it as the postgres user.
as_pg=()
if [ "$(id -u)" = 0 ]; then
  as_pg=(runuser -u postgres --)
  chown postgres "$tmp"
fi
"${as_pg[@]}" "$PGBIN/initdb" -D "$tmp/pg" -U postgres --auth=trust >/dev/null
cat >>"$tmp/pg/postgresql.conf" <<CONF
port = $pg_port
listen_addresses = '127.0.0.1'
unix_socket_directories = '$tmp'
wal_level = logical
max_wal_size = '4GB'
fsync = off
synchronous_commit = off
CONF
"${as_pg[@]}" "$PGBIN/pg_ctl" -D "$tmp/pg" -l "$tmp/pg.log" -w start >/dev/null
psql -X -q "$conninfo" -c "CREATE TABLE t (id bigint PRIMARY KEY, payload text NOT NULL)"

cat >"$tmp/walfeed.yaml" <<YAML
listen: "127.0.0.1:$port"
plaintext: true
state_dir: ${STATE_DIR:-$tmp/state}
defaults:
  buffer_bytes: 67108864
  retention_bytes: $RETENTION_BYTES
streams:
  - name: bench
    conninfo: "$conninfo"
    slot: walfeed_bench
    publications: [walfeed_bench]
    tables: [public.t]
    create_missing: true
YAML

start_server() {
  "$SERVER_BIN" --config "$tmp/walfeed.yaml" >>"$tmp/server.log" 2>&1 &
  server_pid=$!
}
stop_server() {
  kill -TERM "$server_pid"
  wait "$server_pid" || true
  server_pid=""
}
# The server's peak resident memory while a phase runs, in KiB, to $1, and its
# CPU seconds so far (user + system) to $1.cpu.
sample_rss() {
  local out="$1" peak=0 rss ticks
  local hz
  hz="$(getconf CLK_TCK)"
  while kill -0 "$server_pid" 2>/dev/null; do
    rss="$(awk '/^VmRSS/ {print $2}' "/proc/$server_pid/status" 2>/dev/null || echo 0)"
    [ "${rss:-0}" -gt "$peak" ] && peak="$rss" && echo "$peak" >"$out"
    ticks="$(awk '{print $14, $15}' "/proc/$server_pid/stat" 2>/dev/null || echo)"
    [ -n "$ticks" ] && echo "$ticks $hz" >"$out.cpu"
    sleep 0.2
  done
}
insert_rows() {  # first, count
  psql -X -q "$conninfo" -c "DO \$\$ BEGIN FOR b IN 0..$(( ($2 - 1) / 1000 )) LOOP
    INSERT INTO t SELECT g, repeat('x', $PAYLOAD) FROM generate_series($1 + b * 1000,
      least($1 + $2 - 1, $1 + b * 1000 + 999)) g; COMMIT; END LOOP; END \$\$"
}
end_lsn() { psql -X -qAt "$conninfo" -c "SELECT pg_current_wal_lsn()"; }
tail_one() {  # consumer: ack the next event and stop
  "$CLI_BIN" tail --server "127.0.0.1:$port" --stream bench --consumer "$1" \
    --ack --count 1 --timeout 60 >/dev/null
}
drain_phase() {  # name, end lsn
  start_server
  echo 0 >"$tmp/rss.$1"
  sample_rss "$tmp/rss.$1" &
  sampler_pid=$!
  local perf_pid=""
  if [ -n "${PERF_DIR:-}" ]; then  # A CPU profile of the server per phase.
    perf record -q -e cpu-clock -F 499 -g -p "$server_pid" -o "$PERF_DIR/$1.data" 2>/dev/null &
    perf_pid=$!
  fi
  "$DRAIN_BIN" --server "127.0.0.1:$port" --stream bench --consumer fast --end-lsn "$2" \
    --ack-interval-ms 200 --timeout-s 900 >"$tmp/drain.$1.json"
  [ -n "$perf_pid" ] && kill -INT "$perf_pid" && wait "$perf_pid" || true
  local spilled
  spilled="$("$CLI_BIN" status --server "127.0.0.1:$port" --stream bench --format json |
    python3 -c 'import json,sys; s=json.load(sys.stdin)["streams"][0]; print(s.get("spilledBytes", s.get("spilled_bytes", 0)))')"
  # Then the stopped consumer comes back and catches up, mostly from disk.
  echo '{}' >"$tmp/catchup.$1.json"
  if [ -n "${3:-}" ]; then
    "$DRAIN_BIN" --server "127.0.0.1:$port" --stream bench --consumer "$3" --end-lsn "$2" \
      --ack-interval-ms 200 --timeout-s 900 >"$tmp/catchup.$1.json"
  fi
  stop_server
  wait "$sampler_pid" 2>/dev/null || true
  sampler_pid=""
  python3 - "$1" "$tmp/drain.$1.json" "$tmp/rss.$1" "$spilled" "$tmp/catchup.$1.json" <<'PY'
import json, sys
name, drain, rss, spilled, catchup = sys.argv[1:]
c = json.loads([l for l in open(catchup) if l.startswith('{')][-1])
try:
    user, system, hz = (float(x) for x in open(rss + '.cpu').read().split())
    cpu, cpu_sys = round((user + system) / hz, 2), round(system / hz, 2)
except Exception:
    cpu, cpu_sys = None, None
d = json.loads([l for l in open(drain) if l.startswith('{')][-1])
span = d['last_event_after_s'] - d['subscribe_s']
print(json.dumps({'phase': name, 'events': d['events'], 'seconds': round(span, 3),
                  'events_per_s': round(d['events'] / span), 'server_peak_rss_kb': int(open(rss).read()),
                  'spilled_bytes_at_end': int(spilled), 'server_cpu_s': cpu,
                  'server_sys_cpu_s': cpu_sys,
                  'catchup_events_per_s': round(c['events'] / (c['last_event_after_s'] - c['subscribe_s']))
                  if c.get('events') else None}))
PY
}

# Warm-up: the stream exists and fast has a checkpoint.
start_server
( sleep 2; psql -X -q "$conninfo" -c "INSERT INTO t VALUES (0, 'warm-up')" ) &
writer=$!
tail_one fast || { echo "retention_bench.sh: the warm-up failed; see $tmp/server.log" >&2; exit 1; }
wait "$writer"
stop_server

insert_rows 1 "$ROWS"
alone="$(drain_phase alone "$(end_lsn)")"
echo "$alone"

# stuck acks a marker row (fast drains it too), then never comes back.
start_server
( sleep 2; psql -X -q "$conninfo" -c "INSERT INTO t VALUES (-1, 'marker')" ) &
writer=$!
tail_one stuck || { echo "retention_bench.sh: the marker failed" >&2; exit 1; }
wait "$writer"
"$DRAIN_BIN" --server "127.0.0.1:$port" --stream bench --consumer fast --end-lsn "$(end_lsn)" \
  --timeout-s 60 >/dev/null
stop_server

insert_rows $(( ROWS + 1 )) "$ROWS"
held="$(drain_phase held "$(end_lsn)" stuck)"
echo "$held"
python3 -c 'import json,sys; a=json.loads(sys.argv[1]); h=json.loads(sys.argv[2]); print(json.dumps({"held_over_alone_events_per_s": round(h["events_per_s"]/a["events_per_s"], 3)}))' "$alone" "$held"
