'use strict';
// Subscriber: a durable walfeed consumer's whole loop.
//
//   const sub = new Subscriber({ server: 'localhost:50051', stream: 'orders', consumer: 'billing' });
//   await sub.run(async (batch) => { for (const c of batch) console.log(c.id, c.op, c.table, c.row); });
//
// run() subscribes, awaits handle(batch) for every batch of events, in id
// order, and acks what handle finished, as the ack policy says. It reconnects
// by itself with capped jittered backoff on every error the API documents as
// retryable (errors.js) and resumes right after the consumer's durable
// checkpoint; it rejects with WalfeedError on the others, and with what handle
// threw (those events were not acked and come again to the next run).
const grpc = require('@grpc/grpc-js');
const { ChangeStream } = require('./api');
const { WalfeedError, failureOf, nextDelayMs } = require('./errors');
const { columnValue } = require('./values');

// After an Ack refused with ABORTED (the session is no longer the consumer's
// active one), the Subscribe stream's own status follows at once and says why.
// Frames are dropped until it comes; if they still come this long after, the
// Ack's error stands.
const DRAIN_MS = 10000;

const VALUE_FORMS = { text: 'VALUE_FORM_TEXT', typed: 'VALUE_FORM_TYPED', both: 'VALUE_FORM_BOTH' };

// When run() acks: every(n) handled events, everyBatches(n), interval(ms)
// (checked as frames arrive; an idle stream brings a progress frame every
// 5 s), or manual() (only sub.ack). Every policy but manual also acks when the
// stream goes idle, up to what the server passed (events the filters left
// out), so a consumer that filters everything never holds the stream back.
const AckPolicy = {
  every(events = 1) { return checked({ events }, events); },
  everyBatches(batches = 1) { return checked({ batches }, batches); },
  interval(ms) { return checked({ ms }, ms); },
  manual() { return {}; },
};

function checked(policy, n) {
  if (!(n >= 1)) throw new RangeError(`AckPolicy: ${JSON.stringify(policy)} must be at least 1`);
  return policy;
}

function rowOf(values, columns) {
  const row = {};
  values.forEach((value, i) => { row[columns ? columns[i]?.name : value.name] = columnValue(value); });
  return row;
}

// One event: id, op ('INSERT', 'UPDATE', 'DELETE', 'TRUNCATE', 'MESSAGE',
// 'READ'), schema, table, row (the new row) and old (the old row or its key),
// as objects of JavaScript values (values.js); transactionEnd on the last
// event of its transaction; event: the walfeed.v1.ChangeEvent itself.
class Change {
  constructor(event, shape) {
    this.event = event;
    this.id = event.id;
    this.op = event.op.replace(/^OPERATION_/, '');
    this.schema = shape ? shape.schema : event.schema;
    this.table = shape ? shape.table : event.table;
    this.transactionEnd = event.last_in_transaction;
    const keys = shape && event.old_values_kind === 'OLD_VALUES_KEY'
      ? shape.columns.filter((c) => c.key) : shape?.columns;
    this.row = event.new_values.length ? rowOf(event.new_values, shape?.columns) : null;
    this.old = event.old_values.length ? rowOf(event.old_values, keys) : null;
  }
}

// The changes of one events frame, in id order.
class Batch extends Array {
  // The changes grouped by transaction (the last group may go on in the next
  // batch: its last change has transactionEnd false).
  transactions() {
    const groups = [];
    let current = [];
    for (const change of this) {
      current.push(change);
      if (change.transactionEnd) { groups.push(current); current = []; }
    }
    if (current.length) groups.push(current);
    return groups;
  }
}

class Subscriber {
  // options: server ('host:port'), stream, consumer; ack (an AckPolicy,
  // default every(1)); valueForm ('typed' default, 'both', 'text'); compact
  // (default true: column metadata once per table version); tables
  // (['public.orders*']), operations (['INSERT']), startAfter (an id, or a
  // function returning one, awaited before every Subscribe: a destination's
  // watermark, Watermark.resume; the id used is lastStartAfter);
  // credentials (grpc.credentials.createSsl(...), default plaintext); token
  // (bearer); maxBackoffMs (5000); onStarted(session, checkpoint),
  // onAcked(id), onRetry(failure, delayMs).
  constructor(options) {
    for (const name of ['server', 'stream', 'consumer']) {
      if (!options[name]) throw new Error(`walfeed Subscriber: ${name} is required`);
    }
    const valueForm = VALUE_FORMS[options.valueForm ?? 'typed'];
    if (!valueForm) throw new Error(`walfeed Subscriber: valueForm must be one of ${Object.keys(VALUE_FORMS)}`);
    this.options = options;
    this.policy = options.ack ?? AckPolicy.every(1);
    this.request = {
      stream: options.stream, consumer: options.consumer,
      tables: options.tables ?? [], operations: (options.operations ?? []).map((op) => `OPERATION_${op}`),
      value_form: valueForm, event_form: options.compact === false ? 'EVENT_FORM_FULL' : 'EVENT_FORM_COMPACT',
    };
    this.maxBackoffMs = options.maxBackoffMs ?? 5000;
    // Reconnect at most maxBackoffMs after the server is back (gRPC's default
    // grows to 120 s). No receive limit: an event is as large as its row, and
    // under gRPC's 4 MiB default the first larger one would fail forever.
    this.client = new ChangeStream(options.server, options.credentials ?? grpc.credentials.createInsecure(), {
      'grpc.max_reconnect_backoff_ms': this.maxBackoffMs, 'grpc.max_receive_message_length': -1,
    });
    this.session = '';
    // The id the latest Subscribe started after ('' for the checkpoint).
    this.lastStartAfter = '';
    this.stopping = false;
    this.call = null;
  }

  metadata(extra = {}) {
    const metadata = new grpc.Metadata(extra);
    if (this.options.token) metadata.set('authorization', `Bearer ${this.options.token}`);
    return metadata;
  }

  // Ends run(): it resolves after the batch being handled, if any.
  stop() {
    this.stopping = true;
    this.call?.cancel();
    this.wakeUp?.();
  }

  // Acks everything up to and including `id` in the current session (for
  // AckPolicy.manual(); may be called from handle).
  ack(id) {
    const eventId = String(id);
    return new Promise((resolve, reject) => {
      this.client.Ack({ stream: this.options.stream, consumer: this.options.consumer,
        session_id: this.session, event_id: eventId }, this.metadata(), (err) => {
        if (err) return reject(err);
        this.options.onAcked?.(eventId);
        return resolve();
      });
    });
  }

  async run(handle) {
    let attempt = 0;
    while (!this.stopping) {
      let failure = { code: 'UNAVAILABLE', message: 'the stream ended', reason: '', retryDelayMs: null };
      try {
        if (await this.subscribeOnce(handle)) attempt = 0;
      } catch (err) {
        // handle's own error, or startAfter's: not a gRPC status.
        if (typeof err.code !== 'number' || err instanceof WalfeedError) throw err;
        failure = failureOf(err);
      }
      if (this.stopping) return;
      const delayMs = nextDelayMs(failure, attempt, this.maxBackoffMs);
      if (delayMs === null) throw new WalfeedError(failure);
      this.options.onRetry?.(failure, delayMs);
      attempt += 1;
      await new Promise((resolve) => {
        this.wakeUp = resolve;
        setTimeout(resolve, delayMs);
      });
    }
  }

  // One session until the server ends it (the iterator throws its status);
  // true if it started (so the backoff starts over).
  async subscribeOnce(handle) {
    // waitForReady: while the server is unreachable, the call waits for the
    // channel to reconnect instead of failing at once.
    const startAfter = this.options.startAfter;
    this.request.start_after = this.lastStartAfter =
      (typeof startAfter === 'function' ? await startAfter() : startAfter) || '';
    const call = this.client.Subscribe(this.request, this.metadata({ waitForReady: true }));
    this.call = call;
    const policy = this.policy;
    const automatic = policy.events !== undefined || policy.batches !== undefined || policy.ms !== undefined;
    let shapes = new Map();
    let started = false;
    let ackTo = '';
    let acked = '';
    let events = 0;
    let batches = 0;
    let lastAck = Date.now();
    let refused = null;
    let giveUpAt = 0;
    try {
      for await (const response of call) {
        if (refused) {
          if (Date.now() > giveUpAt) throw refused;
          continue;
        }
        if (response.frame === 'started') {
          started = true;
          shapes = new Map(); // Shapes belong to the session.
          this.session = response.started.session_id;
          this.options.onStarted?.(this.session, response.started.checkpoint);
          continue;
        }
        const idle = response.frame === 'progress';
        if (response.frame === 'events') {
          for (const shape of response.events.relations) shapes.set(shape.ref, shape);
          const batch = Batch.from(response.events.events,
            (e) => new Change(e, e.relation_ref ? shapes.get(e.relation_ref) : null));
          await handle(batch);
          ackTo = response.events.passed || batch[batch.length - 1].id;
          events += batch.length;
          batches += 1;
        } else if (idle && response.progress.passed && response.progress.passed !== acked) {
          ackTo = response.progress.passed;
          batches += 1;
        }
        if (this.stopping) break;
        if (!batches || !automatic) continue;
        const due = idle || (policy.events !== undefined && events >= policy.events) ||
          (policy.batches !== undefined && batches >= policy.batches) ||
          (policy.ms !== undefined && Date.now() - lastAck >= policy.ms);
        if (!due) continue;
        try {
          await this.ack(ackTo);
        } catch (err) {
          if (err.code !== grpc.status.ABORTED) throw err;
          refused = err;
          giveUpAt = Date.now() + DRAIN_MS;
          continue;
        }
        acked = ackTo;
        events = 0;
        batches = 0;
        lastAck = Date.now();
      }
      if (refused) throw refused;
      if (this.stopping && batches && automatic) await this.ack(ackTo); // Handled before stop().
    } catch (err) {
      if (this.stopping && err.code === grpc.status.CANCELLED) return started;
      throw err;
    } finally {
      call.cancel();
      this.call = null;
    }
    return started;
  }
}

module.exports = { AckPolicy, Batch, Change, Subscriber };
