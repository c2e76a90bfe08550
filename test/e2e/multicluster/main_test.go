// Package multicluster runs ebb on two local clusters at once, each with
// its own control plane, KEDA, node (kubelet, containerd, kube-proxy) and
// ebb installed from the chart, and ebb-federation on the first (the hub,
// also a member) splitting apps' bounds across both.
package multicluster

import (
	"context"
	"fmt"
	"os"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	"k8s.io/utils/ptr"

	"github.com/ebb-dev/ebb/federation"
	"github.com/ebb-dev/ebb/test/cluster"
	"github.com/ebb-dev/ebb/test/e2e/install"
)

// member is one member cluster with ebb installed.
type member struct {
	name string
	c    *cluster.Cluster
	ebb  *install.Release
	dyn  dynamic.Interface
}

// a is the hub and a member; b is a member.
var a, b member

func TestMain(m *testing.M) {
	os.Exit(cluster.MainSeveral(m, 2, cluster.Options{KEDAMetricsAdapter: true, Logf: logf}, func(ctx context.Context, cs []*cluster.Cluster) error {
		a, b = member{name: "a", c: cs[0]}, member{name: "b", c: cs[1]}
		var err error
		for _, m := range []*member{&a, &b} {
			if m.dyn, err = dynamic.NewForConfig(m.c.RestConfig); err != nil {
				return err
			}
		}
		// The hub reads members often so the figures are about ebb, not
		// its polling.
		if a.ebb, err = install.Install(ctx, a.c, install.Options{Logf: logf, Set: []string{
			"federation.enabled=true", "federation.member.enabled=true", "federation.interval=1s", "federation.extraArgs={--log-level=debug}"}}); err != nil {
			return fmt.Errorf("install ebb in cluster a: %w", err)
		}
		if err := install.WaitDeploymentReady(ctx, a.c, a.ebb.Namespace, a.ebb.Fullname+"-federation", 3*time.Minute); err != nil {
			return err
		}
		if b.ebb, err = install.Install(ctx, b.c, install.Options{Logf: logf, Set: []string{"federation.member.enabled=true"}}); err != nil {
			return fmt.Errorf("install ebb in cluster b: %w", err)
		}
		for _, m := range []member{a, b} {
			if err := register(ctx, a, m); err != nil {
				return err
			}
		}
		return nil
	}))
}

func logf(f string, a ...any) { fmt.Printf(time.Now().Format("15:04:05.000")+" "+f+"\n", a...) }

// register makes m a member of the hub: a token of m's
// <fullname>-federation-member ServiceAccount (the chart's, with the
// member's least privilege) in a kubeconfig Secret on the hub, labelled
// with m's name and annotated with m's scaler Service.
func register(ctx context.Context, hub, m member) error {
	sa := m.ebb.Fullname + "-federation-member"
	tr, err := m.c.Client.CoreV1().ServiceAccounts(m.ebb.Namespace).CreateToken(ctx, sa, &authenticationv1.TokenRequest{
		Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: ptr.To(int64(24 * 3600))},
	}, metav1.CreateOptions{})
	if err != nil {
		return fmt.Errorf("token of %s in cluster %s: %w", sa, m.name, err)
	}
	kc := clientcmdapi.NewConfig()
	kc.Clusters[m.name] = &clientcmdapi.Cluster{Server: m.c.RestConfig.Host, CertificateAuthorityData: m.c.CAPEM}
	kc.AuthInfos[m.name] = &clientcmdapi.AuthInfo{Token: tr.Status.Token}
	kc.Contexts[m.name] = &clientcmdapi.Context{Cluster: m.name, AuthInfo: m.name}
	kc.CurrentContext = m.name
	data, err := clientcmd.Write(*kc)
	if err != nil {
		return fmt.Errorf("kubeconfig of cluster %s: %w", m.name, err)
	}
	names := hub.ebb.Names
	_, err = hub.c.Client.CoreV1().Secrets(hub.ebb.Namespace).Create(ctx, &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{
			Name: "member-" + m.name, Namespace: hub.ebb.Namespace,
			Labels:      map[string]string{names.Key(federation.MemberLabel): m.name},
			Annotations: map[string]string{names.Key(federation.ScalerAnnotation): fmt.Sprintf("%s/%s-scaler:8080", m.ebb.Namespace, m.ebb.Fullname)},
		},
		Data: map[string][]byte{federation.KubeconfigKey: data},
	}, metav1.CreateOptions{})
	if err != nil {
		return fmt.Errorf("register cluster %s on the hub: %w", m.name, err)
	}
	logf("cluster %s registered on the hub (API server %s, ServiceAccount %s/%s)", m.name, m.c.RestConfig.Host, m.ebb.Namespace, sa)
	return nil
}
