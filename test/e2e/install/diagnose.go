package install

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/ebb-dev/ebb/test/cluster"
)

// Diagnose reads what the release's pods say about an app: each scaler's
// /apps/<ns>/<app>, each activator's /routing entry and held-request
// metrics lines, for the message of a failed scenario.
func (r *Release) Diagnose(ctx context.Context, c *cluster.Cluster, ns, app string) string {
	var b strings.Builder
	client := &http.Client{Timeout: 2 * time.Second}
	read := func(url string) string {
		resp, err := client.Get(url)
		if err != nil {
			return err.Error()
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
		return resp.Status + " " + string(body)
	}
	for _, comp := range []struct{ name, path string }{
		{"ebb-scaler", fmt.Sprintf(":8080/apps/%s/%s", ns, app)},
		{"ebb-activator", ":8081/routing"},
		{"ebb-activator", ":8081/metrics"},
	} {
		sel := "app.kubernetes.io/name=" + comp.name
		if comp.name == "ebb-activator" {
			sel = "app.kubernetes.io/component=activator" // every pool's
		}
		pods, err := c.Client.CoreV1().Pods(r.Namespace).List(ctx, metav1.ListOptions{LabelSelector: sel + ",app.kubernetes.io/instance=" + r.Name})
		if err != nil {
			fmt.Fprintf(&b, "%s pods: %v\n", comp.name, err)
			continue
		}
		for _, p := range pods.Items {
			out := read("http://" + p.Status.PodIP + comp.path)
			var keep []string
			for _, line := range strings.Split(out, "\n") {
				if strings.Contains(comp.path, "metrics") && (strings.HasPrefix(line, "#") || !strings.Contains(line, app) && !strings.HasPrefix(line, "ebb_activator_requests")) {
					continue
				}
				keep = append(keep, line)
			}
			out = strings.Join(keep, "\n")
			if len(out) > 3000 {
				out = out[:3000] + "…"
			}
			fmt.Fprintf(&b, "%s %s%s:\n%s\n", time.Now().Format("15:04:05.000"), p.Name, comp.path, strings.TrimSpace(out))
		}
	}
	return b.String()
}
