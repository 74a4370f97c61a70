// Package cluster lets several egrid router nodes share one NATS JetStream domain: any node
// accepts any publish and any admin call, and each subscription actor runs on exactly one
// live node at a time.
//
// # Model
//
// The durable state is the JetStream store (router/store/jetstream); this package adds what
// the nodes need to agree on who does what, all in JetStream key-value buckets and core NATS
// subjects under [Options.Prefix] (P below):
//
//   - Membership: bucket P_members, one key per node, written every LeaseTTL/5 and expiring
//     after [Options.LeaseTTL] (the bucket's MaxAge): the live nodes are its keys, listed
//     with a key watch and completed from the bucket's stream (a watch's end marker can come
//     before every key while the bucket is written, or never when a key it counted expires
//     before it is delivered; see listKeys).
//   - Placement: a subscription's preferred owner is the live node with the highest
//     rendezvous hash of (node, topic/subscription), so a joining or leaving node moves only
//     its share of the subscriptions.
//   - Leases: bucket P_leases, one key per subscription whose value names its owner, with
//     MaxAge LeaseTTL. A node takes a free lease with Create (only one can), renews it with
//     Update on the revision it holds, and releases it with Delete on that revision after
//     its actor stopped and flushed its state. A node that cannot renew stops the actor
//     once 3/5 of the TTL passed since its last renewal, on time however long NATS takes
//     to answer (a round's calls to NATS end when a stop falls due), so 2/5 of the TTL are
//     left before anyone else can take the lease; the JetStream store's compare-and-set
//     writes fence out any write that still comes late.
//   - Duty: the work that belongs to no subscription (writing the dead letters of deleted
//     subscriptions, closing manual validation windows) is done by the node holding the lease under key "duty" of P_leases,
//     placed, renewed and handed over like a subscription's ([Node.Duty]).
//   - Notices: core NATS messages, small and best effort, on P.cluster.appended.<topic>
//     (a node appended to a topic's journal: the others' subscription actors read it from
//     their cursor) and P.cluster.defs (a definition changed: the others read it from the
//     store). A periodic poll of the journals' ends and of the definitions covers lost ones.
//   - Admin requests: request/reply on P.cluster.node.<name>.admin, so a call about a
//     subscription (status, end probation, replay) reaches the node that runs it. An answer
//     is one message, at most [Node.MaxPayload]; one that cannot be sent is logged and
//     replaced by what its [Hooks.Admin] unsent returns.
//
// cluster imports no egrid package but router/internal/bucketkeys (which the JetStream store
// shares: the keys a bucket's stream holds, a key watch's initial values); the router wires it (router/cluster.go).
package cluster
