#!/usr/bin/env bash
# drain_walfeed.sh: walfeed as one "custom peer" of the peer harness (see
# bench/README.md). Reads SLOT, END_LSN, PUBLICATION (and WORKLOAD,
# EXPECTED_EVENTS, START_LSN) from the environment; the slot already exists.
#
#   1. writes a temporary walfeed config: one stream on $SLOT / $PUBLICATION,
#      create_missing false, plaintext on a free loopback port, a checkpoint
#      schema of its own (dropped afterwards);
#   2. starts walfeed-server under GNU time (its log goes to a temporary file);
#      the drain client retries until the server listens and the stream is live;
#   3. runs build/bench/walfeed_drain up to $END_LSN (also under GNU time);
#   4. stops the server with SIGTERM, waits for it, and prints the client's JSON
#      line extended with the server's and the client's CPU seconds and max RSS.
#
# Settings (environment): WALFEED_BUILD (default <repo>/build), BENCH_PGHOST/
# BENCH_PGPORT/BENCH_PGUSER/BENCH_PGDATABASE (default 127.0.0.1 55433 postgres
# bench), DRAIN_BATCH (1024), DRAIN_WINDOW (200000), DRAIN_ACK_EVERY (50000),
# WALFEED_BUFFER_BYTES (the server default, 67108864), WALFEED_READ_COALESCE
# (unset: the server default), WALFEED_BENCH_LOGS (a directory to keep each
# run's server log in, as <slot>.log).
set -euo pipefail

: "${SLOT:?SLOT not set}" "${END_LSN:?END_LSN not set}" "${PUBLICATION:?PUBLICATION not set}"
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
BUILD="${WALFEED_BUILD:-$HERE/../build}"
SERVER_BIN="$BUILD/server/walfeed-server"
DRAIN_BIN="$BUILD/bench/walfeed_drain"
PG_HOST="${BENCH_PGHOST:-127.0.0.1}"
PG_PORT="${BENCH_PGPORT:-55433}"
PG_USER="${BENCH_PGUSER:-postgres}"
PG_DB="${BENCH_PGDATABASE:-bench}"
TIME_BIN="${TIME_BIN:-/usr/bin/time}"
for bin in "$SERVER_BIN" "$DRAIN_BIN" "$TIME_BIN"; do
  [ -x "$bin" ] || { echo "drain_walfeed.sh: $bin not found (build walfeed-server and walfeed_drain)" >&2; exit 1; }
done

tmp="$(mktemp -d /tmp/walfeed-drain.XXXXXX)"
# A checkpoint schema per run: a fresh stream record, so the server binds the
# harness's slot at its confirmed_flush_lsn.
schema="wfbench_$(printf '%s' "$SLOT" | tr -c 'a-z0-9_' '_' | cut -c1-50)"
conninfo="host=$PG_HOST port=$PG_PORT user=$PG_USER dbname=$PG_DB"
server_pid=""

cleanup() {
  if [ -n "$server_pid" ] && kill -0 "$server_pid" 2>/dev/null; then
    kill -TERM "$server_pid" 2>/dev/null || true
    wait "$time_pid" 2>/dev/null || true
  fi
  psql -X -q "$conninfo" -c "drop schema if exists $schema cascade" >/dev/null 2>&1 || true
  if [ -n "${WALFEED_BENCH_LOGS:-}" ]; then
    mkdir -p "$WALFEED_BENCH_LOGS" && cp "$tmp/server.log" "$WALFEED_BENCH_LOGS/$SLOT.log" 2>/dev/null || true
  fi
  rm -rf "$tmp"
}
trap cleanup EXIT

port="$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')"
cat >"$tmp/walfeed.yaml" <<YAML
listen: "127.0.0.1:$port"
plaintext: true
checkpoint:
  schema: $schema
shutdown_timeout: 5s
defaults:
  buffer_bytes: ${WALFEED_BUFFER_BYTES:-67108864}
${WALFEED_READ_COALESCE:+  read_coalesce: $WALFEED_READ_COALESCE}
streams:
  - name: bench
    conninfo: "$conninfo"
    slot: $SLOT
    publications: [$PUBLICATION]
    create_missing: false
YAML

# GNU time runs a shell that execs the server, so the pid in server.pid is the
# server's own: SIGTERM goes to it, and time reports its CPU and max RSS.
"$TIME_BIN" -f '%e %U %S %M' -o "$tmp/server.time" \
  bash -c 'echo $$ >"$1"; shift; exec "$@"' _ "$tmp/server.pid" \
  "$SERVER_BIN" --config "$tmp/walfeed.yaml" >"$tmp/server.log" 2>&1 &
time_pid=$!
for _ in $(seq 1 500); do [ -s "$tmp/server.pid" ] && break; sleep 0.01; done
server_pid="$(cat "$tmp/server.pid")"

drain_rc=0
"$TIME_BIN" -f '%e %U %S %M' -o "$tmp/drain.time" \
  "$DRAIN_BIN" --server "127.0.0.1:$port" --stream bench --consumer drain \
  --end-lsn "$END_LSN" --batch "${DRAIN_BATCH:-1024}" --window "${DRAIN_WINDOW:-200000}" \
  --ack-every "${DRAIN_ACK_EVERY:-50000}" --ack-interval-ms 1000 >"$tmp/drain.json" || drain_rc=$?

# SIGTERM to exit, with nothing in flight (the client has acked and gone).
stop_begin="$(date +%s.%N)"
kill -TERM "$server_pid"
server_rc=0
wait "$time_pid" || server_rc=$?
stop_end="$(date +%s.%N)"
server_pid=""
if [ "$drain_rc" != 0 ] || [ "$server_rc" != 0 ]; then
  echo "drain_walfeed.sh: drain exit $drain_rc, server exit $server_rc; server log tail:" >&2
  tail -n 20 "$tmp/server.log" >&2
fi

python3 - "$tmp/drain.json" "$tmp/server.time" "$tmp/drain.time" "$drain_rc" "$server_rc" \
  "$stop_begin" "$stop_end" <<'PY'
import json, sys
drain, server_t, drain_t, drain_rc, server_rc, stop_begin, stop_end = sys.argv[1:]
lines = [l for l in open(drain).read().splitlines() if l.startswith('{')]
res = json.loads(lines[-1]) if lines else {'error': 'drain client printed nothing'}
def timed(path, prefix):
    try:
        wall, user, sys_, rss_kb = open(path).read().split()[-4:]
    except Exception:
        return
    res[prefix + '_wall_s'] = float(wall)
    res[prefix + '_cpu_s'] = round(float(user) + float(sys_), 3)
    res[prefix + '_user_s'] = float(user)
    res[prefix + '_sys_s'] = float(sys_)
    res[prefix + '_max_rss_kb'] = int(rss_kb)
timed(server_t, 'walfeed_server')
timed(drain_t, 'drain_client')
ev = res.get('events') or 0
if ev and 'walfeed_server_cpu_s' in res:
    res['walfeed_server_cpu_us_per_event'] = round(res['walfeed_server_cpu_s'] * 1e6 / ev, 2)
res['walfeed_server_stop_s'] = round(float(stop_end) - float(stop_begin), 4)
res['drain_rc'] = int(drain_rc)
res['server_rc'] = int(server_rc)
print(json.dumps(res), flush=True)
PY
exit $(( drain_rc != 0 || server_rc != 0 ))
