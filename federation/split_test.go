package federation

import (
	"math/rand/v2"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

const window = 15 * time.Second

func share(name string, min, max int32) Member {
	return Member{Name: name, Weight: 1, Reachable: true, Min: min, Max: max, HasShare: true}
}

func TestSplit(t *testing.T) {
	fresh := func(name string, w int32) Member { return Member{Name: name, Weight: w, Reachable: true} }
	atMax := func(m Member, d time.Duration) Member { m.AtMaxFor, m.Used = d, m.Max; return m }
	used := func(m Member, u int32) Member { m.Used = u; return m }
	down := func(m Member) Member { m.Reachable = false; return m }
	unread := func(m Member) Member { m.Unread = true; return m }
	capped := func(m Member, c int32) Member { m.Cap = c; return m }
	for _, tc := range []struct {
		name     string
		min, max int32
		members  []Member
		want     []Share
		moved    bool
	}{
		{"first split, min 0: every min 0, max by weight", 0, 6,
			[]Member{fresh("a", 1), fresh("b", 1)}, []Share{{"a", 0, 3}, {"b", 0, 3}}, false},
		{"first split by weight", 2, 8,
			[]Member{fresh("a", 3), fresh("b", 1)}, []Share{{"a", 1, 6}, {"b", 1, 2}}, false},
		{"a min smaller than the members: the heaviest carry it, one each", 1, 6,
			[]Member{fresh("a", 1), fresh("b", 2), fresh("c", 1)}, []Share{{"a", 0, 2}, {"b", 1, 3}, {"c", 0, 1}}, false},
		{"a cap sends the rest to the others", 0, 10,
			[]Member{capped(fresh("a", 1), 2), fresh("b", 1)}, []Share{{"a", 0, 2}, {"b", 0, 8}}, false},
		{"steady: nothing moves", 0, 6,
			[]Member{used(share("a", 0, 3), 2), share("b", 0, 3)}, []Share{{"a", 0, 3}, {"b", 0, 3}}, false},
		{"at max for the window: the idle member's headroom moves, it keeps 1", 0, 6,
			[]Member{atMax(share("a", 0, 3), window), share("b", 0, 3)}, []Share{{"a", 0, 5}, {"b", 0, 1}}, true},
		{"at max for less than the window: nothing moves yet", 0, 6,
			[]Member{atMax(share("a", 0, 3), window-time.Second), share("b", 0, 3)}, []Share{{"a", 0, 3}, {"b", 0, 3}}, false},
		{"a donor keeps what it used within the window", 0, 8,
			[]Member{atMax(share("a", 0, 4), time.Minute), used(share("b", 0, 4), 3)}, []Share{{"a", 0, 5}, {"b", 0, 3}}, true},
		{"a donor keeps its min", 2, 6,
			[]Member{atMax(share("a", 1, 3), time.Minute), share("b", 1, 3)}, []Share{{"a", 1, 5}, {"b", 1, 1}}, true},
		{"both at max: nothing moves", 0, 6,
			[]Member{atMax(share("a", 0, 3), time.Minute), atMax(share("b", 0, 3), time.Minute)}, []Share{{"a", 0, 3}, {"b", 0, 3}}, false},
		{"two at max share the spare", 0, 9,
			[]Member{atMax(share("a", 0, 3), time.Minute), atMax(share("b", 0, 3), time.Minute), share("c", 0, 3)}, []Share{{"a", 0, 4}, {"b", 0, 4}, {"c", 0, 1}}, true},
		{"a receiver at its cap gets nothing", 0, 6,
			[]Member{capped(atMax(share("a", 0, 3), time.Minute), 3), share("b", 0, 3)}, []Share{{"a", 0, 3}, {"b", 0, 3}}, false},
		{"unreachable: its min goes to the others, its max stays counted", 2, 6,
			[]Member{share("a", 1, 3), down(share("b", 1, 3))}, []Share{{"a", 2, 3}, {"b", 1, 3}}, false},
		{"back: min shared again", 2, 6,
			[]Member{share("a", 2, 3), share("b", 1, 3)}, []Share{{"a", 1, 3}, {"b", 1, 3}}, false},
		{"a member whose read failed this round gives no headroom", 0, 6,
			[]Member{atMax(share("a", 0, 3), time.Minute), unread(share("b", 0, 3))}, []Share{{"a", 0, 3}, {"b", 0, 3}}, false},
		{"a member whose read failed this round gets none", 0, 6,
			[]Member{unread(atMax(share("a", 0, 3), time.Minute)), share("b", 0, 3)}, []Share{{"a", 0, 3}, {"b", 0, 3}}, false},
		{"an unreachable member gives no headroom", 0, 6,
			[]Member{atMax(share("a", 0, 3), time.Minute), down(share("b", 0, 3))}, []Share{{"a", 0, 3}, {"b", 0, 3}}, false},
		{"a min above the max takes headroom from a member that does not use it", 4, 6,
			[]Member{share("a", 1, 1), down(share("b", 2, 2)), share("c", 1, 3)}, []Share{{"a", 2, 2}, {"b", 2, 2}, {"c", 2, 2}}, true},
		{"the global max changed: split again", 0, 4,
			[]Member{share("a", 0, 5), share("b", 0, 1)}, []Share{{"a", 0, 2}, {"b", 0, 2}}, false},
		{"a floor raises a member's min", 0, 6,
			[]Member{{Name: "a", Weight: 1, Floor: 1, Reachable: true}, fresh("b", 1)}, []Share{{"a", 1, 3}, {"b", 0, 3}}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d := Split(tc.min, tc.max, tc.members, window)
			if diff := cmp.Diff(tc.want, d.Shares); diff != "" {
				t.Errorf("shares (-want +got):\n%s", diff)
			}
			if (d.Moved != "") != tc.moved {
				t.Errorf("moved %q, want a move: %v", d.Moved, tc.moved)
			}
		})
	}
}

// TestSplitInvariants: over random members and observations, the maxima
// add up to the global max (never more), every max is at least 1, every
// reachable member's min is within its max, and the reachable members'
// minima carry the global min as far as their maxima allow.
func TestSplitInvariants(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for range 20000 {
		n := 1 + r.IntN(4)
		gmax := int32(n + r.IntN(12))
		gmin := int32(r.IntN(int(gmax) + 1))
		ms := make([]Member, n)
		for i := range ms {
			ms[i] = Member{Name: string(rune('a' + i)), Weight: int32(1 + r.IntN(3)), Reachable: r.IntN(5) > 0}
		}
		for round := range 6 {
			d := Split(gmin, gmax, ms, window)
			var sumMax, sumMin int32
			for i, s := range d.Shares {
				if s.Max < 1 {
					t.Fatalf("round %d: %s max %d < 1: %+v", round, s.Name, s.Max, d.Shares)
				}
				sumMax += s.Max
				if ms[i].Reachable {
					if s.Min > s.Max {
						t.Fatalf("round %d: %s min %d > max %d", round, s.Name, s.Min, s.Max)
					}
					sumMin += s.Min
				}
			}
			if sumMax != gmax {
				t.Fatalf("round %d: maxima add up to %d, global max %d: %+v", round, sumMax, gmax, d.Shares)
			}
			anyReachable := false
			for _, m := range ms {
				anyReachable = anyReachable || m.Reachable
			}
			if anyReachable && sumMin < gmin {
				// Only when the reachable maxima cannot hold it.
				var room int32
				for i, s := range d.Shares {
					if ms[i].Reachable {
						room += s.Max
					}
				}
				if sumMin < min(gmin, room) {
					t.Fatalf("round %d: reachable minima %d carry less than min(%d, %d): %+v (reachable %v)", round, sumMin, gmin, room, d.Shares, ms)
				}
			}
			// Observe: the members use some of their share, some sit at
			// their max, one may come or go.
			for i, s := range d.Shares {
				ms[i].Min, ms[i].Max, ms[i].HasShare = s.Min, s.Max, true
				ms[i].Used = int32(r.IntN(int(s.Max) + 1))
				ms[i].AtMaxFor = 0
				if ms[i].Used == s.Max && r.IntN(2) == 0 {
					ms[i].AtMaxFor = time.Minute
				}
				if r.IntN(10) == 0 {
					ms[i].Reachable = !ms[i].Reachable
				}
			}
		}
	}
}

// TestSplitDoesNotFlap: the same observations twice move nothing the second
// time: a member that received headroom is no longer at its max, and the
// donor kept what it used.
func TestSplitDoesNotFlap(t *testing.T) {
	ms := []Member{{Name: "a", Weight: 1, Reachable: true, Min: 0, Max: 3, HasShare: true, Used: 3, AtMaxFor: time.Minute},
		{Name: "b", Weight: 1, Reachable: true, Min: 0, Max: 3, HasShare: true, Used: 1}}
	d := Split(0, 6, ms, window)
	if d.Moved == "" {
		t.Fatal("nothing moved toward the member at its max")
	}
	for i, s := range d.Shares {
		ms[i].Min, ms[i].Max = s.Min, s.Max
	}
	ms[0].AtMaxFor, ms[0].Used = 0, 4 // it scaled to 4 of its new 5
	for range 10 {
		if d := Split(0, 6, ms, window); d.Moved != "" {
			t.Fatalf("moved again on the same picture: %s", d.Moved)
		}
	}
}
