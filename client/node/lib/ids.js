'use strict';
// Event ids ("<commit_lsn>:<index>", the LSN in PostgreSQL's X/Y form) and
// LSNs. Ids order by (LSN, index) as numbers, never as text: "0/9:0" comes
// before "0/10:0". LSNs are BigInts (64 bits).

function parseLsn(text) {
  const match = /^([0-9A-Fa-f]{1,8})\/([0-9A-Fa-f]{1,8})$/.exec(text);
  if (!match) throw new Error(`not an LSN (X/Y, hexadecimal): ${JSON.stringify(text)}`);
  return (BigInt(`0x${match[1]}`) << 32n) | BigInt(`0x${match[2]}`);
}

function lsnText(lsn) {
  const value = BigInt(lsn);
  return `${(value >> 32n).toString(16).toUpperCase()}/${(value & 0xFFFFFFFFn).toString(16).toUpperCase()}`;
}

class EventId {
  constructor(commitLsn, index) {
    this.commitLsn = BigInt(commitLsn);
    this.index = index;
  }

  static parse(text) {
    const colon = text.lastIndexOf(':');
    const index = text.slice(colon + 1);
    if (colon < 0 || !/^[0-9]{1,10}$/.test(index) || Number(index) > 0xFFFFFFFF) {
      throw new Error(`not an event id (X/Y:N): ${JSON.stringify(text)}`);
    }
    return new EventId(parseLsn(text.slice(0, colon)), Number(index));
  }

  // <0, 0 or >0, like a sort comparator.
  compare(other) {
    if (this.commitLsn !== other.commitLsn) return this.commitLsn < other.commitLsn ? -1 : 1;
    return this.index - other.index;
  }

  toString() { return `${lsnText(this.commitLsn)}:${this.index}`; }
}

module.exports = { EventId, lsnText, parseLsn };
