"""Event ids and LSNs: parsing, printing and ordering.

An event id is "<commit_lsn>:<index>" with the commit LSN in PostgreSQL's X/Y
form (hexadecimal halves of a 64-bit number). Ids order by (LSN, index) as
numbers, never as text: "0/9:0" < "0/10:0" although "0/9" > "0/10" as text.
"""
from typing import NamedTuple

_MAX_LSN = (1 << 64) - 1
_MAX_INDEX = (1 << 32) - 1


def parse_lsn(text):
    """The 64-bit number of an "X/Y" LSN; ValueError for anything else."""
    high, sep, low = text.partition("/")
    if not sep or not high or not low or len(high) > 8 or len(low) > 8:
        raise ValueError(f"not an LSN (X/Y, hexadecimal): {text!r}")
    try:
        return int(high, 16) << 32 | int(low, 16)
    except ValueError:
        raise ValueError(f"not an LSN (X/Y, hexadecimal): {text!r}") from None


def lsn_text(lsn):
    """A 64-bit LSN in PostgreSQL's X/Y text form."""
    if not 0 <= lsn <= _MAX_LSN:
        raise ValueError(f"LSN out of range: {lsn}")
    return f"{lsn >> 32:X}/{lsn & 0xFFFFFFFF:X}"


class EventId(NamedTuple):
    """An event id; compares as (commit LSN, index)."""
    commit_lsn: int
    index: int

    @classmethod
    def parse(cls, text):
        """EventId of "X/Y:N"; ValueError for anything else."""
        lsn, sep, index = text.rpartition(":")
        if not sep or not index.isdigit() or int(index) > _MAX_INDEX:
            raise ValueError(f"not an event id (X/Y:N): {text!r}")
        return cls(parse_lsn(lsn), int(index))

    def __str__(self):
        return f"{lsn_text(self.commit_lsn)}:{self.index}"
