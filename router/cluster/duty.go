package cluster

import (
	"context"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// The cluster's duty is the work that belongs to no subscription's actor, done by one live
// node at a time: writing the dead letters of subscriptions deleted before their records were
// written (router/cluster.go) and closing the manual validation windows that passed
// (router/validation.go). It is a lease like a subscription's, in the same bucket under
// [dutyKey], placed like one (the live node with the highest rendezvous hash of [dutyOwner]
// takes it, a joining node it prefers takes it over once it has been live two rounds), and
// renewed every round; a node that cannot renew it gives the duty up once 3/5 of the TTL
// passed since its last renewal, before another node can take it.

// dutyKey is the duty's lease key. A subscription's lease key always holds a '.' (it joins
// the escaped topic and subscription), so no subscription's lease is under it.
const dutyKey = "duty"

// dutyOwner is what the rendezvous hash places the duty by: no subscription has empty names.
var dutyOwner = Key{}

// Duty reports whether this node holds the cluster's duty lease (never once Release ran). It
// takes no lock: actors may call it.
func (n *Node) Duty() bool { return n.duty.Load() && !n.released.Load() }

// placeDuty takes, renews, hands over or gives up the duty lease; place calls it every round.
func (n *Node) placeDuty(ctx context.Context, now time.Time, connected, viewOK bool, live []string, seen map[string]int) {
	if l := n.dutyLease; l != nil {
		owner := Owner(live, dutyOwner)
		switch {
		case viewOK && owner != n.opts.NodeName && seen[owner] >= 2:
			n.log.Info("handing the cluster's duty over", "to", owner)
			n.duty.Store(false)
			n.dutyLease = nil
			_ = n.leases.Delete(ctx, dutyKey, jetstream.LastRevision(l.rev))
			return
		case !connected:
			n.lapseDuty(l, now)
			return
		}
		rev, err := n.leases.Update(ctx, dutyKey, []byte(n.opts.NodeName), l.rev)
		switch {
		case err == nil:
			l.rev, l.renewed = rev, now
			n.duty.Store(true) // again, after an outage shorter than the lease
		case isConflict(err):
			n.log.Warn("lost the cluster's duty lease", "err", err)
			n.duty.Store(false)
			n.dutyLease = nil
		default:
			n.lapseDuty(l, time.Now())
		}
		return
	}
	if !viewOK || Owner(live, dutyOwner) != n.opts.NodeName {
		return
	}
	rev, err := n.leases.Create(ctx, dutyKey, []byte(n.opts.NodeName))
	if err != nil {
		return // held by another node (which hands it over), or NATS failed: next round
	}
	n.dutyLease = &lease{rev: rev, renewed: now}
	n.duty.Store(true)
}

// lapseDuty handles a renewal of the duty lease that failed for want of NATS: the duty is
// given up once stopAfter passed since the last renewal, and the lease forgotten once it
// lapsed.
func (n *Node) lapseDuty(l *lease, now time.Time) {
	since := now.Sub(l.renewed)
	if since >= n.stopAfter() && n.duty.Load() {
		n.log.Warn("cannot renew the cluster's duty lease; giving the duty up before the lease lapses", "sinceRenewal", since)
		n.duty.Store(false)
	}
	if since >= n.opts.LeaseTTL {
		n.dutyLease = nil
	}
}

// releaseDuty gives the duty lease up (Release).
func (n *Node) releaseDuty(ctx context.Context) {
	n.duty.Store(false)
	if l := n.dutyLease; l != nil {
		_ = n.leases.Delete(ctx, dutyKey, jetstream.LastRevision(l.rev))
		n.dutyLease = nil
	}
}
