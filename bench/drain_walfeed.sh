#!/usr/bin/env bash
# drain_walfeed.sh: walfeed as one "custom peer" of the peer harness (see
# bench/README.md). Reads SLOT, END_LSN, PUBLICATION (and WORKLOAD,
# EXPECTED_EVENTS, START_LSN) from the environment; the slot already exists.
#
#   1. writes a temporary walfeed config: one stream on $SLOT / $PUBLICATION,
#      create_missing false, plaintext on a free loopback port, a stream name of
#      its own (so no stored position: see below);
#   2. starts walfeed-server under GNU time (its log goes to a temporary file);
#      the drain client retries until the server listens and the stream is live,
#      and is stopped if the server exits first;
#   3. runs build/bench/walfeed_drain up to $END_LSN (also under GNU time);
#   4. stops the server with SIGTERM, waits for it, and prints the client's JSON
#      line extended with the server's and the client's CPU seconds and max RSS.
#
# Settings (environment): WALFEED_BUILD (default <repo>/build), BENCH_PGHOST/
# BENCH_PGPORT/BENCH_PGUSER/BENCH_PGDATABASE (default 127.0.0.1 55433 postgres
# bench), DRAIN_BATCH (1024), DRAIN_WINDOW (200000), DRAIN_ACK_EVERY (50000),
# DRAIN_COMPACT (set: the drain client asks for the compact event form),
# WALFEED_BUFFER_BYTES (the server default, 67108864), WALFEED_READ_COALESCE
# (unset: the server default), WALFEED_BENCH_LOGS (a directory to keep each
# run's server log in, as <slot>.log).
set -euo pipefail
: "${EPOCHREALTIME:?drain_walfeed.sh needs bash 5 or later (\$EPOCHREALTIME)}"
# Everything below that runs before the server starts or after it stops is
# inside the measured time, so it uses bash builtins ($EPOCHREALTIME, printf,
# mapfile) rather than starting a process per step (date, seq, cat, tail: each
# a fork and exec, several milliseconds apiece on a loaded 2-core machine).

: "${SLOT:?SLOT not set}" "${END_LSN:?END_LSN not set}" "${PUBLICATION:?PUBLICATION not set}"
script=${BASH_SOURCE[0]}
[[ $script == */* ]] || script=./$script
HERE="$(cd "${script%/*}" && pwd)"
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
# A stream name per run (the slot copy's name repeats across repetitions): no
# stored stream position, so the server binds the harness's slot at its
# confirmed_flush_lsn. The records stay behind in the bench database's
# `wfbench` schema, one small row per run; nothing per run costs DDL or a psql
# call inside the measured time. walfeed_bench.py forgets them before each
# catch-up run: the harness reuses its slot copies' names from run to run, and
# a stream still bound to a slot of the same name would have the server refuse
# the next one (SLOT_SHARED). Run by hand, use slot names of your own.
stream="b_${EPOCHREALTIME/[.,]/}_$$"
conninfo="host=$PG_HOST port=$PG_PORT user=$PG_USER dbname=$PG_DB"
time_pid=""

# The one child of GNU time process $2 (the server, or the drain client), read
# from /proc without starting a process (pgrep where the kernel has no
# `children` file); empty once it has exited.
timed_child() {
  local -n into=$1
  local children=""
  into=""
  if [[ -r /proc/$2/task/$2/children ]]; then
    read -r children _ </proc/$2/task/$2/children || true
  else
    children=$(pgrep -P "$2" || true)
  fi
  into=${children%% *}
}

cleanup() {
  if [ -n "$time_pid" ] && kill -0 "$time_pid" 2>/dev/null; then
    timed_child server_pid "$time_pid"
    if [ -n "$server_pid" ]; then kill -TERM "$server_pid" 2>/dev/null || true; fi
    wait "$time_pid" 2>/dev/null || true
  fi
  if [ -n "${WALFEED_BENCH_LOGS:-}" ]; then
    mkdir -p "$WALFEED_BENCH_LOGS" && cp "$tmp/server.log" "$WALFEED_BENCH_LOGS/$SLOT.log" 2>/dev/null || true
  fi
  rm -rf "$tmp"
}
trap cleanup EXIT

# A free loopback port without starting an interpreter: a random port that
# nothing accepts connections on (bash's /dev/tcp), below the kernel's
# ephemeral range. A port inside that range can be the local end of some
# outgoing connection, which no probe sees and which made the server's bind
# fail now and then ("cannot listen"); the drain client then waited for it
# until its own timeout.
ephemeral_low=32768
[[ -r /proc/sys/net/ipv4/ip_local_port_range ]] &&
  read -r ephemeral_low _ </proc/sys/net/ipv4/ip_local_port_range
(( ephemeral_low > 11024 )) || ephemeral_low=32768  # An unusual range: assume the default.
port_free() { ! (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }
for ((attempt = 0; attempt < 50; attempt++)); do
  port=$(( 10000 + RANDOM % (ephemeral_low - 10000) ))
  port_free "$port" && break
done
{
  printf '%s\n' "listen: \"127.0.0.1:$port\"" "plaintext: true" "checkpoint:" "  schema: wfbench" \
    "shutdown_timeout: 5s" "defaults:" "  buffer_bytes: ${WALFEED_BUFFER_BYTES:-67108864}"
  [ -n "${WALFEED_READ_COALESCE:-}" ] && printf '  read_coalesce: %s\n' "$WALFEED_READ_COALESCE"
  printf '%s\n' "streams:" "  - name: $stream" "    conninfo: \"$conninfo\"" "    slot: $SLOT" \
    "    publications: [$PUBLICATION]" "    create_missing: false"
} >"$tmp/walfeed.yaml"

# GNU time runs the server itself and reports its CPU and max RSS. The drain
# client starts at once: it waits for the server's port, so nothing here
# waits for the server (a shell between time and the server to note its pid,
# and polling for that note, came before the server's own start).
"$TIME_BIN" -f '%e %U %S %M' -o "$tmp/server.time" \
  "$SERVER_BIN" --config "$tmp/walfeed.yaml" >"$tmp/server.log" 2>&1 &
time_pid=$!

drain_rc=0
server_rc=0
event_form=full
[ -n "${DRAIN_COMPACT:-}" ] && event_form=compact
"$TIME_BIN" -f '%e %U %S %M' -o "$tmp/drain.time" \
  "$DRAIN_BIN" --server "127.0.0.1:$port" --stream "$stream" --consumer drain \
  --end-lsn "$END_LSN" --batch "${DRAIN_BATCH:-1024}" --window "${DRAIN_WINDOW:-200000}" \
  --ack-every "${DRAIN_ACK_EVERY:-50000}" --ack-interval-ms 1000 \
  --event-form "$event_form" >"$tmp/drain.json" &
drain_pid=$!

# Whichever ends first. A server that exits before the drain client does (it
# refused its configuration, or failed) ends the run at once: the client
# would otherwise retry its connection until its own timeout.
finished=""
first_rc=0
wait -n -p finished "$time_pid" "$drain_pid" || first_rc=$?
if [[ $finished == "$time_pid" ]]; then
  server_rc=$(( first_rc != 0 ? first_rc : 1 ))  # It must not end before it is stopped.
  time_pid=""
  timed_child drain_child "$drain_pid"
  if [ -n "$drain_child" ]; then kill -TERM "$drain_child" 2>/dev/null || true; fi
  wait "$drain_pid" || drain_rc=$?
else
  drain_rc=$first_rc
fi

stop_begin=$EPOCHREALTIME
if [ -n "$time_pid" ]; then
  # SIGTERM to exit, with nothing in flight (the client has acked and gone).
  timed_child server_pid "$time_pid"
  # Already gone (it failed): its exit status comes through GNU time below.
  if [ -n "$server_pid" ]; then kill -TERM "$server_pid" 2>/dev/null || true; fi
  wait "$time_pid" || server_rc=$?
fi
stop_end=$EPOCHREALTIME
time_pid=""
if [ "$drain_rc" != 0 ] || [ "$server_rc" != 0 ]; then
  echo "drain_walfeed.sh: drain exit $drain_rc, server exit $server_rc; server log tail:" >&2
  tail -n 20 "$tmp/server.log" >&2
fi

# The client's JSON line, extended with bash alone: an awk here was one more
# process start inside the measured time, 7-17 ms on a loaded 2-core machine.
# GNU time's line is the file's last (a signal note may come before it).
last_line() {
  local -n into=$2
  local lines=()
  into=""
  [[ -r $1 ]] || return 0
  mapfile -t lines <"$1"
  if (( ${#lines[@]} > 0 )); then into=${lines[-1]}; fi
}
# GNU time's "%e %U %S %M" as JSON fields named <prefix>_..., and the CPU
# seconds in hundredths (-1 when the line is not that).
timed() {
  local -n fields=$3 cpu=$4
  local wall user sys rss
  fields=""
  cpu=-1
  read -r wall user sys rss <<<"$1"
  [[ $wall =~ ^[0-9]+\.[0-9]{2}$ && $user =~ ^[0-9]+\.[0-9]{2}$ &&
     $sys =~ ^[0-9]+\.[0-9]{2}$ && $rss =~ ^[0-9]+$ ]] || return 0
  cpu=$(( 10#${user/./} + 10#${sys/./} ))
  printf -v fields ', "%s_wall_s": %s, "%s_cpu_s": %d.%02d0, "%s_user_s": %s, "%s_sys_s": %s, "%s_max_rss_kb": %d' \
    "$2" "$wall" "$2" $(( cpu / 100 )) $(( cpu % 100 )) "$2" "$user" "$2" "$sys" "$2" "$rss"
}
last_line "$tmp/server.time" server_t
last_line "$tmp/drain.time" drain_t
stop_us=$(( 10#${stop_end/[.,]/} - 10#${stop_begin/[.,]/} ))
(( stop_us >= 0 )) || stop_us=0  # The wall clock stepped back meanwhile.
printf -v stop_s '%d.%06d' $(( stop_us / 1000000 )) $(( stop_us % 1000000 ))
line='{"error": "drain client printed nothing"}'
if [[ -r $tmp/drain.json ]]; then
  mapfile -t drain_lines <"$tmp/drain.json"
  for ((i = ${#drain_lines[@]} - 1; i >= 0; i--)); do
    if [[ ${drain_lines[i]} == "{"* ]]; then line=${drain_lines[i]}; break; fi
  done
fi
events=0
[[ $line =~ \"events\":\ ([0-9]+) ]] && events=${BASH_REMATCH[1]}
timed "$server_t" walfeed_server server_fields server_cpu
timed "$drain_t" drain_client drain_fields drain_cpu
extra="$server_fields$drain_fields"
if (( events > 0 && server_cpu >= 0 )); then
  # Hundredths of a second to hundredths of a microsecond per event, rounded.
  per_event=$(( (server_cpu * 2000000 + events) / (2 * events) ))
  printf -v per_event_field ', "walfeed_server_cpu_us_per_event": %d.%02d' \
    $(( per_event / 100 )) $(( per_event % 100 ))
  extra+=$per_event_field
fi
printf -v stop_fields ', "walfeed_server_stop_s": %s, "drain_rc": %d, "server_rc": %d' \
  "$stop_s" "$drain_rc" "$server_rc"
extra+=$stop_fields
[[ $line =~ ^(.*)\}[[:space:]]*$ ]] && line="${BASH_REMATCH[1]}$extra}"
printf '%s\n' "$line"
exit $(( drain_rc != 0 || server_rc != 0 ))
