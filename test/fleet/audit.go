package fleet

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"sort"
	"strings"
	"time"
)

// Audit reads the API server's audit log (cluster.Options.AuditLog) as it
// grows and counts every request once: a long-running one (a watch, logs,
// exec) when it starts answering (its ResponseStarted event), any other
// when it is complete, each at the time the API server received it.
type Audit struct {
	path string
	off  int64
	// started are the long-running requests seen starting and not yet
	// complete, by audit ID.
	started map[string]started
	reqs    []request
	clients []string
	client  map[string]int
	// last is the latest requestReceivedTimestamp of any event read.
	last time.Time
}

type started struct {
	client int
	watch  bool
}

// request is one request, compactly: when it was received, by whom, and
// whether it wrote or started a watch.
type request struct {
	at     time.Time
	client int
	write  bool
	watch  bool
	lease  bool   // on a Lease (leader election)
	what   string // verb and resource, for writes
}

// event is what Audit reads of an audit event (audit.k8s.io/v1 Event).
type event struct {
	AuditID string `json:"auditID"`
	Stage   string `json:"stage"`
	Verb    string `json:"verb"`
	User    struct {
		Username string `json:"username"`
	} `json:"user"`
	UserAgent string `json:"userAgent"`
	ObjectRef *struct {
		Resource    string `json:"resource"`
		Subresource string `json:"subresource"`
	} `json:"objectRef"`
	RequestReceivedTimestamp time.Time `json:"requestReceivedTimestamp"`
}

// NewAudit reads the audit log at path from its start.
func NewAudit(path string) *Audit {
	return &Audit{path: path, started: map[string]started{}, client: map[string]int{}}
}

// Client names who sent a request: a ServiceAccount by its user name
// (system:serviceaccount:<ns>:<name>); any other user with the product of
// its user agent (the part before the first '/'), since the admin identity
// here is shared by the controller manager, KEDA and the tests.
func Client(user, userAgent string) string {
	if strings.HasPrefix(user, "system:serviceaccount:") {
		return user
	}
	product, _, _ := strings.Cut(userAgent, "/")
	return user + " [" + product + "]"
}

// IsWrite says whether a verb changes state.
func IsWrite(verb string) bool {
	switch verb {
	case "create", "update", "patch", "delete", "deletecollection":
		return true
	}
	return false
}

// Advance reads what the API server has written since the last call.
func (a *Audit) Advance() error {
	f, err := os.Open(a.path)
	if err != nil {
		return fmt.Errorf("audit log: %w", err)
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return fmt.Errorf("audit log: %w", err)
	}
	if st.Size() < a.off {
		return fmt.Errorf("audit log %s shrank from %d to %d bytes (rotated?)", a.path, a.off, st.Size())
	}
	if _, err := f.Seek(a.off, io.SeekStart); err != nil {
		return fmt.Errorf("audit log: %w", err)
	}
	r := bufio.NewReaderSize(f, 1<<20)
	for {
		line, err := r.ReadBytes('\n')
		if err == io.EOF {
			return nil // a partial last line is read again next time
		}
		if err != nil {
			return fmt.Errorf("audit log: %w", err)
		}
		a.off += int64(len(line))
		var e event
		if err := json.Unmarshal(line, &e); err != nil {
			return fmt.Errorf("audit log %s at %d: %w", a.path, a.off, err)
		}
		a.add(e)
	}
}

// Last is the latest time the API server received a request of any
// event read so far, of any client and stage: a window ending after it
// was not (yet) seen by the log.
func (a *Audit) Last() time.Time { return a.last }

func (a *Audit) add(e event) {
	if e.RequestReceivedTimestamp.After(a.last) {
		a.last = e.RequestReceivedTimestamp
	}
	name := Client(e.User.Username, e.UserAgent)
	id, ok := a.client[name]
	if !ok {
		id = len(a.clients)
		a.clients = append(a.clients, name)
		a.client[name] = id
	}
	switch e.Stage {
	case "ResponseStarted":
		a.started[e.AuditID] = started{client: id, watch: e.Verb == "watch"}
	case "ResponseComplete", "Panic":
		if _, ok := a.started[e.AuditID]; ok {
			delete(a.started, e.AuditID)
			return // counted when it started
		}
	default:
		return
	}
	r := request{at: e.RequestReceivedTimestamp, client: id, write: IsWrite(e.Verb), watch: e.Verb == "watch"}
	r.lease = e.ObjectRef != nil && e.ObjectRef.Resource == "leases"
	if r.write && e.ObjectRef != nil {
		r.what = e.Verb + " " + e.ObjectRef.Resource
		if e.ObjectRef.Subresource != "" {
			r.what += "/" + e.ObjectRef.Subresource
		}
	}
	a.reqs = append(a.reqs, r)
}

// ClientRates is what one client asked of the API server over a window.
type ClientRates struct {
	Client string
	// Requests counts every request received in the window (a watch
	// once, when it started), Writes those that create, update, patch or
	// delete, Watches the watches started. LeaseRequests and LeaseWrites
	// are those on Leases among them: leader elections, whose renewals do
	// not grow with the apps.
	Requests, Writes, Watches  int
	LeaseRequests, LeaseWrites int
	// OpenWatches are its long-running watches still open at the window's
	// end (started before it or in it).
	OpenWatches int
	// Wrote counts its writes by verb and resource ("patch approutes/status").
	Wrote   map[string]int
	Seconds float64
}

// PerSecond is n over the window.
func (c ClientRates) PerSecond(n int) float64 { return float64(n) / c.Seconds }

// Window counts the requests received in [from, to) by client, every
// client that sent one or holds a watch open. Call Advance first, some
// seconds after to, so that requests received before to are complete.
func (a *Audit) Window(from, to time.Time) map[string]*ClientRates {
	out := map[string]*ClientRates{}
	secs := to.Sub(from).Seconds()
	get := func(id int) *ClientRates {
		name := a.clients[id]
		if out[name] == nil {
			out[name] = &ClientRates{Client: name, Wrote: map[string]int{}, Seconds: secs}
		}
		return out[name]
	}
	// reqs are in the order the API server logged them, close to the
	// order received: find the window from the end.
	i := sort.Search(len(a.reqs), func(i int) bool { return !a.reqs[i].at.Before(from.Add(-time.Minute)) })
	for _, r := range a.reqs[i:] {
		if r.at.Before(from) || !r.at.Before(to) {
			continue
		}
		c := get(r.client)
		c.Requests++
		if r.lease {
			c.LeaseRequests++
		}
		if r.watch {
			c.Watches++
		}
		if r.write {
			c.Writes++
			c.Wrote[r.what]++
			if r.lease {
				c.LeaseWrites++
			}
		}
	}
	for _, s := range a.started {
		if s.watch {
			get(s.client).OpenWatches++
		}
	}
	return out
}

// Sorted lists rates by requests, most first.
func Sorted(rates map[string]*ClientRates) []*ClientRates {
	out := make([]*ClientRates, 0, len(rates))
	for _, r := range rates {
		out = append(out, r)
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].Requests != out[j].Requests {
			return out[i].Requests > out[j].Requests
		}
		return out[i].Client < out[j].Client
	})
	return out
}

// WroteSummary lists a client's writes, most first: "12 patch approutes/status, 3 update leases".
func (c *ClientRates) WroteSummary() string {
	type kv struct {
		k string
		n int
	}
	var l []kv
	for k, n := range c.Wrote {
		l = append(l, kv{k, n})
	}
	sort.Slice(l, func(i, j int) bool { return l[i].n > l[j].n || (l[i].n == l[j].n && l[i].k < l[j].k) })
	var parts []string
	for _, e := range l {
		parts = append(parts, fmt.Sprintf("%d %s", e.n, e.k))
	}
	return strings.Join(parts, ", ")
}
