package disk

// TableWrites is what the store's pebble instance wrote to table files, besides its
// write-ahead log: the memtables it flushed and the tables its compactions wrote. Each byte
// published is written once to the log; what is flushed and compacted after is the store's
// write amplification, the disk bandwidth and CPU its background work takes from publishes
// and deliveries (compressed bytes, as the tables hold them).
type TableWrites struct {
	// Flushed is the bytes of the tables flushed from memtables.
	Flushed uint64
	// Compacted is the bytes of the tables compactions wrote.
	Compacted uint64
}

// TableWrites returns the table writes of the store's current pebble instance: since the
// store opened, or since it last reopened itself after a failure, as [Store.LogSyncs] does.
// Subtract an earlier reading ([TableWrites.Sub]) for a stretch of time. It returns the zero
// TableWrites once the store is closed.
func (s *Store) TableWrites() TableWrites {
	c, err := s.enter("", "")
	if err != nil {
		return TableWrites{}
	}
	defer c.done()
	m := c.g.db.Metrics()
	var w TableWrites
	for _, l := range m.Levels {
		w.Flushed += l.TableBytesFlushed
		w.Compacted += l.TableBytesCompacted
	}
	return w
}

// Sub returns the writes of w that earlier, a reading of the same instance, does not hold.
// When earlier holds more than w (the store reopened itself between them), Sub gives w
// itself: the writes since the reopening.
func (w TableWrites) Sub(earlier TableWrites) TableWrites {
	if earlier.Flushed > w.Flushed || earlier.Compacted > w.Compacted {
		return w
	}
	return TableWrites{Flushed: w.Flushed - earlier.Flushed, Compacted: w.Compacted - earlier.Compacted}
}
