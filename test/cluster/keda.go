package cluster

import (
	"context"
	"crypto/x509"
	"encoding/base64"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apiextensionsclient "k8s.io/apiextensions-apiserver/pkg/client/clientset/clientset"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/dynamic"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/yaml"
)

// KEDANamespace is where the KEDA operator keeps its cluster objects.
const KEDANamespace = "keda"

// kedaModule is the module whose operator bin/keda-operator was built from;
// its CRDs are applied from the same module in the module cache.
const kedaModule = "github.com/kedacore/keda/v2"

// startKEDA applies KEDA's CRDs and runs its operator against the cluster
// with its own certificates; it returns the operator's health address.
func (c *Cluster) startKEDA(ctx context.Context, bin string) (string, error) {
	dir, err := ModuleDir(kedaModule)
	if err != nil {
		return "", err
	}
	if err := c.ApplyCRDs(ctx, filepath.Join(dir, "config", "crd", "bases")); err != nil {
		return "", err
	}
	if err := c.EnsureNamespace(ctx, KEDANamespace, nil); err != nil {
		return "", err
	}
	c.KEDACertDir = filepath.Join(c.Dir, "keda-certs")
	if err := os.MkdirAll(c.KEDACertDir, 0o700); err != nil {
		return "", fmt.Errorf("keda certs: %w", err)
	}
	// One certificate serves the operator's gRPC metrics service and the
	// metrics adapter, and is the adapter's client certificate towards the
	// operator (KEDA reads both from one cert dir).
	pair, err := c.ca.issue("keda", nil, []string{
		"keda-operator", "keda-operator.keda.svc", "keda-operator.keda.svc.cluster.local",
		"keda-metrics-apiserver", "keda-metrics-apiserver.keda.svc", "keda-metrics-apiserver.keda.svc.cluster.local",
		"localhost", "127.0.0.1", c.plan.bridgeIP,
	}, x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth)
	if err != nil {
		return "", err
	}
	if _, _, err := pair.write(c.KEDACertDir, "tls"); err != nil {
		return "", err
	}
	if err := os.WriteFile(filepath.Join(c.KEDACertDir, "ca.crt"), c.CAPEM, 0o600); err != nil {
		return "", fmt.Errorf("keda certs: %w", err)
	}
	ports, err := c.freePorts(3)
	if err != nil {
		return "", err
	}
	health := net.JoinHostPort(c.plan.localIP, strconv.Itoa(ports[1]))
	c.kedaMetricsService = net.JoinHostPort(c.plan.localIP, strconv.Itoa(ports[2]))
	_, err = c.startWithClusterDNS("keda-operator", []string{
		"KUBECONFIG=" + c.Kubeconfig, "WATCH_NAMESPACE=", "KEDA_CLUSTER_OBJECT_NAMESPACE=" + KEDANamespace,
		"POD_NAMESPACE=" + KEDANamespace, "POD_NAME=keda-operator-local",
		// The settings docs/install.md gives a fleet: at KEDA's defaults
		// (5 reconciles at once, 20 requests/s) 200 ScaledObjects took
		// 1m50s to be asked about, and a push-woken app's Scaled phase
		// grew from 16 to 38 ms while KEDA's client sat at its limit.
		"KEDA_SCALEDOBJECT_CTRL_MAX_RECONCILES=20",
	}, bin,
		"--kube-api-qps=100", "--kube-api-burst=200",
		"--metrics-bind-address", net.JoinHostPort(c.plan.localIP, strconv.Itoa(ports[0])),
		"--health-probe-bind-address", health,
		"--metrics-service-bind-address", c.kedaMetricsService,
		"--cert-dir", c.KEDACertDir,
		"--ca-dir", c.KEDACertDir,
		"--enable-webhook-patching=false", "--enable-apiservice-patching=false",
		"--leader-elect=false",
		"--zap-log-level=info", "--zap-encoder=console",
	)
	return health, err
}

// ApplyCRDs creates (or updates) every CustomResourceDefinition in the YAML
// files of dir and waits until each is Established.
func (c *Cluster) ApplyCRDs(ctx context.Context, dir string) error {
	files, err := filepath.Glob(filepath.Join(dir, "*.yaml"))
	if err != nil || len(files) == 0 {
		return fmt.Errorf("no CRD files in %s", dir)
	}
	client, err := apiextensionsclient.NewForConfig(c.RestConfig)
	if err != nil {
		return fmt.Errorf("apiextensions client: %w", err)
	}
	crds := client.ApiextensionsV1().CustomResourceDefinitions()
	var names []string
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			return fmt.Errorf("read CRD: %w", err)
		}
		for _, doc := range strings.Split(string(b), "\n---") {
			if strings.TrimSpace(doc) == "" {
				continue
			}
			var crd apiextensionsv1.CustomResourceDefinition
			if err := yaml.Unmarshal([]byte(doc), &crd); err != nil {
				return fmt.Errorf("decode CRD in %s: %w", f, err)
			}
			if crd.Name == "" {
				continue
			}
			_, err := crds.Create(ctx, &crd, metav1.CreateOptions{})
			if apierrors.IsAlreadyExists(err) {
				old, gerr := crds.Get(ctx, crd.Name, metav1.GetOptions{})
				if gerr != nil {
					return fmt.Errorf("update CRD %s: %w", crd.Name, gerr)
				}
				crd.ResourceVersion = old.ResourceVersion
				_, err = crds.Update(ctx, &crd, metav1.UpdateOptions{})
			}
			if err != nil {
				return fmt.Errorf("apply CRD %s: %w", crd.Name, err)
			}
			names = append(names, crd.Name)
		}
	}
	for _, name := range names {
		err := wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
			crd, err := crds.Get(ctx, name, metav1.GetOptions{})
			if err != nil {
				return false, nil
			}
			for _, cond := range crd.Status.Conditions {
				if cond.Type == apiextensionsv1.Established && cond.Status == apiextensionsv1.ConditionTrue {
					return true, nil
				}
			}
			return false, nil
		})
		if err != nil {
			return fmt.Errorf("CRD %s not established: %w", name, err)
		}
	}
	return nil
}

// KEDAMetricsAPIService is the APIService KEDA's metrics adapter serves; the
// HPAs KEDA creates read external metrics through it.
const KEDAMetricsAPIService = "v1beta1.external.metrics.k8s.io"

// startKEDAAdapter runs KEDA's metrics adapter on the node's address and
// registers it as the external metrics API: a Service without selector, an
// EndpointSlice pointing at the adapter, and the APIService (the API server
// routes to the endpoint, --enable-aggregator-routing).
func (c *Cluster) startKEDAAdapter(ctx context.Context, bin string) error {
	ports, err := c.freePorts(2)
	if err != nil {
		return err
	}
	// The adapter serves on the bridge so the API server reaches it as an
	// endpoint; the port is free on loopback and, the bridge being ours, there.
	secure := ports[0]
	_, err = c.startWithClusterDNS("keda-adapter", []string{"KUBECONFIG=" + c.Kubeconfig, "WATCH_NAMESPACE=", "KEDA_CLUSTER_OBJECT_NAMESPACE=" + KEDANamespace, "POD_NAMESPACE=" + KEDANamespace}, bin,
		"--secure-port", strconv.Itoa(secure), "--bind-address", c.plan.bridgeIP,
		"--cert-dir", c.KEDACertDir,
		"--tls-cert-file", filepath.Join(c.KEDACertDir, "tls.crt"), "--tls-private-key-file", filepath.Join(c.KEDACertDir, "tls.key"),
		"--client-ca-file", filepath.Join(c.KEDACertDir, "ca.crt"),
		"--authentication-kubeconfig", c.Kubeconfig, "--authorization-kubeconfig", c.Kubeconfig, "--lister-kubeconfig", c.Kubeconfig,
		"--metrics-service-address", c.kedaMetricsService,
		"--port", strconv.Itoa(ports[1]),
		"--zap-log-level=info", "--zap-encoder=console",
	)
	if err != nil {
		return err
	}
	const svcName = "keda-metrics-apiserver"
	svc := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: svcName, Namespace: KEDANamespace},
		Spec:       corev1.ServiceSpec{Ports: []corev1.ServicePort{{Name: "https", Port: 443, TargetPort: intstr.FromInt(secure)}}},
	}
	if _, err := c.Client.CoreV1().Services(KEDANamespace).Create(ctx, svc, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("keda adapter service: %w", err)
	}
	slice := &discoveryv1.EndpointSlice{
		ObjectMeta: metav1.ObjectMeta{Name: svcName + "-local", Namespace: KEDANamespace, Labels: map[string]string{
			discoveryv1.LabelServiceName: svcName, discoveryv1.LabelManagedBy: "ebb-local-cluster",
		}},
		AddressType: discoveryv1.AddressTypeIPv4,
		Endpoints:   []discoveryv1.Endpoint{{Addresses: []string{c.plan.bridgeIP}, Conditions: discoveryv1.EndpointConditions{Ready: ptr.To(true)}}},
		Ports:       []discoveryv1.EndpointPort{{Name: ptr.To("https"), Port: ptr.To(int32(secure)), Protocol: ptr.To(corev1.ProtocolTCP)}},
	}
	if _, err := c.Client.DiscoveryV1().EndpointSlices(KEDANamespace).Create(ctx, slice, metav1.CreateOptions{}); err != nil {
		return fmt.Errorf("keda adapter endpoints: %w", err)
	}
	dyn, err := dynamic.NewForConfig(c.RestConfig)
	if err != nil {
		return fmt.Errorf("dynamic client: %w", err)
	}
	apiServices := dyn.Resource(schema.GroupVersionResource{Group: "apiregistration.k8s.io", Version: "v1", Resource: "apiservices"})
	apiService := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "apiregistration.k8s.io/v1", "kind": "APIService",
		"metadata": map[string]any{"name": KEDAMetricsAPIService},
		"spec": map[string]any{
			"service":              map[string]any{"namespace": KEDANamespace, "name": svcName, "port": int64(443)},
			"group":                "external.metrics.k8s.io",
			"version":              "v1beta1",
			"caBundle":             base64.StdEncoding.EncodeToString(c.CAPEM),
			"groupPriorityMinimum": int64(100),
			"versionPriority":      int64(100),
		},
	}}
	if _, err := apiServices.Create(ctx, apiService, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("keda adapter APIService: %w", err)
	}
	return c.poll(ctx, c.procs["keda-adapter"], 60*time.Second, "KEDA metrics APIService Available", func() error {
		s, err := apiServices.Get(ctx, KEDAMetricsAPIService, metav1.GetOptions{})
		if err != nil {
			return err
		}
		conds, _, _ := unstructured.NestedSlice(s.Object, "status", "conditions")
		for _, cond := range conds {
			if m, ok := cond.(map[string]any); ok && m["type"] == "Available" && m["status"] == "True" {
				return nil
			}
		}
		return fmt.Errorf("not available: %v", conds)
	})
}
