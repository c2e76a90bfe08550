package cluster

import (
	"context"
	"crypto/x509"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apiextensionsclient "k8s.io/apiextensions-apiserver/pkg/client/clientset/clientset"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
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
	dir, err := moduleDir(kedaModule)
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
	pair, err := c.ca.issue("keda-operator", nil, []string{"keda-operator", "keda-operator.keda.svc", "localhost", "127.0.0.1"}, x509.ExtKeyUsageServerAuth)
	if err != nil {
		return "", err
	}
	if _, _, err := pair.write(c.KEDACertDir, "tls"); err != nil {
		return "", err
	}
	if err := os.WriteFile(filepath.Join(c.KEDACertDir, "ca.crt"), c.CAPEM, 0o600); err != nil {
		return "", fmt.Errorf("keda certs: %w", err)
	}
	ports, err := freePorts(3)
	if err != nil {
		return "", err
	}
	health := fmt.Sprintf("127.0.0.1:%d", ports[1])
	_, err = c.start("keda-operator", []string{
		"KUBECONFIG=" + c.Kubeconfig, "WATCH_NAMESPACE=", "KEDA_CLUSTER_OBJECT_NAMESPACE=" + KEDANamespace,
		"POD_NAMESPACE=" + KEDANamespace, "POD_NAME=keda-operator-local",
	}, bin,
		"--metrics-bind-address", fmt.Sprintf("127.0.0.1:%d", ports[0]),
		"--health-probe-bind-address", health,
		"--metrics-service-bind-address", fmt.Sprintf("127.0.0.1:%d", ports[2]),
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

// moduleDir finds a module of ebb's build list in the module cache.
func moduleDir(module string) (string, error) {
	root, err := ModuleRoot()
	if err != nil {
		return "", err
	}
	cmd := exec.Command("go", "list", "-m", "-f", "{{.Dir}}", module)
	cmd.Dir = root
	out, err := cmd.Output()
	if err != nil {
		return "", fmt.Errorf("locate module %s (go list -m): %w", module, err)
	}
	dir := strings.TrimSpace(string(out))
	if dir == "" {
		return "", fmt.Errorf("module %s is not downloaded: run `go mod download`", module)
	}
	return dir, nil
}
