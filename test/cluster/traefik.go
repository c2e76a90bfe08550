package cluster

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	"k8s.io/utils/ptr"
)

// Traefik in the local cluster (Options.Traefik): the names a stock install
// of Traefik's Helm chart (release "traefik" in namespace "traefik", with
// its Gateway API provider on) gives what users' Ingresses and HTTPRoutes
// point at.
const (
	// TraefikNamespace holds Traefik's ServiceAccount and its Gateway.
	TraefikNamespace = "traefik"
	// TraefikIngressClass is the IngressClass Traefik serves (controller
	// traefik.io/ingress-controller), the cluster's default class, as in
	// k3s.
	TraefikIngressClass = "traefik"
	// TraefikGatewayClass is the GatewayClass Traefik accepts (controllerName
	// traefik.io/gateway-controller).
	TraefikGatewayClass = "traefik"
	// TraefikGateway is the Gateway in TraefikNamespace an HTTPRoute names
	// in its parentRefs; its one listener, TraefikListener, is HTTP on
	// Traefik's web entrypoint and takes routes from every namespace.
	TraefikGateway  = "traefik-gateway"
	TraefikListener = "web"
)

// GatewayAPIGroup is the Gateway API's group; GatewayClasses, Gateways and
// HTTPRoutes are the resources of its standard channel the cluster uses.
const GatewayAPIGroup = "gateway.networking.k8s.io"

// The Gateway API resources (v1) the cluster creates and tests use through
// the dynamic client.
var (
	GatewayClasses = schema.GroupVersionResource{Group: GatewayAPIGroup, Version: "v1", Resource: "gatewayclasses"}
	Gateways       = schema.GroupVersionResource{Group: GatewayAPIGroup, Version: "v1", Resource: "gateways"}
	HTTPRoutes     = schema.GroupVersionResource{Group: GatewayAPIGroup, Version: "v1", Resource: "httproutes"}
)

// gatewayAPICRDs is the directory under bin/ into which make tools copies
// the Gateway API's standard-channel CRDs, from the release
// test/tools/traefik pins (the one Traefik is built against).
const gatewayAPICRDs = "gateway-api-crds"

// traefikClusterRole is the ClusterRole Traefik's Helm chart (39.0.5, the
// chart of Traefik v3.6.12) gives Traefik with its kubernetesIngress and
// kubernetesGateway providers on and kubernetesCRD off; named as the chart
// names it (<release>-<namespace>).
func traefikClusterRole() *rbacv1.ClusterRole {
	read := []string{"get", "list", "watch"}
	return &rbacv1.ClusterRole{
		ObjectMeta: metav1.ObjectMeta{Name: "traefik-" + TraefikNamespace},
		Rules: []rbacv1.PolicyRule{
			{APIGroups: []string{""}, Resources: []string{"configmaps", "nodes", "services"}, Verbs: read},
			{APIGroups: []string{"discovery.k8s.io"}, Resources: []string{"endpointslices"}, Verbs: []string{"list", "watch"}},
			{APIGroups: []string{""}, Resources: []string{"pods"}, Verbs: []string{"get"}},
			{APIGroups: []string{""}, Resources: []string{"secrets"}, Verbs: read},
			{APIGroups: []string{"extensions", "networking.k8s.io"}, Resources: []string{"ingressclasses", "ingresses"}, Verbs: read},
			{APIGroups: []string{"extensions", "networking.k8s.io"}, Resources: []string{"ingresses/status"}, Verbs: []string{"update"}},
			{APIGroups: []string{""}, Resources: []string{"namespaces"}, Verbs: []string{"list", "watch"}},
			{APIGroups: []string{GatewayAPIGroup}, Resources: []string{
				"backendtlspolicies", "gatewayclasses", "gateways", "grpcroutes", "httproutes", "referencegrants", "tcproutes", "tlsroutes",
			}, Verbs: read},
			{APIGroups: []string{GatewayAPIGroup}, Resources: []string{
				"backendtlspolicies/status", "gatewayclasses/status", "gateways/status", "grpcroutes/status", "httproutes/status", "tcproutes/status", "tlsroutes/status",
			}, Verbs: []string{"update"}},
		},
	}
}

// traefikTokenLifetime is how long Traefik's ServiceAccount token lasts. A
// pod's projected token is renewed by the kubelet; this one, written once
// into Traefik's kubeconfig, outlives any run of the tests or the demo.
const traefikTokenLifetime = 48 * time.Hour

// traefikSetup is what Traefik runs with: its ports and its kubeconfig.
type traefikSetup struct {
	web, websecure, metrics, internal int
	kubeconfig                        string
	err                               error
	took                              time.Duration
}

// prepareTraefik picks Traefik's ports, then, in the background, applies
// the Gateway API CRDs and creates what Traefik's Helm chart creates
// (ServiceAccount, ClusterRole and binding, IngressClass, GatewayClass,
// Gateway): the API server takes seconds to establish the CRDs and to
// serve their first objects, time the node's start-up can use. The setup
// arrives on the channel.
func (c *Cluster) prepareTraefik(ctx context.Context) <-chan traefikSetup {
	done := make(chan traefikSetup, 1)
	ports, err := c.freePorts(4)
	if err != nil {
		done <- traefikSetup{err: err}
		return done
	}
	s := traefikSetup{web: ports[0], websecure: ports[1], metrics: ports[2], internal: ports[3]}
	go func() {
		begin := time.Now()
		s.kubeconfig, s.err = c.createTraefikObjects(ctx, s.web)
		s.took = time.Since(begin)
		done <- s
	}()
	return done
}

func (c *Cluster) createTraefikObjects(ctx context.Context, webPort int) (kubeconfig string, err error) {
	if err := c.ApplyCRDs(ctx, filepath.Join(c.BinDir, gatewayAPICRDs)); err != nil {
		return "", fmt.Errorf("gateway API CRDs (make tools copies them to bin/%s): %w", gatewayAPICRDs, err)
	}
	if err := c.EnsureNamespace(ctx, TraefikNamespace, nil); err != nil {
		return "", err
	}
	if kubeconfig, err = c.traefikKubeconfig(ctx); err != nil {
		return "", err
	}
	return kubeconfig, c.createTraefikClasses(ctx, webPort)
}

// startTraefik runs bin/traefik on the node with the setup prepareTraefik
// made, as Traefik's ServiceAccount, and waits until it answers its ping
// and has Programmed the Gateway.
func (c *Cluster) startTraefik(ctx context.Context, bin string, setup <-chan traefikSetup) error {
	begin := time.Now()
	s := <-setup
	if s.err != nil {
		return s.err
	}
	web, websecure, metrics, internal := s.web, s.websecure, s.metrics, s.internal
	// The chart's default arguments with the kubernetesCRD provider off
	// and the kubernetesGateway one on: its entrypoints (web, websecure
	// with TLS, metrics, and traefik for ping), on this node's addresses
	// instead of a pod's: web and websecure on the bridge, where hosts and
	// pods reach them; metrics and ping where the test process checks
	// health. The Ingress and Gateway status addresses are the bridge's, as
	// the chart's published Service would give its load balancer's. Not
	// the chart's --api.dashboard=true: the dashboard's web UI is built
	// with npm and is not in Traefik's Go module (Traefik logs an error at
	// every configuration change without it), and only an IngressRoute,
	// a kubernetesCRD object, would expose it.
	ep := func(ip string, port int) string { return net.JoinHostPort(ip, strconv.Itoa(port)) + "/tcp" }
	waited := time.Since(begin)
	_, err := c.start("traefik", []string{
		"KUBECONFIG=" + s.kubeconfig,
		// Not in a pod: never the in-cluster configuration.
		"KUBERNETES_SERVICE_HOST=", "KUBERNETES_SERVICE_PORT=",
	}, bin,
		// The chart checks for a new version by default; nothing here
		// reaches the internet.
		"--global.checkNewVersion=false",
		"--entryPoints.metrics.address="+ep(c.plan.localIP, metrics),
		"--entryPoints.traefik.address="+ep(c.plan.localIP, internal),
		"--entryPoints.web.address="+ep(c.plan.bridgeIP, web),
		"--entryPoints.websecure.address="+ep(c.plan.bridgeIP, websecure),
		"--entryPoints.websecure.http.tls=true",
		"--ping=true",
		"--metrics.prometheus=true",
		"--metrics.prometheus.entrypoint=metrics",
		"--providers.kubernetesingress",
		"--providers.kubernetesingress.ingressendpoint.ip="+c.plan.bridgeIP,
		"--providers.kubernetesgateway",
		"--providers.kubernetesgateway.statusaddress.ip="+c.plan.bridgeIP,
		"--log.level=INFO",
		"--log.noColor=true", // a file, not a terminal
	)
	if err != nil {
		return err
	}
	p, started := c.procs["traefik"], time.Now()
	ping := "http://" + net.JoinHostPort(c.plan.localIP, strconv.Itoa(internal)) + "/ping"
	if err := c.poll(ctx, p, 60*time.Second, "traefik /ping", func() error { return httpOK(nil, ping) }); err != nil {
		return err
	}
	pinged := time.Since(started)
	if err := c.poll(ctx, p, 60*time.Second, "Gateway "+TraefikNamespace+"/"+TraefikGateway+" Accepted and Programmed by Traefik", c.gatewayProgrammed(ctx)); err != nil {
		return err
	}
	c.TraefikAddr = net.JoinHostPort(c.plan.bridgeIP, strconv.Itoa(web))
	c.TraefikMetricsURL = "http://" + net.JoinHostPort(c.plan.localIP, strconv.Itoa(metrics)) + "/metrics"
	c.logf("traefik ready %s after the node (the Gateway API CRDs and Traefik's objects took %s beside the node's start, %s after it; its ping %s after it started, the Gateway Programmed %s later; web %s)",
		time.Since(begin).Round(time.Millisecond), s.took.Round(time.Millisecond), waited.Round(time.Millisecond), pinged.Round(time.Millisecond),
		(time.Since(started) - pinged).Round(time.Millisecond), c.TraefikAddr)
	return nil
}

// traefikKubeconfig creates Traefik's ServiceAccount with the chart's
// ClusterRole and writes a kubeconfig holding a token of it, so Traefik
// runs with a stock install's permissions rather than as an admin.
func (c *Cluster) traefikKubeconfig(ctx context.Context) (string, error) {
	const sa = "traefik"
	_, err := c.Client.CoreV1().ServiceAccounts(TraefikNamespace).Create(ctx, &corev1.ServiceAccount{
		ObjectMeta: metav1.ObjectMeta{Name: sa, Namespace: TraefikNamespace},
	}, metav1.CreateOptions{})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		return "", fmt.Errorf("traefik ServiceAccount: %w", err)
	}
	role := traefikClusterRole()
	if _, err := c.Client.RbacV1().ClusterRoles().Create(ctx, role, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return "", fmt.Errorf("traefik ClusterRole: %w", err)
	}
	binding := &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: role.Name},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: role.Name},
		Subjects:   []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Name: sa, Namespace: TraefikNamespace}},
	}
	if _, err := c.Client.RbacV1().ClusterRoleBindings().Create(ctx, binding, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return "", fmt.Errorf("traefik ClusterRoleBinding: %w", err)
	}
	tr, err := c.Client.CoreV1().ServiceAccounts(TraefikNamespace).CreateToken(ctx, sa, &authenticationv1.TokenRequest{
		Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: ptr.To(int64(traefikTokenLifetime / time.Second))},
	}, metav1.CreateOptions{})
	if err != nil {
		return "", fmt.Errorf("traefik token: %w", err)
	}
	kc := clientcmdapi.NewConfig()
	kc.Clusters["ebb-local"] = &clientcmdapi.Cluster{Server: c.RestConfig.Host, CertificateAuthorityData: c.CAPEM}
	kc.AuthInfos[sa] = &clientcmdapi.AuthInfo{Token: tr.Status.Token}
	kc.Contexts["traefik"] = &clientcmdapi.Context{Cluster: "ebb-local", AuthInfo: sa, Namespace: TraefikNamespace}
	kc.CurrentContext = "traefik"
	path := filepath.Join(c.Dir, "traefik-kubeconfig")
	if err := clientcmd.WriteToFile(*kc, path); err != nil {
		return "", fmt.Errorf("write traefik kubeconfig: %w", err)
	}
	if err := os.Chmod(path, 0o600); err != nil {
		return "", fmt.Errorf("write traefik kubeconfig: %w", err)
	}
	return path, nil
}

// createTraefikClasses creates the IngressClass, the GatewayClass and the
// Gateway, whose HTTP listener is on the web entrypoint's port: Traefik
// maps a listener to the entrypoint of the same port.
func (c *Cluster) createTraefikClasses(ctx context.Context, webPort int) error {
	ic := &networkingv1.IngressClass{
		ObjectMeta: metav1.ObjectMeta{Name: TraefikIngressClass, Annotations: map[string]string{
			networkingv1.AnnotationIsDefaultIngressClass: "true",
		}},
		Spec: networkingv1.IngressClassSpec{Controller: "traefik.io/ingress-controller"},
	}
	if _, err := c.Client.NetworkingV1().IngressClasses().Create(ctx, ic, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("traefik IngressClass: %w", err)
	}
	dyn, err := dynamic.NewForConfig(c.RestConfig)
	if err != nil {
		return fmt.Errorf("dynamic client: %w", err)
	}
	gc := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": GatewayAPIGroup + "/v1", "kind": "GatewayClass",
		"metadata": map[string]any{"name": TraefikGatewayClass},
		"spec":     map[string]any{"controllerName": "traefik.io/gateway-controller"},
	}}
	if _, err := dyn.Resource(GatewayClasses).Create(ctx, gc, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("traefik GatewayClass: %w", err)
	}
	gw := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": GatewayAPIGroup + "/v1", "kind": "Gateway",
		"metadata": map[string]any{"name": TraefikGateway, "namespace": TraefikNamespace},
		"spec": map[string]any{
			"gatewayClassName": TraefikGatewayClass,
			"listeners": []any{map[string]any{
				"name": TraefikListener, "port": int64(webPort), "protocol": "HTTP",
				"allowedRoutes": map[string]any{"namespaces": map[string]any{"from": "All"}},
			}},
		},
	}}
	if _, err := dyn.Resource(Gateways).Namespace(TraefikNamespace).Create(ctx, gw, metav1.CreateOptions{}); err != nil {
		return fmt.Errorf("traefik Gateway: %w", err)
	}
	return nil
}

// gatewayProgrammed checks that Traefik has accepted and programmed the
// current generation of the Gateway.
func (c *Cluster) gatewayProgrammed(ctx context.Context) func() error {
	dyn, err := dynamic.NewForConfig(c.RestConfig)
	if err != nil {
		return func() error { return err }
	}
	return func() error {
		gw, err := dyn.Resource(Gateways).Namespace(TraefikNamespace).Get(ctx, TraefikGateway, metav1.GetOptions{})
		if err != nil {
			return err
		}
		conds, _, _ := unstructured.NestedSlice(gw.Object, "status", "conditions")
		for _, want := range []string{"Accepted", "Programmed"} {
			if !conditionTrue(conds, want, gw.GetGeneration()) {
				return fmt.Errorf("%s not True for generation %d: %v", want, gw.GetGeneration(), conds)
			}
		}
		return nil
	}
}

// conditionTrue finds a metav1.Condition of the type in an unstructured
// status and says whether it is True for the generation.
func conditionTrue(conds []any, typ string, generation int64) bool {
	for _, cond := range conds {
		m, ok := cond.(map[string]any)
		if !ok || m["type"] != typ {
			continue
		}
		observed, _ := m["observedGeneration"].(int64)
		return m["status"] == "True" && observed == generation
	}
	return false
}
