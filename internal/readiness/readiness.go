package readiness

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// Check is one readiness check of an app, as its container's readiness
// probe says; the zero thresholds and timeout mean Kubernetes' defaults.
type Check struct {
	// HTTP passes when GET answers 200–399.
	HTTP *HTTPGet `json:"http,omitempty"`
	// TCP passes when the port accepts a connection.
	TCP *TCPSocket `json:"tcp,omitempty"`
	// TimeoutSeconds bounds one attempt (default 1).
	TimeoutSeconds int32 `json:"timeoutSeconds,omitempty"`
	// PeriodSeconds is how often a ready app is checked again (default 10);
	// an app that is not ready is checked every NotReadyPeriod.
	PeriodSeconds int32 `json:"periodSeconds,omitempty"`
	// SuccessThreshold and FailureThreshold: consecutive results that turn
	// the app ready (default 1) or not ready (default 3).
	SuccessThreshold int32 `json:"successThreshold,omitempty"`
	FailureThreshold int32 `json:"failureThreshold,omitempty"`
}

// HTTPGet is an httpGet probe; Host empty means 127.0.0.1 (the pod's own
// network namespace).
type HTTPGet struct {
	Scheme  string   `json:"scheme,omitempty"` // HTTP (default) or HTTPS
	Host    string   `json:"host,omitempty"`
	Port    int32    `json:"port"`
	Path    string   `json:"path,omitempty"`
	Headers []Header `json:"headers,omitempty"`
}

// Header is one header of an httpGet probe.
type Header struct {
	Name  string `json:"name"`
	Value string `json:"value"`
}

// TCPSocket is a tcpSocket probe.
type TCPSocket struct {
	Host string `json:"host,omitempty"`
	Port int32  `json:"port"`
}

// NotReadyPeriod is how often an app that is not ready is checked: well
// under the kubelet's probe period, so a cold start is not slowed by it.
const NotReadyPeriod = 100 * time.Millisecond

// Parse reads a Check from its JSON form (Check.String) and validates it.
func Parse(s string) (Check, error) {
	var c Check
	dec := json.NewDecoder(strings.NewReader(s))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&c); err != nil {
		return Check{}, fmt.Errorf("not a readiness check: %w", err)
	}
	return c, c.Validate()
}

// Validate returns every problem of c at once.
func (c Check) Validate() error {
	var problems []error
	switch {
	case (c.HTTP == nil) == (c.TCP == nil):
		problems = append(problems, errors.New("want exactly one of http and tcp"))
	case c.HTTP != nil:
		if c.HTTP.Port < 1 || c.HTTP.Port > 65535 {
			problems = append(problems, fmt.Errorf("http port %d out of range", c.HTTP.Port))
		}
		if s := c.HTTP.Scheme; s != "" && s != "HTTP" && s != "HTTPS" {
			problems = append(problems, fmt.Errorf("http scheme %q: want HTTP or HTTPS", s))
		}
		if p := c.HTTP.Path; p != "" && !strings.HasPrefix(p, "/") {
			problems = append(problems, fmt.Errorf("http path %q: must start with /", p))
		}
	case c.TCP != nil:
		if c.TCP.Port < 1 || c.TCP.Port > 65535 {
			problems = append(problems, fmt.Errorf("tcp port %d out of range", c.TCP.Port))
		}
	}
	for name, v := range map[string]int32{"timeoutSeconds": c.TimeoutSeconds, "periodSeconds": c.PeriodSeconds, "successThreshold": c.SuccessThreshold, "failureThreshold": c.FailureThreshold} {
		if v < 0 {
			problems = append(problems, fmt.Errorf("%s %d: must not be negative", name, v))
		}
	}
	return errors.Join(problems...)
}

// String is the JSON form Parse reads.
func (c Check) String() string {
	b, _ := json.Marshal(c) // plain fields: cannot fail
	return string(b)
}

// Timeout is one attempt's bound.
func (c Check) Timeout() time.Duration { return seconds(c.TimeoutSeconds, 1) }

// Period is how often a ready app is checked again.
func (c Check) Period() time.Duration { return seconds(c.PeriodSeconds, 10) }

// Successes is the success threshold.
func (c Check) Successes() int { return int(or(c.SuccessThreshold, 1)) }

// Failures is the failure threshold.
func (c Check) Failures() int { return int(or(c.FailureThreshold, 3)) }

// Describe names what the check does, for messages.
func (c Check) Describe() string {
	if c.HTTP != nil {
		return "GET " + c.url()
	}
	if c.TCP != nil {
		return "a TCP connection to " + hostPort(c.TCP.Host, c.TCP.Port)
	}
	return "nothing"
}

func (c Check) url() string {
	scheme := "http"
	if c.HTTP.Scheme == "HTTPS" {
		scheme = "https"
	}
	return scheme + "://" + hostPort(c.HTTP.Host, c.HTTP.Port) + c.HTTP.Path
}

// MaxHeaderBytes bounds the head of an app's answer to an HTTP check.
const MaxHeaderBytes = 1 << 20

// Runner runs one Check; build it once and call Run as often as needed.
type Runner struct {
	check  Check
	client *http.Client
	dialer net.Dialer
}

// NewRunner returns a Runner for c.
func NewRunner(c Check) *Runner {
	r := &Runner{check: c, dialer: net.Dialer{Timeout: c.Timeout()}}
	if c.HTTP != nil {
		r.client = &http.Client{
			Timeout: c.Timeout(),
			Transport: &http.Transport{
				DisableKeepAlives: true, // as the kubelet: every check on a new connection
				// The body is never read; the head is bounded below Go's
				// default 10 MB (which the kubelet keeps), within the
				// sidecar's memory budget.
				MaxResponseHeaderBytes: MaxHeaderBytes,
				// The kubelet does not verify an HTTPS probe's certificate.
				TLSClientConfig: &tls.Config{InsecureSkipVerify: true},
			},
			// Redirects are a success (3xx), not followed.
			CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
		}
	}
	return r
}

// Check is what the Runner runs.
func (r *Runner) Check() Check { return r.check }

// Run runs the check once: nil when it passes.
func (r *Runner) Run(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, r.check.Timeout())
	defer cancel()
	if r.check.TCP != nil {
		c, err := r.dialer.DialContext(ctx, "tcp", hostPort(r.check.TCP.Host, r.check.TCP.Port))
		if err != nil {
			return err
		}
		return c.Close()
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, r.check.url(), nil)
	if err != nil {
		return err
	}
	req.Header.Set("User-Agent", "ebb-sidecar/readiness")
	for _, h := range r.check.HTTP.Headers {
		if strings.EqualFold(h.Name, "Host") {
			req.Host = h.Value
			continue
		}
		req.Header.Add(h.Name, h.Value)
	}
	resp, err := r.client.Do(req)
	if err != nil {
		return err
	}
	resp.Body.Close()
	if resp.StatusCode < 200 || resp.StatusCode >= 400 {
		return fmt.Errorf("answered %s", resp.Status)
	}
	return nil
}

func hostPort(host string, port int32) string {
	if host == "" {
		host = "127.0.0.1"
	}
	return net.JoinHostPort(host, strconv.Itoa(int(port)))
}

func seconds(v, def int32) time.Duration { return time.Duration(or(v, def)) * time.Second }

func or(v, def int32) int32 {
	if v <= 0 {
		return def
	}
	return v
}
