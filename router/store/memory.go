package store

import (
	"bytes"
	"cmp"
	"context"
	"fmt"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/egridio/egrid/schemas"
)

// Memory is a [Store] that keeps everything in memory. It is what tests and embedders that do
// not need durability use; it loses everything when the process ends. The zero value is not
// usable: call [NewMemory].
type Memory struct {
	mu          sync.Mutex
	topics      map[string]*memTopic
	deadLetters map[string][]byte // the dead-letter outbox, payloads by ID
	epochs      uint64            // the highest subscription epoch given out
	closed      bool
}

type memTopic struct {
	spec    []byte
	journal []Entry // ordered by Seq, contiguous
	last    uint64
	subs    map[string]*memSub
}

type memSub struct {
	epoch     uint64
	spec      []byte
	cursor    uint64
	parked    map[uint64]Parked
	probation []byte                   // nil when none
	history   map[string]HistoryRecord // by event id; nil until the first PutHistory
}

// NewMemory returns an empty in-memory store.
func NewMemory() *Memory {
	return &Memory{topics: make(map[string]*memTopic), deadLetters: make(map[string][]byte)}
}

func (m *Memory) topic(name string) (*memTopic, error) {
	if m.closed {
		return nil, ErrClosed
	}
	t, ok := m.topics[name]
	if !ok {
		return nil, fmt.Errorf("topic %q: %w", name, ErrNotFound)
	}
	return t, nil
}

// Append implements [Store].
func (m *Memory) Append(_ context.Context, topic string, publishTime time.Time, events []*schemas.Event) (uint64, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	t, err := m.topic(topic)
	if err != nil {
		return 0, err
	}
	for _, ev := range events {
		t.last++
		t.journal = append(t.journal, Entry{Seq: t.last, PublishTime: publishTime, Event: ev})
	}
	return t.last, nil
}

// Read implements [Store].
func (m *Memory) Read(_ context.Context, topic string, from uint64, max int) ([]Entry, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	t, err := m.topic(topic)
	if err != nil {
		return nil, err
	}
	if max <= 0 {
		return nil, nil
	}
	i := sort.Search(len(t.journal), func(i int) bool { return t.journal[i].Seq >= from })
	j := min(len(t.journal), i+max)
	return slices.Clone(t.journal[i:j]), nil
}

// LastSeq implements [Store].
func (m *Memory) LastSeq(_ context.Context, topic string) (uint64, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	t, err := m.topic(topic)
	if err != nil {
		return 0, err
	}
	return t.last, nil
}

// Trim implements [Store].
func (m *Memory) Trim(_ context.Context, topic string, through uint64) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	t, err := m.topic(topic)
	if err != nil {
		return err
	}
	i := sort.Search(len(t.journal), func(i int) bool { return t.journal[i].Seq > through })
	t.journal = slices.Clone(t.journal[i:])
	return nil
}

// Cursors implements [Store].
func (m *Memory) Cursors(_ context.Context, topic string) (map[string]uint64, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	t, err := m.topic(topic)
	if err != nil {
		return nil, err
	}
	cursors := make(map[string]uint64, len(t.subs))
	for name, s := range t.subs {
		cursors[name] = s.cursor
	}
	return cursors, nil
}

func (m *Memory) sub(topic, name string) (*memSub, error) {
	t, err := m.topic(topic)
	if err != nil {
		return nil, err
	}
	s, ok := t.subs[name]
	if !ok {
		return nil, fmt.Errorf("subscription %q of topic %q: %w", name, topic, ErrNotFound)
	}
	return s, nil
}

// LoadSubscription implements [Store].
func (m *Memory) LoadSubscription(_ context.Context, topic, name string) (SubscriptionState, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	s, err := m.sub(topic, name)
	if err != nil {
		return SubscriptionState{}, err
	}
	st := SubscriptionState{Epoch: s.epoch, Cursor: s.cursor, Probation: slices.Clone(s.probation)}
	for _, p := range s.parked {
		st.Parked = append(st.Parked, p)
	}
	slices.SortFunc(st.Parked, func(a, b Parked) int { return cmp.Compare(a.Seq, b.Seq) })
	return st, nil
}

// LoadSubscriptionIndex implements [Store].
func (m *Memory) LoadSubscriptionIndex(ctx context.Context, topic, name string) (SubscriptionState, error) {
	st, err := m.LoadSubscription(ctx, topic, name)
	for i := range st.Parked {
		st.Parked[i].Event = nil
	}
	return st, err
}

// ParkedEvents implements [Store].
func (m *Memory) ParkedEvents(_ context.Context, topic, name string, seqs []uint64) ([]Parked, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	s, err := m.sub(topic, name)
	if err != nil {
		return nil, err
	}
	out := make([]Parked, 0, len(seqs))
	for _, seq := range seqs {
		if p, ok := s.parked[seq]; ok {
			out = append(out, p)
		}
	}
	slices.SortFunc(out, func(a, b Parked) int { return cmp.Compare(a.Seq, b.Seq) })
	return slices.CompactFunc(out, func(a, b Parked) bool { return a.Seq == b.Seq }), nil
}

// UpdateSubscription implements [Store].
func (m *Memory) UpdateSubscription(_ context.Context, topic, name string, u Update) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	s, err := m.sub(topic, name)
	if err != nil {
		return err
	}
	if u.Epoch != 0 && u.Epoch != s.epoch {
		return fmt.Errorf("subscription %q of topic %q: %w", name, topic, ErrStaleEpoch)
	}
	if u.Cursor > s.cursor {
		s.cursor = u.Cursor
	}
	for _, seq := range u.Delete {
		delete(s.parked, seq)
	}
	for _, p := range u.Put {
		s.parked[p.Seq] = p
	}
	switch {
	case u.Probation == nil:
	case len(u.Probation) == 0:
		s.probation = nil
	default:
		s.probation = slices.Clone(u.Probation)
	}
	for _, r := range u.DeadLetters {
		m.deadLetters[r.ID] = slices.Clone(r.Payload)
	}
	return nil
}

// PutTopic implements [Store].
func (m *Memory) PutTopic(_ context.Context, name string, spec []byte) error {
	return m.putTopic(name, spec, false)
}

// CreateTopic implements [Store].
func (m *Memory) CreateTopic(_ context.Context, name string, spec []byte) error {
	return m.putTopic(name, spec, true)
}

// putTopic is PutTopic, or CreateTopic when create is set.
func (m *Memory) putTopic(name string, spec []byte, create bool) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed {
		return ErrClosed
	}
	if t, ok := m.topics[name]; ok {
		if create {
			return fmt.Errorf("topic %q: %w", name, ErrExists)
		}
		t.spec = slices.Clone(spec)
		return nil
	}
	m.topics[name] = &memTopic{spec: slices.Clone(spec), subs: make(map[string]*memSub)}
	return nil
}

// DeleteTopic implements [Store].
func (m *Memory) DeleteTopic(_ context.Context, name string) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if _, err := m.topic(name); err != nil {
		return err
	}
	delete(m.topics, name)
	return nil
}

// Topics implements [Store].
func (m *Memory) Topics(_ context.Context) ([]Definition, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed {
		return nil, ErrClosed
	}
	defs := make([]Definition, 0, len(m.topics))
	for name, t := range m.topics {
		defs = append(defs, Definition{Name: name, Spec: slices.Clone(t.spec)})
	}
	slices.SortFunc(defs, func(a, b Definition) int { return strings.Compare(a.Name, b.Name) })
	return defs, nil
}

// PutSubscription implements [Store].
func (m *Memory) PutSubscription(_ context.Context, topic, name string, spec []byte) error {
	return m.putSubscription(topic, name, spec, false)
}

// CreateSubscription implements [Store].
func (m *Memory) CreateSubscription(_ context.Context, topic, name string, spec []byte) error {
	return m.putSubscription(topic, name, spec, true)
}

// putSubscription is PutSubscription, or CreateSubscription when create is set.
func (m *Memory) putSubscription(topic, name string, spec []byte, create bool) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	t, err := m.topic(topic)
	if err != nil {
		return err
	}
	if s, ok := t.subs[name]; ok {
		if create {
			return fmt.Errorf("subscription %q of topic %q: %w", name, topic, ErrExists)
		}
		s.spec = slices.Clone(spec)
		return nil
	}
	m.epochs++
	t.subs[name] = &memSub{epoch: m.epochs, spec: slices.Clone(spec), cursor: t.last, parked: make(map[uint64]Parked)}
	return nil
}

// SwapSubscription implements [Store].
func (m *Memory) SwapSubscription(_ context.Context, topic, name string, old, spec []byte) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	t, err := m.topic(topic)
	if err != nil {
		return err
	}
	s, ok := t.subs[name]
	if !ok {
		return fmt.Errorf("subscription %q of topic %q: %w", name, topic, ErrNotFound)
	}
	if !bytes.Equal(s.spec, old) {
		return fmt.Errorf("subscription %q of topic %q: %w", name, topic, ErrChanged)
	}
	s.spec = slices.Clone(spec)
	return nil
}

// DeleteSubscription implements [Store].
func (m *Memory) DeleteSubscription(_ context.Context, topic, name string) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	t, err := m.topic(topic)
	if err != nil {
		return err
	}
	if _, ok := t.subs[name]; !ok {
		return fmt.Errorf("subscription %q of topic %q: %w", name, topic, ErrNotFound)
	}
	delete(t.subs, name)
	return nil
}

// Subscriptions implements [Store].
func (m *Memory) Subscriptions(_ context.Context, topic string) ([]Definition, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	t, err := m.topic(topic)
	if err != nil {
		return nil, err
	}
	defs := make([]Definition, 0, len(t.subs))
	for name, s := range t.subs {
		defs = append(defs, Definition{Name: name, Spec: slices.Clone(s.spec), Life: s.epoch})
	}
	slices.SortFunc(defs, func(a, b Definition) int { return strings.Compare(a.Name, b.Name) })
	return defs, nil
}

// Close implements [Store].
func (m *Memory) Close() error {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.closed = true
	return nil
}

// PutDeadLetters implements [Store].
func (m *Memory) PutDeadLetters(_ context.Context, recs []DeadLetterRecord) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed {
		return ErrClosed
	}
	for _, r := range recs {
		m.deadLetters[r.ID] = slices.Clone(r.Payload)
	}
	return nil
}

// DeadLetters implements [Store].
func (m *Memory) DeadLetters(_ context.Context) ([]DeadLetterRecord, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed {
		return nil, ErrClosed
	}
	recs := make([]DeadLetterRecord, 0, len(m.deadLetters))
	for id, p := range m.deadLetters {
		recs = append(recs, DeadLetterRecord{ID: id, Payload: slices.Clone(p)})
	}
	slices.SortFunc(recs, func(a, b DeadLetterRecord) int { return strings.Compare(a.ID, b.ID) })
	return recs, nil
}

// ScanDeadLetters implements [Store]. It calls fn without holding the store's lock, with a
// copy of one payload at a time.
func (m *Memory) ScanDeadLetters(ctx context.Context, fn func(DeadLetterRecord) error) error {
	m.mu.Lock()
	if m.closed {
		m.mu.Unlock()
		return ErrClosed
	}
	// The payloads are never changed in place (a Put replaces them): the references are
	// enough, and copying each only when it is given keeps one copy at a time.
	recs := make([]DeadLetterRecord, 0, len(m.deadLetters))
	for id, p := range m.deadLetters {
		recs = append(recs, DeadLetterRecord{ID: id, Payload: p})
	}
	m.mu.Unlock()
	for i, r := range recs {
		if err := ctx.Err(); err != nil {
			return err
		}
		recs[i] = DeadLetterRecord{} // let the reference go with the copy
		if err := fn(DeadLetterRecord{ID: r.ID, Payload: slices.Clone(r.Payload)}); err != nil {
			return err
		}
	}
	return nil
}

// DeadLettersByID implements [Store].
func (m *Memory) DeadLettersByID(_ context.Context, ids []string) ([]DeadLetterRecord, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed {
		return nil, ErrClosed
	}
	recs := make([]DeadLetterRecord, 0, len(ids))
	for _, id := range ids {
		if p, ok := m.deadLetters[id]; ok {
			recs = append(recs, DeadLetterRecord{ID: id, Payload: slices.Clone(p)})
		}
	}
	return sortedDeadLetters(recs), nil
}

// sortedDeadLetters orders recs by ID and drops repeats of an ID.
func sortedDeadLetters(recs []DeadLetterRecord) []DeadLetterRecord {
	slices.SortFunc(recs, func(a, b DeadLetterRecord) int { return strings.Compare(a.ID, b.ID) })
	return slices.CompactFunc(recs, func(a, b DeadLetterRecord) bool { return a.ID == b.ID })
}

// DeleteDeadLetters implements [Store].
func (m *Memory) DeleteDeadLetters(_ context.Context, ids []string) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed {
		return ErrClosed
	}
	for _, id := range ids {
		delete(m.deadLetters, id)
	}
	return nil
}

var _ Store = (*Memory)(nil)
