package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/egridio/egrid/router"
	"github.com/egridio/egrid/testkit"
)

// clusterAttempt is one notification a cluster test endpoint answered.
type clusterAttempt struct {
	sub        string // "topic/subscription", from the endpoint path
	node       string // its aeg-egrid-node header
	start, end time.Time
	ids        []string
	ok         bool // answered 200
}

// newClusterHook is one local webhook for every subscription of the cluster test: the path
// names the subscription (/hook/<topic>/<subscription>). It answers every failEvery-th
// notification with 500, sends every notification it answered to the returned channel (the
// handler waits for room), and answers validation handshakes (SPEC §2.5) without reporting
// them. A request whose body is cut off (its node was killed while sending) is not reported.
func newClusterHook(t *testing.T, failEvery int64) (*httptest.Server, <-chan clusterAttempt) {
	got := make(chan clusterAttempt, 10000)
	done := make(chan struct{})
	var n atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		start := time.Now()
		body, err := io.ReadAll(r.Body)
		if err != nil {
			return
		}
		var events []struct {
			ID   string `json:"id"`
			Data struct {
				ValidationCode string `json:"validationCode"`
			} `json:"data"`
		}
		if err := json.Unmarshal(body, &events); err != nil {
			t.Errorf("endpoint got a body that is not a JSON array: %v: %.200s", err, body)
		}
		if r.Header.Get("aeg-event-type") == "SubscriptionValidation" && len(events) == 1 {
			_ = json.NewEncoder(w).Encode(map[string]string{"validationResponse": events[0].Data.ValidationCode})
			return
		}
		a := clusterAttempt{sub: strings.TrimPrefix(r.URL.Path, "/hook/"), node: r.Header.Get(router.NodeHeader), start: start, ok: n.Add(1)%failEvery != 0}
		for _, e := range events {
			a.ids = append(a.ids, e.ID)
		}
		if !a.ok {
			w.WriteHeader(http.StatusInternalServerError)
		}
		a.end = time.Now()
		select {
		case got <- a:
		case <-done: // the test ended and reads no more
		}
	}))
	t.Cleanup(srv.Close)
	t.Cleanup(func() { close(done) }) // first: handlers waiting for room return
	return srv, got
}

// startNode runs `egrid serve args...` like startLogged, but starting it again (up to three
// times) when it exits before serving: a node whose first JetStream reads time out while the
// NATS cluster elects leaders exits with the error, as a supervisor would see it.
func startNode(t *testing.T, args ...string) *proc {
	t.Helper()
	for try := 1; ; try++ {
		p, err := tryStartNode(t, args...)
		if err == nil {
			return p
		}
		if try == 3 {
			t.Fatal(err)
		}
		t.Logf("starting a node failed, trying again: %v", err)
	}
}

func tryStartNode(t *testing.T, args ...string) (*proc, error) {
	p := &proc{done: make(chan error, 1)}
	p.cmd = exec.Command(binary, append([]string{"serve", "--listen", "127.0.0.1:0"}, args...)...)
	p.cmd.Env = append(os.Environ(), "EGRID_ADMIN_TOKEN=")
	stderr, err := p.cmd.StderrPipe()
	if err != nil {
		return nil, err
	}
	if err := p.cmd.Start(); err != nil {
		return nil, err
	}
	urls := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stderr)
		sc.Buffer(nil, 1<<20)
		for sc.Scan() {
			line := sc.Text()
			p.mu.Lock()
			p.stderr.WriteString(line + "\n")
			p.mu.Unlock()
			if m := servingRE.FindStringSubmatch(line); m != nil && strings.Contains(line, "egrid serving") {
				select {
				case urls <- m[1]:
				default:
				}
			}
		}
		p.done <- p.cmd.Wait()
	}()
	t.Cleanup(func() {
		_ = p.cmd.Process.Kill()
		err := <-p.done
		p.done <- err
		if t.Failed() {
			t.Logf("node log (pid %d):\n%s", p.cmd.Process.Pid, lastLines(p.log(), 40))
		}
		if dir := os.Getenv("EGRID_TEST_NODE_LOGS"); dir != "" { // every node's whole log, for a post-mortem
			_ = os.WriteFile(fmt.Sprintf("%s/node-%d.log", dir, p.cmd.Process.Pid), []byte(p.log()), 0o644)
		}
	})
	select {
	case p.url = <-urls:
		return p, nil
	case err := <-p.done:
		p.done <- err
		return nil, fmt.Errorf("egrid serve exited early: %v\n%s", err, lastLines(p.log(), 20))
	case <-time.After(90 * time.Second):
		return nil, fmt.Errorf("egrid serve did not start within 90 s:\n%s", lastLines(p.log(), 20))
	}
}

// liveNodes is the set of node URLs publishers may send to; pick spreads publishes over them.
type liveNodes struct {
	mu   sync.Mutex
	urls map[int]string
	up   chan struct{} // closed when a node comes up while none was
	next int
}

func (l *liveNodes) pick() (string, <-chan struct{}) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.urls) == 0 {
		return "", l.up
	}
	keys := make([]int, 0, len(l.urls))
	for k := range l.urls {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	l.next++
	return l.urls[keys[l.next%len(keys)]], l.up
}

func (l *liveNodes) set(i int, url string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.urls) == 0 {
		close(l.up)
	}
	l.urls[i] = url
}

func (l *liveNodes) remove(i int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	delete(l.urls, i)
	if len(l.urls) == 0 {
		l.up = make(chan struct{})
	}
}

// clusterEventsBody is a request of events ids; even-numbered ones have a subject under /a/,
// odd ones under /b/.
func clusterEventsBody(ids []string) []byte {
	evs := make([]string, len(ids))
	for i, id := range ids {
		evs[i] = fmt.Sprintf(`{"id":%q,"subject":"/%s/%s","eventType":"Order.Created","eventTime":"2026-01-01T00:00:00Z","data":{"n":%d}}`, id, string("ab"[i%2]), id, i)
	}
	return []byte("[" + strings.Join(evs, ",") + "]")
}

// TestClusterFailoverWithTheBinary is the failover test of cluster mode with the real binary:
// three in-process NATS servers (JetStream R3) and three `egrid serve --cluster` processes.
// Four publishers send 20 000 events in requests of 50 over five topics (paced, over about 40
// s), spread over the live nodes, to 50 subscriptions (ten per topic; every other one filters on the subject, so half
// the events match it), while one endpoint answers every 7th notification with 500. Meanwhile
// one egrid node is killed with SIGKILL, later a second one (the last node then runs all 50
// subscriptions), both are started again (and take their share back), and one NATS server is
// killed.
//
// It asserts that every event answered 200 reaches every subscription it matches at least
// once, that every attempt names its node in aeg-egrid-node, and that no subscription is
// delivered by two nodes at once for longer than the lease TTL (the fencing: an owner that
// cannot renew stops its actors at 3/5 of the TTL, before another node may take the lease; a
// node handing a subscription over stops its actor before releasing the lease). Two nodes
// "deliver at once" when their spans of attempts to one subscription — a node's attempts with
// less than a lease TTL between them — intersect. It logs the failover times: from a kill to
// the first attempt by another node, for each subscription the killed node was delivering.
//
// It takes about a minute and runs in the default test run (-short skips it);
// EGRID_TEST_NODE_LOGS=dir keeps every node's whole log there for a post-mortem.
func TestClusterFailoverWithTheBinary(t *testing.T) {
	if testing.Short() {
		t.Skip("cluster failover test: three NATS servers and three egrid processes killed and restarted; skipped with -short")
	}
	const (
		topics       = 5
		subsPerTopic = 10
		total        = 20000
		perRequest   = 50
		publishers   = 4
		failEvery    = 7
		leaseTTL     = 2 * time.Second
	)
	requests := total / perRequest
	deadline := time.After(4 * time.Minute)
	start := time.Now()

	nc := testkit.StartNATSCluster(t, 3)
	hook, got := newClusterHook(t, failEvery)
	args := func(i int) []string {
		// --time-scale 200: a retry comes 10 s / 200 = 50 ms after a failure, and the events'
		// time to live (1440 min / 200 = 7.2 min) outlasts the test.
		return []string{"--insecure-dev", "--cluster", nc.URL(), "--cluster-replicas", "3",
			"--node-name", fmt.Sprintf("egrid-%d", i), "--cluster-lease-ttl", leaseTTL.String(),
			"--cluster-prefix", "FAILOVER", "--time-scale", "200"}
	}
	nodes := make([]*proc, 3)
	var started []startedNode // every node process, restarts too, for a post-mortem
	live := &liveNodes{urls: map[int]string{}, up: make(chan struct{})}
	for i := range nodes {
		nodes[i] = startNode(t, args(i)...)
		started = append(started, startedNode{fmt.Sprintf("egrid-%d", i), time.Since(start), nodes[i]})
		live.set(i, nodes[i].url)
	}
	t.Logf("3 NATS servers and 3 egrid nodes up after %v", time.Since(start).Round(time.Millisecond))

	// Definitions go to the nodes in turn; the others learn them from the store.
	var subs []string
	matches := map[string]bool{} // subscriptions that take only /a/ subjects
	for ti := range topics {
		topic := fmt.Sprintf("topic-%d", ti)
		adminCall(t, http.MethodPut, nodes[ti%3].url+"/admin/topics/"+topic, `{"properties":{}}`)
		for si := range subsPerTopic {
			name := fmt.Sprintf("sub-%d", si)
			props := map[string]any{
				"destination": map[string]any{"endpointType": "WebHook", "properties": map[string]any{
					"endpointUrl": hook.URL + "/hook/" + topic + "/" + name, "maxEventsPerBatch": 20}},
				"retryPolicy": map[string]any{"maxDeliveryAttempts": 30, "eventTimeToLiveInMinutes": 1440},
			}
			if si%2 == 1 {
				props["filter"] = map[string]any{"subjectBeginsWith": "/a/"}
				matches[topic+"/"+name] = true
			}
			body, _ := json.Marshal(map[string]any{"properties": props})
			// Any node: one that has not heard of the topic yet reads it from the store.
			adminCall(t, http.MethodPut, nodes[(ti+si)%3].url+"/admin/topics/"+topic+"/eventSubscriptions/"+name, string(body))
			subs = append(subs, topic+"/"+name)
		}
	}
	t.Logf("%d topics and %d subscriptions created after %v", topics, len(subs), time.Since(start).Round(time.Millisecond))

	// Publishers take requests from work and report each one answered 200 on acked.
	work := make(chan int, requests)
	for i := range requests {
		work <- i
	}
	close(work)
	acked := make(chan int, requests)
	stop := make(chan struct{})
	var publishing sync.WaitGroup
	var resent atomic.Int64
	client := &http.Client{Timeout: 30 * time.Second}
	// Paced at 10 requests/s (about 40 s for all), so the failovers between the steps below
	// have time to happen under load.
	pace := time.NewTicker(100 * time.Millisecond)
	defer pace.Stop()
	for range publishers {
		publishing.Go(func() {
			for i := range work {
				select {
				case <-pace.C:
				case <-stop:
					return
				}
				ids := make([]string, perRequest)
				for j := range ids {
					ids[j] = fmt.Sprintf("ev-%05d", i*perRequest+j)
				}
				body := clusterEventsBody(ids)
				topic := fmt.Sprintf("topic-%d", i%topics)
				for try := 0; ; try++ {
					if try == 2000 {
						t.Errorf("publish of request %d not acknowledged after %d tries", i, try)
						break
					}
					url, up := live.pick()
					if url == "" {
						select {
						case <-up:
							continue
						case <-stop:
							return
						}
					}
					if try > 0 {
						resent.Add(1)
					}
					resp, err := client.Post(url+"/topics/"+topic+"/api/events?api-version=2018-01-01", "application/json", bytes.NewReader(body))
					if err != nil {
						continue // cut off by a kill, or the node is down: not acknowledged
					}
					msg, _ := io.ReadAll(resp.Body)
					resp.Body.Close()
					if resp.StatusCode == http.StatusOK {
						acked <- i
						break
					}
					if resp.StatusCode >= 500 || resp.StatusCode == http.StatusTooManyRequests || resp.StatusCode == http.StatusNotFound {
						// 503 while JetStream elects a leader or the node lost NATS; 404 from a
						// node that has not read a topic created elsewhere yet: nothing accepted.
						select {
						case <-stop:
							return
						case <-time.After(20 * time.Millisecond):
						}
						continue
					}
					t.Errorf("publish of request %d answered %d %s", i, resp.StatusCode, msg)
					break
				}
			}
		})
	}
	defer func() {
		close(stop)
		publishing.Wait()
	}()

	// What must arrive: every acknowledged event at every subscription it matches.
	ackedIDs := make(map[string]bool, total)
	delivered := make(map[string]map[string]bool, len(subs))
	for _, s := range subs {
		delivered[s] = make(map[string]bool)
	}
	outstanding := 0 // acknowledged (event, matching subscription) pairs not delivered yet
	matching := func(sub, id string) bool {
		var n int
		fmt.Sscanf(id, "ev-%d", &n)
		return !matches[sub] || (n%perRequest)%2 == 0
	}
	var attempts []clusterAttempt
	var failed, deliveries, noHeader int
	receive := func(a clusterAttempt) {
		attempts = append(attempts, a)
		if a.node == "" {
			noHeader++
		}
		if !a.ok {
			failed++
			return
		}
		for _, id := range a.ids {
			deliveries++
			if d := delivered[a.sub]; d != nil && !d[id] {
				d[id] = true
				if ackedIDs[id] {
					outstanding--
				}
			}
		}
	}

	// The chaos, by acknowledged requests.
	type step struct {
		at   int
		what string
		do   func()
	}
	var kills []struct {
		node string
		at   time.Time
	}
	killNode := func(i int) func() {
		return func() {
			live.remove(i)
			nodes[i].kill(t)
			kills = append(kills, struct {
				node string
				at   time.Time
			}{fmt.Sprintf("egrid-%d", i), time.Now()})
		}
	}
	restartNode := func(i int) func() {
		return func() {
			nodes[i] = startNode(t, args(i)...)
			started = append(started, startedNode{fmt.Sprintf("egrid-%d", i), time.Since(start), nodes[i]})
			live.set(i, nodes[i].url)
		}
	}
	steps := []step{
		{requests / 5, "kill -9 egrid-1", killNode(1)},
		{2 * requests / 5, "kill -9 egrid-2 (egrid-0 runs every subscription)", killNode(2)},
		{3 * requests / 5, "restart egrid-1 and egrid-2", func() { restartNode(1)(); restartNode(2)() }},
		{4 * requests / 5, "kill NATS server 0", func() { nc.Kill(0) }},
	}
	for n := 0; n < requests; {
		select {
		case i := <-acked:
			n++
			for j := range perRequest {
				id := fmt.Sprintf("ev-%05d", i*perRequest+j)
				ackedIDs[id] = true
				for _, s := range subs {
					if strings.HasPrefix(s, fmt.Sprintf("topic-%d/", i%topics)) && matching(s, id) && !delivered[s][id] {
						outstanding++
					}
				}
			}
			if len(steps) > 0 && n == steps[0].at {
				t.Logf("%v: %s after %d acknowledged requests, %d deliveries", time.Since(start).Round(time.Millisecond), steps[0].what, n, deliveries)
				steps[0].do()
				steps = steps[1:]
			}
		case a := <-got:
			receive(a)
		case <-deadline:
			t.Fatalf("only %d of %d requests acknowledged within 4 min", n, requests)
		}
	}
	t.Logf("%v: all %d requests acknowledged; %d (event, subscription) deliveries outstanding", time.Since(start).Round(time.Millisecond), requests, outstanding)
	// Wait until everything arrived, the 4 minutes are over, or nothing at all arrived for a
	// minute (nothing is being attempted: at this time scale the longest retry delay an
	// endpoint failing 1 in 7 sees is well under that).
	quiet := time.NewTimer(time.Minute)
	defer quiet.Stop()
	gaveUp := ""
	for outstanding > 0 && gaveUp == "" {
		select {
		case a := <-got:
			receive(a)
			quiet.Reset(time.Minute)
		case <-deadline:
			gaveUp = "within 4 min"
		case <-quiet.C:
			gaveUp = "and no attempt at all for a minute"
		}
	}
	if gaveUp != "" {
		var missing []string
		firstMissing := func(s string) string {
			var ids []string
			for id := range ackedIDs {
				var k int
				fmt.Sscanf(id, "ev-%d", &k)
				if fmt.Sprintf("topic-%d", (k/perRequest)%topics) == strings.Split(s, "/")[0] && matching(s, id) && !delivered[s][id] {
					ids = append(ids, id)
				}
			}
			slices.Sort(ids)
			return strings.Join(ids[:min(len(ids), 3)], " ")
		}
		for _, s := range subs {
			n := 0
			for id := range ackedIDs {
				var k int
				fmt.Sscanf(id, "ev-%d", &k)
				if fmt.Sprintf("topic-%d", (k/perRequest)%topics) == strings.Split(s, "/")[0] && matching(s, id) && !delivered[s][id] {
					n++
				}
			}
			if n > 0 {
				missing = append(missing, fmt.Sprintf("%s: %d (e.g. %s; its attempts: %s)", s, n, firstMissing(s), nodeRuns(attempts, s, start)))
				if len(missing) <= 3 {
					topic, sub, _ := strings.Cut(s, "/")
					for _, sn := range started {
						t.Logf("%s (started %v) about %s:\n%s", sn.name, sn.at.Round(time.Millisecond), s, linesAbout(sn.p.log(), topic, sub, 60))
					}
				}
			}
		}
		t.Errorf("%d acknowledged (event, subscription) pairs never delivered (%s): %v", outstanding, gaveUp, missing)
	}
	elapsed := time.Since(start)
	// Drain what is still queued, so the overlap check sees it.
	for drained := false; !drained; {
		select {
		case a := <-got:
			receive(a)
		default:
			drained = true
		}
	}
	if len(ackedIDs) != total {
		t.Errorf("%d events acknowledged, want all %d", len(ackedIDs), total)
	}
	if noHeader > 0 {
		t.Errorf("%d of %d attempts carried no %s header", noHeader, len(attempts), router.NodeHeader)
	}

	// Overlaps: each node's span of attempts to a subscription (attempts less than a lease TTL
	// apart) must not intersect another node's span by more than the lease TTL.
	worst, worstSub := time.Duration(0), ""
	overlapping := 0
	bySub := map[string][]clusterAttempt{}
	for _, a := range attempts {
		bySub[a.sub] = append(bySub[a.sub], a)
	}
	for sub, as := range bySub {
		type span struct {
			node       string
			start, end time.Time
		}
		var spans []span
		last := map[string]int{} // node → index of its open span
		slices.SortFunc(as, func(a, b clusterAttempt) int { return a.start.Compare(b.start) })
		for _, a := range as {
			if k, ok := last[a.node]; ok && a.start.Sub(spans[k].end) < leaseTTL {
				spans[k].end = maxTime(spans[k].end, a.end)
				continue
			}
			last[a.node] = len(spans)
			spans = append(spans, span{a.node, a.start, a.end})
		}
		for x := range spans {
			for y := x + 1; y < len(spans); y++ {
				if spans[x].node == spans[y].node {
					continue
				}
				ov := minTime(spans[x].end, spans[y].end).Sub(maxTime(spans[x].start, spans[y].start))
				if ov > 0 {
					overlapping++
					if ov > worst {
						worst, worstSub = ov, fmt.Sprintf("%s (%s %s–%s, %s %s–%s)", sub,
							spans[x].node, spans[x].start.Sub(start).Round(time.Millisecond), spans[x].end.Sub(start).Round(time.Millisecond),
							spans[y].node, spans[y].start.Sub(start).Round(time.Millisecond), spans[y].end.Sub(start).Round(time.Millisecond))
					}
				}
			}
		}
	}
	if worst > leaseTTL {
		t.Errorf("subscription %s was delivered by two nodes at once for %v, longer than the lease TTL %v", worstSub, worst, leaseTTL)
	}
	t.Logf("overlapping spans of two nodes: %d, the longest %v %s", overlapping, worst.Round(time.Millisecond), worstSub)

	// Failover times: for each kill, the subscriptions whose last attempt before it was the
	// killed node's, and when another node first attempted them.
	for _, k := range kills {
		var gaps []time.Duration
		unresumed := 0
		for _, as := range bySub {
			lastBefore := ""
			for _, a := range as {
				if a.start.Before(k.at) {
					lastBefore = a.node
				}
			}
			if lastBefore != k.node {
				continue
			}
			resumed := false
			for _, a := range as {
				if a.start.After(k.at) && a.node != k.node {
					gaps = append(gaps, a.start.Sub(k.at))
					resumed = true
					break
				}
			}
			if !resumed {
				unresumed++
			}
		}
		slices.Sort(gaps)
		if len(gaps) == 0 {
			t.Logf("kill of %s: it was delivering no subscription", k.node)
			continue
		}
		t.Logf("failover after the kill of %s (lease TTL %v): %d subscriptions resumed on other nodes, median %v, max %v after the kill (%d had nothing more to deliver)",
			k.node, leaseTTL, len(gaps), gaps[len(gaps)/2].Round(time.Millisecond), gaps[len(gaps)-1].Round(time.Millisecond), unresumed)
	}
	dups := 0
	for _, d := range delivered {
		dups -= len(d)
	}
	dups += deliveries
	t.Logf("%d events acknowledged; deliveries waited for %v: %d deliveries (%d duplicates), %d notifications failed by the endpoint, %d publish requests sent again",
		len(ackedIDs), elapsed.Round(time.Millisecond), deliveries, dups, failed, resent.Load())
}

// startedNode is a node process the failover test started, and when.
type startedNode struct {
	name string
	at   time.Duration // since the test started
	p    *proc
}

// linesAbout returns the last n lines of a node's log about one subscription (its text or
// JSON attributes), for a failure's post-mortem: where it was placed, handed over, fenced,
// and the events it ended.
func linesAbout(log, topic, sub string, n int) string {
	var lines []string
	for line := range strings.Lines(log) {
		if hasAttr(line, "topic", topic) && hasAttr(line, "subscription", sub) {
			lines = append(lines, strings.TrimRight(line, "\n"))
		}
	}
	if len(lines) == 0 {
		return "(none)"
	}
	return strings.Join(lines[max(0, len(lines)-n):], "\n")
}

// hasAttr reports whether a log line carries key=value (text) or "key":"value" (JSON), as a
// whole attribute: sub-1 is not sub-10.
func hasAttr(line, key, value string) bool {
	for _, pat := range []string{key + "=" + value, `"` + key + `":"` + value + `"`} {
		for i := 0; ; {
			j := strings.Index(line[i:], pat)
			if j < 0 {
				break
			}
			at, end := i+j, i+j+len(pat)
			before := at == 0 || strings.ContainsRune(" {,", rune(line[at-1]))
			after := end == len(line) || strings.ContainsRune(" \n,}", rune(line[end]))
			if before && after {
				return true
			}
			i = at + 1
		}
	}
	return false
}

// nodeRuns describes which node attempted sub when: runs of consecutive attempts by one node,
// with their times since start, for failure messages.
func nodeRuns(attempts []clusterAttempt, sub string, start time.Time) string {
	var runs []string
	var node string
	var from, to time.Time
	n := 0
	flush := func() {
		if n > 0 {
			runs = append(runs, fmt.Sprintf("%s ×%d %v–%v", node, n, from.Sub(start).Round(time.Millisecond), to.Sub(start).Round(time.Millisecond)))
		}
	}
	for _, a := range attempts {
		if a.sub != sub {
			continue
		}
		if a.node != node {
			flush()
			node, from, n = a.node, a.start, 0
		}
		to = a.end
		n++
	}
	flush()
	return strings.Join(runs, ", ")
}

func maxTime(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

func minTime(a, b time.Time) time.Time {
	if a.Before(b) {
		return a
	}
	return b
}

func TestLinesAbout(t *testing.T) {
	log := `time=2026-11-27T12:00:00.000Z level=INFO msg="subscription placed on this node" topic=topic-4 subscription=sub-0
time=2026-11-27T12:00:00.001Z level=INFO msg="subscription placed on this node" topic=topic-4 subscription=sub-01
time=2026-11-27T12:00:00.002Z level=INFO msg="subscription placed on this node" topic=topic-40 subscription=sub-0
{"time":"2026-11-27T12:00:01Z","level":"INFO","msg":"event dropped","topic":"topic-4","subscription":"sub-0","eventId":"ev-01734"}
{"time":"2026-11-27T12:00:01Z","level":"INFO","msg":"event dropped","topic":"topic-4","subscription":"sub-00"}
time=2026-11-27T12:00:02.000Z level=INFO msg="subscription left this node" topic=topic-4 subscription=sub-0
`
	got := linesAbout(log, "topic-4", "sub-0", 60)
	want := []string{"placed on this node\" topic=topic-4 subscription=sub-0", `"eventId":"ev-01734"`, "left this node"}
	if n := strings.Count(got, "\n") + 1; n != len(want) {
		t.Fatalf("linesAbout found %d lines, want %d:\n%s", n, len(want), got)
	}
	for _, w := range want {
		if !strings.Contains(got, w) {
			t.Errorf("linesAbout left out the line with %q:\n%s", w, got)
		}
	}
	if got := linesAbout(log, "topic-4", "sub-0", 1); !strings.Contains(got, "left this node") || strings.Contains(got, "\n") {
		t.Errorf("linesAbout with n 1 = %q, want only the last line", got)
	}
	if got := linesAbout(log, "topic-3", "sub-0", 60); got != "(none)" {
		t.Errorf("linesAbout of a subscription the log does not name = %q", got)
	}
}
