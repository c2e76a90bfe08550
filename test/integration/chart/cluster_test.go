package chart

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/discovery/cached/memory"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/restmapper"
	"sigs.k8s.io/yaml"

	"github.com/ebb-dev/ebb/test/cluster"
	"github.com/ebb-dev/ebb/test/repo"
)

// Versions of the CRDs the chart's optional objects need.
const (
	certManagerModule        = "github.com/cert-manager/cert-manager@v1.21.2"
	prometheusOperatorModule = "github.com/prometheus-operator/prometheus-operator@v0.85.0"
)

// restricted is the Pod Security level every ebb pod must pass.
var restricted = map[string]string{"pod-security.kubernetes.io/enforce": "restricted", "pod-security.kubernetes.io/enforce-version": "latest"}

// TestServerSideDryRun sends every object the chart renders to the real API
// server as a dry-run create with strict field validation, in both TLS modes
// and with every option on, and each Deployment's pod as a dry-run Pod in a
// namespace that enforces Pod Security "restricted".
func TestServerSideDryRun(t *testing.T) {
	c := lc
	ctx := context.Background()
	applyOptionalCRDs(t, c)
	dyn, mapper := clients(t, c)
	for _, r := range []release{
		{name: "ebb", namespace: "ebb-system"},
		{name: "team1", namespace: "team1-ebb", sets: []string{"groupSuffix=team1.example.com", "certManager.enabled=false", "scaler.tls.enabled=true",
			"serviceMonitor.enabled=true", "podMonitor.enabled=true", "dashboard.enabled=true", "networkPolicy.enabled=true", "networkPolicy.namespaces={shop}"}},
		{name: "corp", namespace: "corp-ebb", sets: []string{"groupSuffix=corp.example.com", "certManager.issuerRef.name=corp-ca",
			"certManager.issuerRef.kind=ClusterIssuer", "webhook.failurePolicy=Ignore", "webhook.timeout=2s", "webhook.replicas=1"}},
	} {
		t.Run(r.name, func(t *testing.T) {
			for _, ns := range []string{r.namespace, "shop", "keda"} {
				if err := c.EnsureNamespace(ctx, ns, restricted); err != nil {
					t.Fatal(err)
				}
			}
			objs := renderWithTests(t, r)
			// helm test's namespace: created for real, so that what goes
			// in it can be tried.
			for _, o := range ofKind(objs, "Namespace") {
				if _, err := c.Client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: o.GetName(), Labels: o.GetLabels()}}, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
					t.Fatal(err)
				}
			}
			// Pods need their ServiceAccount to exist, even in a dry run.
			for _, sa := range ofKind(objs, "ServiceAccount") {
				_, err := dyn.Resource(corev1.SchemeGroupVersion.WithResource("serviceaccounts")).Namespace(sa.GetNamespace()).Create(ctx, sa, metav1.CreateOptions{})
				if err != nil && !apierrors.IsAlreadyExists(err) {
					t.Fatal(err)
				}
			}
			for _, o := range objs {
				if o.GetKind() == "Namespace" {
					continue
				}
				mapping, err := mapper.RESTMapping(o.GroupVersionKind().GroupKind(), o.GroupVersionKind().Version)
				if err != nil {
					t.Errorf("%s: the API server does not serve it: %v", id(o), err)
					continue
				}
				var res dynamic.ResourceInterface = dyn.Resource(mapping.Resource)
				if mapping.Scope.Name() == "namespace" {
					if o.GetNamespace() == "" {
						t.Errorf("%s: namespaced, but the chart sets no namespace", id(o))
						continue
					}
					res = dyn.Resource(mapping.Resource).Namespace(o.GetNamespace())
				} else if o.GetNamespace() != "" {
					t.Errorf("%s: cluster-scoped, but the chart sets a namespace", id(o))
				}
				_, err = res.Create(ctx, o, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}, FieldValidation: "Strict"})
				if err != nil && !(apierrors.IsAlreadyExists(err) && mapping.Scope.Name() == "namespace") {
					t.Errorf("%s refused: %v", id(o), err)
				}
			}
			for _, d := range ofKind(objs, "Deployment") {
				var pod corev1.Pod
				tmpl, _, _ := unstructured.NestedMap(d.Object, "spec", "template")
				if err := runtime.DefaultUnstructuredConverter.FromUnstructured(tmpl, &pod); err != nil {
					t.Fatal(err)
				}
				pod.Name, pod.Namespace = d.GetName()+"-dry-run", r.namespace
				if _, err := c.Client.CoreV1().Pods(r.namespace).Create(ctx, &pod, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}}); err != nil {
					t.Errorf("a pod of %s is refused (Pod Security restricted): %v", id(d), err)
				}
			}
		})
	}
}

// applyOptionalCRDs installs cert-manager's, the Prometheus Operator's
// ServiceMonitor and PodMonitor, and KEDA's CRDs from their Go modules (the
// module cache or proxy).
func applyOptionalCRDs(t *testing.T, c *cluster.Cluster) {
	t.Helper()
	ctx := context.Background()
	if err := c.ApplyCRDs(ctx, filepath.Join(cluster.MustModuleDir(t, certManagerModule), "deploy", "crds")); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	for _, name := range []string{"servicemonitors", "podmonitors"} {
		src := filepath.Join(cluster.MustModuleDir(t, prometheusOperatorModule), "example", "prometheus-operator-crd", "monitoring.coreos.com_"+name+".yaml")
		b, err := os.ReadFile(src)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, name+".yaml"), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := c.ApplyCRDs(ctx, dir); err != nil {
		t.Fatal(err)
	}
	// KEDA's, for scaler.tls's ClusterTriggerAuthentication.
	if err := c.ApplyCRDs(ctx, filepath.Join(cluster.MustModuleDir(t, "github.com/kedacore/keda/v2"), "config", "crd", "bases")); err != nil {
		t.Fatal(err)
	}
}

func clients(t *testing.T, c *cluster.Cluster) (*dynamic.DynamicClient, *restmapper.DeferredDiscoveryRESTMapper) {
	t.Helper()
	dyn, err := dynamic.NewForConfig(c.RestConfig)
	if err != nil {
		t.Fatal(err)
	}
	disc, err := discovery.NewDiscoveryClientForConfig(c.RestConfig)
	if err != nil {
		t.Fatal(err)
	}
	return dyn, restmapper.NewDeferredDiscoveryRESTMapper(memory.NewMemCacheClient(disc))
}

// access is one SubjectAccessReview: may the component do this?
type access struct {
	verb, group, resource, subresource, namespace, name string
}

func (a access) String() string {
	s := a.verb + " " + a.resource
	if a.subresource != "" {
		s += "/" + a.subresource
	}
	if a.group != "" {
		s += "." + a.group
	}
	if a.name != "" {
		s += " " + a.name
	}
	if a.namespace == "" {
		return s + " (cluster-wide)"
	}
	return s + " in " + a.namespace
}

// TestRBAC creates the chart's RBAC for real and asks the API server, with
// SubjectAccessReviews, whether each component's ServiceAccount may do what
// its code does (its informers and clients) and may not read Secrets.
func TestRBAC(t *testing.T) {
	c := lc
	for _, selfSigned := range []bool{true, false} {
		r := release{name: "rbac", namespace: "rbac-cm", sets: []string{"groupSuffix=rbac-cm.example.com", "activator.pools[0].name=gold",
			"federation.enabled=true", "federation.member.enabled=true", "scaleTargets={workers.example.com}"}}
		if selfSigned {
			r = release{name: "rbac", namespace: "rbac-self", sets: []string{"groupSuffix=rbac-self.example.com", "certManager.enabled=false"}}
		}
		t.Run(r.namespace, func(t *testing.T) { testRBAC(t, c, r, selfSigned) })
	}
}

func testRBAC(t *testing.T, c *cluster.Cluster, r release, selfSigned bool) {
	ctx := context.Background()
	suffix := strings.TrimPrefix(r.sets[0], "groupSuffix=")
	group := "routing." + suffix
	ns := r.namespace
	if err := c.EnsureNamespace(ctx, ns, nil); err != nil {
		t.Fatal(err)
	}
	dyn, mapper := clients(t, c)
	for _, o := range render(t, r) {
		switch o.GetKind() {
		case "ServiceAccount", "Role", "RoleBinding", "ClusterRole", "ClusterRoleBinding":
		default:
			continue
		}
		if o.GetAnnotations()["helm.sh/hook"] != "" {
			continue // helm test's own (TestHelmTestHook)
		}
		mapping, err := mapper.RESTMapping(o.GroupVersionKind().GroupKind(), o.GroupVersionKind().Version)
		if err != nil {
			t.Fatal(err)
		}
		res := dyn.Resource(mapping.Resource)
		if o.GetNamespace() != "" {
			_, err = res.Namespace(o.GetNamespace()).Create(ctx, o, metav1.CreateOptions{FieldValidation: "Strict"})
		} else {
			_, err = res.Create(ctx, o, metav1.CreateOptions{FieldValidation: "Strict"})
			name := o.GetName()
			t.Cleanup(func() { _ = res.Delete(context.Background(), name, metav1.DeleteOptions{}) })
		}
		if err != nil && !apierrors.IsAlreadyExists(err) {
			t.Fatalf("create %s: %v", id(o), err)
		}
	}
	t.Cleanup(func() { _ = c.Client.CoreV1().Namespaces().Delete(context.Background(), ns, metav1.DeleteOptions{}) })

	mwc := "sidecar-injector." + suffix
	secret := fullname(r) + "-webhook-selfsigned"
	lease := func(name string) []access {
		return []access{{"create", "coordination.k8s.io", "leases", "", ns, ""}, {"get", "coordination.k8s.io", "leases", "", ns, name}, {"update", "coordination.k8s.io", "leases", "", ns, name}}
	}
	noSecrets := []access{
		{"get", "", "secrets", "", "", ""}, {"list", "", "secrets", "", "", ""}, {"watch", "", "secrets", "", "", ""},
		{"list", "", "secrets", "", ns, ""}, {"get", "", "secrets", "", ns, "someone-elses"}, {"get", "", "secrets", "", "kube-system", secret},
		{"create", "", "secrets", "", ns, ""},
	}

	// The webhook: every cluster-wide rule controller-gen generated from its
	// markers into config/rbac (renamed to this group), its leases and events.
	var webhookAllowed, webhookDenied []access
	for _, rule := range generatedClusterRules(t) {
		for _, g := range rule.APIGroups {
			if g == "routing.ebb.dev" {
				g = group
			}
			for _, res := range rule.Resources {
				resource, sub, _ := strings.Cut(res, "/")
				for _, v := range rule.Verbs {
					a := access{v, g, resource, sub, "", ""}
					if resource == "mutatingwebhookconfigurations" && (v == "get" || v == "list" || v == "watch") {
						// Any instance's, read from a cache that watches
						// them all: in a namespace labelled for two
						// instances, is the other one installed?
						if v == "get" {
							a.name = "sidecar-injector.other.example.com"
						}
						webhookAllowed = append(webhookAllowed, a)
						continue
					}
					if resource == "mutatingwebhookconfigurations" {
						// Only its own configuration, and only when it sets
						// the caBundle itself.
						a.name = mwc
						if selfSigned {
							webhookAllowed = append(webhookAllowed, a)
						} else {
							webhookDenied = append(webhookDenied, a)
						}
						webhookDenied = append(webhookDenied, access{v, g, resource, "", "", "sidecar-injector.ebb.dev"})
						continue
					}
					webhookAllowed = append(webhookAllowed, a)
				}
			}
		}
	}
	webhookAllowed = append(webhookAllowed, lease("ebb-webhook."+suffix)...)
	if selfSigned {
		webhookAllowed = append(webhookAllowed, access{"get", "", "secrets", "", ns, secret}, access{"update", "", "secrets", "", ns, secret})
	} else {
		webhookDenied = append(webhookDenied, access{"get", "", "secrets", "", ns, secret})
	}
	// The users' Ingresses and HTTPRoutes: read (the hosts they route to an
	// app's Service are the app's), never written.
	webhookAllowed = append(webhookAllowed, readOnlyRouting("shop").allowed...)
	webhookDenied = append(webhookDenied, readOnlyRouting("shop").denied...)
	// RoutePolicies are the users': the webhook reads them and writes their
	// status only. ConfigMaps (a placeholder's page): read only.
	webhookDenied = append(webhookDenied, policyWrites(group, "shop")...)
	webhookDenied = append(webhookDenied,
		access{"list", "routing.ebb.dev", "routepolicies", "", "", ""}, // another instance's policies
		access{"create", "", "configmaps", "", "shop", ""}, access{"update", "", "configmaps", "", "shop", "waiting"},
		access{"patch", "", "configmaps", "", "shop", "waiting"}, access{"delete", "", "configmaps", "", "shop", "waiting"},
	)
	webhookDenied = append(webhookDenied,
		access{"list", "routing.ebb.dev", "approutes", "", "", ""}, // another instance's routes
		access{"update", "coordination.k8s.io", "leases", "", ns, "activator." + suffix},
		access{"create", "", "pods", "", "shop", ""},
		access{"create", group, "domainclaims", "", "", ""}, access{"update", group, "domainclaims", "", "", "shop.example.com"},
	)

	activatorAllowed := []access{
		{"get", group, "approutes", "", "", ""}, {"list", group, "approutes", "", "", ""}, {"watch", group, "approutes", "", "", ""},
		{"patch", group, "approutes", "status", "shop", "hello"},
		{"list", "", "services", "", "", ""}, {"watch", "", "services", "", "", ""},
		{"list", "discovery.k8s.io", "endpointslices", "", "", ""}, {"watch", "discovery.k8s.io", "endpointslices", "", "", ""},
		{"create", "discovery.k8s.io", "endpointslices", "", "shop", ""}, {"patch", "discovery.k8s.io", "endpointslices", "", "shop", "hello-ebb"},
		{"delete", "discovery.k8s.io", "endpointslices", "", "shop", "hello-ebb"},
		{"list", "apps", "deployments", "", "", ""}, {"watch", "apps", "deployments", "", "", ""},
		// Any workload's replicas: the hand-off's "scaled to 0", a cold
		// start's "scaled" phase.
		{"get", "apps", "deployments", "", "shop", "hello"},
		{"get", "apps", "statefulsets", "", "shop", "hello"}, {"list", "apps", "statefulsets", "", "", ""}, {"watch", "apps", "statefulsets", "", "", ""},
		{"list", "", "pods", "", ns, ""}, {"watch", "", "pods", "", ns, ""},
		{"watch", "", "pods", "", "shop", ""},                                           // a cold start's pods, by the app's label
		{"list", "", "configmaps", "", ns, ""}, {"watch", "", "configmaps", "", ns, ""}, // the pools' selectors
		{"list", "", "namespaces", "", "", ""}, {"watch", "", "namespaces", "", "", ""}, // pools' namespaceSelectors
		{"list", group, "domainclaims", "", "", ""}, {"watch", group, "domainclaims", "", "", ""}, // which namespace may route a domain
	}
	activatorAllowed = append(activatorAllowed, lease("activator."+suffix)...)
	if !selfSigned {
		activatorAllowed = append(activatorAllowed, lease("activator-gold."+suffix)...)
	}
	// The scaleTargets kinds (workers.example.com in the release with
	// pools): read by the webhook and the activators, never written; no
	// access to them without the value.
	workers := []access{{"get", "example.com", "workers", "", "shop", "hello"}, {"list", "example.com", "workers", "", "", ""}, {"watch", "example.com", "workers", "", "", ""}}
	workerWrites := []access{{"update", "example.com", "workers", "", "shop", "hello"}, {"patch", "example.com", "workers", "scale", "shop", "hello"}}
	webhookDenied = append(webhookDenied, workerWrites...)
	if selfSigned {
		webhookDenied = append(webhookDenied, workers...)
	} else {
		webhookAllowed = append(webhookAllowed, workers...)
	}
	activatorDenied := append([]access{}, workerWrites...)
	if selfSigned {
		activatorDenied = append(activatorDenied, workers...)
	} else {
		activatorAllowed = append(activatorAllowed, workers...)
	}
	activatorDenied = append(activatorDenied, []access{
		{"list", "", "pods", "", "", ""}, {"list", "", "pods", "", "shop", ""},
		{"list", "", "configmaps", "", "shop", ""}, {"update", "", "configmaps", "", ns, ""},
		{"update", "coordination.k8s.io", "leases", "", ns, "activator-silver." + suffix},
		{"update", group, "approutes", "", "shop", "hello"}, {"delete", group, "approutes", "", "shop", "hello"},
		{"list", "routing.ebb.dev", "approutes", "", "", ""},
		{"update", "", "services", "", "shop", "hello"},
		{"update", "coordination.k8s.io", "leases", "", ns, "ebb-webhook." + suffix},
		{"create", group, "domainclaims", "", "", ""}, {"update", group, "domainclaims", "", "", "shop.example.com"},
		{"list", "routing.ebb.dev", "domainclaims", "", "", ""},
	}...)

	scalerAllowed := []access{{"list", "", "pods", "", "", ""}, {"watch", "", "pods", "", "", ""},
		{"get", group, "approutes", "", "shop", "hello"}, {"list", group, "approutes", "", "shop", ""},
		{"watch", group, "approutes", "", "", ""}, {"patch", group, "approutes", "status", "shop", "hello"},
		{"get", "keda.sh", "scaledobjects", "", "shop", "hello"}, {"create", "events.k8s.io", "events", "", "shop", ""},
		// ScaledObjects watched for their Active condition (KeptUpByAnotherTrigger).
		{"list", "keda.sh", "scaledobjects", "", "", ""}, {"watch", "keda.sh", "scaledobjects", "", "", ""}}
	scalerDenied := []access{
		{"patch", "keda.sh", "scaledobjects", "", "shop", "hello"}, {"update", "keda.sh", "scaledobjects", "", "shop", "hello"},
		{"get", "", "pods", "", "shop", "hello"}, {"create", "", "pods", "", "shop", ""}, {"list", "", "services", "", "", ""},
		{"list", "routing.ebb.dev", "approutes", "", "shop", ""}, {"update", group, "approutes", "", "shop", "hello"},
		{"patch", group, "approutes", "", "shop", "hello"}, {"update", group, "approutes", "status", "shop", "hello"},
		{"create", "coordination.k8s.io", "leases", "", ns, ""},
		{"list", group, "domainclaims", "", "", ""},
	}

	type component struct {
		component       string
		allowed, denied []access
	}
	// Only the webhook reads Ingresses and HTTPRoutes, RoutePolicies and
	// the apps' ConfigMaps.
	noRouting := readOnlyRouting("shop")
	noRouting.denied = append(noRouting.denied, noRouting.allowed...)
	noRouting.denied = append(noRouting.denied, policyWrites(group, "shop")...)
	noRouting.denied = append(noRouting.denied,
		access{"get", group, "routepolicies", "", "shop", "hello"}, access{"list", group, "routepolicies", "", "", ""},
		access{"watch", group, "routepolicies", "", "", ""}, access{"patch", group, "routepolicies", "status", "shop", "hello"},
		access{"get", "", "configmaps", "", "shop", "waiting"}, access{"list", "", "configmaps", "", "", ""})
	components := []component{
		{"webhook", webhookAllowed, append(webhookDenied, noSecrets...)},
		{"activator", activatorAllowed, slices.Concat(activatorDenied, noSecrets, noRouting.denied)},
		{"scaler", scalerAllowed, slices.Concat(scalerDenied, noSecrets, noRouting.denied)},
	}
	if !selfSigned { // the release with federation.enabled and federation.member.enabled
		scalerProxy := fullname(r) + "-scaler:8080"
		federationAllowed := append([]access{
			{"get", group, "federatedscales", "", "shop", "hello"}, {"list", group, "federatedscales", "", "", ""},
			{"watch", group, "federatedscales", "", "", ""}, {"update", group, "federatedscales", "status", "shop", "hello"},
			{"list", "", "secrets", "", ns, ""}, {"watch", "", "secrets", "", ns, ""}, // the member clusters' kubeconfigs
			{"create", "events.k8s.io", "events", "", "shop", ""},
		}, lease("ebb-federation."+suffix)...)
		federationDenied := []access{
			{"update", group, "federatedscales", "", "shop", "hello"}, {"list", "routing.ebb.dev", "federatedscales", "", "", ""},
			{"get", "", "secrets", "", "", ""}, {"list", "", "secrets", "", "", ""}, {"list", "", "secrets", "", "shop", ""},
			{"create", "", "secrets", "", ns, ""}, {"update", "", "secrets", "", ns, "member-b"},
			{"patch", "keda.sh", "scaledobjects", "", "shop", "hello"}, {"list", "", "pods", "", "", ""},
			{"update", "coordination.k8s.io", "leases", "", ns, "activator." + suffix},
		}
		memberAllowed := []access{
			{"get", "keda.sh", "scaledobjects", "", "shop", "hello"}, {"patch", "keda.sh", "scaledobjects", "", "shop", "hello"},
			{"get", "autoscaling", "horizontalpodautoscalers", "", "shop", "keda-hpa-hello"},
			{"get", "", "services", "proxy", ns, scalerProxy},
		}
		memberDenied := append([]access{
			{"create", "keda.sh", "scaledobjects", "", "shop", ""}, {"delete", "keda.sh", "scaledobjects", "", "shop", "hello"},
			{"list", "keda.sh", "scaledobjects", "", "", ""}, {"patch", "autoscaling", "horizontalpodautoscalers", "", "shop", "keda-hpa-hello"},
			{"get", "", "services", "proxy", ns, fullname(r) + "-webhook:443"}, {"get", "", "services", "proxy", "shop", "hello:80"},
			{"list", "", "pods", "", "", ""}, {"patch", "apps", "deployments", "", "shop", "hello"},
		}, noSecrets...)
		components = append(components, component{"federation", federationAllowed, append(federationDenied, noRouting.denied...)},
			component{"federation-member", memberAllowed, append(memberDenied, noRouting.denied...)})
	}
	for _, tc := range components {
		user := "system:serviceaccount:" + ns + ":" + fullname(r) + "-" + tc.component
		// The authorizer's RBAC cache lags the writes a little.
		first := tc.allowed[0]
		if err := cluster.WaitFor(ctx, 30*time.Second, "RBAC of "+tc.component, func(ctx context.Context) (bool, error) {
			ok, err := allowed(ctx, c, user, ns, first)
			return ok, err
		}); err != nil {
			t.Fatalf("%s may never %s: %v", tc.component, first, err)
		}
		for _, a := range tc.allowed {
			if ok, err := allowed(ctx, c, user, ns, a); err != nil {
				t.Fatal(err)
			} else if !ok {
				t.Errorf("%s may not %s; its code needs to", tc.component, a)
			}
		}
		for _, a := range tc.denied {
			if ok, err := allowed(ctx, c, user, ns, a); err != nil {
				t.Fatal(err)
			} else if ok {
				t.Errorf("%s may %s; it must not", tc.component, a)
			}
		}
	}
}

// readOnlyRouting are the webhook's accesses to the users' Ingresses and
// HTTPRoutes: list and watch in every namespace, get in ns (allowed);
// create, update, patch, delete and their status (denied).
func readOnlyRouting(ns string) (out struct{ allowed, denied []access }) {
	for _, r := range []struct{ group, resource string }{{"networking.k8s.io", "ingresses"}, {"gateway.networking.k8s.io", "httproutes"}} {
		out.allowed = append(out.allowed,
			access{"list", r.group, r.resource, "", "", ""}, access{"watch", r.group, r.resource, "", "", ""},
			access{"list", r.group, r.resource, "", ns, ""}, access{"get", r.group, r.resource, "", ns, "hello"})
		out.denied = append(out.denied,
			access{"create", r.group, r.resource, "", ns, ""}, access{"update", r.group, r.resource, "", ns, "hello"},
			access{"patch", r.group, r.resource, "", ns, "hello"}, access{"delete", r.group, r.resource, "", ns, "hello"},
			access{"deletecollection", r.group, r.resource, "", ns, ""},
			access{"update", r.group, r.resource, "status", ns, "hello"}, access{"patch", r.group, r.resource, "status", ns, "hello"})
	}
	return out
}

// policyWrites are writes of the users' RoutePolicies in ns, which no ebb
// component may make (the webhook writes their status only).
func policyWrites(group, ns string) []access {
	return []access{
		{"create", group, "routepolicies", "", ns, ""}, {"update", group, "routepolicies", "", ns, "hello"},
		{"patch", group, "routepolicies", "", ns, "hello"}, {"delete", group, "routepolicies", "", ns, "hello"},
		{"deletecollection", group, "routepolicies", "", ns, ""},
	}
}

func allowed(ctx context.Context, c *cluster.Cluster, user, saNamespace string, a access) (bool, error) {
	sar := &authorizationv1.SubjectAccessReview{Spec: authorizationv1.SubjectAccessReviewSpec{
		User:   user,
		Groups: []string{"system:serviceaccounts", "system:serviceaccounts:" + saNamespace, "system:authenticated"},
		ResourceAttributes: &authorizationv1.ResourceAttributes{
			Verb: a.verb, Group: a.group, Resource: a.resource, Subresource: a.subresource, Namespace: a.namespace, Name: a.name,
		},
	}}
	out, err := c.Client.AuthorizationV1().SubjectAccessReviews().Create(ctx, sar, metav1.CreateOptions{})
	if err != nil {
		return false, err
	}
	return out.Status.Allowed, nil
}

type policyRule struct {
	APIGroups []string `json:"apiGroups"`
	Resources []string `json:"resources"`
	Verbs     []string `json:"verbs"`
}

// generatedClusterRules are the rules of the ClusterRole controller-gen
// generates from the webhook's markers (config/rbac/role.yaml).
func generatedClusterRules(t *testing.T) []policyRule {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(repo.MustRoot(t), "config", "rbac", "role.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	for _, doc := range strings.Split(string(b), "\n---") {
		var role struct {
			Kind  string
			Rules []policyRule
		}
		if err := yaml.Unmarshal([]byte(doc), &role); err != nil {
			t.Fatal(err)
		}
		if role.Kind == "ClusterRole" {
			return role.Rules
		}
	}
	t.Fatal("config/rbac/role.yaml has no ClusterRole")
	return nil
}
