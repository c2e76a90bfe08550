package nodeagent

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"
)

// materializeVolumes writes every volume the agent supports into
// <pod dir>/volumes/<name>: emptyDir, secret, configMap and projected
// (service-account token, configMap, secret, downward API). Secrets and
// ConfigMaps are re-read by refreshVolumes, so rotated certificates reach
// running containers as they do on a real node. A volume of another kind is
// an error that names it.
func materializeVolumes(ctx context.Context, c kubernetes.Interface, pod *corev1.Pod, dir string, cfg *Config) (map[string]string, error) {
	paths := map[string]string{}
	for _, v := range pod.Spec.Volumes {
		p := filepath.Join(dir, "volumes", v.Name)
		if err := os.MkdirAll(p, 0o755); err != nil {
			return nil, fmt.Errorf("volume %s: %w", v.Name, err)
		}
		paths[v.Name] = p
		files, err := volumeFiles(ctx, c, pod, v, cfg)
		if err != nil {
			return nil, fmt.Errorf("volume %s: %w", v.Name, err)
		}
		if err := writeVolume(p, files); err != nil {
			return nil, fmt.Errorf("volume %s: %w", v.Name, err)
		}
	}
	return paths, nil
}

// refreshVolumes rewrites the files of secret, configMap and projected
// volumes whose content changed.
func refreshVolumes(ctx context.Context, c kubernetes.Interface, pod *corev1.Pod, paths map[string]string, cfg *Config) error {
	for _, v := range pod.Spec.Volumes {
		if v.EmptyDir != nil || paths[v.Name] == "" {
			continue
		}
		files, err := volumeFiles(ctx, c, pod, v, cfg)
		if err != nil {
			return fmt.Errorf("volume %s: %w", v.Name, err)
		}
		if err := writeVolume(paths[v.Name], files); err != nil {
			return fmt.Errorf("volume %s: %w", v.Name, err)
		}
	}
	return nil
}

func volumeFiles(ctx context.Context, c kubernetes.Interface, pod *corev1.Pod, v corev1.Volume, cfg *Config) (map[string][]byte, error) {
	switch {
	case v.EmptyDir != nil:
		return nil, nil
	case v.Secret != nil:
		return secretFiles(ctx, c, pod.Namespace, v.Secret.SecretName, v.Secret.Items, v.Secret.Optional)
	case v.ConfigMap != nil:
		return configMapFiles(ctx, c, pod.Namespace, v.ConfigMap.Name, v.ConfigMap.Items, v.ConfigMap.Optional)
	case v.Projected != nil:
		files := map[string][]byte{}
		for _, src := range v.Projected.Sources {
			var part map[string][]byte
			var err error
			switch {
			case src.ServiceAccountToken != nil:
				part, err = tokenFile(ctx, c, pod, src.ServiceAccountToken)
			case src.ConfigMap != nil:
				part, err = configMapFiles(ctx, c, pod.Namespace, src.ConfigMap.Name, src.ConfigMap.Items, src.ConfigMap.Optional)
			case src.Secret != nil:
				part, err = secretFiles(ctx, c, pod.Namespace, src.Secret.Name, src.Secret.Items, src.Secret.Optional)
			case src.DownwardAPI != nil:
				part = map[string][]byte{}
				for _, item := range src.DownwardAPI.Items {
					if item.FieldRef != nil {
						val, ferr := podField(pod, item.FieldRef.FieldPath)
						if ferr != nil {
							return nil, ferr
						}
						part[item.Path] = []byte(val)
					}
				}
			}
			if err != nil {
				return nil, err
			}
			for k, b := range part {
				files[k] = b
			}
		}
		return files, nil
	}
	return nil, fmt.Errorf("unsupported volume kind (the node agent supports emptyDir, secret, configMap, projected)")
}

func secretFiles(ctx context.Context, c kubernetes.Interface, ns, name string, items []corev1.KeyToPath, optional *bool) (map[string][]byte, error) {
	s, err := c.CoreV1().Secrets(ns).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		if optional != nil && *optional {
			return nil, nil
		}
		return nil, fmt.Errorf("secret %s: %w", name, err)
	}
	return pick(s.Data, items), nil
}

func configMapFiles(ctx context.Context, c kubernetes.Interface, ns, name string, items []corev1.KeyToPath, optional *bool) (map[string][]byte, error) {
	cm, err := c.CoreV1().ConfigMaps(ns).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		if optional != nil && *optional {
			return nil, nil
		}
		return nil, fmt.Errorf("configmap %s: %w", name, err)
	}
	data := make(map[string][]byte, len(cm.Data))
	for k, v := range cm.Data {
		data[k] = []byte(v)
	}
	for k, v := range cm.BinaryData {
		data[k] = v
	}
	return pick(data, items), nil
}

func pick(data map[string][]byte, items []corev1.KeyToPath) map[string][]byte {
	if len(items) == 0 {
		return data
	}
	out := make(map[string][]byte, len(items))
	for _, it := range items {
		if b, ok := data[it.Key]; ok {
			out[it.Path] = b
		}
	}
	return out
}

func tokenFile(ctx context.Context, c kubernetes.Interface, pod *corev1.Pod, p *corev1.ServiceAccountTokenProjection) (map[string][]byte, error) {
	sa := pod.Spec.ServiceAccountName
	if sa == "" {
		sa = "default"
	}
	exp := int64(3600)
	if p.ExpirationSeconds != nil {
		exp = *p.ExpirationSeconds
	}
	req := &authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{
		ExpirationSeconds: ptr.To(exp),
		BoundObjectRef:    &authenticationv1.BoundObjectReference{Kind: "Pod", APIVersion: "v1", Name: pod.Name, UID: pod.UID},
	}}
	if p.Audience != "" {
		req.Spec.Audiences = []string{p.Audience}
	}
	tr, err := c.CoreV1().ServiceAccounts(pod.Namespace).CreateToken(ctx, sa, req, metav1.CreateOptions{})
	if err != nil {
		return nil, fmt.Errorf("token for service account %s: %w", sa, err)
	}
	return map[string][]byte{p.Path: []byte(tr.Status.Token)}, nil
}

// writeVolume writes files that differ, each through a temporary file and a
// rename so a reader never sees half a certificate.
func writeVolume(dir string, files map[string][]byte) error {
	for name, b := range files {
		p := filepath.Join(dir, filepath.Clean("/"+name))
		if old, err := os.ReadFile(p); err == nil && string(old) == string(b) {
			continue
		}
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			return err
		}
		tmp := p + ".tmp-" + fmt.Sprint(time.Now().UnixNano())
		if err := os.WriteFile(tmp, b, 0o644); err != nil {
			return err
		}
		if err := os.Rename(tmp, p); err != nil {
			return err
		}
	}
	return nil
}

// mountScript is the shell prelude that, inside the container's own mount
// namespace (made by `ip netns exec`), bind-mounts each volume at its
// mountPath before exec'ing the program. Mount points missing on the host
// are created and recorded in created so the agent removes them later.
func mountScript(ctr *corev1.Container, volumePaths map[string]string, created func(string)) (string, error) {
	var b strings.Builder
	b.WriteString("set -e\n")
	for _, m := range ctr.VolumeMounts {
		src, ok := volumePaths[m.Name]
		if !ok {
			return "", fmt.Errorf("volumeMount %s: no volume of that name the node agent could provide", m.Name)
		}
		if m.SubPath != "" {
			src = filepath.Join(src, filepath.Clean("/"+m.SubPath))
		}
		target := filepath.Clean(m.MountPath)
		if _, err := os.Stat(target); os.IsNotExist(err) {
			var missing []string
			for d := target; d != "/"; d = filepath.Dir(d) {
				if _, err := os.Stat(d); err == nil {
					break
				}
				missing = append(missing, d)
			}
			if err := os.MkdirAll(target, 0o755); err != nil {
				return "", fmt.Errorf("volumeMount %s: create %s: %w", m.Name, target, err)
			}
			for _, d := range missing {
				created(d)
			}
		}
		fmt.Fprintf(&b, "mount --bind %s %s\n", shellQuote(src), shellQuote(target))
		if m.ReadOnly {
			fmt.Fprintf(&b, "mount -o remount,bind,ro %s\n", shellQuote(target))
		}
	}
	b.WriteString("exec \"$0\" \"$@\"\n")
	return b.String(), nil
}

func shellQuote(s string) string { return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'" }
