'use strict';
// Unit tests of the walfeed Node package's pure parts: ids, error details,
// typed values as JavaScript values, and events resolved into Changes (full
// and compact forms). The loop itself is tested against a real server by
// tests/clients/client_interop_test.cc (examples/node/consumer.js runs on it).
const test = require('node:test');
const assert = require('node:assert');
const walfeed = require('..');

test('ids parse, print and order as numbers', () => {
  const a = walfeed.EventId.parse('0/9:0');
  const b = walfeed.EventId.parse('0/10:0');
  assert.ok(a.compare(b) < 0); // As text "0/9" > "0/10".
  assert.strictEqual(String(walfeed.EventId.parse('16/B374D848:7')), '16/B374D848:7');
  assert.strictEqual(walfeed.parseLsn('1/0'), 1n << 32n);
  for (const bad of ['', '0/1', '0/1:', '0/1:x', '1:0', '0/1:4294967296', '123456789/0:0']) {
    assert.throws(() => walfeed.EventId.parse(bad), /not an/, bad);
  }
});

test('the retry policy follows the error details', () => {
  assert.strictEqual(walfeed.nextDelayMs({ code: 'ABORTED', reason: 'SESSION_SUPERSEDED',
    retryDelayMs: null }, 0), null);
  assert.ok(walfeed.nextDelayMs({ code: 'UNAVAILABLE', reason: 'SERVER_STOPPING',
    retryDelayMs: 2000 }, 0) >= 2000);
  assert.ok(walfeed.nextDelayMs({ code: 'UNAVAILABLE', reason: '', retryDelayMs: null }, 30) <= 5000);
  assert.strictEqual(walfeed.nextDelayMs({ code: 'NOT_FOUND', reason: '', retryDelayMs: null }, 0), null);
  const junk = { code: 14, details: 'x', metadata: { get: () => [Buffer.from([0xff, 0x01])] } };
  assert.deepStrictEqual(walfeed.failureOf(junk), { code: 'UNAVAILABLE', message: 'x', reason: '',
    retryDelayMs: null });
});

const typed = (value, fields) => ({ value, ...fields });

test('typed values become JavaScript values', () => {
  assert.strictEqual(walfeed.typedValue(typed('int_value', { int_value: '42' })), 42);
  assert.strictEqual(walfeed.typedValue(typed('int_value', { int_value: '-9223372036854775808' })),
    -9223372036854775808n);
  assert.ok(Object.is(walfeed.typedValue(typed('float_value', { float_value: -0 })), -0));
  assert.strictEqual(walfeed.typedValue(typed('decimal_value', { decimal_value: '-12.3400' })), '-12.3400');
  assert.strictEqual(walfeed.typedValue(typed('uuid_value', {
    uuid_value: Buffer.from('a0eebc999c0b4ef8bb6d6bb9bd380a11', 'hex') })),
  'a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11');
  const stamp = walfeed.typedValue(typed('timestamp_value', { timestamp_value: { seconds: '-1', nanos: 999999000 } }));
  assert.strictEqual(stamp.micros, -1n);
  assert.strictEqual(stamp.getTime(), -1);
  assert.strictEqual(String(walfeed.typedValue(typed('date_value', {
    date_value: { year: 0, month: 1, day: 1 } }))), '0000-01-01');
  assert.strictEqual(walfeed.typedValue(typed('special_value', { special_value: 'SPECIAL_VALUE_INFINITY' })),
    walfeed.INFINITY);
  assert.strictEqual(walfeed.typedValue(typed('special_value', { special_value: 'SPECIAL_VALUE_OUT_OF_RANGE' }),
    '294276-12-31 23:59:59.999999'), '294276-12-31 23:59:59.999999');
  assert.deepStrictEqual(walfeed.typedValue(typed('json_value', { json_value: '{"a":[1,2.5]}' })), { a: [1, 2.5] });
  const inner = { elements: [typed('int_value', { int_value: '1' }), typed('null_value', { null_value: true })] };
  assert.deepStrictEqual(walfeed.typedValue(typed('array_value', { array_value: {
    elements: [typed('array_value', { array_value: inner })] } })), [[1, null]]);
  assert.deepStrictEqual(walfeed.typedValue(typed('interval_value', {
    interval_value: { months: 14, days: -3, micros: '1' } })), new walfeed.Interval(14, -3, 1));
  assert.strictEqual(walfeed.columnValue({ kind: 'VALUE_KIND_UNCHANGED_TOAST' }), walfeed.UNCHANGED);
  assert.strictEqual(walfeed.columnValue({ kind: 'VALUE_KIND_NULL' }), null);
  assert.strictEqual(walfeed.columnValue({ kind: 'VALUE_KIND_TEXT', text: 'sad', typed: null }), 'sad');
});

test('full and compact events give the same rows, and transactions group', () => {
  const int = (n) => ({ kind: 'VALUE_KIND_TEXT', text: '', typed: typed('int_value', { int_value: String(n) }) });
  const full = { id: '0/10:0', op: 'OPERATION_UPDATE', schema: 'public', table: 't', relation_ref: 0,
    new_values: [{ ...int(2), name: 'id' }, { kind: 'VALUE_KIND_NULL', name: 'v', typed: null }],
    old_values: [{ ...int(1), name: 'id' }], old_values_kind: 'OLD_VALUES_KEY', last_in_transaction: true };
  const shape = { ref: 7, schema: 'public', table: 't',
    columns: [{ name: 'v0', key: false }, { name: 'id', key: true }] };
  const compact = { id: '0/10:0', op: 'OPERATION_UPDATE', schema: '', table: '', relation_ref: 7,
    new_values: [{ kind: 'VALUE_KIND_NULL', typed: null }, int(2)], old_values: [int(1)],
    old_values_kind: 'OLD_VALUES_KEY', last_in_transaction: false };
  const a = new walfeed.Change(full, null);
  const b = new walfeed.Change(compact, shape);
  assert.deepStrictEqual([a.op, a.row, a.old], ['UPDATE', { id: 2, v: null }, { id: 1 }]);
  assert.deepStrictEqual([b.schema, b.row, b.old], ['public', { v0: null, id: 2 }, { id: 1 }]);
  const batch = walfeed.Batch.from([compact, full, compact], (e) => new walfeed.Change(e, shape));
  assert.deepStrictEqual(batch.transactions().map((t) => t.length), [2, 1]);
  assert.throws(() => walfeed.AckPolicy.every(0), RangeError);
  assert.throws(() => new walfeed.Subscriber({ server: 'x:1', stream: 's', consumer: 'c', valueForm: 'binary' }));
});
