package scaler

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"math"
	"net"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/ebb-dev/ebb/internal/sidecarapi"
	"github.com/ebb-dev/ebb/internal/testwait"
)

// rawSidecar is a pod posing as a sidecar on raw TCP: answer runs once per
// request head read, on the connection.
func rawSidecar(t *testing.T, answer func(c net.Conn)) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	var mu sync.Mutex
	var conns []net.Conn
	t.Cleanup(func() {
		ln.Close()
		mu.Lock()
		for _, c := range conns {
			c.Close()
		}
		mu.Unlock()
		wg.Wait()
	})
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
			wg.Add(1)
			go func() {
				defer wg.Done()
				defer c.Close()
				br := bufio.NewReader(c)
				for {
					for {
						line, err := br.ReadString('\n')
						if err != nil {
							return
						}
						if line == "\r\n" {
							break
						}
					}
					answer(c)
				}
			}()
		}
	}()
	return ln.Addr().String()
}

// statsHead opens an answer as a sidecar's: status 200 and the stats line's
// Content-Type, so what follows is what the case tests.
const statsHead = "HTTP/1.1 200 OK\r\nContent-Type: " + sidecarapi.StatsContentType + "\r\n"

func ok(body string) string {
	return statsHead + "Content-Length: " + strconv.Itoa(len(body)) + "\r\n\r\n" + body
}

// stream writes b until the peer goes.
func stream(c net.Conn, b []byte) {
	for {
		if _, err := c.Write(b); err != nil {
			return
		}
	}
}

var nines = []byte(strings.Repeat("9", 64<<10))

// TestReadHostileSidecar: whatever a pod answers to GET /stats, one read
// ends within --read-timeout (plus scheduling), allocates a bounded amount
// whatever the pod sends (1 GiB included), and a refused answer says why.
func TestReadHostileSidecar(t *testing.T) {
	const timeout = 200 * time.Millisecond
	for name, tc := range map[string]struct {
		answer  func(c net.Conn)
		refused string // the reason, "" for none
		slow    bool   // ended by the deadline
	}{
		"garbage":                     {answer: func(c net.Conn) { io.WriteString(c, "\x00\xff SSH-2.0-OpenSSH_9.6\r\n") }, refused: sidecarapi.ReasonHTTP},
		"not HTTP at all, no newline": {answer: func(c net.Conn) { stream(c, nines) }, refused: sidecarapi.ReasonTooLong},
		"1 GiB body": {answer: func(c net.Conn) {
			io.WriteString(c, statsHead+"Content-Length: 1073741824\r\n\r\n")
			stream(c, nines)
		}, refused: sidecarapi.ReasonTooLong},
		"1 GiB chunk": {answer: func(c net.Conn) {
			io.WriteString(c, statsHead+"Transfer-Encoding: chunked\r\n\r\n40000000\r\n")
			stream(c, nines)
		}, refused: sidecarapi.ReasonTooLong},
		"2^64 chunk": {answer: func(c net.Conn) {
			io.WriteString(c, statsHead+"Transfer-Encoding: chunked\r\n\r\n10000000000000000\r\n")
			stream(c, nines)
		}, refused: sidecarapi.ReasonHTTP},
		"endless head": {answer: func(c net.Conn) {
			io.WriteString(c, statsHead)
			stream(c, []byte("X-Pad: "+strings.Repeat("x", 100)+"\r\n"))
		}, refused: sidecarapi.ReasonTooLong},
		"delimited by close": {answer: func(c net.Conn) {
			io.WriteString(c, statsHead+"\r\n")
			stream(c, nines)
		}, refused: sidecarapi.ReasonHTTP},
		"one byte a second": {answer: func(c net.Conn) {
			for _, b := range []byte(ok("ebb1 0 0 1 0\n")) {
				if _, err := c.Write([]byte{b}); err != nil {
					return
				}
				time.Sleep(time.Second)
			}
		}, slow: true},
		"never":                            {answer: func(net.Conn) {}, slow: true},
		"negative in-flight":               {answer: func(c net.Conn) { io.WriteString(c, ok("ebb1 -5 0 1 0\n")) }, refused: refusedFormat},
		"2^63 in-flight":                   {answer: func(c net.Conn) { io.WriteString(c, ok("ebb1 9223372036854775808 0 1 0\n")) }, refused: refusedFormat},
		"2^63-1 ms busy":                   {answer: func(c net.Conn) { io.WriteString(c, ok("ebb1 1 0 1 9223372036854775807\n")) }, refused: refusedFormat},
		"stats line, then junk":            {answer: func(c net.Conn) { io.WriteString(c, ok("ebb1 1 2 3 0\n<html>")) }, refused: refusedFormat},
		"another version":                  {answer: func(c net.Conn) { io.WriteString(c, strings.ReplaceAll(ok("ebb2 1 2 3 0 7\n"), "ebb1", "ebb2")) }, refused: refusedFormat},
		"another version's line":           {answer: func(c net.Conn) { io.WriteString(c, ok("ebb2 1 2 3 0\n")) }, refused: refusedFormat},
		"a figure short":                   {answer: func(c net.Conn) { io.WriteString(c, ok("ebb1 1 2 3\n")) }, refused: refusedFormat},
		"no Content-Type":                  {answer: func(c net.Conn) { io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Length: 13\r\n\r\nebb1 1 2 3 0\n") }, refused: refusedFormat},
		"404, as a pod that is no sidecar": {answer: func(c net.Conn) { io.WriteString(c, "HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\n\r\n") }, refused: sidecarapi.ReasonStatus},
	} {
		t.Run(name, func(t *testing.T) {
			addr := rawSidecar(t, tc.answer)
			s := &Scaler{opts: Options{ReadTimeout: timeout}, dialer: &net.Dialer{}}
			p := &pod{key: "shop/hostile", conn: newStatsConn(addr, sidecarapi.StatsPath)}
			defer p.conn.close()
			var buf [maxStatsBody]byte
			var before, after runtime.MemStats
			runtime.GC()
			runtime.ReadMemStats(&before)
			start := time.Now()
			r := s.readOne(context.Background(), p, buf[:])
			took := time.Since(start)
			runtime.ReadMemStats(&after)
			if r.ok {
				t.Fatalf("read %+v, want a failure", r.snap)
			}
			if r.refused != tc.refused || r.slow != tc.slow {
				t.Errorf("refused %q, slow %v (%v); want %q, %v", r.refused, r.slow, r.err, tc.refused, tc.slow)
			}
			if took > timeout+100*time.Millisecond {
				t.Errorf("the read took %s, --read-timeout %s", took, timeout)
			}
			// The pod's own goroutine allocates too; the read's part is
			// the 512-byte buffer and its error.
			if alloc := after.TotalAlloc - before.TotalAlloc; alloc > 256<<10 {
				t.Errorf("the read allocated %d bytes", alloc)
			}
			t.Logf("%s: %v in %s", name, r.err, took.Round(time.Millisecond))
		})
	}
}

// hostilePod is a Running pod of app whose "sidecar" listens at addr.
func hostilePod(name, app, addr string) *corev1.Pod {
	_, port, _ := net.SplitHostPort(addr)
	n, _ := strconv.Atoi(port)
	always := corev1.ContainerRestartPolicyAlways
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, UID: "uid-" + "name", Labels: map[string]string{"ebb.dev/app": app}},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "app"}}, InitContainers: []corev1.Container{{Name: SidecarContainer, RestartPolicy: &always,
			Ports: []corev1.ContainerPort{{Name: AdminPortName, ContainerPort: int32(n)}}}}},
		Status: corev1.PodStatus{Phase: corev1.PodRunning, PodIP: "127.0.0.1"},
	}
}

// TestSlowPodsCostTheTickOneReadOnce: pods that answer one byte a second
// or never cost the tick one --read-timeout, at the first tick that meets
// them; from then on they are read off the tick, which takes as long as
// with well-behaved pods only, and the other apps' figures are exact.
func TestSlowPodsCostTheTickOneReadOnce(t *testing.T) {
	const timeout = 200 * time.Millisecond
	r := newRig(t, nil, func(o *Options) { o.ReadTimeout = timeout })
	good := map[string]*sidecar{}
	for i := range 20 {
		sc := newSidecar(t, int64(i%3), 0, 1)
		name := fmt.Sprintf("app-%d", i)
		good[name] = sc
		r.addPod(appPod(name+"-0", name, sc))
	}
	normal := timeTicks(r, 5)
	for name, answer := range map[string]func(net.Conn){
		"never": func(net.Conn) {},
		"slow": func(c net.Conn) {
			for _, b := range []byte(ok("ebb1 0 0 1 0\n")) {
				if _, err := c.Write([]byte{b}); err != nil {
					return
				}
				time.Sleep(time.Second)
			}
		},
	} {
		r.addPod(hostilePod("hostile-"+name, "hostile", rawSidecar(t, answer)))
	}
	start := time.Now()
	r.tick()
	first := time.Since(start)
	if first < timeout || first > timeout+200*time.Millisecond {
		t.Errorf("the tick that met the slow pods took %s, want about --read-timeout %s", first, timeout)
	}
	after := timeTicks(r, 10)
	t.Logf("tick with well-behaved pods only: max %s; meeting 2 slow pods: %s; after: max %s", normal, first, after)
	if after > max(2*normal, 50*time.Millisecond) { // a quarter of the timeout: room for a loaded machine
		t.Errorf("ticks took up to %s with the slow pods read off the tick, %s without them", after, normal)
	}
	for name := range good {
		var want int64
		fmt.Sscanf(name, "app-%d", &want)
		if st := r.status(name); st.InFlight != want%3 || st.Pods != 1 {
			t.Errorf("%s: in flight %d, pods %d; want %d, 1", name, st.InFlight, st.Pods, want%3)
		}
	}
	if got := r.metricValue(metricSlowPods); got != 2 {
		t.Errorf("%s = %v, want 2", metricSlowPods, got)
	}
	testwait.For(t, 5*time.Second, "a StatsSlow event on each slow pod", func() bool {
		evs, err := r.client.EventsV1().Events(ns).List(context.Background(), metav1.ListOptions{})
		if err != nil {
			t.Fatal(err)
		}
		named := map[string]bool{}
		for _, e := range evs.Items {
			if e.Reason == ReasonStatsSlow && e.Regarding.Kind == "Pod" && strings.Contains(e.Note, "app hostile") {
				named[e.Regarding.Name] = true
			}
		}
		return named["hostile-never"] && named["hostile-slow"]
	})
}

func timeTicks(r *rig, n int) time.Duration {
	var longest time.Duration
	for range n {
		start := time.Now()
		r.tick()
		longest = max(longest, time.Since(start))
	}
	return longest
}

// TestSlowPodReturnsAfterFastReads: a pod read off the tick returns to it
// after 2^strikes fast reads in a row, and each time it is slow again it
// needs twice as many.
func TestSlowPodReturnsAfterFastReads(t *testing.T) {
	const timeout = 100 * time.Millisecond
	r := newRig(t, nil, func(o *Options) { o.ReadTimeout = timeout })
	var mu sync.Mutex
	slow := true
	addr := rawSidecar(t, func(c net.Conn) {
		mu.Lock()
		s := slow
		mu.Unlock()
		if s {
			time.Sleep(2 * timeout)
			return
		}
		io.WriteString(c, ok("ebb1 1 0 1 0\n"))
	})
	r.addPod(hostilePod("flappy-0", "flappy", addr))
	p := func() *pod {
		r.s.reg.mu.RLock()
		defer r.s.reg.mu.RUnlock()
		return r.s.reg.pods[ns+"/flappy-0"]
	}()
	for strike := 1; strike <= 3; strike++ {
		mu.Lock()
		slow = true
		mu.Unlock()
		r.tick() // on the tick's lane: times out
		if !p.readState.slow || int(p.readState.strikes) != strike {
			t.Fatalf("strike %d: slow %v, strikes %d", strike, p.readState.slow, p.readState.strikes)
		}
		mu.Lock()
		slow = false
		mu.Unlock()
		ticks := 0
		for p.readState.slow {
			time.Sleep(timeout) // the background read ends
			r.tick()
			ticks++
			if ticks > 100 {
				t.Fatal("never returned to the tick's lane")
			}
		}
		// The first tick starts the first background read; each later
		// one takes a result and starts the next.
		if want := 1 + 1<<strike; ticks != want {
			t.Errorf("strike %d: back on the tick's lane after %d ticks, want %d", strike, ticks, want)
		}
	}
	if st := r.status("flappy"); st.InFlight != 1 {
		t.Errorf("in flight %d, want 1", st.InFlight)
	}
}

// TestImplausibleFiguresRefused: a pod's figure beyond what one pod can
// produce is left out of its app (its last value is not kept either), the
// refusal is counted by reason, and a Warning event StatsRefused on the pod
// says why; a plausible reading counts again.
func TestImplausibleFiguresRefused(t *testing.T) {
	for name, tc := range map[string]struct {
		steps  []sidecarapi.Snapshot // one per tick; the last is refused
		reason string
	}{
		"in-flight 2^63-1":           {[]sidecarapi.Snapshot{{InFlight: 2, BootID: 1}, {InFlight: math.MaxInt64, BootID: 1}}, refusedInFlight},
		"in-flight 2^20+1":           {[]sidecarapi.Snapshot{{InFlight: MaxPodInFlight + 1, BootID: 1}}, refusedInFlight},
		"counter backwards":          {[]sidecarapi.Snapshot{{InFlight: 1, Total: 100, BootID: 1}, {InFlight: 1, Total: 50, BootID: 1}}, refusedBackwards},
		"rate":                       {[]sidecarapi.Snapshot{{InFlight: 1, Total: 100, BootID: 1}, {InFlight: 1, Total: 100 + 10*MaxPodRate, BootID: 1}}, refusedRate},
		"first reading of a new pod": {[]sidecarapi.Snapshot{{InFlight: 1, Total: 10 * MaxPodRate, BootID: 1}}, refusedRate},
		"rate after a restart":       {[]sidecarapi.Snapshot{{InFlight: 1, Total: 100, BootID: 1}, {InFlight: 1, Total: 10 * MaxPodRate, BootID: 2}}, refusedRate},
		"boot ID at every read": {func() []sidecarapi.Snapshot {
			var s []sidecarapi.Snapshot
			for i := range MaxBootChanges + 2 {
				s = append(s, sidecarapi.Snapshot{InFlight: 1, Total: 5, BootID: uint64(100 + i)})
			}
			return s
		}(), refusedBootChurn},
	} {
		t.Run(name, func(t *testing.T) {
			r := newRig(t, nil, nil)
			honest := newSidecar(t, 3, 0, 7)
			r.addPod(appPod("hello-honest", "hello", honest))
			sc := newSidecar(t, 0, 0, 1)
			pod := appPod("hello-forged", "hello", sc)
			pod.UID = "forged-uid"
			r.addPod(pod)
			for i, snap := range tc.steps {
				sc.set(snap.InFlight, snap.Total, snap.BootID)
				r.tick()
				st := r.status("hello")
				if i < len(tc.steps)-1 {
					if st.RefusedPods != 0 {
						t.Fatalf("step %d (%+v) refused", i, snap)
					}
					continue
				}
				if st.InFlight != 3 || st.RefusedPods != 1 || st.Pods != 2 {
					t.Errorf("in flight %d, refused pods %d, pods %d; want 3 (the honest pod's), 1, 2", st.InFlight, st.RefusedPods, st.Pods)
				}
			}
			if got := refusedCount(t, r, tc.reason); got != 1 {
				t.Errorf("refused{reason=%q} = %v, want 1", tc.reason, got)
			}
			testwait.For(t, 5*time.Second, "a StatsRefused event on the pod", func() bool {
				evs, err := r.client.EventsV1().Events(ns).List(context.Background(), metav1.ListOptions{})
				if err != nil {
					t.Fatal(err)
				}
				for _, e := range evs.Items {
					if e.Reason == ReasonStatsRefused && e.Regarding.Kind == "Pod" && e.Regarding.Name == "hello-forged" && e.Regarding.UID == "forged-uid" &&
						strings.Contains(e.Note, "reason "+tc.reason) && strings.Contains(e.Note, "app hello") {
						return true
					}
				}
				return false
			})
			// Plausible again: counted again.
			last := tc.steps[len(tc.steps)-1]
			sc.set(1, last.Total+1, last.BootID)
			if tc.reason == refusedBootChurn {
				return // refused until the window passes
			}
			r.tick()
			if st := r.status("hello"); st.InFlight != 4 || st.RefusedPods != 0 {
				t.Errorf("after a plausible reading: in flight %d, refused pods %d; want 4, 0", st.InFlight, st.RefusedPods)
			}
		})
	}
}

func refusedCount(t *testing.T, r *rig, reason string) float64 {
	t.Helper()
	mfs, err := r.s.prom.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != metricRefused {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "reason" && l.GetValue() == reason {
					return m.GetCounter().GetValue()
				}
			}
		}
	}
	return 0
}

// TestRefusedFigureNotKeptWhenStale: a pod whose in-flight figure was
// refused and that then stops answering does not have the refused figure
// counted as its last value (2^63-1 plus the honest pod's 3 overflowed).
func TestRefusedFigureNotKeptWhenStale(t *testing.T) {
	r := newRig(t, nil, nil)
	r.addPod(appPod("hello-honest", "hello", newSidecar(t, 3, 0, 7)))
	sc := newSidecar(t, math.MaxInt64, 0, 1)
	r.addPod(appPod("hello-forged", "hello", sc))
	r.tick()
	sc.srv.Close()
	r.tick()
	if st := r.status("hello"); st.InFlight != 3 || st.Concurrency != 3 {
		t.Errorf("in flight %d, concurrency %d; want 3, the honest pod's", st.InFlight, st.Concurrency)
	}
}
