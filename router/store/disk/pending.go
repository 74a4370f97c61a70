package disk

import (
	"maps"
	"slices"

	"github.com/egridio/egrid/router/store"
)

// While the store is failed (a full disk), every state write is kept in memory until the
// store has reopened itself (Store.pending), and delivery goes on meanwhile: a subscription
// delivering from its journal writes its cursor and its parked events many times a second.
// Kept one by one, those writes grew the heap by some 300 bytes each for as long as the disk
// stayed full. So a write is merged into the one kept before it for the same subscription (or
// the same topic's trim), which then holds what writing both in order would leave: the
// highest cursor, each parked event's last put or delete, the last probation, each dead
// letter's last record, a sync if either asked for one. What is kept then grows with the
// subscriptions and with the distinct events parked, settled or dead-lettered meanwhile, no
// longer with the number of writes.

// mergedUpdate is the updates of one subscription merged (pendingWrite.absorb).
type mergedUpdate struct {
	epoch     uint64
	put       map[uint64]store.Parked
	del       map[uint64]struct{} // never a seq of put
	dl        map[string][]byte
	dlOrder   []string // dl's ids, first put first
	probation []byte
	sync      bool
}

func newMergedUpdate(u store.Update) *mergedUpdate {
	m := &mergedUpdate{epoch: u.Epoch, put: map[uint64]store.Parked{}, del: map[uint64]struct{}{}, dl: map[string][]byte{}}
	m.add(u)
	return m
}

// add applies u after what m holds, as applyPending and buildUpdate apply an update: its
// deletes, then its puts.
func (m *mergedUpdate) add(u store.Update) {
	for _, seq := range u.Delete {
		delete(m.put, seq)
		m.del[seq] = struct{}{}
	}
	for _, p := range u.Put {
		delete(m.del, p.Seq)
		m.put[p.Seq] = p
	}
	for _, d := range u.DeadLetters {
		if _, seen := m.dl[d.ID]; !seen {
			m.dlOrder = append(m.dlOrder, d.ID)
		}
		m.dl[d.ID] = d.Payload
	}
	if u.Probation != nil {
		m.probation = u.Probation
	}
	m.sync = m.sync || u.Sync
}

// update is m as one update, its parked events and deletes in seq order.
func (m *mergedUpdate) update(cursor uint64) store.Update {
	u := store.Update{Epoch: m.epoch, Cursor: cursor, Probation: m.probation, Sync: m.sync}
	u.Delete = slices.Sorted(maps.Keys(m.del))
	for _, seq := range slices.Sorted(maps.Keys(m.put)) {
		u.Put = append(u.Put, m.put[seq])
	}
	for _, id := range m.dlOrder {
		u.DeadLetters = append(u.DeadLetters, store.DeadLetterRecord{ID: id, Payload: m.dl[id]})
	}
	return u
}

// update is the subscription update w writes.
func (w *pendingWrite) update() store.Update {
	if w.merged != nil {
		return w.merged.update(w.u.Cursor)
	}
	return w.u
}

// absorbs reports whether n, a write taken after w, is merged into w: a write of the same
// subscription, or a trim of the same topic.
func (w *pendingWrite) absorbs(n *pendingWrite) bool {
	return w.t == n.t && w.sb == n.sb
}

// absorb merges n, a write taken after w of the same subscription or topic ([absorbs]), into
// w: writing w then leaves the store as writing w and then n would.
func (w *pendingWrite) absorb(n pendingWrite) {
	if w.sb == nil { // trims: one range up to the higher bound
		w.from, w.through = min(w.from, n.from), max(w.through, n.through)
		return
	}
	if w.merged == nil {
		w.merged = newMergedUpdate(w.u)
		w.u = store.Update{Cursor: w.u.Cursor}
	}
	w.merged.add(n.u)
	w.u.Cursor = max(w.u.Cursor, n.u.Cursor)
	w.cursor = max(w.cursor, n.cursor)
}

// keep adds w to the writes kept while the store is failed (s.mu held): merged into the one
// kept for its subscription or topic, if any.
func (s *Store) keep(w pendingWrite) {
	for i := len(s.pending) - 1; i >= 0; i-- {
		if s.pending[i].absorbs(&w) {
			s.pending[i].absorb(w)
			return
		}
	}
	s.pending = append(s.pending, w)
}
