package disk

import "encoding/binary"

// Key prefixes; doc.go describes the layout. Numbers in keys are 8-byte big-endian so that
// byte order is numeric order.
const (
	prefixNextID     = 'N' // N → the highest id handed out
	prefixTopic      = 'T' // T name → topic definition
	prefixSub        = 'S' // S topicID name → subscription definition
	prefixJournal    = 'J' // J topicID lastSeq → journal block (format 2) or entry (format 1)
	prefixFloor      = 'F' // F topicID → highest trimmed seq
	prefixCursor     = 'C' // C subID → cursor
	prefixParked     = 'P' // P subID seq → parked event
	prefixProbation  = 'B' // B subID → probation state
	prefixDeadLetter = 'D' // D id → dead-letter outbox record
	prefixKeyCheck   = 'K' // K → the secret key check (secret.go)
	prefixHistory    = 'H' // H subID eventID → an event's delivery history (history.go)
	prefixFormat     = 'V' // V → the store's format version (format.go)
)

var (
	nextIDKey   = []byte{prefixNextID}
	keyCheckKey = []byte{prefixKeyCheck}
)

// nameKey returns prefix + name.
func nameKey(prefix byte, name string) []byte {
	k := make([]byte, 1, 1+len(name))
	k[0] = prefix
	return append(k, name...)
}

// idKey returns prefix + id, a 9-byte key and the common prefix of id's keys under prefix.
func idKey(prefix byte, id uint64) []byte {
	k := make([]byte, 9, 17)
	k[0] = prefix
	binary.BigEndian.PutUint64(k[1:], id)
	return k
}

// subDefKey returns S + topicID + name.
func subDefKey(topicID uint64, name string) []byte {
	return append(idKey(prefixSub, topicID), name...)
}

// seqKey returns prefix + id + seq.
func seqKey(prefix byte, id, seq uint64) []byte {
	return binary.BigEndian.AppendUint64(idKey(prefix, id), seq)
}

// idOf returns the id of a key made by idKey, seqKey or subDefKey.
func idOf(key []byte) uint64 { return binary.BigEndian.Uint64(key[1:9]) }

// seqOf returns the seq of a key made by seqKey.
func seqOf(key []byte) uint64 { return binary.BigEndian.Uint64(key[9:]) }

// idRange returns the bounds [lo, hi) of every key under prefix + id. ids are below
// math.MaxUint64 (they count up from 1), so id+1 does not wrap.
func idRange(prefix byte, id uint64) (lo, hi []byte) {
	return idKey(prefix, id), idKey(prefix, id+1)
}

func encodeUint64(v uint64) []byte { return binary.BigEndian.AppendUint64(nil, v) }

func decodeUint64(b []byte) (uint64, bool) {
	if len(b) != 8 {
		return 0, false
	}
	return binary.BigEndian.Uint64(b), true
}
