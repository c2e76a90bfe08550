package scaler

import (
	"fmt"
	"sort"
	"time"
)

// wakesIndex indexes the AppRoute cache by the apps each route's
// spec.wakes names ("namespace/name"), so an app's dependents — the apps
// that need it — are one index lookup on every ask, not a scan of the
// fleet's routes.
const wakesIndex = "wakes"

func wakesIndexFunc(obj any) ([]string, error) {
	rt, ok := obj.(*route)
	if !ok || len(rt.wakes) == 0 {
		return nil, nil
	}
	out := make([]string, 0, len(rt.wakes))
	for _, d := range rt.wakes {
		out = append(out, d.Namespace+"/"+d.Name)
	}
	return out, nil
}

// dependents returns the apps whose AppRoute's spec.wakes names k, in any
// namespace, sorted.
func (r *routes) dependents(k appKey) []appKey {
	objs, _ := r.inf.GetIndexer().ByIndex(wakesIndex, k.Namespace+"/"+k.Name)
	out := make([]appKey, 0, len(objs))
	for _, o := range objs {
		if rt, ok := o.(*route); ok {
			out = append(out, appKey{Namespace: rt.Namespace, Name: rt.Name})
		}
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].Namespace != out[j].Namespace {
			return out[i].Namespace < out[j].Namespace
		}
		return out[i].Name < out[j].Name
	})
	return out
}

// wakesClosure returns the apps k wakes, directly or through the apps it
// wakes (not k itself unless a cycle leads back to it).
func (r *routes) wakesClosure(k appKey) map[appKey]bool {
	seen := map[appKey]bool{}
	next := []appKey{k}
	for len(next) > 0 {
		rt := r.get(next[len(next)-1])
		next = next[:len(next)-1]
		if rt == nil {
			continue
		}
		for _, d := range rt.wakes {
			if !seen[d] {
				seen[d] = true
				next = append(next, d)
			}
		}
	}
	return seen
}

// keep is what keeps an app up for the apps that need it: the first of
// its dependents (sorted) that has a live pod, how many, and how many
// other dependents have one too. The zero keep keeps nothing up.
type keep struct {
	by     appKey
	live   int
	others int
}

func (k keep) message() string {
	pods := "1 live pod"
	if k.live != 1 {
		pods = fmt.Sprintf("%d live pods", k.live)
	}
	msg := fmt.Sprintf("kept up by %s/%s, which needs it (%s)", k.by.Namespace, k.by.Name, pods)
	if k.others > 0 {
		msg += fmt.Sprintf(", and by %d other app(s) that need it", k.others)
	}
	return msg + ": it may scale to zero once no app whose wakes name it has a live pod."
}

// keptUp tells whether an app is to stay active because an app that needs
// it (its AppRoute's spec.wakes names it, in any namespace) has a live pod.
// Direct dependents suffice: an app kept up keeps its own pods, which
// keep the apps it needs up in turn, so a chain stays up while its head
// does and goes to zero in reverse order after it, each link after its
// own rate window and cooldown once the one above has no live pod left.
//
// A dependent that k itself wakes (a cycle, which admission refuses but an
// edit of two RoutePolicies one after the other could leave) does not
// count: two apps would otherwise keep each other up for good.
//
// It reads the AppRoute cache and the registry: an ask costs the API
// server nothing.
func (s *Scaler) keptUp(k appKey) keep {
	if s.appRoutes == nil || !s.appRoutes.synced() {
		return keep{}
	}
	var out keep
	var closure map[appKey]bool
	for _, d := range s.appRoutes.dependents(k) {
		n := s.reg.livePods(d)
		if n == 0 {
			continue
		}
		if closure == nil {
			closure = s.appRoutes.wakesClosure(k)
		}
		if closure[d] {
			continue
		}
		if out.live == 0 {
			out.by, out.live = d, n
		} else {
			out.others++
		}
	}
	return out
}

// figuresOf returns the figures of p's app with what keeps it up besides
// its own requests (figures.kept, figures.trigger).
func (s *Scaler) figuresOf(p params, now time.Time) figures {
	var f figures
	if a := s.reg.lookup(p.app); a != nil {
		f = a.figures(now, p.window)
	}
	s.addKeeps(&f, p)
	return f
}

func (s *Scaler) addKeeps(f *figures, p params) {
	f.kept = s.keptUp(p.app)
	f.trigger = s.scaledObjs.otherTrigger(p)
}
