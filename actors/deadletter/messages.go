package deadletter

import (
	"time"

	"github.com/egridio/egrid/actors"
	"github.com/egridio/egrid/schemas"
	"github.com/egridio/egrid/sinks"
)

// Target says where and how one subscription's dead letters are written.
type Target struct {
	// Bucket is the subscription's blobContainerName.
	Bucket string
	// Prefix starts every object key: see [Prefix].
	Prefix string
	// Format is the record layout (SPEC §5).
	Format schemas.DeadLetterFormat
	// Notify asks for a notification ([Config.OnWritten]) once an object is written.
	Notify bool
}

// Enqueue hands the dead-letter actor one event that ended without delivery.
type Enqueue struct {
	Letter *actors.DeadLetter
	Target Target
}

// Flush asks the dead-letter actor to write every record now, whatever its delay or
// back-off (the router's shutdown does this). The answer, a *[Status], comes once no
// write is running any more; records whose write failed are still counted in it. One that
// arrives while the actor reads its outbox (at start) flushes once the outbox is in. At most
// [MaxFlushers] wait for their answer at once: another Flush still writes everything now, but
// is answered at once, with the status of that instant.
type Flush struct{}

// MaxFlushers bounds the [Flush] requests the dead-letter actor keeps waiting for their answer:
// a caller that asks again and again while the object store hangs grows nothing.
const MaxFlushers = 64

// MaxEarlyRecords bounds the records the dead-letter actor keeps while it reads its outbox at
// start. Records arriving meanwhile (an [Enqueue], a subscription's hand-off, an adoption) are
// put in the outbox at once, when not there already; past MaxEarlyRecords those already in the
// outbox are let go, and the actor reads the outbox again once the first read is in, taking
// in the records it does not know yet, before it writes any (its memory then grows with the
// pending records, by their metadata, as after its start). A record whose put is still under
// way is kept: it is in no other place.
const MaxEarlyRecords = 4096

// GetStatus asks the dead-letter actor for its state; the answer is a
// *[Status]. It is answered at once, also while the actor still reads its outbox at start: the
// answer then says so ([Status.Loading]).
type GetStatus struct{}

// Status is the dead-letter actor's state at one instant.
type Status struct {
	// Waiting counts records waiting out their delay; Writing those in a write now or waiting
	// for one of the [MaxConcurrentWrites]; Retrying those whose write failed and waits for
	// its next try.
	Waiting, Writing, Retrying int
	// ObjectsWritten, RecordsWritten and RecordsDropped count since the actor started.
	ObjectsWritten, RecordsWritten, RecordsDropped int
	// Loading is set while the actor still reads its outbox at start: the answer comes at
	// once, without waiting for the read, and the counts of records (Waiting, Writing,
	// Retrying) are not known yet: they are zero, and say nothing of the outbox.
	Loading bool
	// LoadingSince is when the actor started reading its outbox (zero unless Loading).
	LoadingSince time.Time
}

// Pending counts the records not yet written.
func (s *Status) Pending() int { return s.Waiting + s.Writing + s.Retrying }

// Object describes a written dead-letter object; [Config.OnWritten]
// receives it.
type Object struct {
	Topic, Subscription string
	Target              Target
	Info                sinks.ObjectInfo
	Records             int
}

// Dropped describes dead letters of one subscription the actor dropped together, unwritten;
// [Config.OnDropped] receives it.
type Dropped struct {
	Topic, Subscription string
	// Time is when they were dropped; Why says why, in words (how long the destination
	// failed the writes, or refused them, and how).
	Time time.Time
	Why  string
	// Refused is the store's error code when the destination refused the last write for
	// what it was (sinks.ErrRefused: AccessDenied, say), "" when it was unavailable.
	Refused string
	// EventIDs, Attempts and PublishTimes are, per record, its event's id, delivery attempts
	// and publish time.
	EventIDs     []string
	Attempts     []int
	PublishTimes []time.Time
}

// Record is one dead letter in the outbox. ID is stable for the record's life, so a
// durable outbox can key it.
type Record struct {
	ID     uint64
	Letter *actors.DeadLetter
	Target Target
	// Due is when the record may be written: its event's last attempt plus the delay.
	Due time.Time
	// FirstWriteAttempt is when a write of the record was first tried (zero before); the
	// four-hour limit ([Config.GiveUpAfter]) counts from it, across restarts.
	FirstWriteAttempt time.Time
	// WriteAttempts counts the writes tried.
	WriteAttempts int
	// ObjectKey is the key of the object the record is written in, fixed (with the other records
	// of that object) before the first write is tried. Every later try writes the same object
	// with the same records; after a restart, an object found under the key is kept (its records
	// may have left the outbox in part): a write whose success was not recorded before a crash is
	// neither duplicated nor replaced by part of itself.
	ObjectKey string
	// EventID is the id of the letter's event, and Size bounds the bytes of the record in its
	// object (schemas.DeadLetterSizeBound in Target.Format). The dead-letter actor sets both
	// from the event; an [EventOutbox] gives them with the records it gives without their
	// events.
	EventID string
	Size    int
}
