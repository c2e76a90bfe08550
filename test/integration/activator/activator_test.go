package activator

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/util/retry"
	"k8s.io/utils/ptr"

	"github.com/gorilla/websocket"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"

	routingv1alpha1 "github.com/ebb-dev/ebb/internal/apis/routing/v1alpha1"
	"github.com/ebb-dev/ebb/internal/groupsuffix"
	"github.com/ebb-dev/ebb/test/cluster"
)

const appNS = "shop"

// applyCRD installs the AppRoute and DomainClaim CRDs for a group suffix,
// rewriting the generated ebb.dev ones.
func applyCRD(t *testing.T, suffix string) {
	t.Helper()
	dir := t.TempDir()
	for _, f := range []string{"routing.ebb.dev_approutes.yaml", "routing.ebb.dev_domainclaims.yaml"} {
		b, err := os.ReadFile(filepath.Join("..", "..", "..", "config", "crd", f))
		if err != nil {
			t.Fatal(err)
		}
		y := strings.ReplaceAll(string(b), "routing.ebb.dev", "routing."+suffix)
		if err := os.WriteFile(filepath.Join(dir, f), []byte(y), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := lc.ApplyCRDs(t.Context(), dir); err != nil {
		t.Fatal(err)
	}
}

// deployActivator runs an instance's activator in its own namespace, with
// a ServiceAccount and RBAC, replicas pods, in-cluster configuration.
func deployActivator(t *testing.T, ns, suffix string, replicas int32) {
	t.Helper()
	ctx := t.Context()
	if err := lc.EnsureNamespace(ctx, ns, nil); err != nil {
		t.Fatal(err)
	}
	names := groupsuffix.MustNew(suffix)
	k := lc.Client
	if _, err := k.CoreV1().ServiceAccounts(ns).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "ebb-activator"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	role := names.ClusterScopedName("ebb-activator")
	if _, err := k.RbacV1().ClusterRoles().Create(ctx, &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: role}, Rules: []rbacv1.PolicyRule{
		{APIGroups: []string{names.Group()}, Resources: []string{"approutes"}, Verbs: []string{"get", "list", "watch"}},
		{APIGroups: []string{names.Group()}, Resources: []string{"approutes/status"}, Verbs: []string{"get", "patch"}},
		{APIGroups: []string{names.Group()}, Resources: []string{"domainclaims"}, Verbs: []string{"list", "watch"}},
		{APIGroups: []string{""}, Resources: []string{"services", "pods"}, Verbs: []string{"get", "list", "watch"}},
		{APIGroups: []string{"apps"}, Resources: []string{"deployments", "statefulsets"}, Verbs: []string{"get", "list", "watch"}},
		{APIGroups: []string{"discovery.k8s.io"}, Resources: []string{"endpointslices"}, Verbs: []string{"get", "list", "watch", "create", "patch", "update", "delete"}},
		{APIGroups: []string{"coordination.k8s.io"}, Resources: []string{"leases"}, Verbs: []string{"get", "create", "update", "delete", "list", "watch"}},
	}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := k.RbacV1().ClusterRoleBindings().Create(ctx, &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: role},
		RoleRef:  rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "ClusterRole", Name: role},
		Subjects: []rbacv1.Subject{{Kind: "ServiceAccount", Name: "ebb-activator", Namespace: ns}},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	labels := map[string]string{"app.kubernetes.io/name": "ebb-activator"}
	fieldEnv := func(name, path string) corev1.EnvVar {
		return corev1.EnvVar{Name: name, ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: path}}}
	}
	d := &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: "ebb-activator", Namespace: ns},
		Spec: appsv1.DeploymentSpec{
			Replicas: ptr.To(replicas),
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec: corev1.PodSpec{
					ServiceAccountName:            "ebb-activator",
					TerminationGracePeriodSeconds: ptr.To(int64(5)),
					Containers: []corev1.Container{{
						Name: "activator", Image: "ghcr.io/ebb-dev/ebb-activator:dev",
						Args:  []string{"--api-group-suffix=" + suffix, "--log-format=text", "--resync=10s", "--drain-timeout=2s"},
						Env:   []corev1.EnvVar{fieldEnv("POD_NAME", "metadata.name"), fieldEnv("POD_NAMESPACE", "metadata.namespace"), fieldEnv("POD_IP", "status.podIP")},
						Ports: []corev1.ContainerPort{{Name: "http", ContainerPort: 8080}, {Name: "admin", ContainerPort: 8081}},
						ReadinessProbe: &corev1.Probe{
							ProbeHandler:  corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Path: "/readyz", Port: intstr.FromString("admin")}},
							PeriodSeconds: 1,
						},
					}},
				},
			},
		},
	}
	if _, err := k.AppsV1().Deployments(ns).Create(ctx, d, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := cluster.WaitFor(ctx, 90*time.Second, fmt.Sprintf("%d ready activator pods in %s", replicas, ns), func(ctx context.Context) (bool, error) {
		dep, err := k.AppsV1().Deployments(ns).Get(ctx, "ebb-activator", metav1.GetOptions{})
		return err == nil && dep.Status.ReadyReplicas == replicas, nil
	}); err != nil {
		t.Fatalf("%v\n%s", err, podLogs(t, ns))
	}
}

// podLogs returns the tail of the kubelet's logs of a namespace's
// containers (<pod logs dir>/<ns>_<pod>_<uid>/<container>/<restart>.log).
func podLogs(t *testing.T, ns string) string {
	files, _ := filepath.Glob(filepath.Join(lc.Dir, "logs", "pods", ns+"_*", "*", "*.log"))
	var b strings.Builder
	for _, f := range files {
		data, _ := os.ReadFile(f)
		if len(data) > 3000 {
			data = data[len(data)-3000:]
		}
		fmt.Fprintf(&b, "--- %s\n%s\n", f, data)
	}
	return b.String()
}

// deployApp is the test app behind a hand-made native sidecar, at 0
// replicas, with its Service.
func deployApp(t *testing.T, name string) *corev1.Service {
	t.Helper()
	ctx := t.Context()
	labels := map[string]string{"app": name}
	d := &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: appNS},
		Spec: appsv1.DeploymentSpec{
			Replicas: ptr.To(int32(0)),
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec: corev1.PodSpec{
					TerminationGracePeriodSeconds: ptr.To(int64(5)),
					InitContainers: []corev1.Container{{
						Name: "ebb-sidecar", Image: "ghcr.io/ebb-dev/ebb-sidecar:dev", RestartPolicy: ptr.To(corev1.ContainerRestartPolicyAlways),
						Env:   []corev1.EnvVar{{Name: "EBB_UPSTREAM", Value: "127.0.0.1:8080"}, {Name: "EBB_LISTEN", Value: ":8012"}, {Name: "EBB_ADMIN_LISTEN", Value: ":8022"}, {Name: "EBB_LOG_FORMAT", Value: "text"}},
						Ports: []corev1.ContainerPort{{Name: "http", ContainerPort: 8012}, {Name: "ebb-admin", ContainerPort: 8022}},
					}},
					Containers: []corev1.Container{{
						Name: "app", Image: "ghcr.io/ebb-dev/ebb-test-app:dev", Args: []string{"--listen=:8080"},
						Env:   []corev1.EnvVar{{Name: "POD_NAME", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.name"}}}},
						Ports: []corev1.ContainerPort{{Name: "app", ContainerPort: 8080}},
						ReadinessProbe: &corev1.Probe{
							ProbeHandler:  corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Path: "/healthz", Port: intstr.FromInt32(8080)}},
							PeriodSeconds: 1,
						},
					}},
				},
			},
		},
	}
	if _, err := lc.Client.AppsV1().Deployments(appNS).Create(ctx, d, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	svc, err := lc.Client.CoreV1().Services(appNS).Create(ctx, &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: appNS},
		Spec:       corev1.ServiceSpec{Selector: labels, Ports: []corev1.ServicePort{{Name: "http", Port: 80, TargetPort: intstr.FromString("http")}}},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return svc
}

func routes(suffix string) dynamic.ResourceInterface {
	return dynamic.NewForConfigOrDie(lc.RestConfig).Resource(routingv1alpha1.GroupVersionResource(groupsuffix.MustNew(suffix).Group())).Namespace(appNS)
}

func createRoute(t *testing.T, suffix, name string, hosts []string) {
	t.Helper()
	u := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": routingv1alpha1.GroupVersion(groupsuffix.MustNew(suffix).Group()).String(),
		"kind":       routingv1alpha1.Kind,
		"metadata":   map[string]any{"name": name, "namespace": appNS},
		"spec": map[string]any{
			"hosts":          toAny(hosts),
			"service":        map[string]any{"name": name, "port": int64(80)},
			"scaleTargetRef": map[string]any{"apiVersion": "apps/v1", "kind": "Deployment", "name": name},
			"appPort":        int64(8080),
		},
	}}
	if _, err := routes(suffix).Create(t.Context(), u, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
}

func toAny(s []string) []any {
	out := make([]any, len(s))
	for i, v := range s {
		out[i] = v
	}
	return out
}

// handoffSlices lists the hand-off slices of a Service by managed-by value.
func handoffSlices(ctx context.Context, svc string) (map[string]discoveryv1.EndpointSlice, error) {
	list, err := lc.Client.DiscoveryV1().EndpointSlices(appNS).List(ctx, metav1.ListOptions{LabelSelector: discoveryv1.LabelServiceName + "=" + svc})
	if err != nil {
		return nil, err
	}
	out := map[string]discoveryv1.EndpointSlice{}
	for _, s := range list.Items {
		if m := s.Labels[discoveryv1.LabelManagedBy]; strings.HasPrefix(m, "activator.") {
			out[m] = s
		}
	}
	return out, nil
}

// scale sets the Deployment's replicas, again on a conflict (the
// deployment controller writes its status between the read and the write).
func scale(t *testing.T, name string, n int32) {
	t.Helper()
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		s, err := lc.Client.AppsV1().Deployments(appNS).GetScale(t.Context(), name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		s.Spec.Replicas = n
		_, err = lc.Client.AppsV1().Deployments(appNS).UpdateScale(t.Context(), name, s, metav1.UpdateOptions{})
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
}

func appPods(t *testing.T, name string) []corev1.Pod {
	t.Helper()
	pods, err := lc.Client.CoreV1().Pods(appNS).List(t.Context(), metav1.ListOptions{LabelSelector: "app=" + name})
	if err != nil {
		t.Fatal(err)
	}
	return pods.Items
}

// TestActivator runs the cluster checks in order on one app: two
// instances, each with its AppRoute for the same Service.
func TestActivator(t *testing.T) {
	ctx := t.Context()
	const team1 = "team1.example.com"
	applyCRD(t, groupsuffix.Default)
	applyCRD(t, team1)
	if err := lc.EnsureNamespace(ctx, appNS, nil); err != nil {
		t.Fatal(err)
	}
	deployActivator(t, "ebb-system", groupsuffix.Default, 2)
	deployActivator(t, "team1-system", team1, 1)
	svc := deployApp(t, "hello")
	createRoute(t, groupsuffix.Default, "hello", []string{"hello.example.com"})
	createRoute(t, team1, "hello", []string{"hello.team1.test"})
	mine, theirs := groupsuffix.MustNew(groupsuffix.Default).EndpointSliceManagedBy(), groupsuffix.MustNew(team1).EndpointSliceManagedBy()

	t.Run("Propagated with 2 replicas", func(t *testing.T) {
		var last string
		err := cluster.WaitFor(ctx, 30*time.Second, "Propagated=True", func(ctx context.Context) (bool, error) {
			u, err := routes(groupsuffix.Default).Get(ctx, "hello", metav1.GetOptions{})
			if err != nil {
				return false, err
			}
			conds, _, _ := unstructured.NestedSlice(u.Object, "status", "conditions")
			b, _ := json.Marshal(conds)
			last = string(b)
			return strings.Contains(last, `"message":"2/2 ready activator replicas of pool default serve generation 1"`) && strings.Contains(last, `"status":"True"`), nil
		})
		if err != nil {
			t.Fatalf("%v; conditions: %s\n%s", err, last, podLogs(t, "ebb-system"))
		}
	})

	t.Run("hand-off slices at 0, one per instance, stable", func(t *testing.T) {
		var got map[string]discoveryv1.EndpointSlice
		if err := cluster.WaitFor(ctx, 30*time.Second, "both instances' hand-off slices", func(ctx context.Context) (bool, error) {
			var err error
			got, err = handoffSlices(ctx, "hello")
			return len(got) == 2 && len(got[mine].Endpoints) == 2 && len(got[theirs].Endpoints) == 1, err
		}); err != nil {
			t.Fatalf("%v; slices %v\n%s", err, got, podLogs(t, "ebb-system"))
		}
		if p := got[mine].Ports; len(p) != 1 || *p[0].Name != "http" || *p[0].Port != 8080 {
			t.Errorf("hand-off ports %v, want http → 8080", p)
		}
		// Neither instance rewrites or deletes the other's slice.
		time.Sleep(3 * time.Second)
		again, err := handoffSlices(ctx, "hello")
		if err != nil {
			t.Fatal(err)
		}
		for m, s := range got {
			if again[m].ResourceVersion != s.ResourceVersion {
				t.Errorf("slice %s changed (rv %s → %s): the instances fight", m, s.ResourceVersion, again[m].ResourceVersion)
			}
		}
	})

	t.Run("held at the ClusterIP, answered once a pod is ready; slice removed", func(t *testing.T) {
		type answer struct {
			code int
			body string
			err  error
		}
		done := make(chan answer, 1)
		start := time.Now()
		go func() {
			rctx, cancel := context.WithTimeout(ctx, 90*time.Second)
			defer cancel()
			req, _ := http.NewRequestWithContext(rctx, http.MethodGet, "http://"+svc.Spec.ClusterIP+"/", nil)
			req.Host = "hello.shop.svc.cluster.local" // both instances route the Service's DNS names
			resp, err := (&http.Client{Transport: &http.Transport{DisableKeepAlives: true}}).Do(req)
			if err != nil {
				done <- answer{err: err}
				return
			}
			defer resp.Body.Close()
			b, _ := io.ReadAll(resp.Body)
			done <- answer{code: resp.StatusCode, body: string(b)}
		}()
		select {
		case a := <-done:
			t.Fatalf("answered while at zero: %+v", a)
		case <-time.After(time.Second):
		}
		scale(t, "hello", 1)
		a := <-done
		if a.err != nil || a.code != 200 || !strings.HasPrefix(a.body, "hello from hello-") {
			t.Fatalf("held request: %+v\n%s", a, podLogs(t, "ebb-system"))
		}
		t.Logf("held request answered after %s (pod started by the test)", time.Since(start).Round(time.Millisecond))
		if err := cluster.WaitFor(ctx, 30*time.Second, "hand-off slices removed once a pod is ready", func(ctx context.Context) (bool, error) {
			got, err := handoffSlices(ctx, "hello")
			return len(got) == 0, err
		}); err != nil {
			t.Fatal(err)
		}
	})

	t.Run("hand-off slice reappears before the pods stop on scale-down", func(t *testing.T) {
		if len(appPods(t, "hello")) == 0 {
			t.Fatal("no app pod to scale down")
		}
		scale(t, "hello", 0)
		var podsWhenPublished int
		if err := cluster.WaitFor(ctx, 30*time.Second, "hand-off slice on scale-down", func(ctx context.Context) (bool, error) {
			got, err := handoffSlices(ctx, "hello")
			if len(got[mine].Endpoints) > 0 {
				podsWhenPublished = len(appPods(t, "hello"))
				return true, nil
			}
			return false, err
		}); err != nil {
			t.Fatal(err)
		}
		if podsWhenPublished == 0 {
			t.Error("the hand-off slice was published only after the last pod was gone")
		}
		if err := cluster.WaitFor(ctx, 30*time.Second, "app pods gone", func(context.Context) (bool, error) {
			return len(appPods(t, "hello")) == 0, nil
		}); err != nil {
			t.Fatal(err)
		}
		got, err := handoffSlices(ctx, "hello")
		if err != nil || len(got) != 2 {
			t.Errorf("after scale-down: slices %d (%v), want both instances'", len(got), err)
		}
	})

	t.Run("gRPC and WebSocket held at the ClusterIP, answered once a pod is ready", func(t *testing.T) {
		if len(appPods(t, "hello")) != 0 {
			t.Fatal("the app is not at zero")
		}
		// kube-proxy may still send new connections to the pod that just
		// stopped: wait until every connection lands on an activator (an
		// unknown host gets its 404 at once).
		probe := &http.Client{Timeout: 2 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}}
		if err := cluster.WaitFor(ctx, 30*time.Second, "the ClusterIP routes only to activators", func(ctx context.Context) (bool, error) {
			for range 8 {
				req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+svc.Spec.ClusterIP+"/", nil)
				req.Host = "nobody.invalid"
				resp, err := probe.Do(req)
				if err != nil {
					return false, nil
				}
				resp.Body.Close()
				if resp.StatusCode != http.StatusNotFound {
					return false, nil
				}
			}
			return true, nil
		}); err != nil {
			t.Fatal(err)
		}
		const host = "hello.shop.svc.cluster.local"
		rctx, cancel := context.WithTimeout(ctx, 90*time.Second)
		defer cancel()
		grpcDone := make(chan error, 1)
		go func() {
			conn, err := grpc.NewClient("passthrough:///"+svc.Spec.ClusterIP+":80", grpc.WithTransportCredentials(insecure.NewCredentials()), grpc.WithAuthority(host))
			if err != nil {
				grpcDone <- err
				return
			}
			defer conn.Close()
			var trailer metadata.MD
			resp, err := healthpb.NewHealthClient(conn).Check(metadata.AppendToOutgoingContext(rctx, "ebb-echo", "cold"), &healthpb.HealthCheckRequest{}, grpc.Trailer(&trailer))
			switch {
			case err != nil:
				grpcDone <- fmt.Errorf("Health.Check: %w", err)
			case resp.GetStatus() != healthpb.HealthCheckResponse_SERVING || fmt.Sprint(trailer.Get("ebb-echo")) != "[cold]":
				grpcDone <- fmt.Errorf("Health.Check: status %v, trailer ebb-echo %q; want SERVING and [cold]", resp.GetStatus(), trailer.Get("ebb-echo"))
			default:
				grpcDone <- nil
			}
		}()
		wsDone := make(chan error, 1)
		go func() {
			c, resp, err := (&websocket.Dialer{}).DialContext(rctx, "ws://"+svc.Spec.ClusterIP+"/ws", http.Header{"Host": {host}})
			if err != nil {
				wsDone <- fmt.Errorf("WebSocket dial: %w (response %v)", err, resp)
				return
			}
			defer c.Close()
			c.SetReadDeadline(time.Now().Add(10 * time.Second))
			if err := c.WriteMessage(websocket.TextMessage, []byte("cold hello")); err != nil {
				wsDone <- err
				return
			}
			_, b, err := c.ReadMessage()
			if err == nil && string(b) != "cold hello" {
				err = fmt.Errorf("WebSocket echo %q, want %q", b, "cold hello")
			}
			wsDone <- err
		}()
		select {
		case err := <-grpcDone:
			t.Fatalf("gRPC answered while at zero: %v", err)
		case err := <-wsDone:
			t.Fatalf("WebSocket answered while at zero: %v", err)
		case <-time.After(time.Second):
		}
		start := time.Now()
		scale(t, "hello", 1)
		for name, ch := range map[string]chan error{"gRPC": grpcDone, "WebSocket": wsDone} {
			if err := <-ch; err != nil {
				t.Errorf("%s: %v\n%s", name, err, podLogs(t, "ebb-system"))
			}
		}
		t.Logf("held gRPC call and WebSocket answered %s after the scale-up", time.Since(start).Round(time.Millisecond))
	})
}
