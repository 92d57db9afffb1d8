package walfeed

import (
	"fmt"
	"strconv"
	"strings"
)

// EventID is "<commit_lsn>:<index>", the LSN in PostgreSQL's X/Y form. Ids
// order by (LSN, index) as numbers, never as text: "0/9:0" < "0/10:0".
type EventID struct {
	CommitLSN uint64
	Index     uint32
}

// ParseLSN reads an "X/Y" LSN.
func ParseLSN(text string) (uint64, error) {
	high, low, ok := strings.Cut(text, "/")
	h, err1 := strconv.ParseUint(high, 16, 32)
	l, err2 := strconv.ParseUint(low, 16, 32)
	if !ok || err1 != nil || err2 != nil {
		return 0, fmt.Errorf("not an LSN (X/Y, hexadecimal): %q", text)
	}
	return h<<32 | l, nil
}

// LSNText prints an LSN in PostgreSQL's X/Y form.
func LSNText(lsn uint64) string { return fmt.Sprintf("%X/%X", lsn>>32, lsn&0xFFFFFFFF) }

// ParseEventID reads "X/Y:N".
func ParseEventID(text string) (EventID, error) {
	colon := strings.LastIndexByte(text, ':')
	if colon < 0 {
		return EventID{}, fmt.Errorf("not an event id (X/Y:N): %q", text)
	}
	lsn, err := ParseLSN(text[:colon])
	index, err2 := strconv.ParseUint(text[colon+1:], 10, 32)
	if err != nil || err2 != nil || strings.HasPrefix(text[colon+1:], "+") {
		return EventID{}, fmt.Errorf("not an event id (X/Y:N): %q", text)
	}
	return EventID{lsn, uint32(index)}, nil
}

// Compare is <0, 0 or >0 as id sorts before, with or after other.
func (id EventID) Compare(other EventID) int {
	switch {
	case id.CommitLSN != other.CommitLSN && id.CommitLSN < other.CommitLSN:
		return -1
	case id.CommitLSN != other.CommitLSN:
		return 1
	case id.Index < other.Index:
		return -1
	case id.Index > other.Index:
		return 1
	}
	return 0
}

func (id EventID) String() string { return fmt.Sprintf("%s:%d", LSNText(id.CommitLSN), id.Index) }
