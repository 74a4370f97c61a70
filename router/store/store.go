package store

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/egridio/egrid/schemas"
)

// Sentinel errors of every store.
var (
	// ErrNotFound is returned when a topic or subscription has no stored definition.
	ErrNotFound = errors.New("store: not found")
	// ErrClosed is returned by calls after Close.
	ErrClosed = errors.New("store: closed")
	// ErrFenced is returned by a write that lost a compare-and-set race: the stored value
	// (or the journal) moved on since this store last read or wrote it, because another
	// writer (another router node) took it over. Nothing of the failed write is applied
	// except as the contract allows for Append. Stores with a single writer never return it.
	ErrFenced = errors.New("store: fenced: another writer changed the state since it was read")
	// ErrStaleEpoch is returned (wrapped) by UpdateSubscription and PutHistory for a write
	// of an earlier life of a subscription: its epoch ([Update.Epoch]) is not the stored
	// subscription's, because the subscription it was decided for was deleted, and one was
	// created again under the name, since its state was loaded. Nothing of the write is
	// applied. It wraps ErrNotFound (the subscription the write was for is gone), so whoever
	// drops the writes of a deleted subscription drops it too.
	ErrStaleEpoch = fmt.Errorf("store: the subscription was deleted and created again since its state was loaded: %w", ErrNotFound)
	// ErrChanged is returned (wrapped) by SwapSubscription when the stored definition is not
	// the one the caller read: another writer (another router node) replaced it since.
	// Nothing is written.
	ErrChanged = errors.New("store: the definition changed since it was read")
	// ErrExists is returned (wrapped) by CreateTopic and CreateSubscription when the name
	// holds a definition already: another writer (another router node) created it since the
	// caller found none. Nothing is written, so the create that came first stands.
	ErrExists = errors.New("store: the name holds a definition already")
	// ErrDamaged is returned (wrapped) by PutTopic, PutSubscription, CreateTopic and
	// CreateSubscription for a name whose stored definition the store found damaged: the name
	// stays taken by the damaged remains, which are not served, until DeleteTopic or DeleteSubscription removes them
	// (then the name can be created again) or the store is restored from a backup. The
	// error says which. Nothing is written.
	ErrDamaged = errors.New("store: the stored definition is damaged")
	// ErrCorrupt is wrapped by the errors of calls that met damaged stored data: a disk
	// block that fails its checksum, or a value that does not decode (the disk store's
	// disk.ErrCorrupt, the JetStream store's undecodable values). Retrying does not help:
	// the data stays damaged until the store is restored from a backup, and egrid store
	// check lists the damage. The router answers it as damage, saying what is lost and what
	// to do, never as a store to retry (router.ErrHistoryDamaged for a delivery history).
	//
	// It is not [ErrDamaged]: that one is the refusal of PutTopic and PutSubscription to
	// create a name whose definition is damaged, which the router answers 409 with the
	// remedy of deleting the name first; damage elsewhere (a journal block, a delivery
	// history, a failed store's stuck compaction) is no such refusal, and deleting the name
	// does not mend it. A damaged definition's refusal matches both.
	ErrCorrupt = errors.New("store: stored data is damaged")
)

// CorruptSentinel returns a new sentinel error with message msg that matches [ErrCorrupt]
// under errors.Is: a store's own sentinel for damage (the disk store's disk.ErrCorrupt),
// whose message stays its own.
func CorruptSentinel(msg string) error { return &corruptSentinel{msg} }

type corruptSentinel struct{ msg string }

func (e *corruptSentinel) Error() string        { return e.msg }
func (e *corruptSentinel) Is(target error) bool { return target == ErrCorrupt }

// DamageProber is implemented by stores shared by several nodes, where a name one node does
// not run may be one another node created a moment ago: DefinitionDamaged reports whether the
// definition stored under the topic (sub "") or the subscription is there but does not
// decode, the one case where deleting a name the node does not know is the operator's way to
// free it ([ErrDamaged]), and DeleteDamaged deletes it then. Between the two another node may
// have written a definition that reads under the name: the delete is checked against the
// damaged value the probe found, so it never deletes that one.
type DamageProber interface {
	// DefinitionDamaged reports whether the definition stored under the topic (sub "") or
	// the subscription does not decode and, when it does not, the revision of that value,
	// for DeleteDamaged.
	DefinitionDamaged(ctx context.Context, topic, sub string) (damaged bool, rev uint64, err error)
	// DeleteDamaged deletes the topic (sub "") or the subscription, as DeleteTopic or
	// DeleteSubscription do, only while its stored definition is the damaged value of
	// revision rev that DefinitionDamaged found. When another writer (another node) replaced
	// or deleted that value since, it deletes nothing and returns an error wrapping
	// [ErrChanged], or [ErrNotFound] when the name holds nothing any more.
	DeleteDamaged(ctx context.Context, topic, sub string, rev uint64) error
}

// Entry is one journal entry. A Read may return an entry without an Event: a position of the
// journal that holds no event the store wrote (the JetStream store's journal subject carries
// a message something else published there), which the store passed over. Readers move their
// cursor past it and take nothing from it.
type Entry struct {
	Seq         uint64
	PublishTime time.Time
	Event       *schemas.Event // nil for a position passed over
}

// Parked is an event a subscription will attempt again later.
type Parked struct {
	Seq          uint64
	PublishTime  time.Time
	Event        *schemas.Event
	Attempts     int             // attempts made so far
	FirstAttempt time.Time       // time of the first attempt
	LastAttempt  time.Time       // time of the latest attempt
	NextDue      time.Time       // when the next attempt is due
	LastOutcome  schemas.Outcome // outcome of the latest attempt
	LastStatus   int             // HTTP status of the latest attempt, 0 if none
}

// SubscriptionState is what a subscription actor reloads after a restart.
type SubscriptionState struct {
	// Epoch identifies this life of the subscription: the store gives a subscription a new,
	// non-zero epoch when PutSubscription creates it, keeps it while PutSubscription replaces
	// the definition, and never gives the name an epoch it had before (a store-wide counter
	// or a random 64-bit value). A writer sets it in each [Update.Epoch], so that a write
	// decided for a subscription since deleted cannot change one created again under its
	// name.
	Epoch  uint64
	Cursor uint64
	Parked []Parked // ordered by Seq
	// Probation is the subscription's probation state as last written by
	// [Update.Probation], nil when none was or it was cleared. The store treats it as opaque:
	// the subscription actor encodes it.
	Probation []byte
}

// Update changes a subscription's state atomically: either all of it is applied or none.
type Update struct {
	// Epoch, when non-zero, is the [SubscriptionState.Epoch] of the subscription the update
	// was decided for, as loaded: when the stored subscription's epoch is another (the
	// subscription was deleted and created again since), nothing of the update is applied
	// and UpdateSubscription returns an error wrapping [ErrStaleEpoch]. Zero applies the
	// update to whichever subscription holds the name; the subscription actors always set
	// it, since their writes can land after their subscription was deleted.
	Epoch uint64
	// Cursor, when non-zero, is the new cursor. A cursor never moves backwards: a lower value
	// is ignored.
	Cursor uint64
	// Put adds or replaces parked events (by Seq).
	Put []Parked
	// Delete removes parked events by Seq; unknown ones are ignored.
	Delete []uint64
	// Probation, when non-nil, replaces the subscription's stored probation state (opaque to
	// the store); an empty non-nil slice clears it. nil leaves it unchanged.
	Probation []byte
	// DeadLetters are dead-letter outbox records to add or replace (by ID, as PutDeadLetters)
	// in the same atomic write: a subscription settles the events it ends and hands them to
	// the outbox in one update, so no crash can fall between the two. An update with
	// DeadLetters is durable when it returns (synced, like PutDeadLetters) — except on a
	// store that keeps state writes in memory while it cannot write (a full disk): there
	// the dead letters stay with their settlement, and a crash loses both together.
	DeadLetters []DeadLetterRecord
	// Sync makes the update durable when it returns, like one carrying DeadLetters: a queue
	// subscription syncs the receipts, acknowledgements and releases it answers consumers
	// for, so a crash never hands out an acknowledged event again nor forgets a delivery
	// count (eventgrid-behaviour.md §9). The disk store commits such an update with a sync;
	// a JetStream store's acknowledged writes are already as durable as JetStream makes them,
	// and the memory store has nothing to sync.
	Sync bool
}

// DeadLetterRecord is one record of the router's dead-letter outbox: a dead letter waiting to
// be written to its destination. The store treats Payload as opaque (the dead-letter actor
// encodes it) and keys it by ID, which the actor keeps stable for the record's life.
type DeadLetterRecord struct {
	ID      string
	Payload []byte
}

// HistoryRecord is the delivery history of one event of one subscription, kept so that an
// operator can ask why the event went where it did (`egrid explain`). The store treats
// Payload as opaque (the router encodes it) and keys it by subscription and EventID.
type HistoryRecord struct {
	EventID string
	// Expires is when the record may be forgotten: [Store.History] does not return it from
	// then on and [Store.ExpireHistory] deletes it.
	Expires time.Time
	Payload []byte
}

// Definition is a stored topic or subscription definition. The store treats Spec as opaque.
type Definition struct {
	Name string
	Spec []byte
	// Life tells the lives of a subscription's name apart: a subscription definition listed
	// by [Store.Subscriptions] carries its [SubscriptionState.Epoch]. It is zero where the
	// store does not tell (a topic definition; a store one node alone opens, as the disk
	// store, need not tell), and a reader then compares nothing. A cluster
	// node compares it with the life its subscription actor was built from, so that a
	// subscription deleted and created again with the same definition while the node missed
	// the changes is started again from its new state, not left running on the old one.
	Life uint64
}

// Store is the durable state of a router.
//
// Journal reads never run ahead of a gap: Read and LastSeq stop before a sequence number whose
// Append has not finished. A failed Append may still be on disk (publishers retry, so
// duplicates are possible: delivery is at least once). After a crash, numbers that were never
// acknowledged may leave a hole in the journal or be handed out again.
//
// All methods are safe for concurrent use. Append is durable when it returns nil (synced to
// stable storage for a disk store); concurrent Appends may share one sync. Other writes are
// applied in order and survive a clean Close; after a crash a store may lose the latest
// UpdateSubscription (unless it carried [Update.DeadLetters]) and Trim calls but never reorders
// writes and never loses an
// acknowledged Append: a Trim kept after a crash comes with every cursor it was based on.
// Returned slices and events are owned by the caller and must not be modified.
type Store interface {
	// Append adds events to a topic's journal and returns the sequence number of the last one
	// (the first is last-len(events)+1). The topic must exist (PutTopic).
	Append(ctx context.Context, topic string, publishTime time.Time, events []*schemas.Event) (last uint64, err error)
	// Read returns up to max journal entries with Seq >= from, in order (some possibly
	// without an Event: see [Entry]).
	Read(ctx context.Context, topic string, from uint64, max int) ([]Entry, error)
	// LastSeq returns the sequence number of the newest entry (0 when the journal is empty).
	LastSeq(ctx context.Context, topic string) (uint64, error)
	// Trim deletes journal entries with Seq <= through. Callers trim in coarse steps (a disk
	// store writes one range deletion per call) and never past the lowest of [Store.Cursors]:
	// the router's trimmer decides when (router/trim.go).
	Trim(ctx context.Context, topic string, through uint64) error
	// Cursors returns the cursor of every subscription of a topic, by subscription name: an
	// empty map when the topic has none. It reflects every UpdateSubscription that returned,
	// synced or not, and costs no disk read, so it can be asked often. Every journal entry up
	// to the lowest cursor is settled for every subscription, so the journal can be trimmed up
	// to it (up to LastSeq when there is no subscription). A subscription created after the
	// call starts at LastSeq (PutSubscription), so a bound taken from LastSeq read before
	// Cursors stays safe while subscriptions are being created.
	Cursors(ctx context.Context, topic string) (map[string]uint64, error)

	// LoadSubscription returns a subscription's epoch, cursor, parked events and probation
	// state (zero state when new, but for its epoch and cursor).
	LoadSubscription(ctx context.Context, topic, sub string) (SubscriptionState, error)
	// LoadSubscriptionIndex is LoadSubscription without the parked events' bodies: every
	// Parked has a nil Event and the rest of its fields set. A subscription actor starts from
	// it and reads the bodies with ParkedEvents when the events come due, so a restart with a
	// million parked events neither reads nor holds their bodies.
	LoadSubscriptionIndex(ctx context.Context, topic, sub string) (SubscriptionState, error)
	// ParkedEvents returns, ordered by Seq and with their events, the parked events among seqs
	// (in any order); a seq that is not parked (any more) is left out.
	ParkedEvents(ctx context.Context, topic, sub string, seqs []uint64) ([]Parked, error)
	// UpdateSubscription applies u atomically. An update of another epoch than the
	// subscription's ([Update.Epoch]) applies nothing and fails with [ErrStaleEpoch].
	UpdateSubscription(ctx context.Context, topic, sub string, u Update) error

	// PutTopic creates or replaces a topic definition.
	PutTopic(ctx context.Context, name string, spec []byte) error
	// CreateTopic creates a topic as PutTopic does, only if the name holds no definition, in
	// one atomic step with the check (create-if-absent): when it holds one it writes nothing
	// and returns an error wrapping [ErrExists] (or [ErrDamaged], as PutTopic, when that one
	// is damaged). The router creates the topics it does not know with it, so that of two
	// cluster nodes creating one name at once exactly one create is stored and the other
	// learns that it lost, instead of replacing the definition the first one answered.
	CreateTopic(ctx context.Context, name string, spec []byte) error
	// DeleteTopic removes a topic with its journal, subscriptions and their state. It also
	// removes a topic whose stored definition is damaged (PutTopic refuses its name with
	// [ErrDamaged]), with what can be told to be stored under it.
	DeleteTopic(ctx context.Context, name string) error
	// Topics lists the topic definitions, ordered by name.
	Topics(ctx context.Context) ([]Definition, error)
	// PutSubscription creates or replaces a subscription definition. A new subscription's
	// cursor starts at the topic's current LastSeq: it sees only events published after it,
	// and it gets a new [SubscriptionState.Epoch]; a replaced one keeps its state and epoch.
	PutSubscription(ctx context.Context, topic, name string, spec []byte) error
	// CreateSubscription creates a subscription as PutSubscription does (its cursor at the
	// topic's LastSeq, a new epoch), only if the name holds no definition, in one atomic step
	// with the check (create-if-absent): when it holds one it writes nothing and returns an
	// error wrapping [ErrExists] (or [ErrDamaged], as PutSubscription, when that one is
	// damaged); when the topic has no definition, one wrapping [ErrNotFound]. The router
	// creates a subscription it found absent with it, so that another node's create landing
	// between that read and this write stands and this one is answered as the create that
	// lost (409, or success for the same definition), never written over it.
	CreateSubscription(ctx context.Context, topic, name string, spec []byte) error
	// SwapSubscription replaces an existing subscription's definition with spec only if the
	// stored one is old, byte for byte, in one atomic step (compare-and-swap): its state and
	// epoch stay, as with PutSubscription. When the stored definition is another it writes
	// nothing and returns an error wrapping [ErrChanged]; when the topic or the subscription
	// has none, one wrapping [ErrNotFound]. A change to the subscription's state meanwhile
	// ([Store.UpdateSubscription]) does not fail it. The router changes a definition that
	// several cluster nodes may change at once with it: the end of a manual validation, and
	// the update of a subscription once its endpoint's handshake passed (another node may
	// have updated or deleted it meanwhile).
	SwapSubscription(ctx context.Context, topic, name string, old, spec []byte) error
	// DeleteSubscription removes a subscription with its state. It also removes one whose
	// stored definition is damaged (PutSubscription refuses its name with [ErrDamaged]).
	DeleteSubscription(ctx context.Context, topic, name string) error
	// Subscriptions lists a topic's subscription definitions, ordered by name.
	Subscriptions(ctx context.Context, topic string) ([]Definition, error)

	// PutDeadLetters adds or replaces dead-letter outbox records (by ID). It is durable when it
	// returns nil (synced, like Append): a dead letter must outlive a crash.
	PutDeadLetters(ctx context.Context, recs []DeadLetterRecord) error
	// DeadLetters returns every dead-letter outbox record, ordered by ID, all at once: for a
	// listing of a small outbox. A reader that must not hold every record's payload at once
	// (the dead-letter actor's start) uses ScanDeadLetters.
	DeadLetters(ctx context.Context) ([]DeadLetterRecord, error)
	// ScanDeadLetters calls fn with each dead-letter outbox record, one at a time and in no
	// particular order, holding no more than a few payloads at once: a reader keeps what it
	// needs of each (the dead-letter actor, a record's metadata) and never has every payload
	// in memory. A record written or deleted during the scan may or may not be given, and one
	// replaced during it may be given twice, the newer last. The record is fn's to keep; fn
	// must not call the store. An error of fn ends the scan, and ScanDeadLetters returns it
	// as it is.
	ScanDeadLetters(ctx context.Context, fn func(DeadLetterRecord) error) error
	// DeadLettersByID returns the dead-letter outbox records among ids (in any order, repeats
	// allowed), ordered by ID; an id not in the outbox is left out. The dead-letter actor
	// reads the events of one object's records with it when it writes the object.
	DeadLettersByID(ctx context.Context, ids []string) ([]DeadLetterRecord, error)
	// DeleteDeadLetters removes dead-letter outbox records by ID; unknown ones are ignored. It
	// is durable when it returns nil.
	DeleteDeadLetters(ctx context.Context, ids []string) error

	// PutHistory adds or replaces delivery histories of a subscription's events (by EventID).
	// Like UpdateSubscription it is not synced: after a crash the newest may be missing.
	// The subscription must exist; DeleteSubscription and DeleteTopic remove its histories.
	// epoch, when non-zero, is the [SubscriptionState.Epoch] of the subscription the
	// histories were recorded for: when the stored subscription's epoch is another (it was
	// deleted and created again since), nothing is written and the error wraps
	// [ErrStaleEpoch], so a late write of a deleted subscription cannot show up under one
	// created again under its name. The check reads no more than the write did without it.
	// Zero writes to whichever subscription holds the name.
	PutHistory(ctx context.Context, topic, sub string, epoch uint64, recs []HistoryRecord) error
	// History returns the delivery history of one event of a subscription, or an error
	// wrapping ErrNotFound when there is none or it had expired at now.
	History(ctx context.Context, topic, sub, eventID string, now time.Time) (HistoryRecord, error)
	// ExpireHistory deletes every history whose Expires is at or before now, in every topic.
	ExpireHistory(ctx context.Context, now time.Time) error

	// Close releases the store. It is idempotent.
	Close() error
}
