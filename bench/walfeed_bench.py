#!/usr/bin/env python3
"""walfeed's own benchmark modes: live latency, fan-out, memory; and `all`,
which also runs the catch-up comparison with the peer harness and prints one
summary table ending in `ratio_min=<x>`.

Each mode starts a throwaway PostgreSQL 15 (initdb on a free loopback port,
fsync off, synchronous_commit on) and walfeed-server processes of the build,
and prints one JSON line per measurement. Nothing here is a test: the figures
go to docs/performance.md.

  bench/walfeed_bench.py live    [--quick]   commit -> client latency at fixed rates
  bench/walfeed_bench.py fanout  [--quick]   1..256 subscribers on one stream
  bench/walfeed_bench.py memory  [--quick]   peak RSS through one huge transaction
  bench/walfeed_bench.py backfill [--quick]  backfill rows/s vs COPY; the stream during it
  bench/walfeed_bench.py catchup --harness DIR [--quick] [--transport unix] [--workloads W1,W4]
  bench/walfeed_bench.py all     [--quick] [--harness DIR]

See bench/README.md for what each mode does and how to read it.
"""
import argparse
import concurrent.futures
import json
import os
import re
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
BUILD = os.environ.get('WALFEED_BUILD', os.path.join(HERE, '..', 'build'))
PGBIN = os.environ.get('PGBIN', '/usr/lib/postgresql/15/bin')
SERVER = os.path.join(BUILD, 'server', 'walfeed-server')
CLI = os.path.join(BUILD, 'client', 'walfeed')
LIVE = os.path.join(BUILD, 'bench', 'walfeed_live')
DIRECT_LIVE = os.path.join(BUILD, 'bench', 'direct_live')
LIVE_RATES = None  # --rates
FANOUT = os.path.join(BUILD, 'bench', 'walfeed_fanout')
DRAIN = os.path.join(BUILD, 'bench', 'walfeed_drain')
HZ = os.sysconf('SC_CLK_TCK')


def log(*a):
    print(*a, file=sys.stderr, flush=True)


def free_port():
    with socket.socket() as s:
        s.bind(('127.0.0.1', 0))
        return s.getsockname()[1]


def wait_for(what, condition, timeout_s, every_s=0.05):
    """Polls `condition` until it returns a true value; raises after the deadline."""
    deadline = time.monotonic() + timeout_s
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() >= deadline:
            raise RuntimeError('timed out after %ds waiting for %s' % (timeout_s, what))
        time.sleep(every_s)


def proc_cpu_s(pid):
    """User + system CPU seconds of a live process."""
    with open('/proc/%d/stat' % pid) as f:
        fields = f.read().rsplit(')', 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / HZ


def proc_peak_rss_kb(pid):
    with open('/proc/%d/status' % pid) as f:
        for line in f:
            if line.startswith('VmHWM:'):
                return int(line.split()[1])
    return None


class Cluster:
    """A throwaway PostgreSQL 15 cluster on a free loopback port. walfeed-server
    reaches it over loopback TCP, or over its Unix-domain socket with transport
    'unix' (server_conninfo); everything else uses TCP."""

    def __init__(self, tmp, transport='tcp'):
        self.dir = os.path.join(tmp, 'pg')
        self.port = free_port()
        self.transport = transport
        self.conninfo = 'host=127.0.0.1 port=%d user=postgres dbname=postgres' % self.port
        self.server_conninfo = ('host=%s port=%d user=postgres dbname=postgres' % (tmp, self.port)
                                if transport == 'unix' else self.conninfo)
        self.as_pg = ['runuser', '-u', 'postgres', '--'] if os.getuid() == 0 else []
        if os.getuid() == 0:
            shutil.chown(tmp, 'postgres')
        subprocess.run(self.as_pg + [os.path.join(PGBIN, 'initdb'), '-D', self.dir, '-U', 'postgres',
                                     '--auth=trust'], check=True, stdout=subprocess.DEVNULL)
        with open(os.path.join(self.dir, 'postgresql.conf'), 'a') as f:
            f.write("port = %d\nlisten_addresses = '127.0.0.1'\nunix_socket_directories = '%s'\n"
                    "wal_level = logical\nmax_wal_size = '8GB'\nshared_buffers = '1GB'\n"
                    "max_connections = 200\nmax_wal_senders = 20\nmax_replication_slots = 40\n"
                    # No disk in the figures: commits wait for the WAL write and wake the
                    # walsenders (synchronous_commit on), but nothing is fsynced.
                    "fsync = off\nsynchronous_commit = on\nautovacuum = off\n" % (self.port, tmp))
        subprocess.run(self.as_pg + [os.path.join(PGBIN, 'pg_ctl'), '-D', self.dir, '-l',
                                     os.path.join(tmp, 'pg.log'), '-w', 'start'],
                       check=True, stdout=subprocess.DEVNULL)

    def sql(self, query):
        out = subprocess.run(['psql', '-X', '-q', '-At', '-v', 'ON_ERROR_STOP=1', self.conninfo,
                              '-c', query], check=True, capture_output=True, text=True)
        return out.stdout.strip()

    def stop(self):
        subprocess.run(self.as_pg + [os.path.join(PGBIN, 'pg_ctl'), '-D', self.dir, '-m', 'immediate',
                                     'stop'], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


class Server:
    """walfeed-server with one stream on an existing slot and publication."""

    def __init__(self, tmp, cluster, stream, slot, publication, schema, extra_defaults=None,
                 state_dir=None, env=None):
        self.port = free_port()
        self.address = '127.0.0.1:%d' % self.port
        self.stream = stream
        self.cluster = cluster
        self.schema = schema
        defaults = {'buffer_bytes': 67108864}
        defaults.update(extra_defaults or {})
        config = os.path.join(tmp, 'walfeed-%s.yaml' % schema)
        with open(config, 'w') as f:
            f.write('listen: "%s"\nplaintext: true\ncheckpoint:\n  schema: %s\n' % (self.address, schema))
            if state_dir:
                f.write('state_dir: %s\n' % state_dir)
            f.write('defaults:\n')
            for k, v in defaults.items():
                f.write('  %s: %s\n' % (k, v))
            f.write('streams:\n  - name: %s\n    conninfo: "%s"\n    slot: %s\n    publications: [%s]\n'
                    '    create_missing: false\n' % (stream, cluster.server_conninfo, slot, publication))
        self.log_path = os.path.join(tmp, 'server-%s.log' % schema)
        self.log = open(self.log_path, 'w')
        # WALFEED_SERVER_WRAPPER (e.g. "heaptrack -o /tmp/ht") runs the server under
        # a profiler; the CPU and RSS figures are then the wrapper's process.
        wrapper = os.environ.get('WALFEED_SERVER_WRAPPER', '').split()
        self.proc = subprocess.Popen(wrapper + [SERVER, '--config', config], stdout=self.log,
                                     stderr=subprocess.STDOUT, start_new_session=True, env=env)

    def status(self):
        out = subprocess.run([CLI, 'status', '--server', self.address, '--stream', self.stream,
                              '--format', 'json', '--timeout', '5'], capture_output=True, text=True)
        if out.returncode != 0:
            return None
        streams = json.loads(out.stdout).get('streams', [])
        return streams[0] if streams else None

    def wait_streaming(self, timeout_s=30):
        def streaming():
            if self.proc.poll() is not None:
                raise RuntimeError('walfeed-server exited; see %s (--keep keeps it)' % self.log_path)
            s = self.status()
            return s if s and s.get('state') == 'STREAM_STATE_STREAMING' else None
        return wait_for('stream %s to stream' % self.stream, streaming, timeout_s)

    def walsender_pid(self, slot):
        pid = self.cluster.sql("SELECT active_pid FROM pg_replication_slots WHERE slot_name = '%s'" % slot)
        return int(pid) if pid else None

    def stop(self):
        if self.proc.poll() is None:
            # The whole process group: with a wrapper, the server is its child.
            os.killpg(self.proc.pid, signal.SIGTERM)
            self.proc.wait(timeout=30)
        self.log.close()
        self.cluster.sql('DROP SCHEMA IF EXISTS %s CASCADE' % self.schema)


def lsn_bytes(text):
    hi, lo = text.split('/')
    return (int(hi, 16) << 32) | int(lo, 16)


def copy_slot(cluster, template, name):
    cluster.sql("SELECT pg_copy_logical_replication_slot('%s', '%s', false, 'pgoutput')" % (template, name))


def run_json(cmd, timeout_s, stderr_path=None, env=None):
    """Runs a client that prints JSON lines; returns the last. With stderr_path
    its stderr goes to that file (kept with the run's logs) instead of memory."""
    if stderr_path:
        with open(stderr_path, 'w') as err:
            out = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=err, text=True, timeout=timeout_s,
                                 env=env)
        with open(stderr_path) as err:
            # The client's own lines, not gRPC's log lines ("I1204 02:33:42...").
            stderr = ''.join(l for l in err if not re.match(r'[DIWE]\d{4} ', l))
    else:
        out = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout_s, env=env)
        stderr = out.stderr
    lines = [l for l in out.stdout.splitlines() if l.startswith('{')]
    if out.returncode != 0 or not lines:
        raise RuntimeError('%s failed (%d): %s%s' % (os.path.basename(cmd[0]), out.returncode, stderr.strip()[-2000:],
                                                     ' (all of it: %s)' % stderr_path if stderr_path else ''))
    return json.loads(lines[-1])


# ---------------------------------------------------------------- live latency

def live_mode(tmp, cluster, quick):
    """Writers at a fixed transaction rate (pgbench -R, several connections,
    synchronous_commit on), one walfeed_live client: commit -> receive latency."""
    cluster.sql('CREATE TABLE live_t (id bigserial PRIMARY KEY, writer int, note text)')
    cluster.sql('CREATE PUBLICATION live_pub FOR TABLE live_t')
    script = os.path.join(tmp, 'live.sql')
    with open(script, 'w') as f:
        f.write("INSERT INTO live_t (writer, note) VALUES (:client_id, 'live row');\n")
    duration = 5 if quick else 15
    warmup = 2
    # The default read window (unset: 1 ms over TCP, over a Unix-domain socket
    # up to 1 ms, shortened while a backlog is read; either waited only while
    # 8,000 frames/s or more arrive), then its trade-off (defaults.read_coalesce:
    # a set window is waited after every read): none at both rates, 5 ms.
    default = ('up to 1ms while busy, adaptive' if cluster.transport == 'unix'
               else '1ms while busy')
    cases = [(1000, None), (10000, None)]
    cases += [(1000, '0ms'), (10000, '0ms'), (10000, '5ms')] if not quick else [(10000, '0ms')]
    if LIVE_RATES:
        cases = [(rate, None) for rate in LIVE_RATES]
    timing = ['--duration-s', str(duration), '--warmup-s', str(warmup)]
    env = dict(os.environ, PGOPTIONS='-c synchronous_commit=on')

    def write(rate):
        """Runs the writers at `rate` tx/s; returns their count and the tx/s done."""
        clients = 4 if rate <= 1000 else 16
        bench = subprocess.run([os.path.join(PGBIN, 'pgbench'), '-n', '-h', '127.0.0.1', '-p',
                                str(cluster.port), '-U', 'postgres', '-c', str(clients), '-j', '2',
                                '-R', str(rate), '-T', str(warmup + duration + 2), '-f', script,
                                'postgres'], capture_output=True, text=True, env=env)
        tps = [l for l in bench.stdout.splitlines() if l.startswith('tps =')]
        return clients, float(tps[0].split()[2]) if tps else None

    def direct_case(rate):
        """The baseline: a direct slot reader alone (one walsender, as walfeed
        has), through the same writers, just before walfeed's case."""
        slot = 'direct_%d' % rate
        cluster.sql("SELECT pg_create_logical_replication_slot('%s', 'pgoutput')" % slot)
        direct = None
        try:
            direct = subscribed([DIRECT_LIVE, '--conninfo', cluster.server_conninfo, '--slot', slot,
                                 '--publication', 'live_pub'] + timing)
            _, tps = write(rate)
            d = last_json_line(direct, 'direct_live')
            return dict({k: d[k] for k in ('events', 'p50_ms', 'p90_ms', 'p99_ms', 'p999_ms',
                                            'max_ms')}, pgbench_tps=tps)
        finally:
            stop_client(direct)
            drop_slot(cluster, slot)

    results = []
    for rate, coalesce in cases:
        direct = direct_case(rate) if coalesce is None else None
        slot = 'live_%d_%s' % (rate, coalesce or 'default')
        cluster.sql("SELECT pg_create_logical_replication_slot('%s', 'pgoutput')" % slot)
        server = Server(tmp, cluster, 'live', slot, 'live_pub', 'wf_' + slot,
                        extra_defaults={'read_coalesce': coalesce} if coalesce else None)
        client = None
        try:
            server.wait_streaming()
            client = subscribed([LIVE, '--server', server.address, '--stream', 'live', '--consumer',
                                 'lat'] + timing)
            cpu0 = proc_cpu_s(server.proc.pid)
            clients, tps = write(rate)
            cpu1 = proc_cpu_s(server.proc.pid)
            r = last_json_line(client, 'walfeed_live')
            if direct:
                r['direct'] = direct
                r['p99_over_direct'] = round(r['p99_ms'] / max(direct['p99_ms'], 1e-3), 2)
            r.update(mode='live', target_tx_per_s=rate, writers=clients, transport=cluster.transport,
                     read_coalesce=coalesce or 'unset: %s (over %s)' % (default, cluster.transport),
                     pgbench_tps=tps,
                     server_cpu_pct=round(100.0 * (cpu1 - cpu0) / (warmup + duration + 2), 1))
            results.append(r)
            print(json.dumps(r), flush=True)
        finally:
            stop_client(client)
            server.stop()
            drop_slot(cluster, slot)
    return results


def stop_client(client):
    """Kills a live client that is still running (a case that failed)."""
    if client and client.poll() is None:
        client.kill()
        client.wait()


def subscribed(cmd):
    """Starts a live client and waits for its {"subscribed": true} line."""
    client = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    first = client.stdout.readline()
    if '"subscribed"' not in first:
        stop_client(client)
        raise RuntimeError('%s did not subscribe: %s %s' % (os.path.basename(cmd[0]), first,
                                                             client.stderr.read()))
    return client


def last_json_line(client, name):
    out, err = client.communicate(timeout=60)
    lines = [l for l in out.splitlines() if l.startswith('{')]
    if client.returncode != 0 or not lines:
        raise RuntimeError('%s failed: %s' % (name, err[-2000:]))
    return json.loads(lines[-1])


def drop_slot(cluster, name):
    """Drops a slot once its walsender has gone (it ends a moment after its
    client: pg_drop_replication_slot refuses an active slot)."""
    wait_for('slot %s released' % name, lambda: cluster.sql(
        "SELECT count(*) FROM pg_replication_slots WHERE slot_name = '%s' AND active" % name) == '0', 30)
    cluster.sql("SELECT pg_drop_replication_slot('%s')" % name)


# ---------------------------------------------------------------------- fan-out

# gRPC's own account of each connection, for the fan-out servers and clients:
# every state change of a channel or transport with its reason (a GOAWAY, a
# closed socket), a few lines per subscriber, into the run's logs. A subscriber
# lost its connection once in a few full runs and left only its last error.
GRPC_CONNECTION_TRACE = dict(os.environ, GRPC_VERBOSITY=os.environ.get('GRPC_VERBOSITY', 'INFO'),
                             GRPC_TRACE=os.environ.get('GRPC_TRACE', 'connectivity_state'))


def fanout_mode(tmp, cluster, quick):
    """A backlog in the slot; 1, 8, 64 and 256 subscribers that each receive all
    of it. Two starts: `slot` (subscribers start as soon as the stream is live,
    so the one slot read feeds all of them: the single subscriber is bound by
    that read) and `memory` (the backlog is read into the server's memory first:
    the server's delivery capacity alone)."""
    events = 100000 if quick else 200000
    levels = [1, 8, 64] if quick else [1, 8, 64, 256]
    cluster.sql('CREATE TABLE fan_t (id bigint PRIMARY KEY, payload text)')
    cluster.sql('CREATE PUBLICATION fan_pub FOR TABLE fan_t')
    cluster.sql("SELECT pg_create_logical_replication_slot('fan_tpl', 'pgoutput')")
    # Single-row transactions (as the harness's W1): the slot read is the slow
    # part, so one read feeding many subscribers shows.
    t0 = time.monotonic()
    cluster.sql("DO $$ BEGIN FOR g IN 1..%d LOOP INSERT INTO fan_t VALUES (g, repeat('x', 100)); "
                "COMMIT; END LOOP; END $$" % events)
    log('fanout: %d single-row transactions in %.1f s' % (events, time.monotonic() - t0))
    end = lsn_bytes(cluster.sql('SELECT pg_current_wal_lsn()'))
    results = []
    for start in ('slot', 'memory'):
        for n in levels:
            slot = 'fan_%s_%d' % (start, n)
            copy_slot(cluster, 'fan_tpl', slot)
            # The `memory` start holds the whole backlog (about 350 bytes an event).
            server = Server(tmp, cluster, 'fan', slot, 'fan_pub', 'wf_' + slot,
                            extra_defaults={'buffer_bytes': 256 << 20}, env=GRPC_CONNECTION_TRACE)
            try:
                server.wait_streaming()
                if start == 'memory':
                    wait_for('the backlog to be buffered', lambda: (
                        lambda s: s and int(s.get('bufferedEvents', 0)) >= events and
                        lsn_bytes(s.get('serverWalLsn', '0/0')) >= end)(server.status()), 120, 0.2)
                walsender = server.walsender_pid(slot)
                cpu0 = proc_cpu_s(server.proc.pid)
                r = run_json([FANOUT, '--server', server.address, '--stream', 'fan', '--subscribers',
                              str(n), '--events', str(events)], 600,
                             stderr_path=os.path.join(tmp, 'fanout-%s.err' % slot),
                             env=GRPC_CONNECTION_TRACE)
                cpu1 = proc_cpu_s(server.proc.pid)
                r.update(mode='fanout', start=start, server_cpu_s=round(cpu1 - cpu0, 2),
                         server_cpu_us_per_delivered_event=round(
                             (cpu1 - cpu0) * 1e6 / max(1, r['delivered_events']), 3),
                         walsender_cpu_s=proc_cpu_s(walsender) if walsender else None,
                         server_peak_rss_mb=round(proc_peak_rss_kb(server.proc.pid) / 1024, 1))
                results.append(r)
                print(json.dumps(r), flush=True)
            finally:
                server.stop()
                cluster.sql("SELECT pg_drop_replication_slot('%s')" % slot)
        single = [r for r in results if r['start'] == start][0]['aggregate_events_per_s']
        for r in results:
            if r['start'] == start:
                r['aggregate_over_single'] = round(r['aggregate_events_per_s'] / single, 2) if single else None
    return results


# ----------------------------------------------------------------------- memory

def memory_mode(tmp, cluster, quick):
    """One transaction of 10,000,000 rows (--quick: 1,000,000): walfeed-server's
    peak RSS while it streams it to a client that keeps up and acks; then the
    same with a second consumer that stopped acking (took 10,000 events, acked
    them, went away), for which every later event stays retained:
    in memory up to buffer_bytes, spilled to state_dir beyond."""
    rows = 1000000 if quick else 10000000
    cluster.sql('CREATE TABLE mem_t (id bigint, payload text)')
    cluster.sql('CREATE PUBLICATION mem_pub FOR TABLE mem_t')
    cluster.sql("SELECT pg_create_logical_replication_slot('mem_tpl', 'pgoutput')")
    t0 = time.monotonic()
    cluster.sql("INSERT INTO mem_t SELECT g, 'row number ' || g FROM generate_series(1, %d) g" % rows)
    log('memory: %d rows inserted in %.1f s' % (rows, time.monotonic() - t0))
    end_lsn = cluster.sql('SELECT pg_current_wal_insert_lsn()')
    results = []
    for client in ('keeps_up', 'stopped_acking'):
        slot = 'mem_' + client
        copy_slot(cluster, 'mem_tpl', slot)
        state = os.path.join(tmp, 'state-' + client)
        server = Server(tmp, cluster, 'mem', slot, 'mem_pub', 'wf_' + slot, state_dir=state,
                        extra_defaults={'retention_bytes': 16 << 30})
        try:
            server.wait_streaming()
            t0 = time.monotonic()
            expected = rows
            if client == 'stopped_acking':
                # A consumer takes 10,000 events, acks them (up to its last
                # ack, every 5,000) and goes away: from
                # now on every event is retained for it. (One that never acked
                # and left holds nothing: the server keeps no state for it.)
                # The drain below, a new consumer, starts after what it acked:
                # the oldest event the server still holds.
                stopped = run_json([FANOUT, '--server', server.address, '--stream', 'mem', '--consumer-prefix',
                          'stopped', '--subscribers', '1', '--events', '10000', '--ack-every', '5000',
                          '--timeout-s', '600'], 700)
                # Cumulative acks at every 5,000 events: the last one may cover
                # less than it received (frames end where they end).
                expected = rows - stopped['acked_events']
            r = run_json([DRAIN, '--server', server.address, '--stream', 'mem', '--consumer', 'mem',
                          '--end-lsn', end_lsn, '--timeout-s', '1800'], 1900)
            events = r['events']
            if events != expected:
                raise RuntimeError('memory: the drain received %d of %d events' % (events, expected))
            seconds = time.monotonic() - t0
            s = server.status() or {}
            results.append(dict(mode='memory', client=client, rows=rows, events=events,
                                seconds=round(seconds, 1), events_per_s=round(events / seconds),
                                server_peak_rss_mb=round(proc_peak_rss_kb(server.proc.pid) / 1024, 1),
                                buffered_bytes_at_end=int(s.get('bufferedBytes', 0)),
                                spilled_bytes_at_end=int(s.get('spilledBytes', 0)),
                                server_cpu_s=round(proc_cpu_s(server.proc.pid), 1)))
            print(json.dumps(results[-1]), flush=True)
        finally:
            server.stop()
            shutil.rmtree(state, ignore_errors=True)
            cluster.sql("SELECT pg_drop_replication_slot('%s')" % slot)
    return results


# ---------------------------------------------------------------- backfill

def cli_json(args):
    out = subprocess.run([CLI] + args + ['--timeout', '30'], capture_output=True, text=True)
    if out.returncode != 0:
        raise RuntimeError('walfeed %s failed: %s' % (' '.join(args[:2]), out.stderr.strip()))
    return json.loads(out.stdout)


# --chunk-rows: the backfill's chunk size (None: the server's default).
BACKFILL_CHUNK_ROWS = None


def backfill_mode(tmp, cluster, quick):
    """A backfill of a 1,000,000-row table (--quick: 200,000) against COPY (SELECT *
    FROM it) TO STDOUT of the same table, alone and while a second consumer drains
    a backlog of change events; and that consumer's events/s without and with the
    backfill running."""
    rows = 200000 if quick else 1000000
    live_rows = 100000 if quick else 300000
    cluster.sql('CREATE TABLE bf_t (id bigint PRIMARY KEY, payload text, n int)')
    cluster.sql('CREATE TABLE bf_live (id bigint PRIMARY KEY, payload text)')
    cluster.sql('CREATE PUBLICATION bf_pub FOR TABLE bf_t, bf_live')
    cluster.sql("INSERT INTO bf_t SELECT g, 'row number ' || g, g %% 1000 FROM generate_series(1, %d) g"
                % rows)
    cluster.sql('VACUUM ANALYZE bf_t')
    copies = []
    for _ in range(3):
        t0 = time.monotonic()
        subprocess.run(['psql', '-X', '-q', cluster.conninfo, '-c', 'COPY (SELECT * FROM bf_t) TO STDOUT'],
                       check=True, stdout=subprocess.DEVNULL)
        copies.append(time.monotonic() - t0)
    copy_rows_per_s = rows / statistics.median(copies)
    log('backfill: COPY of %d rows: %.0f rows/s (median of 3)' % (rows, copy_rows_per_s))
    cluster.sql("SELECT pg_create_logical_replication_slot('bf_tpl', 'pgoutput')")
    cluster.sql("INSERT INTO bf_live SELECT g, 'live ' || g FROM generate_series(1, %d) g" % live_rows)
    end_lsn = cluster.sql('SELECT pg_current_wal_insert_lsn()')
    results = []
    live_rates = {}
    # alone: the backfill with no other consumer; without: the live drain
    # alone; with: both at once.
    pool = concurrent.futures.ThreadPoolExecutor(max_workers=1)
    for case in ('alone', 'without', 'with'):
        slot = 'bf_' + case
        copy_slot(cluster, 'bf_tpl', slot)
        server = Server(tmp, cluster, 'bf', slot, 'bf_pub', 'wf_' + slot)
        reader = None
        try:
            server.wait_streaming()
            common = ['--server', server.address, '--stream', 'bf']
            r = dict(mode='backfill', case=case, chunk_rows=BACKFILL_CHUNK_ROWS or 'default')
            live_drain = None
            if case != 'alone':
                # Subscribed before the backfill's consumer starts: a consumer
                # that arrives once another has acked starts at what is still
                # held (docs/consumers.md), and a fast machine's reader had
                # acked every live row before a later live drain subscribed.
                live_drain = pool.submit(run_json, [DRAIN] + common + [
                    '--consumer', 'live', '--end-lsn', end_lsn, '--timeout-s', '600'], 700)
                wait_for('consumer live', lambda: live_drain.done() or any(
                    c.get('name') == 'live' for c in (server.status() or {}).get('consumers', [])), 30)
            if case != 'without':
                # The backfill's consumer: drains and acks everything it gets.
                reader = subprocess.Popen([DRAIN] + common + ['--consumer', 'reader', '--end-lsn',
                                          'FFFFFFFF/0', '--timeout-s', '3600'],
                                          stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
                wait_for('consumer reader', lambda: any(
                    c.get('name') == 'reader' for c in (server.status() or {}).get('consumers', [])), 30)
                t_backfill = time.monotonic()
                chunk = ['--chunk-rows', str(BACKFILL_CHUNK_ROWS)] if BACKFILL_CHUNK_ROWS else []
                backfill = cli_json(['backfill', 'start'] + common + chunk + ['--consumer', 'reader',
                                     '--table', 'public.bf_t', '--format', 'json'])
            if case != 'alone':
                live = live_drain.result()
                live_s = max(live['last_event_after_s'] - live['first_event_after_s'], 1e-6)
                live_rates[case] = live['events'] / live_s
                r.update(live_events=live['events'], live_events_per_s=round(live_rates[case]))
                # The drain client is gone for good: a durable consumer that is
                # gone still holds the stream's buffer (READ events included),
                # so a backfill bigger than the buffer would wait for it.
                subprocess.run([CLI, 'remove-consumer'] + common + ['--consumer', 'live', '--yes'],
                               check=True, stdout=subprocess.DEVNULL)
            if case != 'without':
                def done():
                    b = cli_json(['backfill', 'status'] + common + ['--id', backfill['id'], '--format', 'json'])
                    return b if b.get('state') != 'BACKFILL_STATE_RUNNING' else None
                b = wait_for('the backfill', done, 1800, 0.1)
                seconds = time.monotonic() - t_backfill
                r.update(rows=rows, state=b['state'], backfill_rows=int(b.get('rows', 0)),
                         backfill_seconds=round(seconds, 2), backfill_rows_per_s=round(rows / seconds),
                         copy_rows_per_s=round(copy_rows_per_s),
                         backfill_over_copy=round(rows / seconds / copy_rows_per_s, 3),
                         server_cpu_s=round(proc_cpu_s(server.proc.pid), 1),
                         server_peak_rss_mb=round(proc_peak_rss_kb(server.proc.pid) / 1024, 1))
            if case == 'with':
                r.update(live_with_over_without=round(live_rates['with'] / live_rates['without'], 3))
            results.append(r)
            print(json.dumps(r), flush=True)
        finally:
            if reader is not None:
                reader.terminate()
                reader.wait(timeout=30)
            server.stop()
            cluster.sql("SELECT pg_drop_replication_slot('%s')" % slot)
    pool.shutdown()
    return results


# ---------------------------------------------------------------- catch-up (harness)

DIRECT_PEERS = ['recvlogical-pgoutput', 'py-pgoutput', 'py-pgoutput-batched', 'node-pgoutput']


def read_text(path):
    try:
        with open(path) as f:
            return f.read().strip()
    except OSError:
        return None


def environment(transport):
    """What the figures depend on besides the build. The TCP congestion control
    matters most on loopback: the walsender sends one message per send(), and
    whether those coalesce into few segments depends on it (with bbr, on the
    receiver's acknowledgement timing as well): docs/performance.md, catch-up."""
    return dict(mode='environment', kernel=os.uname().release, cpus=os.cpu_count(),
                tcp_congestion_control=read_text('/proc/sys/net/ipv4/tcp_congestion_control'),
                transport=transport)


def forget_drain_streams(env):
    """Forgets the streams earlier runs' drains left in the harness database.
    Each drain is a stream of its own, bound to the slot copy it read, and the
    harness names its copies run_<w>_<n> in every run: an earlier run's stream
    bound to a copy of the same name would make the server refuse the new one
    as sharing the slot (SLOT_SHARED). Outside any measured time."""
    conninfo = 'host=%s port=%s user=%s dbname=%s' % (
        env.get('BENCH_PGHOST', '127.0.0.1'), env.get('BENCH_PGPORT', '55433'),
        env.get('BENCH_PGUSER', 'postgres'), env.get('BENCH_PGDATABASE', 'bench'))
    subprocess.run(['psql', '-X', '-q', '-v', 'ON_ERROR_STOP=1', conninfo, '-c',
                    "DO $$ BEGIN IF to_regclass('wfbench.stream_checkpoints') IS NOT NULL THEN "
                    "DELETE FROM wfbench.consumer_checkpoints; DELETE FROM wfbench.stream_checkpoints; "
                    "END IF; END $$"], check=True, stdout=subprocess.DEVNULL)


def catchup_mode(harness, quick, transport='tcp', workloads=None):
    """The peer harness's catch-up run, walfeed as a custom peer; returns
    per-workload medians and walfeed's ratio to the fastest direct peer.
    transport 'unix': every client, walfeed-server included, reaches the
    harness's cluster over its Unix-domain socket (in the harness's BENCH_ROOT)
    instead of loopback TCP, which takes the TCP congestion control out of the
    walsender's cost (docs/performance.md, catch-up)."""
    peers = ['recvlogical-pgoutput', 'py-pgoutput', 'py-pgoutput-batched', 'sql-pgoutput', 'walfeed']
    if os.path.isdir(os.path.join(harness, 'peers', 'node', 'node_modules')):
        peers.insert(3, 'node-pgoutput')
    cmd = [os.path.join(harness, 'run.py'), '--reps', '1' if quick else '3', '--peers', ','.join(peers),
           '--custom-peer', 'walfeed=%s' % os.path.join(HERE, 'drain_walfeed.sh')]
    if quick:
        cmd += ['--size', 'W1=50000', '--size', 'W2=250000', '--size', 'W3=100000', '--size', 'W4=50000']
    if workloads:
        cmd += ['--workloads', workloads]
    env = dict(os.environ)
    if transport == 'unix':
        socket_dir = os.environ.get('BENCH_ROOT', '/tmp/cdcbench')
        env.update(PGHOST=socket_dir, BENCH_PGHOST=socket_dir)
    subprocess.run([os.path.join(harness, 'pg-up.sh')], check=True, stdout=subprocess.DEVNULL)
    forget_drain_streams(env)
    before = set(os.listdir(os.path.join(harness, 'results')))
    subprocess.run(cmd, check=False, stdout=sys.stderr, env=env)
    new = sorted(f for f in set(os.listdir(os.path.join(harness, 'results'))) - before if f.endswith('.jsonl'))
    if not new:
        raise RuntimeError('the harness wrote no results')
    rows = [json.loads(l) for l in open(os.path.join(harness, 'results', new[-1]))]
    by = {}
    for r in rows:
        if r.get('type') == 'run' and r.get('rep', 1) >= 1 and r.get('events_per_s'):
            by.setdefault((r['workload'], r['peer']), []).append(r)
    out = []
    for w in sorted({w for w, _ in by}):
        med = {p: statistics.median(x['events_per_s'] for x in by[(w, p)]) for ww, p in by if ww == w}
        ok = all(x.get('ok') for (ww, p), xs in by.items() if ww == w for x in xs)
        direct = {p: v for p, v in med.items() if p in DIRECT_PEERS}
        fastest = max(direct, key=direct.get) if direct else None
        wf = med.get('walfeed')
        out.append(dict(mode='catchup', workload=w, walfeed_events_per_s=round(wf) if wf else None,
                        fastest_direct_peer=fastest, fastest_events_per_s=round(direct[fastest]) if fastest else None,
                        ratio=round(wf / direct[fastest], 3) if wf and fastest else None,
                        ratio_vs_recvlogical=round(wf / med['recvlogical-pgoutput'], 3)
                        if wf and med.get('recvlogical-pgoutput') else None,
                        decode_ceiling_ratio=round(wf / med['sql-pgoutput'], 3) if wf and med.get('sql-pgoutput') else None,
                        all_ok=ok, results=new[-1]))
        print(json.dumps(out[-1]), flush=True)
    return out


def summary_table(results):
    lines = ['| mode | case | figure |', '|---|---|---|']
    for r in results:
        if r['mode'] == 'environment':
            lines.append('| environment | kernel %s, %d CPUs | TCP congestion control %s; PostgreSQL reached over %s |' % (
                r['kernel'], r['cpus'], r['tcp_congestion_control'],
                'its Unix-domain socket (walfeed-server, and in catch-up every peer)'
                if r['transport'] == 'unix' else 'loopback TCP'))
        elif r['mode'] == 'catchup':
            lines.append('| catch-up | %s | walfeed %s ev/s, fastest direct peer %s %s ev/s: **%.2f×** '
                         '(vs pg_recvlogical %.2f×, vs decode-only %.2f×)%s |' % (
                             r['workload'], r['walfeed_events_per_s'], r['fastest_direct_peer'],
                             r['fastest_events_per_s'], r['ratio'], r['ratio_vs_recvlogical'] or 0,
                             r['decode_ceiling_ratio'] or 0, '' if r['all_ok'] else ' (a run FAILED)'))
        elif r['mode'] == 'live':
            d = r.get('direct')
            lines.append('| live | %d tx/s target (%s tx/s done), read_coalesce %s | p50 %.2f ms, p99 %.2f ms, '
                         'max %.2f ms over %d events; server CPU %s%%%s |' % (
                             r['target_tx_per_s'], r['pgbench_tps'] and round(r['pgbench_tps']),
                             r['read_coalesce'], r['p50_ms'], r['p99_ms'], r['max_ms'], r['events'],
                             r['server_cpu_pct'],
                             '; a direct slot reader just before: p50 %.2f ms, p99 %.2f ms, '
                             'max %.2f ms (walfeed p99 ÷ its: %.2f×)' % (
                                 d['p50_ms'], d['p99_ms'], d['max_ms'], r['p99_over_direct'])
                             if d else ''))
        elif r['mode'] == 'fanout':
            lines.append('| fan-out from the %s | %d subscribers × %d events | %s ev/s aggregate (%.1f× one), '
                         '%.2f µs server CPU per delivered event, peak RSS %.0f MB, walsender %.2f s CPU%s |' % (
                             r['start'], r['subscribers'], r['events_each'], r['aggregate_events_per_s'],
                             r.get('aggregate_over_single') or 0, r['server_cpu_us_per_delivered_event'],
                             r['server_peak_rss_mb'], r['walsender_cpu_s'] or 0,
                             '; %d new session(s) after a lost connection' %
                             r['reconnects'] if r.get('reconnects') else ''))
        elif r['mode'] == 'backfill' and r['case'] == 'alone':
            lines.append('| backfill | %d rows, default chunks, no other consumer | %s rows/s = **%.2f×** COPY '
                         'TO STDOUT (%s rows/s) |' % (
                             r['rows'], r['backfill_rows_per_s'], r['backfill_over_copy'], r['copy_rows_per_s']))
        elif r['mode'] == 'backfill' and r['case'] == 'with':
            lines.append('| backfill | %d rows while a second consumer drains a backlog | %s rows/s = '
                         '**%.2f×** COPY; the second consumer: %s ev/s = **%.2f×** without the backfill |' % (
                             r['rows'], r['backfill_rows_per_s'], r['backfill_over_copy'],
                             r['live_events_per_s'], r['live_with_over_without']))
        elif r['mode'] == 'memory':
            lines.append('| memory | %d-row transaction, consumer %s | peak RSS %.0f MB, %d ev/s, held at the '
                         'end: %d MB in memory, %d MB on disk |' % (
                             r['rows'], r['client'].replace('_', ' '), r['server_peak_rss_mb'], r['events_per_s'],
                             r['buffered_bytes_at_end'] >> 20, r['spilled_bytes_at_end'] >> 20))
    return '\n'.join(lines)


def interrupted(signum, frame):
    """SIGTERM (a timeout, kill) unwinds like Ctrl-C, so servers and the cluster stop."""
    raise KeyboardInterrupt()


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument('mode', choices=['live', 'fanout', 'memory', 'backfill', 'catchup', 'all'])
    ap.add_argument('--quick', action='store_true', help='smaller sizes, fewer cases: all of it in under 10 minutes')
    ap.add_argument('--harness', help='the peer harness directory (run.py, pg-up.sh); `all` runs catch-up with it')
    ap.add_argument('--transport', choices=['tcp', 'unix'], default='tcp',
                    help='how walfeed-server (and in catch-up every peer) reaches PostgreSQL: loopback TCP '
                         '(default, as the harness does) or the cluster\'s Unix-domain socket')
    ap.add_argument('--workloads', help='catch-up: the harness workloads to run (default: all four), e.g. W1,W4')
    ap.add_argument('--keep', action='store_true',
                    help='keep the temporary directory (logs) at the end (a failed run keeps it anyway)')
    ap.add_argument('--chunk-rows', type=int, help='backfill: rows per chunk (default: the server\'s)')
    ap.add_argument('--rates', help='live: only the default read window, at these transaction rates '
                                    '(each with its direct-reader baseline), e.g. 2000,10000')
    a = ap.parse_args()
    global BACKFILL_CHUNK_ROWS, LIVE_RATES
    BACKFILL_CHUNK_ROWS = a.chunk_rows
    if a.rates:
        try:
            LIVE_RATES = [int(r) for r in a.rates.split(',')]
        except ValueError:
            sys.exit('walfeed_bench.py: --rates takes whole transactions per second, e.g. 1000,10000')
        if any(r <= 0 for r in LIVE_RATES):
            sys.exit('walfeed_bench.py: --rates must be positive')
    signal.signal(signal.SIGTERM, interrupted)
    for binary in (SERVER, CLI, LIVE, DIRECT_LIVE, FANOUT, DRAIN):
        if not os.access(binary, os.X_OK):
            sys.exit('walfeed_bench.py: %s not found: build it first (cmake --build build -j2)' % binary)
    if a.mode == 'catchup' and not a.harness:
        sys.exit('walfeed_bench.py: catchup needs --harness DIR (the peer harness: run.py, pg-up.sh)')
    catchup = a.mode in ('all', 'catchup') and a.harness
    results = [environment(a.transport)]
    print(json.dumps(results[0]), flush=True)
    if catchup:
        results += catchup_mode(a.harness, a.quick, a.transport, a.workloads)
    elif a.mode == 'all':
        log('walfeed_bench.py: no --harness: the catch-up comparison is skipped (no ratio_min)')
    if a.mode != 'catchup':
        results += own_cluster_modes(a.mode, a.quick, a.keep, a.transport)
    print(summary_table(results))
    ratios = [r['ratio'] for r in results if r['mode'] == 'catchup' and r['ratio']]
    if ratios:
        print('ratio_min=%.3f' % min(ratios))


def own_cluster_modes(mode, quick, keep, transport):
    """The modes that run on a throwaway cluster of their own (all but catch-up)."""
    results = []
    tmp = tempfile.mkdtemp(prefix='walfeed-bench.')
    cluster = Cluster(tmp, transport)
    failed = True
    try:
        for name, fn in (('live', live_mode), ('fanout', fanout_mode), ('memory', memory_mode),
                         ('backfill', backfill_mode)):
            if mode in (name, 'all'):
                results += fn(tmp, cluster, quick)
        failed = False
    finally:
        cluster.stop()
        # A failed run keeps its servers' logs: the failure may not come back.
        if keep or failed:
            log('kept %s (the servers\' logs, the cluster)' % tmp)
        else:
            shutil.rmtree(tmp, ignore_errors=True)
    return results


if __name__ == '__main__':
    main()
