package proxy

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// countingApp is a pod's app (HTTP/1.1 and h2c) that takes delay per
// request, or waits until the test ends, and keeps the most requests it
// had at once.
type countingApp struct {
	addr      string
	now, most atomic.Int32
	served    atomic.Int32
	release   chan struct{} // nil: each request takes delay
	delay     time.Duration
	mu        sync.Mutex
}

func newCountingApp(t *testing.T, delay time.Duration, block bool) *countingApp {
	t.Helper()
	c := &countingApp{delay: delay}
	if block {
		c.release = make(chan struct{})
	}
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n := c.now.Add(1)
		defer c.now.Add(-1)
		for m := c.most.Load(); n > m && !c.most.CompareAndSwap(m, n); m = c.most.Load() {
		}
		if c.release != nil {
			select {
			case <-c.release:
			case <-r.Context().Done():
			}
		} else {
			time.Sleep(c.delay)
		}
		c.served.Add(1)
		fmt.Fprint(w, "served")
	}))
	srv.Config.Protocols = new(http.Protocols) // HTTP/1.1 and h2c, as a sidecar serves
	srv.Config.Protocols.SetHTTP1(true)
	srv.Config.Protocols.SetUnencryptedHTTP2(true)
	srv.Start()
	t.Cleanup(srv.Close)
	if block {
		t.Cleanup(func() { close(c.release) })
	}
	c.addr = strings.TrimPrefix(srv.URL, "http://")
	return c
}

// TestReleaseKeepsToConcurrencyLimit: a burst held at zero for an app
// with a concurrency limit goes to its ready pods as they can take it,
// never more than the limit at once on a pod, over HTTP/1.1 (parked in
// the engine) and HTTP/2 (held in the handler); every request is
// answered by the app, and those not yet sent stay held, counted.
// Without the limit kept, the first ready pod got the whole burst and
// its sidecar answered 503 past its queue.
func TestReleaseKeepsToConcurrencyLimit(t *testing.T) {
	for _, h2 := range []bool{false, true} {
		t.Run(map[bool]string{false: "HTTP/1.1", true: "h2c"}[h2], func(t *testing.T) {
			const n, limit = 24, 2
			rt, url, _ := rigProtocols(t, RouterOptions{}, AppConfig{Concurrency: limit}, h2)
			client := http.DefaultClient
			if h2 {
				client = h2cClient(t)
			}
			codes := make(chan string, n)
			for range n {
				go func() {
					req, _ := http.NewRequestWithContext(t.Context(), http.MethodGet, url, nil)
					req.Host = "hello.test"
					resp, err := client.Do(req)
					if err != nil {
						codes <- err.Error()
						return
					}
					b, _ := io.ReadAll(resp.Body)
					resp.Body.Close()
					codes <- fmt.Sprintf("%d %s", resp.StatusCode, b)
				}()
			}
			waitHeld(t, rt, n)
			pods := []*countingApp{newCountingApp(t, 20*time.Millisecond, false), newCountingApp(t, 20*time.Millisecond, false)}
			rt.SetEndpoints(shopHello, []Endpoint{{Addr: pods[0].addr, Ready: true}, {Addr: pods[1].addr, Ready: true}})
			// Two pods of 2 take 4 at once: the rest is still held, and counted.
			time.Sleep(5 * time.Millisecond)
			if h := rt.Held(); h < n-2*limit-4 { // a few may have gone in 5 ms
				t.Errorf("held %d just after the release, want about %d still held (the pods' slots are full)", h, n-2*limit)
			}
			for range n {
				if got := <-codes; got != "200 served" {
					t.Errorf("answer %q, want 200 from the app", got)
				}
			}
			for i, p := range pods {
				if m := p.most.Load(); m > limit {
					t.Errorf("pod %d had %d requests at once, want at most %d", i, m, limit)
				}
				if p.served.Load() == 0 {
					t.Errorf("pod %d served none of the burst", i)
				}
			}
			waitHeld(t, rt, 0)
		})
	}
}

// TestConcurrencyLimitTimeoutNamesTheLimit: a held request that finds
// every ready pod at its limit until its cold-start timeout gets 504
// saying so, not "no ready pod".
func TestConcurrencyLimitTimeoutNamesTheLimit(t *testing.T) {
	rt, url, _ := rig(t, RouterOptions{}, AppConfig{Concurrency: 1, ColdStartTimeout: 300 * time.Millisecond})
	type answer struct {
		code int
		body string
	}
	answers := make(chan answer, 3)
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second) // the pod never answers
	defer cancel()
	for range 3 {
		go func() { code, _, body := do(t, ctx, url, "hello.test"); answers <- answer{code, body} }()
	}
	waitHeld(t, rt, 3)
	pod := newCountingApp(t, 0, true) // holds its one request until the test ends
	rt.SetEndpoints(shopHello, []Endpoint{{Addr: pod.addr, Ready: true}})
	for range 2 {
		a := <-answers
		if a.code != http.StatusGatewayTimeout || !strings.Contains(a.body, "1 ready pod(s) were at their concurrency limit (1 each)") {
			t.Errorf("got %d %q, want 504 naming the concurrency limit", a.code, a.body)
		}
	}
	if m := pod.most.Load(); m != 1 {
		t.Errorf("the pod had %d requests at once, want 1", m)
	}
}

// TestWarmRequestsTakeNoSlot: a request that finds its app warm goes to
// a pod whatever its limit, as a client's straight to the pod would (the
// sidecar queues it); only released held requests keep to the limit.
func TestWarmRequestsTakeNoSlot(t *testing.T) {
	rt, url, _ := rig(t, RouterOptions{}, AppConfig{Concurrency: 1})
	pod := newCountingApp(t, 50*time.Millisecond, false)
	rt.SetEndpoints(shopHello, []Endpoint{{Addr: pod.addr, Ready: true}})
	var wg sync.WaitGroup
	for range 3 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if code, _, body := do(t, t.Context(), url, "hello.test"); code != 200 {
				t.Errorf("got %d %q", code, body)
			}
		}()
	}
	wg.Wait()
	if m := pod.most.Load(); m != 3 {
		t.Errorf("the pod had at most %d warm requests at once, want 3 (warm requests are not held back)", m)
	}
	if h := rt.Held(); h != 0 {
		t.Errorf("held %d, want 0", h)
	}
}
