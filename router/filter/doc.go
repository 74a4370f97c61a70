// Package filter implements Event Grid event subscription filters (SPEC.md §3,
// eventgrid-behaviour.md §4): a subscription's ARM "filter" object ([Spec]) is checked and
// compiled once with [Compile] into a [Filter], which the topic actor then asks, event by event,
// whether the event goes to the subscription ([Filter.Match]).
//
// # Model
//
// A filter has up to four kinds of condition, and an event must pass every kind present (they
// are ANDed):
//
//   - includedEventTypes: the event's type (eventType, or CloudEvents type) is one of the list.
//     Absent, null or empty means every type, and so does the legacy list ["All"]. The
//     comparison ignores case, as Event Grid does in practice for event types.
//   - subjectBeginsWith / subjectEndsWith: a literal prefix and suffix of the subject, without
//     wildcards. Both ignore case unless isSubjectCaseSensitive is true.
//   - advancedFilters: each names an operator, a key and one value ("value") or a list
//     ("values"). The values of one filter are ORed; the filters are ANDed. String comparisons
//     always ignore case.
//
// # Keys
//
// Which keys exist depends on the topic's input schema:
//
//   - Event Grid schema: the envelope fields id, topic, subject, eventType, dataVersion and
//     eventTime, or a path into the event data: data, data.key1, data.a.b. Any other key is
//     refused by Compile, because it could never match.
//   - CloudEvents 1.0: the attributes id, source, type, subject, specversion, time, dataschema,
//     datacontenttype, any extension attribute by name, and dotted paths from the top level
//     (data.appinfoA).
//   - Custom schema: as for the Event Grid schema, as Event Grid sees such an event
//     (eventgrid-behaviour.md §2.3, §4.4): data is the whole published object, so data.siteName
//     is its top-level field siteName and data.a.b a path below it, and the envelope fields id,
//     topic, subject, eventType, dataVersion and eventTime are the values inputSchemaMapping
//     gave the event (a generated id, the publish time, a defaultValue), not members of the
//     object. egrid extends this: any other key, and an envelope name with a path below it
//     (subject.x), is a top-level field of the object and dotted paths below it (siteName is
//     data.siteName). An object member named data or like an envelope field is therefore
//     reached only as data.data or data.subject.
//
// A dot always means nesting (Event Grid has no escape for field names containing a dot), and a
// path never walks into an array. Key names ignore case: envelope names outright; in a JSON
// object a field whose name matches the segment exactly is preferred, and otherwise one that
// matches ignoring case is taken, the last of them when there are several (the documentation
// writes both Data.Key1 and data.key1). When an object repeats a name, only its last
// occurrence counts, and an earlier one and everything below it is ignored: RFC 8259 leaves
// duplicates to the implementation, and the decoders receivers use (Go's encoding/json,
// JavaScript's JSON.parse, Python's json, .NET's System.Text.Json) keep the last, so a filter
// that read the first would pass {"amount":1,"amount":1000000} on NumberLessThan 100 to a
// receiver that sees 1000000. A CloudEvents subject or time that is empty counts as absent
// (CloudEvents forbids empty values for them).
//
// # Operators, missing keys and arrays
//
// Every operator of eventgrid-behaviour.md §4.5 is supported. Values are typed: NumberX
// operators see only JSON numbers (the string "5" is not the number 5, so NumberIn [5] does not
// match it and NumberNotIn [5] does), BoolEquals sees only JSON booleans and StringX operators
// only JSON strings (a number is not stringified). A key whose value has another type fails the
// positive operators and passes their Not forms, exactly as an array whose elements all have
// another type does.
//
// A missing key and a JSON null behave the same. They match IsNullOrUndefined, NumberNotIn,
// StringNotIn and NumberNotInRange (decided here by analogy with NumberNotIn; the documentation
// is silent), and nothing else: StringNotContains, StringNotBeginsWith and StringNotEndsWith do
// not match a missing key, as the documentation says.
//
// An array-valued key matches no operator unless enableAdvancedFilteringOnArrays is set. With
// it, the positive operators match when any element matches and the Not operators fail when any
// element would match the positive form; elements whose JSON type differs from the filter's are
// ignored, so an empty array behaves like an array of nothing that matches. IsNotNull and
// IsNullOrUndefined test presence, not content, so they treat an array (even an empty one) as a
// present, non-null value whether or not array filtering is enabled.
//
// # Limits
//
// Compile refuses, naming the filter, more than [MaxAdvancedFilters] advanced filters, more
// than [MaxFilterValues] values across all of them (a [lo, hi] range counts as one value, a
// single "value" as one, IsNullOrUndefined and IsNotNull as none), and string values longer
// than [MaxStringValueLength] characters. Every problem is reported at once.
//
// [CheckSize] bounds the rest of a new definition — subject filters, includedEventTypes, keys
// ([MaxSubjectFilterLength], [MaxIncludedEventTypes], [MaxEventTypeLength], [MaxKeyLength]);
// Compile does not check these, so a definition stored before they existed still compiles.
//
// # Cost
//
// Envelope keys are read from the decoded [schemas.Event] and cost nothing. Data paths need the
// event's raw JSON: Match reads it only when a filter that needs it is reached (after the type,
// subject and envelope conditions have passed), and then scans it once to its end (a later
// member may replace a value, see Keys), decoding only the values at the filter's paths and
// skipping everything else without building maps. Only an event that repeats a member name on
// a path costs more: the scan starts again and reads each object on a path twice, first to find
// the last occurrence of each name. Match expects the valid JSON object ingress stores;
// given malformed JSON it does not panic, and every data key is missing. The grammar is egrid's
// one JSON scanner, [schemas.JSONScanner] (lenient about bytes that are not UTF-8, as
// encoding/json is); this package only walks it, deciding which values to read and which to
// skip.
//
// With enableAdvancedFilteringOnArrays, an array at a path is tested element by element as it
// is read, each element against every condition on that key that is still undecided, and once
// all are decided the rest of it is only skipped: an array costs no memory however long it is.
// A string value read by StringContains or StringNotContains is case-folded at most once per
// Match (an array element once), however many filters read it; folding ASCII and the runes
// below U+0800 (Latin, Greek, Cyrillic and others) is a table look-up.
//
// filter is pure: it imports only schemas, does no I/O and never reads the clock. A compiled
// [Filter] is immutable and safe for concurrent use.
package filter
