package federation

import (
	"fmt"
	"sort"
	"strings"
	"time"
)

// Member is one member cluster as the split sees it.
type Member struct {
	Name   string
	Weight int32 // ≥ 1
	Floor  int32 // the least its min share may be (spec.clusters[].minReplicas)
	Cap    int32 // the most its max share may be; 0: no cap

	// Reachable: the member was read within the unreachable window. An
	// unreachable member keeps its last share: it scales locally up to its
	// last max, so that max stays counted against the global max, and the
	// others carry its share of the global min.
	Reachable bool
	// Unread: this round's read failed (the member is still within its
	// unreachable window). Its max cannot be written now, so it neither
	// gives nor gets headroom: lowering it unwritten while raising
	// another would exceed the global max.
	Unread bool
	// Min and Max are the member's share now; HasShare is false before the
	// controller first gave it one.
	Min, Max int32
	HasShare bool
	// Used is the most replicas the member's autoscaler wanted and could
	// place within the stabilization window.
	Used int32
	// AtMaxFor is how long the member's autoscaler has wanted more than
	// its max (0: it does not).
	AtMaxFor time.Duration
}

// Share is a member's min and max.
type Share struct {
	Name     string
	Min, Max int32
}

// Decision is what Split decided: every member's share, in the order of
// the members given, and what moved (empty when nothing did).
type Decision struct {
	Shares []Share
	Moved  string
}

// Split decides every member's share of the global bounds:
//   - max: split by weight once (each member at least 1, within its cap),
//     and again whenever the shares no longer add up to the global max
//     (the spec changed); then moved only by rebalancing, so the shares
//     always add up to the global max and never more;
//   - min: split by weight over the reachable members (a member that must
//     carry part of a non-zero global min gets at least 1; with fewer
//     replicas than members, the heaviest get them), within each member's
//     floor; an unreachable member's share goes to the others;
//   - rebalance: a member that has sat at its max for stabilization gets
//     the headroom the others have not used within it (each keeps at least
//     its min, what it used, and 1).
func Split(globalMin, globalMax int32, members []Member, stabilization time.Duration) Decision {
	ms := make([]Member, len(members))
	copy(ms, members)
	if needsMaxSplit(globalMax, ms) {
		maxes := byWeight(globalMax, ms, func(m Member) bool { return true }, true)
		for i := range ms {
			ms[i].Max = maxes[i]
		}
	}
	reachable := func(m Member) bool { return m.Reachable }
	mins := byWeight(globalMin, ms, reachable, false)
	for i := range ms {
		if ms[i].Reachable {
			ms[i].Min = max(mins[i], ms[i].Floor)
		}
	}
	var moved []string
	// A min above its max: headroom from members that do not use theirs,
	// else the min comes down to the max.
	for i := range ms {
		if !ms[i].Reachable || ms[i].Min <= ms[i].Max {
			continue
		}
		need := ms[i].Min - ms[i].Max
		if ms[i].Cap > 0 {
			need = min(need, ms[i].Cap-ms[i].Max)
		}
		if got := take(ms, i, need); got > 0 {
			ms[i].Max += got
			moved = append(moved, fmt.Sprintf("%d to %s to carry its min", got, ms[i].Name))
		}
		ms[i].Min = min(ms[i].Min, ms[i].Max)
	}
	// What a full member could not carry goes to those with room, the
	// heaviest first.
	deficit := globalMin
	for _, m := range ms {
		if m.Reachable {
			deficit -= m.Min
		}
	}
	for deficit > 0 {
		best := -1
		for i, m := range ms {
			if m.Reachable && m.Min < m.Max && (best < 0 || m.Weight > ms[best].Weight) {
				best = i
			}
		}
		if best < 0 {
			break
		}
		ms[best].Min++
		deficit--
	}
	// Rebalance toward members at their max.
	var receivers []int
	for i, m := range ms {
		if m.Reachable && !m.Unread && m.AtMaxFor > 0 && m.AtMaxFor >= stabilization && (m.Cap == 0 || m.Max < m.Cap) {
			receivers = append(receivers, i)
		}
	}
	for _, r := range receivers {
		need := globalMax // as much as the others spare
		if ms[r].Cap > 0 {
			need = ms[r].Cap - ms[r].Max
		}
		// Receivers share what is spare: each takes its part of it.
		need = min(need, (totalSpare(ms)+int32(len(receivers))-1)/int32(len(receivers)))
		if got := take(ms, r, need); got > 0 {
			ms[r].Max += got
			moved = append(moved, fmt.Sprintf("%d to %s (at its max %d for %s)", got, ms[r].Name, ms[r].Max-got, ms[r].AtMaxFor.Round(time.Second)))
		}
	}
	d := Decision{Shares: make([]Share, len(ms)), Moved: strings.Join(moved, "; ")}
	for i, m := range ms {
		d.Shares[i] = Share{Name: m.Name, Min: m.Min, Max: m.Max}
	}
	return d
}

// needsMaxSplit: a member has no share yet, or the shares do not add up to
// the global max (it changed, or members came or went).
func needsMaxSplit(globalMax int32, ms []Member) bool {
	var sum, caps int32
	capped := true
	for _, m := range ms {
		if !m.HasShare {
			return true
		}
		sum += m.Max
		if m.Cap == 0 {
			capped = false
		}
		caps += m.Cap
	}
	if capped && caps < globalMax {
		return sum != caps // every member at its cap is all there is
	}
	return sum != globalMax
}

// spare is what a reachable member not at its max may give: its max above
// its min, what it used, and 1.
func spare(m Member) int32 {
	if !m.Reachable || m.Unread || m.AtMaxFor > 0 {
		return 0
	}
	return max(0, m.Max-max(m.Min, m.Used, 1))
}

func totalSpare(ms []Member) int32 {
	var s int32
	for _, m := range ms {
		s += spare(m)
	}
	return s
}

// take lowers other members' max by up to need in all, the most spare
// first, and returns how much it took.
func take(ms []Member, to int, need int32) int32 {
	donors := make([]int, 0, len(ms))
	for i := range ms {
		if i != to && spare(ms[i]) > 0 {
			donors = append(donors, i)
		}
	}
	sort.SliceStable(donors, func(a, b int) bool { return spare(ms[donors[a]]) > spare(ms[donors[b]]) })
	var got int32
	for _, i := range donors {
		if got >= need {
			break
		}
		n := min(spare(ms[i]), need-got)
		ms[i].Max -= n
		got += n
	}
	return got
}

// byWeight splits total over the members in, by weight (largest
// remainder; ties to the earlier member). With atLeastOne every member in
// gets at least 1 when total allows. Without it, a non-zero total still
// gives each member in at least 1 while replicas last (the heaviest
// first): a member that carries part of a non-zero min carries at least
// one replica. Members not in get 0. Caps bound max splits (atLeastOne),
// the rest going to the others.
func byWeight(total int32, ms []Member, in func(Member) bool, isMax bool) []int32 {
	out := make([]int32, len(ms))
	var idx []int
	for i, m := range ms {
		if in(m) {
			idx = append(idx, i)
		}
	}
	if total <= 0 || len(idx) == 0 {
		return out
	}
	// Heaviest first, then in the members' order.
	sort.SliceStable(idx, func(a, b int) bool { return ms[idx[a]].Weight > ms[idx[b]].Weight })
	if int(total) <= len(idx) {
		for _, i := range idx[:total] {
			out[i] = 1
		}
		return out
	}
	capOf := func(i int) int32 {
		if isMax && ms[i].Cap > 0 {
			return ms[i].Cap
		}
		return total
	}
	for _, i := range idx {
		out[i] = 1
	}
	left := total - int32(len(idx))
	// Hand out the rest one at a time to the member furthest below its
	// weighted part of total: exact largest remainder, caps respected.
	var weights int64
	for _, i := range idx {
		weights += int64(max(ms[i].Weight, 1))
	}
	for ; left > 0; left-- {
		best := -1
		var bestGap float64
		for _, i := range idx {
			if out[i] >= capOf(i) {
				continue
			}
			gap := float64(total)*float64(max(ms[i].Weight, 1))/float64(weights) - float64(out[i])
			if best < 0 || gap > bestGap {
				best, bestGap = i, gap
			}
		}
		if best < 0 {
			break // every member at its cap
		}
		out[best]++
	}
	return out
}
