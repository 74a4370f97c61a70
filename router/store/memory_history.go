package store

import (
	"context"
	"fmt"
	"slices"
	"time"
)

// PutHistory implements [Store].
func (m *Memory) PutHistory(_ context.Context, topic, sub string, epoch uint64, recs []HistoryRecord) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	s, err := m.sub(topic, sub)
	if err != nil {
		return err
	}
	if epoch != 0 && epoch != s.epoch {
		return fmt.Errorf("history of subscription %q of topic %q: %w", sub, topic, ErrStaleEpoch)
	}
	if s.history == nil {
		s.history = make(map[string]HistoryRecord)
	}
	for _, r := range recs {
		r.Payload = slices.Clone(r.Payload)
		s.history[r.EventID] = r
	}
	return nil
}

// History implements [Store].
func (m *Memory) History(_ context.Context, topic, sub, eventID string, now time.Time) (HistoryRecord, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	s, err := m.sub(topic, sub)
	if err != nil {
		return HistoryRecord{}, err
	}
	r, ok := s.history[eventID]
	if !ok || !now.Before(r.Expires) {
		return HistoryRecord{}, fmt.Errorf("history of event %q of subscription %q of topic %q: %w", eventID, sub, topic, ErrNotFound)
	}
	r.Payload = slices.Clone(r.Payload)
	return r, nil
}

// ExpireHistory implements [Store].
func (m *Memory) ExpireHistory(_ context.Context, now time.Time) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed {
		return ErrClosed
	}
	for _, t := range m.topics {
		for _, s := range t.subs {
			for id, r := range s.history {
				if !now.Before(r.Expires) {
					delete(s.history, id)
				}
			}
		}
	}
	return nil
}
