package nodeagent

import (
	"context"
	"fmt"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
)

// containerEnv resolves a container's environment the way the kubelet does:
// the kubernetes Service variables and HOSTNAME, then envFrom, then env in
// order, each value able to reference earlier ones with $(NAME).
func containerEnv(ctx context.Context, c kubernetes.Interface, pod *corev1.Pod, ctr *corev1.Container, cfg *Config) ([]string, map[string]string, error) {
	vars := map[string]string{}
	var order []string
	set := func(k, v string) {
		if _, ok := vars[k]; !ok {
			order = append(order, k)
		}
		vars[k] = v
	}
	set("HOSTNAME", pod.Name)
	if cfg.KubernetesServiceHost != "" {
		set("KUBERNETES_SERVICE_HOST", cfg.KubernetesServiceHost)
		set("KUBERNETES_SERVICE_PORT", "443")
		set("KUBERNETES_SERVICE_PORT_HTTPS", "443")
		set("KUBERNETES_PORT", "tcp://"+cfg.KubernetesServiceHost+":443")
	}
	for _, from := range ctr.EnvFrom {
		data, err := envFromSource(ctx, c, pod.Namespace, from)
		if err != nil {
			return nil, nil, err
		}
		for k, v := range data {
			set(from.Prefix+k, v)
		}
	}
	for _, e := range ctr.Env {
		if e.ValueFrom == nil {
			set(e.Name, expand(e.Value, vars))
			continue
		}
		v, ok, err := envValueFrom(ctx, c, pod, ctr, e.ValueFrom)
		if err != nil {
			return nil, nil, fmt.Errorf("env %s: %w", e.Name, err)
		}
		if ok {
			set(e.Name, v)
		}
	}
	env := make([]string, 0, len(order)+1)
	env = append(env, "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin")
	for _, k := range order {
		env = append(env, k+"="+vars[k])
	}
	return env, vars, nil
}

func envFromSource(ctx context.Context, c kubernetes.Interface, ns string, from corev1.EnvFromSource) (map[string]string, error) {
	switch {
	case from.ConfigMapRef != nil:
		cm, err := c.CoreV1().ConfigMaps(ns).Get(ctx, from.ConfigMapRef.Name, metav1.GetOptions{})
		if err != nil {
			if from.ConfigMapRef.Optional != nil && *from.ConfigMapRef.Optional {
				return nil, nil
			}
			return nil, fmt.Errorf("envFrom configmap %s: %w", from.ConfigMapRef.Name, err)
		}
		return cm.Data, nil
	case from.SecretRef != nil:
		s, err := c.CoreV1().Secrets(ns).Get(ctx, from.SecretRef.Name, metav1.GetOptions{})
		if err != nil {
			if from.SecretRef.Optional != nil && *from.SecretRef.Optional {
				return nil, nil
			}
			return nil, fmt.Errorf("envFrom secret %s: %w", from.SecretRef.Name, err)
		}
		out := make(map[string]string, len(s.Data))
		for k, v := range s.Data {
			out[k] = string(v)
		}
		return out, nil
	}
	return nil, nil
}

func envValueFrom(ctx context.Context, c kubernetes.Interface, pod *corev1.Pod, ctr *corev1.Container, src *corev1.EnvVarSource) (string, bool, error) {
	switch {
	case src.FieldRef != nil:
		v, err := podField(pod, src.FieldRef.FieldPath)
		return v, err == nil, err
	case src.ResourceFieldRef != nil:
		v, err := resourceField(ctr, src.ResourceFieldRef)
		return v, err == nil, err
	case src.ConfigMapKeyRef != nil:
		ref := src.ConfigMapKeyRef
		cm, err := c.CoreV1().ConfigMaps(pod.Namespace).Get(ctx, ref.Name, metav1.GetOptions{})
		if err == nil {
			if v, ok := cm.Data[ref.Key]; ok {
				return v, true, nil
			}
			err = fmt.Errorf("configmap %s has no key %q", ref.Name, ref.Key)
		}
		if ref.Optional != nil && *ref.Optional {
			return "", false, nil
		}
		return "", false, err
	case src.SecretKeyRef != nil:
		ref := src.SecretKeyRef
		s, err := c.CoreV1().Secrets(pod.Namespace).Get(ctx, ref.Name, metav1.GetOptions{})
		if err == nil {
			if v, ok := s.Data[ref.Key]; ok {
				return string(v), true, nil
			}
			err = fmt.Errorf("secret %s has no key %q", ref.Name, ref.Key)
		}
		if ref.Optional != nil && *ref.Optional {
			return "", false, nil
		}
		return "", false, err
	}
	return "", false, nil
}

// podField resolves a downward-API field path.
func podField(pod *corev1.Pod, path string) (string, error) {
	if k, ok := strings.CutPrefix(path, "metadata.labels['"); ok {
		return pod.Labels[strings.TrimSuffix(k, "']")], nil
	}
	if k, ok := strings.CutPrefix(path, "metadata.annotations['"); ok {
		return pod.Annotations[strings.TrimSuffix(k, "']")], nil
	}
	switch path {
	case "metadata.name":
		return pod.Name, nil
	case "metadata.namespace":
		return pod.Namespace, nil
	case "metadata.uid":
		return string(pod.UID), nil
	case "spec.nodeName":
		return pod.Spec.NodeName, nil
	case "spec.serviceAccountName":
		return pod.Spec.ServiceAccountName, nil
	case "status.hostIP", "status.hostIPs":
		return pod.Status.HostIP, nil
	case "status.podIP", "status.podIPs":
		return pod.Status.PodIP, nil
	}
	return "", fmt.Errorf("unsupported fieldRef %q", path)
}

func resourceField(ctr *corev1.Container, ref *corev1.ResourceFieldSelector) (string, error) {
	kind, name, ok := strings.Cut(ref.Resource, ".")
	if !ok {
		return "", fmt.Errorf("unsupported resourceFieldRef %q", ref.Resource)
	}
	list := ctr.Resources.Limits
	if kind == "requests" {
		list = ctr.Resources.Requests
	}
	q, ok := list[corev1.ResourceName(name)]
	if !ok {
		// The kubelet reports node allocatable for an unset limit.
		if kind == "limits" && name == "cpu" {
			q = resource.MustParse("2")
		} else if kind == "limits" && name == "memory" {
			q = resource.MustParse("8Gi")
		} else {
			return "0", nil
		}
	}
	divisor := ref.Divisor
	if divisor.IsZero() {
		divisor = resource.MustParse("1")
	}
	v := (q.MilliValue() + divisor.MilliValue() - 1) / divisor.MilliValue()
	return strconv.FormatInt(v, 10), nil
}

// expand replaces $(NAME) with vars[NAME]; an unknown reference stays as it
// is and $$ is a literal $, as in Kubernetes.
func expand(s string, vars map[string]string) string {
	if !strings.Contains(s, "$") {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] != '$' || i+1 >= len(s) {
			b.WriteByte(s[i])
			continue
		}
		switch s[i+1] {
		case '$':
			b.WriteByte('$')
			i++
		case '(':
			end := strings.IndexByte(s[i+2:], ')')
			if end < 0 {
				b.WriteString(s[i:])
				return b.String()
			}
			name := s[i+2 : i+2+end]
			if v, ok := vars[name]; ok {
				b.WriteString(v)
			} else {
				b.WriteString(s[i : i+3+end])
			}
			i += 2 + end
		default:
			b.WriteByte('$')
		}
	}
	return b.String()
}
