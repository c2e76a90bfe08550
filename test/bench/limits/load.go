package main

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os/exec"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
)

// newClient is one target's pool of keep-alive connections.
func newClient() *http.Client {
	return &http.Client{
		Transport: &http.Transport{MaxIdleConnsPerHost: 1024, DisableCompression: true},
		Timeout:   5 * time.Second,
	}
}

// openRun gathers a target's open-loop slices of one round.
type openRun struct {
	lat      []time.Duration // of the answered requests, from their scheduled send times
	errors   int
	firstErr string
	lag      time.Duration // the latest a request left after its scheduled time
}

// openLoop sends rate requests a second to url for d, each on schedule
// whether or not the ones before it were answered, and adds them to run.
func openLoop(ctx context.Context, client *http.Client, url string, rate int, d time.Duration, run *openRun) error {
	n := int(d.Seconds() * float64(rate))
	interval := time.Second / time.Duration(rate)
	lat := make([]time.Duration, n)
	var (
		wg sync.WaitGroup
		mu sync.Mutex
	)
	start := time.Now()
	for i := range n {
		sched := start.Add(time.Duration(i) * interval)
		time.Sleep(time.Until(sched))
		if err := ctx.Err(); err != nil {
			wg.Wait()
			return err
		}
		run.lag = max(run.lag, time.Since(sched))
		wg.Go(func() {
			err := get(ctx, client, url)
			lat[i] = time.Since(sched)
			if err != nil {
				mu.Lock()
				if run.errors == 0 {
					run.firstErr = err.Error()
				}
				run.errors++
				mu.Unlock()
				lat[i] = -1
			}
		})
	}
	wg.Wait()
	run.lat = append(run.lat, slices.DeleteFunc(lat, func(d time.Duration) bool { return d < 0 })...)
	return nil
}

// openResult sums up a round's open-loop slices of a target.
type openResult struct {
	p50, p99, max time.Duration
	errors        int
	firstErr      string
	lag           time.Duration
}

func (r *openRun) result() openResult {
	res := openResult{errors: r.errors, firstErr: r.firstErr, lag: r.lag}
	lat := slices.Sorted(slices.Values(r.lat))
	if len(lat) > 0 {
		res.p50, res.p99, res.max = percentile(lat, 50), percentile(lat, 99), lat[len(lat)-1]
	}
	return res
}

func get(ctx context.Context, client *http.Client, url string) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	resp, err := client.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if _, err := io.Copy(io.Discard, resp.Body); err != nil {
		return err
	}
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("status %s", resp.Status)
	}
	return nil
}

// percentile is the nearest-rank percentile p of sorted.
func percentile(sorted []time.Duration, p int) time.Duration {
	i := (p*len(sorted)+99)/100 - 1
	return sorted[max(i, 0)]
}

// wrkResult is one wrk run.
type wrkResult struct {
	rps      float64
	p50, p99 time.Duration
	errors   int
}

var (
	wrkRPS        = regexp.MustCompile(`Requests/sec:\s+([0-9.]+)`)
	wrkPercentile = regexp.MustCompile(`(?m)^\s+(50|99)%\s+([0-9.]+(?:us|ms|s|m))\s*$`)
	wrkErrors     = regexp.MustCompile(`Socket errors: connect (\d+), read (\d+), write (\d+), timeout (\d+)|Non-2xx or 3xx responses: (\d+)`)
)

// runWrk runs wrk -t1 -c conns -d d --latency against url.
func runWrk(ctx context.Context, url string, conns int, d time.Duration) (wrkResult, error) {
	args := []string{"-t1", "-c" + strconv.Itoa(conns), fmt.Sprintf("-d%ds", int(d.Seconds())), "--latency", url}
	out, err := exec.CommandContext(ctx, "wrk", args...).Output()
	if err != nil {
		return wrkResult{}, fmt.Errorf("wrk %s: %w", strings.Join(args, " "), err)
	}
	var r wrkResult
	m := wrkRPS.FindSubmatch(out)
	if m == nil {
		return r, fmt.Errorf("wrk %s: no Requests/sec in:\n%s", strings.Join(args, " "), out)
	}
	r.rps, _ = strconv.ParseFloat(string(m[1]), 64) // matched [0-9.]+
	for _, m := range wrkPercentile.FindAllSubmatch(out, -1) {
		d, err := time.ParseDuration(string(m[2]))
		if err != nil {
			return r, fmt.Errorf("wrk %s: percentile %s: %w", strings.Join(args, " "), m[2], err)
		}
		if string(m[1]) == "50" {
			r.p50 = d
		} else {
			r.p99 = d
		}
	}
	for _, m := range wrkErrors.FindAllSubmatch(out, -1) {
		for _, n := range m[1:] {
			k, _ := strconv.Atoi(string(n)) // matched \d+ or empty
			r.errors += k
		}
	}
	return r, nil
}
