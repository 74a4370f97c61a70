package actors

import (
	"fmt"
	"time"

	"github.com/asynkron/protoactor-go/actor"

	"github.com/egridio/egrid/router/metrics"
	"github.com/egridio/egrid/router/retry"
	"github.com/egridio/egrid/schemas"
)

// How a queue subscription settles received events by their lock tokens: acknowledged,
// released (at once or after a delay), rejected, or their lock renewed.

func (q *queue) settleEvents(sender *actor.PID, m *SettleEvents) {
	now := time.Now()
	res := &Settled{}
	for _, tok := range m.LockTokens {
		it, failed := q.lookup(tok)
		if failed != nil {
			res.Failed = append(res.Failed, *failed)
			continue
		}
		n := len(m.LockTokens)
		switch m.Op {
		case Acknowledge:
			q.settle(it)
			q.step(PullAcknowledged, it, retry.Decision{}, now, time.Time{}, n)
		case Release:
			q.detach(it)
			if m.Delay <= 0 {
				q.step(PullReleased, it, q.makeAvailable(it, now), now, time.Time{}, n)
			} else {
				at := now.Add(q.scale(m.Delay))
				q.delay(it, at)
				q.pendingPut = append(q.pendingPut, q.record(it, at))
				q.step(PullReleased, it, retry.Decision{}, now, it.due, n)
			}
		case Reject:
			dec := q.cfg.Policy.End(schemas.RejectedBySubscriber)
			q.end(it, dec)
			q.step(PullRejected, it, dec, now, time.Time{}, n)
		case RenewLock:
			if now.Sub(it.receipt) >= q.renew {
				res.Failed = append(res.Failed, FailedToken{LockToken: tok, Code: TokenLost,
					Message: "The lock cannot be renewed: locks are renewed only within 1 hour of the event's receipt; receive the event again once its lock expires."})
				continue
			}
			it.due = now.Add(q.lock)
			q.timed.fix(it.dueIdx)
			q.step(PullRenewed, it, retry.Decision{}, now, it.due, n)
		default:
			panic(fmt.Sprintf("unknown settle operation %d", m.Op))
		}
		res.Succeeded = append(res.Succeeded, tok)
	}
	q.count(m.Op, res)
	q.report() // before an answer sent at once
	if sender == nil {
		return // sent, not asked: settled, with nobody to tell
	}
	if len(res.Succeeded) == 0 || m.Op == RenewLock {
		q.system.Root.Send(sender, res) // nothing to write
		return
	}
	q.pendingAfter = append(q.pendingAfter, answer{sender, res})
}

// count adds a settle operation's results to the metrics, failures by error code.
func (q *queue) count(op SettleOp, res *Settled) {
	var ok, failed string
	switch op {
	case Acknowledge:
		ok, failed = metrics.SuccessfulAcknowledgedEvents, metrics.FailedAcknowledgedEvents
	case Release:
		ok, failed = metrics.SuccessfulReleasedEvents, metrics.FailedReleasedEvents
	case Reject:
		ok, failed = metrics.SuccessfulRejectedEvents, metrics.FailedRejectedEvents
	case RenewLock:
		ok, failed = metrics.SuccessfulRenewedLockEvents, metrics.FailedRenewedLockEvents
	}
	if n := len(res.Succeeded); n > 0 {
		q.cfg.Metrics.Add(metrics.Key{Name: ok, Scope: q.scope}, int64(n))
	}
	for _, f := range res.Failed {
		q.cfg.Metrics.Add(metrics.Key{Name: failed, Scope: q.scope, Dim: f.Code}, 1)
	}
}
