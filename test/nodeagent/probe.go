package nodeagent

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"os/exec"
	"strconv"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
)

type probeKind int

const (
	probeStartup probeKind = iota
	probeReadiness
	probeLiveness
)

// probeUserAgent is what the kubelet sends; ebb's sidecar does not count it.
const probeUserAgent = "kube-probe/1.36"

var probeClient = &http.Client{
	Transport: &http.Transport{DisableKeepAlives: true},
	CheckRedirect: func(*http.Request, []*http.Request) error {
		return http.ErrUseLastResponse
	},
}

// startProbes runs the container's startup probe, then its readiness and
// liveness probes, each reporting only changes of its verdict to the worker.
func (w *podWorker) startProbes(ctx context.Context, c *container, gen int) {
	spec := c.spec
	podIP := w.sb.ip.String()
	netns := w.sb.netns
	send := func(k probeKind, ok bool) {
		select {
		case w.events <- event{kind: evProbe, ctr: c, gen: gen, probe: k, ok: ok}:
		case <-ctx.Done():
		}
	}
	go func() {
		if spec.StartupProbe != nil {
			if !runProbeLoop(ctx, spec.StartupProbe, spec, podIP, netns, func(ok bool) bool {
				// Startup ends at the first success or at the failure threshold.
				send(probeStartup, ok)
				return false
			}, true) {
				return
			}
		}
		if spec.ReadinessProbe != nil {
			go runProbeLoop(ctx, spec.ReadinessProbe, spec, podIP, netns, func(ok bool) bool { send(probeReadiness, ok); return true }, false)
		}
		if spec.LivenessProbe != nil {
			go runProbeLoop(ctx, spec.LivenessProbe, spec, podIP, netns, func(ok bool) bool {
				if !ok {
					send(probeLiveness, false)
				}
				return true
			}, false)
		}
	}()
}

// runProbeLoop probes every period and calls verdict when the result flips
// after the probe's thresholds. It returns true if it ended with a success
// (for the startup probe, which stops at its first verdict).
func runProbeLoop(ctx context.Context, p *corev1.Probe, ctr *corev1.Container, podIP, netns string, verdict func(bool) bool, once bool) bool {
	period := seconds(p.PeriodSeconds, 10)
	timeout := seconds(p.TimeoutSeconds, 1)
	successes, failures := int32(0), int32(0)
	successThreshold, failureThreshold := orDefault(p.SuccessThreshold, 1), orDefault(p.FailureThreshold, 3)
	current := -1 // unknown
	wait := time.Duration(p.InitialDelaySeconds) * time.Second
	for {
		select {
		case <-ctx.Done():
			return false
		case <-time.After(wait):
		}
		wait = period
		ok := probeOnce(ctx, p, ctr, podIP, netns, timeout)
		if ok {
			successes, failures = successes+1, 0
		} else {
			failures, successes = failures+1, 0
		}
		switch {
		case ok && successes >= successThreshold && current != 1:
			current = 1
			if !verdict(true) || once {
				return true
			}
		case !ok && failures >= failureThreshold && current != 0:
			current = 0
			if !verdict(false) || once {
				return false
			}
		}
	}
}

func probeOnce(ctx context.Context, p *corev1.Probe, ctr *corev1.Container, podIP, netns string, timeout time.Duration) bool {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	switch {
	case p.HTTPGet != nil:
		h := p.HTTPGet
		port, err := resolvePort(h.Port, ctr)
		if err != nil {
			return false
		}
		host := h.Host
		if host == "" {
			host = podIP
		}
		scheme := "http"
		if h.Scheme == corev1.URISchemeHTTPS {
			scheme = "https"
		}
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, fmt.Sprintf("%s://%s%s", scheme, net.JoinHostPort(host, strconv.Itoa(port)), h.Path), nil)
		if err != nil {
			return false
		}
		req.Header.Set("User-Agent", probeUserAgent)
		for _, hd := range h.HTTPHeaders {
			req.Header.Set(hd.Name, hd.Value)
		}
		resp, err := probeClient.Do(req)
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode >= 200 && resp.StatusCode < 400
	case p.TCPSocket != nil:
		port, err := resolvePort(p.TCPSocket.Port, ctr)
		if err != nil {
			return false
		}
		var d net.Dialer
		conn, err := d.DialContext(ctx, "tcp", net.JoinHostPort(podIP, strconv.Itoa(port)))
		if err != nil {
			return false
		}
		conn.Close()
		return true
	case p.GRPC != nil:
		conn, err := grpc.NewClient(net.JoinHostPort(podIP, strconv.Itoa(int(p.GRPC.Port))), grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			return false
		}
		defer conn.Close()
		service := ""
		if p.GRPC.Service != nil {
			service = *p.GRPC.Service
		}
		resp, err := healthpb.NewHealthClient(conn).Check(ctx, &healthpb.HealthCheckRequest{Service: service})
		return err == nil && resp.GetStatus() == healthpb.HealthCheckResponse_SERVING
	case p.Exec != nil && len(p.Exec.Command) > 0:
		args := append([]string{"netns", "exec", netns}, p.Exec.Command...)
		return exec.CommandContext(ctx, "ip", args...).Run() == nil
	}
	return false
}

// resolvePort turns a probe's port (number or container port name) into a
// number.
func resolvePort(p intstr.IntOrString, ctr *corev1.Container) (int, error) {
	if p.Type == intstr.Int {
		return p.IntValue(), nil
	}
	for _, cp := range ctr.Ports {
		if cp.Name == p.StrVal {
			return int(cp.ContainerPort), nil
		}
	}
	return 0, fmt.Errorf("container %s has no port named %q", ctr.Name, p.StrVal)
}

// runPreStop runs the app containers' preStop hooks (sleep and httpGet;
// exec hooks run in the pod's network namespace) before they get SIGTERM.
func (w *podWorker) runPreStop(ctx context.Context, deadline time.Time) {
	ctx, cancel := context.WithDeadline(ctx, deadline)
	defer cancel()
	done := make(chan struct{})
	n := 0
	for _, c := range w.ctrs {
		if c.kind != kindRegular || !c.running || c.spec.Lifecycle == nil || c.spec.Lifecycle.PreStop == nil {
			continue
		}
		n++
		h := c.spec.Lifecycle.PreStop
		spec, podIP, netns := c.spec, w.sb.ip.String(), w.sb.netns
		go func() {
			defer func() { done <- struct{}{} }()
			switch {
			case h.Sleep != nil:
				select {
				case <-time.After(time.Duration(h.Sleep.Seconds) * time.Second):
				case <-ctx.Done():
				}
			case h.HTTPGet != nil:
				probeOnce(ctx, &corev1.Probe{ProbeHandler: corev1.ProbeHandler{HTTPGet: h.HTTPGet}}, spec, podIP, netns, time.Until(deadline))
			case h.Exec != nil:
				probeOnce(ctx, &corev1.Probe{ProbeHandler: corev1.ProbeHandler{Exec: h.Exec}}, spec, podIP, netns, time.Until(deadline))
			}
		}()
	}
	for range n {
		<-done
	}
}

func seconds(v, def int32) time.Duration {
	if v <= 0 {
		v = def
	}
	return time.Duration(v) * time.Second
}

func orDefault(v, def int32) int32 {
	if v <= 0 {
		return def
	}
	return v
}
