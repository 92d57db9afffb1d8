#!/usr/bin/env bash
# walfeed quickstart: from a fresh Debian 12 machine to change events on screen.
#
#   bash deploy/quickstart.sh          # install, build, start PostgreSQL + walfeed-server, show events
#   bash deploy/quickstart.sh stop     # stop walfeed-server and the demo PostgreSQL
#
# Everything lives in .walfeed-demo/ inside the checkout: a PostgreSQL 15 cluster
# on port 54329 (never the system's 5432), the server's config and log. Running it
# again reuses the cluster and restarts the server; the demo consumer resumes after
# its checkpoint, so each run shows the rows it inserted.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
DEMO="$ROOT/.walfeed-demo"
PGBIN=/usr/lib/postgresql/15/bin
PGPORT="${WALFEED_DEMO_PGPORT:-54329}"
LISTEN="${WALFEED_DEMO_LISTEN:-127.0.0.1:50051}"
METRICS="${WALFEED_DEMO_METRICS:-127.0.0.1:9464}"
BUILD="$ROOT/build"

# initdb and postgres refuse to run as root: use Debian's postgres user then.
as_pg() {
  if [ "$(id -u)" = 0 ]; then runuser -u postgres -- "$@"; else "$@"; fi
}
psql_demo() {
  PGOPTIONS='-c client_min_messages=warning' "$PGBIN/psql" -X -q -v ON_ERROR_STOP=1 -h "$DEMO/pg" -p "$PGPORT" -U postgres -d postgres "$@"
}
stop_server() {
  if [ -f "$DEMO/walfeed-server.pid" ] && kill -0 "$(cat "$DEMO/walfeed-server.pid")" 2>/dev/null; then
    kill -TERM "$(cat "$DEMO/walfeed-server.pid")"
    for _ in $(seq 1 150); do
      kill -0 "$(cat "$DEMO/walfeed-server.pid")" 2>/dev/null || break
      sleep 0.1
    done
  fi
  rm -f "$DEMO/walfeed-server.pid"
}

if [ "${1:-}" = "stop" ]; then
  stop_server
  if [ -f "$DEMO/pg/data/postmaster.pid" ]; then as_pg "$PGBIN/pg_ctl" -D "$DEMO/pg/data" -m fast stop; fi
  echo "stopped walfeed-server and the demo PostgreSQL (data kept in $DEMO)"
  exit 0
fi

echo "==> installing dependencies (Debian packages: the build, and PostgreSQL 15 for the demo)"
bash "$ROOT/deploy/install-deps.sh" --build --postgres

echo "==> building walfeed-server and the walfeed CLI"
# A build directory configured by the test command keeps its tests; a new one
# builds without them (their dependencies are not installed here).
if [ -f "$BUILD/CMakeCache.txt" ]; then
  cmake -S "$ROOT" -B "$BUILD" >/dev/null
else
  cmake -S "$ROOT" -B "$BUILD" -DWALFEED_BUILD_TESTS=OFF >/dev/null
fi
cmake --build "$BUILD" --target walfeed-server walfeed -j"$(nproc)"

echo "==> starting PostgreSQL 15 on port $PGPORT (data in $DEMO/pg)"
mkdir -p "$DEMO/pg"
if [ "$(id -u)" = 0 ]; then chown postgres: "$DEMO/pg"; fi
if [ ! -f "$DEMO/pg/data/PG_VERSION" ]; then
  as_pg "$PGBIN/initdb" -D "$DEMO/pg/data" -U postgres --auth=trust >/dev/null
  cat >>"$DEMO/pg/data/postgresql.conf" <<CONF
port = $PGPORT
listen_addresses = 'localhost'
unix_socket_directories = '$DEMO/pg'
wal_level = logical
max_slot_wal_keep_size = 1GB
CONF
fi
if ! as_pg "$PGBIN/pg_ctl" -D "$DEMO/pg/data" status >/dev/null 2>&1; then
  as_pg "$PGBIN/pg_ctl" -D "$DEMO/pg/data" -l "$DEMO/pg/server.log" -w start >/dev/null
fi
psql_demo <<'SQL'
CREATE TABLE IF NOT EXISTS public.demo_orders (
  id bigserial PRIMARY KEY,
  customer text NOT NULL,
  amount numeric(10, 2) NOT NULL,
  created_at timestamptz NOT NULL DEFAULT now()
);
SQL

echo "==> starting walfeed-server on $LISTEN"
cat >"$DEMO/walfeed.yaml" <<YAML
# Written by deploy/quickstart.sh. See deploy/walfeed.example.yaml for every key.
listen: "$LISTEN"
plaintext: true          # loopback demo only; configure tls for anything else
state_dir: $DEMO/state   # a slow consumer's backlog spills here (docs/consumers.md)
metrics_listen: "$METRICS"  # Prometheus metrics (docs/operations.md)
streams:
  - name: demo
    conninfo: "host=$DEMO/pg port=$PGPORT dbname=postgres user=postgres"
    slot: walfeed_demo
    publications: [walfeed_demo]
    tables: [public.demo_orders]
    create_missing: true
YAML
stop_server
nohup "$BUILD/server/walfeed-server" --config "$DEMO/walfeed.yaml" >>"$DEMO/walfeed-server.log" 2>&1 &
echo $! >"$DEMO/walfeed-server.pid"

# The stream creates its publication and slot on first start; wait until it is
# subscribable (`walfeed tail` retries too), then write some rows.
"$BUILD/client/walfeed" tail --server "$LISTEN" --stream demo --consumer demo \
  --ack --timeout 60 --count 3 --format text >"$DEMO/demo-events.txt" 2>"$DEMO/demo-client.log" &
CLIENT=$!
for _ in $(seq 1 100); do
  grep -q "subscribed" "$DEMO/demo-client.log" 2>/dev/null && break
  sleep 0.2
done
psql_demo -c "INSERT INTO public.demo_orders (customer, amount) VALUES ('ada', 12.50), ('grace', 7.00)" \
          -c "UPDATE public.demo_orders SET amount = amount + 1 WHERE id = (SELECT max(id) FROM public.demo_orders)"
wait "$CLIENT" || { echo "walfeed tail failed:"; cat "$DEMO/demo-client.log"; exit 1; }

echo
echo "==> events received by the demo consumer (id op table columns):"
cat "$DEMO/demo-events.txt"
echo
echo "walfeed-server is running (pid $(cat "$DEMO/walfeed-server.pid"), log $DEMO/walfeed-server.log)."
echo "Tail more:  $BUILD/client/walfeed tail --stream demo   (ephemeral: from now on, holds nothing; JSON lines; --format text)"
echo "Durable:    $BUILD/client/walfeed tail --stream demo --consumer me --ack   (resumes after its checkpoint)"
echo "Status:     $BUILD/client/walfeed status"
echo "Metrics:    curl -s http://$METRICS/metrics | grep ^walfeed_consumer"
echo "Write more: $PGBIN/psql -h $DEMO/pg -p $PGPORT -U postgres -c \"INSERT INTO demo_orders (customer, amount) VALUES ('you', 1)\""
echo "Stop:       bash deploy/quickstart.sh stop"
