package webhook

import (
	"cmp"
	"context"
	"fmt"
	"regexp"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	gatewayv1 "sigs.k8s.io/gateway-api/apis/v1"

	routingv1alpha1 "github.com/ebb-dev/ebb/internal/apis/routing/v1alpha1"
)

// Hosts from the user's own routing objects. An Ingress
// (networking.k8s.io/v1, any class) or an HTTPRoute
// (gateway.networking.k8s.io/v1, when the Gateway API is installed) in an
// AppRoute's namespace names the app when one of its backends is the
// app's Service (spec.service.name) on the Service port that carries the
// app's traffic (spec.service.port): an Ingress backend by that port's
// number or its name, an HTTPRoute backendRef of group "" and kind
// Service (the defaults), its namespace unset or the route's own, by the
// port's number, with a weight other than 0. Each such Ingress rule's host
// and HTTPRoute hostname becomes one of the AppRoute's spec.hostPaths,
// with the paths of the rules that name the app:
//
//   - Ingress Prefix and ImplementationSpecific paths, and HTTPRoute
//     PathPrefix matches, are path prefixes (a trailing slash dropped, as
//     both APIs match by path element: /api/ matches /api), which the
//     routing table matches by whole path element (/api covers /api/x,
//     not /apiary);
//   - an ImplementationSpecific path ending in /* (GKE's) is the prefix
//     before it (/* every path); one with any of *()$[]{}|?+^\ (a regular
//     expression, as ingress-nginx's use-regex, or a glob) is skipped;
//   - Exact paths and matches are taken as prefixes too (/login also
//     covers /login/x at zero, not /login-help: the app answers what it
//     does not serve);
//   - an HTTPRoute rule without matches, a match without a path, and a
//     path of "/" mean every path;
//   - a RegularExpression match is skipped (ebb routes by prefix only);
//   - an Ingress rule without a host, an Ingress's defaultBackend and an
//     HTTPRoute without hostnames match every host, which no app may
//     claim: they are skipped;
//   - a host is lowercased and must be what spec.hosts takes (a DNS name
//     or a wildcard of one leading label, at most 253 bytes); another is
//     skipped, the rest of the AppRoute applied.
//
// What is skipped is said in a Warning event HostsSkipped on the AppRoute
// (once per change of what is skipped, not at every reconcile). At most
// maxHostPaths hosts (sorted) with at most maxPathPrefixes prefixes each
// (sorted) are kept, the rest reported the same way. The hosts then go
// through the routing table's tenancy rules like every other host
// (package routing): another namespace's names and DomainClaims, the
// oldest claim of a host and path, the Conflicted condition.

// Bounds of spec.hostPaths, as the CRD holds them.
const (
	maxHostPaths    = 64
	maxPathPrefixes = 16
	maxHostLength   = 253
)

// hostPattern is spec.hosts' and spec.hostPaths[].host's pattern in the CRD.
var hostPattern = regexp.MustCompile(`^(\*\.)?[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$`)

// hostClaim is one host an Ingress or HTTPRoute routes to the app, on
// path prefixes ("/" for every path).
type hostClaim struct {
	host     string
	prefixes []string
	source   string // Ingress/<name>, HTTPRoute/<name>
}

// appPort is the Service port of an AppRoute's traffic.
type appPort struct {
	service string
	number  int32
	name    string // the Service port's name, which an Ingress backend may give instead
}

// appPortOf is the Service port the AppRoute's traffic takes, or false
// when the route has none.
func appPortOf(svc *corev1.Service, port int32) (appPort, bool) {
	if svc == nil || port == 0 {
		return appPort{}, false
	}
	p := appPort{service: svc.Name, number: port}
	for _, sp := range svc.Spec.Ports {
		if sp.Port == port {
			p.name = sp.Name
		}
	}
	return p, true
}

func (p appPort) ingressBackend(b *networkingv1.IngressBackend) bool {
	if b == nil || b.Service == nil || b.Service.Name != p.service {
		return false
	}
	return b.Service.Port.Number == p.number && p.number != 0 || b.Service.Port.Name != "" && b.Service.Port.Name == p.name
}

// ingressClaims are the hosts ing routes to the app's port, and what it
// skipped.
func ingressClaims(ing *networkingv1.Ingress, p appPort) ([]hostClaim, []string) {
	source := "Ingress/" + ing.Name
	var claims []hostClaim
	var skipped []string
	if p.ingressBackend(ing.Spec.DefaultBackend) {
		skipped = append(skipped, source+": its defaultBackend matches every host, which no app may claim")
	}
	for i, rule := range ing.Spec.Rules {
		if rule.HTTP == nil {
			continue
		}
		var prefixes []string
		for _, path := range rule.HTTP.Paths {
			if !p.ingressBackend(&path.Backend) {
				continue
			}
			pt := networkingv1.PathTypeImplementationSpecific
			if path.PathType != nil {
				pt = *path.PathType
			}
			prefix := path.Path
			if pt == networkingv1.PathTypeImplementationSpecific {
				// GKE's every path (/*) and subtree (/api/*).
				prefix = strings.TrimSuffix(prefix, "/*")
				if strings.ContainsAny(prefix, patternChars) {
					skipped = append(skipped, fmt.Sprintf("%s rule %d: ImplementationSpecific path %q is a pattern (a regular expression or glob), not a path prefix: ebb routes by path prefix only", source, i+1, path.Path))
					continue
				}
			}
			if pt != networkingv1.PathTypeExact {
				prefix = trimSlash(prefix)
			}
			if prefix == "" {
				prefix = "/"
			}
			if !strings.HasPrefix(prefix, "/") {
				skipped = append(skipped, fmt.Sprintf("%s rule %d: path %q does not start with /", source, i+1, path.Path))
				continue
			}
			prefixes = append(prefixes, prefix)
		}
		if len(prefixes) == 0 {
			continue
		}
		if rule.Host == "" {
			skipped = append(skipped, fmt.Sprintf("%s rule %d: no host (it matches every host, which no app may claim)", source, i+1))
			continue
		}
		claims = append(claims, hostClaim{host: rule.Host, prefixes: prefixes, source: source})
	}
	return claims, skipped
}

// httpRouteBackend tells whether ref is the app's Service port in ns.
func (p appPort) httpRouteBackend(ref *gatewayv1.HTTPBackendRef, ns string) bool {
	b := &ref.BackendObjectReference
	if b.Group != nil && *b.Group != "" || b.Kind != nil && *b.Kind != "Service" {
		return false
	}
	if b.Namespace != nil && string(*b.Namespace) != ns || string(b.Name) != p.service {
		return false
	}
	if ref.Weight != nil && *ref.Weight == 0 {
		return false // gets no traffic
	}
	return b.Port != nil && int32(*b.Port) == p.number
}

// httpRouteClaims are the hosts hr routes to the app's port, and what it
// skipped.
func httpRouteClaims(hr *gatewayv1.HTTPRoute, p appPort) ([]hostClaim, []string) {
	source := "HTTPRoute/" + hr.Name
	var prefixes, skipped []string
	for i, rule := range hr.Spec.Rules {
		if !slices.ContainsFunc(rule.BackendRefs, func(ref gatewayv1.HTTPBackendRef) bool { return p.httpRouteBackend(&ref, hr.Namespace) }) {
			continue
		}
		if len(rule.Matches) == 0 {
			prefixes = append(prefixes, "/")
			continue
		}
		for j, m := range rule.Matches {
			if m.Path == nil {
				prefixes = append(prefixes, "/")
				continue
			}
			pt, value := gatewayv1.PathMatchPathPrefix, "/"
			if m.Path.Type != nil {
				pt = *m.Path.Type
			}
			if m.Path.Value != nil {
				value = *m.Path.Value
			}
			switch pt {
			case gatewayv1.PathMatchPathPrefix:
				value = trimSlash(value)
			case gatewayv1.PathMatchExact:
			default:
				skipped = append(skipped, fmt.Sprintf("%s rule %d match %d: a %s path (ebb routes by path prefix only)", source, i+1, j+1, pt))
				continue
			}
			if value == "" {
				value = "/"
			}
			if !strings.HasPrefix(value, "/") {
				skipped = append(skipped, fmt.Sprintf("%s rule %d match %d: path %q does not start with /", source, i+1, j+1, value))
				continue
			}
			prefixes = append(prefixes, value)
		}
	}
	if len(prefixes) == 0 {
		return nil, skipped
	}
	if len(hr.Spec.Hostnames) == 0 {
		return nil, append(skipped, source+": no hostnames (it matches every host its Gateway listeners take, which no app may claim)")
	}
	claims := make([]hostClaim, 0, len(hr.Spec.Hostnames))
	for _, h := range hr.Spec.Hostnames {
		claims = append(claims, hostClaim{host: string(h), prefixes: prefixes, source: source})
	}
	return claims, skipped
}

// patternChars mark an ImplementationSpecific Ingress path as a pattern
// (ingress-nginx's regular expressions, globs), which no request path
// starts with literally.
const patternChars = `*()$[]{}|?+^\`

// trimSlash drops a path's trailing slashes: Ingress Prefix and
// HTTPRoute PathPrefix match by path element, so /api/ matches /api.
func trimSlash(p string) string {
	return strings.TrimRight(p, "/")
}

// hostReport is what the webhook tells of an AppRoute's hosts: where each
// came from (status.hostSources) and what it skipped (the HostsSkipped
// event); and its FallbackReady condition (nil without a fallback).
type hostReport struct {
	sources  []routingv1alpha1.HostSource
	skipped  []string
	fallback *metav1.Condition
}

// mergeHosts makes spec.hostPaths of claims, and the report of every host
// of the route: annotationHosts (spec.hosts, from annotation) and the
// claims' hosts. Hosts are lowercased and checked as the CRD checks them;
// a host's prefixes are merged (every path wins over any prefix); both
// lists are sorted and held to the CRD's bounds.
func mergeHosts(annotationHosts []string, annotation string, claims []hostClaim, skipped []string) ([]routingv1alpha1.HostPaths, hostReport) {
	type merged struct {
		prefixes []string
		every    bool
		sources  []string
	}
	byHost := map[string]*merged{}
	for _, c := range claims {
		h := strings.ToLower(c.host)
		if len(h) > maxHostLength || !hostPattern.MatchString(h) {
			skipped = append(skipped, fmt.Sprintf("%s: host %q is not a DNS name or a wildcard of one leading label", c.source, c.host))
			continue
		}
		m := byHost[h]
		if m == nil {
			m = &merged{}
			byHost[h] = m
		}
		for _, p := range c.prefixes {
			if p == "/" {
				m.every = true
			} else if !slices.Contains(m.prefixes, p) {
				m.prefixes = append(m.prefixes, p)
			}
		}
		if !slices.Contains(m.sources, c.source) {
			m.sources = append(m.sources, c.source)
		}
	}
	hosts := make([]string, 0, len(byHost))
	for h := range byHost {
		hosts = append(hosts, h)
	}
	slices.Sort(hosts)
	if len(hosts) > maxHostPaths {
		skipped = append(skipped, fmt.Sprintf("more than %d hosts from Ingresses and HTTPRoutes: kept the first %d (sorted), not %s",
			maxHostPaths, maxHostPaths, strings.Join(hosts[maxHostPaths:], ", ")))
		hosts = hosts[:maxHostPaths]
	}
	var hostPaths []routingv1alpha1.HostPaths
	from := map[string][]string{}
	for _, h := range hosts {
		m := byHost[h]
		hp := routingv1alpha1.HostPaths{Host: h}
		if !m.every {
			slices.Sort(m.prefixes)
			if len(m.prefixes) > maxPathPrefixes {
				skipped = append(skipped, fmt.Sprintf("host %s: more than %d path prefixes: kept the first %d (sorted), not %s",
					h, maxPathPrefixes, maxPathPrefixes, strings.Join(m.prefixes[maxPathPrefixes:], ", ")))
				m.prefixes = m.prefixes[:maxPathPrefixes]
			}
			hp.PathPrefixes = m.prefixes
		}
		hostPaths = append(hostPaths, hp)
		from[h] = append(from[h], m.sources...)
	}
	for _, h := range annotationHosts {
		from[h] = append(from[h], "annotation "+annotation)
	}
	report := hostReport{skipped: skipped}
	for h, f := range from {
		slices.Sort(f)
		report.sources = append(report.sources, routingv1alpha1.HostSource{Host: h, From: slices.Compact(f)})
	}
	slices.SortFunc(report.sources, func(a, b routingv1alpha1.HostSource) int { return cmp.Compare(a.Host, b.Host) })
	return hostPaths, report
}

// hostPaths reads the Ingresses and HTTPRoutes of ns (from the manager's
// cache) for the hosts they route to the app's Service svc on port.
func (r *routes) hostPaths(ctx context.Context, ns string, svc *corev1.Service, port int32) ([]hostClaim, []string, error) {
	p, ok := appPortOf(svc, port)
	if !ok {
		return nil, nil, nil
	}
	var claims []hostClaim
	var skipped []string
	var ings networkingv1.IngressList
	if err := r.client.List(ctx, &ings, client.InNamespace(ns), client.UnsafeDisableDeepCopy); err != nil { // read only
		return nil, nil, fmt.Errorf("list Ingresses in %s: %w", ns, err)
	}
	for i := range ings.Items {
		c, s := ingressClaims(&ings.Items[i], p)
		claims, skipped = append(claims, c...), append(skipped, s...)
	}
	err := r.gateway.read(ctx, func() error {
		var hrs gatewayv1.HTTPRouteList
		if err := r.client.List(ctx, &hrs, client.InNamespace(ns), client.UnsafeDisableDeepCopy); err != nil { // read only
			return fmt.Errorf("list HTTPRoutes in %s: %w", ns, err)
		}
		for i := range hrs.Items {
			c, s := httpRouteClaims(&hrs.Items[i], p)
			claims, skipped = append(claims, c...), append(skipped, s...)
		}
		return nil
	})
	if err != nil {
		return nil, nil, err
	}
	return claims, skipped, nil
}

// ingressServices are the Services an Ingress's backends name.
func ingressServices(ing *networkingv1.Ingress) []string {
	var out []string
	add := func(b *networkingv1.IngressBackend) {
		if b != nil && b.Service != nil && !slices.Contains(out, b.Service.Name) {
			out = append(out, b.Service.Name)
		}
	}
	add(ing.Spec.DefaultBackend)
	for _, rule := range ing.Spec.Rules {
		if rule.HTTP == nil {
			continue
		}
		for i := range rule.HTTP.Paths {
			add(&rule.HTTP.Paths[i].Backend)
		}
	}
	return out
}

// httpRouteServices are the Services of its own namespace an HTTPRoute's
// backendRefs name.
func httpRouteServices(hr *gatewayv1.HTTPRoute) []string {
	var out []string
	for _, rule := range hr.Spec.Rules {
		for _, ref := range rule.BackendRefs {
			b := ref.BackendObjectReference
			if b.Group != nil && *b.Group != "" || b.Kind != nil && *b.Kind != "Service" || b.Namespace != nil && string(*b.Namespace) != hr.Namespace {
				continue
			}
			if !slices.Contains(out, string(b.Name)) {
				out = append(out, string(b.Name))
			}
		}
	}
	return out
}
