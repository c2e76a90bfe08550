package check

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"time"

	"github.com/go-logr/logr"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/ebb-dev/ebb/internal/kubeclient"
	"github.com/ebb-dev/ebb/internal/logging"
	"github.com/ebb-dev/ebb/internal/sidecarapi"
	"github.com/ebb-dev/ebb/internal/tlsfiles"
)

// sidecarContainer is the name the webhook gives the injected sidecar.
const sidecarContainer = "ebb-sidecar"

// Run runs every check, in order, within o.Timeout.
func Run(ctx context.Context, o Options) error {
	log := logging.Setup("ebb-check", o.Log)
	ctx, cancel := context.WithTimeout(ctx, o.Timeout)
	defer cancel()
	cfg, err := kubeclient.Config(o.Kubeconfig)
	if err != nil {
		return err
	}
	kube, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return fmt.Errorf("kubernetes client: %w", err)
	}
	c := &checker{o: o, kube: kube, log: log, http: &http.Client{Timeout: 5 * time.Second}}
	for _, step := range []struct {
		name string
		run  func(context.Context) (string, error)
	}{
		{"webhook", c.injected},
		{"sidecar", c.throughSidecar},
		{"scaler", c.scalerHealth},
		{"activator", c.activatorReady},
	} {
		msg, err := step.run(ctx)
		if err != nil {
			return fmt.Errorf("%s: %w", step.name, err)
		}
		log.Info("ok", "check", step.name, "what", msg)
	}
	return nil
}

type checker struct {
	o    Options
	kube kubernetes.Interface
	log  logr.Logger
	http *http.Client
	pod  *corev1.Pod // the test app's ready pod, once found
}

// retry runs f every second until it succeeds or ctx ends, returning its
// last error then.
func retry(ctx context.Context, f func() error) error {
	for {
		err := f()
		if err == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return err
		case <-time.After(time.Second):
		}
	}
}

// injected waits for a ready pod of the test app and checks that it runs the
// sidecar: the API server called the webhook when it admitted the pod.
func (c *checker) injected(ctx context.Context) (string, error) {
	err := retry(ctx, func() error {
		pods, err := c.kube.CoreV1().Pods(c.o.AppNamespace).List(ctx, metav1.ListOptions{LabelSelector: c.o.AppSelector})
		if err != nil {
			return fmt.Errorf("list the test app's pods: %w", err)
		}
		if len(pods.Items) == 0 {
			return fmt.Errorf("no pod of the test app (%s) in %s yet", c.o.AppSelector, c.o.AppNamespace)
		}
		for i := range pods.Items {
			p := &pods.Items[i]
			if !hasSidecar(p) {
				return fmt.Errorf("pod %s/%s runs without the %s container: the API server did not call the webhook (is it reachable? see its MutatingWebhookConfiguration and the API server's log)", p.Namespace, p.Name, sidecarContainer)
			}
			if ready(p) {
				c.pod = p
				return nil
			}
		}
		return fmt.Errorf("no pod of the test app is ready yet")
	})
	if err != nil {
		return "", err
	}
	return fmt.Sprintf("pod %s/%s was admitted with the sidecar injected", c.pod.Namespace, c.pod.Name), nil
}

func hasSidecar(p *corev1.Pod) bool {
	for _, ct := range append(p.Spec.InitContainers, p.Spec.Containers...) {
		if ct.Name == sidecarContainer {
			return true
		}
	}
	return false
}

func ready(p *corev1.Pod) bool {
	for _, cond := range p.Status.Conditions {
		if cond.Type == corev1.PodReady {
			return cond.Status == corev1.ConditionTrue && p.Status.PodIP != ""
		}
	}
	return false
}

// throughSidecar sends a request to the test app's Service and sees the
// sidecar's count of requests go up.
func (c *checker) throughSidecar(ctx context.Context) (string, error) {
	before, err := c.sidecarTotal(ctx)
	if err != nil {
		return "", err
	}
	var after uint64
	err = retry(ctx, func() error {
		if err := c.get(ctx, c.o.AppURL); err != nil {
			return err
		}
		if after, err = c.sidecarTotal(ctx); err != nil {
			return err
		}
		if after <= before {
			return fmt.Errorf("the app answered, but its sidecar counted no request (%d before, %d after): the Service goes around the sidecar (target the port by name)", before, after)
		}
		return nil
	})
	if err != nil {
		return "", err
	}
	return fmt.Sprintf("GET %s answered through the sidecar (its count %d → %d)", c.o.AppURL, before, after), nil
}

func (c *checker) sidecarTotal(ctx context.Context) (uint64, error) {
	u := url.URL{Scheme: "http", Host: c.pod.Status.PodIP + ":" + strconv.Itoa(c.o.SidecarAdminPort), Path: sidecarapi.StatsPath}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u.String(), nil)
	if err != nil {
		return 0, err
	}
	resp, err := c.http.Do(req)
	if err != nil {
		return 0, fmt.Errorf("the sidecar's %s: %w", sidecarapi.StatsPath, err)
	}
	defer resp.Body.Close()
	if ct := resp.Header.Get("Content-Type"); resp.StatusCode != http.StatusOK || ct != sidecarapi.StatsContentType {
		return 0, fmt.Errorf("the sidecar's %s answered %s, Content-Type %q; want 200, %q (a sidecar of another ebb version?)", sidecarapi.StatsPath, resp.Status, ct, sidecarapi.StatsContentType)
	}
	b, err := io.ReadAll(io.LimitReader(resp.Body, sidecarapi.MaxBody))
	if err != nil {
		return 0, fmt.Errorf("the sidecar's %s: %w", sidecarapi.StatsPath, err)
	}
	s, err := sidecarapi.ParseSnapshot(b)
	if err != nil {
		return 0, fmt.Errorf("the sidecar's %s: %w", sidecarapi.StatsPath, err)
	}
	return s.Total, nil
}

func (c *checker) get(ctx context.Context, u string) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return err
	}
	resp, err := c.http.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 1<<20))
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("GET %s: %s", u, resp.Status)
	}
	return nil
}

// scalerHealth asks the scaler's gRPC health service, as KEDA reaches it.
func (c *checker) scalerHealth(ctx context.Context) (string, error) {
	creds := insecure.NewCredentials()
	if c.o.ScalerCAFile != "" {
		name := c.o.ScalerServerName
		if name == "" {
			name = hostOf(c.o.ScalerAddress)
		}
		cfg, err := tlsfiles.Client(c.o.ScalerCAFile, c.o.ScalerCertFile, c.o.ScalerKeyFile, name)
		if err != nil {
			return "", err
		}
		creds = credentials.NewTLS(cfg)
	}
	conn, err := grpc.NewClient(c.o.ScalerAddress, grpc.WithTransportCredentials(creds))
	if err != nil {
		return "", err
	}
	defer conn.Close()
	err = retry(ctx, func() error {
		cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		resp, err := healthpb.NewHealthClient(conn).Check(cctx, &healthpb.HealthCheckRequest{})
		if err != nil {
			return fmt.Errorf("gRPC health of %s: %w", c.o.ScalerAddress, err)
		}
		if resp.GetStatus() != healthpb.HealthCheckResponse_SERVING {
			return fmt.Errorf("gRPC health of %s: %s", c.o.ScalerAddress, resp.GetStatus())
		}
		return nil
	})
	if err != nil {
		return "", err
	}
	return fmt.Sprintf("%s answers gRPC health SERVING", c.o.ScalerAddress), nil
}

func hostOf(addr string) string {
	u := url.URL{Host: addr}
	return u.Hostname()
}

// activatorReady gets the activator's readiness URL.
func (c *checker) activatorReady(ctx context.Context) (string, error) {
	if err := retry(ctx, func() error { return c.get(ctx, c.o.ActivatorURL) }); err != nil {
		return "", err
	}
	return fmt.Sprintf("GET %s: 200", c.o.ActivatorURL), nil
}
