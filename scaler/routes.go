package scaler

import (
	"context"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/go-logr/logr"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"

	routingv1alpha1 "github.com/ebb-dev/ebb/internal/apis/routing/v1alpha1"
	"github.com/ebb-dev/ebb/internal/groupsuffix"
)

// routeFoundFor is how long an AppRoute seen is trusted before it is read
// again.
const routeFoundFor = 30 * time.Second

// routeCheck tells a ScaledObject whose app names no AppRoute (app:
// hello-typo) from one whose app is merely at zero: both have no pod, but
// the first would never wake. It asks the API server only about apps with
// no pod and nothing held, and remembers the AppRoutes it found.
type routeCheck struct {
	client dynamic.Interface // nil: no check (tests with a fake clientset)
	gvr    schema.GroupVersionResource
	names  groupsuffix.Names
	log    logr.Logger

	mu    sync.Mutex
	found map[appKey]time.Time // until when
}

func newRouteCheck(client dynamic.Interface, names groupsuffix.Names, log logr.Logger) *routeCheck {
	return &routeCheck{client: client, gvr: routingv1alpha1.GroupVersionResource(names.Group()), names: names, log: log, found: map[appKey]time.Time{}}
}

// check returns an InvalidArgument error when k's namespace has no AppRoute
// named k.Name, naming the AppRoutes it has. When it cannot tell (the API
// server fails, the CRD is not installed) it lets the app through: a wrong
// refusal would stop a working app from scaling.
func (c *routeCheck) check(ctx context.Context, k appKey, now time.Time) error {
	if c == nil || c.client == nil {
		return nil
	}
	c.mu.Lock()
	until, ok := c.found[k]
	c.mu.Unlock()
	if ok && now.Before(until) {
		return nil
	}
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	_, err := c.client.Resource(c.gvr).Namespace(k.Namespace).Get(ctx, k.Name, metav1.GetOptions{})
	if err == nil {
		c.mu.Lock()
		c.found[k] = now.Add(routeFoundFor)
		if len(c.found) > 10_000 { // bound memory: forget the lot, the next calls read again
			c.found = map[appKey]time.Time{k: now.Add(routeFoundFor)}
		}
		c.mu.Unlock()
		return nil
	}
	if !apierrors.IsNotFound(err) {
		c.log.V(1).Info("cannot tell whether the app has an AppRoute; answering for it", "namespace", k.Namespace, "app", k.Name, "err", err.Error())
		return nil
	}
	// No such AppRoute, or no such resource (the CRD is not installed): a
	// list tells them apart.
	list, err := c.client.Resource(c.gvr).Namespace(k.Namespace).List(ctx, metav1.ListOptions{})
	if err != nil {
		c.log.V(1).Info("cannot list AppRoutes; answering for the app", "namespace", k.Namespace, "app", k.Name, "err", err.Error())
		return nil
	}
	var known []string
	for _, r := range list.Items {
		known = append(known, r.GetName())
	}
	sort.Strings(known)
	if len(known) == 0 {
		return status.Errorf(codes.InvalidArgument, "app %q: namespace %s has no AppRoute of ebb instance %s: label the namespace %s=%s and the Deployment's pod template %s=%s",
			k.Name, k.Namespace, c.names.Suffix(), c.names.InjectLabel(), groupsuffix.InjectEnabled, c.names.AppLabel(), k.Name)
	}
	return status.Errorf(codes.InvalidArgument, "app %q: no AppRoute %s in namespace %s (the app is the pod template's label %s); its apps are: %s",
		k.Name, k.Name, k.Namespace, c.names.AppLabel(), strings.Join(known, ", "))
}
